"""cocotb tests of onic_stripe_beats: every stripe's beat count and last-beat bytes against hls/layout.py.

Environment: STRIPES, ELEM_BYTES (the module's parameters, set by the runner; test_counts), ONIC_SEED.
test_counts  one instance: element counts the kernel bench cannot reach (up to 2^32 - 1), each
             checked LATENCY clocks after it was set and again a clock later
test_all     onic_stripe_beats_all (1 to 8 stripes, 4- and 2-byte elements side by side): every
             element count 0 to 4097 and large ones, back to back, each checked exactly LATENCY
             clocks after it was set
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hls import layout

# clocks from a change of `n` to right outputs (the module's documented latency; onic_run_ctrl's
# PREP_CLOCKS in templates/rtl/KERNEL.v.j2 must not be smaller)
LATENCY = 18


def expected(n: int, stripes: int, elem_bytes: int) -> list[tuple[int, int]]:
    nb = layout.beats(n, elem_bytes)
    tail = (n * elem_bytes) % 64 or 64
    last = (nb - 1) % stripes if nb else -1
    return [(layout.stripe_beats(nb, stripes, k), tail if k == last else 64) for k in range(stripes)]


def large_counts(rng: random.Random, elem_bytes: int) -> list[int]:
    per_beat = 64 // elem_bytes
    return [2**32 - 1, 2**32 - 2, 2**31, 2**28 * 16 // elem_bytes - 1, 2**28 * 16 // elem_bytes,
            *(rng.randrange(2**32) for _ in range(100)), *(k * per_beat + 1 for k in (2**20, 3**12, 10**6))]


def unpack(beats: int, last: int, first: int, stripes: int) -> list[tuple[int, int]]:
    return [((beats >> (32 * (first + k))) & 0xFFFFFFFF, (last >> (7 * (first + k))) & 0x7F) for k in range(stripes)]


@cocotb.test()
async def test_counts(dut: Any) -> None:
    stripes = int(os.environ["STRIPES"])
    elem_bytes = int(os.environ["ELEM_BYTES"])
    rng = random.Random(int(os.environ.get("ONIC_SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    per_beat = 64 // elem_bytes
    ns = [0, 1, per_beat - 1, per_beat, per_beat + 1, *large_counts(rng, elem_bytes)]
    ns += [k * per_beat + d for k in range(0, 3 * stripes + 2) for d in (0, 1, per_beat - 1)]
    ns += [rng.randrange(2**32) for _ in range(200)] + [rng.randrange(10**6) for _ in range(200)]
    for n in ns:
        n &= 0xFFFFFFFF
        await RisingEdge(dut.clk)
        dut.n.value = n
        want = expected(n, stripes, elem_bytes)
        for extra in (0, 1):
            await ClockCycles(dut.clk, LATENCY if extra == 0 else 1)
            await ReadOnly()
            got = unpack(int(dut.beats.value), int(dut.last_bytes.value), 0, stripes)
            assert got == want, f"n={n}, {LATENCY + extra} clocks after it was set: got {got}, want {want}"


@cocotb.test()
async def test_all(dut: Any) -> None:
    rng = random.Random(int(os.environ.get("ONIC_SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    ns = [*range(4098), *large_counts(rng, 2), *large_counts(rng, 4)]
    for n in ns:
        await RisingEdge(dut.clk)
        dut.n.value = n
        await ClockCycles(dut.clk, LATENCY)
        await ReadOnly()
        beats, last = int(dut.beats.value), int(dut.last_bytes.value)
        for e, elem_bytes in enumerate((4, 2)):
            for stripes in range(1, 9):
                got = unpack(beats, last, e * 36 + stripes * (stripes - 1) // 2, stripes)
                want = expected(n, stripes, elem_bytes)
                assert got == want, (f"n={n}, {stripes} stripes of {elem_bytes}-byte elements, {LATENCY} clocks after "
                                     f"it was set: got {got}, want {want}")
