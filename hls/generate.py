"""Rendering a kernel project from `templates/`: one spec in, a self-contained folder out.

Every template under `templates/<part>/` (part = hls, rtl, ...) is rendered to `<out>/<part>/`
with its `.j2` suffix dropped and `KERNEL` in its file name replaced by the kernel name. Output
is deterministic (sorted walk, no timestamps), so the same spec gives byte-identical files;
`manifest.json` records the spec, sizing, register map, banks, the target's definition and the
sha256 of every file. The manifest is a function of the spec and the target alone: nothing here
(sizing included) reads a build cache, so rendering it again always gives the same bytes.

Reading, loading and verifying a generated project is `hls.manifest`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jinja2

from hls import __version__, regmap, safe_io, validate
from hls.errors import UserError
from hls.paths import TEMPLATES_DIR
from hls.ports import AXIS_PORTS
from hls.sizing import SizingReport, size_spec
from hls.spec import GRAD_FMT, KernelSpec, SpecError
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
        "bursts": sizing.bursts,  # outstanding bursts: the HLS pragmas and the RTL read engines alike
        "axis_ports": AXIS_PORTS,  # the RTL kernel's AXI4-Stream interface of each stream argument
        "grad_fmt": GRAD_FMT[spec.grad_dtype],  # the RTL top's GRAD_FMT parameter (hls.spec owns the codes)
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


def _check_target_text(target: Target) -> None:
    """The target strings templates write into C++, Tcl, Makefile, cfg and Markdown, checked again
    here: a Target built in Python (not from a targets file) passes the same patterns."""
    where = validate.Where(f"target {target.key!r}")
    validate.TARGET_KEY.check(target.key, where.at("key"))
    validate.TARGET_NAME.check(target.name, where.at("name"))
    validate.PART.check(target.part, where.at("part"))
    validate.Opt(validate.PLATFORM).check(target.platform, where.at("platform"))
    validate.Enum("xrt", "versal").check(target.flow, where.at("flow"))
    validate.Text(2000).check(target.flow_note, where.at("flow_note"))
    validate.Num(*validate.CLOCK_MHZ).check(target.kernel_clock_mhz, where.at("kernel_clock_mhz"))
    validate.Int(1, 8).check(target.slrs, where.at("slrs"))
    validate.Enum(*validate.BANK_PREFIXES).check(target.memory.bank_prefix, where.at("memory.bank_prefix"))


def render(spec: KernelSpec, target: Target | None = None) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Render all files for `spec` in memory: {relative path: bytes}, and the manifest dict."""
    target = target or get_target(spec.target)
    _check_target_text(target)
    if spec.param_stream and not target.has_xrt_flow:
        # the Versal export is an IP-catalog block with no ring to connect the stream to
        raise SpecError(f"out_sink: {spec.out_sink!r} is for the ring on a card with a v++ link step; "
                        f"{target.name} uses the Versal IP export: use out_sink 'memory'")
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
        # What the project was generated for, so it can be checked whole without the targets file.
        "target_facts": {"definition": target.raw, "memory_efficiency": target.memory_efficiency,
                         "mixed_efficiency": target.efficiency_mixed},
    }
    return files, manifest


def write_project(spec: KernelSpec, out_dir: Path, target: Target | None = None) -> dict[str, Any]:
    """Render and write the project into `out_dir`; returns the manifest.

    Everything is rendered before the first write, and the folder is checked writable first, so a
    bad spec or an unwritable folder leaves nothing half-written; every file lands inside `out_dir`.
    """
    out_dir = Path(out_dir)
    if str(out_dir).strip() == "":
        raise UserError("output folder: empty path")
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a directory")
    files, manifest = render(spec, target)
    safe_io.check_writable_dir(out_dir, "output folder")
    root = out_dir.resolve()  # 'a/../b' writes into b only
    try:
        for rel, data in files.items():
            dest = safe_io.inside(root, rel, "generated file")
            dest.parent.mkdir(parents=True, exist_ok=True)
            _write_file(dest, data)
        _write_file(root / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot write the project ({exc.strerror or exc}: {exc.filename or ''})") from exc
    return manifest


def _write_file(dest: Path, data: bytes) -> None:
    """Replace `dest` atomically with a new file (never write through a symlink or into a hard link
    someone left there: a `cp -al` backup keeps its bytes)."""
    safe_io.atomic_write(dest, data)


__all__ = ["MANIFEST", "PARTS_BY_FLOW", "context", "environment", "render", "write_project"]
