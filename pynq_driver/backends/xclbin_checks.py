"""Checks of an xclbin before any card is touched: which xclbin and registry manifest belong to a
kernel spec (`resolve_xclbin`), and whether the xclbin is the one its manifest describes
(`verify_xclbin`: sha256, a bitstream section, platform, kernel name and CU count, control
protocol, register offsets and banks as PYNQ's own parser reads them).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hls import safe_io, validate
from hls import xclbin as xclbin_format
from hls.errors import UserError
from hls.paths import BITSTREAMS_DIR
from hls.registry import spec_mismatch
from hls.spec import KernelSpec
from pynq_driver.errors import BitstreamMismatch

MANIFEST_SUFFIX = ".manifest.json"



# ---- files -------------------------------------------------------------------------------------

def manifest_for(xclbin: Path) -> Path:
    """bitstreams/<target>/<name>.xclbin -> <name>.manifest.json next to it (the registry's layout)."""
    return xclbin.with_name(xclbin.name[: -len(".xclbin")] + MANIFEST_SUFFIX if xclbin.name.endswith(".xclbin")
                            else xclbin.name + MANIFEST_SUFFIX)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with safe_io.open_regular(path, safe_io.XCLBIN_MAX, "xclbin") as (f, _size):
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def expand_banks(expr: str) -> list[str]:
    """"HBM[0:2]" -> ["HBM[0]", "HBM[1]", "HBM[2]"]; any other bank expression as it is."""
    m = re.fullmatch(r"(\w+)\[(\d+)(?::(\d+))?\]", expr or "")
    if not m:
        return [expr]
    lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
    return [f"{m.group(1)}[{i}]" for i in range(lo, hi + 1)]


def bank_tag(tag: str) -> str:
    """Older DDR platforms name their banks bank0..bank3 where v++ connections say DDR[0]..DDR[3]."""
    m = re.fullmatch(r"bank(\d+)", tag)
    return f"DDR[{m.group(1)}]" if m else tag


def load_bitstream_manifest(xclbin: Path) -> dict[str, Any]:
    """The registry manifest next to `xclbin`, read bounded and checked against its schema."""
    path = manifest_for(xclbin)
    if not path.exists():
        raise UserError(f"{path}: no manifest next to {xclbin.name}; register the build (optimusnic build)")
    # Bounded, regular-file-only read (a FIFO or /dev/zero is refused), then the registry schema.
    text = safe_io.read_text(path, safe_io.REGISTRY_MANIFEST_MAX, "registry manifest")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from exc
    return validate.registry_manifest(data, str(path))  # raises validate.Invalid, a UserError


def _manifests_of(xclbin: Path) -> list[dict[str, Any]]:
    """Every registry manifest that describes `xclbin`: <name>.manifest.json, and any manifest in its
    folder whose xclbin entry names this file (an xclbin that links several kernels)."""
    found, seen = [], set()
    paths = [manifest_for(xclbin), *sorted(xclbin.parent.glob(f"*{MANIFEST_SUFFIX}"))]
    for path in paths:
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            raise UserError(f"{path}: not valid JSON ({exc})") from exc
        if path == manifest_for(xclbin) or (data.get("xclbin") or {}).get("file") == xclbin.name:
            found.append(data)
    return found


def resolve_xclbin(spec: KernelSpec, xclbin: str | Path | Sequence[str | Path] | None) -> tuple[Path, dict[str, Any]]:
    """The xclbin and manifest of `spec`: `xclbin` is a file, a folder, a list of files, or None
    (bitstreams/<target>/). The manifest's spec must equal `spec`, or differ only in the kernel
    name (a bf16 kernel registered under its own name next to the fp32 one)."""
    if xclbin is None or (not isinstance(xclbin, (str, os.PathLike))):
        files = ([Path(x) for x in xclbin] if xclbin is not None
                 else sorted((BITSTREAMS_DIR / spec.target).glob("*.xclbin")))
    elif Path(xclbin).is_dir():
        files = sorted(Path(xclbin).glob("*.xclbin"))
    else:
        files = [Path(xclbin)]
    for f in files:
        if not f.is_file():
            raise UserError(f"{f}: no such xclbin")
    want = spec.to_dict()
    pairs = [(f, m) for f in files for m in _manifests_of(f)]
    if len(files) == 1 and not pairs:
        load_bitstream_manifest(files[0])  # raises the "no manifest next to it" error
    exact = [(f, m) for f, m in pairs if m.get("spec") == want]
    renamed = [(f, m) for f, m in pairs if {**(m.get("spec") or {}), "name": want["name"]} == want]
    if exact or len(renamed) == 1:
        f, m = (exact or renamed)[0]
        # The checks `optimusnic bitstreams verify` runs (hls.registry): the entry is what its spec
        # gives for its target, not an edited copy (a missing bank, DDR on an HBM card, another platform).
        why = spec_mismatch(m)
        if why:
            raise BitstreamMismatch(f"{manifest_for(f)}: {why} (edited manifest? rebuild and register)")
        return f, m
    if not files:
        raise FileNotFoundError(f"the xclbin (none in {BITSTREAMS_DIR / spec.target}; build one with "
                                "`optimusnic build` or pass xclbin=)")
    if len(renamed) > 1:
        raise BitstreamMismatch(f"{len(renamed)} xclbins hold a kernel for this spec under other names "
                                f"({', '.join(str(f) for f, _ in renamed)}); pass xclbin= to choose one")
    found = "; ".join(f"{f.name}: {m.get('spec')}" for f, m in pairs) or "no manifests"
    where = files[0] if len(files) == 1 else f"{len(files)} xclbins"
    raise BitstreamMismatch(f"{where}: built for another spec ({found}), not {want}")


# ---- what PYNQ reads from an xclbin ----------------------------------------------------------

def pynq_parser() -> Any:
    """PYNQ's xclbin parser, taught XRT's MEM_HOST (10) and MEM_PS_KERNEL (11) memory types:
    PYNQ 3.0.1 lists types 0-9 only and fails on an xclbin with a HOST[0] bank of type MEM_HOST."""
    from pynq.pl_server import xclbin_parser

    types = xclbin_parser._mem_types
    for extra in ("HOST", "PS Kernel")[max(0, len(types) - 10):]:
        types.append(extra)
    return xclbin_parser


def xclbin_facts(data: bytes | bytearray) -> dict[str, Any]:
    """Platform (VBNV), UUID, section kinds and GROUP_TOPOLOGY entries, read with PYNQ's AXLF structs."""
    from pynq._3rdparty import xclbin as axlf

    parser = pynq_parser()
    buf = bytearray(data)
    header = axlf.axlf.from_buffer(buf).m_header
    sections, uuid = parser.parse_xclbin_header(buf)
    groups = []
    if xclbin_format.GROUP_TOPOLOGY in sections:
        topo = axlf.mem_topology.from_buffer(sections[xclbin_format.GROUP_TOPOLOGY])
        entries = parser._get_object_as_array(topo.m_mem_data[0], topo.m_count)
        groups = [parser._mem_data_to_dict(i, m, ctypes.string_at(m.m_tag).decode()) for i, m in enumerate(entries)]
    return {"vbnv": bytes(header.m_platformVBNV).rstrip(b"\0").decode(errors="replace"), "uuid": uuid,
            "sections": set(sections), "groups": groups}


def board(vbnv: str) -> str:
    """'xilinx_u55c_gen3x16_xdma_3_202210_1' (platform) or '..._base_3' (shell) -> 'u55c'."""
    parts = vbnv.split("_")
    return parts[1] if len(parts) > 1 else vbnv


def _instance_order(ip: dict[str, Any]) -> tuple[int, str]:
    """'k:k_10' after 'k:k_9': the instance number, then the name."""
    inst = str(ip.get("cu_name", "")).split(":")[-1]
    m = re.search(r"_(\d+)$", inst)
    return (int(m.group(1)) if m else 1 << 30, inst)


def register_reach(register_map: dict[str, Any]) -> tuple[int, str]:
    """One past the last byte the driver reads or writes in a CU's control space, and what lies there:
    the arguments, the sticky STATUS word and the PORT_ERR words (after the arguments)."""
    words = [(int(a["offset"]) + int(a.get("size") or 4), f"argument {a['name']}")
             for a in register_map["args"] if a.get("offset") is not None and a["kind"] != "stream"]
    words += [(int(o) + 4, "control") for o in register_map.get("control", {}).values()]
    status = register_map.get("status") or {}
    if "offset" in status:
        words.append((int(status["offset"]) + int(status.get("size", 4)), "STATUS"))
    words += [(int(o) + 4, "PORT_ERR") for o in (status.get("port_errors") or {}).get("offsets", [])]
    return max(words, default=(0, "nothing"))


def verify_xclbin(xclbin: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Raise BitstreamMismatch unless `xclbin` is the one `manifest` describes; PYNQ's ip entries, one per CU."""
    xclbin = Path(xclbin)
    want_sha = (manifest.get("xclbin") or {}).get("sha256") or manifest.get("xclbin_sha256")
    if not want_sha:
        raise BitstreamMismatch(f"{manifest_for(xclbin)}: records no xclbin sha256; rebuild and register")
    got_sha = _sha256(xclbin)
    if got_sha != want_sha:
        raise BitstreamMismatch(f"{xclbin}: sha256 {got_sha[:16]}... but its manifest records {want_sha[:16]}...: "
                                "this is not the bitstream the manifest describes (rebuild or re-register it)")
    name = manifest.get("kernel") or manifest["spec"]["name"]
    try:
        # Section counts and offsets bounded by the file size before PYNQ walks the table: a header
        # claiming 0xFFFFFFFF sections is refused at once (PYNQ would spend many minutes on it).
        xclbin_format.section_kinds(xclbin)
    except UserError as exc:
        raise BitstreamMismatch(f"{xclbin}: {exc}") from exc
    parser = pynq_parser()
    try:
        data = safe_io.read_bytes(xclbin, safe_io.XCLBIN_MAX, "xclbin")
        parsed = parser.XclBin(xclbin_data=bytearray(data))
        facts = xclbin_facts(data)
    except Exception as exc:  # PYNQ raises KeyError/ValueError/IndexError on containers it cannot read
        raise BitstreamMismatch(f"{xclbin}: PYNQ cannot parse it as an xclbin ({type(exc).__name__}: {exc})") from exc
    if not facts["sections"] & set(xclbin_format.IMAGE_SECTIONS):
        raise BitstreamMismatch(f"{xclbin}: no bitstream section (BITSTREAM or PDI): a metadata-only container "
                                "programs nothing; build the kernel with `optimusnic build`")
    platform = (manifest.get("target") or {}).get("platform")
    if platform and facts["vbnv"] != platform:
        raise BitstreamMismatch(f"{xclbin}: built for platform {facts['vbnv']!r}, but its manifest's target "
                                f"{manifest['target'].get('key')} is {platform!r}")
    # CU k is instance <name>_<k+1> (v++ --connectivity.nk numbering, as the manifest's banks are), not
    # the k-th by address: the linker may place instances at addresses in another order.
    ips = sorted((ip for ip in parsed.ip_dict.values() if str(ip.get("cu_name", "")).split(":")[0] == name),
                 key=_instance_order)
    if not ips:
        found = sorted({str(ip.get("cu_name", "")).split(":")[0] for ip in parsed.ip_dict.values()})
        raise BitstreamMismatch(f"{xclbin}: no kernel named {name!r} (it has: {', '.join(found) or 'none'})")
    cus = int(manifest["spec"].get("compute_units", 1))
    if len(ips) != cus:
        raise BitstreamMismatch(f"{xclbin}: kernel {name!r} has {len(ips)} compute units, its manifest {cus}")
    protocol = manifest["register_map"].get("protocol", "ap_ctrl_hs")
    problems = []
    reach, last = register_reach(manifest["register_map"])
    for cu, ip in enumerate(ips):
        span = int(ip.get("addr_range") or 0)
        if span < reach:
            problems.append(f"{ip['cu_name']}: its control decoder covers {span:#x} bytes (S_AXI_CONTROL range), "
                            f"but the register map reaches {reach:#x} ({last}): reads there would return other "
                            "control words, not the kernel's; regenerate the project and rebuild the xclbin")
        if ip.get("hw_control_protocol") != protocol:
            problems.append(f"{ip['cu_name']}: control protocol {ip.get('hw_control_protocol')!r}, "
                            f"the manifest's register map is {protocol!r}")
        banks = {b["cu"]: b["banks"] for b in manifest.get("banks", [])}.get(cu, {})
        for arg in manifest["register_map"]["args"]:
            if arg["kind"] == "stream":
                continue
            reg = ip["registers"].get(arg["name"])
            if reg is None:
                problems.append(f"{arg['name']}: missing")
            elif int(reg["address_offset"]) != int(arg["offset"]):
                problems.append(f"{arg['name']}: offset {int(reg['address_offset']):#x} in the xclbin, "
                                f"{int(arg['offset']):#x} in the manifest")
            elif arg["kind"] == "pointer" and "memory" in reg and banks.get(arg["name"]):
                expr = banks[arg["name"]]
                got = [bank_tag(t) for t in reg.get("MBG", [reg["memory"]])]
                if sorted(got) != sorted(expand_banks(expr)) and got != [expr]:
                    problems.append(f"CU {cu} {arg['name']}: connected to {', '.join(got)}, the manifest says {expr}")
    if problems:
        raise BitstreamMismatch(f"{xclbin}: kernel {name!r} differs from its manifest: " + "; ".join(problems))
    return ips


__all__ = ["MANIFEST_SUFFIX", "bank_tag", "board", "expand_banks", "load_bitstream_manifest", "manifest_for",
           "pynq_parser", "register_reach", "resolve_xclbin", "verify_xclbin", "xclbin_facts"]
