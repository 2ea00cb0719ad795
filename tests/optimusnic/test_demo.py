"""`optimusnic demo`: the side-by-side run, its table, plot and JSON summary (short runs)."""

from __future__ import annotations

import json

import pytest

from optimusnic.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def restore_threads():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_demo_json_summary_and_plot(tmp_path, capsys):
    assert main(["demo", "--steps", "20", "--out", str(tmp_path), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["backend"] == "csim" and r["world_size"] == 1 and r["steps"] == 20
    assert len(r["losses_nic"]) == len(r["losses_torch"]) == 20
    assert r["losses_nic"][-1] < r["losses_nic"][0]
    assert r["max_param_diff"] < 2e-6 and r["max_rel_loss_diff"] < 1e-5
    row = r["placement"][0]
    assert row["backend"] == "csim" and row["state_bytes"] == 12 * row["params"] == r["state_bytes"]
    for banks in row["banks"].values():  # stripe order, which is channel order: never HBM[10] before HBM[8]
        channels = [int(b.split("[")[1].rstrip("]")) for b in banks]
        assert channels == sorted(channels)
    assert r["host_state_tensors"] == 0
    png = tmp_path / "loss_curves.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert json.loads((tmp_path / "summary.json").read_text())["plot"] == str(png)


def test_demo_report_text(tmp_path, capsys):
    assert main(["demo", "--steps", "12", "--model", "mlp", "--backend", "golden", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "loss NicAdamW" in out and "loss torch AdamW" in out
    assert "final max |parameter difference| vs torch.optim.AdamW" in out
    assert "optimizer state: on the golden device" in out and "bytes" in out
    assert f"plot: {tmp_path / 'loss_curves.png'}" in out


@pytest.mark.parametrize("argv, message", [
    (["--steps", "1"], "must be from 2 to 100,000"),
    (["--world-size", "3"], "split evenly"),
    (["--world-size", "0"], "1 to 16"),
])
def test_demo_bad_options_fail_in_one_line(argv, message, capsys):
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
