"""cocotb benchmark of onic_net_kernel (`optimusnic bench rtlnet`): ONE RTL card on a ring of
software peers through the seeded switch of sim/tb/models, at 300 MHz against 100 Gb/s links,
timed per beat on the card's MAC streams.

One simulation runs one ring step of one case (the environment's ONIC_BENCH, JSON: n, rank,
payload, size (elements per chunk), wire / param dtype, drop, seed, rto_s, window, latency_s)
and writes its figures as JSON to ONIC_BENCH_OUT:

- every frame's first beat at s_axis_mac0 (in) and m_axis_mac0 (out, at the handshake) with its
  clock and ring header (opcode, hop, chunk, sequence number, offset, length); every frame the
  MAC transmit adapter put on the line (the clock of its last beat, its bytes with FCS) and every
  frame the receive adapter got off the line (its last bit's arrival): `optimusnic.bench.rtlnet`
  rebuilds the line schedule from them (the adapters' own serialization rule);
- the step: the host's ap_start write to the RTL card's ap_done (the interrupt) and to each
  peer's done, in clocks of the kernel clock and in picoseconds;
- the RTL card's counters, the switch's counters, the transmit adapter's underflow and
  back-pressure counts, the receive adapter's overruns;
- bit-exactness: the reduced chunk the card handed its (stand-in) Adam kernel against
  `ring.reduce_scatter(...)[rank]`, the gathered buffer in card memory and every peer's gathered
  vector against a lossless reference ring (a NaN equal to any NaN, as test_onic_net_kernel).
  A mismatch is recorded (`exact: false` and where), not raised: the bench reports it.

The Adam kernel beside the card is test_onic_net_kernel's reference STAND-IN on the streams
(`reference_adam_streams`: the reduced chunk collected, ReferenceKernel's update replayed on
s_axis_param0), here without random stalls; card memory is cocotbext-axi RAM with 5..40 clocks
of read latency and no channel pauses; the AXI protocol monitor watches both m_axi ports.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import cocotb
import numpy as np
import test_onic_net_kernel as kt
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from eth_port import RxAdapter, TxAdapter
from eth_switch import EthSwitch, PortFaults, SwitchConfig
from soft_peer import SoftPeer

from hls.golden import Hyper
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel

CLOCK_PS = 3334  # 299.94 MHz: the kernel clock (an even number of picoseconds for a 50 % duty cycle)


class TimedTx(TxAdapter):
    """The MAC transmit adapter, also logging each frame it puts on the line: (ps of its last beat, bytes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.line_log: list[tuple[int, int]] = []
        super().__init__(*args, **kwargs)

    def _send(self, frame: bytes, aborted: bool) -> None:
        self.line_log.append((int(get_sim_time("ps")), max(len(frame), 60) + 4))
        super()._send(frame, aborted)


class TimedRx(RxAdapter):
    """The MAC receive adapter, also logging each frame the switch delivers: (ps of its last bit, bytes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.line_log: list[tuple[int, int]] = []
        super().__init__(*args, **kwargs)

    def deliver(self, frame: bytes) -> None:
        self.line_log.append((int(get_sim_time("ps")), len(frame)))
        super().deliver(frame)


def header_fields(first_beat: int) -> list[int]:
    """[opcode, flags, hop, chunk, seq, offset, length] of a frame's 64-byte first beat (design.md 8.2)."""
    b = first_beat.to_bytes(64, "little")
    return [b[42] & 0xF, b[43] & 0x3F, b[47], int.from_bytes(b[48:50], "big"), int.from_bytes(b[54:58], "big"),
            int.from_bytes(b[58:62], "big"), int.from_bytes(b[62:64], "big")]


class BeatMonitor:
    """Every frame's first beat on the card's MAC streams, with its clock; the first clock each of
    `interrupts` (name -> signal; the network kernel's own by default) is high, in `done`."""

    def __init__(self, dut: Any, interrupts: dict[str, Any] | None = None) -> None:
        self.dut = dut
        self.cycle = 0
        self.frames_in: list[list[int]] = []   # [clock, *header_fields]
        self.frames_out: list[list[int]] = []
        self.interrupts = interrupts if interrupts is not None else {"net": dut.interrupt}
        self.done: dict[str, int] = {}
        cocotb.start_soon(self._run())

    @property
    def all_done(self) -> bool:
        return len(self.done) == len(self.interrupts)

    async def _run(self) -> None:
        d = self.dut
        in_frame = out_frame = False
        while True:
            await RisingEdge(d.ap_clk)
            self.cycle += 1
            if int(d.s_axis_mac0_tvalid.value):
                if not in_frame:
                    self.frames_in.append([self.cycle, *header_fields(int(d.s_axis_mac0_tdata.value))])
                in_frame = not int(d.s_axis_mac0_tlast.value)
            if int(d.m_axis_mac0_tvalid.value) and int(d.m_axis_mac0_tready.value):
                if not out_frame:
                    self.frames_out.append([self.cycle, *header_fields(int(d.m_axis_mac0_tdata.value))])
                out_frame = not int(d.m_axis_mac0_tlast.value)
            for name, irq in self.interrupts.items():
                if name not in self.done and int(irq.value):
                    self.done[name] = self.cycle


@cocotb.test()
async def bench_ring(dut: Any) -> None:
    """One ring step of the ONIC_BENCH case, timed; figures to ONIC_BENCH_OUT (see the module docstring)."""
    case = json.loads(os.environ["ONIC_BENCH"])
    n, r, payload, size = int(case["n"]), int(case["rank"]), int(case["payload"]), int(case["size"])
    wdt, pdt, seed = case.get("wire_dtype", "fp32"), case.get("param_dtype", "fp32"), int(case.get("seed", 1))
    window = int(case.get("window", 32))
    rto_s = float(case.get("rto_s", 20e-6))
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    wb, pb = kt.chunk_beats(size, wdt), kt.chunk_beats(size, pdt)
    lgrad_addr, gather_addr = 0x40000, 0x40000 + n * wb * kt.BEAT + 0x10000
    kt.MEM_BYTES = 1 << max(20, (gather_addr + n * pb * kt.BEAT).bit_length())  # TB sizes its RAM from it
    kt.WINDOW = window  # program() writes the RTL card's window and credit from it

    cocotb.start_soon(Clock(dut.ap_clk, CLOCK_PS, unit="ps").start())
    tb = kt.TB(dut, rng, 0.0, macs=False)
    tb.param.idle = 0.0
    for channel in (tb.rd.ar_channel, tb.rd.r_channel, tb.wr.aw_channel, tb.wr.w_channel):
        channel.set_pause_generator(None)
    mon = BeatMonitor(dut)
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 6)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 4)

    eps = kt.endpoints(n)
    faults = PortFaults(drop=float(case.get("drop", 0.0)), seed=seed)
    switch = EthSwitch(SwitchConfig(ports=n, table={e.mac: k for k, e in enumerate(eps)}, flood=False,
                                    faults=faults, latency_s=float(case.get("latency_s", 500e-9))))
    switch.start()
    # A CMAC streams a frame onto the line as its beats come; this adapter starts it once its last
    # beat is in, so its FIFO holds a whole frame besides the one on the line: the card is never
    # held back for a frame that a cut-through MAC would already be sending.
    frame_bytes = 64 + payload + 4
    tx = TimedTx(dut, "m_axis_mac0", dut.ap_clk, switch, r, fifo_bytes=2 * frame_bytes)
    rx = TimedRx(dut, "s_axis_mac0", dut.ap_clk, switch, r)

    length = n * size - int(nrng.integers(0, 16))
    assert ring.chunk_elems(length, n) == size, (length, n, size)
    params = (nrng.standard_normal(length) * 0.1).astype(np.float32)
    grads = [kt.local_gradient(nrng, length, wdt) for _ in range(n)]
    step = 5
    ref = kt.reference(n, length, params, grads, wdt, pdt, payload, step)
    want_reduced = ring.reduce_scatter(grads, wdt)[r]
    local = ring.pad(grads[r], n)
    for c in range(n):
        chunk = local[c * size:(c + 1) * size].tobytes()
        tb.rd.write(lgrad_addr + c * wb * kt.BEAT, chunk.ljust(wb * kt.BEAT, b"\x5a"))
    fill = bytes([0xA5]) * (n * pb * kt.BEAT)
    tb.rd.write(gather_addr, fill)

    peers: dict[int, SoftPeer] = {}
    for k in range(n):
        if k == r:
            continue
        kernel = ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype=pdt,
                         ag_release=True, payload_bytes=payload, window=window, slots=window, rto=rto_s, fcs=True)
        peers[k] = SoftPeer(Card(cfg, kernel), switch, k)
        peers[k].start()
    own_kernel = ReferenceKernel(ring.Shard.from_params(params, r, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
    got: dict[str, Any] = {}
    scale = ring.step_grad_scale(None, n, grad_scale=1.0)
    assert scale is not None
    kernel_task = cocotb.start_soon(kt.reference_adam_streams(tb, own_kernel, wb, scale, got))
    await kt.program(tb, n, r, length, payload, step, lgrad_addr, gather_addr, round(rto_s * 1e12 / CLOCK_PS))
    before = await tb.counters()

    # The peers start with the host's ap_start write: the RTL card's step begins about 120 clocks
    # later, before any peer frame can cross the switch (its latency alone is 150 clocks).
    await tb.write("ctrl", 1)
    start_cycle, start_ps = mon.cycle, int(get_sim_time("ps"))
    for k, peer in peers.items():
        peer.start_step(step, grads[k])
    wall0, cpu0 = time.perf_counter(), time.process_time()
    peer_done: dict[int, int] = {}
    limit = int(case.get("limit_clocks", 3_000_000))
    error = None
    while not mon.all_done or len(peer_done) < len(peers):
        await ClockCycles(dut.ap_clk, 4)
        for k, peer in peers.items():
            if k not in peer_done and peer.done:
                peer_done[k] = mon.cycle
            if peer.error is not None:
                error = f"peer {k}: {peer.error}"
        if error or mon.cycle - start_cycle > limit:
            error = error or f"not done in {limit} clocks (RTL {mon.all_done}, peers {sorted(peer_done)})"
            break
    end_cycle = mon.cycle
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    out: dict[str, Any] = {"case": case, "clock_ps": CLOCK_PS, "start_cycle": start_cycle, "start_ps": start_ps,
                           "rtl_done_cycle": mon.done.get("net"),
                           "peer_done_cycle": {str(k): v for k, v in peer_done.items()},
                           "end_cycle": end_cycle, "wall_s": wall, "cpu_s": cpu, "error": error,
                           "length": length, "chunk_beats": wb}
    if error is None:
        await tb.write("isr", 1)
        for _ in range(400):  # the last ACKs drain
            await ClockCycles(dut.ap_clk, 50)
            if switch.idle:
                break
        await kernel_task
        after = await tb.counters()
        out["counters"] = {k: after[k] - before[k] for k in after}
        out["status"] = await tb.read(kt.READONLY["status"])
        out["mismatch"] = mismatches(tb, got, want_reduced, ref["gathered"], peers, n, r, size, wdt, pdt, gather_addr,
                                     pb, fill)
    out["exact"] = error is None and not out["mismatch"] and out["status"] == 0
    out["frames_in"], out["frames_out"] = mon.frames_in, mon.frames_out
    out["tx_line"], out["rx_line"] = tx.line_log, rx.line_log
    out["tx_adapter"], out["rx_adapter"] = dict(tx.counters), dict(rx.counters)
    out["adapter_errors"] = tx.errors + rx.errors
    out["axi_errors"] = list(tb.monitor.errors)
    out["switch"] = switch.core.counters()
    out["peer_counters"] = {str(k): p.counters for k, p in peers.items()}
    with open(os.environ["ONIC_BENCH_OUT"], "w") as f:
        json.dump(out, f)
    dut._log.info("bench N=%d r=%d P=%d S=%d drop=%s: %s clocks, exact %s, %.1f s wall", n, r, payload, size,
                  case.get("drop", 0.0), end_cycle - start_cycle, out["exact"], wall)


def mismatches(tb: Any, got: dict[str, Any], want_reduced: np.ndarray, want: np.ndarray, peers: dict[int, SoftPeer],
               n: int, r: int, size: int, wdt: str, pdt: str, gather_addr: int, pb: int, fill: bytes) -> list[str]:
    """What differs from the reference ring (empty: bit-exact)."""
    bad: list[str] = []
    if kt.differing(got["reduced"].tobytes(), want_reduced.tobytes(), wdt):
        bad.append("reduced chunk")
    if kt.differing(got["own_out"].tobytes(), want[r * size:(r + 1) * size].tobytes(), pdt):
        bad.append("own update")
    pbytes = size * wire.ELEMENT_BYTES[pdt]
    for c in range(n):
        region = tb.rd.read(gather_addr + c * pb * kt.BEAT, pb * kt.BEAT)
        if c == r:
            if region != fill[:pb * kt.BEAT]:
                bad.append("own chunk's place written")
            continue
        if kt.differing(region[:pbytes], want[c * size:(c + 1) * size].tobytes(), pdt):
            bad.append(f"gathered chunk {c}")
        if region[pbytes:] != fill[:pb * kt.BEAT - pbytes]:
            bad.append(f"bytes past chunk {c}")
    for k, peer in peers.items():
        if peer.gathered is None or kt.differing(ring.pad(peer.gathered, n).tobytes(), want.tobytes(), pdt):
            bad.append(f"peer {k} gathered")
    if tb.grad.errors:
        bad.append(f"gradient stream: {tb.grad.errors[0]}")
    return bad
