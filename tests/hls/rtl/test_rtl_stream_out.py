"""The RTL kernel's parameter stream (out_sink "memory+stream", m_axis_param) in simulation.

The default run is in test_rtl_kernel.py: its stream-source kernel (bf16 out, 16 lanes) has the
parameter stream, and test_param_stream runs there with the other checks. Here, `--full` (slow):
fp32 out from memory gradients on the HBM memory model (out in one stripe, p, m, v in three) with
heavy TREADY and memory stalls, bf16 out over two out stripes, and one variant on Icarus. Each
run's packet is checked bit-exact against the golden model and against memory, with TKEEP, TLAST,
the zero padding, ap_done after the last beat and a 1000-clock TREADY hold (sim/tb/kernel
test_param_stream).
"""

from __future__ import annotations

import pytest

from hls.rtl import bench_runner as rtlsim
from hls.spec import KernelSpec

FP32_MEMORY = KernelSpec(optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="memory", lanes=4,
                         stripes=3, out_sink="memory+stream")
# 16 lanes at 600 MHz for 9 G elements/s: two out stripes, whose beats the stream must interleave back
BF16_TWO_OUT = KernelSpec(optimizer="adam", grad_dtype="bf16", out_dtype="bf16", grad_source="stream", lanes=16,
                          stripes=3, rate_gps=9.0, clock_mhz=600.0, out_sink="memory+stream", name="optimusnic_adam")


def _elements(spec: KernelSpec) -> list[int]:
    """0, 1, a partial beat, several beats of every stripe, and a multi-burst shard."""
    return [0, 1, 7, 16 * spec.lanes + 3, 2049]


def _check(result: rtlsim.SimResult) -> None:
    assert result.passed, f"{result.failed} of {result.ran} bench tests failed; see {result.log}"


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "memory"), [(FP32_MEMORY, "hbm"), (BF16_TWO_OUT, "ideal")],
                         ids=["fp32-memory-hbm", "bf16-2out-ideal"])
def test_param_stream_full(spec: KernelSpec, memory: str) -> None:
    if spec is BF16_TWO_OUT:
        assert rtlsim.stripe_counts(spec).out == 2
    _check(rtlsim.simulate(spec, tests=("test_param_stream", "test_update", "test_status", "test_reset"),
                           elements=_elements(spec), runs=3, stalls=0.4, latency=64, seed=21, memory=memory))


@pytest.mark.slow
@pytest.mark.icarus
def test_param_stream_icarus() -> None:
    spec = KernelSpec(optimizer="adamw", grad_dtype="bf16", out_dtype="bf16", grad_source="stream", lanes=4,
                      stripes=2, out_sink="memory+stream")
    _check(rtlsim.simulate(spec, simulator="icarus", tests=("test_param_stream",), elements=[0, 3, 37],
                           runs=2, stalls=0.3, latency=32, memory="ideal"))
