"""`optimusnic build`: generated project -> .xo -> v++ link -> bitstreams/<target>/<name>.xclbin."""

from __future__ import annotations

import argparse

from hls.errors import UserError
from hls.manifest import load_manifest, spec_from_manifest
from hls.paths import BITSTREAMS_DIR
from hls.targets import get_target
from hls.vitis import build
from optimusnic.cli.common import add_json, add_spec_options, emit_json, path_arg, spec_from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="build a bitstream with Vitis (vitis_hls or vitis-run, or Vivado package_xo; then v++ link) "
        "into bitstreams/",
        description="Runs the vendor flow for a kernel and registers the xclbin in bitstreams/<target>/. "
        "--dry-run prints every command and file without running anything.",
    )
    add_spec_options(p)
    p.add_argument("--kernel", choices=build.KERNELS, default="hls", help="which kernel to build (default: hls)")
    p.add_argument("--platform", default=None, help="XRT platform name or PATH.xpfm (default: the catalog's)")
    p.add_argument("--project", type=path_arg, default=None,
                   help="an already generated project folder (default: generate into <run>/project)")
    p.add_argument("-o", "--output", type=path_arg, default=None,
                   help="run folder (default: build/runs/<target>-<name>-<kernel>)")
    p.add_argument("--registry", type=path_arg, default=BITSTREAMS_DIR,
                   help="bitstream registry folder (default: bitstreams/)")
    p.add_argument("--placement", choices=build.netpkg.PLACEMENTS, default="sidecar",
                   help="sidecar (default): the Adam kernel alone; rail: also the network kernel and XUP VNx "
                   "cmac_<i> with their stream_connect lines (dry run only: the network kernel is not built yet)")
    p.add_argument("--stream-connect", action="append", default=None, metavar="KERNEL.PORT",
                   help="a stream-source kernel: the kernel output feeding the gradient stream, written as a "
                   "stream_connect line into the run's link.cfg (once per compute unit)")
    p.add_argument("--param-connect", default=None, metavar="KERNEL.PORT",
                   help="a kernel with --out-sink memory+stream: the kernel input its parameter stream feeds, "
                   "written as a stream_connect line into the run's link.cfg")
    p.add_argument("--dry-run", action="store_true", help="print the commands and files; run nothing")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.project is not None:
        spec = spec_from_manifest(load_manifest(args.project))
        if spec.target != args.target:
            raise UserError(f"{args.project} was generated for target {spec.target}, not {args.target}: "
                            f"build it with --target {spec.target} or generate a project for {args.target}")
    else:
        spec = spec_from_args(args)
    target = get_target(spec.target, args.targets_file)
    plan = build.plan_build(spec, target, kernel=args.kernel, run_dir=args.output, project_dir=args.project,
                            platform=args.platform, bitstreams_dir=args.registry,
                            placement=args.placement, stream_connect=args.stream_connect,
                            param_connect=args.param_connect)
    if args.dry_run:
        if args.json:
            emit_json(build.plan_to_dict(plan))
        else:
            print(build.format_plan(plan))
        return 0
    build.run_build(plan, bitstreams_dir=args.registry)
    return 0
