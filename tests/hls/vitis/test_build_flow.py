"""The build flow without the AMD tools: dry runs, tool checks, and full runs against STAND-INS.

`tests/doubles/standins/` holds test doubles named vitis_hls, vitis-run, vivado and v++. They record their
arguments, working directory and input hashes and write files in the layouts the real tools
write (csynth.xml, .xo, reports/link/imp/*.rpt, an ".xclbin"). What they write is not a
bitstream: the registry reports their ".xclbin" as "not-axlf", and these tests check that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from hashlib import sha256 as _sha256
from pathlib import Path

import pytest

from hls.generate import render
from hls.manifest import load_manifest
from hls.paths import RTL_DIR
from hls.spec import KernelSpec
from hls.targets import get_target, load_catalog
from hls.vitis import build, reports
from optimusnic.cli import main

STANDINS = Path(__file__).resolve().parents[2] / "doubles" / "standins"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
XRT_TARGETS = [k for k, t in load_catalog().items() if t.has_xrt_flow]
REQUIRED = {"hls": ("hls/run_hls.tcl", "hls/link.cfg"), "rtl": ("rtl/kernel.xml", "rtl/package_xo.tcl", "hls/link.cfg")}

# The default u55c kernel's m_axi ports: 3 stripes of p, m, v (read and write port each), grad and out.
DEFAULT_PORTS = ("grad0", *(f"{a}{i}_{d}" for a in "pmv" for i in range(3) for d in ("rd", "wr")), "out0")



def _needs_templates(kernel: str, target: str = "u55c") -> None:
    """The build flow reads files other engineers' templates render; skip until they exist."""
    files, _ = render(KernelSpec(target=target), get_target(target))
    missing = [f for f in REQUIRED[kernel] if f not in files]
    if missing:
        pytest.skip(f"templates do not render {', '.join(missing)} yet")


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Stand-in tools first on PATH, a fake installed platform per XRT target, a call log."""
    for tool in ("vitis_hls", "vitis-run", "vivado", "v++"):
        real = shutil.which(tool)
        if real and Path(real).parent != STANDINS:
            pytest.skip(f"a real {tool} is on PATH ({real}); these tests use only the stand-ins")
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "standin_calls.jsonl"
    monkeypatch.setenv("OPTIMUSNIC_STANDIN_LOG", str(log))
    platforms = tmp_path / "platforms"
    for key in XRT_TARGETS:
        name = get_target(key).platform
        (platforms / name).mkdir(parents=True)
        (platforms / name / f"{name}.xpfm").write_text("stand-in platform file for the tests\n")
    monkeypatch.setenv("PLATFORM_REPO_PATHS", str(platforms))
    monkeypatch.delenv("OPTIMUSNIC_STANDIN_FAIL", raising=False)
    monkeypatch.delenv("OPTIMUSNIC_STANDIN_WNS", raising=False)
    monkeypatch.delenv("OPTIMUSNIC_STANDIN_LOST_BURSTS", raising=False)
    return {"log": log, "platforms": platforms, "registry": tmp_path / "bitstreams", "run": tmp_path / "run"}


def sha256(data: bytes) -> str:
    return _sha256(data).hexdigest()


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


# --- dry runs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", XRT_TARGETS)
@pytest.mark.parametrize("kernel", ["hls", "rtl"])
def test_dry_run_prints_whole_flow_and_writes_nothing(target: str, kernel: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["build", "--target", target, "--kernel", kernel, "--dry-run", "-o", str(run),
                 "--registry", str(tmp_path / "reg")]) == 0
    out = capsys.readouterr().out
    t = get_target(target)
    first = ("vitis_hls -f run_hls.tcl -tclargs csynth export" if kernel == "hls"
             else "vivado -mode batch -notrace -source package_xo.tcl")
    assert first in out
    link = f"v++ -l -t hw --platform {t.platform} --config {run / 'project' / 'hls' / 'link.cfg'}"
    assert link in out
    assert out.index(first) < out.index(link)
    assert f"-o {run / 'link' / 'optimusnic_adamw.xclbin'} {run / 'project' / kernel / 'optimusnic_adamw.xo'}" in out
    assert f"{tmp_path / 'reg' / target / 'optimusnic_adamw.xclbin'}" in out
    assert f"{tmp_path / 'reg' / target / 'optimusnic_adamw.manifest.json'}" in out
    assert "timing_summary" in out and "kernel_util_routed.rpt" in out
    assert f"{run / 'project' / 'manifest.json'}" in out
    assert not run.exists() and not (tmp_path / "reg").exists()


def test_dry_run_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "u200", "--kernel", "rtl", "--dry-run", "--json", "-o", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in plan["steps"]] == ["package_xo", "link"]
    assert plan["steps"][1]["argv"][:5] == ["v++", "-l", "-t", "hw", "--platform"]
    assert plan["registry"]["xclbin"].endswith("bitstreams/u200/optimusnic_adamw.xclbin")


def test_dry_run_v80_says_what_to_run_with_amds_flow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "v80", "--dry-run", "-o", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "v++" not in out.replace("XRT/v++", "")
    assert "AMD's Versal flow" in out and "IP-catalog" in out and "AVED" in out
    assert "vitis_hls -f run_hls.tcl -tclargs csynth export" in out
    assert "vivado -mode batch -notrace -source export_ip.tcl" in out
    assert not (tmp_path / "run").exists()


def test_dry_run_shows_generated_link_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("hls")
    assert main(["build", "--target", "u280", "--lanes", "8", "--dry-run", "-o", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    files, _ = render(KernelSpec(target="u280", lanes=8), get_target("u280"))
    for line in files["hls/link.cfg"].decode().strip().splitlines():
        assert line.strip() in out


# --- tool and platform checks -----------------------------------------------------------------

def test_missing_tool_stops_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Neither HLS command installed: one line naming both, before anything is written."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if shutil.which("vitis_hls") or shutil.which("vitis-run"):
        pytest.skip("a real vitis_hls or vitis-run is installed")
    rc = main(["build", "--target", "u55c", "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "neither vitis_hls nor vitis-run found on PATH" in err[0] and "settings64.sh" in err[0]
    assert not (tmp_path / "run").exists()
    assert main(["build", "--target", "u55c", "--dry-run", "-o", str(tmp_path / "run")]) == 0
    assert "HLS tool: NOT FOUND: neither vitis_hls nor vitis-run on PATH" in capsys.readouterr().out


@pytest.fixture
def vitis_run_only(standins: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The stand-ins of a Vitis 2024.2+ install: vitis-run, vivado and v++ on PATH, no vitis_hls."""
    bin_dir = tmp_path / "vitis_2024_2_bin"
    bin_dir.mkdir()
    for tool in ("vitis-run", "vivado", "v++"):
        (bin_dir / tool).symlink_to(STANDINS / tool)
    rest = [d for d in os.environ["PATH"].split(os.pathsep) if Path(d) != STANDINS]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *rest]))
    assert shutil.which("vitis_hls") is None and shutil.which("vitis-run") == str(bin_dir / "vitis-run")
    return standins


def test_missing_platform_stops_with_one_line(standins: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PLATFORM_REPO_PATHS", str(standins["platforms"] / "nowhere"))
    rc = main(["build", "--target", "u50", "-o", str(standins["run"]), "--registry", str(standins["registry"])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "platform xilinx_u50_gen3x16_xdma_5_202210_1 is not installed" in err[0]
    assert _calls(standins["log"]) == []


# --- full runs with the stand-ins -------------------------------------------------------------

def _link_cfg_expectations(manifest: dict, name: str) -> list[str]:
    cus = manifest["spec"]["compute_units"]
    lines = [f"nk={name}:{cus}"]
    for bank in manifest["banks"]:
        for arg, expr in bank["banks"].items():
            if expr:
                lines.append(f"{name}_{bank['cu'] + 1}.{arg}:{expr}")
    return lines


def test_hls_flow_with_standins(standins: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("hls")
    reg, run = standins["registry"], standins["run"]
    rc = main(["build", "--target", "u55c", "--lanes", "4", "-o", str(run), "--registry", str(reg)])
    assert rc == 0, capsys.readouterr().err
    project = run / "project"
    manifest = load_manifest(project)
    calls = _calls(standins["log"])
    assert [c["tool"] for c in calls] == ["vitis_hls", "v++"]
    hls_call, link = calls
    assert hls_call["argv"] == ["-f", "run_hls.tcl", "-tclargs", "csynth", "export"]
    assert Path(hls_call["cwd"]) == project / "hls"
    assert hls_call["inputs"]["optimusnic_adamw.cpp"] == manifest["files"]["hls/optimusnic_adamw.cpp"]
    assert hls_call["inputs"]["script"] == manifest["files"]["hls/run_hls.tcl"]

    xpfm = standins["platforms"] / get_target("u55c").platform / f"{get_target('u55c').platform}.xpfm"
    argv = link["argv"]
    assert argv[:4] == ["-l", "-t", "hw", "--platform"] and argv[4] == str(xpfm)
    assert argv[argv.index("--config") + 1] == str(project / "hls" / "link.cfg")
    assert argv[-1] == str(project / "hls" / "optimusnic_adamw.xo")
    assert link["inputs"]["config"] == manifest["files"]["hls/link.cfg"]
    cfg = link["config_text"].replace(" ", "")
    for line in _link_cfg_expectations(manifest, "optimusnic_adamw"):
        assert line in cfg, f"{line!r} not in link.cfg"
    assert "[connectivity]" in cfg and "[clock]" in cfg

    entry = json.loads((reg / "u55c" / "optimusnic_adamw.manifest.json").read_text())
    for key in ("spec", "sizing", "register_map", "banks", "files", "target"):
        assert entry[key] == manifest[key], key
    xclbin = reg / "u55c" / "optimusnic_adamw.xclbin"
    assert entry["xclbin"]["sha256"] == build.registry.sha256_file(xclbin)
    assert entry["xclbin"]["axlf"] is False  # a stand-in's output, not an xclbin container
    s = entry["summary"]
    assert s["timing_met"] is True and s["achieved_mhz"] == 300.0 and s["wns_ns"] == 0.021
    assert s["resources"] == {"lut": 160214, "lutasmem": 12010, "reg": 201377, "bram": 61, "uram": 0, "dsp": 544}
    assert s["hls"]["top"] == "optimusnic_adamw" and s["hls"]["resources"]["dsp"] == 544
    assert {b: e["status"] for b, e in s["hls_bursts"]["ports"].items()} == {
        f"gmem_{a['name']}": "ok" for a in manifest["register_map"]["args"] if a["kind"] == "pointer"}
    # 4 lanes at 300 MHz need 1.2 G elements/s: one stripe of each array carries that
    assert len(s["hls_bursts"]["ports"]) == 8
    assert [c["step"] for c in entry["build"]["commands"]] == ["hls", "link"]
    assert (run / "report" / "summary.json").is_file() and (run / "logs" / "1-vitis_hls.log").is_file()
    assert sorted(p.name for p in (reg / "u55c" / "optimusnic_adamw.reports").iterdir()) == [
        "csynth.xml", "impl_1_hw_bb_locked_timing_summary_routed.rpt", "impl_1_kernel_util_routed.rpt",
        "optimusnic_adamw.xclbin.info"]

    capsys.readouterr()
    assert main(["bitstreams", "list", "--dir", str(reg), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["entries"]
    assert [(e["target"], e["name"], e["status"]) for e in listed] == [("u55c", "optimusnic_adamw", "not-axlf")]
    assert listed[0]["spec"]["lanes"] == 4
    assert main(["bitstreams", "verify", "--dir", str(reg)]) == 1
    assert "not an xclbin container" in capsys.readouterr().out
    xclbin.write_bytes(xclbin.read_bytes() + b"tampered")
    assert main(["bitstreams", "verify", "--dir", str(reg), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["entries"][0]["status"] == "modified"


def test_hls_flow_with_vitis_run_when_vitis_hls_is_gone(vitis_run_only: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Vitis 2024.2+ (no vitis_hls): the build runs `vitis-run --mode hls --tcl run_hls.tcl`, which runs
    the script's default steps csynth and export, says it used vitis-run, and links and registers as before."""
    reg, run = vitis_run_only["registry"], vitis_run_only["run"]
    assert main(["build", "--target", "u55c", "--lanes", "4", "--dry-run", "-o", str(run)]) == 0
    out = capsys.readouterr().out
    assert "vitis-run --mode hls --tcl run_hls.tcl" in out and "vitis_hls -f" not in out
    assert "HLS tool: vitis-run (" in out and "vitis_hls is not on PATH" in out
    assert main(["build", "--target", "u55c", "--lanes", "4", "-o", str(run), "--registry", str(reg)]) == 0
    out = capsys.readouterr().out
    assert "HLS tool: vitis-run (" in out
    calls = _calls(vitis_run_only["log"])
    assert [c["tool"] for c in calls] == ["vitis-run", "v++"]
    assert calls[0]["argv"] == ["--mode", "hls", "--tcl", "run_hls.tcl"] and calls[0]["tclargs"] == []
    assert Path(calls[0]["cwd"]) == run / "project" / "hls"
    assert (run / "project" / "hls" / "optimusnic_adamw.xo").is_file()
    assert (run / "logs" / "1-vitis-run.log").is_file()
    entry = json.loads((reg / "u55c" / "optimusnic_adamw.manifest.json").read_text())
    assert entry["build"]["commands"][0]["argv"][0] == "vitis-run"
    assert {b: e["status"] for b, e in entry["summary"]["hls_bursts"]["ports"].items()} == {
        f"gmem_{a['name']}": "ok" for a in entry["register_map"]["args"] if a["kind"] == "pointer"}


def test_vitis_hls_is_preferred_when_both_are_installed(standins: dict[str, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert shutil.which("vitis_hls") and shutil.which("vitis-run")
    assert main(["build", "--target", "u55c", "--dry-run", "-o", str(standins["run"])]) == 0
    out = capsys.readouterr().out
    assert "vitis_hls -f run_hls.tcl -tclargs csynth export" in out and "vitis-run --mode" not in out
    assert "HLS tool: vitis_hls (" in out and "found first" in out


def _make(hls_dir: Path, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", target], cwd=hls_dir, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_generated_makefile_finds_either_hls_command(standins: dict[str, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's Makefile runs vitis_hls with -tclargs, or vitis-run with the steps in
    OPTIMUSNIC_HLS_STEPS (the script reads them there), and names both when neither is on PATH."""
    project = tmp_path / "proj"
    assert main(["generate", "--target", "u55c", "--lanes", "4", "-o", str(project)]) == 0
    hls_dir = project / "hls"
    done = _make(hls_dir, "csynth")
    assert done.returncode == 0, done.stderr
    assert f"HLS tool: {STANDINS / 'vitis_hls'}" in done.stdout
    call = _calls(standins["log"])[-1]
    assert call["tool"] == "vitis_hls" and call["tclargs"] == ["csynth"]

    bin_dir = tmp_path / "only_vitis_run"
    bin_dir.mkdir()
    (bin_dir / "vitis-run").symlink_to(STANDINS / "vitis-run")
    rest = [d for d in os.environ["PATH"].split(os.pathsep) if Path(d) != STANDINS]
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *rest]))
    for target, steps in (("csim", ["csim"]), ("xo", ["export"])):
        done = _make(hls_dir, target)
        assert done.returncode == 0, done.stderr
        assert f"HLS tool: {bin_dir / 'vitis-run'}" in done.stdout
        call = _calls(standins["log"])[-1]
        assert call["tool"] == "vitis-run" and call["argv"] == ["--mode", "hls", "--tcl", "run_hls.tcl"]
        assert call["tclargs"] == steps
    assert (hls_dir / "optimusnic_adamw.xo").is_file()

    monkeypatch.setenv("PATH", os.pathsep.join(rest))
    failed = _make(hls_dir, "csynth")
    assert failed.returncode == 2
    assert "neither vitis_hls nor vitis-run found on PATH" in failed.stdout


def test_run_hls_tcl_takes_steps_from_argv_or_the_environment(tmp_path: Path) -> None:
    """run_hls.tcl under tclsh (the HLS commands stood in for): -tclargs first, else OPTIMUSNIC_HLS_STEPS
    (vitis-run passes no arguments), else csynth export; an unknown step stops it."""
    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.skip("tclsh not installed (apt-get install tcl)")
    files, _ = render(KernelSpec(target="u55c"))
    script = tmp_path / "run_hls.tcl"
    script.write_bytes(files["hls/run_hls.tcl"])
    prelude = tmp_path / "hls_standin.tcl"
    prelude.write_text(r"""
# TEST DOUBLE for the Vitis HLS Tcl commands: the four that do work print their name, the rest do nothing.
foreach c {csim_design csynth_design cosim_design export_design} {
    proc $c {args} "puts {RAN $c}"
}
proc unknown {args} { return "" }
if {[lindex $argv 0] eq "-noargs"} { unset argv }
source [file join [file dirname [info script]] run_hls.tcl]
""")

    def ran(args: list[str], env_steps: str | None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != "OPTIMUSNIC_HLS_STEPS"}
        if env_steps is not None:
            env["OPTIMUSNIC_HLS_STEPS"] = env_steps
        out = subprocess.run([tclsh, str(prelude), *args], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        return [ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("RAN ")]

    assert ran(["csim"], "csynth export") == ["csim_design"]
    assert ran([], "csim") == ["csim_design"]
    assert ran(["-noargs"], "csim cosim") == ["csim_design", "csynth_design", "cosim_design"]
    assert ran(["-noargs"], None) == ["csynth_design", "export_design"]
    bad = subprocess.run([tclsh, str(prelude), "synth"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown step 'synth'" in bad.stderr


def test_rtl_flow_with_standins(standins: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("rtl")
    reg, run = standins["registry"], standins["run"]
    rc = main(["build", "--target", "u250", "--kernel", "rtl", "--lanes", "16", "-o", str(run),
               "--registry", str(reg)])
    assert rc == 0, capsys.readouterr().err
    project = run / "project"
    manifest = load_manifest(project)
    calls = _calls(standins["log"])
    assert [c["tool"] for c in calls] == ["vivado", "v++"]
    viv = calls[0]
    assert viv["argv"][:5] == ["-mode", "batch", "-notrace", "-source", "package_xo.tcl"]
    assert viv["tclargs"] == [str(RTL_DIR), str(project / "rtl" / "optimusnic_adamw.xo")]
    assert Path(viv["cwd"]) == project / "rtl"
    assert viv["inputs"]["kernel/onic_adam_lane.v"] == sha256((RTL_DIR / "kernel" / "onic_adam_lane.v").read_bytes())
    assert viv["inputs"]["fp/fp32_mul.v"] == sha256((RTL_DIR / "fp" / "fp32_mul.v").read_bytes())
    assert viv["inputs"]["kernel.xml"] == manifest["files"]["rtl/kernel.xml"]
    assert viv["inputs"]["optimusnic_adamw.v"] == manifest["files"]["rtl/optimusnic_adamw.v"]
    assert calls[1]["argv"][-1] == str(project / "rtl" / "optimusnic_adamw.xo")
    cfg = calls[1]["config_text"].replace(" ", "")
    for line in _link_cfg_expectations(manifest, "optimusnic_adamw"):
        assert line in cfg
    entry = json.loads((reg / "u250" / "optimusnic_adamw.manifest.json").read_text())
    assert entry["build"]["kernel"] == "rtl" and entry["summary"]["hls"] is None
    assert entry["register_map"] == manifest["register_map"]


def test_v80_exports_ip_with_standins_and_registers_nothing(standins: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    files, _ = render(KernelSpec(target="v80"), get_target("v80"))
    if "versal/export_ip.tcl" not in files:
        pytest.skip("templates do not render versal/export_ip.tcl yet")
    run = standins["run"]
    assert main(["build", "--target", "v80", "-o", str(run), "--registry", str(standins["registry"])]) == 0
    out = capsys.readouterr().out
    calls = _calls(standins["log"])
    assert [c["tool"] for c in calls] == ["vitis_hls", "vivado"]
    assert calls[0]["tclargs"] == ["csynth", "export"]
    assert Path(calls[1]["cwd"]) == run / "project" / "versal"
    assert (run / "project" / "hls" / "optimusnic_adamw_ip.zip").is_file()
    assert (run / "project" / "versal" / "optimusnic_adamw_bd").is_dir()
    assert "What you must then run with AMD's V80 flow" in out
    assert not standins["registry"].exists()
    assert main(["build", "--target", "v80", "--kernel", "rtl", "--dry-run"]) == 2


def test_failed_step_names_its_log_and_registers_nothing(standins: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("hls")
    monkeypatch.setenv("OPTIMUSNIC_STANDIN_FAIL", "v++")
    rc = main(["build", "--target", "u200", "-o", str(standins["run"]), "--registry", str(standins["registry"])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "link: v++ exited with status 1" in err[0] and "2-v++_link.log" in err[0]
    assert not (standins["registry"] / "u200").exists()


def test_lost_bursts_stop_the_build_naming_the_port(standins: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """vitis_hls (stand-in) reports a lost burst on p: the build stops before the v++ link with one
    line naming the bundle and the log, and registers nothing."""
    _needs_templates("hls")
    monkeypatch.setenv("OPTIMUSNIC_STANDIN_LOST_BURSTS", "gmem_p1_wr")
    run = standins["run"]
    rc = main(["build", "--target", "u55c", "-o", str(run), "--registry", str(standins["registry"])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "did not infer AXI bursts on gmem_p1_wr (214-231" in err[0]
    assert "gmem_p0" not in err[0] and "gmem_m" not in err[0]
    assert str(run / "project" / "hls" / "vitis_hls.log") in err[0]
    assert [c["tool"] for c in _calls(standins["log"])] == ["vitis_hls"]
    assert not (standins["registry"] / "u55c").exists()


def test_burst_check_uses_the_manifest_pointer_args() -> None:
    manifest = {"register_map": {"args": [{"name": "grad", "kind": "stream"}, {"name": "p0_rd", "kind": "pointer"},
                                          {"name": "p0_wr", "kind": "pointer"}, {"name": "n", "kind": "scalar"}]}}
    assert build.hls_bundles(manifest) == ["gmem_p0_rd", "gmem_p0_wr"]
    _, manifest = render(KernelSpec())
    assert build.hls_bundles(manifest) == [f"gmem_{a}" for a in DEFAULT_PORTS]


def test_failed_timing_is_reported(standins: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("hls")
    monkeypatch.setenv("OPTIMUSNIC_STANDIN_WNS", "-0.154")
    rc = main(["build", "--target", "u280", "-o", str(standins["run"]), "--registry", str(standins["registry"])])
    assert rc == 0, capsys.readouterr().err
    entry = json.loads((standins["registry"] / "u280" / "optimusnic_adamw.manifest.json").read_text())
    assert entry["summary"]["timing_met"] is False
    assert entry["summary"]["achieved_mhz"] == pytest.approx(1000 / (3.333 + 0.154), abs=1e-3)


def test_existing_project_is_used_as_is(standins: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("hls")
    project = standins["run"].parent / "myproj"
    assert main(["generate", "--target", "u55c", "--lanes", "2", "-o", str(project)]) == 0
    assert main(["build", "--target", "u55c", "--project", str(project), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"use the generated project {project}" in out and "2 lanes" in out
    assert main(["build", "--target", "u50", "--project", str(project), "--dry-run"]) == 2
    assert "generated for target u55c, not u50" in capsys.readouterr().err


# --- report parsers on samples in the vendor formats --------------------------------------------

def test_parse_csynth_xml() -> None:
    r = reports.parse_csynth_xml(FIXTURES / "csynth.xml")
    assert r["top"] == "optimusnic_adamw" and r["part"] == "xcu55c-fsvh2892-2L-e"
    assert r["target_clock_ns"] == 3.33 and r["estimated_clock_ns"] == 2.433 and r["timing_met"] is True
    assert r["resources"] == {"bram18": 98, "dsp": 544, "ff": 187432, "lut": 154210, "uram": 0}
    assert r["latency_best_cycles"] == 112 and r["latency_worst_cycles"] is None


def test_parse_timing_summary_met_and_failed() -> None:
    met = reports.parse_timing_summary((FIXTURES / "timing_summary_met.rpt").read_text(), 300)
    assert met["timing_met"] is True and met["wns_ns"] == 0.021 and met["achieved_mhz"] == 300.0
    assert met["kernel_clock"]["name"] == "clkwiz_kernel_clk_out1"
    assert [c["name"] for c in met["clocks"]] == ["clk_pcie", "clkwiz_kernel_clk_out1", "clkwiz_kernel2_clk_out1",
                                                  "hbm_aclk"]
    failed = reports.parse_timing_summary((FIXTURES / "timing_summary_failed.rpt").read_text(), 300)
    assert failed["timing_met"] is False and failed["tns_failing_endpoints"] == 2207
    assert failed["achieved_mhz"] == pytest.approx(1000 / 3.487, abs=1e-3)
    # Without a matching clock the design WNS bounds the achieved clock.
    other = reports.parse_timing_summary((FIXTURES / "timing_summary_failed.rpt").read_text(), 250)
    assert other["kernel_clock"] is None and other["achieved_mhz"] == pytest.approx(1000 / 4.154, abs=1e-3)


def test_parse_kernel_util() -> None:
    r = reports.parse_kernel_util((FIXTURES / "impl_1_kernel_util_routed.rpt").read_text())
    assert r["platform"]["lut"] == 165475 and r["user_budget"]["dsp"] == 9020
    assert list(r["kernels"]) == ["optimusnic_adamw", "optimusnic_adamw_1"]
    assert r["kernels"]["optimusnic_adamw"]["reg"] == 201377


def test_summarize_link_without_reports_says_what_is_missing(tmp_path: Path) -> None:
    s = reports.summarize_link(tmp_path, "k", 300)
    assert s["timing"] is None and s["resources"] is None and s["reports"] == {}


# --- stream-source kernels: the gradient stream must be connected ----------------------------

def test_stream_kernel_without_a_connection_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Linked with nothing on its gradient stream the kernel would wait forever: build says what to pass."""
    _needs_templates("hls")
    rc = main(["build", "--target", "u55c", "--grad-source", "stream", "-o", str(tmp_path / "run"), "--dry-run"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "nothing is connected to optimusnic_adamw_1.grad" in err and "--stream-connect <kernel>.<port>" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_stream_connect_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_templates("hls")
    base = ["build", "--target", "u55c", "-o", str(tmp_path / "run"), "--dry-run"]
    assert main([*base, "--stream-connect", "net_1.out"]) != 0  # a memory kernel has no stream
    assert "reads its gradients from memory" in capsys.readouterr().err
    assert main([*base, "--grad-source", "stream", "--stream-connect", "net_1"]) != 0
    assert "expected <kernel>.<port>" in capsys.readouterr().err
    assert main([*base, "--grad-source", "stream", "--stream-connect", "a.b", "--stream-connect", "c.d"]) != 0
    assert "2 given, 1 gradient stream(s)" in capsys.readouterr().err


def test_stream_kernel_with_standins_links_the_connection(standins: dict[str, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--stream-connect goes into the run's link.cfg (the verified project's stays as generated) and v++ gets it."""
    _needs_templates("hls")
    reg, run = standins["registry"], standins["run"]
    rc = main(["build", "--target", "u55c", "--grad-source", "stream", "--stream-connect", "net_1.grad_out",
               "-o", str(run), "--registry", str(reg)])
    assert rc == 0, capsys.readouterr().err
    manifest = load_manifest(run / "project")
    link = [c for c in _calls(standins["log"]) if c["tool"] == "v++"][0]
    config = Path(link["argv"][link["argv"].index("--config") + 1])
    assert config == run / "link" / "link.cfg"
    cfg = link["config_text"].replace(" ", "")
    assert "stream_connect=net_1.grad_out:optimusnic_adamw_1.grad" in cfg.splitlines()
    for line in _link_cfg_expectations(manifest, "optimusnic_adamw"):
        assert line in cfg, f"{line!r} not in link.cfg"
    project_cfg = (run / "project" / "hls" / "link.cfg").read_bytes()
    assert sha256(project_cfg) == manifest["files"]["hls/link.cfg"]
    assert b"\nstream_connect=" not in project_cfg
