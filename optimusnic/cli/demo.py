"""`optimusnic demo`: train a small model with NicAdamW (state on the card) next to torch.optim.AdamW."""

from __future__ import annotations

import argparse

from hls import safe_io
from hls.errors import UserError
from hls.paths import BUILD_DIR
from optimusnic.cli.common import add_json, emit_json, int_in, path_arg, require

DEMO_BACKENDS = ("golden", "csim", "rtlsim")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="train a small model with NicAdamW on a simulated card next to torch.optim.AdamW",
        description="Train a small character-level transformer (text shipped with the package) with NicAdamW, "
                    "its optimizer state on a simulated card, side by side with torch.optim.AdamW: prints a loss "
                    "table and the final parameter difference, writes a PNG of both loss curves.",
    )
    p.add_argument("--backend", choices=DEMO_BACKENDS, default="csim",
                   help="csim: the generated HLS kernel compiled for the host (default); golden: the numpy model; "
                        "rtlsim: the RTL kernel in Verilator (slow: fewer steps, a small MLP; the first run builds "
                        "the simulator, minutes on 2 cores)")
    p.add_argument("--steps", type=int_in(2, 100_000), default=None, help="training steps (default 300; 40 on rtlsim)")
    p.add_argument("--world-size", type=int_in(1, 16), default=1,
                   help="ranks for the sharded run (ShardedNicOptimizer over gloo, one process per rank)")
    p.add_argument("--model", choices=("transformer", "mlp", "mlp-small"), default=None,
                   help="what to train (default: transformer; mlp-small, 612 parameters, on rtlsim)")
    p.add_argument("--out", type=path_arg, default=BUILD_DIR / "demo", metavar="DIR",
                   help="where the PNG and summary.json go (default build/demo/)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    require(args.steps is None or args.steps >= 2, f"--steps {args.steps}: need at least 2 steps")
    require(1 <= args.world_size <= 16, f"--world-size {args.world_size}: choose 1 to 16 local ranks")
    safe_io.check_writable_dir(args.out, "--out")  # before minutes of training, not after
    for name in ("loss_curves.png", "summary.json"):
        safe_io.check_writable_file(args.out / name, "--out")
    try:
        from optimusnic.demo import run as demo
    except ImportError as exc:  # torch, tqdm or matplotlib missing from this environment
        raise UserError(f"the demo needs the torch extras ({exc}); run `make demo`, which installs them") from exc
    if args.backend == "rtlsim":
        _check_rtlsim()
    model = args.model or demo.DEFAULT_TASK[args.backend]
    batch = 16 if model == "transformer" else 32
    require(batch % args.world_size == 0,
            f"--world-size {args.world_size}: the batch of {batch} must split evenly over the ranks")
    result = demo.run_demo(backend=args.backend, steps=args.steps, world_size=args.world_size, out_dir=args.out,
                           task_name=model, progress=not args.json)
    if args.json:
        emit_json(result)
    else:
        print(demo.format_report(result))
    return 0


def _check_rtlsim() -> None:
    """Fail in one line when the rtlsim backend (or Verilator) is not there, instead of deep in a run."""
    try:
        import pynq_driver.backends.rtlsim  # noqa: F401
    except ImportError as exc:
        raise UserError(f"--backend rtlsim is not available in this checkout ({exc}); use --backend csim") from exc
