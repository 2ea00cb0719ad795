"""`optimusnic generate`: render a complete kernel project (HLS, RTL, manifest) for one spec."""

from __future__ import annotations

import argparse
from pathlib import Path

from hls.errors import UserError
from hls.generate import MANIFEST, write_project
from hls.targets import get_target
from optimusnic.cli.common import add_json, add_spec_options, emit_json, path_arg, spec_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="render the Vitis HLS / RTL project and manifest for a kernel spec")
    add_spec_options(p)
    p.add_argument("-o", "--out", required=True, type=path_arg, help="output directory (created; files overwritten)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target = get_target(args.target, args.targets_file)
    spec = spec_from_args(args)
    out = Path(args.out)
    if str(out).strip() == "":
        raise UserError("--out: empty path")
    manifest = write_project(spec, out, target)
    files = [*sorted(manifest["files"]), MANIFEST]
    if args.json:
        emit_json({"out": str(out), "files": files, "verdict": manifest["sizing"]["verdict"], "manifest": manifest})
        return 0
    print(f"{spec.name} for {target.name} -> {out}")
    for rel in files:
        print(f"  {out / rel}")
    sz = manifest["sizing"]
    st = sz["stripes"]
    print(f"memory plan: {st['state']} stripe(s) each of p, m, v, {st['grad']} of grad, {st['out']} of out per CU, "
          f"{sz['achieved_params_per_s'] / 1e9:.2f} G elements/s ({sz['binding']})")
    print(f"sizing: {sz['verdict']}")
    if not target.has_xrt_flow:
        print(f"note: {target.name} has no XRT flow; see {out / 'versal' / 'NOTE.md'}")
    return 0
