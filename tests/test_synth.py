"""Resource estimates with Debian's yosys: cell mapping, caching, fit checks, real synthesis runs.

The default run synthesizes one small FP unit (seconds); the kernel at 1 lane (one lane plus
the top) and the full 4- and 16-lane tops are behind the `slow` marker (minutes each).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hls import synth
from hls.cli import main
from hls.paths import RTL_DIR
from hls.sizing import size
from hls.spec import KernelSpec
from hls.targets import get_target

needs_yosys = pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys not installed: `make deps-yosys`")


def test_cell_mapping_counts_luts_ffs_dsps_and_memories() -> None:
    cells = {"LUT1": 2, "LUT6": 10, "LUT6_2": 1, "SRLC32E": 3, "RAM64M": 2, "FDRE": 20, "FDSE": 1, "FDCE": 2,
             "DSP48E2": 3, "RAMB36E2": 2, "RAMB18E2": 3, "URAM288": 1, "CARRY8": 5, "MUXF7": 4, "BUFG": 1,
             "MYSTERY": 2}
    r = synth.cell_resources(cells)
    assert r["lut"] == 2 + 10 + 1 + 3 + 8 and r["lut_as_memory"] == 11
    assert r["ff"] == 23 and r["dsp"] == 3 and r["bram36"] == 3.5 and r["uram"] == 1 and r["carry"] == 5
    assert r["unmapped_cells"] == {"MYSTERY": 2}


def _fake_estimate(lane_lut: int, infra_lut: int = 1000) -> dict:
    lane = {"lut": lane_lut, "ff": 100, "dsp": 10, "bram36": 0, "uram": 0}
    infra = {"lut": infra_lut, "ff": 100, "dsp": 0, "bram36": 4, "uram": 0}
    return {"spec": KernelSpec(target="u50", lanes=1).to_dict(), "lane": lane, "infrastructure": infra,
            "total": {}, "usable": {}}


def test_fit_note_scales_cached_figures_to_any_width(tmp_path: Path) -> None:
    target = get_target("u50")
    usable = target.usable("lut")
    synth.save_estimate(_fake_estimate(lane_lut=usable // 10), tmp_path)
    assert synth.fit_note(KernelSpec(target="u50", lanes=8), target, tmp_path) is None
    note = synth.fit_note(KernelSpec(target="u50", lanes=16), target, tmp_path)
    assert note and "16 lanes x 1 CU does not fit Alveo U50" in note and "lut" in note
    # Another optimizer is another lane: no cached figure, no note.
    assert synth.fit_note(KernelSpec(target="u50", lanes=16, optimizer="adam"), target, tmp_path) is None


def test_sizing_warns_from_cached_synth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = get_target("u50")
    synth.save_estimate(_fake_estimate(lane_lut=target.usable("lut") // 10), tmp_path)
    monkeypatch.setattr(synth, "SYNTH_DIR", tmp_path)
    report = size(target, 10**9, lanes=16)
    assert any("yosys estimate" in n for n in report.notes)
    assert not any("yosys estimate" in n for n in size(target, 10**9, lanes=4).notes)


@needs_yosys
def test_small_unit_synthesizes_and_caches(tmp_path: Path) -> None:
    sources = [RTL_DIR / "fp" / "fp_delay.v", RTL_DIR / "fp" / "bf16_to_fp32.v"]
    first = synth.synth_module(sources, "bf16_to_fp32", {"TAG_WIDTH": 1}, cache_dir=tmp_path)
    r = first["resources"]
    assert first["cached"] is False and r["lut"] > 0 and r["ff"] > 0 and r["dsp"] == 0 and r["unmapped_cells"] == {}
    again = synth.synth_module(sources, "bf16_to_fp32", {"TAG_WIDTH": 1}, cache_dir=tmp_path)
    assert again["cached"] is True and again["resources"] == r


@needs_yosys
def test_yosys_error_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(synth.UserError, match="yosys failed on fp32_to_bf16"):
        synth.synth_module([RTL_DIR / "fp" / "fp32_to_bf16.v"], "fp32_to_bf16", cache_dir=tmp_path)


@needs_yosys
@pytest.mark.slow
def test_synth_cli_lanes_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--target", "u55c", "--lanes", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["lane"]["dsp"] > 0 and r["lane"]["lut"] > 1000 and r["infrastructure"]["lut"] > 0
    assert r["fits"] is True and r["max_lanes_that_fit"] == 16
    assert r["total"]["lut"] == r["lane"]["lut"] + r["infrastructure"]["lut"]


@needs_yosys
@pytest.mark.slow
@pytest.mark.parametrize("lanes", [4, 16])
def test_full_top_matches_scaled_estimate(lanes: int) -> None:
    spec = KernelSpec(target="u55c", lanes=lanes)
    target = get_target("u55c")
    scaled = synth.estimate(spec, target, mode="scaled")
    full = synth.estimate(spec, target, mode="full")
    for r in ("lut", "ff", "dsp"):
        assert full["per_cu"][r] == pytest.approx(scaled["per_cu"][r], rel=0.1), r


def test_synth_cli_cached_scales_saved_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(synth, "SYNTH_DIR", tmp_path)
    assert main(["synth", "--target", "u50", "--cached"]) == 2
    assert "no saved yosys figures" in capsys.readouterr().err
    est = _fake_estimate(lane_lut=5000) | {"runs": [], "yosys": "Yosys test", "caveat": "c", "method": "m"}
    synth.save_estimate(est, tmp_path)
    assert main(["synth", "--target", "u50", "--lanes", "4", "--compute-units", "2", "--cached", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["per_cu"]["lut"] == 1000 + 4 * 5000 and r["total"]["lut"] == 2 * 21000
    assert r["total"]["bram36"] == 8 and r["fits"] is True and r["spec"]["lanes"] == 4
