"""Resource and timing estimates with Debian's yosys: cell mapping, caching, fit checks, LUT levels
and fan-out, real synthesis runs.

The default run synthesizes one small FP unit and a small fixture (tests/fixtures/synth/lut_chain.v,
a known LUT depth and fan-out) in seconds each; the kernel at 1 lane (one lane plus the top, about
4 minutes) and the full 4- and 16-lane tops are behind the `slow` marker.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hls import rtl_sources
from hls.paths import RTL_DIR
from hls.rtl import netlist as timing
from hls.rtl import synth, timing_report
from hls.sizing import size
from hls.spec import KernelSpec
from hls.targets import get_target
from optimusnic.cli import main

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


def test_size_verb_warns_from_cached_synth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    # The `size` verb prints the note; sizing itself (and so a manifest) never reads the cache.
    target = get_target("u50")
    synth.save_estimate(_fake_estimate(lane_lut=target.usable("lut") // 10), tmp_path)
    monkeypatch.setattr(synth, "SYNTH_DIR", tmp_path)
    assert not any("yosys estimate" in n for n in size(target, 10**9, lanes=16).notes)
    assert main(["size", "--target", "u50", "--params", "1e9", "--lanes", "16"]) == 0
    assert "note: yosys estimate: 16 lanes x 1 CU does not fit" in capsys.readouterr().out
    assert main(["size", "--target", "u50", "--params", "1e9", "--lanes", "16", "--json"]) == 0
    assert any("yosys estimate" in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert main(["size", "--target", "u50", "--params", "1e9", "--lanes", "4"]) == 0
    assert "yosys estimate" not in capsys.readouterr().out


@needs_yosys
def test_small_unit_synthesizes_and_caches(tmp_path: Path) -> None:
    sources = [RTL_DIR / "fp" / "fp_delay.v", RTL_DIR / "fp" / "bf16_to_fp32.v"]
    first = synth.synth_module(sources, "bf16_to_fp32", {"TAG_WIDTH": 1}, cache_dir=tmp_path)
    r = first["resources"]
    assert first["cached"] is False and r["lut"] > 0 and r["ff"] > 0 and r["dsp"] == 0 and r["unmapped_cells"] == {}
    again = synth.synth_module(sources, "bf16_to_fp32", {"TAG_WIDTH": 1}, cache_dir=tmp_path)
    assert again["cached"] is True and again["resources"] == r
    t = first["timing"]
    assert again["timing"] == t and t["analysis_version"] == timing.ANALYSIS_VERSION
    # One register stage: paths run from its inputs or to its outputs, none from register to register.
    assert t["io_paths"]["in_to_reg"] is not None and t["lut_levels"] == (t["path"] or {}).get("lut_levels", 0)
    assert t["cells"] > 0 and t["combinational_loops"] == 0 and t["unknown_cells"] == {}
    assert all("clk" not in n["net"] for n in t["fanout_top"])


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


# --- timing: LUT levels between registers and fan-out ----------------------------------------------

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "synth" / "lut_chain.v"


@needs_yosys
def test_timing_finds_the_constructed_lut_chain_and_enable_fanout(tmp_path: Path) -> None:
    run = synth.synth_module([FIXTURE], "lut_chain", {"STAGES": 5, "FANOUT": 64}, cache_dir=tmp_path)
    t = run["timing"]
    path = t["path"]
    assert t["lut_levels"] == 5 and path["lut_levels"] == 5 and path["carry"] == 0 and path["muxf"] == 0
    assert [h["type"] for h in path["through"]] == ["LUT6"] * 5
    assert [h["net"] for h in path["through"]] == [f"stage[{i}]" for i in range(1, 6)]
    assert path["start"]["type"] == "FDRE" and path["start"]["net"].startswith("din_q[")
    assert path["end"]["type"] == "FDRE" and path["end"]["net"] == "chain_q" and path["end"]["pin"] == "D"
    assert t["max_fanout"] == {"net": "en_q", "loads": 64, "driver": "FDRE(en)", "pins": {"FDRE.CE": 64}}
    assert t["clock_nets"] and t["met"] is True
    # The input ports reach registers without logic (in -> reg is 0 levels), never counted as reg -> reg.
    assert t["io_paths"]["in_to_reg"]["lut_levels"] == 0


@needs_yosys
def test_timing_counts_carry_apart_and_flags_a_net_over_1000_loads(tmp_path: Path) -> None:
    t = synth.synth_module([FIXTURE], "lut_chain", {"STAGES": 0, "FANOUT": 1001}, cache_dir=tmp_path)["timing"]
    path = t["path"]
    # With no LUT chain the longest path is the 32-bit adder: one LUT (the XOR) and its carry chain.
    assert t["lut_levels"] == 1 and path["carry"] >= 4
    assert all(h["type"].startswith("CARRY") for h in path["through"][1:])
    assert path["start"]["net"][:3] in ("a_q", "b_q") and path["end"]["net"].startswith("sum_q[")
    assert t["max_fanout"]["net"] == "en_q" and t["max_fanout"]["loads"] == 1001
    assert t["lut_levels_met"] is True and t["fanout_met"] is False and t["met"] is False


def _cell(kind: str, conns: dict, dirs: dict, **params: int) -> dict:
    return {"type": kind, "connections": conns, "port_directions": dirs, "parameters": params, "attributes": {}}


_FD = {"C": "input", "CE": "input", "D": "input", "R": "input", "Q": "output"}


def _fd(d: int, q: int) -> dict:
    return _cell("FDRE", {"C": [2], "CE": ["1"], "D": [d], "R": ["0"], "Q": [q]}, _FD)


def _lut(ins: list[int], out: int) -> dict:
    ports = {f"I{i}": [b] for i, b in enumerate(ins)}
    return _cell(f"LUT{len(ins)}", ports | {"O": [out]}, dict.fromkeys(ports, "input") | {"O": "output"})


def _netlist(cells: dict, nets: dict) -> dict:
    ports = {"clk": {"direction": "input", "bits": [2]}, "x": {"direction": "input", "bits": [3]}}
    return {"modules": {"m": {"attributes": {"top": 1}, "ports": ports, "cells": cells,
                              "netnames": {n: {"hide_name": 0, "bits": [b]}
                                           for n, b in (nets | {"clk": 2, "x": 3}).items()}}}}


def test_timing_lut_ram_read_address_is_a_level_and_a_combinational_dsp_is_crossed() -> None:
    srl_dirs = {"A": "input", "CE": "input", "CLK": "input", "D": "input", "Q": "output", "Q31": "output"}
    dsp_dirs = {"A": "input", "B": "input", "CLK": "input", "P": "output"}
    cells = {
        "addr_reg": _fd(3, 10),
        "srl": _cell("SRLC32E", {"A": [10, "0", "0", "0", "0"], "CE": ["1"], "CLK": [2], "D": [3], "Q": [20],
                                 "Q31": [22]}, srl_dirs),
        "lut": _lut([20], 21),
        "dsp": _cell("DSP48E2", {"A": [21], "B": [21], "CLK": [2], "P": [23]}, dsp_dirs, MREG=0, PREG=0),
        "lut2": _lut([23, 22], 24),
        "out_reg": _fd(24, 30),
    }
    t = timing.analyze(_netlist(cells, {"addr": 10, "srl_q": 20, "l1": 21, "p": 23, "l2": 24, "q": 30}))
    p = t["path"]
    # addr_reg -> SRL read (1) -> LUT1 (2) -> DSP48E2 without M/P register (crossed) -> LUT2 (3) -> out_reg
    assert t["lut_levels"] == 3 and p["lutmem"] == 1 and p["dsp"] == 1
    assert p["start"]["net"] == "addr" and p["end"]["net"] == "q"
    assert [h["type"] for h in p["through"]] == ["SRLC32E", "LUT1", "DSP48E2", "LUT2"]
    # The clock (C/CLK pins) is not a fan-out candidate even though it has the most loads.
    assert t["max_fanout"]["net"] != "clk" and t["clock_nets"] == ["clk"]
    # A registered DSP ends and starts paths instead.
    cells["dsp"]["parameters"] = {"MREG": 0, "PREG": 1}
    assert timing.analyze(_netlist(cells, {"q": 30}))["lut_levels"] == 2


def test_timing_survives_a_combinational_loop() -> None:
    cells = {"a": _lut([3, 11], 10), "b": _lut([10], 11), "r": _fd(11, 12)}
    t = timing.analyze(_netlist(cells, {"l": 10, "m": 11, "q": 12}))
    assert t["combinational_loops"] == 2


def _row(lanes: int, levels: int, nets: dict[str, int]) -> tuple[dict, dict]:
    worst = max(nets.items(), key=lambda t: t[1])
    run = {"unit": f"k{lanes}", "top": "k", "params": {}, "seconds": 1, "cached": False,
           "timing": {"lut_levels": levels, "path": None, "io_paths": {}, "large_nets": nets,
                      "max_fanout": {"net": worst[0], "loads": worst[1], "pins": {}}}}
    return timing_report.row(run, lanes=lanes), run["timing"]


def test_scaled_16_lanes_grow_shared_nets_linearly_and_keep_per_lane_nets() -> None:
    r1, t1 = _row(1, 4, {"ce": 300, "rst": 900, "lane0.x": 200})
    r4, t4 = _row(4, 4, {"ce": 1200, "rst": 960, "lane0.x": 200, "lane3.x": 200})
    r16 = timing_report.scale_row(r1, r4, t1, t4, 16)
    assert r16["scaled"] and r16["max_fanout_net"] == "ce" and r16["max_fanout"] == 1200 + 4 * 900
    assert r16["lut_levels"] == 4 and r16["lut_levels_met"] and not r16["fanout_met"] and "scaled" in r16["unit"]
    assert r16["nets_over_goal"] == {"ce": 4800, "rst": 1200} and r4["nets_over_goal"] == {"ce": 1200}
    # Depth that grows with lanes (a reduction over lanes) grows again by the same step.
    r4b, t4b = _row(4, 6, {"ce": 90})
    r1b, t1b = _row(1, 5, {"ce": 60})
    assert timing_report.scale_row(r1b, r4b, t1b, t4b, 16)["lut_levels"] == 7


@needs_yosys
def test_synth_cli_timing_json_and_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # The per-module sweep over a one-file RTL tree (the fixture), through the real command and yosys.
    monkeypatch.setattr(synth, "SYNTH_DIR", tmp_path)
    monkeypatch.setattr(rtl_sources, "static_sources", lambda: [FIXTURE])
    assert main(["synth", "--target", "u55c", "--timing", "--no-kernel", "--json"]) == 0
    captured = capsys.readouterr()
    rep = json.loads(captured.out)
    assert "[synth] unit 1/1: lut_chain" in captured.err
    (row,) = rep["units"]
    assert row["top"] == "lut_chain" and row["lut_levels"] == 5 and row["max_fanout_net"] == "en_q"
    assert row["max_fanout"] == 64 and row["met"] and rep["kernel"] == [] and rep["met"]
    assert main(["synth", "--target", "u55c", "--timing", "--no-kernel"]) == 0
    text = capsys.readouterr().out
    assert "lut_chain" in text and "en_q" in text and "all rows: met" in text
    assert "FDRE din_q" in text and "FDRE chain_q (D)" in text
    # bench/results.md: the section goes before the chart, and a rerun replaces it instead of adding one.
    from optimusnic.bench import report as bench_report

    (tmp_path / "results.md").write_text("# r\n\n## RTL\n\ntext\n\n![benchmark chart](results.png)\n")
    bench_report.write_synth_section(rep, tmp_path)
    md = bench_report.write_synth_section(rep, tmp_path).read_text()
    assert md.count(bench_report.SYNTH_HEADING) == 1 and md.index("## RTL") < md.index(bench_report.SYNTH_HEADING)
    assert md.index(bench_report.SYNTH_HEADING) < md.index("![benchmark chart]")
    assert "| lut_chain | 5 | 0/0/0 | FDRE din_q" in md and "every row met" in md


@needs_yosys
@pytest.mark.slow
def test_kernel_top_1_lane_timing() -> None:
    run = synth.synth_top(KernelSpec(target="u55c", lanes=1), get_target("u55c"))
    t = run["timing"]
    assert t["path"] is not None and t["lut_levels"] >= 1 and t["combinational_loops"] == 0
    assert t["max_fanout"]["loads"] > 100 and t["unknown_cells"] == {}
    assert t["path"]["start"]["type"] and t["path"]["end"]["pin"]
    assert not any(n["net"] in t["clock_nets"] for n in t["fanout_top"])
