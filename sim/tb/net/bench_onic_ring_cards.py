"""cocotb benchmark of N RTL cards (`optimusnic bench rtlnet`, the ring rows): every card of the ring
an `onic_card` (the network kernel and the generated Adam RTL kernel), one Verilator build of
hls.rtl.ring_top's top, each MAC port on cocotbext-eth's MAC model (`eth_mac_port.MacPort`) through
the seeded switch of sim/tb/models (100 Gb/s, 500 ns), at the bench's 300 MHz kernel clock.

The engine is test_onic_ring_cards' `Ring` (the same card memory, hosts, AXI monitors and MAC
ports) with ideal card memory (5..40 clocks of read latency, no pauses) and the interrupts polled
every clock. One simulation runs one ring step of the ONIC_BENCH case (n, size, payload, window,
rto_s, seed, drop; segment: round-major order, two_phase: the two-phase step) on the first n cards
of the top, checks it as test_onic_ring_cards does
(`check_step`: every owner's p, m, v and out buffer, every card's gathered buffer against a
lossless ring of `hls.net.card.Card`s, STATUS, counters against the switch ports, no transmit
underflow) and writes its record to ONIC_BENCH_OUT for `optimusnic.bench.rtlnet.ring_figures`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from eth_switch import PortFaults
from test_onic_ring_cards import ReferenceRing, Ring, RingConfig, check_step, local_gradient

from hls.golden import Hyper

CLOCK_PS = 3334  # 299.94 MHz, as bench_onic_net_kernel


@cocotb.test()
async def bench_ring_cards(dut: Any) -> None:
    """One ring step of the ONIC_BENCH case on N RTL cards, timed; its record to ONIC_BENCH_OUT."""
    case = json.loads(os.environ["ONIC_BENCH"])
    n, size, seed = int(case["n"]), int(case["size"]), int(case.get("seed", 1))
    adam = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text())
    wdt, pdt, opt = adam["spec"]["grad_dtype"], adam["spec"]["out_dtype"], adam["spec"]["optimizer"]
    two_phase = bool(case.get("two_phase", False))
    cfg = RingConfig(world=n, length=n * size, wire_dtype=wdt, param_dtype=pdt, payload_bytes=int(case["payload"]),
                     window=int(case["window"]), rto_clocks=round(case["rto_s"] * 1e12 / CLOCK_PS), optimizer=opt,
                     segment=int(case.get("segment", 0)))
    nrng = np.random.default_rng(seed)
    params = (nrng.standard_normal(cfg.length) * 0.1).astype(np.float32)
    drop = float(case.get("drop", 0.0))
    ring_ = Ring(dut, cfg, params, faults=PortFaults(drop=drop, seed=seed), grad_stall=0.0, seed=seed, adam=adam,
                 clock_ps=CLOCK_PS, poll=1)
    refring = ReferenceRing(cfg, params)
    await ring_.reset()
    grads = [local_gradient(nrng, cfg.length, wdt) for _ in range(n)]
    hyper = Hyper(lr=1e-2, step=1, grad_scale=1.0)
    ref = refring.step(40, grads, hyper, two_phase=two_phase)
    c0, wall0 = ring_.cycle, time.perf_counter()
    error = None
    try:
        res = await ring_.step(40, grads, hyper, limit=int(case.get("limit_clocks", 400_000)), two_phase=two_phase)
    except AssertionError as e:  # a step that does not end: the record says so
        res, error = None, str(e)[:2000]
    wall, c1 = time.perf_counter() - wall0, ring_.cycle
    out: dict[str, Any] = {"case": case, "clock_ps": CLOCK_PS, "wire_dtype": wdt, "param_dtype": pdt,
                           "wall_s": wall, "sim_clocks": c1 - c0, "error": error, "mismatch": None}
    if res is not None:
        # the step: every card's ap_start (written in one clock) to the last interrupt seen (polled each clock)
        out["step_clocks"] = res.clocks
        out["done_cycles"] = {str(k): v for k, v in ring_.done_cycle.items()}
        # a two-phase step (or round-major, run as one): the last card's phase one (RS and the scalars) done
        if ring_.phase_one_cycle:
            out["phase_one_clocks"] = max(ring_.phase_one_cycle.values()) - ring_.start_cycle
        out["counters"] = res.counters
        out["status"] = res.status
        try:
            check_step(dut, f"bench N={n}", ring_, res, ref, grads, refring, drop == 0.0)
        except AssertionError as e:
            out["mismatch"] = str(e)[:2000]
    out["exact"] = error is None and out["mismatch"] is None
    out["switch"] = ring_.switch.core.counters()
    with open(os.environ["ONIC_BENCH_OUT"], "w") as f:
        json.dump(out, f)
    dut._log.info("bench ring cards N=%d S=%d P=%d: %s clocks, exact %s, %.1f s wall", n, size, cfg.payload_bytes,
                  out.get("step_clocks"), out["exact"], wall)
