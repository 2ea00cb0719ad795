"""Host and card-memory models around a generated RTL kernel, reusable outside the tests.

The kernel top (rendered from templates/rtl) is driven only through cocotbext-axi models:
`AxiLiteMaster` on `s_axi_control` is the host, one `AxiRam` per `m_axi_<arg>` port is the card
memory (all of them share one flat address space, as one card's memory is; the read side with
a pipelined latency, `LatencyAxiRamRead` from hbm_memory.py, which also models HBM channel
bandwidth for the striped kernels), and an
`AxiStreamSource` feeds `s_axis_grad` when gradients come from the network.

Usage from any cocotb test (the driver's `rtlsim` backend does the same)::

    tb = KernelTB(dut, regmap=manifest["register_map"], mem_size=1 << 24, read_latency=64)
    await tb.reset()
    tb.mem.write(0x10000, p.tobytes())                 # card memory, like a buffer copy
    cycles = await run_kernel(tb, {"p": 0x10000, ..., "n": n, "b1": 0x3F666666, ...})
    p_new = np.frombuffer(tb.mem.read(0x10000, 4 * n), np.float32)

`run_kernel` writes the argument registers, sets ap_start, waits for ap_done by polling the
control register (as XRT does) or for the interrupt pin, and returns the clocks the run took.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import (
    AxiBus,
    AxiLiteBus,
    AxiLiteMaster,
    AxiStreamBus,
    AxiStreamFrame,
    AxiStreamSource,
)
from cocotbext.axi.axi_ram import AxiRamWrite
from cocotbext.axi.memory import Memory
from hbm_memory import LatencyAxiRamRead, stall_generator

CLOCK_NS = 4  # 250 MHz; only the clock count matters
CTRL, GIE, IER, ISR = 0x00, 0x04, 0x08, 0x0C
AP_START, AP_DONE, AP_IDLE, AP_READY = 1, 2, 4, 8


class KernelTB:
    """Clock, reset, host (AXI4-Lite), card memory (AxiRam per port, one address space), stream."""

    def __init__(
        self,
        dut: Any,
        *,
        regmap: Mapping[str, Any],
        mem_size: int,
        read_latency: int = 0,
        stall_probability: float = 0.0,
        seed: int = 1,
    ) -> None:
        self.dut = dut
        self.regmap = regmap
        self.args = {a["name"]: a for a in regmap["args"]}
        self.log = logging.getLogger("cocotb.tb")
        cocotb.start_soon(Clock(dut.ap_clk, CLOCK_NS, unit="ns").start())
        dut.ap_rst_n.value = 0
        self.mem = Memory(size=mem_size)
        self.host = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk, dut.ap_rst_n,
                                  reset_active_level=False)
        self.ports: dict[str, tuple[AxiRamWrite, LatencyAxiRamRead]] = {}
        for name, arg in self.args.items():
            if arg["kind"] != "pointer":
                continue
            bus = AxiBus.from_prefix(dut, f"m_axi_{name}")
            wr = AxiRamWrite(bus.write, dut.ap_clk, dut.ap_rst_n, reset_active_level=False, size=mem_size,
                             mem=self.mem.mem)
            rd = LatencyAxiRamRead(bus.read, dut.ap_clk, dut.ap_rst_n, reset_active_level=False, size=mem_size,
                                   mem=self.mem.mem, latency=read_latency)
            self.ports[name] = (wr, rd)
        self.stream = None
        if "grad" in self.args and self.args["grad"]["kind"] == "stream":
            self.stream = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_grad"), dut.ap_clk, dut.ap_rst_n,
                                          reset_active_level=False)
        for logger in ("cocotb.tb", "cocotb.ap_clk"):
            logging.getLogger(logger).setLevel(logging.WARNING)
        for port in (*[p for pair in self.ports.values() for p in pair], self.host.write_if, self.host.read_if):
            port.log.setLevel(logging.WARNING)
        if self.stream is not None:
            self.stream.log.setLevel(logging.WARNING)
        if stall_probability > 0:
            self.set_stalls(random.Random(seed), stall_probability)

    def set_stalls(self, rng: random.Random, probability: float) -> None:
        """Random ready/valid pauses on every channel of every AXI interface."""
        channels = []
        for wr, rd in self.ports.values():
            channels += [wr.aw_channel, wr.w_channel, wr.b_channel, rd.ar_channel, rd.r_channel]
        channels += [self.host.write_if.aw_channel, self.host.write_if.w_channel, self.host.write_if.b_channel,
                     self.host.read_if.ar_channel, self.host.read_if.r_channel]
        if self.stream is not None:
            channels.append(self.stream)
        for ch in channels:
            ch.set_pause_generator(stall_generator(random.Random(rng.random()), probability))

    async def reset(self) -> None:
        self.dut.ap_rst_n.value = 0
        await ClockCycles(self.dut.ap_clk, 8)
        self.dut.ap_rst_n.value = 1
        await ClockCycles(self.dut.ap_clk, 4)

    async def read_reg(self, offset: int) -> int:
        return int.from_bytes((await self.host.read(offset, 4)).data, "little")

    async def write_reg(self, offset: int, value: int) -> None:
        await self.host.write(offset, int(value & 0xFFFFFFFF).to_bytes(4, "little"))

    async def write_args(self, regs: Mapping[str, int]) -> None:
        """Argument registers by name: pointers take two words, scalars one (manifest offsets)."""
        for name, value in regs.items():
            arg = self.args[name]
            if arg["kind"] == "pointer":
                await self.write_reg(arg["offset"], value & 0xFFFFFFFF)
                await self.write_reg(arg["offset"] + 4, (value >> 32) & 0xFFFFFFFF)
            elif arg["kind"] == "scalar":
                await self.write_reg(arg["offset"], value)
            else:
                raise KeyError(f"{name} is a stream, not a register")

    async def read_arg(self, name: str) -> int:
        arg = self.args[name]
        low = await self.read_reg(arg["offset"])
        if arg["kind"] == "pointer":
            return low | (await self.read_reg(arg["offset"] + 4)) << 32
        return low

    def send_stream(self, data: bytes) -> None:
        """Queue one gradient shard on s_axis_grad (TLAST on its last beat); empty sends nothing."""
        if self.stream is None:
            raise RuntimeError("this kernel reads gradients from memory, not from a stream")
        if data:
            self.stream.send_nowait(AxiStreamFrame(data))


async def wait_done(tb: KernelTB, *, timeout_cycles: int, use_interrupt: bool = False) -> None:
    """Poll ap_done (which clears it, as XRT's wait does), or wait for the interrupt pin."""
    clk = tb.dut.ap_clk
    if use_interrupt:
        for _ in range(timeout_cycles):
            await RisingEdge(clk)
            if int(tb.dut.interrupt.value):
                return
        raise TimeoutError(f"no interrupt within {timeout_cycles} clocks")
    start = get_sim_time("ns")
    while True:
        if await tb.read_reg(CTRL) & AP_DONE:
            return
        if (get_sim_time("ns") - start) / CLOCK_NS > timeout_cycles:
            raise TimeoutError(f"ap_done not seen within {timeout_cycles} clocks")
        await ClockCycles(clk, 16)


async def run_kernel(
    tb: KernelTB,
    regs: Mapping[str, int],
    *,
    timeout_cycles: int = 10_000_000,
    use_interrupt: bool = False,
) -> int:
    """Write `regs` (argument name -> value), start the kernel, wait for done; returns clocks.

    The clock count runs from the clock ap_start is written to the clock done is seen (a few
    clocks of AXI4-Lite polling included). With `use_interrupt` the caller must have set GIE
    and IER; the ISR done bit is cleared (toggled) before returning.
    """
    await tb.write_args(regs)
    t0 = get_sim_time("ns")
    await tb.write_reg(CTRL, AP_START)
    await wait_done(tb, timeout_cycles=timeout_cycles, use_interrupt=use_interrupt)
    cycles = round((get_sim_time("ns") - t0) / CLOCK_NS)
    if use_interrupt:
        await tb.write_reg(ISR, await tb.read_reg(ISR))
        await tb.read_reg(CTRL)  # clears ap_done
    return cycles
