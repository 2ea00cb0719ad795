"""`optimusnic bench csim` (part of `make bench`): every implementation measured, ratios and floors reported."""

from __future__ import annotations

from optimusnic.bench import csim as bench_csim


def test_measure_sizes_reports_every_implementation() -> None:
    result = bench_csim.measure_sizes((4096, 70_001), repeats=1, threads=2)
    assert [r["params"] for r in result["rows"]] == [4096, 70_001]
    for row in result["rows"]:
        assert set(row["params_per_s"]) == set(bench_csim.IMPLEMENTATIONS)
        assert all(rate > 0 for rate in row["params_per_s"].values())
        assert row["ratio_vs_torch_fused"]["torch_fused"] == 1.0
        assert row["threads"] == 2
        floor = row["floor_params_per_s"]
        assert abs(floor["torch"] / floor["csim"] - bench_csim.CSIM_TRAFFIC / bench_csim.TORCH_TRAFFIC) < 1e-9
    assert result["meets_goal"] is False  # no row at 16M or more: the goal is not claimed
    table = bench_csim.table(result)
    assert len(table) == 2 + 2 * len(bench_csim.IMPLEMENTATIONS)
    assert "csim kernel (AMD headers)" in "\n".join(table)
    assert len(bench_csim.floors(result)) == 4
    for row in result["rows"]:
        assert set(row["cpu_ns_per_16_params"]) == set(bench_csim.CPU_COSTED)
        assert all(ns > 0 for ns in row["cpu_ns_per_16_params"].values())
    costs = bench_csim.cpu_costs(result)
    assert len(costs) == 2 + len(result["rows"]) and costs[2].endswith("x |")
