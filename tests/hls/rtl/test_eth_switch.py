"""The cocotb bench models for ring simulations (sim/tb/models/eth_switch.py, soft_peer.py,
eth_port.py), run by sim/tb/net/test_eth_switch.py on Verilator (top: sim/tb/net/eth_port_loop.v):
rings of software peers through the seeded switch bit-exact against hls.net.ring, counters
reconciled and repeatable; the RTL port adapters in loopback (beats, TKEEP, TUSER on a bit flip,
a transmit underflow flagged).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hls.paths import BUILD_DIR, REPO_ROOT
from hls.rtl import simulators

NET_TB = REPO_ROOT / "sim" / "tb" / "net"
TOP = NET_TB / "eth_port_loop.v"
TESTS = ("ring_lossless", "ring_two_phase", "ring_drop", "ring_faults", "ring_buffer_limit", "ring_same_seed",
         "port_loopback", "port_bitflip", "port_tx_underflow")


def _run(simulator: str, seed: int = 1,
         testcase: tuple[str, ...] = TESTS) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    xml = simulators.run_cocotb(
        sources=[TOP], toplevel="eth_port_loop", test_module="test_eth_switch", test_dir=NET_TB,
        build_dir=BUILD_DIR / "sim" / "net" / f"eth-switch-{simulator}", simulator=simulator,
        extra_env={"ONIC_SEED": str(seed)}, testcase=list(testcase),
    )
    ran, failed = simulators.check_results(xml)
    assert ran == len(testcase) and failed == 0, f"eth switch bench on {simulator}: see {xml}"


def test_eth_switch_verilator() -> None:
    _run("verilator")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_eth_switch_verilator_seeds(seed: int) -> None:
    _run("verilator", seed=seed)


@pytest.mark.icarus
def test_eth_switch_icarus_ports() -> None:
    _run("icarus", testcase=("ring_lossless", "port_loopback", "port_bitflip", "port_tx_underflow"))


def test_eth_port_loop_lint() -> None:
    if not simulators.available("verilator"):
        pytest.skip("Verilator not installed")
    env = {**os.environ, **simulators.simulator_env("verilator")}
    proc = subprocess.run([simulators.verilator_bin(), "--lint-only", "-Wall", str(TOP)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "%Warning" not in output and "%Error" not in output, output


@pytest.mark.icarus
def test_eth_port_loop_icarus_accepts(tmp_path: Path) -> None:
    iverilog = shutil.which("iverilog")
    if not iverilog:
        pytest.skip("Icarus not installed")
    proc = subprocess.run([iverilog, "-g2005", "-Wall", "-o", str(tmp_path / "out.vvp"), str(TOP)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "warning" not in (proc.stdout + proc.stderr).lower(), proc.stdout + proc.stderr
