"""Every fenced code block in README.md and docs/ runs here, or says why it cannot.

- ```python blocks run in a subprocess (a fresh temporary working folder, the repository on
  PYTHONPATH, a timeout). A `<!-- prelude: CODE -->` line right before the block is run first
  (e.g. a tiny `model` for the one-line change).
- ```console blocks (`$ ` lines) and ```sh blocks (every line) run each command through the
  `optimusnic` CLI, in order, in one temporary folder per block; every command must start with
  `optimusnic`.
- A `<!-- needs: WHAT -->` line right before a block marks it as not runnable here (WHAT is one
  of NEEDS); such a block is only checked: python must parse, console/sh must be `optimusnic`
  commands or say why not. ```text blocks are output, diagrams or formulas: never run.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LANGS = {"python", "console", "sh", "text"}
NEEDS = {
    "card": "an Alveo card with XRT and a built xclbin",
    "vitis": "AMD Vitis / Vivado and the card's platform",
    "torchrun": "several ranks under torchrun (the FSDP2 example runs in test_fsdp2_example.py)",
    "make": "the make targets: set-up and whole suites, minutes to hours",
    "minutes": "runs here but takes minutes (Verilator builds, yosys); covered by the tests of its stage",
}
MARKER = re.compile(r"^<!--\s*(.*?)\s*-->\s*$")
CLI = "import sys; from optimusnic.cli import main; sys.exit(main())"


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    markers: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def needs(self) -> list[str]:
        return [m.split(":", 1)[1].strip() for m in self.markers if m.startswith("needs:")]

    @property
    def prelude(self) -> str:
        return "\n".join(m.split(":", 1)[1].strip() for m in self.markers if m.startswith("prelude:"))


def blocks(page: Path) -> list[Block]:
    out: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(.*)$", lines[i])
        if not m:
            i += 1
            continue
        markers, j = [], i - 1
        while j >= 0 and MARKER.match(lines[j]):
            markers.insert(0, MARKER.match(lines[j]).group(1))
            j -= 1
        end = i + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        assert end < len(lines), f"{page}:{i + 1}: code block never closed"
        out.append(Block(page, i + 1, m.group(1).strip(), "\n".join(lines[i + 1:end]) + "\n", markers))
        i = end + 1
    return out


ALL = [b for page in PAGES for b in blocks(page)]


def commands(block: Block) -> list[list[str]]:
    """The commands of a console (`$ ` lines, `\\` continuations) or sh block, comments dropped."""
    lines = block.code.splitlines()
    if block.lang == "console":
        lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
    text = "\n".join(lines).replace("\\\n", " ")
    return [argv for ln in text.splitlines() if (argv := shlex.split(ln, comments=True))]


def test_pages_have_blocks():
    assert len(PAGES) >= 12 and len(ALL) >= 20


@pytest.mark.parametrize("block", ALL, ids=lambda b: b.id)
def test_block_is_runnable_or_marked(block):
    assert block.lang in LANGS, f"{block.id}: give the block a language, one of {sorted(LANGS)}"
    unknown = set(block.needs) - set(NEEDS)
    assert not unknown, f"{block.id}: unknown needs {unknown}; known: {sorted(NEEDS)}"
    if block.lang == "python":
        ast.parse(block.prelude + "\n" + block.code, filename=block.id)
    elif block.lang in ("console", "sh"):
        cmds = commands(block)
        assert cmds, f"{block.id}: no command"
        if not block.needs:
            others = [c for c in cmds if c[0] != "optimusnic"]
            assert not others, f"{block.id}: {others[0]} is not an optimusnic command: mark it <!-- needs: ... -->"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def _once(found: list[Block]) -> list[Block]:
    """A block repeated word for word on another page (the one-line change) runs once."""
    seen: dict[tuple[str, str, str], Block] = {}
    for b in found:
        seen.setdefault((b.lang, b.prelude, b.code), b)
    return list(seen.values())


RUN_PY = _once([b for b in ALL if b.lang == "python" and not b.needs])
RUN_CLI = _once([b for b in ALL if b.lang in ("console", "sh") and not b.needs])


@pytest.mark.parametrize("block", RUN_PY, ids=lambda b: b.id)
def test_python_block_runs(block, tmp_path):
    (tmp_path / "block.py").write_text(block.prelude + "\n" + block.code)
    r = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, f"{block.id}:\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("block", RUN_CLI, ids=lambda b: b.id)
def test_cli_block_runs(block, tmp_path):
    for argv in commands(block):
        r = subprocess.run([sys.executable, "-c", CLI, *argv[1:]], cwd=tmp_path, env=_env(), capture_output=True,
                           text=True, timeout=180)
        assert r.returncode == 0, f"{block.id}: {shlex.join(argv)}\n{r.stdout[-1500:]}\n{r.stderr[-2000:]}"
