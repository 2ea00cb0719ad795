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
import re
import shutil
import struct
from pathlib import Path
from typing import Any

from hls import safe_io, validate, xclbin
from hls.errors import OptimusError, UserError
from hls.paths import BITSTREAMS_DIR
from hls.spec import BEAT_BITS
from hls.xclbin import IMAGE_SECTIONS, container, is_axlf, section_kinds

MANIFEST_SUFFIX = ".manifest.json"
# The project-manifest keys a registry manifest carries: all of them (the driver reads memory_plan).
MANIFEST_KEYS = (*validate.PROJECT_MANIFEST.required, *validate.PROJECT_MANIFEST.optional)


def entry_paths(target: str, name: str, root: Path = BITSTREAMS_DIR) -> tuple[Path, Path]:
    """bitstreams/<target>/<name>.xclbin and its manifest. `target` and `name` come from manifests, so
    both must be identifiers and the folder must resolve inside `root` (no `..`, no symlink out)."""
    where = validate.Where(f"registry entry in {root}")
    validate.TARGET_KEY.check(target, where.at("target.key"))
    validate.IDENT.check(name, where.at("spec.name"))
    folder = safe_io.inside(root, target, "registry folder")
    return folder / f"{name}.xclbin", folder / f"{name}{MANIFEST_SUFFIX}"


def sha256_file(path: Path, max_bytes: int = safe_io.XCLBIN_MAX) -> str:
    h = hashlib.sha256()
    with safe_io.open_regular(path, max_bytes, "xclbin") as (f, _size):
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    project_manifest = validate.project_manifest(project_manifest, "project manifest")
    target = project_manifest["target"]["key"]
    name = project_manifest["spec"].get("name", "optimusnic_adamw")
    if target != project_manifest["spec"].get("target", "u55c"):
        raise UserError(f"project manifest: target.key {target!r} differs from spec.target")
    dest, manifest_path = entry_paths(target, name, root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for p in (dest, manifest_path):  # never write through a link someone left in the registry
        if p.is_symlink():
            p.unlink()
    with safe_io.atomic_open(dest) as out, open(xclbin, "rb") as src:  # a new file: no hard link written through
        shutil.copyfileobj(src, out)
    reports_dir = dest.with_suffix(".reports")
    copied = []
    if reports_dir.is_symlink():
        reports_dir.unlink()
    elif reports_dir.is_dir():  # reports of an earlier build of this name must not mix with this one's
        shutil.rmtree(reports_dir)
    if extra_files:
        reports_dir.mkdir(exist_ok=True)
        for f in extra_files:
            f = Path(f)
            if f.is_file():
                shutil.copyfile(f, reports_dir / f.name)
                copied.append(f"{reports_dir.name}/{f.name}")
    entry = {
        # Every key of the project manifest (required and optional: memory_plan, target_facts), so the
        # driver reads from a registered bitstream everything it reads from a project (issue 29).
        **{k: project_manifest[k] for k in MANIFEST_KEYS if k in project_manifest},
        "xclbin": {"file": dest.name, "sha256": sha256_file(dest), "bytes": dest.stat().st_size,
                   "axlf": is_axlf(dest)},
        "build": build,
        "summary": summary,
        "reports": copied,
        "registered_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "paths": {"xclbin": str(dest), "manifest": str(manifest_path)},
    }
    safe_io.atomic_write(manifest_path, json.dumps(entry, indent=2, sort_keys=True) + "\n")
    return entry


def _load(path: Path) -> tuple[dict[str, Any] | None, str]:
    """A registry manifest checked against its schema, or (None, why not)."""
    try:
        text = safe_io.read_text(path, safe_io.REGISTRY_MANIFEST_MAX, "registry manifest")
        data = json.loads(text, parse_constant=_no_constant)
        return validate.registry_manifest(data, path.name), ""
    except UserError as exc:
        return None, str(exc)
    except (ValueError, RecursionError) as exc:
        return None, f"{path.name}: not valid JSON ({str(exc).splitlines()[0] if str(exc) else exc!r})"


def _inconsistent(data: dict[str, Any]) -> str:
    """Why a registry manifest does not describe its own spec (register map, banks), or ''."""
    from hls import regmap
    from hls.sizing import StripeCounts
    from hls.spec import KernelSpec

    try:
        spec = KernelSpec.from_dict(dict(data["spec"]))
    except UserError as exc:
        return f"spec: {exc}"
    if data["target"]["key"] != spec.target:
        return f"target.key {data['target']['key']!r} but spec.target {spec.target!r}"
    rm = data.get("register_map")
    if rm is not None:
        stripes = rm.get("stripes")
        if stripes is None or rm != json.loads(json.dumps(regmap.to_manifest(spec, StripeCounts(**stripes)))):
            return "register_map does not follow the recorded spec (edited manifest?)"
    for cu in data.get("banks") or []:
        if cu["cu"] >= spec.compute_units:
            return f"banks: CU {cu['cu']} but the spec has {spec.compute_units} compute unit(s)"
    # What opening the card checks too: the entry is what its spec gives for its target (banks that
    # exist on this card, its platform, its register map), not an edited copy.
    why = spec_mismatch(data)
    return f"{why} (edited manifest? rebuild and register)" if why else ""


def _first_difference(got: Any, want: Any, where: str = "") -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        for k in sorted(set(got) | set(want), key=str):
            if got.get(k) != want.get(k):
                return _first_difference(got.get(k), want.get(k), f"{where}.{k}" if where else str(k))
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            if a != b:
                return _first_difference(a, b, f"{where}[{i}]")
    return f"{where or 'value'} is {json.dumps(got)[:80]}, its spec gives {json.dumps(want)[:80]}"


def spec_mismatch(data: dict[str, Any], keys: tuple[str, ...] = ("spec", "target", "register_map", "sizing")) -> str:
    """Why a registry entry does not describe what its own spec gives for its own target (another
    card's platform, an edited register map or sizing, a bank that does not exist on the card, DDR on
    an HBM card), or ''. Shared by `optimusnic bitstreams verify` and opening the card (pynq_driver's
    resolve_xclbin). Only the keys the entry records are compared; banks may differ from the generated
    plan (a build may connect a port to a bank range) but must be banks of the card."""
    from hls.generate import render
    from hls.spec import KernelSpec
    from hls.targets import get_target, target_from_facts

    try:
        spec = KernelSpec.from_dict(dict(data["spec"]))
        if "target_facts" in data:
            target = target_from_facts(spec.target, data["target_facts"], "target_facts")
        else:
            target = get_target(spec.target)
        mine = {"key": target.key, "name": target.name, "part": target.part, "platform": target.platform,
                "flow": target.flow}
        if mine != data.get("target"):
            return f"target: {_first_difference(data.get('target'), mine)}"
        expected = json.loads(json.dumps(render(spec, target)[1]))
    except (OptimusError, KeyError, TypeError, ValueError) as exc:
        return f"its spec cannot be generated ({exc})"
    for key in keys:
        if key in data and data[key] != expected.get(key):
            return f"{key}: {_first_difference(data[key], expected.get(key))}"
    prefix, channels = target.memory.bank_prefix, target.memory.channels
    for cu in data.get("banks") or []:
        for port, expr in sorted((cu.get("banks") or {}).items()):
            m = re.fullmatch(r"(\w+)\[(\d{1,6})(?::(\d{1,6}))?\]", str(expr))
            if not m or m.group(1) != prefix or not int(m.group(2)) <= int(m.group(3) or m.group(2)) < channels:
                return (f"banks: CU {cu.get('cu')} {port} is {expr!r}, not a bank of {target.name} "
                        f"({prefix}[0] .. {prefix}[{channels - 1}])")
    return ""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def entries(root: Path = BITSTREAMS_DIR) -> list[dict[str, Any]]:
    """Every registry entry with its status: ok, modified, missing-xclbin, no-manifest, bad-manifest,
    not-axlf (the file is not an xclbin container, e.g. a test stand-in's output)."""
    root = Path(root)
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        raise UserError(f"{root}: no such registry folder (give the folder `optimusnic build --registry` wrote)")
    seen: set[Path] = set()
    for manifest_path in sorted(root.glob(f"*/*{MANIFEST_SUFFIX}")):
        target = manifest_path.parent.name
        name = manifest_path.name[: -len(MANIFEST_SUFFIX)]
        xclbin = manifest_path.parent / f"{name}.xclbin"
        seen.add(xclbin)
        row: dict[str, Any] = {"target": target, "name": name, "xclbin": str(xclbin), "manifest": str(manifest_path)}
        data, why = _load(manifest_path)
        if data is None:
            out.append(row | {"status": "bad-manifest", "detail": why})
            continue
        if data["xclbin"]["file"] != xclbin.name or data["spec"].get("name", name) != name \
                or data["target"]["key"] != target:
            out.append(row | {"status": "bad-manifest", "detail": f"describes {data['target']['key']}/"
                              f"{data['xclbin']['file']}, not {target}/{xclbin.name}"})
            continue
        why = _inconsistent(data)
        if why:
            out.append(row | {"status": "bad-manifest", "detail": why})
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
        if not xclbin.exists():
            out.append(row | {"status": "missing-xclbin", "detail": f"{xclbin.name} is not there"})
            continue
        try:
            actual = sha256_file(xclbin)
            axlf = is_axlf(xclbin)
            kinds = section_kinds(xclbin) if actual == row["sha256"] and axlf else []
        except UserError as exc:
            out.append(row | {"status": "bad-xclbin", "detail": str(exc)})
            continue
        if actual != row["sha256"]:
            detail = f"sha256 {actual[:12]}... differs from the manifest's {str(row['sha256'])[:12]}..."
            out.append(row | {"status": "modified", "detail": detail})
        elif not axlf:
            out.append(row | {"status": "not-axlf", "detail": "matches its manifest but is not an xclbin container"})
        elif not set(IMAGE_SECTIONS) & set(kinds):
            out.append(row | {"status": "no-bitstream", "detail": "an xclbin container without a bitstream section"})
        else:
            out.append(row | {"status": "ok", "detail": "matches its manifest"})
    for xclbin in sorted(root.glob("*/*.xclbin")):
        if xclbin not in seen:
            out.append({"target": xclbin.parent.name, "name": xclbin.stem, "xclbin": str(xclbin), "manifest": None,
                        "status": "no-manifest", "detail": "xclbin without a manifest: provenance unknown"})
    return out


# --- a metadata-only xclbin container ---------------------------------------------------------
# XRT's AXLF layout (xclbin.h): the file header, then section headers, then section payloads.
# v++ writes these sections from kernel.xml and the link; here they are assembled from the
# manifest so a host parser (PYNQ's) can be checked against what we generate. The container
# has no BITSTREAM section: it programs nothing and entries() reports it as "no-bitstream".

_MEM_TYPES = {"HBM": 6, "DDR": 1, "PLRAM": 7, "HOST": 2}
CU_BASE = 0x1800000  # address of the first CU's control registers in this container
CU_STRIDE = 0x10000


def expand_banks(expr: str) -> list[str]:
    """'HBM[0:9]' -> ['HBM[0]', ..., 'HBM[9]']; 'DDR[1]' -> ['DDR[1]']."""
    m = re.fullmatch(r"(\w+)\[(\d+)(?::(\d+))?\]", expr)
    if not m:
        raise UserError(f"bank expression {expr!r} is not PREFIX[i] or PREFIX[i:j]")
    lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
    return [f"{m.group(1)}[{i}]" for i in range(lo, hi + 1)]


def kernel_metadata_xml(manifest: dict[str, Any]) -> str:
    """EMBEDDED_METADATA as v++ writes it from kernel.xml: ports, args (offsets from the register
    map), one instance per CU with its control base address."""
    spec = manifest["spec"]
    name = spec["name"]
    regmap = manifest["register_map"]
    span = 1 << regmap["address_bits"]
    lines = [f'<project name="{name}">',
             f'  <platform vendor="xilinx" boardid="{manifest["target"]["key"]}" '
             f'name="{manifest["target"]["platform"] or ""}" featureRomTime="0">',
             f'    <device name="fpga0" fpgaDevice="{manifest["target"]["part"]}" addrWidth="0">',
             f'      <core name="OCL_REGION_0" target="bitstream" type="clc_region" clockFreq="0" '
             f'numComputeUnits="{spec["compute_units"]}">',
             f'        <kernel name="{name}" language="c" vlnv="xilinx.com:hls:{name}:1.0" '
             'preferredWorkGroupSizeMultiple="0" workGroupSize="1" interrupt="true" hwControlProtocol="ap_ctrl_hs">',
             f'          <port name="S_AXI_CONTROL" mode="slave" range="{span:#x}" dataWidth="32" '
             'portType="addressable" base="0x0"/>']
    args = regmap["args"]
    for a in args:
        if a["kind"] == "pointer":
            lines.append(f'          <port name="M_AXI_{a["name"].upper()}" mode="master" range="0xFFFFFFFFFFFFFFFF" '
                         f'dataWidth="{BEAT_BITS}" portType="addressable" base="0x0"/>')
        elif a["kind"] == "stream":
            mode = "write_only" if a["direction"] == "out" else "read_only"
            lines.append(f'          <port name="{a["name"]}" mode="{mode}" dataWidth="{BEAT_BITS}" '
                         'portType="stream"/>')
    for i, a in enumerate(args):
        if a["kind"] == "pointer":
            lines.append(f'          <arg name="{a["name"]}" addressQualifier="1" id="{i}" '
                         f'port="M_AXI_{a["name"].upper()}" size="0x8" offset="{a["offset"]:#x}" hostOffset="0x0" '
                         'hostSize="0x8" type="void*"/>')
        elif a["kind"] == "scalar":
            ctype = "unsigned int" if a["name"] == "n" else "float"
            lines.append(f'          <arg name="{a["name"]}" addressQualifier="0" id="{i}" port="S_AXI_CONTROL" '
                         f'size="0x4" offset="{a["offset"]:#x}" hostOffset="0x0" hostSize="0x4" type="{ctype}"/>')
        else:
            lines.append(f'          <arg name="{a["name"]}" addressQualifier="4" id="{i}" port="{a["name"]}" '
                         'size="0x0" offset="0x0" hostOffset="0x0" hostSize="0x40" '
                         f'type="stream&lt;ap_axiu&lt;{BEAT_BITS}, 0, 0, 0&gt;&gt;&amp;"/>')
    for cu in range(spec["compute_units"]):
        lines += [f'          <instance name="{name}_{cu + 1}">',
                  f'            <addrRemap base="{CU_BASE + cu * CU_STRIDE:#x}" port="S_AXI_CONTROL"/>',
                  "          </instance>"]
    lines += ["        </kernel>", "      </core>", "    </device>", "  </platform>", "</project>", ""]
    return "\n".join(lines)


def metadata_xclbin(manifest: dict[str, Any], memory: dict[str, Any]) -> bytes:
    """An AXLF container with EMBEDDED_METADATA, MEM_TOPOLOGY, IP_LAYOUT and CONNECTIVITY built from
    the manifest (no bitstream). `memory` is the target's memory: kind prefix, channels, bytes each."""
    spec = manifest["spec"]
    name = spec["name"]
    prefix, channels, chan_bytes = memory["bank_prefix"], memory["channels"], memory["channel_capacity_bytes"]
    tags = [f"{prefix}[{i}]" for i in range(channels)]
    arg_ids = {a["name"]: i for i, a in enumerate(manifest["register_map"]["args"])}
    connections = []
    used = set()
    for bank in manifest["banks"]:
        for arg, expr in bank["banks"].items():
            if expr is None or arg not in arg_ids:
                continue
            for tag in expand_banks(expr):
                connections.append((arg_ids[arg], bank["cu"], tags.index(tag)))
                used.add(tag)
    mem = struct.pack("<i4x", len(tags)) + b"".join(
        struct.pack("<BB6xqq16s", _MEM_TYPES.get(prefix, 2), int(t in used), chan_bytes // 1024, i * chan_bytes,
                    t.encode()) for i, t in enumerate(tags))
    ips = struct.pack("<i4x", spec["compute_units"]) + b"".join(
        struct.pack("<IIQ64s", 1, 1, CU_BASE + cu * CU_STRIDE, f"{name}:{name}_{cu + 1}".encode())
        for cu in range(spec["compute_units"]))
    conn = struct.pack("<i", len(connections)) + b"".join(struct.pack("<iii", *c) for c in connections)
    sections = [(xclbin.EMBEDDED_METADATA, "EMBEDDED_METADATA", kernel_metadata_xml(manifest).encode()),
                (xclbin.MEM_TOPOLOGY, "MEM_TOPOLOGY", mem), (xclbin.IP_LAYOUT, "IP_LAYOUT", ips),
                (xclbin.CONNECTIVITY, "CONNECTIVITY", conn)]
    uuid = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).digest()[:16]
    vbnv = (manifest["target"]["platform"] or manifest["target"]["key"]).encode()[:64]
    return container(sections, vbnv, uuid)
