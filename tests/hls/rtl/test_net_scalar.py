"""The two-phase step's scalar exchange in RTL (sim/rtl/net/onic_net_scalar.v, README.md
"Two-phase step") against a ring of hls.net.card.Card in a two-phase step: the scalar frames'
descriptors and payload bytes one card sends, its table of every rank's entry, protocol errors
(cocotb bench sim/tb/net/test_onic_net_scalar.py). Icarus (N = 2, 3, marked `icarus`) by
default; Verilator N = 2, 3, 4 and N up to 8 marked slow (test_net_twophase runs the block on
Verilator by default).
"""

from __future__ import annotations

import pytest

from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import simulators


def run(simulator: str, worlds: str, seed: int, tag: str) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    xml = simulators.run_cocotb(
        sources=[RTL_DIR / "net" / "onic_net_scalar.v"], toplevel="onic_net_scalar",
        test_module="test_onic_net_scalar", test_dir=TB_DIR / "net",
        build_dir=BUILD_DIR / "sim" / "net" / f"onic_net_scalar-{tag}-{simulator}", simulator=simulator,
        extra_env={"ONIC_WORLDS": worlds, "ONIC_SEED": str(seed)},
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 1 and failed == 0, f"onic_net_scalar ({tag}, {simulator}): see {xml}"


@pytest.mark.slow  # onic_net_twophase's default test runs this block on Verilator (N = 2, 3)
def test_scalar() -> None:
    run("verilator", "2,3,4", 3, "default")


@pytest.mark.icarus
def test_scalar_icarus() -> None:
    run("icarus", "2,3", 4, "default")


@pytest.mark.slow
def test_scalar_sweep() -> None:
    run("verilator", "2,3,4,5,6,7,8", 5, "sweep")
