"""The elastic RTL datapath: credits under back-pressure, and the timing shape.

- onic_adam_core alone (sim/tb/kernel/test_onic_adam_core.py): four input streams with random
  gaps, output readys that drop at random and in stretches longer than the output FIFOs hold;
  bit-exact against hls/golden.py, and the vectors inside never exceed the FIFO depth.
- yosys synth_xilinx (UltraScale+) on the small units every AXI port and FIFO uses: at most 6
  LUT levels between registers, no net but the clock above 1,000 loads, the FIFO in block RAM.
- `--full`: the generated kernel top at 1 lane through yosys: no non-clock net above 1,000
  loads (hls/rtl/netlist.py over the yosys netlist, as `optimusnic synth --timing`; LUT levels printed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hls.paths import BUILD_DIR, RTL_DIR
from hls.rtl import bench_runner as rtlsim
from hls.rtl import netlist as timing
from hls.rtl import simulators, synth, timing_report
from hls.rtl_sources import CORE_MODULE, FP_UNITS_LIST, KERNEL_RTL, read_filelist
from hls.spec import KernelSpec
from hls.targets import get_target

MAX_FANOUT = timing.GOAL_MAX_FANOUT
MAX_LUT_LEVELS = timing.GOAL_LUT_LEVELS


def _yosys() -> None:
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed (make deps-yosys)")


@pytest.mark.parametrize("lanes", [2])
def test_core_backpressure_bit_exact(lanes: int) -> None:
    simulator = "verilator" if simulators.available("verilator") else "icarus"
    core = ("onic_fifo.v", "onic_dup_reg.v", "onic_adam_lane.v", "onic_adam_core.v")
    sources = read_filelist(FP_UNITS_LIST) + [KERNEL_RTL / f for f in core]
    xml = simulators.run_cocotb(
        sources=sources, toplevel=CORE_MODULE, test_module="test_onic_adam_core", test_dir=rtlsim.KERNEL_TB,
        build_dir=BUILD_DIR / "sim" / "kernel" / f"adam_core-{lanes}-{simulator}", simulator=simulator,
        parameters={"LANES": lanes, "ADAMW": 1, "GRAD_FMT": 0, "OUT_BF16": 0},
        extra_env={"LANES": str(lanes), "ONIC_SEED": "7", "ONIC_VECTORS": "600"},
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 1 and failed == 0, f"onic_adam_core LANES={lanes} under back-pressure: see {xml}"


@pytest.mark.parametrize(("module", "params"), [
    ("onic_fifo", {"WIDTH": 512, "DEPTH_LOG2": 8}),   # the read and write engines' beat FIFOs
    ("onic_fifo", {"WIDTH": 513, "DEPTH_LOG2": 8}),   # the core's output FIFO (p and the last mark)
    ("onic_skid", {"WIDTH": 577}),                    # the W channel and stream register slices
], ids=["fifo512", "fifo513", "skid577"])
def test_unit_timing_shape(module: str, params: dict[str, int], tmp_path: Path) -> None:
    _yosys()
    run = synth.synth_module([RTL_DIR / "kernel" / f"{module}.v"], module, params, cache_dir=tmp_path,
                             use_cache=False)
    report = timing_report.row(run)
    assert report["lut_levels"] <= MAX_LUT_LEVELS, report
    assert report["max_fanout"] <= MAX_FANOUT, report
    if module == "onic_fifo":
        assert any(c.startswith("RAMB") for c in run["cells"]), f"not in block RAM: {run['cells']}"


@pytest.mark.slow
def test_kernel_fanout(tmp_path: Path) -> None:
    """The generated kernel top (u55c, AdamW fp32, 1 lane) has no non-clock net above 1,000 loads."""
    _yosys()
    spec = KernelSpec(lanes=1)
    report = timing_report.row(synth.synth_top(spec, get_target(spec.target)))
    print(json.dumps({k: report[k] for k in ("lut_levels", "max_fanout_net", "max_fanout", "nets_over_goal")}))
    assert report["max_fanout"] <= MAX_FANOUT, report["nets_over_goal"]
