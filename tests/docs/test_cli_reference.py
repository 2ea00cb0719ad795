"""docs/reference/cli.md is what `python -m optimusnic.cli.reference` renders from the parser."""

from __future__ import annotations

import os
import subprocess
import sys

from hls.paths import REPO_ROOT
from optimusnic.cli import build_parser
from optimusnic.cli.reference import PAGE, render


def test_committed_page_equals_the_parser():
    assert PAGE.read_text() == render(), "docs/reference/cli.md is stale: run `python -m optimusnic.cli.reference`"


def test_every_verb_and_option_is_on_the_page():
    text = render()
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for verb, parser in sub.choices.items():
        assert f"## optimusnic {verb}\n" in text
        for action in parser._actions:
            for flag in action.option_strings if action.dest != "help" else ():
                assert f"`{flag}`" in text, (verb, flag)


def test_rendering_is_deterministic_and_free_of_this_clone():
    assert render() == render()
    assert str(REPO_ROOT) not in render()


def test_check_mode(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text("old\n")
    cmd = [sys.executable, "-m", "optimusnic.cli.reference"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def run(*args):
        return subprocess.run([*cmd, *args], capture_output=True, env=env, cwd=tmp_path, timeout=60).returncode

    assert run("--check", "-o", str(stale)) == 1
    assert run("-o", str(stale)) == 0
    assert run("--check", "-o", str(stale)) == 0
    assert stale.read_text() == render()
