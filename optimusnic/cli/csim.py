"""`optimusnic csim DIR`: compile the generated HLS kernel with g++, check it bit for bit against the golden model."""

from __future__ import annotations

import argparse
import time

from optimusnic.cli.common import SEED, add_json, count_up_to, emit_json, int_in, path_arg, table

# Elements of one check run: 5 arrays of them live in host memory twice (kernel and golden), ~1.3 GB.
MAX_CSIM_ELEMENTS = 1 << 26


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("csim", help="C-simulate a generated project against the golden model (bit-exact)")
    p.add_argument("project", type=path_arg, metavar="DIR", help="a project written by `optimusnic generate -o DIR`")
    p.add_argument("--elements", type=count_up_to(MAX_CSIM_ELEMENTS), default=100_003,
                   help=f"elements per step (default 100003, at most {MAX_CSIM_ELEMENTS:,})")
    p.add_argument("--steps", type=int_in(1, 1000), default=3, help="consecutive optimizer steps (default 3)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--headers", choices=("amd", "own"), default="amd",
                   help="HLS simulation headers: amd = AMD's ap_int.h/hls_stream.h from the hls4ml wheel "
                        "(default), own = our stand-ins")
    p.add_argument("--threads", type=int_in(1, 1024), default=None, help="worker threads (default: every core)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hls.csim.check import check_project
    from hls.csim.kernel import CsimKernel
    from hls.errors import UserError

    if args.steps < 1:
        raise UserError(f"--steps: {args.steps} must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: {args.threads} must be at least 1")
    t0 = time.perf_counter()
    kernel = CsimKernel(args.project, threads=args.threads, headers=args.headers)
    t1 = time.perf_counter()
    results = check_project(kernel, args.elements, args.steps, args.seed)
    t2 = time.perf_counter()
    passed = all(r["ok"] for r in results)
    spec = kernel.spec
    if args.json:
        emit_json({"project": str(args.project), "kernel": spec.name, "spec": spec.to_dict(),
                   "stripes": {"grad": kernel.stripes.grad, "state": kernel.stripes.state, "out": kernel.stripes.out},
                   "ports": kernel.ports, "library": str(kernel.library), "headers": kernel.headers,
                   "threads": kernel.threads, "elements": args.elements,
                   "steps": args.steps,
                   "seed": args.seed, "passed": passed, "compile_s": t1 - t0, "run_s": t2 - t1, "checks": results})
    else:
        s = kernel.stripes
        print(f"{spec.name}: {spec.optimizer}, grad {spec.grad_dtype} from {spec.grad_source}, out {spec.out_dtype}, "
              f"{spec.lanes} lanes; {args.elements} elements x {args.steps} steps vs golden model")
        print(f"  stripes: {s.grad} grad, {s.state} each of p, m, v, {s.out} out ({len(kernel.ports)} m_axi ports, "
              "one buffer each, run in place as on the card)")
        headers = "AMD's (hls4ml)" if kernel.headers == "amd" else "our stand-ins"
        print(f"  HLS headers: {headers} ap_int.h/hls_stream.h, -std=c++14; {kernel.threads} thread(s)")
        rows = [[str(r["step"]), str(r["array"]), "pass" if r["ok"] else "FAIL", str(r["mismatches"]),
                 "" if r["first_mismatch"] is None else str(r["first_mismatch"])] for r in results]
        print(table(rows, ["step", "array", "result", "mismatches", "first"]))
        print(f"{'PASS' if passed else 'FAIL'}: bit-exact {'on every check' if passed else 'violated'} "
              f"(library {kernel.library.name}, compile {t1 - t0:.1f} s, run {t2 - t1:.1f} s)")
    kernel.close()
    return 0 if passed else 1
