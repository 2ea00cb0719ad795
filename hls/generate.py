"""Rendering a kernel project from `templates/`: one spec in, a self-contained folder out.

Every template under `templates/<part>/` (part = hls, rtl, ...) is rendered to `<out>/<part>/`
with its `.j2` suffix dropped and `KERNEL` in its file name replaced by the kernel name. Output
is deterministic (sorted walk, no timestamps), so the same spec gives byte-identical files;
`manifest.json` records the spec, sizing, register map, banks and the sha256 of every file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jinja2

from hls import __version__, regmap
from hls.errors import UserError
from hls.paths import TEMPLATES_DIR
from hls.sizing import SizingReport, size_spec
from hls.spec import KernelSpec
from hls.targets import Target, get_target

# Which template folders a target's flow gets: V80 has no XRT/v++ link step.
PARTS_BY_FLOW = {"xrt": ("hls", "rtl"), "versal": ("hls", "rtl", "versal")}
MANIFEST = "manifest.json"


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def context(spec: KernelSpec, target: Target, sizing: SizingReport) -> dict[str, Any]:
    """Everything a template may use. Templates read only this (StrictUndefined catches typos)."""
    args = regmap.register_map(spec, sizing.stripes)
    regs = regmap.to_manifest(spec, sizing.stripes)
    return {
        "spec": spec,
        "target": target,
        "sizing": sizing,
        "cu": sizing.assignments,
        "args": args,
        "pointer_args": [a for a in args if a.kind == "pointer"],
        "scalar_args": [a for a in args if a.kind == "scalar"],
        "regmap": regs,
        "address_bits": regs["address_bits"],
        "clock_mhz": sizing.clock_mhz,
        "version": __version__,
    }


def _template_outputs(parts: tuple[str, ...], name: str) -> list[tuple[str, str]]:
    pairs = []
    for part in parts:
        folder = TEMPLATES_DIR / part
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.j2")):
            rel = path.relative_to(TEMPLATES_DIR).as_posix()
            out = rel[: -len(".j2")].replace("KERNEL", name)
            pairs.append((rel, out))
    return pairs


def render(spec: KernelSpec, target: Target | None = None) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Render all files for `spec` in memory: {relative path: bytes}, and the manifest dict."""
    target = target or get_target(spec.target)
    sizing = size_spec(spec, target)
    env = environment()
    ctx = context(spec, target, sizing)
    files: dict[str, bytes] = {}
    for template, out in _template_outputs(PARTS_BY_FLOW[target.flow], spec.name):
        files[out] = env.get_template(template).render(**ctx).encode("utf-8")
    sizing_dict = sizing.to_dict()
    manifest = {
        "toolkit": "optimusnic",
        "version": __version__,
        "spec": spec.to_dict(),
        "target": {"key": target.key, "name": target.name, "part": target.part,
                   "platform": target.platform, "flow": target.flow},
        "sizing": sizing_dict,
        "register_map": ctx["regmap"],
        "banks": [{"cu": a.cu, "slr": a.slr, "banks": a.banks} for a in sizing.assignments],
        "memory_plan": [
            {"cu": a.cu, "stripes": [{"array": s.array, "index": s.index, "ports": s.ports, "bank": s.bank,
                                      "channel": s.channel} for s in a.stripes]}
            for a in sizing.assignments
        ],
        "files": {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())},
    }
    return files, manifest


def write_project(spec: KernelSpec, out_dir: Path, target: Target | None = None) -> dict[str, Any]:
    """Render and write the project into `out_dir`; returns the manifest."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a directory")
    files, manifest = render(spec, target)
    for rel, data in files.items():
        dest = out_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def load_manifest(project_dir: Path) -> dict[str, Any]:
    path = Path(project_dir) / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{path}: no manifest; generate the project first (optimusnic generate -o DIR)") from exc
    except ValueError as exc:
        raise UserError(f"{path}: manifest is not valid JSON ({exc})") from exc


def spec_from_manifest(manifest: dict[str, Any]) -> KernelSpec:
    return KernelSpec.from_dict(dict(manifest["spec"]))
