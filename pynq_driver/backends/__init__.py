"""`open_device`: one kernel on a card (`alveo`) or in simulation (`rtlsim`, `csim`, `golden`)."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from hls.errors import UserError
from hls.file_lock import locked
from hls.generate import render, write_project
from hls.manifest import MANIFEST, load_manifest, read_manifest
from hls.paths import BUILD_DIR
from hls.sizing import StripeCounts
from hls.spec import KernelSpec
from pynq_driver.device import Device

BACKENDS = ("golden", "csim", "rtlsim", "alveo")


@functools.lru_cache(maxsize=32)
def _rendered(spec: KernelSpec) -> dict[str, Any]:
    return render(spec)[1]


def rendered_manifest(spec: KernelSpec) -> dict[str, Any]:
    """The manifest `spec`'s project would have (rendered in memory once per spec)."""
    return copy.deepcopy(_rendered(spec))


def project_for(spec: KernelSpec, project_dir: str | Path | None) -> tuple[Path, dict[str, Any]]:
    """The generated project of `spec`: the given folder (checked against the spec) or one in build/."""
    if project_dir is None:
        project_dir, manifest = _cached_project(spec)
    else:
        project_dir = Path(project_dir)
        manifest = load_manifest(project_dir)  # trusted only when whole: every sha256, spec -> files (hls/manifest.py)
    if manifest.get("spec") != spec.to_dict():
        raise UserError(f"{project_dir}: generated for spec {manifest.get('spec')}, not {spec.to_dict()}")
    return project_dir, manifest


def _cached_project(spec: KernelSpec) -> tuple[Path, dict[str, Any]]:
    key = hashlib.sha256(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()[:16]
    project_dir = BUILD_DIR / "driver" / f"{spec.name}-{key}"
    # Checked and rewritten under a lock (`locked` creates build/driver/ with its lock file): another
    # process (a pytest-xdist worker, a second driver) may be writing the same project, and a
    # half-written one fails verification.
    with locked(project_dir.parent / f".{project_dir.name}.lock"):
        try:
            current = read_manifest(project_dir / MANIFEST)
        except UserError:  # missing, unreadable or malformed: the cache is rewritten whole
            current = None
        # The whole manifest, not only the files: a toolkit whose sizing changed (same templates, new
        # figures) must not keep a project that its own verification then rejects.
        if current != _rendered(spec):
            write_project(spec, project_dir)
        return project_dir, load_manifest(project_dir)


def open_device(
    backend: str = "csim",
    spec: KernelSpec | None = None,
    project_dir: str | Path | None = None,
    xclbin: str | Path | None = None,
    timeout_s: float = 10.0,
    **options: Any,
) -> Device:
    """Open one kernel. `spec` defaults to the project's (or KernelSpec()); see README for each backend."""
    if backend not in BACKENDS:
        raise UserError(f"backend: {backend!r}; choose one of {', '.join(BACKENDS)}")
    if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise UserError(f"timeout_s: {timeout_s!r} must be a positive number of seconds")
    if spec is None:
        spec = (KernelSpec.from_dict(load_manifest(Path(project_dir))["spec"]) if project_dir is not None
                else KernelSpec())
    if not isinstance(spec, KernelSpec):
        raise UserError(f"spec: expected hls.spec.KernelSpec, got {type(spec).__name__}")
    if spec.grad_source != "memory":
        raise UserError("grad_source=stream kernels take gradients from the network port; "
                        "the host driver needs grad_source=memory")
    if spec.out_sink != "memory":
        raise UserError(f"out_sink={spec.out_sink} kernels send their parameters to the network port (the ring's "
                        "all-gather), which nothing drains on a host-driven card; the host driver needs "
                        "out_sink=memory")
    if backend == "golden":
        from pynq_driver.backends.soft import SoftDevice, golden_executor

        manifest = load_manifest(Path(project_dir)) if project_dir is not None else rendered_manifest(spec)
        if manifest["spec"] != spec.to_dict():
            raise UserError(f"{project_dir}: generated for spec {manifest['spec']}, not {spec.to_dict()}")
        return SoftDevice(manifest, golden_executor(spec, StripeCounts(**manifest["register_map"]["stripes"])),
                          backend="golden", timeout_s=timeout_s, **options)
    if backend == "csim":
        from pynq_driver.backends.soft import SoftDevice, csim_executor

        pdir, manifest = project_for(spec, project_dir)
        executor = csim_executor(pdir, threads=options.pop("threads", None), headers=options.pop("headers", "amd"))
        return SoftDevice(manifest, executor, backend="csim", timeout_s=timeout_s, **options)
    if backend == "rtlsim":
        from pynq_driver.backends.rtlsim import RtlSimDevice

        pdir, manifest = project_for(spec, project_dir)
        return RtlSimDevice(manifest, pdir, timeout_s=timeout_s, **options)
    from pynq_driver.backends.alveo import AlveoDevice

    return AlveoDevice.open(spec, xclbin=xclbin, project_dir=project_dir, timeout_s=timeout_s, **options)
