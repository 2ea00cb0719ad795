"""cocotb test of onic_stripe_beats: every stripe's beat count and last-beat bytes against hls/layout.py.

Environment: STRIPES, ELEM_BYTES (the module's parameters, set by the runner), ONIC_SEED.
The counts are checked for element counts the kernel bench cannot reach (up to 2^32 - 1).
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

from hls import layout

LATENCY = 4


def expected(n: int, stripes: int, elem_bytes: int) -> list[tuple[int, int]]:
    nb = layout.beats(n, elem_bytes)
    tail = (n * elem_bytes) % 64 or 64
    last = (nb - 1) % stripes if nb else -1
    return [(layout.stripe_beats(nb, stripes, k), tail if k == last else 64) for k in range(stripes)]


@cocotb.test()
async def test_counts(dut: Any) -> None:
    stripes = int(os.environ["STRIPES"])
    elem_bytes = int(os.environ["ELEM_BYTES"])
    rng = random.Random(int(os.environ.get("ONIC_SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    per_beat = 64 // elem_bytes
    ns = [0, 1, per_beat - 1, per_beat, per_beat + 1, 2**32 - 1, 2**32 - 2, 2**31, 2**28 * 16 // elem_bytes - 1]
    ns += [k * per_beat + d for k in range(0, 3 * stripes + 2) for d in (0, 1, per_beat - 1)]
    ns += [rng.randrange(2**32) for _ in range(300)] + [rng.randrange(10**6) for _ in range(300)]
    for n in ns:
        n &= 0xFFFFFFFF
        dut.n.value = n
        await ClockCycles(dut.clk, LATENCY + 1)
        beats = int(dut.beats.value)
        last = int(dut.last_bytes.value)
        got = [((beats >> (32 * k)) & 0xFFFFFFFF, (last >> (7 * k)) & 0x7F) for k in range(stripes)]
        want = expected(n, stripes, elem_bytes)
        assert got == want, f"n={n}: got {got}, want {want}"
