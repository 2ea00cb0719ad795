"""What the hostile-input tests share: an empty working folder, and one generated project per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from hls.generate import write_project
from hls.spec import KernelSpec


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from an empty folder: a command that wrongly writes to '.' cannot touch the checkout."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proj") / "p"
    write_project(KernelSpec(lanes=4), out)
    return out
