"""RTL kernel benchmark: elements per clock against the ideal of LANES per clock, and how fast
the simulators run the kernel (simulated clocks per wall-clock second).

Efficiency: one run of a 1,048,576-element shard at 16 lanes, AdamW fp32, gradients from memory,
64-clock memory read latency, no stalls, Verilator. The clock count runs from the ap_start
write to ap_done seen by the polling host, so it includes start-up, pipeline fill and drain.
Simulation speed: clocks/s of that run on Verilator, and of a smaller run on Icarus when it is
installed (Icarus is far slower; the shard is cut so the benchmark stays in minutes).

Run: `optimusnic bench rtl` (the bench verb imports `run`), or `python -m hls.bench_rtl`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hls import rtlsim, simulators
from hls.spec import KernelSpec

BENCH_ELEMENTS = 1_048_576
BENCH_LANES = 16
BENCH_LATENCY = 64
ICARUS_ELEMENTS = 16_384
GOAL = 0.95


def bench_spec(lanes: int = BENCH_LANES) -> KernelSpec:
    return KernelSpec(lanes=lanes)


def measure(simulator: str, elements: int, lanes: int = BENCH_LANES, latency: int = BENCH_LATENCY) -> dict[str, Any]:
    result = rtlsim.simulate(
        bench_spec(lanes),
        simulator=simulator,
        tests=("test_throughput",),
        elements=[elements],
        runs=1,
        stalls=0.0,
        latency=latency,
        bench_elements=elements,
    )
    if not result.passed or not result.throughput:
        raise RuntimeError(f"RTL benchmark on {simulator} failed; see {result.log}")
    t = dict(result.throughput)
    t.update(simulator=simulator, build_s=result.build_s, run_s=result.run_s)
    return t


def collect(elements: int = BENCH_ELEMENTS, lanes: int = BENCH_LANES, latency: int = BENCH_LATENCY,
            icarus_elements: int = ICARUS_ELEMENTS, with_icarus: bool = True) -> dict[str, Any]:
    report: dict[str, Any] = {"goal_fraction_of_ideal": GOAL}
    report["verilator"] = measure("verilator", elements, lanes, latency)
    if with_icarus and simulators.available("icarus"):
        report["icarus"] = measure("icarus", icarus_elements, lanes, latency)
    else:
        report["icarus"] = None
    report["meets_goal"] = report["verilator"]["fraction_of_ideal"] >= GOAL
    return report


def format_report(report: dict[str, Any]) -> str:
    v = report["verilator"]
    lines = [
        f"RTL kernel efficiency: {v['elements']:,} elements, {v['lanes']} lanes, read latency {v['latency']} clocks, "
        "no stalls",
        f"  {v['cycles']:,} clocks -> {v['elements_per_cycle']:.3f} elements/clock = "
        f"{v['fraction_of_ideal']:.1%} of ideal ({v['lanes']}/clock); goal {report['goal_fraction_of_ideal']:.0%}: "
        f"{'met' if report['meets_goal'] else 'NOT met'}",
        f"  simulation speed, Verilator: {v['sim_clocks_per_s']:,.0f} clocks/s wall "
        f"({v.get('sim_clocks_per_cpu_s', 0):,.0f} per CPU second of the simulator)",
    ]
    ic = report.get("icarus")
    if ic:
        lines.append(f"  simulation speed, Icarus:    {ic['sim_clocks_per_s']:,.1f} clocks/s wall "
                     f"({ic.get('sim_clocks_per_cpu_s', 0):,.1f} per CPU second; {ic['elements']:,}-element shard)")
    else:
        lines.append("  simulation speed, Icarus:    not installed (make deps-icarus)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Entry point for `optimusnic bench rtl`; reads optional attributes from `args`."""
    report = collect(
        elements=getattr(args, "elements", None) or BENCH_ELEMENTS,
        lanes=getattr(args, "lanes", None) or BENCH_LANES,
        latency=getattr(args, "latency", None) or BENCH_LATENCY,
        with_icarus=not getattr(args, "no_icarus", False),
    )
    if getattr(args, "json", False):
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0 if report["meets_goal"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hls.bench_rtl", description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=BENCH_ELEMENTS)
    parser.add_argument("--lanes", type=int, default=BENCH_LANES)
    parser.add_argument("--latency", type=int, default=BENCH_LATENCY)
    parser.add_argument("--no-icarus", action="store_true")
    parser.add_argument("--json", action="store_true")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
