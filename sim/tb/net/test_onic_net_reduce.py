"""cocotb test of onic_net_reduce: one hop's addition per beat against hls.net.ring.add_partial.

Operands: the fp32 unit vectors of sim/tb/fp/vectors.py (uniform patterns, every class value,
cancellation, alignment, ties, the subnormal boundary, overflow) plus every pair of class
values; for the bf16 wire, bf16 patterns (uniform, class values, subnormals, +-0, +-inf, quiet
and signalling NaNs) and pairs aimed at the fp32 -> bf16 rounding (the dropped half exactly a
tie, just off it, with odd and even kept LSBs). The partial (a) comes with random TKEEP, TLAST
and TUSER, the local gradient (b) on its own channel; both with random idle clocks, the output
with random back-pressure. Every lane of every beat is checked in order: bf16 bit for bit
(NaN is 0x7FC0 in both), fp32 bit for bit where the reference is a number and exactly
0x7FC00000 where it is NaN (numpy keeps an operand's NaN payload; the adders emit the
canonical NaN, and the project compares NaN as any NaN). TKEEP, TLAST and TUSER unchanged.

Environment: ONIC_SEED, ONIC_BEATS, ONIC_WIRE (fp32 | bf16), ONIC_IDLE, ONIC_STALL.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from ring_streams import Sink, Source

from hls.net import ring

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fp"))
import vectors  # noqa: E402  (sim/tb/fp: the fp units' operand generators)

BF16_CLASS = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x807F, 0x0080, 0x8080, 0x3F80, 0xBF80,
                       0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF], dtype=np.uint32)


def fp32_operands(n_lanes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    directed = vectors.directed_operands("fp32_add")
    rand = vectors.random_operands("fp32_add", n_lanes, seed)
    a = np.concatenate([directed["a"], rand["a"]]).astype(np.uint32)
    b = np.concatenate([directed["b"], rand["b"]]).astype(np.uint32)
    return a, b


def bf16_operands(n_lanes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pa, pb = np.meshgrid(BF16_CLASS, BF16_CLASS)
    a = [pa.ravel(), rng.integers(0, 1 << 16, n_lanes, dtype=np.uint32)]
    b = [pb.ravel(), rng.integers(0, 1 << 16, n_lanes, dtype=np.uint32)]
    # ties: b is half an ulp of a (or 1.5, or just off), so the fp32 sum's dropped half is
    # exactly 0x8000 or next to it; kept LSB odd and even both occur
    m = n_lanes
    ea = rng.integers(10, 254, m, dtype=np.uint32)
    ma = rng.integers(0, 128, m, dtype=np.uint32)
    sa = rng.integers(0, 2, m, dtype=np.uint32)
    a_tie = (sa << 15) | (ea << 7) | ma
    mb = rng.choice(np.array([0, 0x40, 1, 0x7F], dtype=np.uint32), m)
    sb = np.where(rng.integers(0, 4, m) == 0, 1 - sa, sa).astype(np.uint32)
    b_tie = (sb << 15) | ((ea - 8) << 7) | mb
    a.append(a_tie)
    b.append(b_tie)
    # subnormal sums and the subnormal/normal boundary
    sub = rng.integers(0, 0x100, m, dtype=np.uint32) | (rng.integers(0, 2, m, dtype=np.uint32) << 15)
    a.append(sub)
    b.append(rng.integers(0, 0x100, m, dtype=np.uint32) | (rng.integers(0, 2, m, dtype=np.uint32) << 15))
    return np.concatenate(a).astype(np.uint32), np.concatenate(b).astype(np.uint32)


def expected_lanes(a: np.ndarray, b: np.ndarray, bf16: bool) -> np.ndarray:
    if bf16:
        return ring.add_partial(a.astype(np.uint16), b.astype(np.uint16), "bf16").astype(np.uint32)
    got = ring.add_partial(a.view(np.float32), b.view(np.float32), "fp32")
    bits = got.view(np.uint32).copy()
    bits[np.isnan(got)] = 0x7FC00000
    return bits


def pack(lanes: np.ndarray, width: int) -> int:
    return sum(int(v) << (width * i) for i, v in enumerate(lanes))


@cocotb.test()
async def test_reduce(dut: Any) -> None:
    seed = int(os.environ.get("ONIC_SEED", "1"))
    beats_min = int(os.environ.get("ONIC_BEATS", "300"))
    bf16 = os.environ.get("ONIC_WIRE", "fp32") == "bf16"
    rng = random.Random(seed)
    lanes, width = (32, 16) if bf16 else (16, 32)
    a, b = (bf16_operands if bf16 else fp32_operands)(beats_min * lanes // 4, seed)
    perm = np.random.default_rng(seed).permutation(a.size)
    a, b = a[perm], b[perm]
    n_beats = max(beats_min, -(-a.size // lanes))
    total = n_beats * lanes
    reps = -(-total // a.size)
    a, b = np.tile(a, reps)[:total], np.tile(b, reps)[:total]
    want = expected_lanes(a, b, bf16)

    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    src_a = Source(dut, "s_a_", ["tdata", "tkeep", "tlast", "tuser"], rng, float(os.environ.get("ONIC_IDLE", "0.2")),
                   valid="tvalid", ready="tready")
    src_b = Source(dut, "s_b_", ["tdata"], rng, float(os.environ.get("ONIC_IDLE", "0.2")),
                   valid="tvalid", ready="tready")
    sink = Sink(dut, "m_", ["tdata", "tkeep", "tlast", "tuser"], rng, float(os.environ.get("ONIC_STALL", "0.3")),
                valid="tvalid", ready="tready")
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)

    items_a, items_b, meta = [], [], []
    for k in range(n_beats):
        keep = rng.choice([(1 << 64) - 1, (1 << 64) - 1, (1 << rng.randrange(1, 64)) - 1])
        last, user = rng.randrange(2), rng.randrange(2)
        items_a.append({"tdata": pack(a[k * lanes:(k + 1) * lanes], width), "tkeep": keep, "tlast": last,
                        "tuser": user})
        items_b.append({"tdata": pack(b[k * lanes:(k + 1) * lanes], width)})
        meta.append((keep, last, user))
    ta, tb = src_a.start(items_a), src_b.start(items_b)
    # a steady stretch with the sink always ready checks one beat per clock
    limit = 200 * n_beats
    for _ in range(limit):
        await RisingEdge(dut.clk)
        if len(sink.items) == n_beats:
            break
    await ta
    await tb
    assert len(sink.items) == n_beats, f"{len(sink.items)} of {n_beats} beats out"
    assert not sink.errors, sink.errors
    mask = (1 << width) - 1
    bad = []
    for k, item in enumerate(sink.items):
        got = np.array([(item["tdata"] >> (width * i)) & mask for i in range(lanes)], dtype=np.uint32)
        exp = want[k * lanes:(k + 1) * lanes]
        for i in np.nonzero(got != exp)[0]:
            if len(bad) < 10:
                j = k * lanes + i
                bad.append(f"beat {k} lane {i}: {a[j]:#x} + {b[j]:#x} = {got[i]:#x}, expected {exp[i]:#x}")
        if (item["tkeep"], item["tlast"], item["tuser"]) != meta[k]:
            bad.append(f"beat {k}: keep/last/user {item['tkeep']:#x} {item['tlast']} {item['tuser']} != {meta[k]}")
    assert not bad, "\n".join(bad)
    dut._log.info("%d beats (%d additions) bit-exact", n_beats, total)


@cocotb.test()
async def test_full_rate(dut: Any) -> None:
    """No idle, no stall: one beat per clock after the pipeline fills (the credit loop never throttles)."""
    rng = random.Random(2)
    bf16 = os.environ.get("ONIC_WIRE", "fp32") == "bf16"
    lanes, width = (32, 16) if bf16 else (16, 32)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    src_a = Source(dut, "s_a_", ["tdata", "tkeep", "tlast", "tuser"], rng, 0.0, valid="tvalid", ready="tready")
    src_b = Source(dut, "s_b_", ["tdata"], rng, 0.0, valid="tvalid", ready="tready")
    sink = Sink(dut, "m_", ["tdata", "tkeep", "tlast", "tuser"], rng, 0.0, valid="tvalid", ready="tready")
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    n = 200
    one = 0x3F80 if bf16 else 0x3F800000
    items = [{"tdata": pack(np.full(lanes, one), width), "tkeep": (1 << 64) - 1, "tlast": 0, "tuser": 0}] * n
    src_a.start(items)
    src_b.start([{"tdata": pack(np.full(lanes, one), width)}] * n)
    clocks = 0
    while len(sink.items) < n:
        await RisingEdge(dut.clk)
        clocks += 1
    assert clocks <= n + 20, f"{n} beats took {clocks} clocks"
    two = 0x4000 if bf16 else 0x40000000
    assert all(it["tdata"] == pack(np.full(lanes, two), width) for it in sink.items)
