"""The import structure: three packages in layers, stages apart, no circles (imports inside functions count).

`lint-imports` checks the contracts of pyproject.toml [tool.importlinter]; a scratch copy of the
packages with one upward import planted must make it fail, so the contracts really bite. The
circle check is over every module of the product, not only siblings: grimp's graph, whose edges
include imports made inside functions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("optimusnic", "pynq_driver", "hls")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.fail("lint-imports is not installed: run `make deps` (import-linter is in the dev extra)")
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([str(exe), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_contracts_kept() -> None:
    r = _lint_imports(REPO_ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


@pytest.mark.parametrize(("module", "upward"), [
    ("hls/spec.py", "import pynq_driver.device"),              # toolkit -> driver
    ("pynq_driver/device.py", "from optimusnic import cli"),    # driver -> application
    ("hls/rtl/simulators.py", "from hls.csim import kernel"),   # one stage -> another
    ("pynq_driver/shard.py", "import torch"),                   # torch outside optim
])
def test_planted_violation_fails(tmp_path: Path, module: str, upward: str) -> None:
    for pkg in PACKAGES:
        shutil.copytree(REPO_ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert _lint_imports(tmp_path).returncode == 0, "the scratch copy must pass before the violation is planted"
    target = tmp_path / module
    # Inside a function, where a circle or an upward edge is easiest to hide.
    target.write_text(target.read_text() + f"\n\ndef _planted() -> None:\n    {upward}  # noqa\n")
    r = _lint_imports(tmp_path)
    assert r.returncode != 0, f"planting `{upward}` in {module} was not caught:\n{r.stdout[-3000:]}"
    assert "BROKEN" in r.stdout


def test_no_import_circles() -> None:
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter: run `make deps`")
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules)) for m in modules}
    circles = _strongly_connected(modules, edges)
    listing = "\n".join(" <-> ".join(c) for c in circles)
    assert not circles, f"import circles (imports inside functions count):\n{listing}"


def _strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out
