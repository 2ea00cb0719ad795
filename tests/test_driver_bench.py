"""The driver benchmark runs, and a step's extra host memory stays within two chunks."""

from __future__ import annotations

import argparse

from pynq_driver import bench


def test_bench_small_run(capsys) -> None:
    r = bench.measure(params=200_000, repeats=1, chunk_elems=32_768)
    assert r["chunk_elems"] == 32_768 and r["bare_kernel_s"] > 0 and r["driver_step_s"] > 0
    assert r["peak_extra_chunks"] <= 2.0, r
    assert bench.run(argparse.Namespace(params=50_000, repeats=1, threads=None, json=True)) == 0
    assert '"overhead_ratio"' in capsys.readouterr().out
