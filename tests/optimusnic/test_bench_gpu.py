"""`optimusnic bench gpu`: without a GPU one line and exit 2; `--device cpu` runs the staged
pipeline forced on CPU tensors and prints the table (the figures themselves are not asserted)."""

from __future__ import annotations

import json

import pytest
import torch

from optimusnic.bench import gpu as bench
from optimusnic.cli import main
from pynq_driver.optim.devpath import stages


def _gpu_here() -> bool:
    """A real accelerator with streams (the fake GPU of another test's double does not count)."""
    acc = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    return acc is not None and stages(acc)


def test_no_gpu_is_one_line_and_exit_2(capsys):
    if _gpu_here():
        pytest.skip("a GPU is here: the bench runs on it")
    assert main(["bench", "gpu", "--params", "5000", "--repeats", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no GPU here" in err and "--device cpu" in err


def test_bad_device_is_refused(capsys):
    assert main(["bench", "gpu", "--device", "tpu9", "--params", "5000"]) == 2
    assert "not a torch device" in capsys.readouterr().err


def test_cpu_forced_run_prints_the_table_and_json(capsys):
    assert main(["bench", "gpu", "--device", "cpu", "--params", "40000", "--repeats", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["cpu_forced"] and r["staged_step_s"] > 0 and r["torch_fused_step_s"] > 0 and r["chunks"] >= 1
    assert r["overlap"] is None or 0.0 <= r["overlap"] <= 1.0
    text = bench.report(r)  # what the command prints without --json
    assert "CPU tensors, the staged pipeline forced" in text and "torch.optim.AdamW(fused=True)" in text
    assert "overlap:" in text


def test_pick_device_names_the_missing_accelerator():
    if _gpu_here():
        pytest.skip("a GPU is here")
    from hls.errors import ToolMissing

    with pytest.raises(ToolMissing, match="no such accelerator"):
        bench.pick_device("cuda")
