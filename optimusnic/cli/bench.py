"""`optimusnic bench WHICH`: throughput benchmarks (csim here; rtl and driver live with their owners)."""

from __future__ import annotations

import argparse
import importlib

from hls.errors import ToolMissing
from optimusnic.cli.common import add_json, count_up_to, int_in

# which -> module providing `run(args) -> int` (or "module:function"); imported lazily so a missing one
# only affects itself. rtlnet's runner lives in the report module, which writes its section of results.md.
BENCHES = {"csim": "optimusnic.bench.csim", "rtl": "optimusnic.bench.rtl", "driver": "optimusnic.bench.driver",
           "net": "optimusnic.bench.net",
           "rtlnet": "optimusnic.bench.report:rtlnet_run", "gpu": "optimusnic.bench.gpu"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark csim (vs torch AdamW), rtl, driver, net (ring vs DDP), rtlnet (the "
                                     "network RTL at line rate, its section of bench/results.md), gpu (NicAdamW's "
                                     "staged GPU path vs fused AdamW); all writes bench/results.md")
    p.add_argument("which", choices=[*BENCHES, "all"])
    p.add_argument("--params", type=count_up_to(1 << 30), default=16 * 1024 * 1024, help="parameters (default 16M)")
    p.add_argument("--repeats", type=int_in(1, 1000), default=5,
                   help="timed repeats; the median is reported (rtlnet: seeds per case, at most 9)")
    p.add_argument("--threads", type=int_in(1, 256), default=None, help="csim and torch threads (default: every core)")
    p.add_argument("--sizes", type=lambda t: [count_up_to(1 << 30)(x) for x in t.split(",")], default=None,
                   help="csim: parameter counts to measure, comma-separated (default 1048576,16777216,50M); "
                        "net: elements per rank (default 1048576,4194304)")
    p.add_argument("--worlds", type=lambda t: [int_in(2, 16)(x) for x in t.split(",")], default=None,
                   help="net, rtlnet: ring sizes N, comma-separated (default 2,3,4)")
    p.add_argument("--parts", type=lambda t: [x.strip() for x in t.split(",")], default=None,
                   help="rtlnet: what to measure, comma-separated of card, stand-in, card-drops (goodput under loss "
                        "with the Adam RTL kernel), card-hbm (the card on the HBM model, every port on its planned "
                        "channel), ring (N RTL cards in one build), bf16 (bf16 wire and parameters, "
                        "stand-in), rounds (round-major order on N RTL cards); default all; the other parts' "
                        "figures are kept from bench/results.json")
    p.add_argument("--net-backends", type=lambda t: [x.strip() for x in t.split(",")], default=None,
                   help="net: software cards to time, comma-separated golden,csim (default both)")
    p.add_argument("--no-ddp", action="store_true", help="net: skip the DDP + AdamW (gloo) baseline")
    p.add_argument("--rto-ms", type=int_in(1, 10_000), default=None,
                   help="net: the cards' retransmission timeout in ms (default: the ring node's, 20)")
    p.add_argument("--device", default=None,
                   help="gpu: torch device (default: the GPU torch finds; none: one line, exit 2); cpu runs the "
                        "staged pipeline forced on CPU tensors")
    add_json(p)
    p.set_defaults(func=run)


def _load(which: str):  # noqa: ANN202 - returns the module's run function
    name, _, function = BENCHES[which].partition(":")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ToolMissing(f"bench {which}: {name} is not available ({exc.name} missing)") from exc
    if not hasattr(module, function or "run"):
        raise ToolMissing(f"bench {which}: {name} has no {function or 'run'}(args)")
    return getattr(module, function or "run")


def run(args: argparse.Namespace) -> int:
    if args.which != "all":
        return int(_load(args.which)(args) or 0)
    from optimusnic.bench.report import run_all

    path = run_all(args.params, max(1, args.repeats), args.threads, sizes=args.sizes)
    print(path.read_text())
    print(f"written: {path} (and results.png, results.json beside it)")
    return 0
