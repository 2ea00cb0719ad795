"""The ring protocol's receive path (sim/rtl/net/onic_net_rx*.v), bit-exact against hls.net.

- cocotb (sim/tb/net/test_onic_net_rx.py) on Verilator, and marked `icarus` on Icarus: random
  seeded traffic (loss, duplicates, reordering per flow, damaged and foreign frames, steps moving
  on) against hls.net.wire / hls.net.reliability; a stalled downstream drops whole frames.
- Lint: every onic_net_rx*.v under `verilator --lint-only -Wall` and Icarus `-g2005`.
- yosys synth_xilinx: the parser and the verdict within the LUT-level and fan-out goals, the frame
  buffer in block RAM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hls.paths import BUILD_DIR, REPO_ROOT, RTL_DIR
from hls.rtl import netlist as timing
from hls.rtl import simulators, synth, timing_report
from hls.rtl_sources import read_filelist

NET_RTL = RTL_DIR / "net"
NET_TB = REPO_ROOT / "sim" / "tb" / "net"
RX_LIST = NET_RTL / "net_rx.f"
PARAMS = {"PAYLOAD_DEPTH_LOG2": 5, "SLOT_LOG2": 3, "FRAME_BEATS": 4}


def _run(simulator: str, frames: int, seed: int = 11,
         params: dict[str, int] = PARAMS) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    xml = simulators.run_cocotb(
        sources=read_filelist(RX_LIST), toplevel="onic_net_rx", test_module="test_onic_net_rx", test_dir=NET_TB,
        build_dir=BUILD_DIR / "sim" / "net" / f"rx-{simulator}-{params['PAYLOAD_DEPTH_LOG2']}-{params['SLOT_LOG2']}",
        simulator=simulator, parameters=params,
        extra_env={"ONIC_SEED": str(seed), "ONIC_FRAMES": str(frames), **{k: str(v) for k, v in params.items()}},
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 4 and failed == 0, f"onic_net_rx on {simulator}: see {xml}"


def test_net_rx_verilator() -> None:
    _run("verilator", frames=600)


@pytest.mark.icarus
def test_net_rx_icarus() -> None:
    _run("icarus", frames=150)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_net_rx_verilator_sweep(seed: int) -> None:
    _run("verilator", frames=4000, seed=seed)


@pytest.mark.slow
def test_net_rx_verilator_defaults() -> None:
    """The module's default sizes: 1024-beat payload RAM, 32 slots, 1408-byte (22-beat) payloads."""
    _run("verilator", frames=1500, seed=5,
         params={"PAYLOAD_DEPTH_LOG2": 10, "SLOT_LOG2": 5, "FRAME_BEATS": 22})


def _rx_files() -> list[Path]:
    return sorted(NET_RTL.glob("onic_net_rx*.v"))


@pytest.mark.parametrize("module_file", _rx_files(), ids=lambda p: p.stem)
def test_rx_verilator_lint(module_file: Path) -> None:
    if not simulators.available("verilator"):
        pytest.skip("Verilator not installed")
    env = {**os.environ, **simulators.simulator_env("verilator")}
    cmd = [simulators.verilator_bin(), "--lint-only", "-Wall", "--top-module", module_file.stem,
           *map(str, read_filelist(RX_LIST))]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "%Warning" not in output and "%Error" not in output, output


@pytest.mark.icarus
@pytest.mark.parametrize("module_file", _rx_files(), ids=lambda p: p.stem)
def test_rx_icarus_accepts(module_file: Path, tmp_path: Path) -> None:
    iverilog = shutil.which("iverilog")
    if not iverilog:
        pytest.skip("Icarus not installed")
    cmd = [iverilog, "-g2005", "-Wall", "-o", str(tmp_path / "out.vvp"), "-s", module_file.stem,
           *map(str, read_filelist(RX_LIST))]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "warning" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr


@pytest.mark.parametrize(("module", "params"), [
    ("onic_net_rx_parse", {}),
    ("onic_net_rx_seq", {"SLOT_LOG2": 5}),
    ("onic_net_rx_fifo", {"DEPTH_LOG2": 10}),
], ids=["parse", "seq", "fifo1024"])
def test_rx_timing_shape(module: str, params: dict[str, int], tmp_path: Path) -> None:
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed (make deps-yosys)")
    files = [NET_RTL / "onic_net_csum_beat.v"] if module == "onic_net_rx_parse" else []  # the UDP checksum's tree
    run = synth.synth_module([*files, NET_RTL / f"{module}.v"], module, params, cache_dir=tmp_path, use_cache=False)
    report = timing_report.row(run)
    print(module, {k: report[k] for k in ("lut_levels", "max_fanout_net", "max_fanout")})
    assert report["lut_levels"] <= timing.GOAL_LUT_LEVELS, report
    assert report["max_fanout"] <= timing.GOAL_MAX_FANOUT, report
    if module == "onic_net_rx_fifo":
        assert any(c.startswith(("RAMB", "URAM")) for c in run["cells"]), f"not in block RAM: {run['cells']}"


@pytest.mark.slow
def test_rx_top_timing_shape(tmp_path: Path) -> None:
    """The whole receive path at its defaults (1024-beat payload buffer, 32 slots)."""
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed (make deps-yosys)")
    run = synth.synth_module(read_filelist(RX_LIST), "onic_net_rx", {}, cache_dir=tmp_path, use_cache=False)
    report = timing_report.row(run)
    print({k: report[k] for k in ("lut_levels", "max_fanout_net", "max_fanout")}, run["cells"])
    assert report["lut_levels"] <= timing.GOAL_LUT_LEVELS, report
    assert report["max_fanout"] <= timing.GOAL_MAX_FANOUT, report
    assert any(c.startswith(("RAMB", "URAM")) for c in run["cells"]), f"not in block RAM: {run['cells']}"
