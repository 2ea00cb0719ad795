"""The generated RTL Adam/AdamW kernel in simulation (sim/tb/kernel through hls/rtlsim.py).

Default run (one Verilator build per spec, shared by its tests):
- AdamW, fp32 gradients from memory, fp32 out, 4 lanes
- Adam, bf16 gradients from the stream, bf16 out, 16 lanes
each: 3 consecutive bit-exact runs per element count (0, not and exactly a multiple of the
lanes), random ready/valid stalls on every AXI channel, 64-clock memory read latency, and the
ap_ctrl_hs control test; plus lint (verilator -Wall) and an Icarus compile of several specs.
`--full` (marker slow): a covering set of every optimizer x gradient dtype x output dtype x
source x lanes (1, 4, 16) value, longer shards, a 200-clock latency, and one variant on Icarus.
"""

from __future__ import annotations

import pytest

from hls import rtlsim, simulators
from hls.spec import KernelSpec


def _id(spec: KernelSpec) -> str:
    src = "s" if spec.grad_source == "stream" else "m"
    return f"{spec.optimizer}-{spec.grad_dtype}-{spec.out_dtype}-{src}-l{spec.lanes}"


DEFAULT = [
    KernelSpec(optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="memory", lanes=4),
    KernelSpec(optimizer="adam", grad_dtype="bf16", out_dtype="bf16", grad_source="stream", lanes=16,
               name="optimusnic_adam"),
]

# Every value of every dimension appears with several values of each other dimension.
COVERING = [
    ("adamw", "bf16", "fp32", "memory", 1),
    ("adam", "fp32", "bf16", "memory", 1),
    ("adamw", "fp32", "bf16", "stream", 1),
    ("adam", "fp32", "fp32", "stream", 4),
    ("adam", "bf16", "fp32", "memory", 4),
    ("adamw", "bf16", "bf16", "stream", 4),
    ("adamw", "fp16", "fp32", "stream", 4),
    ("adamw", "bf16", "bf16", "memory", 16),
    ("adamw", "fp32", "fp32", "memory", 16),
    ("adam", "fp32", "fp32", "memory", 16),
    ("adamw", "fp32", "fp32", "stream", 16),
    ("adam", "fp16", "bf16", "memory", 16),
]
FULL = [KernelSpec(optimizer=o, grad_dtype=g, out_dtype=d, grad_source=s, lanes=n, name=f"optimusnic_{o}")
        for o, g, d, s, n in COVERING]


def default_elements(spec: KernelSpec) -> list[int]:
    """0, a count below the lanes, a multiple of the lanes, and one that is not."""
    return [0, 5, 8 * spec.lanes, 20 * spec.lanes + 3]


def full_elements(spec: KernelSpec) -> list[int]:
    return [0, 1, spec.lanes + 1, 64 * spec.lanes, 1500 + spec.lanes - 1, 5003]


def check(result: rtlsim.SimResult) -> None:
    assert result.passed, (f"{_id(KernelSpec.from_dict(result.spec))} on {result.simulator}: "
                           f"{result.failed} of {result.ran} bench tests failed; see {result.log}")


LINT_MORE = [KernelSpec(grad_dtype="fp16", out_dtype="bf16", lanes=1),
             KernelSpec(optimizer="adam", grad_source="stream", lanes=2), KernelSpec(grad_dtype="bf16", lanes=8)]


@pytest.mark.parametrize("spec", [*DEFAULT, *[pytest.param(s, marks=pytest.mark.slow) for s in LINT_MORE]], ids=_id)
def test_lint_and_icarus_compile(spec: KernelSpec) -> None:
    warnings = rtlsim.lint(spec)
    assert not warnings, "verilator --lint-only -Wall:\n" + "\n".join(warnings)
    if simulators.available("icarus"):
        ok, messages = rtlsim.icarus_compile(spec)
        assert ok and not messages.strip(), f"iverilog -g2012:\n{messages}"


@pytest.mark.parametrize("spec", DEFAULT, ids=_id)
def test_kernel_bit_exact_and_control(spec: KernelSpec) -> None:
    result = rtlsim.simulate(spec, tests=("test_update", "test_control"), elements=default_elements(spec),
                             runs=3, stalls=0.2, latency=64, seed=3)
    check(result)
    assert set(result.cycles) == {str(n) for n in default_elements(spec)}


@pytest.mark.slow
@pytest.mark.parametrize("spec", FULL, ids=_id)
def test_kernel_full(spec: KernelSpec) -> None:
    check(rtlsim.simulate(spec, tests=("test_update", "test_control"), elements=full_elements(spec),
                          runs=3, stalls=0.25, latency=64, seed=11))
    check(rtlsim.simulate(spec, tests=("test_update",), elements=[3, 777], runs=3, stalls=0.1, latency=200,
                          seed=12))


@pytest.mark.slow
@pytest.mark.parametrize("spec", DEFAULT, ids=_id)
def test_kernel_throughput(spec: KernelSpec) -> None:
    """Stall-free runs keep the lanes busy: at least 90% of LANES elements per clock on 64k elements."""
    result = rtlsim.simulate(spec, tests=("test_throughput",), elements=[65_536], runs=1, stalls=0.0, latency=64)
    check(result)
    assert result.throughput and result.throughput["fraction_of_ideal"] >= 0.9, result.throughput


@pytest.mark.slow
@pytest.mark.icarus
def test_kernel_icarus() -> None:
    spec = KernelSpec(optimizer="adam", grad_dtype="bf16", out_dtype="bf16", grad_source="stream", lanes=4,
                      name="optimusnic_adam")
    check(rtlsim.simulate(spec, simulator="icarus", tests=("test_update", "test_control"),
                          elements=[0, 3, 37], runs=3, stalls=0.2, latency=64))
