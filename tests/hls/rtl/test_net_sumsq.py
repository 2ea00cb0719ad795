"""The two-phase step's sum of squares in RTL (sim/rtl/net/onic_net_sumsq.v, README.md
"Two-phase step") against hls.net.ring.chunk_scalars, bit for bit, in a cocotb bench
(sim/tb/net/test_onic_net_sumsq.py): fp32 and bf16 wires, chunks of every magnitude, subnormals,
zeros, ties, inf and NaN, random idle clocks. Its float64 units (fp64_add, fp32_sq_f64) are
checked against numpy in test_fp_units. Icarus (fp32, marked `icarus`) by default; Verilator fp32
and bf16 and more chunks slow (test_net_twophase runs the block on Verilator by default); yosys
shapes of the two-phase blocks (fp64_add, fp32_sq_f64, onic_net_scalar, onic_net_sumsq) slow.
"""

from __future__ import annotations

import shutil

import pytest

from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import netlist as timing
from hls.rtl import simulators, synth, timing_report

FP = RTL_DIR / "fp"
SOURCES = [FP / "fp_delay.v", FP / "fp_lzc.v", FP / "fp64_add.v", FP / "fp32_sq_f64.v",
           RTL_DIR / "net" / "onic_net_sumsq.v"]
WIRES = {"fp32": 0, "bf16": 1}


def run(wire: str, simulator: str, chunks: int, seed: int) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    xml = simulators.run_cocotb(
        sources=SOURCES, toplevel="onic_net_sumsq", test_module="test_onic_net_sumsq", test_dir=TB_DIR / "net",
        build_dir=BUILD_DIR / "sim" / "net" / f"onic_net_sumsq-{wire}-{simulator}", simulator=simulator,
        parameters={"WIRE_BF16": WIRES[wire]},
        extra_env={"ONIC_WIRE": wire, "ONIC_SEED": str(seed), "ONIC_CHUNKS": str(chunks)},
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 1 and failed == 0, f"onic_net_sumsq ({wire}, {simulator}): see {xml}"


# Verilator builds of this block cost ~30 s of CPU each: by default the block runs on Icarus here
# and on Verilator inside test_net_twophase; these with --full
@pytest.mark.slow
@pytest.mark.parametrize("wire", sorted(WIRES))
def test_sumsq(wire: str) -> None:
    run(wire, "verilator", 28, 5)


@pytest.mark.icarus
def test_sumsq_icarus() -> None:
    run("fp32", "icarus", 6, 6)


@pytest.mark.slow
@pytest.mark.parametrize("wire", sorted(WIRES))
def test_sumsq_sweep(wire: str) -> None:
    run(wire, "verilator", 300, 7)


SYNTH_SOURCES = [*SOURCES, RTL_DIR / "net" / "onic_net_scalar.v"]


@pytest.mark.slow
@pytest.mark.parametrize(("module", "params"), [
    ("fp64_add", {"STALL": 0}),
    ("fp32_sq_f64", {"STALL": 0}),
    ("onic_net_scalar", {}),
    ("onic_net_sumsq", {"WIRE_BF16": 0}),
])
def test_two_phase_blocks_timing_shape(module: str, params: dict[str, int]) -> None:
    """yosys synth_xilinx (UltraScale+): <= 6 LUT levels, no non-clock net above 1,000 loads."""
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed")
    report = timing_report.row(synth.synth_module(SYNTH_SOURCES, module, params))
    assert report["lut_levels"] <= timing.GOAL_LUT_LEVELS, report
    assert report["max_fanout"] <= timing.GOAL_MAX_FANOUT, report
