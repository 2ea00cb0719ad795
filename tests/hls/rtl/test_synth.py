"""Resource and timing estimates with Debian's yosys: cell mapping, caching, fit checks, LUT levels
and fan-out, real synthesis runs.

The default run synthesizes one small FP unit and a small fixture (tests/fixtures/synth/lut_chain.v,
a known LUT depth and fan-out) in seconds each; the kernel top at 2 lanes with its lanes stubbed
(about two minutes) to check the 16-lane method, the kernel at 1 lane (one lane plus the top, about
4 minutes), the full 4- and 16-lane tops and the real 16-lane timing rows are behind the `slow` marker
(and in `make bench`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
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


def _ports(sources: list[Path], top: str, params: dict[str, int], tmp_path: Path) -> dict[str, tuple[str, int]]:
    """A module's ports (direction, width) as yosys elaborates them: no synthesis, seconds."""
    out = tmp_path / f"{top}.json"
    chparam = " ".join(f"-chparam {k} {v}" for k, v in params.items())
    script = f"read_verilog -defer {' '.join(map(str, sources))}; hierarchy -top {top} {chparam}; proc; " \
             f"write_json {out}"
    subprocess.run([synth.yosys_bin(), "-q", "-p", script], check=True, capture_output=True, timeout=300)
    mods = json.loads(out.read_text())["modules"].values()
    mod = next(m for m in mods if int(str(m.get("attributes", {}).get("top", "0")), 2))
    return {n: (p["direction"], len(p["bits"])) for n, p in mod["ports"].items()}


@needs_yosys
@pytest.mark.parametrize("grad_fmt", [0, 1, 2])
def test_lane_stub_has_the_lanes_ports(grad_fmt: int, tmp_path: Path) -> None:
    # The stub stands in for the lane in the 16-lane synthesis: same ports, directions and widths.
    fp = [f for f in rtl_sources.static_sources() if f.parent.name == "fp"]
    lane = RTL_DIR / "kernel" / "onic_adam_lane.v"
    params = {"ADAMW": 1, "GRAD_FMT": grad_fmt, "OUT_BF16": int(grad_fmt == 1), "TAG_WIDTH": 1}
    want = _ports([*fp, lane], "onic_adam_lane", params, tmp_path)
    assert _ports([rtl_sources.LANE_STUB], "onic_adam_lane_stub", params, tmp_path) == want
    assert {"clk", "rst", "gs", "in_grad", "out_y", "out_tag"} <= set(want)


def test_lane_stub_is_in_no_simulation_file_list() -> None:
    listed = {f.resolve() for flist in rtl_sources.FILELISTS for f in rtl_sources.read_filelist(flist)}
    assert rtl_sources.LANE_STUB.is_file() and rtl_sources.LANE_STUB.resolve() not in listed
    assert rtl_sources.LANE_STUB.parent != rtl_sources.KERNEL_RTL
    core = (rtl_sources.KERNEL_RTL / "onic_adam_core.v").read_text()
    assert f"`ifdef {rtl_sources.LANE_STUB_DEFINE}" in core and "onic_adam_lane_stub" in core


def _stub_lane_as_lane(kernel: dict, lanes: int) -> dict:
    """The stub's own figures as if it were the lane alone: one load per input bit, none inside, all
    paths zero levels (what the stub is by construction)."""
    box_ports = {"clk": 1, "rst": 1, **{n: 32 for n in ("gs", "wd", "b1", "omb1", "b2", "omb2", "rbc2", "eps",
                                                          "step_size", "in_grad", "in_p", "in_m", "in_v",
                                                          "out_p", "out_m", "out_v", "out_y")},
                 "in_valid": 1, "in_tag": 1, "out_valid": 1, "out_tag": 1}
    loads = {p: [0 if p.startswith("out") else 1] * w for p, w in box_ports.items()}
    return {"unit": "stub", "top": "onic_adam_lane_stub", "seconds": 0, "cached": True, "key": "k",
            "timing": {"lut_levels": 0, "port_loads": loads, "max_internal_fanout": None, "carry_bits": 0,
                       "dsp_cascade": 0, "dsp_on_path": 0,
                       "io_paths": {"in_to_reg": {"lut_levels": 0}, "reg_to_out": {"lut_levels": 0},
                                    "in_to_out": None}}}


@pytest.mark.slow  # about two minutes of yosys in a loaded run
@needs_yosys
def test_kernel_with_stubbed_lanes_composes_real_lane_loads(tmp_path: Path) -> None:
    """The method at 2 lanes and one stripe per array (about a minute of yosys): the top with its lanes
    stubbed, composed with a lane.

    Composed with the stub's own figures (one load per input bit), every net at a lane port carries
    one load per lane it reaches on top of the kernel's; composed with a lane that loads each bit of
    gs 600 times, the scalar register behind gs carries 2 x 600 and fails the 1,000-load goal, named."""
    spec = KernelSpec(target="u55c", lanes=2, stripes=1)
    top = synth.synth_top(spec, get_target("u55c"), cache_dir=tmp_path, lane_stub=True)
    t = top["timing"]
    assert top["defines"] == [rtl_sources.LANE_STUB_DEFINE] and t["box_src"] == rtl_sources.LANE_STUB.name
    box = t["box"]
    # One register per element input bit of each stub (the two stubs' scalar registers see the same
    # inputs and may be merged: the composition counts port pins, not stub cells).
    assert box["cells"] >= 9 * 32 + 2 * 3 * 32
    in_p = [n for n in box["nets"] if any(pin.startswith("in_p[") for pin in n["ports"])]
    assert len(in_p) > 48 and all(n["box_loads"] == 1 and not n["box_driven"] for n in in_p)
    gs0 = next(n for n in box["nets"] if n["ports"].get("gs[0]") == 2)
    assert gs0["net"].startswith("gs_reg") and gs0["box_loads"] in (1, 2)
    # The lanes' inputs come from registers, their outputs go to registers: no logic into a lane.
    assert box["into_box"]["lut_levels"] == 0 and box["from_box"] is not None and box["box_to_box"] is None
    stub = _stub_lane_as_lane(top, 2)
    same = timing_report.compose(top, stub, spec, "u55c")
    kernel_loads = {n["net"]: n["loads"] - n["box_loads"] for n in box["nets"]}
    lane_pins = {n["net"]: sum(c for pin, c in n["ports"].items() if pin.split("[")[0] in stub["timing"]["port_loads"]
                               and not pin.startswith(("out", "clk"))) for n in box["nets"]}
    expect = {net: kernel_loads[net] + lane_pins[net] for net in kernel_loads}
    assert same["max_fanout"] == max([*expect.values(), *(n for k, n in t["large_nets"].items() if k not in expect)])
    assert same["lut_levels"] == max(t["lut_levels"], box["from_box"]["lut_levels"])
    heavy = _stub_lane_as_lane(top, 2)
    heavy["timing"]["port_loads"]["gs"] = [600] * 32
    over = timing_report.compose(top, heavy, spec, "u55c")
    assert over["max_fanout"] == kernel_loads[gs0["net"]] + 2 * 600 and over["max_fanout_net"].startswith("gs_reg")
    assert not over["fanout_met"] and not over["met"] and len(over["nets_over_goal"]) == 32
    # A lane path from input to register adds to the kernel's side of the crossing.
    deep = _stub_lane_as_lane(top, 2)
    deep["timing"]["io_paths"]["in_to_reg"] = {"lut_levels": 7}
    assert timing_report.compose(top, deep, spec, "u55c")["lut_levels"] == 7


def test_limits_catch_a_1001_load_net_a_long_carry_and_a_dsp_cascade() -> None:
    assert timing.judge(6, 1000, 64, 2)["met"]
    assert not timing.judge(6, 1001)["fanout_met"] and not timing.judge(7, 0)["lut_levels_met"]
    assert not timing.judge(0, 0, carry_bits=65)["carry_met"] and not timing.judge(0, 0, dsp_cascade=3)["dsp_met"]


def test_dsp_cascade_and_carry_bits_are_counted_on_the_netlist() -> None:
    dsp_dirs = {"A": "input", "PCIN": "input", "CLK": "input", "P": "output", "PCOUT": "output"}
    carry_dirs = {"CI": "input", "S": "input", "DI": "input", "O": "output", "CO": "output"}
    cells = {
        "a_reg": _fd(3, 10),
        "d0": _cell("DSP48E2", {"A": [10], "PCIN": ["0"], "CLK": [2], "P": [11], "PCOUT": [12]}, dsp_dirs, MREG=1),
        "d1": _cell("DSP48E2", {"A": [10], "PCIN": [12], "CLK": [2], "P": [13], "PCOUT": [14]}, dsp_dirs, MREG=1),
        "d2": _cell("DSP48E2", {"A": [10], "PCIN": [14], "CLK": [2], "P": [15], "PCOUT": [16]}, dsp_dirs, MREG=1),
        "c0": _cell("CARRY8", {"CI": ["0"], "S": [10], "DI": [10], "O": [20], "CO": [21]}, carry_dirs),
        "c1": _cell("CARRY4", {"CI": [21], "S": [10], "DI": [10], "O": [22], "CO": [23]}, carry_dirs),
        "s_reg": _fd(22, 30),
    }
    t = timing.analyze(_netlist(cells, {"a": 10, "o": 22, "q": 30}))
    assert t["dsp_cascade"] == 3 and t["carry_bits"] == 12 and t["lut_levels"] == 0
    assert not t["dsp_met"] and t["carry_met"]


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
    assert "| lut_chain | 5 | 32/0 | FDRE din_q" in md and "every row met" in md


@needs_yosys
def test_synth_cli_cached_rows_starts_no_yosys_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing cached: the row is named as not synthesized, and no yosys run leaves a work folder.
    monkeypatch.setattr(synth, "SYNTH_DIR", tmp_path)
    monkeypatch.setattr(rtl_sources, "static_sources", lambda: [FIXTURE])
    assert main(["synth", "--target", "u55c", "--timing", "--no-kernel", "--cached-rows", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["units"] == [] and rep["not_run"] == ["lut_chain"] and not (tmp_path / "work").exists()
    assert main(["synth", "--target", "u55c", "--timing", "--no-kernel", "--json"]) == 0  # runs yosys, caches
    capsys.readouterr()
    assert main(["synth", "--target", "u55c", "--timing", "--no-kernel", "--cached-rows"]) == 0
    text = capsys.readouterr().out
    assert "lut_chain" in text and "not synthesized yet" not in text
    assert main(["synth", "--target", "u55c", "--cached-rows"]) == 2


@needs_yosys
@pytest.mark.slow
def test_kernel_top_1_lane_timing() -> None:
    run = synth.synth_top(KernelSpec(target="u55c", lanes=1), get_target("u55c"))
    t = run["timing"]
    assert t["path"] is not None and t["lut_levels"] >= 1 and t["combinational_loops"] == 0
    assert t["max_fanout"]["loads"] > 100 and t["unknown_cells"] == {}
    assert t["path"]["start"]["type"] and t["path"]["end"]["pin"]
    assert not any(n["net"] in t["clock_nets"] for n in t["fanout_top"])


@needs_yosys
@pytest.mark.slow
@pytest.mark.parametrize(("grad", "out"), [("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp32")])
def test_16_lane_kernel_meets_the_timing_goal(grad: str, out: str) -> None:
    """The real 16-lane U55C kernel (lanes stubbed, composed with the lane alone; minutes each, cached)."""
    spec = KernelSpec(target="u55c", grad_dtype=grad, out_dtype=out, lanes=16)
    r = timing_report.kernel_row(spec, get_target("u55c"))
    assert r["met"], {k: r[k] for k in ("lut_levels", "levels_parts", "max_fanout_net", "max_fanout",
                                        "nets_over_goal", "carry_bits", "dsp_cascade")}


def test_timing_flags_without_timing_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--target", "u55c", "--matrix"]) == 2
    assert "--matrix only go with --timing" in capsys.readouterr().err


@needs_yosys
def test_net_rows_through_the_report_and_markdown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The network kernel rows (a whole top from a .f list, with its resources), here over the fixture.
    flist = tmp_path / "fixture.f"
    flist.write_text(f"{FIXTURE}\n")
    monkeypatch.setattr(timing_report, "NET_UNITS", (("lut_chain (fixture)", flist, "lut_chain",
                                                      {"STAGES": 5, "FANOUT": 64}),))
    monkeypatch.setattr(rtl_sources, "static_sources", lambda: [FIXTURE])
    rep = timing_report.report(KernelSpec(), get_target("u55c"), units=False, kernel=False, net=True,
                               cache_dir=tmp_path)
    (row,) = rep["net"]
    assert row["unit"] == "lut_chain (fixture)" and row["lut_levels"] == 5 and row["resources"]["ff"] > 0
    assert rep["met"]
    header, rows = timing_report.net_table_rows(rep)
    assert header[:2] == ["network kernel", "LUT levels"] and "URAM" in header and rows[0][0] == row["unit"]
    md = "\n".join(timing_report.markdown(rep))
    assert "| network kernel | LUT levels |" in md and "| lut_chain (fixture) | 5 |" in md


def test_top_defaults_set_by_a_copy_of_the_top(tmp_path: Path) -> None:
    """The network kernel's bf16 row: its parameters set as the top's defaults in a copy of its source (yosys
    0.23 aborts on `hierarchy -chparam` of that top); the other sources untouched, an unknown name refused."""
    other = tmp_path / "other.v"
    other.write_text("module other; endmodule\n")
    copies = synth.with_defaults([other, FIXTURE], "lut_chain", {"STAGES": 3}, tmp_path / "src")
    assert copies[0] == other and copies[1] == tmp_path / "src" / FIXTURE.name
    text = copies[1].read_text()
    assert "parameter integer STAGES = 3," in text and "parameter integer FANOUT = 64" in text
    assert FIXTURE.read_text().count("STAGES = 5") == 1
    with pytest.raises(synth.UserError, match="no parameter integer NOPE"):
        synth.with_defaults([FIXTURE], "lut_chain", {"NOPE": 1}, tmp_path / "src")
    with pytest.raises(synth.UserError, match="no source defines module absent"):
        synth.with_defaults([FIXTURE], "absent", {"STAGES": 1}, tmp_path / "src")
    units = dict((label, params) for label, _f, _t, params in timing_report.NET_UNITS)
    assert units["onic_net_kernel (bf16, deployable buffers)"] == {"WIRE_BF16": 1, "PARAM_BF16": 1}


@needs_yosys
def test_top_defaults_synthesize_like_chparam(tmp_path: Path) -> None:
    """The fixture with STAGES = 3 through a copy of its source: the same LUT depth as `-chparam STAGES 3`."""
    by_copy = synth.synth_module([FIXTURE], "lut_chain", cache_dir=tmp_path, top_defaults={"STAGES": 3, "FANOUT": 8})
    by_chparam = synth.synth_module([FIXTURE], "lut_chain", {"STAGES": 3, "FANOUT": 8}, cache_dir=tmp_path)
    assert by_copy["params"] == {"STAGES": 3, "FANOUT": 8} and by_copy["key"] != by_chparam["key"]
    assert by_copy["timing"]["lut_levels"] == by_chparam["timing"]["lut_levels"] == 3
    assert by_copy["resources"] == by_chparam["resources"]
