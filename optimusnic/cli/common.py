"""Options shared by the verbs; the output helpers (JSON, tables, sizes) come from `optimusnic.text`."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from hls.errors import UserError
from hls.spec import (
    CLOCK_MHZ_RANGE,
    GRAD_DTYPES,
    GRAD_SOURCES,
    MAX_COMPUTE_UNITS,
    MAX_LANES,
    MAX_STRIPES,
    OPTIMIZERS,
    OUT_DTYPES,
    OUT_SINKS,
    RATE_GPS_MAX,
    KernelSpec,
    default_name,
)
from optimusnic.text import emit_json as emit_json
from optimusnic.text import human_bytes as human_bytes
from optimusnic.text import human_count as human_count
from optimusnic.text import table as table

MAX_COUNT = 10**15  # parameter counts: a quadrillion is beyond any model this plans for


def int_in(lo: int, hi: int) -> Any:
    """argparse type: a whole number from lo to hi (one line naming the range otherwise)."""
    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {lo:,} to {hi:,}")
        return value

    parse.__name__ = "whole number"
    return parse


def float_in(lo: float, hi: float, *, lo_open: bool = False, unit: str = "") -> Any:
    """argparse type: a finite number in [lo, hi] (or (lo, hi] with lo_open)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not (lo < value if lo_open else lo <= value) or value > hi:
            low = f"above {lo:g}" if lo_open else f"from {lo:g}"
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number {low} to {hi:g}{unit}")
        return value

    parse.__name__ = "number"
    return parse


CLOCK = float_in(*CLOCK_MHZ_RANGE, unit=" MHz")
LANES = int_in(1, MAX_LANES)
COMPUTE_UNITS = int_in(1, MAX_COMPUTE_UNITS)
STRIPES = int_in(1, MAX_STRIPES)
RATE = float_in(0, RATE_GPS_MAX, lo_open=True, unit=" G elements/s")
SEED = int_in(0, 2**32 - 1)


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def add_targets_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--targets-file",
        action="append",
        default=[],
        metavar="FILE",
        help="JSON or TOML file adding or overriding catalog targets (repeatable; later files win)",
    )


def add_spec_options(parser: argparse.ArgumentParser, *, target_required: bool = True) -> None:
    parser.add_argument("--target", required=target_required, default=None if target_required else "u55c",
                        help="catalog target key, e.g. u55c (see `optimusnic targets`)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    parser.add_argument("--lanes", type=LANES, default=None, help="fp32 lanes per beat (power of two, <= 16)")
    parser.add_argument("--compute-units", type=COMPUTE_UNITS, default=1)
    parser.add_argument("--grad-dtype", choices=GRAD_DTYPES, default="fp32")
    parser.add_argument("--out-dtype", choices=OUT_DTYPES, default="fp32")
    parser.add_argument("--grad-source", choices=GRAD_SOURCES, default="memory")
    parser.add_argument("--out-sink", choices=OUT_SINKS, default="memory",
                        help="where the updated parameters go: card memory, or memory and an AXI4-Stream "
                        "(m_axis_param, for the ring's all-gather; one compute unit)")
    parser.add_argument("--name", default=None, help="kernel name (a C identifier); default optimusnic_<optimizer>")
    parser.add_argument("--clock", type=CLOCK, default=None,
                        help=f"kernel clock in MHz, {CLOCK_MHZ_RANGE[0]} to {CLOCK_MHZ_RANGE[1]} "
                        "(default: the target's)")
    add_plan_options(parser)
    add_targets_file(parser)


def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """The memory-plan levers (design.md section 3b), shared by `size` and the spec verbs."""
    parser.add_argument("--stripes", type=STRIPES, default=None,
                        help="stripes of each state array per CU, one memory channel each (default: sizing chooses)")
    parser.add_argument("--rate", type=RATE, default=None, metavar="GELEMS",
                        help="size the memory plan for this rate in G elements/s (default: the line rate)")


def spec_from_args(args: argparse.Namespace, default_lanes: int = 16) -> KernelSpec:
    return KernelSpec(
        target=args.target,
        optimizer=args.optimizer,
        grad_dtype=args.grad_dtype,
        out_dtype=args.out_dtype,
        lanes=args.lanes if args.lanes is not None else default_lanes,
        compute_units=args.compute_units,
        grad_source=args.grad_source,
        out_sink=args.out_sink,
        name=args.name or default_name(args.optimizer),
        clock_mhz=args.clock,
        stripes=args.stripes,
        rate_gps=args.rate,
    )


def parse_count(text: str, limit: int = MAX_COUNT) -> int:
    """Accept 7e9, 7_000_000_000, 7B, 70M, 1.5G as a positive whole count (at most `limit`)."""
    t = text.strip().replace("_", "").replace(",", "")
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    mult = 1.0
    if t and t[-1].lower() in scale:
        mult = scale[t[-1].lower()]
        t = t[:-1]
    try:
        value = float(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 7e9, 7B, 350M)") from None
    if not math.isfinite(value) or value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive whole number")
    if value > limit:
        raise argparse.ArgumentTypeError(f"{text!r} is more than {limit:,}")
    return int(value)


def count_up_to(limit: int) -> Any:
    """argparse type: parse_count with its own upper limit (e.g. elements a host run can hold)."""
    def parse(text: str) -> int:
        return parse_count(text, limit)

    parse.__name__ = "count"
    return parse


def path_arg(text: str) -> Path:
    """argparse type for a file or folder: not empty (Path('') would silently mean the current folder)."""
    if not text.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r}: empty or invalid path")
    return Path(text)


def require(condition: bool, message: str) -> None:
    if not condition:
        raise UserError(message)
