"""Host and card-memory models around a generated RTL kernel, reusable outside the tests.

The kernel top (rendered from templates/rtl) is driven only through cocotbext-axi models:
`AxiLiteMaster` on `s_axi_control` is the host; card memory is one swappable object built by
`card_memory()` (one read or write model per `m_axi_<port>`, all over one flat backing
`Memory`, as one card's memory is); an `AxiStreamSource` feeds `s_axis_grad` when gradients
come from the network, and an `AxiStreamSink` takes `m_axis_param` (`param`) when the kernel
also sends its updated parameters out (out_sink memory+stream).

Memory modes (design.md 3b):
- "hbm" (hbm_memory.py): every port is attached to the channel of the manifest's
  memory plan, each channel a token bucket of channel bandwidth x memory efficiency /
  (64 B x kernel clock) beats per clock shared by all R and W beats of its ports, read and
  write latency drawn per burst from 100-250 ns at the kernel clock;
- "ideal": no bandwidth limit, a fixed pipelined read latency (`read_latency` clocks): what the
  kernel itself can do.

`memory_reset=False` leaves card memory (and what the protocol monitor expects of it) out of the
kernel's reset, as an interconnect on a reset of its own: bursts asked for before a reset of the
kernel alone are still answered after it.

Usage from any cocotb test (the driver's `rtlsim` backend does the same)::

    tb = KernelTB(dut, manifest=manifest, mem_size=1 << 24, memory="hbm")
    await tb.reset()
    tb.mem.write(0x10000, p_stripe0.tobytes())        # card memory, like a buffer copy
    cycles = await run_kernel(tb, {"p0_rd": 0x10000, "p0_wr": 0x10000, ..., "n": n, ...})

`run_kernel` writes the argument registers, sets ap_start, waits for ap_done by polling the
control register (as XRT does) or for the interrupt pin, and returns the clocks the run took.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Mapping
from typing import Any

import cocotb
import hbm_memory
from axi_monitor import AxiMonitor
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.axi.memory import Memory
from hbm_memory import stall_generator

from hls.regmap import port_errors

CLOCK_NS = 4  # 250 MHz; only the clock count matters
CTRL, GIE, IER, ISR = 0x00, 0x04, 0x08, 0x0C
AP_START, AP_DONE, AP_IDLE, AP_READY = 1, 2, 4, 8
MEMORY_MODES = ("hbm", "ideal")
BEAT_BYTES = 64


def channel_beats_per_clock(manifest: Mapping[str, Any], cu: int = 0) -> dict[int, float]:
    """512-bit beats per kernel clock each memory channel of compute unit `cu` moves (reads and writes
    together): its usable bandwidth in the manifest's sizing (channel bandwidth x the efficiency for
    what it carries: read-only, write-only, or read and written) / (64 B x kernel clock)."""
    sizing = manifest["sizing"]
    beat_rate = BEAT_BYTES * float(sizing["clock_mhz"]) * 1e6
    loads = next(a["loads"] for a in sizing["assignments"] if a["cu"] == cu)
    return {int(c["channel"]): float(c["usable_bytes_per_s"]) / beat_rate for c in loads}


def port_channels(manifest: Mapping[str, Any], cu: int = 0) -> list[tuple[str, int]]:
    """(m_axi port, memory channel) of every port of compute unit `cu`, in register-map order."""
    plan = next(p for p in manifest["memory_plan"] if p["cu"] == cu)
    channel = {port: s["channel"] for s in plan["stripes"] for port in s["ports"]}
    return [(a["name"], channel[a["name"]]) for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]


def card_memory(dut: Any, manifest: Mapping[str, Any], *, mode: str, mem: Memory, read_latency: int,
                seed: int = 1, reset: bool = True) -> hbm_memory.CardMemory:
    """The card memory around `dut`: one model per m_axi port, each on its memory-plan channel.
    With `reset` False it is not reset with the kernel (an interconnect on a reset of its own):
    bursts it was asked for before a kernel reset are still answered after it."""
    if mode not in MEMORY_MODES:
        raise ValueError(f"memory mode {mode!r}; choose one of {', '.join(MEMORY_MODES)}")
    return hbm_memory.card_memory(
        dut, port_channels(manifest), clock=dut.ap_clk, reset=dut.ap_rst_n if reset else None,
        reset_active_level=False, mode=mode,
        beats_per_clock=channel_beats_per_clock(manifest) if mode == "hbm" else None, mem=mem,
        clock_mhz=float(manifest["sizing"]["clock_mhz"]), sim_clock_ns=CLOCK_NS, ideal_latency=read_latency,
        seed=seed,
    )


class KernelTB:
    """Clock, reset, host (AXI4-Lite), card memory (one model per port, one address space), stream."""

    def __init__(
        self,
        dut: Any,
        *,
        manifest: Mapping[str, Any],
        mem_size: int,
        memory: str = "ideal",
        read_latency: int = 0,
        stall_probability: float = 0.0,
        seed: int = 1,
        memory_reset: bool = True,
    ) -> None:
        self.dut = dut
        self.manifest = manifest
        self.regmap = manifest["register_map"]
        self.args = {a["name"]: a for a in self.regmap["args"]}
        self.log = logging.getLogger("cocotb.tb")
        cocotb.start_soon(Clock(dut.ap_clk, CLOCK_NS, unit="ns").start())
        dut.ap_rst_n.value = 0
        self.mem = Memory(size=mem_size)
        self.host = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk, dut.ap_rst_n,
                                  reset_active_level=False)
        self.memory = memory
        self.card = card_memory(dut, manifest, mode=memory, mem=self.mem, read_latency=read_latency, seed=seed,
                                reset=memory_reset)
        self.ports = self.card.ports
        self.monitor = AxiMonitor(dut, list(self.ports), dut.ap_clk, dut.ap_rst_n, interconnect_reset=memory_reset)
        self.stream = None
        if "grad" in self.args and self.args["grad"]["kind"] == "stream":
            self.stream = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_grad"), dut.ap_clk, dut.ap_rst_n,
                                          reset_active_level=False)
        self.param = None
        if "param" in self.args and self.args["param"]["kind"] == "stream":
            self.param = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_param"), dut.ap_clk, dut.ap_rst_n,
                                       reset_active_level=False)
            self.param.log.setLevel(logging.WARNING)
        for logger in ("cocotb.tb", "cocotb.ap_clk"):
            logging.getLogger(logger).setLevel(logging.WARNING)
        for port in (self.host.write_if, self.host.read_if):
            port.log.setLevel(logging.WARNING)
        if self.stream is not None:
            self.stream.log.setLevel(logging.WARNING)
        if stall_probability > 0:
            self.set_stalls(random.Random(seed), stall_probability)

    def set_stalls(self, rng: random.Random, probability: float) -> None:
        """Random ready/valid pauses on every channel of every AXI interface."""
        self.card.set_stalls(random.Random(rng.random()), probability)
        channels = [self.host.write_if.aw_channel, self.host.write_if.w_channel, self.host.write_if.b_channel,
                    self.host.read_if.ar_channel, self.host.read_if.r_channel]
        if self.stream is not None:
            channels.append(self.stream)
        if self.param is not None:
            channels.append(self.param)
        for ch in channels:
            ch.set_pause_generator(stall_generator(random.Random(rng.random()), probability))

    def hang(self) -> None:
        """Fault injection: no memory port takes an address any more, so the kernel never finishes."""
        for port in self.ports.values():
            for side, name in ((port.read_if, "ar_channel"), (port.write_if, "aw_channel")):
                if side is not None:
                    getattr(side, name).set_pause_generator(itertools.repeat(True))

    async def reset(self) -> None:
        self.dut.ap_rst_n.value = 0
        await ClockCycles(self.dut.ap_clk, 8)
        self.dut.ap_rst_n.value = 1
        await ClockCycles(self.dut.ap_clk, 4)
        self.card.start()

    async def read_reg(self, offset: int) -> int:
        return int.from_bytes((await self.host.read(offset, 4)).data, "little")

    async def write_reg(self, offset: int, value: int) -> None:
        await self.host.write(offset, int(value & 0xFFFFFFFF).to_bytes(4, "little"))

    async def read_status(self) -> int:
        """The sticky STATUS word of the last run (manifest register_map.status)."""
        return await self.read_reg(self.regmap["status"]["offset"])

    async def read_port_errors(self) -> list[str]:
        """The m_axi ports whose PORT_ERR bit is set (a response error in the last run)."""
        per_port = self.regmap["status"]["port_errors"]
        words = [await self.read_reg(offset) for offset in per_port["offsets"]]
        return port_errors(per_port["ports"], words)

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

    def send_stream_beats(self, beats: list[tuple[bytes, int]]) -> None:
        """Queue one shard beat by beat: each (up to 64 data bytes, TKEEP as a 64-bit mask), TLAST
        on the last; a mask of 0 is a null beat."""
        if self.stream is None:
            raise RuntimeError("this kernel reads gradients from memory, not from a stream")
        data, keep = bytearray(), []
        for raw, mask in beats:
            data += raw.ljust(BEAT_BYTES, b"\0")[:BEAT_BYTES]
            keep += [mask >> lane & 1 for lane in range(BEAT_BYTES)]
        if data:
            self.stream.send_nowait(AxiStreamFrame(bytes(data), tkeep=keep))


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
    tb.monitor.check_idle()
    assert not tb.monitor.errors, "AXI4 protocol monitor: " + "; ".join(tb.monitor.errors)
    if use_interrupt:
        await tb.write_reg(ISR, await tb.read_reg(ISR))
        await tb.read_reg(CTRL)  # clears ap_done
    return cycles
