"""cocotb test of onic_net_sumsq: the two-phase step's sum of squares and non-finite flag of a
reduced chunk against hls.net.ring.chunk_scalars, bit for bit.

Chunks of 16 .. 1600 elements (bf16: also half-kept last beats) of every kind the ring can
produce: normal values of all magnitudes, the largest fp32 values (squares near 2^256, which
overflow fp32 but never float64), subnormals (squares near 2^-298), zeros of both signs, values
aimed at float64 rounding ties, and chunks with +-inf or a NaN (non-finite flag; the sum is +inf
or the canonical NaN, as the reference reports it). Beats arrive with random idle clocks (or
back to back), junk past TKEEP, `start` between chunks. Every sumsq bit and the flag checked.

Environment: ONIC_SEED, ONIC_CHUNKS, ONIC_WIRE (fp32 | bf16).
"""

from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from hls.golden import to_bf16_bits
from hls.net import ring


def chunk_values(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    """fp32 values of one chunk of the given kind."""
    if kind == 0:  # one scale
        return (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30)).astype(np.float32)
    if kind == 1:  # every magnitude mixed
        bits = (rng.integers(0, 2, n) << 31) | (rng.integers(0, 255, n) << 23) | rng.integers(0, 1 << 23, n)
        return bits.astype(np.uint32).view(np.float32)
    if kind == 2:  # the largest and the smallest values
        big = (rng.integers(0x7F000000, 0x7F800000, n)).astype(np.uint32)
        small = rng.integers(0, 0x00800000, n).astype(np.uint32)
        return np.where(rng.integers(0, 2, n) == 0, big, small).astype(np.uint32).view(np.float32)
    if kind == 3:  # short mantissas: exact squares, sums at float64 ties
        m = rng.integers(0, 1 << 6, n) << 17
        bits = (rng.integers(0, 2, n) << 31) | (rng.integers(100, 160, n) << 23) | m
        return bits.astype(np.uint32).view(np.float32)
    if kind == 4:  # zeros of both signs, few nonzero
        v = np.where(rng.random(n) < 0.9, 0.0, rng.standard_normal(n)).astype(np.float32)
        return np.where(rng.integers(0, 2, n) == 0, v, -v).astype(np.float32)
    # non-finite: a few inf / NaN among normal values
    v = rng.standard_normal(n).astype(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    bad = rng.choice(n, size=int(rng.integers(1, 4)), replace=False)
    if kind == 5:
        v[bad] = specials[rng.integers(0, 2, len(bad))]  # infinities only: the sum is +inf
    else:
        v[bad] = specials[rng.integers(0, 3, len(bad))]
        # a NaN with a sign and payload (the reference's sum is canonical whatever the NaN)
        v[bad[0]] = np.array([0xFFC01234], dtype=np.uint32).view(np.float32)[0]
    return v


@cocotb.test()
async def sumsq_chunks(dut: object) -> None:
    wire = os.environ.get("ONIC_WIRE", "fp32")
    seed = int(os.environ.get("ONIC_SEED", "1"))
    chunks = int(os.environ.get("ONIC_CHUNKS", "40"))
    rng = np.random.default_rng(seed)
    rnd = random.Random(seed)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.s_valid.value = 0
    dut.s_data.value = 0
    dut.s_keep.value = 0
    dut.s_last.value = 0
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    elem_bytes = 4 if wire == "fp32" else 2
    checked = {"nan": 0, "inf": 0, "finite": 0}
    for c in range(chunks):
        n = 16 * int(rng.integers(1, 101))
        kind = (3 * c) % 7  # every kind within any 7 chunks, NaN and inf within the first 5
        values = chunk_values(rng, kind, n)
        reduced = values if wire == "fp32" else to_bf16_bits(values)
        want_sum, want_flag = ring.chunk_scalars(reduced, wire)
        want_bits = int(np.array(want_sum, dtype=np.float64).view(np.uint64))
        raw = reduced.astype("<f4" if wire == "fp32" else "<u2").tobytes()
        beats = [raw[i:i + 64] for i in range(0, len(raw), 64)]
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        idle = rnd.choice([0.0, 0.0, 0.3, 0.8])
        for b, beat in enumerate(beats):
            while rnd.random() < idle:
                dut.s_valid.value = 0
                dut.s_data.value = rnd.getrandbits(512)
                await RisingEdge(dut.clk)
            junk = rnd.getrandbits(8 * (64 - len(beat))).to_bytes(64 - len(beat), "little")
            dut.s_data.value = int.from_bytes(beat + junk, "little")
            dut.s_keep.value = (1 << len(beat)) - 1
            dut.s_last.value = int(b == len(beats) - 1)
            dut.s_valid.value = 1
            await RisingEdge(dut.clk)
            assert not int(dut.done.value), f"chunk {c}: done before the chunk's last beat"
        dut.s_valid.value = 0
        dut.s_last.value = 0
        for _ in range(400):
            await RisingEdge(dut.clk)
            if int(dut.done.value):
                break
        assert int(dut.done.value), f"chunk {c}: no done"
        got_bits, got_flag = int(dut.sumsq.value), bool(int(dut.nonfinite.value))
        assert got_flag == want_flag, f"chunk {c} (kind {kind}, {n} {wire}): nonfinite {got_flag}, want {want_flag}"
        assert got_bits == want_bits, (f"chunk {c} (kind {kind}, {n} {wire}, {len(raw) // elem_bytes} elements): "
                                       f"sumsq {got_bits:#018x}, want {want_bits:#018x} ({want_sum!r})")
        checked["nan" if np.isnan(want_sum) else "inf" if np.isinf(want_sum) else "finite"] += 1
        await ClockCycles(dut.clk, rnd.randint(0, 3))
    dut._log.info("%s: %d chunks bit-exact (%s)", wire, chunks, checked)
    assert min(checked.values()) > 0, checked
