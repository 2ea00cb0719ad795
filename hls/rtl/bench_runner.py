"""Generate, build and run the RTL kernel's cocotb bench for a `KernelSpec`.

`optimusnic sim`, the tests and the RTL benchmark all come through `simulate()`:

1. render the spec's project (templates/rtl, manifest.json) into
   `build/sim/kernel/<spec-hash>-<simulator>/project/`;
2. build the top with the static modules of sim/rtl/kernel (kernel.f) and the floating-point
   units of sim/rtl/fp (fp_units.f) on Verilator or Icarus. A build is reused while the
   sources are byte-identical (a stamp file keeps their hash), so tests that share a spec share
   one build;
3. run cocotb tests of sim/tb/kernel/test_kernel.py, which read the manifest and the run
   options from the environment and write a JSON summary that comes back as `SimResult`.

Card memory (`memory`): "hbm" attaches every m_axi port to the channel of the manifest's memory
plan, each channel limited to its usable bandwidth (channel bandwidth x memory efficiency, the
figures sizing uses) with 100-250 ns latency per burst (sim/tb/kernel/hbm_memory.py); "ideal"
has no bandwidth limit and a fixed read latency. The default is hbm for HBM targets.

The bench's host and memory models (sim/tb/kernel/kernel_tb.py) are plain cocotb coroutines
and reusable by any other cocotb test, e.g. the driver's `rtlsim` backend.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hls import file_lock, safe_io
from hls.errors import UserError
from hls.generate import write_project
from hls.paths import BUILD_DIR, REPO_ROOT, TB_DIR, TB_MODELS_DIR
from hls.proc import run as run_tool
from hls.rtl import simulators
from hls.rtl_sources import FP_RTL, static_sources
from hls.spec import KernelSpec
from hls.targets import Target

KERNEL_TB = TB_DIR / "kernel"
TEST_MODULE = "test_kernel"
TESTS = ("test_update", "test_control", "test_status", "test_reset", "test_reset_interconnect", "test_lite_restart",
         "test_suppress", "test_stream_keep", "test_random", "test_throughput", "test_param_stream")
DEFAULT_LATENCY = 64
DEFAULT_STALLS = 0.2
MEMORY_MODES = ("hbm", "ideal")


@dataclass
class SimResult:
    """What one bench run reports (see `optimusnic sim --json`)."""

    spec: dict[str, Any]
    simulator: str
    tests: list[str]
    passed: bool
    ran: int
    failed: int
    elements: list[int]
    runs: int
    seed: int
    stalls: float
    latency: int
    memory: str
    build_dir: str
    results_xml: str
    log: str
    build_s: float
    run_s: float
    cycles: dict[str, list[int]] = field(default_factory=dict)  # element count -> clocks per run
    throughput: dict[str, Any] | None = None
    sim_clocks_per_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_memory(spec: KernelSpec, target: Target | None = None) -> str:
    """hbm for HBM targets, ideal for the rest."""
    from hls.targets import get_target

    target = target or get_target(spec.target)
    return "hbm" if target.memory.is_hbm else "ideal"


def check_memory(memory: str) -> None:
    if memory not in MEMORY_MODES:
        raise UserError(f"memory {memory!r}: choose one of {', '.join(MEMORY_MODES)}")


def stripe_counts(spec: KernelSpec, target: Target | None = None) -> Any:
    """The stripes (grad, state, out) of `spec`'s kernel: the memory plan sizing chooses."""
    from hls.sizing import stripe_counts as counts
    from hls.targets import get_target

    return counts(spec, target or get_target(spec.target))


def spec_hash(spec: KernelSpec) -> str:
    return hashlib.sha256(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def build_dir_for(spec: KernelSpec, simulator: str) -> Path:
    return BUILD_DIR / "sim" / "kernel" / f"{spec_hash(spec)}-{simulator}"


def kernel_sources(spec: KernelSpec, project_dir: Path) -> list[Path]:
    """FP units, static kernel modules, then the generated control block and top."""
    generated = project_dir / "rtl"
    top = generated / f"{spec.name}.v"
    control = generated / f"{spec.name}_control_s_axi.v"
    return [*static_sources(), control, top]


def prepare(spec: KernelSpec, simulator: str, target: Target | None = None) -> tuple[Path, Path, list[Path]]:
    """Render the project for `spec`; returns (build dir, project dir, sources)."""
    bdir = build_dir_for(spec, simulator)
    project = bdir / "project"
    write_project(spec, project, target)
    return bdir, project, kernel_sources(spec, project)


def _sources_digest(sources: list[Path], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for s in sources:
        h.update(s.name.encode())
        h.update(s.read_bytes())
    return h.hexdigest()


def locked(bdir: Path, *, exclusive: bool) -> AbstractContextManager[None]:
    """Several processes (tests, the CLI, the driver's rtlsim backend) may use one build folder:
    building takes it exclusively, running a simulation shares it."""
    return file_lock.locked(bdir / ".lock", exclusive=exclusive)


def build(spec: KernelSpec, simulator: str = "verilator", *, waves: bool = False,
          target: Target | None = None) -> tuple[Any, Path, Path]:
    """Build the kernel for `simulator` unless an identical build exists; returns (runner, build dir, project).

    `target`: a catalog entry loaded with extra target files (default: the built-in catalog's).
    """
    with locked(build_dir_for(spec, simulator), exclusive=True):
        return _build(spec, simulator, waves, target)


def _build(spec: KernelSpec, simulator: str, waves: bool, target: Target | None) -> tuple[Any, Path, Path]:
    from cocotb_tools.runner import get_runner

    simulators.apply_env(simulator)
    bdir, project, sources = prepare(spec, simulator, target)
    runner = get_runner(simulator)
    args: list[str] = []
    if simulator == "verilator":
        # --no-public-flat-rw undoes the runner's --public-flat-rw: VPI handles to every internal
        # signal of 16 lanes triple the C++ to compile; the bench only touches the top's ports.
        args = ["-Wno-fatal", "-Wno-WIDTHTRUNC", "-Wno-WIDTHEXPAND", "--x-assign", "0", "--x-initial", "0",
                "--no-public-flat-rw", "--public-depth", "1"]
        if waves:
            args += ["--trace-fst", "--trace-structs"]
    else:
        args = ["-g2012"]
    stamp = bdir / "build.stamp"
    digest = _sources_digest(sources, json.dumps([simulator, args, waves]))
    binary = bdir / (spec.name if simulator == "verilator" else "sim.vvp")
    fresh = stamp.exists() and stamp.read_text() == digest and binary.exists()
    if not fresh:
        stamp.unlink(missing_ok=True)
    reused = fresh and simulator == "verilator" and _reuse(runner, bdir, spec.name, sources)
    if not reused:
        runner.build(
            sources=sources,
            hdl_toplevel=spec.name,
            build_args=args,
            build_dir=bdir,
            timescale=("1ns", "1ps"),
            waves=waves,
            always=not fresh,
            log_file=bdir / "build.log",
        )
    safe_io.atomic_write(stamp, digest)
    return runner, bdir, project


def _reuse(runner: Any, bdir: Path, toplevel: str, sources: list[Path]) -> bool:
    """A Verilator build is up to date: set what `runner.test` needs without re-verilating
    (cocotb's Verilator runner always re-runs verilator and make). False if this cocotb's
    runner does not have the attributes we set, and the caller builds normally."""
    if not all(hasattr(runner, m) for m in ("_set_sources", "_set_verilog_sources", "_set_vhdl_sources",
                                             "_set_build_args")):
        return False
    runner.build_dir = bdir
    runner.hdl_toplevel = toplevel
    runner.waves = False
    runner.timescale = ("1ns", "1ps")
    runner.log_file = None
    runner.verbose = False
    runner.hdl_library = "top"
    runner.parameters = {}
    runner.defines = {}
    runner.includes = []
    runner._set_sources(sources)
    runner._set_verilog_sources([])
    runner._set_vhdl_sources([])
    runner._set_build_args([])
    return True


def simulate(
    spec: KernelSpec,
    *,
    simulator: str = "verilator",
    tests: tuple[str, ...] = ("test_update", "test_control"),
    elements: list[int] | None = None,
    runs: int = 3,
    seed: int = 1,
    stalls: float = DEFAULT_STALLS,
    latency: int = DEFAULT_LATENCY,
    bench_elements: int | None = None,
    waves: bool = False,
    target: Target | None = None,
    memory: str | None = None,
) -> SimResult:
    """Build (or reuse) the bench for `spec` and run `tests`; never raises on a failing test.

    `memory`: "hbm" or "ideal" (see the module docstring); None: `default_memory(spec)`.
    """
    unknown = [t for t in tests if t not in TESTS]
    if unknown:
        raise UserError(f"unknown bench test(s) {', '.join(unknown)}; choose from {', '.join(TESTS)}")
    elements = [0, 5, 4 * spec.lanes + 3] if elements is None else list(elements)
    if not elements or any(n < 0 or n >= 2**32 for n in elements):
        raise UserError("elements: give one or more counts from 0 to 2**32-1")
    if latency < 0 or not 0.0 <= stalls < 1.0:
        raise UserError("latency must be >= 0 and stalls a probability in [0, 1)")
    memory = memory or default_memory(spec, target)
    check_memory(memory)
    t0 = time.perf_counter()
    runner, bdir, project = build(spec, simulator, waves=waves, target=target)
    build_s = time.perf_counter() - t0
    result_json = bdir / f"result-{os.getpid()}.json"
    result_json.unlink(missing_ok=True)
    env = {
        "ONIC_MANIFEST": str(project / "manifest.json"),
        "ONIC_ELEMENTS": ",".join(str(n) for n in elements),
        "ONIC_RUNS": str(runs),
        "ONIC_SEED": str(seed),
        "ONIC_STALLS": str(stalls),
        "ONIC_LATENCY": str(latency),
        "ONIC_MEMORY": memory,
        "ONIC_RESULT": str(result_json),
        "ONIC_BENCH_ELEMENTS": str(max(elements) if bench_elements is None else bench_elements),
        "PYTHONPATH": os.pathsep.join([str(KERNEL_TB), str(TB_MODELS_DIR), str(REPO_ROOT),
                                      os.environ.get("PYTHONPATH", "")]),
    }
    t1 = time.perf_counter()
    log = bdir / f"sim-{os.getpid()}.log"
    with locked(bdir, exclusive=False), simulators.python_path(KERNEL_TB, TB_MODELS_DIR, REPO_ROOT):
        xml = runner.test(
            test_module=TEST_MODULE,
            hdl_toplevel=spec.name,
            test_dir=KERNEL_TB,
            build_dir=bdir,
            extra_env=env,
            testcase=list(tests),
            seed=seed,
            waves=waves,
            results_xml=str(bdir / f"results-{os.getpid()}.xml"),
            log_file=log,
            timescale=("1ns", "1ps") if simulator != "verilator" else None,
        )
    run_s = time.perf_counter() - t1
    ran, failed = simulators.check_results(xml)
    summary = json.loads(result_json.read_text()) if result_json.exists() else {}
    result_json.unlink(missing_ok=True)
    update = summary.get("update", {})
    throughput = summary.get("throughput")
    speed = None
    if throughput:
        speed = throughput.get("sim_clocks_per_s")
    elif update.get("wall_s"):
        speed = update["clocks"] / update["wall_s"]
    return SimResult(
        spec=spec.to_dict(), simulator=simulator, tests=list(tests), passed=ran == len(tests) and failed == 0,
        ran=ran, failed=failed, elements=elements, runs=runs, seed=seed, stalls=stalls, latency=latency,
        memory=memory, build_dir=str(bdir), results_xml=str(xml), log=str(log), build_s=build_s, run_s=run_s,
        cycles=update.get("cycles", {}), throughput=throughput, sim_clocks_per_s=speed,
    )


def lint(spec: KernelSpec, *, own_only: bool = True) -> list[str]:
    """`verilator --lint-only -Wall` on the generated kernel; returns the warning lines.

    With `own_only`, warnings located in the floating-point units (linted by their own test)
    are left out, so this check is about the kernel's modules and the generated files.
    """

    bdir = BUILD_DIR / "sim" / "kernel" / f"{spec_hash(spec)}-lint"
    env = {**os.environ, **simulators.simulator_env("verilator")}
    with locked(bdir, exclusive=True):
        project = bdir / "project"
        write_project(spec, project)
        sources = kernel_sources(spec, project)
        proc = run_tool(
            [simulators.verilator_bin(), "--lint-only", "-Wall", "--top-module", spec.name, *map(str, sources)],
            capture_output=True, text=True, env=env, what="verilator --lint-only",
        )
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("%Warning") or ln.startswith("%Error")]
    lines = [ln for ln in lines if not ln.startswith("%Error: Exiting due to")]
    if own_only:
        lines = [ln for ln in lines if str(FP_RTL) not in ln]
    return lines


def icarus_compile(spec: KernelSpec) -> tuple[bool, str]:
    """Compile the generated kernel with Icarus (`iverilog -g2012`); returns (ok, messages)."""

    simulators.simulator_env("icarus")
    bdir = BUILD_DIR / "sim" / "kernel" / f"{spec_hash(spec)}-lint"
    with locked(bdir, exclusive=True):
        project = bdir / "project"
        write_project(spec, project)
        sources = kernel_sources(spec, project)
        proc = run_tool(
            ["iverilog", "-g2012", "-Wall", "-s", spec.name, "-o", str(bdir / "check.vvp"), *map(str, sources)],
            capture_output=True, text=True, what="iverilog",
        )
    return proc.returncode == 0, proc.stdout + proc.stderr
