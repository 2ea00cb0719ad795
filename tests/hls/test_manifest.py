"""A project's manifest is a function of its spec and the catalog alone: no build cache changes it.

Sizing once copied a cached yosys estimate ("does not fit", build/synth/) into the manifest's sizing
notes, and verifying compares the manifest with a fresh render, so a project generated while such an
estimate was cached stopped loading after `make clean` (and one generated before, once it was cached).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hls.generate import write_project
from hls.manifest import load_manifest, read_manifest
from hls.rtl import synth
from hls.spec import KernelSpec
from hls.targets import get_target


def _cache_misfit(cache: Path) -> None:
    """A cached estimate whose lane is a tenth of the U50's LUTs: 16 lanes do not fit."""
    target = get_target("u50")
    lane = {"lut": target.usable("lut") // 10, "ff": 100, "dsp": 10, "bram36": 0, "uram": 0}
    infra = {"lut": 1000, "ff": 100, "dsp": 0, "bram36": 4, "uram": 0}
    synth.save_estimate({"spec": KernelSpec(target="u50", lanes=1).to_dict(), "lane": lane,
                         "infrastructure": infra, "total": {}, "usable": {}}, cache)
    assert synth.fit_note(KernelSpec(target="u50", lanes=16), target, cache)


SPEC = KernelSpec(target="u50", lanes=16, name="cachefree")


def test_project_generated_with_a_cached_misfit_loads_after_the_cache_is_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "synth"
    monkeypatch.setattr(synth, "SYNTH_DIR", cache)
    _cache_misfit(cache)
    manifest = write_project(SPEC, tmp_path / "p")
    assert not any("yosys" in n for n in manifest["sizing"]["notes"])
    assert load_manifest(tmp_path / "p") == read_manifest(tmp_path / "p" / "manifest.json")
    shutil.rmtree(cache)  # make clean
    assert load_manifest(tmp_path / "p") == manifest


def test_project_generated_without_a_cache_loads_once_a_misfit_is_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "synth"
    monkeypatch.setattr(synth, "SYNTH_DIR", cache)
    manifest = write_project(SPEC, tmp_path / "p")
    _cache_misfit(cache)
    assert load_manifest(tmp_path / "p") == manifest
