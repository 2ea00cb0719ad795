"""`optimusnic sim`: run the RTL kernel's cocotb bench for a generated kernel.

Generates the kernel for the spec given on the command line, builds it on Verilator or Icarus
(a build is reused while its sources are unchanged), runs the bit-exact update test (several
consecutive runs, state left in card memory, random stalls on every AXI channel, memory read
latency), the ap_ctrl_hs control test, and one stall-free run that measures elements per clock.
"""

from __future__ import annotations

import argparse
import math

from hls.errors import UserError
from hls.rtl import bench_runner as rtlsim
from hls.rtl import simulators
from hls.targets import get_target
from optimusnic.cli.common import SEED, add_json, add_spec_options, emit_json, float_in, int_in, spec_from_args

MAX_SIM_ELEMENTS = 1 << 22  # per run: ~4M elements is hours of RTL simulation already
MAX_SIM_COUNTS = 16


def _counts(text: str) -> list[int]:
    try:
        floats = [float(x) for x in text.replace("_", "").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give element counts like 1000 or 0,7,1000") from None
    if not floats or len(floats) > MAX_SIM_COUNTS:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 to {MAX_SIM_COUNTS} element counts")
    if any(not math.isfinite(v) or v != int(v) or not 0 <= v <= MAX_SIM_ELEMENTS for v in floats):
        raise argparse.ArgumentTypeError(f"{text!r}: element counts must be whole numbers from 0 to "
                                         f"{MAX_SIM_ELEMENTS:,}")
    return [int(v) for v in floats]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="simulate the generated RTL kernel (cocotb, bit-exact vs the golden model)")
    add_spec_options(p)
    p.add_argument("--elements", type=_counts, default=None, metavar="N[,N...]",
                   help="element counts to test (default: 0, 5 and 4*lanes+3)")
    p.add_argument("--runs", type=int_in(1, 100), default=3,
                   help="consecutive kernel runs per element count (default 3)")
    p.add_argument("--simulator", choices=simulators.SIMULATORS, default="verilator")
    p.add_argument("--seed", type=SEED, default=1)
    p.add_argument("--stalls", type=float_in(0, 0.95), default=rtlsim.DEFAULT_STALLS,
                   help="probability of a ready/valid pause per clock on every AXI channel (default 0.2)")
    p.add_argument("--latency", type=int_in(0, 10_000), default=rtlsim.DEFAULT_LATENCY,
                   help="card memory read latency in clocks (default 64)")
    p.add_argument("--memory", choices=rtlsim.MEMORY_MODES, default=None,
                   help="card memory model: hbm (per-channel bandwidth of the memory plan, 100-250 ns per "
                        "burst; default on HBM targets) or ideal (no bandwidth limit; default elsewhere)")
    p.add_argument("--no-control", action="store_true", help="skip the ap_ctrl_hs control test")
    p.add_argument("--waves", action="store_true", help="record waveforms (FST on Verilator) in the build folder")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args, default_lanes=16)
    if args.runs < 1:
        raise UserError("--runs must be at least 1")
    target = get_target(spec.target, args.targets_file)
    simulators.simulator_env(args.simulator)  # one clear line if it is missing
    memory = args.memory or rtlsim.default_memory(spec, target)
    rtlsim.check_memory(memory)
    tests = ("test_update",) + (() if args.no_control else ("test_control",)) + ("test_throughput",)
    if spec.param_stream:  # the parameter stream's packets, bit-exact and framed, under back-pressure
        tests += ("test_param_stream",)
    result = rtlsim.simulate(
        spec,
        simulator=args.simulator,
        tests=tests,
        elements=args.elements,
        runs=args.runs,
        seed=args.seed,
        stalls=args.stalls,
        latency=args.latency,
        waves=args.waves,
        target=target,
        memory=memory,
    )
    if args.json:
        emit_json(result.to_dict())
    else:
        print(format_result(result))
    return 0 if result.passed else 1


def format_result(r: rtlsim.SimResult) -> str:
    s = r.spec
    memory = ("HBM model: per-channel bandwidth of the memory plan, 100-250 ns per burst" if r.memory == "hbm"
              else f"ideal memory: no bandwidth limit, read latency {r.latency} clocks")
    lines = [
        f"{s['name']}: {s['optimizer']}, grad {s['grad_dtype']} from {s['grad_source']}, out {s['out_dtype']}, "
        f"{s['lanes']} lanes on {r.simulator} (seed {r.seed})",
        f"  tests: {', '.join(r.tests)}: {r.ran - r.failed} of {len(r.tests)} passed",
        f"  card memory: {memory}",
        f"  bit-exact runs: {r.runs} per element count, stalls {r.stalls:g} per channel and clock",
    ]
    for n, cycles in r.cycles.items():
        per = ", ".join(str(c) for c in cycles)
        lines.append(f"    n={n}: clocks per run {per}")
    if r.throughput:
        t = r.throughput
        lines.append(
            f"  throughput (no stalls): {t['elements']} elements in {t['cycles']} clocks = "
            f"{t['elements_per_cycle']:.3f} elements/clock ({t['fraction_of_ideal']:.1%} of {t['lanes']} lanes)"
        )
        if r.memory == "hbm":
            from hls.sizing import size_spec
            from hls.spec import KernelSpec

            spec = KernelSpec.from_dict(dict(s))
            try:
                predicted = size_spec(spec, get_target(spec.target)).elements_per_clock_predicted
            except UserError:  # a target from a --targets-file: no prediction line
                predicted = None
            if predicted is not None:
                lines.append(f"    sizing predicts {predicted:.3f} elements/clock for this memory plan (steady "
                             "state; this run's count includes start-up and drain)")
        for c in t.get("channels") or []:
            lines.append(f"    channel {c['channel']} ({', '.join(c['ports'])}): "
                         f"{c['beats_per_clock']:.3f} beats/clock of {c['budget']:.3f}")
    if r.sim_clocks_per_s:
        lines.append(f"  simulation speed: {r.sim_clocks_per_s:,.0f} clocks/s")
    lines.append(f"  build {r.build_s:.1f} s, run {r.run_s:.1f} s; log {r.log}")
    lines.append("PASS" if r.passed else f"FAIL: see {r.log}")
    return "\n".join(lines)
