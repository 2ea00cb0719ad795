"""Reading, loading and verifying a generated project: its manifest and every file it records.

A project is trusted only when whole (`load_manifest`): the manifest matches its schema
(hls/validate.py), every file it lists is there, inside the project and has its recorded sha256,
and rendering the recorded spec for the recorded target (`hls.generate.render`) gives exactly the
recorded files, sizing, register map and memory plan. An edited `spec.out_dtype` (which would make
the C harness read a bf16 buffer as fp32) or an edited kernel source is refused with one line
naming what differs, before anything is compiled or loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from hls import safe_io, validate
from hls.errors import OptimusError, UserError
from hls.generate import MANIFEST, render
from hls.spec import KernelSpec, SpecError
from hls.targets import CatalogError, get_target, target_from_facts

GENERATED_FILE_MAX = 16 << 20  # a generated source is at most a few hundred KB


class ProjectMismatch(UserError):
    """A project folder is not whole: a file differs from its recorded sha256, or the manifest
    does not describe what it records (an edited spec, register map or target)."""


def read_manifest(path: Path) -> dict[str, Any]:
    """A project manifest, parsed and checked against its schema (no project-folder checks)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise UserError(f"{path}: no manifest; generate the project first (optimusnic generate -o DIR)")
    text = safe_io.read_text(path, safe_io.MANIFEST_MAX, "manifest")
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{path}: manifest is not valid JSON ({str(exc).splitlines()[0] if str(exc) else exc!r})") \
            from exc
    return validate.project_manifest(data, str(path))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_manifest(project_dir: Path, *, verify: bool = True,
                  targets_files: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The manifest of a generated project, trusted only when the project is whole.

    With `verify` (the default, and what csim, the driver backends and build use): schema, then
    every recorded file's sha256, then re-rendering the recorded spec for the recorded target must
    give the recorded files, sizing, register map, banks and memory plan. Raises UserError (one
    line naming the file or field that differs)."""
    project_dir = Path(project_dir)
    if project_dir.exists() and not project_dir.is_dir():
        raise UserError(f"{project_dir}: not a project folder (a file); give the folder `optimusnic generate -o` wrote")
    path = project_dir / MANIFEST
    manifest = read_manifest(path)
    spec = spec_from_manifest(manifest, str(path))
    if verify:
        verify_project(project_dir, manifest, spec, targets_files)
    return manifest


def spec_from_manifest(manifest: dict[str, Any], where: str = MANIFEST) -> KernelSpec:
    if not isinstance(manifest, dict) or not isinstance(manifest.get("spec"), dict):
        raise UserError(f"{where}: spec: missing or not a table")
    try:
        return KernelSpec.from_dict(dict(manifest["spec"]))
    except SpecError as exc:
        raise UserError(f"{where}: spec.{exc}") from exc
    except TypeError as exc:
        raise UserError(f"{where}: spec: {exc}") from exc


def verify_project(project_dir: Path, manifest: dict[str, Any], spec: KernelSpec,
                   targets_files: list[str] | tuple[str, ...] = ()) -> None:
    """Raise ProjectMismatch unless every recorded file is intact and the manifest is consistent."""
    project_dir = Path(project_dir)
    where = project_dir / MANIFEST
    for rel, want in sorted(manifest["files"].items()):
        file = safe_io.inside(project_dir, rel, f"{where}: files")
        if not file.exists():
            raise ProjectMismatch(f"{file}: missing; the manifest lists it: regenerate the project "
                                  "(optimusnic generate)")
        got = hashlib.sha256(safe_io.read_bytes(file, GENERATED_FILE_MAX, "generated file")).hexdigest()
        if got != want:
            raise ProjectMismatch(f"{file}: differs from the sha256 the manifest records ({got[:12]}... vs "
                                  f"{want[:12]}...): the project was edited; regenerate it (optimusnic generate)")
    expected = _expected_manifest(json.dumps(manifest, sort_keys=True), tuple(targets_files))
    got_files, want_files = manifest["files"], expected["files"]
    if got_files != want_files:
        first = sorted(k for k in set(got_files) | set(want_files) if got_files.get(k) != want_files.get(k))[0]
        raise ProjectMismatch(f"{where}: the recorded spec ({_spec_text(spec)}) does not give the recorded files "
                              f"({first} differs first): the manifest was edited; regenerate the project "
                              "(optimusnic generate)")
    for key in ("spec", "target", "register_map", "sizing", "banks", "memory_plan"):
        if key in manifest or key in expected:
            if manifest.get(key) != expected.get(key):
                raise ProjectMismatch(f"{where}: {key}: {_first_difference(manifest.get(key), expected.get(key))}; "
                                      f"the manifest does not describe a project generated for its own spec "
                                      f"(edited?): regenerate the project (optimusnic generate)")


@functools.lru_cache(maxsize=64)
def _expected_manifest(manifest_json: str, targets_files: tuple[str, ...]) -> dict[str, Any]:
    """What generating the manifest's own spec for its own target gives (JSON round-tripped)."""
    manifest = json.loads(manifest_json)
    spec = spec_from_manifest(manifest)
    recorded = manifest["target"]
    where = MANIFEST
    if recorded["key"] != spec.target:
        raise ProjectMismatch(f"{where}: target.key {recorded['key']!r} but spec.target {spec.target!r}")
    try:
        if "target_facts" in manifest:
            target = target_from_facts(spec.target, manifest["target_facts"], f"{where}: target_facts")
        else:  # manifests written before target_facts: the catalog's definition
            target = get_target(spec.target, targets_files)
    except CatalogError as exc:
        raise ProjectMismatch(f"{where}: {exc}") from exc
    mine = {"key": target.key, "name": target.name, "part": target.part, "platform": target.platform,
            "flow": target.flow}
    if mine != recorded:
        raise ProjectMismatch(f"{where}: target: {_first_difference(recorded, mine)}")
    try:
        _files, expected = render(spec, target)
    except OptimusError as exc:
        raise ProjectMismatch(f"{where}: its spec cannot be generated ({exc})") from exc
    return json.loads(json.dumps(expected))


def _spec_text(spec: KernelSpec) -> str:
    return (f"{spec.name}: {spec.optimizer}, grad {spec.grad_dtype}, out {spec.out_dtype}, {spec.lanes} lanes, "
            f"{spec.compute_units} CU, {spec.target}")


def _first_difference(got: Any, want: Any, path: str = "") -> str:
    """Where two JSON values first differ, e.g. "out_dtype: 'bf16', the spec renders 'fp32'"."""
    if isinstance(got, dict) and isinstance(want, dict):
        for k in sorted(set(got) | set(want)):
            if got.get(k) != want.get(k):
                return _first_difference(got.get(k), want.get(k), f"{path}.{k}" if path else str(k))
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    show = lambda v: (repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "...")  # noqa: E731
    return f"{path or 'value'} is {show(got)}, the recorded spec gives {show(want)}"


__all__ = ["GENERATED_FILE_MAX", "MANIFEST", "ProjectMismatch", "load_manifest", "read_manifest",
           "spec_from_manifest", "verify_project"]
