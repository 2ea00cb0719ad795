"""RTL kernel benchmark: elements per clock under the HBM memory model beside sizing's prediction,
the same kernel on ideal memory (the kernel's own efficiency), and simulator speed.

For each of U55C, U280 and U50, fp32 and bf16 gradients (from memory, fp32 out, AdamW), 16 lanes,
one compute unit (CUs are independent instances, each on its own memory channels, so one CU's
rate times the CUs is the card's; sizing predicts per CU), with the memory plan sizing chooses
for the line rate:
- predicted: `hls.sizing.size_spec(spec, target).elements_per_clock_predicted`, the rate of the
  busiest channel (its usable bandwidth over its bytes per element) or of the lanes;
- HBM: one stall-free run in Verilator with every m_axi port on the channel of the manifest's
  memory plan, each channel a token bucket of bandwidth x efficiency / (64 B x clock) beats per
  clock shared by its ports' reads and writes, 100-250 ns per burst (sim/tb/kernel/hbm_memory.py);
- ideal memory: the same run with no bandwidth limit and a 64-clock read latency.
The clock count runs from the ap_start write to ap_done seen by the polling host, so start-up,
pipeline fill and drain are in it. Goals: HBM within 5% of predicted; the default U55C fp32
kernel at 10.42 elements/clock or more (3.125 G elements/s at 300 MHz: 100 Gb/s of fp32 grads).

Run: `optimusnic bench rtl` (the bench verb imports `run`), or `python -m optimusnic.bench.rtl`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hls.rtl import bench_runner as rtlsim
from hls.rtl import simulators
from hls.sizing import size_spec
from hls.spec import KernelSpec
from hls.targets import get_target

TARGETS = ("u55c", "u280", "u50")
GRAD_DTYPES = ("fp32", "bf16")
BENCH_ELEMENTS = 262_144
BENCH_LANES = 16
BENCH_LATENCY = 64
ICARUS_ELEMENTS = 4_096
GOAL_RATIO = 0.95  # measured under the HBM model / predicted
GOAL_DEFAULT = 10.42  # elements per clock, default U55C fp32 kernel (3.125 G elements/s at 300 MHz)


def bench_spec(target: str = "u55c", grad_dtype: str = "fp32", lanes: int = BENCH_LANES) -> KernelSpec:
    return KernelSpec(target=target, grad_dtype=grad_dtype, lanes=lanes)


def measure(spec: KernelSpec, memory: str, elements: int, simulator: str = "verilator",
            latency: int = BENCH_LATENCY) -> dict[str, Any]:
    result = rtlsim.simulate(spec, simulator=simulator, tests=("test_throughput",), elements=[elements], runs=1,
                             stalls=0.0, latency=latency, bench_elements=elements, memory=memory)
    if not result.passed or not result.throughput:
        raise RuntimeError(f"RTL benchmark {spec.target} {spec.grad_dtype} ({memory} memory, {simulator}) failed; "
                           f"see {result.log}")
    t = dict(result.throughput)
    t.update(simulator=simulator, build_s=result.build_s, run_s=result.run_s)
    return t


def row(target: str, grad_dtype: str, elements: int, lanes: int = BENCH_LANES, log=None) -> dict[str, Any]:  # noqa: ANN001
    spec = bench_spec(target, grad_dtype, lanes)
    sizing = size_spec(spec, get_target(target))
    if log:
        log(f"[bench rtl] {target} {grad_dtype}: {elements:,} elements, HBM model and ideal memory ...")
    hbm = measure(spec, "hbm", elements)
    ideal = measure(spec, "ideal", elements)
    predicted = sizing.elements_per_clock_predicted
    return {
        "target": target,
        "grad_dtype": grad_dtype,
        "out_dtype": spec.out_dtype,
        "lanes": lanes,
        "compute_units": 1,
        "clock_mhz": sizing.clock_mhz,
        "stripes": {"grad": sizing.stripes.grad, "state": sizing.stripes.state, "out": sizing.stripes.out},
        "binding": sizing.binding,
        "elements": elements,
        "predicted": predicted,
        "hbm": hbm["elements_per_cycle"],
        "hbm_cycles": hbm["cycles"],
        "ratio": hbm["elements_per_cycle"] / predicted,
        "ideal": ideal["elements_per_cycle"],
        "ideal_cycles": ideal["cycles"],
        "ideal_fraction_of_lanes": ideal["fraction_of_ideal"],
        "channels": hbm.get("channels", []),
        "sim_clocks_per_s": hbm["sim_clocks_per_s"],
        "sim_clocks_per_cpu_s": hbm.get("sim_clocks_per_cpu_s"),
        "meets_goal": hbm["elements_per_cycle"] >= GOAL_RATIO * predicted,
    }


def collect(elements: int = BENCH_ELEMENTS, lanes: int = BENCH_LANES, targets: tuple[str, ...] = TARGETS,
            grad_dtypes: tuple[str, ...] = GRAD_DTYPES, with_icarus: bool = True, log=None) -> dict[str, Any]:  # noqa: ANN001
    rows = [row(t, g, elements, lanes, log) for t in targets for g in grad_dtypes]
    report: dict[str, Any] = {
        "goal_ratio": GOAL_RATIO,
        "goal_default_elements_per_clock": GOAL_DEFAULT,
        "elements": elements,
        "rows": rows,
    }
    default = next((r for r in rows if r["target"] == "u55c" and r["grad_dtype"] == "fp32"), None)
    report["default"] = default
    report["meets_goal"] = all(r["meets_goal"] for r in rows) and (
        default is None or default["hbm"] >= GOAL_DEFAULT)
    # the kernel's own efficiency (ideal memory, elements per clock / lanes): what `optimusnic plan` reads
    report["efficiency"] = (default or rows[0])["ideal_fraction_of_lanes"]
    report["icarus"] = None
    if with_icarus and simulators.available("icarus"):
        if log:
            log(f"[bench rtl] Icarus speed: u55c fp32, {ICARUS_ELEMENTS:,} elements, ideal memory ...")
        report["icarus"] = measure(bench_spec(), "ideal", ICARUS_ELEMENTS, simulator="icarus")
    return report


def table(report: dict[str, Any]) -> list[str]:
    """The figures as a Markdown table (also used by bench/results.md)."""
    lines = [
        "| target | grad | stripes g/s/o | predicted e/clk | HBM model e/clk | HBM / predicted | ideal memory e/clk |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        st = r["stripes"]
        lines.append(f"| {r['target']} | {r['grad_dtype']} | {st['grad']}/{st['state']}/{st['out']} | "
                     f"{r['predicted']:.2f} | {r['hbm']:.2f} | {r['ratio']:.1%} | {r['ideal']:.2f} |")
    return lines


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"RTL kernel, 1 CU, 16 lanes, AdamW, grads from memory, fp32 out, {report['elements']:,} elements per run, "
        "no stalls (Verilator)",
        "CUs are independent instances on their own memory channels: the card's rate is CUs x this.",
        *table(report),
    ]
    d = report.get("default")
    if d:
        lines.append(f"default U55C fp32: {d['hbm']:.2f} elements/clock under the HBM model "
                     f"({d['hbm'] * d['clock_mhz'] / 1e3:.3f} G elements/s at {d['clock_mhz']:g} MHz); "
                     f"goal {report['goal_default_elements_per_clock']}")
    lines.append(f"goal: HBM within {1 - report['goal_ratio']:.0%} of predicted everywhere"
                 f"{' and the default at the line rate' if d else ''}: {'met' if report['meets_goal'] else 'NOT met'}")
    speeds = [r["sim_clocks_per_s"] for r in report["rows"]]
    lines.append(f"simulation speed, Verilator (HBM model): {min(speeds):,.0f} to {max(speeds):,.0f} clocks/s wall")
    ic = report.get("icarus")
    if ic:
        lines.append(f"simulation speed, Icarus: {ic['sim_clocks_per_s']:,.1f} clocks/s wall "
                     f"({ic['elements']:,}-element shard, ideal memory)")
    else:
        lines.append("simulation speed, Icarus: not measured (not installed, or --no-icarus)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Entry point for `optimusnic bench rtl`; reads optional attributes from `args`."""
    report = collect(
        elements=getattr(args, "elements", None) or BENCH_ELEMENTS,
        lanes=getattr(args, "lanes", None) or BENCH_LANES,
        targets=tuple(getattr(args, "targets", None) or TARGETS),
        grad_dtypes=tuple(getattr(args, "grad_dtypes", None) or GRAD_DTYPES),
        with_icarus=not getattr(args, "no_icarus", False),
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    if getattr(args, "json", False):
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0 if report["meets_goal"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m optimusnic.bench.rtl", description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=BENCH_ELEMENTS)
    parser.add_argument("--lanes", type=int, default=BENCH_LANES)
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--grad-dtypes", nargs="+", choices=GRAD_DTYPES, default=list(GRAD_DTYPES))
    parser.add_argument("--no-icarus", action="store_true")
    parser.add_argument("--json", action="store_true")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
