"""The driver benchmark runs, and a step's extra host memory stays within two chunks."""

from __future__ import annotations

import argparse

import pytest

from hls.sizing import stripe_counts
from hls.spec import KernelSpec
from hls.targets import get_target
from optimusnic.bench import driver as bench


def test_bench_small_run(capsys) -> None:
    r = bench.measure(params=200_000, repeats=1, chunk_elems=32_768)
    # a chunk restarts every stripe at its beat 0: whole multiples of the default plan's alignment (1/3/1)
    align = stripe_counts(KernelSpec(target="u55c"), get_target("u55c")).beat_align()
    assert r["chunk_elems"] == 32_768 // align * align and r["bare_kernel_s"] > 0 and r["driver_step_s"] > 0
    assert r["peak_extra_chunks"] <= 2.0, r
    assert bench.run(argparse.Namespace(params=50_000, repeats=1, threads=None, json=True)) == 0
    assert '"overhead_ratio"' in capsys.readouterr().out


@pytest.mark.parametrize("optimizer", bench.OPTIMIZERS)
def test_optimizer_bench_small_run(capsys, optimizer) -> None:
    """NicAdamW / ShardedNicOptimizer end to end (golden): the figures exist; what the optimizer
    holds is two chunks (beyond the sharded optimizer's one bucket), every scratch of a step included."""
    r = bench.measure_optimizer(params=600_000, backend="golden", repeats=1, optimizer=optimizer)
    print(bench.report_optimizer(r))
    assert r["optimizer"] == optimizer
    assert r["nic_held_bytes"] - r["bucket_bytes"] <= 2 * r["chunk_bytes"], r
    assert (r["bucket_bytes"] > 0) == (optimizer == "ShardedNicOptimizer")
    assert r["torch_fused_held_bytes"] >= 8 * r["params"]  # exp_avg + exp_avg_sq (fp32) and steps
    assert r["nic_step_s"] > 0 and r["bare_card_step_s"] > 0 and r["host_part_s"] > 0


def test_launch_cost_bench_on_the_fake_card() -> None:
    """Issue 29: a launch writes its argument block in one call (plus ap_start), and the bench reports the host
    time per launch against a 1M-element chunk's kernel time (the timing itself is not asserted: shared CI)."""
    r = bench.measure_launch(launches=50)
    print(bench.report_launch(r))
    assert r["register_writes_per_launch"] <= 2.0, r
    assert r["host_launch_s"] > 0 and r["launches_per_s"] > 0 and r["chunk_elems"] == 1 << 20
    assert r["kernel_s_at_card_rate"] == (1 << 20) / (r["lanes"] * r["kernel_clock_mhz"] * 1e6)
