"""The `alveo` backend: one kernel on an Alveo card through PYNQ 3.0.1 (XRT 2.13-2.16).

Opening: the xclbin is resolved from its manifest (by spec, so fp32 and bf16 kernels of one
process find their own xclbins, or their own kernels in one xclbin) and checked before any card
is touched (`verify_xclbin`: sha256, a bitstream section, platform, kernel name and CU count,
control protocol, register offsets and banks as PYNQ's own parser reads them). Then
`pynq.Overlay` programs card `device_index` (unless this process already runs that xclbin on
it), the driver opens an exclusive XRT context on each of its compute units (PYNQ would open
shared ones, and two processes would then race on one kernel's registers) and checks each is
idle. Any failure leaves no context and no buffer open and is one project error naming what is
missing or wrong (`ToolMissing`, `BitstreamMismatch`, `CardBusy`, `DeviceError`).

Memory: every buffer is a PYNQ buffer (`XrtMemory.allocate`) in the bank the memory plan names:
a MEM_TOPOLOGY bank ("HBM[3]"; "DDR[1]" is also found as "bank1", the older platforms' tag), or
for a range ("HBM[0:9]") the memory group v++ creates, found in GROUP_TOPOLOGY, which PYNQ's
parser does not read. XRT keeps a pinned host copy of every such buffer: `host_pinned_bytes`.

Registers: the CU's control registers are read and written with the same XRT call PYNQ's MMIO
uses (xclRead/xclWrite at the IP's address), with the return code checked (PYNQ discards it).
ap_idle is checked before ap_start; a run that times out makes the device unusable until it is
reopened (its late ap_done would otherwise be taken for the next run's); a control register
that reads 0xFFFFFFFF (a card that fell off the bus; every bit, ap_done too) raises
`CardNotResponding`.

Closing frees this device's buffers and closes only its own contexts: the XRT handle belongs to
PYNQ's device object, which every user of the card in this process shares (`Overlay.free()`
would close it under them).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import json
import os
import re
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hls import registry, safe_io, validate
from hls.errors import ToolMissing, UserError
from hls.paths import BITSTREAMS_DIR
from hls.spec import KernelSpec
from pynq_driver.device import Buffer, Device
from pynq_driver.errors import BitstreamMismatch, CardBusy, CardNotResponding, DeviceError, KernelTimeout

MANIFEST_SUFFIX = ".manifest.json"
PYNQ_VERSION = "3.0.1"
# Environment variables launchers set to a process's rank on its host (torchrun, Open MPI, MPICH, Slurm).
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
# XRT's xclbin.h section kinds that carry a device image.
_IMAGE_SECTIONS = {0: "BITSTREAM", 18: "PDI", 19: "BITSTREAM_PARTIAL_PDI"}
_GROUP_TOPOLOGY = 26


# ---- files -------------------------------------------------------------------------------------

def manifest_for(xclbin: Path) -> Path:
    """bitstreams/<target>/<name>.xclbin -> <name>.manifest.json next to it (the registry's layout)."""
    return xclbin.with_name(xclbin.name[: -len(".xclbin")] + MANIFEST_SUFFIX if xclbin.name.endswith(".xclbin")
                            else xclbin.name + MANIFEST_SUFFIX)


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with safe_io.open_regular(path, safe_io.XCLBIN_MAX, "xclbin") as (f, _size):
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _expand(expr: str) -> list[str]:
    m = re.fullmatch(r"(\w+)\[(\d+)(?::(\d+))?\]", expr or "")
    if not m:
        return [expr]
    lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
    return [f"{m.group(1)}[{i}]" for i in range(lo, hi + 1)]


def _tag(tag: str) -> str:
    """Older DDR platforms name their banks bank0..bank3 where v++ connections say DDR[0]..DDR[3]."""
    m = re.fullmatch(r"bank(\d+)", tag)
    return f"DDR[{m.group(1)}]" if m else tag


def load_bitstream_manifest(xclbin: Path) -> dict[str, Any]:
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
        return (exact or renamed)[0]
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

def _pynq_parser() -> Any:
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

    parser = _pynq_parser()
    buf = bytearray(data)
    header = axlf.axlf.from_buffer(buf).m_header
    sections, uuid = parser.parse_xclbin_header(buf)
    groups = []
    if _GROUP_TOPOLOGY in sections:
        topo = axlf.mem_topology.from_buffer(sections[_GROUP_TOPOLOGY])
        entries = parser._get_object_as_array(topo.m_mem_data[0], topo.m_count)
        groups = [parser._mem_data_to_dict(i, m, ctypes.string_at(m.m_tag).decode()) for i, m in enumerate(entries)]
    return {"vbnv": bytes(header.m_platformVBNV).rstrip(b"\0").decode(errors="replace"), "uuid": uuid,
            "sections": set(sections), "groups": groups}


def _board(vbnv: str) -> str:
    """'xilinx_u55c_gen3x16_xdma_3_202210_1' (platform) or '..._base_3' (shell) -> 'u55c'."""
    parts = vbnv.split("_")
    return parts[1] if len(parts) > 1 else vbnv


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
        registry.section_kinds(xclbin)
    except UserError as exc:
        raise BitstreamMismatch(f"{xclbin}: {exc}") from exc
    parser = _pynq_parser()
    try:
        data = safe_io.read_bytes(xclbin, safe_io.XCLBIN_MAX, "xclbin")
        parsed = parser.XclBin(xclbin_data=bytearray(data))
        facts = xclbin_facts(data)
    except Exception as exc:  # PYNQ raises KeyError/ValueError/IndexError on containers it cannot read
        raise BitstreamMismatch(f"{xclbin}: PYNQ cannot parse it as an xclbin ({type(exc).__name__}: {exc})") from exc
    if not facts["sections"] & set(_IMAGE_SECTIONS):
        raise BitstreamMismatch(f"{xclbin}: no bitstream section (BITSTREAM or PDI): a metadata-only container "
                                "programs nothing; build the kernel with `optimusnic build`")
    platform = (manifest.get("target") or {}).get("platform")
    if platform and facts["vbnv"] != platform:
        raise BitstreamMismatch(f"{xclbin}: built for platform {facts['vbnv']!r}, but its manifest's target "
                                f"{manifest['target'].get('key')} is {platform!r}")
    ips = sorted((ip for ip in parsed.ip_dict.values() if str(ip.get("cu_name", "")).split(":")[0] == name),
                 key=lambda ip: ip["phys_addr"])
    if not ips:
        found = sorted({str(ip.get("cu_name", "")).split(":")[0] for ip in parsed.ip_dict.values()})
        raise BitstreamMismatch(f"{xclbin}: no kernel named {name!r} (it has: {', '.join(found) or 'none'})")
    cus = int(manifest["spec"].get("compute_units", 1))
    if len(ips) != cus:
        raise BitstreamMismatch(f"{xclbin}: kernel {name!r} has {len(ips)} compute units, its manifest {cus}")
    protocol = manifest["register_map"].get("protocol", "ap_ctrl_hs")
    problems = []
    for cu, ip in enumerate(ips):
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
                got = [_tag(t) for t in reg.get("MBG", [reg["memory"]])]
                if sorted(got) != sorted(_expand(expr)) and got != [expr]:
                    problems.append(f"CU {cu} {arg['name']}: connected to {', '.join(got)}, the manifest says {expr}")
    if problems:
        raise BitstreamMismatch(f"{xclbin}: kernel {name!r} differs from its manifest: " + "; ".join(problems))
    return ips


# ---- PYNQ, XRT and the cards ---------------------------------------------------------------------

def _import_pynq() -> tuple[Any, str | None]:
    """(pynq, None), or (None, what is missing) when PYNQ or what it needs cannot be imported."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pynq
    except ModuleNotFoundError as exc:
        return None, _missing_module(exc)
    except OSError as exc:  # XILINX_XRT is set, but its libxrt_core.so does not load
        where = os.environ.get("XILINX_XRT", "")
        return None, (f"XRT (XILINX_XRT={where} has no usable lib/libxrt_core.so: {exc}; install XRT 2.13-2.16 "
                      "and `source /opt/xilinx/xrt/setup.sh`)")
    try:
        import pynq.lib  # noqa: F401 - Overlay() imports it; PYNQ 3.0.1 needs pycparser < 3 for it
    except ModuleNotFoundError as exc:
        return None, _missing_module(exc)
    if getattr(pynq, "__version__", "") != PYNQ_VERSION:
        return None, f"PYNQ {PYNQ_VERSION} (found {pynq.__version__}; the last release that supports Alveo)"
    return pynq, None


def _missing_module(exc: ModuleNotFoundError) -> str:
    name = exc.name or str(exc)
    if name == "pynq":
        return f"PYNQ {PYNQ_VERSION} (pip install 'optimusnic[card]')"
    if name.startswith("pycparser"):
        return ("pycparser < 3 (PYNQ 3.0.1's pynq.lib imports pycparser.plyparser, gone in pycparser 3; "
                "pip install 'optimusnic[card]')")
    if name.startswith("pkg_resources"):
        return "setuptools < 82 (PYNQ's pynqutils imports pkg_resources; pip install 'optimusnic[card]')"
    return f"{name}, which PYNQ needs (pip install 'optimusnic[card]')"


def cards(pynq: Any) -> list[Any]:
    """The Alveo cards XRT sees, as PYNQ's device objects (probed once per process)."""
    from pynq.pl_server.xrt_device import XrtDevice

    if threading.current_thread() is not threading.main_thread():
        # PYNQ's XrtDevice() calls asyncio.get_event_loop(), which fails in a thread without one.
        try:
            asyncio.get_event_loop()
        except RuntimeError:
            asyncio.set_event_loop(asyncio.new_event_loop())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [d for d in pynq.Device.devices if isinstance(d, XrtDevice)]


def _card_problems(pynq: Any) -> list[str]:
    from pynq._3rdparty import xrt

    if not xrt.XRT_SUPPORTED:
        return ["XRT (XILINX_XRT is not set; install XRT 2.13-2.16 and `source /opt/xilinx/xrt/setup.sh`)"]
    if not cards(pynq):
        return ["an Alveo card (XRT sees none; check `xbutil examine`)"]
    return []


def _missing_runtime() -> list[str]:
    """What stands between this host and a card: PYNQ and its dependencies, XRT, then a card."""
    pynq, problem = _import_pynq()
    return [problem] if problem else _card_problems(pynq)


def local_rank() -> int | None:
    """This process's rank on its host, from the launcher's environment (torchrun, MPI, Slurm), or None."""
    for var in LOCAL_RANK_VARS:
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def check_device_index(device_index: Any, found: list[Any]) -> int:
    """`device_index` as an index into the cards XRT sees (0 .. count-1); UserError otherwise."""
    if isinstance(device_index, bool) or not isinstance(device_index, (int, np.integer)):
        raise UserError(f"device_index: {device_index!r} must be an integer card index (0 for the first card)")
    names = ", ".join(f"{i}: {getattr(d, 'name', '?')}" for i, d in enumerate(found))
    if not 0 <= int(device_index) < len(found):
        raise UserError(f"device_index {device_index}: this host has {len(found)} card(s) XRT can see ({names}); "
                        f"use 0..{len(found) - 1} (each rank its own card: see the README)")
    return int(device_index)


def _xrt_errno(ret: int) -> str:
    code = -ret if ret < 0 else (1 << 64) - ret
    return f"{errno.errorcode.get(code, code)} ({os.strerror(code)})" if 0 < code < 4096 else str(ret)


# Every AlveoDevice open in this process, per PYNQ device object: the xclbin it runs and the CUs in use.
_CARD_USERS: dict[int, dict[str, Any]] = {}
_USERS_LOCK = threading.Lock()


# ---- the device ---------------------------------------------------------------------------------

class AlveoDevice(Device):
    backend = "alveo"

    @classmethod
    def open(cls, spec: KernelSpec, *, xclbin: str | Path | Sequence[str | Path] | None = None,
             project_dir: str | Path | None = None, timeout_s: float = 10.0,
             device_index: int | None = None) -> AlveoDevice:
        """Program card `device_index` (default: this process's local rank, else 0) with the xclbin of `spec`."""
        from hls.targets import get_target

        target = get_target(spec.target)
        if target.flow != "xrt":
            raise ToolMissing(f"alveo backend: {target.name} is not an xclbin/XRT card (its flow is {target.flow!r}: "
                              "AMD's Vivado + VRT runtime); the toolkit cannot run it yet. Use backend='csim' or "
                              "'rtlsim'.")
        missing: list[str] = []
        resolved = None
        try:
            resolved = resolve_xclbin(spec, xclbin)
        except FileNotFoundError as exc:
            missing.append(str(exc))
        pynq, problem = _import_pynq()
        ips: list[dict[str, Any]] = []
        if resolved is not None and pynq is not None:
            ips = verify_xclbin(*resolved)  # before any card is touched
        missing += [problem] if problem else _card_problems(pynq)
        if missing:
            raise ToolMissing("alveo backend: missing " + "; ".join(missing)
                              + ". Without a card, use backend='csim' or 'rtlsim'.")
        found = cards(pynq)
        if device_index is None:
            device_index = local_rank() or 0
        index = check_device_index(device_index, found)
        path, manifest = resolved
        card = found[index]
        vbnv = xclbin_facts(path.read_bytes())["vbnv"]
        if _board(card.name) != _board(vbnv):
            raise BitstreamMismatch(f"{path} is for an Alveo {_board(vbnv).upper()} (platform {vbnv}); card "
                                    f"{index} is an Alveo {_board(card.name).upper()} (shell {card.name}): "
                                    "pass the device_index of a matching card or build for this one")
        return cls(manifest, path, ips, card=card, index=index, timeout_s=timeout_s)

    def __init__(self, manifest: dict[str, Any], xclbin: Path, ips: list[dict[str, Any]], *, card: Any,
                 index: int, timeout_s: float) -> None:
        super().__init__(manifest, timeout_s=timeout_s)
        import pynq

        self._pynq = pynq
        self.xclbin = Path(xclbin)
        self.card = card
        self.device_index = index
        self.where = f"card {index} ({card.name})"
        self.buffers: list[Buffer] = []
        self.unusable: str | None = None
        self.overlay: Any = None
        self.ips: list[Any] = []
        self._cu_names: list[str] = []
        self._contexts: list[str] = []
        self._reg_base: list[int] = []
        facts = xclbin_facts(self.xclbin.read_bytes())
        self._uuid, self._groups = facts["uuid"], facts["groups"]
        try:
            self._program()
            self._take_cus([ip["cu_name"].split(":")[1] for ip in ips])
            for cu in range(self.cus):
                self._check_idle(cu)
        except BaseException:
            self._release()
            raise

    # ---- opening ----------------------------------------------------------------------------
    def _program(self) -> None:
        with _USERS_LOCK:
            users = _CARD_USERS.get(id(self.card))
            if users and users["uuid"] != self._uuid:
                raise CardBusy(f"{self.where} runs {users['xclbin']} for another open device of this process; "
                               f"{self.xclbin.name} cannot replace it under that device. Two kernels on one card need "
                               "one xclbin that links both (manifests of both next to it), or a device_index each")
            try:
                self.overlay = self._pynq.Overlay(str(self.xclbin), device=self.card, download=not users)
            except RuntimeError as exc:
                msg = str(exc)
                if "Shell does not match" in msg or "EOPNOTSUPP" in msg:
                    raise BitstreamMismatch(f"{self.where}: XRT refused {self.xclbin} (shell does not match: the "
                                            "xclbin was built for another shell version; update the card's shell "
                                            f"or rebuild for it): {msg}") from exc
                if "EBUSY" in msg or "in use" in msg or "lock" in msg:
                    raise CardBusy(f"{self.where} is in use by another program with another xclbin (XRT: {msg}); "
                                   "stop it, or pick another card with device_index") from exc
                raise DeviceError(f"{self.where}: programming {self.xclbin} failed: {msg}") from exc
            _CARD_USERS.setdefault(id(self.card), {"uuid": self._uuid, "xclbin": self.xclbin, "cus": set()})

    def _take_cus(self, names: list[str]) -> None:
        users = _CARD_USERS[id(self.card)]
        for name in names:
            desc = self.overlay.ip_dict[name]
            cu_name = desc["cu_name"]
            with _USERS_LOCK:
                if cu_name in users["cus"]:
                    raise CardBusy(f"{self.where}: compute unit {cu_name} is in use by another open device of "
                                   "this process; close it first")
                try:
                    # Exclusive: a second program (another rank on the same card) gets EBUSY, not a race.
                    self.card.open_context(desc, shared=False)
                except RuntimeError as exc:
                    raise CardBusy(f"{self.where}: another program holds compute unit {cu_name} (XRT: {exc}); "
                                   "each rank needs its own card (device_index)") from exc
                users["cus"].add(cu_name)
                self._contexts.append(cu_name)
            ip = getattr(self.overlay, name)
            self.ips.append(ip)
            self._cu_names.append(name)
            self._reg_base.append(int(ip.mmio.base_addr))
        self.ip = self.ips[0]

    def _check_idle(self, cu: int) -> None:
        # One read also clears an ap_done left by a run nobody waited for (clear-on-read).
        ctrl = self.read_reg(self.ctrl_offset, cu)
        if not ctrl & self.ap_idle:
            raise CardBusy(f"{self.where}: compute unit {self._cu_names[cu]} is not idle (CTRL={ctrl:#x}): a run "
                           "started earlier is still going; wait for it, or reset the card (`xbutil reset`)")

    # ---- memory ----------------------------------------------------------------------------------
    def _memory(self, bank: str) -> Any:
        mem_dict = self.overlay.mem_dict
        by_tag = {_tag(t): d for t, d in mem_dict.items()}
        desc = by_tag.get(_tag(bank))
        if desc is None and ":" in bank:
            members = [by_tag.get(t) for t in _expand(bank)]
            if all(members):
                lo = min(m["base_address"] for m in members)
                hi = max(m["base_address"] + m["size"] for m in members)
                groups = [g for g in self._groups[len(mem_dict):] if g["base_address"] == lo and g["size"] == hi - lo]
                if not groups:
                    raise BitstreamMismatch(f"{self.xclbin}: no memory group for {bank} in GROUP_TOPOLOGY "
                                            "(v++ creates one for a port connected to a bank range)")
                desc = groups[0]
        if desc is None:
            raise BitstreamMismatch(f"bank {bank}: not in {self.xclbin.name}'s memory topology "
                                    f"({', '.join(mem_dict)})")
        if not desc["used"]:
            raise BitstreamMismatch(f"bank {bank}: no kernel port of {self.xclbin.name} is connected to it")
        return self.card.get_memory(desc)

    def _allocate(self, nbytes: int, bank: str) -> Buffer:
        self._handle()  # PYNQ would pass a closed (NULL) handle straight to XRT
        memory = self._memory(bank)
        try:
            pbuf = self._pynq.allocate((nbytes,), np.uint8, target=memory)
        except RuntimeError as exc:
            live = sum(b.nbytes for b in self.buffers if b.bank == bank)
            raise DeviceError(f"{self.where}: cannot allocate {nbytes:,} bytes in {bank} ({memory.desc['tag']}, "
                              f"{memory.size:,} bytes; {live:,} already taken there by this device): {exc}") from exc
        buf = Buffer(int(pbuf.device_address), nbytes, bank, handle=pbuf)
        self.buffers.append(buf)
        return buf

    def _free_pynq_buffer(self, pbuf: Any) -> None:
        if not self.card.handle:
            # The XRT handle was closed under us (which freed the buffers); PYNQ would hand XRT a NULL one.
            pbuf.freed = True
            return
        pbuf.freebuffer()

    def _free(self, buf: Buffer) -> None:
        self._free_pynq_buffer(buf.handle)
        buf.handle = None
        if buf in self.buffers:
            self.buffers.remove(buf)

    @property
    def host_pinned_bytes(self) -> int:
        """Host RAM XRT pins for this device's buffers: each buffer's size (XRT mirrors every buffer)."""
        return sum(b.nbytes for b in self.buffers)

    def _write(self, buf: Buffer, data: np.ndarray, offset: int) -> None:
        view = buf.handle[offset : offset + data.nbytes]
        view[:] = data
        self._sync(view.sync_to_device, buf)

    def _read(self, buf: Buffer, out: np.ndarray, offset: int) -> None:
        view = buf.handle[offset : offset + out.nbytes]
        self._sync(view.sync_from_device, buf)
        out[...] = view

    def _sync(self, sync: Any, buf: Buffer) -> None:
        try:
            sync()
        except RuntimeError as exc:
            raise DeviceError(f"{self.where}: DMA of the buffer at {buf.address:#x} in {buf.bank} failed: "
                              f"{exc}") from exc

    # ---- registers --------------------------------------------------------------------------------
    def _handle(self) -> Any:
        if not self.card.handle:
            raise DeviceError(f"{self.where}: PYNQ's XRT handle of this card was closed (Overlay.free() or "
                              "Device.close() elsewhere in this process); reopen the device")
        return self.card.handle

    def _write_reg(self, offset: int, value: int, cu: int = 0) -> None:
        from pynq._3rdparty import xrt

        self._check_usable()
        data = (ctypes.c_char * 4).from_buffer_copy(int(value).to_bytes(4, "little"))
        addr = self._reg_base[cu] + offset
        ret = xrt.xclWrite(self._handle(), xrt.xclAddressSpace.XCL_ADDR_KERNEL_CTRL, addr, data, 4)
        if ret != 4:
            raise DeviceError(f"{self.where}: register write at {addr:#x} (CU {cu} +{offset:#x}) failed: "
                              f"{_xrt_errno(ret)}")

    def _read_reg(self, offset: int, cu: int = 0) -> int:
        from pynq._3rdparty import xrt

        data = (ctypes.c_char * 4)()
        addr = self._reg_base[cu] + offset
        ret = xrt.xclRead(self._handle(), xrt.xclAddressSpace.XCL_ADDR_KERNEL_CTRL, addr, data, 4)
        if ret != 4:
            raise DeviceError(f"{self.where}: register read at {addr:#x} (CU {cu} +{offset:#x}) failed: "
                              f"{_xrt_errno(ret)}")
        value = int.from_bytes(bytes(data), "little")
        if offset == self.ctrl_offset and value == 0xFFFFFFFF:
            self.unusable = (f"{self.where} is not responding: its control register reads 0xFFFFFFFF (the card "
                             "fell off the PCIe bus or was reset); check `xbutil examine`, then reopen")
            raise CardNotResponding(self.unusable)
        return value

    def _check_usable(self) -> None:
        if self.unusable:
            raise DeviceError(f"{self.unusable}. This device is unusable: close() it and open_device() again")

    def start(self, cu: int = 0) -> None:
        """ap_start of `cu`, after checking it is idle (a run still going would take the new arguments)."""
        self._check_open()
        cu = self._cu(cu)
        self._check_usable()
        ctrl = self.read_reg(self.ctrl_offset, cu)
        if not ctrl & self.ap_idle:
            raise DeviceError(f"{self.where}: compute unit {self._cu_names[cu]} is not idle (CTRL={ctrl:#x}); "
                              "a run was started and not waited for")
        self.write_reg(self.ctrl_offset, self.ap_start, cu)

    def _wait_done(self, timeout_s: float, cu: int = 0) -> None:
        self._check_usable()
        deadline = time.monotonic() + timeout_s
        pause = 0.0
        while True:
            if self.read_reg(self.ctrl_offset, cu) & self.ap_done:  # clear-on-read: seen once
                return
            if time.monotonic() >= deadline:
                self.unusable = (f"{self.where}: compute unit {self._cu_names[cu]} did not finish within "
                                 f"{timeout_s:g} s (a late ap_done would be taken for the next run's)")
                raise KernelTimeout(f"{self.unusable}; card memory is still readable; close() and open_device() "
                                    "again to run more")
            time.sleep(pause)
            pause = min(1e-3, pause * 2 + 2e-5)

    # ---- closing ------------------------------------------------------------------------------------
    def _release(self) -> None:
        for buf in list(self.buffers):
            try:
                self._free_pynq_buffer(buf.handle)
            except Exception:  # noqa: BLE001 - closing must finish
                pass
            buf.handle, buf.freed = None, True
        self.buffers.clear()
        users = _CARD_USERS.get(id(self.card))
        for cu_name in self._contexts:
            try:
                if self.card.handle:
                    self.card.close_context(cu_name)
            except Exception:  # noqa: BLE001
                pass
            if users:
                users["cus"].discard(cu_name)
        self._contexts.clear()
        with _USERS_LOCK:
            if users is not None and not users["cus"]:
                _CARD_USERS.pop(id(self.card), None)
        self.overlay = None
        self.ips = []

    def _close(self) -> None:
        self._release()
