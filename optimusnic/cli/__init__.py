"""The `optimusnic` command: one console script, one verb per module in `optimusnic/cli/`.

Each verb module defines `register(subparsers)` and sets `func` on its parser. `build_parser()`
returns the whole parser and `verbs()` each verb's one-line help and parser (what a CLI reference
generator reads). Every failure is
one line on stderr and exit status 2: usage errors (argparse's own, without the usage block),
errors the toolkit raises on purpose (`OptimusError`), and OS errors (a file that cannot be
written). Anything else is a bug of ours: it is reported in one line as an internal error
(OPTIMUSNIC_TRACEBACK=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from typing import NamedTuple, NoReturn

from hls import __version__
from hls.errors import OptimusError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line: `optimusnic VERB: error: ...` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        message = " ".join(message.split())
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `optimusnic` parser with every verb registered (what `main` parses; stable for docs generators)."""
    parser = _Parser(
        prog="optimusnic",
        description="Adam/AdamW optimizer kernels for Alveo SmartNICs: size, generate, simulate, build, drive.",
    )
    parser.add_argument("--version", action="version", version=f"optimusnic {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):  # __main__ runs the command itself; private helpers are no verbs
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


class Verb(NamedTuple):
    name: str
    help: str  # the one line `optimusnic --help` shows for it
    parser: argparse.ArgumentParser


def verbs(parser: argparse.ArgumentParser | None = None) -> list[Verb]:
    """Every verb of `parser` (default: `build_parser()`), sorted by name."""
    parser = parser or build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return [Verb(name, helps.get(name, ""), p) for name, p in sorted(sub.choices.items())]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already one line on stderr)
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        names = ", ".join(v.name for v in verbs(parser))
        print(f"optimusnic: error: give a VERB: {names} (see `optimusnic --help`)", file=sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except OptimusError as exc:
        print(f"optimusnic {args.verb}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"optimusnic {args.verb}: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # an output that cannot be written, a disk that filled up
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"optimusnic {args.verb}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: still one line, but say so
        if os.environ.get("OPTIMUSNIC_TRACEBACK"):
            raise
        detail = " ".join(str(exc).split())[:300]
        print(f"optimusnic {args.verb}: internal error: {type(exc).__name__}: {detail} (please report it; "
              "OPTIMUSNIC_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 2


def _one_line(text: str) -> str:
    """An error as one line: a compiler's or tool's multi-line output is joined with ' | '."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    joined = " | ".join(lines)
    # A control character from a file name or a data file (a terminal escape) is shown escaped.
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in joined)


if __name__ == "__main__":
    sys.exit(main())
