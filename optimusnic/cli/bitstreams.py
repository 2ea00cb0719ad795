"""`optimusnic bitstreams list|verify`: what is built for which target and spec, and is it intact."""

from __future__ import annotations

import argparse

from hls import registry
from hls.errors import UserError
from hls.paths import BITSTREAMS_DIR
from optimusnic.cli.common import add_json, emit_json, path_arg, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bitstreams", help="list or verify the built xclbins in bitstreams/")
    p.add_argument("action", choices=("list", "verify"), help="list: what is built; verify: sha256 vs manifest")
    p.add_argument("--dir", type=path_arg, default=BITSTREAMS_DIR, help="registry folder (default: bitstreams/)")
    add_json(p)
    p.set_defaults(func=run)


def _spec_text(spec: dict) -> str:
    if not spec:
        return "-"
    return (f"{spec.get('optimizer')} {spec.get('lanes')}L x{spec.get('compute_units')} "
            f"{spec.get('grad_dtype')}->{spec.get('out_dtype')} {spec.get('grad_source')}")


def run(args: argparse.Namespace) -> int:
    if not args.dir.is_dir():
        if args.action == "verify" or args.dir.exists():
            raise UserError(f"--dir {args.dir}: {'not a folder' if args.dir.exists() else 'no such folder'}; "
                            "nothing to verify (give the registry folder `optimusnic build --registry` wrote)")
        if args.json:
            emit_json({"dir": str(args.dir), "entries": [], "all_ok": True})
        else:
            print(f"no bitstreams in {args.dir} (no such folder; build one with `optimusnic build --target T`)")
        return 0
    rows = registry.entries(args.dir)
    bad = [r for r in rows if r["status"] != "ok"]
    if args.json:
        emit_json({"dir": str(args.dir), "entries": rows, "all_ok": not bad})
    elif not rows:
        print(f"no bitstreams in {args.dir} (build one with `optimusnic build --target T`)")
    elif args.action == "list":
        print(table([[r["target"], r["name"], r.get("kernel") or "-", _spec_text(r.get("spec", {})),
                      "-" if r.get("timing_met") is None else ("met" if r["timing_met"] else "FAILED"),
                      f"{r['achieved_mhz']:g}" if r.get("achieved_mhz") else "-", r["status"]] for r in rows],
                    ["target", "name", "kernel", "spec", "timing", "MHz", "status"]))
    else:
        for r in rows:
            print(f"{r['status']:>14}  {r['target']}/{r['name']}.xclbin: {r['detail']}")
    # verify fails (exit 1) when anything does not match; list only reports.
    return 1 if (args.action == "verify" and bad) else 0
