"""The HLS kernel variants the csim and structure tests share: a default set and the full sweep."""

from __future__ import annotations

import itertools

from hls.spec import KernelSpec

# Memory plans (design.md section 3b): stripes of grad / each of p, m, v / out on the U55C.
PLANS = {
    "s1": {"stripes": 1},  # 1 / 1 / 1
    "auto": {},  # sizing's choice for the line rate: 1 / 3 / 1 at 16 lanes
    "s2": {"stripes": 2},  # 1 / 2 / 1
    "wide": {"stripes": 3, "rate_gps": 9.0, "clock_mhz": 600.0},  # 16 lanes: 2 / 3 / 2 (3 for fp32 out)
}
# (optimizer, grad dtype, out dtype, lanes, grad source, plan): every grad dtype twice, both
# outputs, lanes 1/4/16, both optimizers, the stream source twice, every plan, gradient and
# output stripes > 1 with 16-bit and fp32 data. The full cross product is `slow`.
DEFAULT_VARIANTS = [
    ("adamw", "fp32", "fp32", 16, "memory", "auto"),
    ("adam", "bf16", "bf16", 4, "memory", "s2"),
    ("adamw", "fp16", "bf16", 1, "memory", "s1"),
    ("adam", "fp16", "fp32", 16, "memory", "wide"),
    ("adam", "fp32", "bf16", 16, "stream", "auto"),
    ("adamw", "bf16", "fp32", 4, "stream", "s2"),
    ("adamw", "fp32", "bf16", 16, "memory", "wide"),
]
_CROSS = list(itertools.product(("adamw", "adam"), ("fp32", "bf16", "fp16"), ("fp32", "bf16"), (1, 4, 16),
                                ("memory", "stream")))
# Every combination once, each with a plan taken in turn, so the sweep meets every plan too.
ALL_VARIANTS = [(*v, list(PLANS)[i % len(PLANS)]) for i, v in enumerate(_CROSS)]

def spec_of(variant: tuple) -> KernelSpec:
    opt, gd, od, lanes, src, plan = variant
    return KernelSpec(target="u55c", optimizer=opt, grad_dtype=gd, out_dtype=od, lanes=lanes, grad_source=src,
                      name=f"k_{opt}_{gd}_{od}_l{lanes}_{src}_{plan}", **PLANS[plan])
