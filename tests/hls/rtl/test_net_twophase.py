"""The two-phase step's card-memory side in RTL (sim/rtl/net/onic_net_twophase.v: the owner's
reduced chunk to card memory with its sum of squares, the scalar exchange, the chunk back as the
Adam kernel's gradient stream) against a ring of hls.net.card.Card in a two-phase step (cocotb
bench sim/tb/net/test_onic_net_twophase.py, cocotbext-axi memory, the AXI monitor). Verilator,
fp32 N = 2, 3 at every rank; bf16 and N up to 5 marked slow.
"""

from __future__ import annotations

import pytest

from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import simulators
from hls.rtl_sources import read_filelist

WIRES = {"fp32": 0, "bf16": 1}


def run(wire: str, worlds: str, seed: int, tag: str) -> None:
    if not simulators.available("verilator"):
        pytest.skip("verilator not installed")
    xml = simulators.run_cocotb(
        sources=read_filelist(RTL_DIR / "net" / "net_twophase.f"), toplevel="onic_net_twophase",
        test_module="test_onic_net_twophase", test_dir=TB_DIR / "net",
        build_dir=BUILD_DIR / "sim" / "net" / f"onic_net_twophase-{wire}-verilator", simulator="verilator",
        parameters={"WIRE_BF16": WIRES[wire], "WR_FIFO_LOG2": 5, "RD_FIFO_LOG2": 5, "MAX_BURST": 8},
        extra_env={"ONIC_WORLDS": worlds, "ONIC_SEED": str(seed), "ONIC_WIRE": wire},
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 1 and failed == 0, f"onic_net_twophase ({tag}): see {xml}"


@pytest.mark.slow  # 56 s: make test budget; the blocks run by default inside the network kernel and the card
def test_twophase() -> None:
    run("fp32", "2,3", 11, "default")


@pytest.mark.slow
@pytest.mark.parametrize("wire", sorted(WIRES))
def test_twophase_sweep(wire: str) -> None:
    run(wire, "2,3,4,5", 12, "sweep")
