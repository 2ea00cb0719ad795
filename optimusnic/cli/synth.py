"""`optimusnic synth`: resource estimate of the generated RTL kernel with Debian's yosys."""

from __future__ import annotations

import argparse
import sys

from hls.errors import UserError
from hls.rtl import synth
from hls.rtl import timing_report as timing
from hls.targets import get_target
from optimusnic.cli.common import add_json, add_spec_options, emit_json, spec_from_args, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "synth",
        help="estimate LUT/FF/DSP/BRAM/URAM of the RTL kernel with yosys (synth_xilinx, UltraScale+)",
        description="Synthesizes the generated RTL kernel with yosys synth_xilinx -family xcup and reports "
        "resources per lane and in total against the target's usable resources. Results are cached in "
        "build/synth/ and used by `optimusnic size` to warn when a configuration cannot fit.",
    )
    add_spec_options(p)
    p.add_argument("--mode", choices=("scaled", "full"), default="scaled",
                   help="scaled (default): one lane + the top at 1 lane, scaled to the lanes asked; "
                   "full: synthesize the top at the lanes asked (slow at 16 lanes)")
    p.add_argument("--no-cache", action="store_true", help="run yosys even when a cached result exists")
    p.add_argument("--cached", action="store_true",
                   help="do not run yosys: scale the last saved lane and infrastructure figures for this "
                   "optimizer/dtypes to the lanes and CUs asked (fails if there are none)")
    p.add_argument("--timing", action="store_true",
                   help="report LUT levels, carry and DSP depth and the highest fan-out net instead of resources: "
                   "every RTL module alone, then the kernel at --lanes (16 by default) synthesized with its lanes "
                   "stubbed and composed with the lane alone (progress on stderr)")
    p.add_argument("--matrix", action="store_true",
                   help="--timing: the kernel on every default target (u55c, u50, u280) in fp32, bf16 and fp16->fp32 "
                   "(--target and the dtypes are ignored for the kernel rows; minutes of yosys per row, cached), and "
                   "the network kernel top (sim/rtl/net) whole with its resources")
    p.add_argument("--cached-rows", action="store_true",
                   help="--timing: start no yosys run; rows whose runs are not cached are named as not synthesized "
                   "(to write the rows finished so far while the rest still run)")
    p.add_argument("--no-units", action="store_true", help="--timing: the kernel rows only")
    p.add_argument("--no-kernel", action="store_true", help="--timing: the per-module rows only")
    p.add_argument("--write-results", action="store_true",
                   help="--timing: also replace the timing section of bench/results.md (and results.json) "
                   "without rerunning the other benchmarks")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    target = get_target(spec.target, args.targets_file)
    timing_only = [f for f, on in (("--matrix", args.matrix), ("--cached-rows", args.cached_rows),
                                   ("--no-units", args.no_units),
                                   ("--no-kernel", args.no_kernel), ("--write-results", args.write_results)) if on]
    if timing_only and not args.timing:
        raise UserError(f"{', '.join(timing_only)} only go with --timing")
    if args.timing:
        if args.cached:
            raise UserError("--timing has no --cached form: it reads the cached yosys runs by itself")
        rep = timing.report(spec, target, units=not args.no_units, kernel=not args.no_kernel, matrix=args.matrix,
                            use_cache=not args.no_cache, log=lambda m: print(m, file=sys.stderr, flush=True),
                            targets=lambda key: get_target(key, args.targets_file), net=args.matrix,
                            cached_only=args.cached_rows)
        if args.write_results:
            from optimusnic.bench.report import write_synth_section

            rep["command"] = (f"optimusnic synth --target {spec.target} --lanes {spec.lanes} --timing"
                              f"{' --matrix' if args.matrix else ''}{' --cached-rows' if args.cached_rows else ''}"
                              " --write-results")
            print(f"written: {write_synth_section(rep)}", file=sys.stderr)
        if args.json:
            emit_json(rep)
        else:
            print(format_timing(rep))
        return 0
    if args.cached:
        result = synth.cached_estimate(spec, target)
        if result is None:
            raise UserError(f"no saved yosys figures for {spec.optimizer} {spec.grad_dtype}->{spec.out_dtype} "
                            f"{spec.grad_source}: run `optimusnic synth` without --cached first")
        result["runs"] = [u | {"cached": True} for u in result["runs"]]
    else:
        result = synth.estimate(spec, target, mode=args.mode, use_cache=not args.no_cache)
        result["cache"] = str(synth.save_estimate(result))
    if args.json:
        emit_json(result)
    else:
        print(format_estimate(result, target.name))
    return 0


def _fmt(x: object) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f}" if isinstance(x, float) and not float(x).is_integer() else f"{int(x):,}"


def format_estimate(r: dict, target_name: str) -> str:
    s = r["spec"]
    cols = synth.RESOURCES
    rows = [
        ["per lane", *[_fmt(r["lane"][c]) for c in cols]],
        ["infrastructure", *[_fmt(r["infrastructure"][c]) for c in cols]],
        [f"per CU ({s['lanes']} lanes)", *[_fmt(r["per_cu"][c]) for c in cols]],
        [f"total ({s['compute_units']} CU)", *[_fmt(r["total"][c]) for c in cols]],
        [f"usable ({r['usable_fraction']:.0%} of device)", *[_fmt(r["usable"][c]) for c in cols]],
        ["utilization", *[("-" if r["utilization_pct"][c] is None else f"{r['utilization_pct'][c]:.2f}%")
                          for c in cols]],
    ]
    lines = [
        f"{target_name} ({r['target']}, {r['part']}): {s['name']}, {s['optimizer']}, grad {s['grad_dtype']} "
        f"from {s['grad_source']}, out {s['out_dtype']}, {s['lanes']} lanes x {s['compute_units']} CU",
        f"{r['yosys']}: synth_xilinx -family xcup -flatten -noiopad ({r['caveat']})",
        "",
        table(rows, ["", "LUT", "FF", "DSP", "BRAM36", "URAM"]),
        "",
        f"method: {r['method']}",
        f"fits: {'yes' if r['fits'] else 'NO'} (limiting resource: {r['limiting_resource']}); "
        f"largest lane count that fits: {r['max_lanes_that_fit'] or 'none'}"
        f"{' x ' + str(s['compute_units']) + ' CU' if s['compute_units'] > 1 else ''}; "
        f"CUs of this width that fit: {r['max_compute_units_that_fit']}",
        *[f"note: {n}" for n in r.get("notes", [])],
        "yosys runs: " + ", ".join(f"{u['unit']} {u['seconds']} s{' (cached)' if u['cached'] else ''}"
                                   + (f", {u['lut_levels']} LUT levels" if "lut_levels" in u else "")
                                   for u in r["runs"]),
    ]
    return "\n".join(lines)


def format_timing(rep: dict) -> str:
    lines = [f"{rep['yosys']}: {rep['command']}", f"goal: {rep['goal']}", ""]
    for header, rows in (timing.table_rows(rep), timing.kernel_table_rows(rep), timing.net_table_rows(rep)):
        if rows:
            lines += [table(rows, header), ""]
    if rep["kernel"]:
        lines.append(f"kernel rows: {rep['kernel'][0]['method']}")
    verdict = {True: "met", False: "NOT met", None: "not run"}
    if rep.get("not_run"):
        lines.append(f"not synthesized yet (no row): {', '.join(rep['not_run'])}")
    lines += [f"note: {rep['caveat']}", "I/O levels: in->reg / reg->out / in->out, not judged (a module's "
              "ports are registered, or not, by its neighbours)",
              f"all rows: {verdict[rep['met']]}; kernel rows: {verdict[rep['kernel_met']]}"
              + (f" (of the rows above; {len(rep['not_run'])} not synthesized)" if rep.get("not_run") else "")]
    return "\n".join(lines)
