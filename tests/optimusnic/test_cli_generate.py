"""The `generate`, `csim` and `bench` verbs: files written, verdicts printed, one clear line on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimusnic.cli import main


def test_generate_writes_project_and_prints_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "proj"
    assert main(["generate", "--target", "u55c", "--optimizer", "adam", "--lanes", "4", "--grad-dtype", "bf16",
                 "--name", "my_adam", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for rel in ("hls/my_adam.cpp", "hls/run_hls.tcl", "hls/link.cfg", "hls/Makefile", "manifest.json"):
        assert (out / rel).is_file()
        assert str(out / rel) in text
    assert "sizing" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["name"] == "my_adam" and manifest["spec"]["lanes"] == 4


def test_generate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--target", "v80", "-o", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "versal/NOTE.md" in data["files"] and data["verdict"]


@pytest.mark.parametrize("argv, needle", [
    (["generate", "--target", "u55c", "--name", "bad name"], "name"),
    (["generate", "--target", "nope"], "unknown target"),
    (["generate", "--target", "u55c", "--lanes", "3"], "lanes"),
])
def test_generate_bad_input_is_one_line(argv: list[str], needle: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and err.startswith("optimusnic generate: error:")


def test_csim_passes_on_generated_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "proj"
    assert main(["generate", "--target", "u50", "--grad-dtype", "fp16", "--out-dtype", "bf16", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["csim", str(out), "--elements", "1001", "--steps", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["elements"] == 1001 and data["steps"] == 2
    assert len(data["checks"]) == 8 and all(c["ok"] for c in data["checks"])
    assert main(["csim", str(out), "--elements", "33", "--steps", "1"]) == 0
    text = capsys.readouterr().out
    assert "PASS" in text and "33 elements x 1 steps" in text


@pytest.mark.parametrize("make", ["missing", "not_project"])
def test_csim_bad_dir_is_one_line(make: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "nothing" if make == "missing" else tmp_path
    assert main(["csim", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("optimusnic csim: error:")


def test_bench_missing_backend_is_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from optimusnic.cli import bench

    monkeypatch.setitem(bench.BENCHES, "rtl", "hls.no_such_bench_module")
    assert main(["bench", "rtl"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not available" in err
