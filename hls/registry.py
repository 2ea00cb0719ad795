"""The bitstreams/ registry: what is built, for which target and spec, and is it still intact.

Layout, one folder per target:
    bitstreams/<target>/<name>.xclbin          the device binary (never committed)
    bitstreams/<target>/<name>.manifest.json   the project manifest (spec, sizing, register map,
                                               banks) + xclbin sha256 + build info + report summary
    bitstreams/<target>/<name>.reports/        copies of the vendor reports the summary came from
`verify` recomputes each xclbin's sha256 against its manifest and checks the container magic
("xclbin2", the first 8 bytes of every AXLF file), so a stand-in file from the tests or a
truncated copy is never taken for a bitstream.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from hls.errors import UserError
from hls.paths import BITSTREAMS_DIR

MANIFEST_SUFFIX = ".manifest.json"
XCLBIN_MAGIC = b"xclbin2\0"


def entry_paths(target: str, name: str, root: Path = BITSTREAMS_DIR) -> tuple[Path, Path]:
    folder = Path(root) / target
    return folder / f"{name}.xclbin", folder / f"{name}{MANIFEST_SUFFIX}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_axlf(path: Path) -> bool:
    with Path(path).open("rb") as f:
        return f.read(len(XCLBIN_MAGIC)) == XCLBIN_MAGIC


def register(
    xclbin: Path,
    project_manifest: dict[str, Any],
    build: dict[str, Any],
    summary: dict[str, Any],
    *,
    root: Path = BITSTREAMS_DIR,
    extra_files: list[Path] | tuple[Path, ...] = (),
) -> dict[str, Any]:
    """Copy `xclbin` into the registry with its manifest; returns the manifest written."""
    xclbin = Path(xclbin)
    if not xclbin.is_file():
        raise UserError(f"{xclbin}: no such xclbin to register")
    target = project_manifest["target"]["key"]
    name = project_manifest["spec"]["name"]
    dest, manifest_path = entry_paths(target, name, root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(xclbin, dest)
    reports_dir = dest.with_suffix(".reports")
    copied = []
    if reports_dir.is_dir():  # reports of an earlier build of this name must not mix with this one's
        shutil.rmtree(reports_dir)
    if extra_files:
        reports_dir.mkdir(exist_ok=True)
        for f in extra_files:
            f = Path(f)
            if f.is_file():
                shutil.copyfile(f, reports_dir / f.name)
                copied.append(f"{reports_dir.name}/{f.name}")
    entry = {
        **{k: project_manifest[k] for k in ("toolkit", "version", "spec", "target", "sizing", "register_map",
                                            "banks", "files") if k in project_manifest},
        "xclbin": {"file": dest.name, "sha256": sha256_file(dest), "bytes": dest.stat().st_size,
                   "axlf": is_axlf(dest)},
        "build": build,
        "summary": summary,
        "reports": copied,
        "registered_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "paths": {"xclbin": str(dest), "manifest": str(manifest_path)},
    }
    manifest_path.write_text(json.dumps(entry, indent=2, sort_keys=True) + "\n")
    return entry


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def entries(root: Path = BITSTREAMS_DIR) -> list[dict[str, Any]]:
    """Every registry entry with its status: ok, modified, missing-xclbin, no-manifest, bad-manifest,
    not-axlf (the file is not an xclbin container, e.g. a test stand-in's output)."""
    root = Path(root)
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    seen: set[Path] = set()
    for manifest_path in sorted(root.glob(f"*/*{MANIFEST_SUFFIX}")):
        target = manifest_path.parent.name
        name = manifest_path.name[: -len(MANIFEST_SUFFIX)]
        xclbin = manifest_path.parent / f"{name}.xclbin"
        seen.add(xclbin)
        row: dict[str, Any] = {"target": target, "name": name, "xclbin": str(xclbin), "manifest": str(manifest_path)}
        data = _load(manifest_path)
        if data is None or "xclbin" not in data:
            out.append(row | {"status": "bad-manifest", "detail": "manifest is not valid registry JSON"})
            continue
        spec = data.get("spec", {})
        summary = data.get("summary") or {}
        row |= {
            "spec": spec,
            "kernel": (data.get("build") or {}).get("kernel"),
            "platform": (data.get("build") or {}).get("platform"),
            "timing_met": summary.get("timing_met"),
            "achieved_mhz": summary.get("achieved_mhz"),
            "registered_utc": data.get("registered_utc"),
            "sha256": data["xclbin"].get("sha256"),
        }
        if not xclbin.is_file():
            out.append(row | {"status": "missing-xclbin", "detail": f"{xclbin.name} is not there"})
            continue
        actual = sha256_file(xclbin)
        if actual != row["sha256"]:
            detail = f"sha256 {actual[:12]}... differs from the manifest's {str(row['sha256'])[:12]}..."
            out.append(row | {"status": "modified", "detail": detail})
        elif not is_axlf(xclbin):
            out.append(row | {"status": "not-axlf", "detail": "matches its manifest but is not an xclbin container"})
        else:
            out.append(row | {"status": "ok", "detail": "matches its manifest"})
    for xclbin in sorted(root.glob("*/*.xclbin")):
        if xclbin not in seen:
            out.append({"target": xclbin.parent.name, "name": xclbin.stem, "xclbin": str(xclbin), "manifest": None,
                        "status": "no-manifest", "detail": "xclbin without a manifest: provenance unknown"})
    return out
