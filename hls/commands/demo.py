"""`optimusnic demo`: for now, the sizing report of the default target."""

from __future__ import annotations

import argparse

from hls.commands.size import format_report
from hls.sizing import size
from hls.targets import get_target

DEFAULT_TARGET = "u55c"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the demo")
    p.add_argument("--target", default=DEFAULT_TARGET)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(format_report(size(get_target(args.target), 7_000_000_000, grad_dtype="bf16", cards=8)))
    return 0
