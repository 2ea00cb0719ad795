"""The Python sources are `ruff` clean (the style the project holds itself to)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hls.paths import REPO_ROOT


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: run `make deps`")
    out = subprocess.run([ruff, "check", "optimusnic", "hls", "pynq_driver", "tests", "sim"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
