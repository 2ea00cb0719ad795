"""TEST DOUBLE: simulated Alveo cards behind PYNQ 3.0.1's own XRT device class.

Nothing here touches or claims to model real hardware timing or results: it is what lets the
`alveo` backend run end to end on a machine without XRT or a card, through PYNQ's real
`Overlay`, `DefaultIP`, `XrtDevice`, `XrtMemory` and `PynqBuffer` code. Only the XRT library
calls are replaced: the functions of `pynq._3rdparty.xrt` (the ctypes binding PYNQ calls)
are swapped for methods of `FakeCard`, and `FakeXrtDevice` (a subclass of PYNQ's
`XrtDevice`, overriding none of its logic) is installed as PYNQ's device list.

A `FakeCard` is what the driver sees of a card:
- a shell (VBNV) it accepts xclbins for; an xclbin for another board fails as XRT's
  "Shell does not match" (-EOPNOTSUPP), one without a bitstream section is refused (-EINVAL),
  another xclbin while contexts are open is refused (-EBUSY); the same xclbin again is a no-op;
- memory banks from the loaded xclbin's MEM_TOPOLOGY (and GROUP_TOPOLOGY): each buffer lies
  inside its bank's address range, allocation fails (-ENOMEM) past a bank's size and in banks
  the xclbin marks unused (-EINVAL); host mappings are real anonymous mmaps (PYNQ munmaps them);
- compute-unit contexts, shared or exclusive, per XRT handle;
- per compute unit a register file that follows ap_ctrl_hs (ap_start, ap_done clear-on-read,
  ap_idle); ap_start runs the golden model (`pynq_driver.backends.soft.golden_executor`) on the buffers
  the pointer registers point at, after checking each pointer lies in a buffer in the bank its
  port is connected to;
- injected faults: `hang` (ap_done never comes), `late` (the run finishes only when the test
  calls `finish_late()`: a stale ap_done), `off_bus` (every register reads 0xFFFFFFFF, as a card
  that fell off the PCIe bus), `reg_error` (register reads and writes fail, -EIO), `no_compute`
  (ap_done at once, nothing computed: the driver bench's host-side launch cost).

Per XRT version (`fake_cards(xrt_version=...)`), as the XRT releases the toolkit supports behave:
- 2.13: every failure is an error code (xclOpenContext -EBUSY on a CU another process holds,
  xclAllocBO a negative errno), as the C API of src/runtime_src/core/pcie/linux/shim.cpp returns it;
- 2.14-2.16: the C wrappers in shim.cpp (`xclOpenContext`, and on 2.16 `xclAllocBO`) catch only a
  subclass of the exception the shim throws when a compute unit is busy (or an allocation fails),
  so the exception leaves the `extern "C"` function, std::terminate runs and the process dies with
  SIGABRT (issue 29: reproduced with a copy of the wrapper, exit 134). The double cannot let the test
  process die, so it raises `XrtAbort` (a BaseException nothing in the driver may catch) and records
  the call in `card.aborts`: a test asserting `card.aborts == []` asserts the backend never made it;
- 2-stage shells (u50/u55c/u280 gen3x16: a shell and a user partition): loading an xclbin for
  another shell version fails in the xclmgmt/xocl ICAP download with "interface uuids do not match"
  (-EINVAL), not "Shell does not match" (-EOPNOTSUPP, what 1-stage DDR shells such as u200/u250 say);
- sysfs: each card publishes what xocl's user function shows under
  <root>/bus/pci/drivers/xocl/<bdf>/ (driver/linux/xocl/userpf/xocl_sysfs.c): `kdsstat`
  (kdsstat_show: "contexts:" and the "client pid:" list) and `memstat_raw` (xocl_mm_stat, raw:
  "<bytes used> <BO count> 0" per GROUP_TOPOLOGY entry), and the management function's `slot`
  under xclmgmt/<bdf>/ (what PYNQ's XrtDevice._find_sysfs reads). `<root>` is OPTIMUSNIC_SYSFS_ROOT.

`build_xclbin()` writes the AXLF container v++ would (section layout from XRT's xclbin.h):
BITSTREAM (a labelled stand-in payload that carries the manifests, so the fake card knows which
kernel it "is"), EMBEDDED_METADATA, MEM_TOPOLOGY with every bank of the target plus PLRAM and
HOST entries, IP_LAYOUT, CONNECTIVITY, and GROUP_TOPOLOGY / GROUP_CONNECTIVITY when a port is
connected to a bank range.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import errno
import hashlib
import json
import mmap
import os
import struct
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hls import layout
from hls.ports import port_array
from hls.registry import CU_STRIDE, expand_banks, kernel_metadata_xml
from hls.sizing import StripeCounts
from hls.spec import KernelSpec
from hls.xclbin import (
    AXLF_HEADER_SIZE,
    AXLF_SECTION_HEADER,
    BITSTREAM,
    CONNECTIVITY,
    EMBEDDED_METADATA,
    GROUP_CONNECTIVITY,
    GROUP_TOPOLOGY,
    IP_LAYOUT,
    MEM_TOPOLOGY,
    XCLBIN_MAGIC,
)

FAKE_BITSTREAM_MAGIC = b"OPTIMUSNIC TEST DOUBLE: not a bitstream, programs nothing\n"

# XRT's xclbin.h memory types (the container layout and section kinds are hls.xclbin's)
MEM_DDR4, MEM_DRAM, MEM_HBM, MEM_HOST = 1, 2, 6, 10
_HEADER_SIZE = AXLF_HEADER_SIZE
_SECTION_HEADER = AXLF_SECTION_HEADER
_MEM_DATA = struct.Struct("<BB6xqq16s")
CU_BASE = 0x1800000

# Shell (base platform) names the cards report, as `xbutil examine` shows them.
SHELLS = {
    "u50": "xilinx_u50_gen3x16_xdma_base_5",
    "u55c": "xilinx_u55c_gen3x16_xdma_base_3",
    "u280": "xilinx_u280_gen3x16_xdma_base_1",
    "u250": "xilinx_u250_gen3x16_base_4",
    "u200": "xilinx_u200_gen3x16_xdma_base_2",
}
# Boards whose gen3x16 shells are 2-stage platforms (shell partition + user partition).
TWO_STAGE = {"u50", "u55c", "u280"}
OTHER_PID = 4242  # the process id kdsstat lists for "another program" (hold_context_elsewhere)


class XrtAbort(BaseException):  # noqa: N818 - named for what it stands for
    """TEST DOUBLE: here a real XRT 2.14-2.16 would have aborted the process (SIGABRT, exit 134): a C++
    exception crossed the `extern "C"` boundary of shim.cpp's wrapper (see the module docstring)."""


PLRAM_BANKS, PLRAM_BYTES = 6, 128 * 1024
HOST_BYTES = 1 << 38
HBM_BASE, DDR_BASE = 0x0, 0x4000000000


def _board(vbnv: str) -> str:
    parts = vbnv.split("_")
    return parts[1] if len(parts) > 1 else vbnv


# ---- the xclbin ---------------------------------------------------------------------------------

@dataclass
class _Mem:
    tag: str
    type: int
    used: bool
    base: int
    size: int
    members: tuple[int, ...] = ()  # group entries: the MEM_TOPOLOGY indices they span


def _topology(memory: dict[str, Any], ddr_tags: str) -> list[_Mem]:
    """Every bank of the target as v++ lists them, then PLRAM and HOST."""
    prefix, channels, size = memory["bank_prefix"], memory["channels"], memory["channel_capacity_bytes"]
    mems = []
    for i in range(channels):
        if prefix == "HBM":
            mems.append(_Mem(f"HBM[{i}]", MEM_HBM, False, HBM_BASE + i * size, size))
        else:
            tag = f"bank{i}" if ddr_tags == "bank" else f"DDR[{i}]"
            mems.append(_Mem(tag, MEM_DDR4, False, DDR_BASE + i * size, size))
    plram_base = DDR_BASE + (1 << 40)
    mems += [_Mem(f"PLRAM[{i}]", MEM_DRAM, False, plram_base + i * PLRAM_BYTES, PLRAM_BYTES)
             for i in range(PLRAM_BANKS)]
    mems.append(_Mem("HOST[0]", MEM_HOST, False, 0x2000000000000, HOST_BYTES))
    return mems


def _tag_index(mems: list[_Mem], bank: str) -> int:
    tags = [m.tag for m in mems]
    if bank in tags:
        return tags.index(bank)
    if bank.startswith("DDR[") and f"bank{bank[4:-1]}" in tags:
        return tags.index(f"bank{bank[4:-1]}")
    raise KeyError(bank)


def build_xclbin(manifests: list[dict[str, Any]], memory: dict[str, Any], *, platform: str | None = None,
                 bitstream: bool = True, ddr_tags: str = "DDR", protocol: str | None = None,
                 ctrl_range: int | None = None, reverse_addresses: bool = False) -> bytes:
    """An xclbin holding the kernels of `manifests` (one or more), laid out as v++ links them.

    `platform` overrides the VBNV (default: the first manifest's target platform); `ddr_tags="bank"`
    names DDR banks bank0.. as older platforms do; `protocol` overrides hwControlProtocol;
    `ctrl_range` the S_AXI_CONTROL range (the kernel's register decoder: an HLS build whose decoder is
    narrower than the register map; the card then aliases offsets past it, as the decoder ignores the
    upper address bits); `reverse_addresses` places instance k of n at the (n-1-k)-th address, as
    the linker may (instance names, not addresses, say which CU is which).
    """
    mems = _topology(memory, ddr_tags)
    groups: list[_Mem] = []
    ips, xml_kernels, conns, group_conns = [], [], [], []
    for k, manifest in enumerate(manifests):
        spec = manifest["spec"]
        name = spec["name"]
        base = CU_BASE + k * 16 * CU_STRIDE
        root = ET.fromstring(kernel_metadata_xml(manifest))
        kernel = root.find("platform/device/core/kernel")
        if protocol is not None:
            kernel.set("hwControlProtocol", protocol)
        if ctrl_range is not None:
            kernel.find("port[@name='S_AXI_CONTROL']").set("range", hex(ctrl_range))
        ncu = spec["compute_units"]

        def cu_base(cu: int, base: int = base, ncu: int = ncu) -> int:
            return base + ((ncu - 1 - cu) if reverse_addresses else cu) * CU_STRIDE

        for cu, inst in enumerate(kernel.findall("instance")):
            inst.find("addrRemap").set("base", hex(cu_base(cu)))
        xml_kernels.append(kernel)
        arg_ids = {a["name"]: i for i, a in enumerate(manifest["register_map"]["args"])}
        for cu in range(spec["compute_units"]):
            ip_index = len(ips)
            ips.append((cu_base(cu), f"{name}:{name}_{cu + 1}"))
            banks = next(b["banks"] for b in manifest["banks"] if b["cu"] == cu)
            for arg, expr in banks.items():
                if expr is None or arg not in arg_ids:
                    continue
                members = [_tag_index(mems, t) for t in expand_banks(expr)]
                for i in members:
                    mems[i].used = True
                    conns.append((arg_ids[arg], ip_index, i))
                if len(members) > 1:
                    key = tuple(members)
                    found = [g for g in groups if g.members == key]
                    if not found:
                        first, last = mems[members[0]], mems[members[-1]]
                        found = [_Mem(expr, first.type, True, first.base, last.base + last.size - first.base, key)]
                        groups += found
                    group_conns.append((arg_ids[arg], ip_index, len(mems) + groups.index(found[0])))
                else:
                    group_conns.append((arg_ids[arg], ip_index, members[0]))
    first = manifests[0]
    root = ET.fromstring(kernel_metadata_xml(first))
    core = root.find("platform/device/core")
    for old in core.findall("kernel"):
        core.remove(old)
    for kernel in xml_kernels:
        core.append(kernel)
    core.set("numComputeUnits", str(len(ips)))
    metadata = ET.tostring(root, encoding="unicode").encode()

    def mem_section(entries: list[_Mem]) -> bytes:
        return struct.pack("<i4x", len(entries)) + b"".join(
            _MEM_DATA.pack(m.type, int(m.used), m.size // 1024, m.base, m.tag.encode()) for m in entries)

    def conn_section(rows: list[tuple[int, int, int]]) -> bytes:
        return struct.pack("<i", len(rows)) + b"".join(struct.pack("<iii", *c) for c in rows)

    ip_layout = struct.pack("<i4x", len(ips)) + b"".join(
        struct.pack("<IIQ64s", 1, 1, addr, nm.encode()) for addr, nm in ips)
    sections = []
    if bitstream:
        payload = FAKE_BITSTREAM_MAGIC + json.dumps([m for m in manifests], sort_keys=True).encode()
        sections.append((BITSTREAM, "BITSTREAM", payload))
    sections += [(EMBEDDED_METADATA, "EMBEDDED_METADATA", metadata), (MEM_TOPOLOGY, "MEM_TOPOLOGY", mem_section(mems)),
                 (IP_LAYOUT, "IP_LAYOUT", ip_layout), (CONNECTIVITY, "CONNECTIVITY", conn_section(conns))]
    if groups:
        sections += [(GROUP_TOPOLOGY, "GROUP_TOPOLOGY", mem_section(mems + groups)),
                     (GROUP_CONNECTIVITY, "GROUP_CONNECTIVITY", conn_section(group_conns))]
    start = _HEADER_SIZE + _SECTION_HEADER.size * len(sections)
    headers, body = b"", b""
    for kind, title, data in sections:
        body += bytes(-(start + len(body)) % 8)
        headers += _SECTION_HEADER.pack(kind, title.encode()[:16], start + len(body), len(data))
        body += data
    total = _HEADER_SIZE + len(headers) + len(body)
    uuid = hashlib.sha256(json.dumps(manifests, sort_keys=True).encode() + bytes([bitstream])).digest()[:16]
    vbnv = (platform or first["target"]["platform"] or first["target"]["key"]).encode()[:64]
    header = struct.pack("<QQQHBBI16s64s16s16sI4x", total, 0, 0, 0, 2, 2, 0, b"", vbnv, uuid, b"", len(sections))
    return XCLBIN_MAGIC + bytes(32) + bytes(256) + struct.pack("<Q", 0) + header + headers + body


def _sections(data: bytes) -> tuple[dict[int, bytes], bytes, str]:
    (count,) = struct.unpack_from("<I", data, _HEADER_SIZE - 8)
    out = {}
    for i in range(count):
        kind, _, off, size = _SECTION_HEADER.unpack_from(data, _HEADER_SIZE + i * _SECTION_HEADER.size)
        out[kind] = data[off: off + size]
    header_at = 8 + 32 + 256 + 8
    vbnv = data[header_at + 48: header_at + 112].rstrip(b"\0").decode()
    uuid = data[header_at + 112: header_at + 128]
    return out, uuid, vbnv


def _mems(blob: bytes) -> list[_Mem]:
    (count,) = struct.unpack_from("<i", blob, 0)
    out = []
    for i in range(count):
        t, used, size_kb, base, tag = _MEM_DATA.unpack_from(blob, 8 + i * _MEM_DATA.size)
        out.append(_Mem(tag.rstrip(b"\0").decode(), t, bool(used), base, size_kb * 1024))
    return out


def _conns(blob: bytes) -> list[tuple[int, int, int]]:
    (count,) = struct.unpack_from("<i", blob, 0)
    return [struct.unpack_from("<iii", blob, 4 + 12 * i) for i in range(count)]


# ---- the card ----------------------------------------------------------------------------------

@dataclass
class _Bo:
    handle: Any
    mem: int
    address: int
    size: int
    storage: np.ndarray
    host: int = 0
    freed: bool = False


@dataclass
class _Cu:
    name: str  # kernel:instance
    base: int
    span: int
    manifest: dict[str, Any]
    ip_index: int
    regs: dict[int, int] = field(default_factory=dict)
    running: bool = False
    done: bool = False
    pending: Any = None  # a finished run waiting for finish_late()
    decoder: int = 0  # bytes the register decoder covers (0: the whole span); offsets past it alias


class _Handle:
    """What xclOpen returns: one process's connection to a card."""

    def __init__(self, card: FakeCard) -> None:
        self.card = card
        self.closed = False
        self.pid = os.getpid()


class FakeCard:
    """One simulated card (TEST DOUBLE; see the module docstring)."""

    def __init__(self, board: str = "u55c", *, shell: str | None = None, platforms: set[str] | None = None) -> None:
        from hls.targets import get_target

        self.board = board
        self.shell = shell or SHELLS[board]
        # The platform (xclbin VBNV) this shell version takes: another version of the board's
        # platform is refused as XRT refuses it ("Shell does not match").
        self.platforms = platforms or {get_target(board).platform}
        self.uuid: bytes | None = None
        self.vbnv = ""
        self.mems: list[_Mem] = []  # GROUP_TOPOLOGY when present, else MEM_TOPOLOGY
        self.topology: list[_Mem] = []
        self.cus: list[_Cu] = []
        self.connections: dict[tuple[int, int], set[int]] = {}
        self.contexts: dict[int, dict[_Handle, bool]] = {}  # ip index -> handle -> shared
        self.bos: dict[int, _Bo] = {}
        self._next_bo = 1
        self.loads = 0
        self.faults: set[str] = set()
        self.errors: list[str] = []  # what a real card would have done wrong (tests assert it stays empty)
        self.calls: dict[str, int] = {}  # XRT register calls made on this card: xclWrite, xclRead
        self.aborts: list[str] = []  # XRT calls that would have killed the process (tests assert it stays empty)
        self.sysfs: Path | None = None  # xocl's user-function folder (set by fake_cards)
        self.handles: list[_Handle] = []
        self._lock = threading.RLock()

    # ---- what tests look at ----------------------------------------------------------------
    def live_bos(self) -> list[_Bo]:
        return [b for b in self.bos.values() if not b.freed]

    def open_contexts(self) -> int:
        return sum(len(h) for h in self.contexts.values())

    def hold_context_elsewhere(self, cu: int = 0) -> None:
        """Another process opens an exclusive context on CU `cu` (a busy card)."""
        other = _Handle(self)
        other.pid = OTHER_PID
        self.contexts.setdefault(self.cus[cu].ip_index, {})[other] = False
        self.publish()

    def publish(self) -> None:
        """Write kdsstat and memstat_raw as xocl shows them (see the module docstring)."""
        if self.sysfs is None:
            return
        pids = sorted({h.pid for holders in self.contexts.values() for h in holders})
        uuid = (self.uuid or bytes(16)).hex()
        kds = (f"xclbin:\t\t\t{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}\n"
               f"outstanding execs:\t0\ntotal execs:\t\t0\ncontexts:\t\t{len(pids)}\nclient pid:\n"
               + "".join(f"\t\t\t{p}\n" for p in pids))
        mem = ""
        for i, _m in enumerate(self.mems):
            bos = [b for b in self.live_bos() if b.mem == i]
            mem += f"{sum(-(-b.size // 4096) * 4096 for b in bos)} {len(bos)} 0\n"
        (self.sysfs / "kdsstat").write_text(kds)
        (self.sysfs / "memstat_raw").write_text(mem)

    def finish_late(self) -> None:
        """Complete every run held back by the `late` fault: ap_done rises now."""
        for cu in self.cus:
            if cu.pending is not None:
                run, cu.pending = cu.pending, None
                run()
                cu.running, cu.done = False, True

    # ---- xclbin --------------------------------------------------------------------------------
    def load(self, data: bytes) -> int:
        with self._lock:
            if not bytes(data).startswith(XCLBIN_MAGIC):
                return -errno.EINVAL
            sections, uuid, vbnv = _sections(bytes(data))
            if _board(vbnv) != _board(self.shell) or vbnv not in self.platforms:
                if _board(vbnv) == _board(self.shell) and _board(self.shell) in TWO_STAGE:
                    return -errno.EINVAL  # 2-stage shell: "interface uuids do not match"
                return -errno.EOPNOTSUPP  # 1-stage shell: XRT's "Shell does not match"
            if BITSTREAM not in sections:
                return -errno.EINVAL
            if uuid == self.uuid:
                return 0  # already loaded: XRT skips the download
            if self.open_contexts():
                return -errno.EBUSY  # "Bitstream in use by another program"
            if self.live_bos():
                return -errno.EPERM  # "Possibly buffers still allocated"
            payload = sections[BITSTREAM]
            manifests = json.loads(payload[len(FAKE_BITSTREAM_MAGIC):]) if payload.startswith(
                FAKE_BITSTREAM_MAGIC) else []
            self.topology = _mems(sections[MEM_TOPOLOGY])
            self.mems = _mems(sections[GROUP_TOPOLOGY]) if GROUP_TOPOLOGY in sections else list(self.topology)
            for g in self.mems[len(self.topology):]:
                g.members = tuple(i for i, m in enumerate(self.topology)
                                  if g.base <= m.base and m.base + m.size <= g.base + g.size)
            conns = _conns(sections[GROUP_CONNECTIVITY if GROUP_CONNECTIVITY in sections else CONNECTIVITY])
            self.connections = {}
            for arg, ip, mem in conns:
                self.connections.setdefault((ip, arg), set()).add(mem)
            (count,) = struct.unpack_from("<i", sections[IP_LAYOUT], 0)
            by_name = {m["spec"]["name"]: m for m in manifests}
            meta = ET.fromstring(sections[EMBEDDED_METADATA])
            decoders = {k.get("name"): int(k.find("port[@name='S_AXI_CONTROL']").get("range"), 0)
                        for k in meta.iter("kernel")}
            self.cus = []
            for i in range(count):
                _, _, base, name = struct.unpack_from("<IIQ64s", sections[IP_LAYOUT], 8 + 80 * i)
                full = name.rstrip(b"\0").decode()
                manifest = by_name[full.split(":")[0]]
                span = 1 << manifest["register_map"]["address_bits"]
                self.cus.append(_Cu(full, base, span, manifest, i, decoder=decoders.get(full.split(":")[0], 0)))
            self.uuid, self.vbnv = uuid, vbnv
            self.loads += 1
            self.publish()
            return 0

    # ---- contexts ------------------------------------------------------------------------------
    def open_context(self, handle: _Handle, uuid: bytes, ip: int, shared: bool) -> int:
        if uuid != self.uuid or not 0 <= ip < len(self.cus):
            return -errno.EINVAL
        holders = self.contexts.setdefault(ip, {})
        others = {h: s for h, s in holders.items() if h is not handle}
        if others and (not shared or not all(others.values())):
            return -errno.EBUSY
        holders[handle] = shared
        self.publish()
        return 0

    def close_context(self, handle: _Handle, uuid: bytes, ip: int) -> int:
        holders = self.contexts.get(ip, {})
        if uuid != self.uuid or handle not in holders:
            return -errno.EINVAL
        del holders[handle]
        self.publish()
        return 0

    # ---- memory -------------------------------------------------------------------------------
    def alloc(self, handle: _Handle, size: int, flags: int) -> int:
        idx = flags & 0xFFFF
        if not 0 <= idx < len(self.mems) or not self.mems[idx].used or size <= 0:
            return -errno.EINVAL  # xocl: "Bank %d is marked as unused in axlf"
        mem = self.mems[idx]
        span = -(-size // 4096) * 4096
        taken = sorted((b.address, b.address + -(-b.size // 4096) * 4096) for b in self.live_bos())
        addr = mem.base
        for lo, hi in taken:
            if hi <= addr or lo >= mem.base + mem.size:
                continue
            if lo - addr >= span:
                break
            addr = max(addr, hi)
        if addr + span > mem.base + mem.size:
            return -errno.ENOMEM
        bo = _Bo(handle, idx, addr, size, np.zeros(size, np.uint8))
        self.bos[self._next_bo] = bo
        self._next_bo += 1
        self.publish()
        return self._next_bo - 1

    def bo(self, handle: _Handle, bo: int) -> _Bo | None:
        b = self.bos.get(bo)
        if b is None or b.freed or handle.closed:
            return None
        return b

    def free(self, handle: _Handle, bo: int) -> None:
        b = self.bos.get(bo)
        if handle.closed:
            self.errors.append(f"xclFreeBO({bo}) on a closed XRT handle (buffer freed against a dead handle)")
            return
        if b is None or b.freed:
            self.errors.append(f"xclFreeBO({bo}): no such buffer")
            return
        b.freed = True
        b.storage = np.zeros(0, np.uint8)
        self.publish()

    def close_handle(self, handle: _Handle) -> None:
        # XRT closes the handle's contexts and buffers with it.
        handle.closed = True
        for holders in self.contexts.values():
            holders.pop(handle, None)
        for b in self.bos.values():
            if b.handle is handle:
                b.freed = True
        self.publish()

    # ---- registers and the kernel ----------------------------------------------------------
    def _cu_at(self, address: int) -> tuple[_Cu, int] | None:
        for cu in self.cus:
            if cu.base <= address < cu.base + cu.span:
                return cu, address - cu.base
        return None

    def read_reg(self, address: int) -> int | None:
        if "reg_error" in self.faults:
            return None
        if "off_bus" in self.faults:
            return 0xFFFFFFFF
        found = self._cu_at(address)
        if found is None:
            return None
        cu, off = found
        if cu.decoder:
            off %= cu.decoder  # the HLS decoder ignores address bits above its width
        if off != 0:
            return cu.regs.get(off, 0)
        value = (0x1 if cu.running else 0) | (0x2 if cu.done else 0) | (0x0 if cu.running else 0x4)
        cu.done = False  # ap_done is clear-on-read
        return value

    def write_reg(self, address: int, value: int) -> bool:
        if "reg_error" in self.faults:
            return False
        if "off_bus" in self.faults:
            return True
        found = self._cu_at(address)
        if found is None:
            return False
        cu, off = found
        if cu.decoder:
            off %= cu.decoder
        if off != 0:
            cu.regs[off] = value & 0xFFFFFFFF
            return True
        if value & 0x1:
            self._start(cu)
        return True

    def _start(self, cu: _Cu) -> None:
        if cu.running:
            self.errors.append(f"{cu.name}: ap_start while the CU is running")
            return
        cu.running, cu.done = True, False
        if "hang" in self.faults:
            return
        if "no_compute" in self.faults:  # the driver bench: ap_done at once, nothing computed
            cu.running, cu.done = False, True
            return
        run = self._run(cu)
        if "late" in self.faults:
            cu.pending = run
            return
        run()
        cu.running, cu.done = False, True

    def _run(self, cu: _Cu) -> Any:
        from pynq_driver.backends.soft import golden_executor

        manifest = cu.manifest
        rm = manifest["register_map"]
        spec = KernelSpec.from_dict(dict(manifest["spec"]))
        stripes = StripeCounts(**rm["stripes"])
        args = {a["name"]: a for a in rm["args"]}
        arg_ids = {a["name"]: i for i, a in enumerate(rm["args"])}
        n = cu.regs.get(int(args["n"]["offset"]), 0)
        scalars = {a["name"]: cu.regs.get(int(a["offset"]), 0) for a in rm["args"]
                   if a["kind"] == "scalar" and a["name"] != "n"}
        views = {}
        for name, a in args.items():
            if a["kind"] != "pointer":
                continue
            array, index = port_array(name)
            elem = {"grad": spec.grad_bytes, "out": spec.out_bytes}.get(array, 4)
            nbytes = layout.stripe_bytes(n, elem, stripes.of(array), index)
            off = int(a["offset"])
            addr = cu.regs.get(off, 0) | (cu.regs.get(off + 4, 0) << 32)
            view = self._reach(cu, arg_ids[name], name, addr, nbytes)
            if view is None:
                return lambda: None  # the error is recorded; the kernel completes, as an HLS kernel does
            views[name] = view
        executor = golden_executor(spec, stripes)
        return lambda: executor(views, n, scalars)

    def _reach(self, cu: _Cu, arg: int, name: str, addr: int, nbytes: int) -> np.ndarray | None:
        live = sorted(self.live_bos(), key=lambda b: b.address)
        i = bisect.bisect([b.address for b in live], addr) - 1
        if i < 0 or addr + nbytes > live[i].address + live[i].size:
            self.errors.append(f"{cu.name}.{name} = {addr:#x} (+{nbytes}) is outside every buffer")
            return None
        bo = live[i]
        reach = set()
        for m in self.connections.get((cu.ip_index, arg), set()):
            reach |= {m, *self.mems[m].members}
        if bo.mem not in reach and not (set(self.mems[bo.mem].members) and set(self.mems[bo.mem].members) <= reach):
            self.errors.append(f"{cu.name}.{name} points into {self.mems[bo.mem].tag}, its port reaches "
                               f"{', '.join(sorted(self.mems[m].tag for m in reach))}")
            return None
        start = addr - bo.address
        return bo.storage[start: start + nbytes]


# ---- the XRT calls PYNQ makes, answered by the cards ---------------------------------------------

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_ERR = 1 << 64  # c_size_t / c_uint returns of negative errno


class FakeXrt:
    """Stand-ins for the functions of `pynq._3rdparty.xrt`, dispatching on the fake handle."""

    def __init__(self, cards: list[FakeCard], version: tuple[int, int, int] = (2, 15, 0)) -> None:
        self.cards = cards
        self.version = tuple(version)

    def _abort(self, card: FakeCard, call: str) -> None:
        card.aborts.append(call)
        raise XrtAbort(f"XRT {'.'.join(map(str, self.version))}: {call} would abort the process (SIGABRT)")

    def xclProbe(self) -> int:  # noqa: N802 - XRT's names
        return len(self.cards)

    def xclOpen(self, index: int, log: Any, level: int) -> _Handle:  # noqa: N802
        handle = _Handle(self.cards[index])
        self.cards[index].handles.append(handle)
        return handle

    def xclClose(self, handle: _Handle) -> None:  # noqa: N802
        handle.card.close_handle(handle)

    def xclGetDeviceInfo2(self, handle: _Handle, info: Any) -> int:  # noqa: N802
        info.mName = handle.card.shell.encode()
        info.mPciSlot = self.cards.index(handle.card)
        return 0

    def xclLockDevice(self, handle: _Handle) -> int:  # noqa: N802
        return 0

    def xclUnlockDevice(self, handle: _Handle) -> int:  # noqa: N802
        return 0

    def xclLoadXclBin(self, handle: _Handle, data: bytes) -> int:  # noqa: N802
        return handle.card.load(data) if not handle.closed else -errno.EBADF

    def xclIPName2Index(self, handle: _Handle, name: str) -> int:  # noqa: N802
        names = [cu.name for cu in handle.card.cus]
        return names.index(name) if name in names else -errno.ENOENT

    def xclOpenContext(self, handle: _Handle, uuid: Any, ip: int, shared: bool) -> int:  # noqa: N802
        ret = handle.card.open_context(handle, bytes(uuid.bytes), ip, bool(shared))
        # 2.14-2.16: the busy CU's exception escapes shim.cpp's xclOpenContext wrapper (module docstring).
        if ret == -errno.EBUSY and (2, 14) <= self.version[:2] <= (2, 16):
            self._abort(handle.card, f"xclOpenContext(ip {ip}) on a compute unit another process holds")
        return ret

    def xclCloseContext(self, handle: _Handle, uuid: Any, ip: int) -> int:  # noqa: N802
        return handle.card.close_context(handle, bytes(uuid.bytes), ip)

    def xclAllocBO(self, handle: _Handle, size: int, domain: int, flags: int) -> int:  # noqa: N802
        bo = handle.card.alloc(handle, int(size), int(flags)) if not handle.closed else -errno.EBADF
        # 2.16: a failed allocation's exception escapes shim.cpp's xclAllocBO wrapper (module docstring).
        if bo < 0 and self.version[:2] == (2, 16):
            self._abort(handle.card, f"xclAllocBO({size} bytes, flags {flags:#x}) that fails ({errno.errorcode[-bo]})")
        return bo % (1 << 32)

    def xclGetBOProperties(self, handle: _Handle, bo: int, prop: Any) -> int:  # noqa: N802
        b = handle.card.bo(handle, bo)
        if b is None:
            return -errno.EINVAL
        prop.handle, prop.size, prop.paddr = bo, b.size, b.address
        return 0

    def xclMapBO(self, handle: _Handle, bo: int, write: bool, *a: Any) -> ctypes.c_void_p:  # noqa: N802
        b = handle.card.bo(handle, bo)
        if b is None:
            return ctypes.c_void_p(0)
        ptr = _libc.mmap(None, b.size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        b.host = ptr
        return ctypes.c_void_p(ptr)

    def xclSyncBO(self, handle: _Handle, bo: int, direction: int, size: int, offset: int) -> int:  # noqa: N802
        b = handle.card.bo(handle, bo)
        if b is None or offset < 0 or offset + size > b.size or not b.host:
            return _ERR - errno.EINVAL
        host = (ctypes.c_uint8 * size).from_address(b.host + offset)
        if direction == 0:  # XCL_BO_SYNC_BO_TO_DEVICE
            b.storage[offset: offset + size] = np.frombuffer(host, np.uint8)
        else:
            np.frombuffer(host, np.uint8)[:] = b.storage[offset: offset + size]
        return 0

    def xclFreeBO(self, handle: _Handle | None, bo: int) -> None:  # noqa: N802
        if handle is None:  # libxrt would dereference NULL
            for card in self.cards:
                card.errors.append(f"xclFreeBO({bo}) with a NULL handle")
            return
        handle.card.free(handle, bo)

    def xclRead(self, handle: _Handle, space: int, offset: int, buf: Any, size: int) -> int:  # noqa: N802
        if handle.closed:
            return _ERR - errno.EBADF
        handle.card.calls["xclRead"] = handle.card.calls.get("xclRead", 0) + 1
        with handle.card._lock:
            words = [handle.card.read_reg(offset + 4 * i) for i in range(size // 4)]
        if any(w is None for w in words):
            return _ERR - errno.EIO
        ctypes.memmove(buf, struct.pack(f"<{len(words)}I", *words), size)
        return size

    def xclWrite(self, handle: _Handle, space: int, offset: int, buf: Any, size: int) -> int:  # noqa: N802
        if handle.closed:
            return _ERR - errno.EBADF
        handle.card.calls["xclWrite"] = handle.card.calls.get("xclWrite", 0) + 1
        data = ctypes.string_at(buf, size)
        words = struct.unpack(f"<{size // 4}I", data)
        card = handle.card
        with card._lock:
            found = card._cu_at(offset)
            if (found and not {"reg_error", "off_bus"} & card.faults and found[0].decoder in (0, found[0].span)
                    and found[1] > 0
                    and found[1] + size <= found[0].span):
                # A block of argument words inside one CU, past its control word: stored as they come.
                cu, off = found
                cu.regs.update(zip(range(off, off + size, 4), words, strict=True))
                return size
            ok = all(card.write_reg(offset + 4 * i, w) for i, w in enumerate(words))
        return size if ok else _ERR - errno.EIO


XRT_FUNCTIONS = [n for n in dir(FakeXrt) if n.startswith("xcl")]


def _fake_device_class() -> type:
    from pynq.pl_server.xrt_device import XrtDevice

    class FakeXrtDevice(XrtDevice):
        """TEST DOUBLE: PYNQ's own XrtDevice (unchanged) over the fake XRT calls."""

    def _probe_(cls: type) -> list[Any]:
        from pynq._3rdparty import xrt

        return [cls(i) for i in range(xrt.xclProbe())]

    # Set after class creation: a `_probe_` in the class body would register the class with
    # PYNQ's device metaclass for good; here it is installed only inside fake_cards().
    FakeXrtDevice._probe_ = classmethod(_probe_)
    FakeXrtDevice._probe_priority_ = 200
    return FakeXrtDevice


@contextlib.contextmanager
def fake_cards(*cards: FakeCard, xrt_version: tuple[int, int, int] = (2, 15, 0)) -> Iterator[list[FakeCard]]:
    """Install `cards` as the machine's Alveo cards for PYNQ (device list probed on first use)."""
    import pynq.pl_server.xrt_device as xrt_device
    from pynq._3rdparty import xrt
    from pynq.pl_server.device import Device, DeviceMeta

    fake = FakeXrt(list(cards), xrt_version)
    sysfs_root = Path(tempfile.mkdtemp(prefix="fake-sysfs-"))
    for i, card in enumerate(cards):  # the management and user functions of card i, as xclmgmt/xocl bind them
        mgmt = sysfs_root / "bus/pci/drivers/xclmgmt" / f"0000:{0x10 + i:02x}:00.0"
        mgmt.mkdir(parents=True)
        (mgmt / "slot").write_text(f"{i}\n")
        card.sysfs = sysfs_root / "bus/pci/drivers/xocl" / f"0000:{0x10 + i:02x}:00.1"
        card.sysfs.mkdir(parents=True)
        card.publish()
    saved_root = os.environ.get("OPTIMUSNIC_SYSFS_ROOT")
    os.environ["OPTIMUSNIC_SYSFS_ROOT"] = str(sysfs_root)
    saved = {n: getattr(xrt, n, None) for n in XRT_FUNCTIONS}
    saved_state = (xrt.XRT_SUPPORTED, xrt_device._xrt_version, dict(DeviceMeta._subclasses),
                   Device.__dict__.get("_devices"), Device.__dict__.get("_active_device"))
    for n in XRT_FUNCTIONS:
        setattr(xrt, n, getattr(fake, n))
    xrt.XRT_SUPPORTED = True
    xrt_device._xrt_version = xrt_version
    DeviceMeta._subclasses.clear()
    DeviceMeta._subclasses[200] = _fake_device_class()
    for attr in ("_devices", "_active_device"):
        if attr in Device.__dict__:
            delattr(Device, attr)
    try:
        yield list(cards)
    finally:
        import gc

        gc.collect()  # PynqBuffers dropped by the test free themselves while the fake XRT answers
        import shutil

        if saved_root is None:
            os.environ.pop("OPTIMUSNIC_SYSFS_ROOT", None)
        else:
            os.environ["OPTIMUSNIC_SYSFS_ROOT"] = saved_root
        shutil.rmtree(sysfs_root, ignore_errors=True)
        for card in cards:
            card.sysfs = None
        for n, f in saved.items():
            if f is None:
                delattr(xrt, n)
            else:
                setattr(xrt, n, f)
        xrt.XRT_SUPPORTED, xrt_device._xrt_version = saved_state[0], saved_state[1]
        DeviceMeta._subclasses.clear()
        DeviceMeta._subclasses.update(saved_state[2])
        for attr, value in (("_devices", saved_state[3]), ("_active_device", saved_state[4])):
            if attr in Device.__dict__:
                delattr(Device, attr)
            if value is not None:
                setattr(Device, attr, value)
