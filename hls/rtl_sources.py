"""The RTL kernel's static sources, module names and lane parameters: one owner for every stage.

The hand-written Verilog lives in sim/rtl: the floating-point units in `fp/` (listed in
`fp_units.f`) and the kernel's static modules in `kernel/` (`kernel.f`); the generated top and its
control block come from the project (templates/rtl). Simulation (hls.rtl.bench_runner), yosys
(hls.rtl.synth), the Vivado packaging step (hls.vitis.build) and the driver's RTL backend all read
the same lists through `read_filelist` / `static_sources`, and synthesize or simulate the lane
with the parameters `lane_params` gives.
"""

from __future__ import annotations

from pathlib import Path

from hls.errors import UserError
from hls.paths import RTL_DIR
from hls.spec import GRAD_FMT, KernelSpec

FP_RTL = RTL_DIR / "fp"
KERNEL_RTL = RTL_DIR / "kernel"
FP_UNITS_LIST = FP_RTL / "fp_units.f"
KERNEL_LIST = KERNEL_RTL / "kernel.f"
FILELISTS = (FP_UNITS_LIST, KERNEL_LIST)  # in compile order: the units, then the kernel's modules
# The lane's stand-in for synthesizing the whole kernel at 16 lanes (hls.rtl.synth, timing only):
# in no file list, so no simulation can pick it up; onic_adam_core instantiates it under the define.
SYNTH_RTL = RTL_DIR / "synth"
LANE_STUB = SYNTH_RTL / "onic_adam_lane_stub.v"
LANE_STUB_DEFINE = "ONIC_LANE_STUB"

# Module names the toolkit refers to (the generated top instantiates them).
LANE_MODULE = "onic_adam_lane"  # one update lane: what a kernel of L lanes has L of
CORE_MODULE = "onic_adam_core"  # the lanes behind their FIFOs


def read_filelist(path: Path) -> list[Path]:
    """Sources named in a `.f` file, one per line, relative to the file's folder (# and // comments)."""
    files = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].split("//", 1)[0].strip()
        if line:
            files.append((Path(path).parent / line).resolve())
    return files


def static_sources() -> list[Path]:
    """Every source of the file lists, in order, each once; refused when a list or a file is missing."""
    files: list[Path] = []
    for flist in FILELISTS:
        if not flist.is_file():
            raise UserError(f"{flist}: file list missing; the RTL sources are not in place")
        files += [f for f in read_filelist(flist) if f not in files]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise UserError(f"{missing[0]}: listed in a .f file but missing; the RTL is not complete yet")
    return files


def lane_params(spec: KernelSpec) -> dict[str, int]:
    """The Verilog parameters of `LANE_MODULE` for `spec` (GRAD_FMT: hls.spec.GRAD_FMT, as the top passes it)."""
    return {"ADAMW": int(spec.optimizer == "adamw"), "GRAD_FMT": GRAD_FMT[spec.grad_dtype],
            "OUT_BF16": int(spec.out_dtype == "bf16"), "TAG_WIDTH": 1}


__all__ = ["CORE_MODULE", "FILELISTS", "FP_RTL", "FP_UNITS_LIST", "KERNEL_LIST", "KERNEL_RTL", "LANE_MODULE",
           "LANE_STUB", "LANE_STUB_DEFINE", "SYNTH_RTL", "lane_params", "read_filelist", "static_sources"]
