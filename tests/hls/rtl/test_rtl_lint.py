"""Lint every Verilog module under sim/rtl: `verilator --lint-only -Wall` must print no warning,
and Icarus 11 (`iverilog -g2012`) must compile it.

Each `<dir>/<module>.v` is linted as top with the files listed in its directory's `.f` lists
(dependencies); every RTL directory is also a `-y` library, so a new directory of RTL is picked
up without touching this file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hls.paths import REPO_ROOT, RTL_DIR
from hls.rtl import simulators
from hls.rtl_sources import read_filelist


def rtl_files() -> list[Path]:
    return sorted(RTL_DIR.rglob("*.v"))


def dependencies(module_file: Path) -> list[Path]:
    """The module file plus every existing file named by the `.f` lists of its directory."""
    files: list[Path] = []
    for flist in sorted(module_file.parent.glob("*.f")):
        files += [f for f in read_filelist(flist) if f.exists() and f not in files]
    if module_file.resolve() not in files:
        files.append(module_file.resolve())
    return files


def library_dirs() -> list[str]:
    """`-y <dir>` for every RTL directory: modules not in a .f list are found by file name."""
    dirs = sorted({p.parent for p in rtl_files()})
    return [arg for d in dirs for arg in ("-y", str(d))]


def _id(path: Path) -> str:
    return str(path.relative_to(RTL_DIR))


@pytest.mark.parametrize("module_file", rtl_files(), ids=_id)
def test_verilator_lint(module_file: Path) -> None:
    if not simulators.available("verilator"):
        pytest.skip("Verilator not installed")
    env = {**os.environ, **simulators.simulator_env("verilator")}
    cmd = [
        simulators.verilator_bin(),
        "--lint-only",
        "-Wall",
        "--top-module",
        module_file.stem,
        *library_dirs(),
        *map(str, dependencies(module_file)),
    ]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "%Warning" not in output and "%Error" not in output, output


@pytest.mark.icarus
@pytest.mark.parametrize("module_file", rtl_files(), ids=_id)
def test_icarus_compiles(module_file: Path, tmp_path: Path) -> None:
    iverilog = shutil.which("iverilog")
    assert iverilog
    cmd = [
        iverilog,
        "-g2012",
        "-Wall",
        "-o",
        str(tmp_path / "out.vvp"),
        "-s",
        module_file.stem,
        *library_dirs(),
        *map(str, dependencies(module_file)),
    ]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_verilator_make_vars_join_the_callers_makeflags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model build gets the make variables once; one the caller's MAKEFLAGS names is the caller's."""
    monkeypatch.setenv("MAKEFLAGS", "-k OPT_FAST=-O3")
    simulators.apply_env("verilator")
    simulators.apply_env("verilator")
    words = os.environ["MAKEFLAGS"].split()
    assert words.count("OPT_FAST=-O3") == 1 and not any(w.startswith("OPT_FAST=-O1") for w in words)
    assert words[0] == "-k" and words.count("CFG_CXXFLAGS_PCH_I=-include") == 1
    assert words.count(f"OPT_GLOBAL={simulators.VERILATOR_MAKE_VARS['OPT_GLOBAL']}") == 1
    monkeypatch.setenv("MAKEFLAGS", "")
    simulators.apply_env("icarus")
    assert os.environ["MAKEFLAGS"] == ""
