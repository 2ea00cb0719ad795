"""The `optimusnic` command: one console script, one verb per module in `hls/commands/`.

Each verb module defines `register(subparsers)` and sets `func` on its parser. Errors the
toolkit raises on purpose (`OptimusError`) become one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from hls import __version__, commands
from hls.errors import OptimusError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="optimusnic",
        description="Adam/AdamW optimizer kernels for Alveo SmartNICs: size, generate, simulate, build, drive.",
    )
    parser.add_argument("--version", action="version", version=f"optimusnic {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except OptimusError as exc:
        print(f"optimusnic {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"optimusnic {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
