"""Generated projects the tests share: a fresh copy of one to edit."""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_project(project: Path, tmp_path: Path) -> Path:
    """A copy of `project` at `tmp_path`/p, to edit without touching the module's project."""
    dest = tmp_path / "p"
    shutil.copytree(project, dest)
    return dest
