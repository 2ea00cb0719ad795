"""Generic cocotb test for every FP unit in sim/rtl/fp (selected by environment variables).

FP_UNIT      unit name (module name), e.g. fp32_add
FP_VECTORS   number of random vectors (directed cases come first), default 2000
FP_SEED      seed of the operand generator, default 1
FP_DIRECTED  1 (default) to stream the directed corner cases before the random ones
FP_LATENCY   the expected LATENCY of a parameter variant (default: vectors.UNITS)

Vectors stream back to back with random idle cycles (in_valid=0) and random ce=0 stalls. All
inputs are written and all outputs read once per clock, at the falling edge, so the test behaves
the same on every simulator. Each output is checked bit-exactly (NaN == any NaN), in order, with
its tag, and exactly LATENCY enabled clocks after its input.
"""

from __future__ import annotations

import os
import time

import cocotb
import numpy as np
import vectors
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

MAX_REPORTED = 20  # mismatches printed in full before the test fails


def expected_latency(dut: object, unit: str) -> int:
    """The elaborated `localparam LATENCY` (Verilator and Icarus both expose it through VPI),
    cross-checked with the mirror in `vectors.UNITS` (or FP_LATENCY for a parameter variant) when set."""
    override = os.environ.get("FP_LATENCY")
    table = int(override) if override else vectors.UNITS[unit].latency
    try:
        elaborated = int(dut.LATENCY.value)
    except (AttributeError, TypeError, ValueError):
        elaborated = None
    if elaborated is None:
        if table is None:
            raise AssertionError(f"{unit}: LATENCY not visible in the simulator, none in vectors.UNITS")
        return table
    if table is not None and table != elaborated:
        raise AssertionError(f"vectors.UNITS[{unit!r}].latency = {table} but {unit}.v LATENCY = {elaborated}")
    return elaborated


def _schedule(rng: np.random.Generator, n_cycles: int) -> tuple[list[int], list[int]]:
    """Per-clock ce and in_valid: ~5% stall clocks, ~12% idle clocks, in bursts."""
    ce = (rng.random(n_cycles) >= 0.05).astype(int)
    valid = (rng.random(n_cycles) >= 0.12).astype(int)
    # occasional long gaps / long stalls so the pipeline drains and freezes while full
    for _ in range(n_cycles // 2000 + 1):
        start = int(rng.integers(0, n_cycles))
        length = int(rng.integers(5, 30))
        if rng.random() < 0.5:
            valid[start : start + length] = 0
        else:
            ce[start : start + length] = 0
    return ce.tolist(), valid.tolist()


@cocotb.test()
async def run_test_stream(dut: object) -> None:
    unit = os.environ.get("FP_UNIT", dut._name)
    spec = vectors.UNITS[unit]
    n_random = int(os.environ.get("FP_VECTORS", "2000"))
    seed = int(os.environ.get("FP_SEED", "1"))
    directed = os.environ.get("FP_DIRECTED", "1") == "1"
    latency = expected_latency(dut, unit)

    ops = vectors.all_operands(unit, n_random, seed, directed)
    expected = vectors.reference(unit, ops)
    n = len(expected)
    tag_width = len(dut.in_tag)
    tag_mask = (1 << tag_width) - 1
    a_list = ops["a"].tolist()
    b_list = ops["b"].tolist() if spec.operands == 2 else None
    sub_list = ops["sub"].tolist() if spec.has_sub else None

    rng = np.random.default_rng(seed + 7)
    ce_seq, valid_seq = _schedule(rng, int(n * 1.3) + 1000)
    junk_mask = 4095
    junk = rng.integers(0, 1 << 63, junk_mask + 1, dtype=np.uint64).tolist()
    a_mask = (1 << spec.in_bits) - 1

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    clk_fall = FallingEdge(dut.clk)
    h_ce, h_valid, h_a, h_tag = dut.ce, dut.in_valid, dut.in_a, dut.in_tag
    h_b = dut.in_b if b_list is not None else None
    h_sub = dut.in_sub if sub_list is not None else None
    o_valid, o_y, o_tag = dut.out_valid, dut.out_y, dut.out_tag

    dut.rst.value = 1
    h_ce.value = 1
    h_valid.value = 0
    h_a.value = 0
    h_tag.value = 0
    if h_b is not None:
        h_b.value = 0
    if h_sub is not None:
        h_sub.value = 0
    for _ in range(4):
        await clk_fall
    dut.rst.value = 0
    await clk_fall
    assert int(o_valid.value) == 0, "out_valid must be 0 after reset"

    accept_edge = [0] * n  # enabled-clock number at which vector i entered
    out_edge: list[int] = []
    out_y: list[int] = []
    out_tag: list[int] = []
    held_errors: list[str] = []

    edge = 0  # number of enabled clocks so far
    idx = 0  # next vector to send
    cur_ce, cur_valid = 1, 0
    last_out: tuple[int, int, int] | None = None
    cycle = 0
    t_start = time.perf_counter()
    # after the last input, allow the pipeline (plus stalls) to drain
    drain_limit = len(ce_seq) + 20 * latency + 1000
    while len(out_y) < n and cycle < drain_limit:
        ce = ce_seq[cycle] if cycle < len(ce_seq) else 1
        send = valid_seq[cycle] if (cycle < len(valid_seq) and idx < n) else 0
        cycle += 1
        if ce != cur_ce:
            h_ce.value = ce
            cur_ce = ce
        # during a stall in_valid is random too: ce=0 must ignore it
        valid = send if ce else junk[cycle & junk_mask] & 1
        if valid != cur_valid:
            h_valid.value = valid
            cur_valid = valid
        if send and ce:
            h_a.value = a_list[idx]
            if h_b is not None:
                h_b.value = b_list[idx]
            if h_sub is not None:
                h_sub.value = sub_list[idx]
            h_tag.value = idx & tag_mask
        elif cycle < len(ce_seq):
            # idle or stalled: junk on the data inputs must not reach any output
            j = junk[cycle & junk_mask]
            h_a.value = j & a_mask
            if h_b is not None:
                h_b.value = j >> 32
            h_tag.value = (j >> 7) & tag_mask
        await clk_fall
        if ce:
            edge += 1
            if send:
                accept_edge[idx] = edge
                idx += 1
            if int(o_valid.value):
                y, tag = int(o_y.value), int(o_tag.value)
                out_edge.append(edge)
                out_y.append(y)
                out_tag.append(tag)
                last_out = (1, y, tag)
            else:
                last_out = (0, 0, 0)
        elif last_out is not None and last_out[0]:
            # ce=0 freezes the pipeline: the output must hold
            now = (int(o_valid.value), int(o_y.value), int(o_tag.value))
            if now != last_out and len(held_errors) < MAX_REPORTED:
                held_errors.append(f"output changed during ce=0 stall at cycle {cycle}: {last_out} -> {now}")
    elapsed = time.perf_counter() - t_start
    dut._log.info(
        "%s: %d vectors (%d directed) in %d clocks, %.1f s, %.0f vectors/s, latency %d",
        unit,
        n,
        n - n_random,
        cycle,
        elapsed,
        n / max(elapsed, 1e-9),
        latency,
    )

    assert not held_errors, "\n".join(held_errors)
    assert idx == n, f"only {idx} of {n} vectors were accepted"
    assert len(out_y) == n, f"{len(out_y)} outputs for {n} inputs (latency {latency})"

    got = np.array(out_y, dtype=np.uint64)
    if spec.out_bits <= 32:
        got = got.astype(np.uint32)
    ok = vectors.matches(unit, got, expected)
    # an input sampled at enabled clock E by a unit with LATENCY 1 is read back after that same clock
    lat = np.array(out_edge) - np.array(accept_edge) + 1
    tags_ok = np.array(out_tag) == (np.arange(n) & tag_mask)
    problems: list[str] = []
    if not np.all(lat == latency):
        bad = np.flatnonzero(lat != latency)
        problems.append(
            f"{len(bad)} results at the wrong clock: measured latency {sorted(set(lat[bad].tolist()))[:5]} "
            f"!= LATENCY {latency} (first at vector {bad[0]})"
        )
    if not np.all(tags_ok):
        bad = np.flatnonzero(~tags_ok)
        problems.append(f"{len(bad)} tags wrong (first at vector {bad[0]}: {out_tag[bad[0]]:#x})")
    bad = np.flatnonzero(~ok)
    out_digits = 2 + spec.out_bits // 4
    in_digits = {"a": 2 + spec.in_bits // 4, "b": 2 + spec.in_bits // 4, "sub": 3}
    for i in bad[:MAX_REPORTED]:
        operands = " ".join(f"{k}={int(ops[k][i]):#0{in_digits[k]}x}" for k in ops)
        got_s, exp_s = f"{int(got[i]):#0{out_digits}x}", f"{int(expected[i]):#0{out_digits}x}"
        problems.append(f"vector {i}: {operands} -> got {got_s} expected {exp_s}")
    if len(bad):
        problems.append(f"{len(bad)} of {n} results wrong")
    assert not problems, f"{unit}:\n" + "\n".join(problems)
