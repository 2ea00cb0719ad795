"""cocotb benchmark of onic_card (`optimusnic bench rtlnet`, the card rows): ONE RTL card, the network
kernel and the REAL generated Adam RTL kernel in one top (hls.rtl.card), on a ring of software
peers through the seeded switch of sim/tb/models, at 300 MHz against 100 Gb/s links, timed per
beat on the card's MAC streams.

One simulation runs one ring step of one case (the environment's ONIC_BENCH, as
bench_onic_net_kernel.py reads it; ONIC_MANIFEST: the Adam kernel's manifest.json) and writes the
same record as bench_onic_net_kernel.py to ONIC_BENCH_OUT, so that `optimusnic.bench.rtlnet.figures`
reads both. The differences: the card is done when both kernels have raised their interrupt (the
Adam kernel's last write of p, m, v and out is inside the step), and bit-exactness is checked
against `hls.net.ring.ring_step` (p, m, v of the owner's shard and the Adam kernel's out buffer in
card memory, the gathered buffer, every peer's gathered vector), as test_onic_card.py checks it.

Card memory is test_onic_card's: one flat cocotbext-axi memory behind every m_axi port of both
kernels, the AXI protocol monitor on every port. Ideal by default (`hbm_memory.card_memory`, ideal
mode, 5..40 clocks of read latency per burst, 2..30 of write response, no channel pauses); with the
case's `memory_plan` (`hls.rtl.card.card_memory_plan`, the HBM rows) every port on the channel the
rail sizing gives it, each channel limited to its usable bandwidth less the host DMA's share (the
ring buffers' channels), 100..250 ns per burst. Every buffer is in its stripes (the Adam kernel's
arrays as its manifest has them, lgrad and gather in ONIC_NET_STRIPES), written with `layout.split`
and read back with `layout.join`; the record carries each channel's beats over the step.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from typing import Any

import cocotb
import hbm_memory
import numpy as np
import test_onic_card as ct
import test_onic_net_kernel as kt
from bench_onic_net_kernel import CLOCK_PS, BeatMonitor, TimedRx, TimedTx
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_time
from eth_switch import EthSwitch, PortFaults, SwitchConfig
from soft_peer import SoftPeer

from hls import golden, layout
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel
from hls.ports import port_array
from pynq_driver.net.net_kernel import RingArgs, step_arguments

BEAT = 64


def page(x: int) -> int:
    """`x` rounded up to a 64 KiB page (each buffer stripe its own page-aligned region)."""
    return -(-x // 0x10000) * 0x10000


@cocotb.test()
async def bench_card(dut: Any) -> None:
    """One ring step of the ONIC_BENCH case with the real Adam kernel, timed; figures to ONIC_BENCH_OUT."""
    case = json.loads(os.environ["ONIC_BENCH"])
    manifest = json.loads(open(os.environ["ONIC_MANIFEST"]).read())
    n, r, payload, size = int(case["n"]), int(case["rank"]), int(case["payload"]), int(case["size"])
    seed = int(case.get("seed", 1))
    window = int(case.get("window", 32))
    rto_s = float(case.get("rto_s", 20e-6))
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    spec = manifest["spec"]
    wdt, pdt, optimizer = spec["grad_dtype"], spec["out_dtype"], spec["optimizer"]
    wb, pb = kt.chunk_beats(size, wdt), kt.chunk_beats(size, pdt)
    # card memory: page-aligned regions sized from the case, one per stripe of each buffer (the network
    # kernel's lgrad and gather in ct.NET_STRIPES stripes, the Adam kernel's arrays in its manifest's)
    adam_stripes: dict[str, int] = {}
    for a in manifest["register_map"]["args"]:
        if a["kind"] == "pointer":
            array, index = port_array(a["name"])
            adam_stripes[array] = max(adam_stripes.get(array, 0), index + 1)
    sizes = {"lgrad": (n * wb * BEAT, ct.NET_STRIPES), "gather": (n * pb * BEAT, ct.NET_STRIPES),
             **{a: (size * 4, adam_stripes[a]) for a in ("p", "m", "v")}, "out": (pb * BEAT, adam_stripes["out"])}
    bases: dict[str, list[int]] = {}
    at = 0x10000
    for name, (nbytes, stripes) in sizes.items():
        bases[name] = []
        for k in range(stripes):
            bases[name].append(at)
            at += page(layout.stripe_bytes(nbytes, 1, stripes, k))
    ct.MEM_BYTES = 1 << max(21, at.bit_length())  # CardTB sizes its memory from it

    cocotb.start_soon(Clock(dut.ap_clk, CLOCK_PS, unit="ps").start())
    tb = ct.CardTB(dut, manifest, rng, case.get("memory_plan"))
    for port in tb.card.ports.values():  # latencies are drawn in clocks: this clock's period
        for side in (port.read_if, port.write_if):
            if side is not None:
                side.clock_ns = CLOCK_PS / 1000
    mon = BeatMonitor(dut, {"adam": dut.interrupt_adam, "net": dut.interrupt_net})
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 8)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 4)
    tb.card.start()

    eps = kt.endpoints(n)
    faults = PortFaults(drop=float(case.get("drop", 0.0)), seed=seed)
    switch = EthSwitch(SwitchConfig(ports=n, table={e.mac: k for k, e in enumerate(eps)}, flood=False,
                                    faults=faults, latency_s=float(case.get("latency_s", 500e-9))))
    switch.start()
    # as bench_onic_net_kernel: the transmit adapter holds a whole frame besides the one on the line
    tx = TimedTx(dut, "m_axis_mac0", dut.ap_clk, switch, r, fifo_bytes=2 * (64 + payload + 4))
    rx = TimedRx(dut, "s_axis_mac0", dut.ap_clk, switch, r)

    length = n * size - int(nrng.integers(0, 16))
    assert ring.chunk_elems(length, n) == size, (length, n, size)
    params = (nrng.standard_normal(length) * 0.1).astype(np.float32)
    shards = []
    for k in range(n):
        s = ring.Shard.from_params(params, k, n)
        real = max(0, min(size, length - k * size))
        s.m[:real] = (nrng.standard_normal(real) * 0.01).astype(np.float32)
        s.v[:real] = (np.abs(nrng.standard_normal(real)) * 1e-4).astype(np.float32)
        shards.append(s)
    grads = [kt.local_gradient(nrng, length, wdt) for _ in range(n)]
    hyper = golden.Hyper(lr=1e-3, weight_decay=0.01, step=5, grad_scale=1.0)
    want = ring.ring_step(shards, grads, hyper, wire_dtype=wdt, out_dtype=pdt, optimizer=optimizer)
    scale = ring.step_grad_scale(None, n, grad_scale=hyper.grad_scale)
    assert scale is not None

    local = ring.pad(grads[r], n)
    hbm_memory.write_striped(tb.mem, bases["lgrad"], b"".join(
        local[c * size:(c + 1) * size].tobytes().ljust(wb * BEAT, b"\x5a") for c in range(n)))
    fill = bytes([0xA5]) * (n * pb * BEAT)
    hbm_memory.write_striped(tb.mem, bases["gather"], fill)
    hbm_memory.write_striped(tb.mem, bases["out"], bytes([0x5A]) * (pb * BEAT))
    for name in ("p", "m", "v"):
        hbm_memory.write_striped(tb.mem, bases[name], getattr(shards[r], name).tobytes())

    peers: dict[int, SoftPeer] = {}
    for k in range(n):
        if k == r:
            continue
        kernel = ReferenceKernel(shards[k].copy(), hyper, optimizer=optimizer, wire_dtype=wdt, param_dtype=pdt)
        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype=pdt,
                         ag_release=True, payload_bytes=payload, window=window, slots=window, rto=rto_s, fcs=True)
        peers[k] = SoftPeer(Card(cfg, kernel), switch, k)
        peers[k].start()

    # the host: the Adam kernel first (it waits on its gradient stream), then the network kernel
    regs = {"n": size, **golden.prepare_scalars(dataclasses.replace(hyper, grad_scale=scale),
                                                optimizer).registers(optimizer)}
    for name, arg in tb.adam_args.items():
        if arg["kind"] == "pointer":
            array, index = port_array(name)
            regs[name] = bases[array][index]
    for name, value in regs.items():
        await tb.adam_write(name, value)
    await tb.adam.write_dword(ct.GIE, 1)
    await tb.adam.write_dword(ct.IER, 1)
    await tb.adam.write_dword(ct.CTRL, ct.AP_START)
    step_id = 5
    # the host's arguments as the driver computes and checks them (pynq_driver.net.net_kernel)
    await tb.net_write_values(step_arguments(RingArgs(
        local=eps[r], succ=eps[(r + 1) % n], pred=eps[(r - 1) % n], rank=r, world=n, length=length,
        payload_bytes=payload, step=step_id, window=window, timeout_clocks=round(rto_s * 1e12 / CLOCK_PS),
        credit=window, lgrad=bases["lgrad"], gather=bases["gather"]), ct.NET))
    before = await tb.net_counters()

    # as bench_onic_net_kernel: the peers start with the host's ap_start write to the network kernel
    await tb.net.write_dword(ct.CTRL, ct.AP_START)
    start_cycle, start_ps = mon.cycle, int(get_sim_time("ps"))
    tb.card.reset_counters()  # the memory channels' figures cover the step
    for k, peer in peers.items():
        peer.start_step(step_id, grads[k], grad_scale=hyper.grad_scale)
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
            error = error or f"not done in {limit} clocks (card {sorted(mon.done)}, peers {sorted(peer_done)})"
            break
    end_cycle = mon.cycle
    channels = tb.card.stats()  # over the step: ap_start (counters reset just before) to the last done
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    out: dict[str, Any] = {"case": case, "clock_ps": CLOCK_PS, "start_cycle": start_cycle, "start_ps": start_ps,
                           "rtl_done_cycle": max(mon.done.values()) if len(mon.done) == 2 else None,
                           "net_done_cycle": mon.done.get("net"), "adam_done_cycle": mon.done.get("adam"),
                           "peer_done_cycle": {str(k): v for k, v in peer_done.items()},
                           "end_cycle": end_cycle, "wall_s": wall, "cpu_s": cpu, "error": error,
                           "length": length, "chunk_beats": wb, "adam": {k: spec[k] for k in ("lanes", "stripes")},
                           "adam_stripes": adam_stripes, "net_stripes": ct.NET_STRIPES}
    if error is None:
        await tb.net.write_dword(ct.ISR, 1)
        await tb.adam.write_dword(ct.ISR, 1)
        for _ in range(400):  # the last ACKs drain
            await ClockCycles(dut.ap_clk, 50)
            if switch.idle:
                break
        after = await tb.net_counters()
        out["counters"] = {k: after[k] - before[k] for k in after}
        out["status"] = await tb.net.read_dword(ct.NET.readonly["status"])
        out["adam_status"] = await tb.adam.read_dword(tb.adam_status)
        out["mismatch"] = mismatches(tb, want, peers, n, r, size, pdt, bases, pb, fill)
        if out["adam_status"]:
            out["mismatch"].append(f"Adam kernel STATUS {out['adam_status']:#x}")
    out["exact"] = error is None and not out["mismatch"] and out["status"] == 0
    out["frames_in"], out["frames_out"] = mon.frames_in, mon.frames_out
    out["tx_line"], out["rx_line"] = tx.line_log, rx.line_log
    out["tx_adapter"], out["rx_adapter"] = dict(tx.counters), dict(rx.counters)
    out["adapter_errors"] = tx.errors + rx.errors
    out["axi_errors"] = list(tb.monitor.errors)
    # every channel over the step: beats moved, of its budget (HBM model), clocks paused for lack of it
    out["memory"] = {"mode": tb.card.mode, "channels": channels}
    out["switch"] = switch.core.counters()
    out["peer_counters"] = {str(k): p.counters for k, p in peers.items()}
    with open(os.environ["ONIC_BENCH_OUT"], "w") as f:
        json.dump(out, f)
    dut._log.info("bench card N=%d r=%d P=%d S=%d drop=%s: %s clocks, exact %s, %.1f s wall", n, r, payload, size,
                  case.get("drop", 0.0), end_cycle - start_cycle, out["exact"], wall)


def mismatches(tb: Any, want: ring.StepResult, peers: dict[int, SoftPeer], n: int, r: int, size: int, pdt: str,
               bases: dict[str, list[int]], pb: int, fill: bytes) -> list[str]:
    """What differs from `ring.ring_step` (empty: bit-exact); `bases`: each buffer's stripes."""
    bad: list[str] = []
    mine = want.shards[r]
    for name in ("p", "m", "v"):
        if kt.differing(hbm_memory.read_striped(tb.mem, bases[name], size * 4), getattr(mine, name).tobytes(), "fp32"):
            bad.append(name)
    gathered = ring.pad(want.gathered, n)
    pbytes = size * wire.ELEMENT_BYTES[pdt]
    out = hbm_memory.read_striped(tb.mem, bases["out"], pb * BEAT)
    if kt.differing(out[:pbytes], gathered[r * size:(r + 1) * size].tobytes(), pdt):
        bad.append("out buffer")
    gather = hbm_memory.read_striped(tb.mem, bases["gather"], n * pb * BEAT)
    for c in range(n):
        region = gather[c * pb * BEAT:(c + 1) * pb * BEAT]
        if c == r:
            if region != fill[:pb * BEAT]:
                bad.append("own chunk's place written")
            continue
        if kt.differing(region[:pbytes], gathered[c * size:(c + 1) * size].tobytes(), pdt):
            bad.append(f"gathered chunk {c}")
        if region[pbytes:] != fill[:pb * BEAT - pbytes]:
            bad.append(f"bytes past chunk {c}")
    for k, peer in peers.items():
        if peer.gathered is None or kt.differing(ring.pad(peer.gathered, n).tobytes(), gathered.tobytes(), pdt):
            bad.append(f"peer {k} gathered")
    return bad
