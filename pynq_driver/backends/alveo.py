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

import array
import ctypes
import errno
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hls.errors import ToolMissing
from hls.spec import KernelSpec
from hls.targets import get_target
from pynq_driver.backends.discovery import (
    ABORTING_XRT,
    card_problems,
    cards,
    check_device_index,
    context_holders,
    import_pynq,
    local_rank,
    memory_used,
)
from pynq_driver.backends.xclbin_checks import (
    bank_tag,
    board,
    expand_banks,
    resolve_xclbin,
    verify_xclbin,
    xclbin_facts,
)
from pynq_driver.device import Buffer, Device
from pynq_driver.errors import BitstreamMismatch, CardBusy, CardNotResponding, DeviceError, KernelTimeout


def _xrt_errno(ret: int) -> str:
    code = -ret if ret < 0 else (1 << 64) - ret
    return f"{errno.errorcode.get(code, code)} ({os.strerror(code)})" if 0 < code < 4096 else str(ret)


def xrt_version() -> tuple[int, ...]:
    """The XRT release PYNQ found (pynq.pl_server.xrt_device._xrt_version)."""
    from pynq.pl_server import xrt_device

    return tuple(xrt_device._xrt_version or (0, 0, 0))


def _aborts_on_busy() -> bool:
    """XRT 2.14-2.16: xclOpenContext on a CU another process holds aborts the process (SIGABRT)."""
    return ABORTING_XRT[0] <= xrt_version()[:2] <= ABORTING_XRT[1]


# U50/U55C/U280 gen3x16 shells are 2-stage platforms: a shell mismatch fails as "interface uuids do
# not match" (EINVAL) there, as "Shell does not match" (EOPNOTSUPP) on the 1-stage DDR shells.
TWO_STAGE_BOARDS = {"u50", "u55c", "u280"}


# Every AlveoDevice open in this process, per PYNQ device object: the xclbin it runs and the CUs in use.
_CARD_USERS: dict[int, dict[str, Any]] = {}
# Buffers of a closed device whose compute unit timed out and was still running at close: freeing
# them would let that run write into memory XRT hands to the next allocation. Kept (per PYNQ device:
# the device object and its buffers) until a later open of the card finds every CU idle.
_ORPHANS: dict[int, tuple[Any, list[Any]]] = {}
_USERS_LOCK = threading.Lock()


NETWORK_BITSTREAM_MISSING = (
    "alveo backend: joining a ring needs the network bitstream (the card's Ethernet port running the ring "
    "protocol of design.md section 8: issue \"the card's network RTL\", not built yet); today's xclbins hold "
    "the update kernel only. Use backend='golden' or 'csim' for software cards on the wire (pynq_driver.net)")


def require_network_bitstream(spec: KernelSpec | None = None) -> None:
    """Raise `ToolMissing`: no alveo xclbin carries the ring's network port yet (a card cannot join a ring)."""
    raise ToolMissing(NETWORK_BITSTREAM_MISSING)


# ---- the device ---------------------------------------------------------------------------------

class AlveoDevice(Device):
    backend = "alveo"
    overlap_dma = True  # XRT syncs of distinct buffers from two threads (PYNQ's sync_to/from_device)

    @classmethod
    def open(cls, spec: KernelSpec, *, xclbin: str | Path | Sequence[str | Path] | None = None,
             project_dir: str | Path | None = None, timeout_s: float = 10.0,
             device_index: int | None = None) -> AlveoDevice:
        """Program card `device_index` (default: this process's local rank, else 0) with the xclbin of `spec`."""
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
        pynq, problem = import_pynq()
        ips: list[dict[str, Any]] = []
        if resolved is not None and pynq is not None:
            ips = verify_xclbin(*resolved)  # before any card is touched
        missing += [problem] if problem else card_problems(pynq)
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
        if board(card.name) != board(vbnv):
            raise BitstreamMismatch(f"{path} is for an Alveo {board(vbnv).upper()} (platform {vbnv}); card "
                                    f"{index} is an Alveo {board(card.name).upper()} (shell {card.name}): "
                                    "pass the device_index of a matching card or build for this one")
        return cls(manifest, path, ips, card=card, index=index, timeout_s=timeout_s)

    def join_ring(self, *args: Any, **kwargs: Any) -> None:
        """A card on the wire needs the network bitstream, which does not exist yet: `ToolMissing`."""
        require_network_bitstream(self.spec)

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
        # The argument block of each CU (pointers and scalars, contiguous after the control words) and
        # what this device last wrote there: a launch writes only the span that changed, in one call.
        args = [a for a in self.manifest["register_map"]["args"] if a["kind"] != "stream"]
        self._args_lo = min(int(a["offset"]) for a in args)
        self._args_hi = max(int(a["offset"]) + int(a.get("size") or 4) for a in args)
        self._images: list[array.array | None] = []
        self._timed_out: set[int] = set()
        try:
            self._program()
            self._take_cus([ip["cu_name"].split(":")[1] for ip in ips])
            for cu in range(self.cus):
                self._check_idle(cu)
            self._free_orphans()
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
            except (RuntimeError, OSError, KeyError, ValueError, TypeError) as exc:  # PYNQ's, all of them
                msg = str(exc) or type(exc).__name__
                two_stage = board(self.card.name) in TWO_STAGE_BOARDS and "EINVAL" in msg
                if "Shell does not match" in msg or "EOPNOTSUPP" in msg or "interface uuid" in msg or two_stage:
                    raise BitstreamMismatch(f"{self.where}: XRT refused {self.xclbin.name} ({msg}): the xclbin was "
                                            f"built for another shell version than the card's {self.card.name}"
                                            + (" (a 2-stage shell: its interface uuid differs)" if two_stage
                                               else "") + "; update the card's shell (xbmgmt program --base) "
                                            "or rebuild for the installed platform") from exc
                if isinstance(exc, OSError):
                    raise DeviceError(f"{self.where}: cannot read {self.xclbin} for programming: {msg}") from exc
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
                if cu_name in self.card.contexts:
                    # PYNQ's open_context returns an open context as it is: a shared one (an IP object
                    # of this process made it) would be taken for exclusive. Reopen it exclusive.
                    if self.card.contexts[cu_name].get("shared", True):
                        self.card.close_context(cu_name)
                self._check_not_held(cu_name)
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

    def _check_not_held(self, cu_name: str) -> None:
        """On XRT 2.14-2.16 xclOpenContext on a CU another process holds aborts this process (SIGABRT):
        ask xocl first (kdsstat) who holds contexts on the card. A window remains between the check and
        the call (another process opening at that instant); XRT 2.13 returns EBUSY instead."""
        if not _aborts_on_busy():
            return
        holders = context_holders(self.card)
        if holders is None:
            raise DeviceError(f"{self.where}: cannot read the card's kdsstat in sysfs (xocl user function): "
                              f"on XRT {'.'.join(map(str, xrt_version()))} opening a compute unit another program "
                              "holds would abort this process, so the driver does not try; check that the xocl "
                              "driver is loaded and /sys is mounted, or use XRT 2.13")
        others = sorted(set(holders) - {os.getpid()})
        if others:
            raise CardBusy(f"{self.where}: another program (pid {', '.join(map(str, others))}) holds compute "
                           f"unit contexts on this card, {cu_name} may be one of them; stop it, or pick another "
                           "card with device_index")

    def _check_idle(self, cu: int) -> None:
        # One read also clears an ap_done left by a run nobody waited for (clear-on-read). A run
        # finishing just now gets a short grace period before the card is called busy.
        ctrl = self.read_reg(self.ctrl_offset, cu)
        deadline = time.monotonic() + min(self.timeout_s, 0.5)
        while not ctrl & self.ap_idle and time.monotonic() < deadline:
            time.sleep(1e-3)
            ctrl = self.read_reg(self.ctrl_offset, cu)
        if not ctrl & self.ap_idle:
            raise CardBusy(f"{self.where}: compute unit {self._cu_names[cu]} is not idle (CTRL={ctrl:#x}): a run "
                           "started earlier is still going; wait for it, or reset the card (`xbutil reset`)")

    # ---- memory ----------------------------------------------------------------------------------
    def _memory(self, bank: str) -> Any:
        mem_dict = self.overlay.mem_dict
        by_tag = {bank_tag(t): d for t, d in mem_dict.items()}
        desc = by_tag.get(bank_tag(bank))
        if desc is None and ":" in bank:
            members = [by_tag.get(t) for t in expand_banks(bank)]
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
        live = sum(b.nbytes for b in self.buffers if b.bank == bank)
        if xrt_version()[:2] == ABORTING_XRT[1]:
            # XRT 2.16: a failing xclAllocBO aborts this process (SIGABRT): check the bank's room first.
            used = memory_used(self.card, int(memory.idx))
            need = -(-nbytes // 4096) * 4096
            if used is None or used + need > int(memory.size):
                why = ("its use is unknown (no memstat_raw in the card's sysfs)" if used is None
                       else f"{used:,} bytes are in use there")
                raise DeviceError(f"{self.where}: cannot allocate {nbytes:,} bytes in {bank} ({memory.size:,} "
                                  f"bytes; {why}, {live:,} by this device): on XRT 2.16 a failing allocation "
                                  "aborts the process, so the driver does not try; use a smaller chunk or "
                                  "fewer shards per card, or free the card's memory (close other programs)")
        try:
            pbuf = self._pynq.allocate((nbytes,), np.uint8, target=memory)
        except (RuntimeError, OSError, ValueError) as exc:
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
        if self._timed_out and self.card.handle and self._still_running():
            with _USERS_LOCK:  # a CU that timed out may still write into it: kept (see _ORPHANS)
                _ORPHANS.setdefault(id(self.card), (self.card, []))[1].append(buf.handle)
        else:
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
        images = self._images
        if cu < len(images) and images[cu] is not None and self._args_lo <= offset < self._args_hi:
            images[cu] = None  # a single write into the argument block: the image is rebuilt next launch
        ret = xrt.xclWrite(self._handle(), xrt.xclAddressSpace.XCL_ADDR_KERNEL_CTRL, addr, data, 4)
        if ret != 4:
            raise DeviceError(f"{self.where}: register write at {addr:#x} (CU {cu} +{offset:#x}) failed: "
                              f"{_xrt_errno(ret)}")

    def write_regs(self, values: dict[int, int], cu: int = 0) -> None:
        """A kernel's arguments in one register write: the argument block's image (what this device
        last wrote to `cu`, kept per CU) updated with `values`, and the span from the first to the last
        changed word written with one xclWrite, as PYNQ's own `XrtDevice.write_registers` writes a
        block (XRT copies it to the BAR word by word). HLS ignores writes to the reserved word after
        each 64-bit pointer, which the image holds as 0. Registers outside the block: one write each."""
        self._check_open()
        cu = self._cu(cu)
        self._check_usable()
        lo, hi = self._args_lo, self._args_hi
        while len(self._images) < self.cus:
            self._images.append(None)
        old = self._images[cu]
        new = array.array("I", bytes(hi - lo)) if old is None else array.array("I", old)
        first, last = len(new), 0
        for offset, value in values.items():
            offset = int(offset)
            if lo <= offset < hi and not offset % 4:
                k, value = (offset - lo) >> 2, int(value) & 0xFFFFFFFF
                if old is None or old[k] != value:
                    new[k] = value
                    first, last = min(first, k), max(last, k + 1)
            else:
                self._write_reg(offset, int(value) & 0xFFFFFFFF, cu)
        if old is None:
            first, last = 0, len(new)
        elif first >= last:
            return
        self._images[cu] = None  # unknown until the write succeeded
        self._write_block(lo + 4 * first, new[first:last], cu)
        self._images[cu] = new

    def _write_block(self, offset: int, words: array.array, cu: int) -> None:
        from pynq._3rdparty import xrt

        nbytes = len(words) * 4
        data = (ctypes.c_char * nbytes).from_buffer(words)
        addr = self._reg_base[cu] + offset
        ret = xrt.xclWrite(self._handle(), xrt.xclAddressSpace.XCL_ADDR_KERNEL_CTRL, addr, data, nbytes)
        if ret != nbytes:
            raise DeviceError(f"{self.where}: register write of {nbytes} bytes at {addr:#x} (CU {cu} "
                              f"+{offset:#x}) failed: {_xrt_errno(ret)}")

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
                self._timed_out.add(cu)
                self.unusable = (f"{self.where}: compute unit {self._cu_names[cu]} did not finish within "
                                 f"{timeout_s:g} s (a late ap_done would be taken for the next run's)")
                raise KernelTimeout(f"{self.unusable}; card memory is still readable; close() and open_device() "
                                    "again to run more")
            time.sleep(pause)
            pause = min(1e-3, pause * 2 + 2e-5)

    # ---- closing ------------------------------------------------------------------------------------
    def _still_running(self) -> bool:
        """A CU that timed out is still running (or cannot be asked): its buffers must not be freed."""
        for cu in self._timed_out:
            try:
                if not self._read_reg(self.ctrl_offset, cu) & self.ap_idle:
                    return True
            except Exception:  # noqa: BLE001 - a card that cannot answer may still be writing
                return True
        return False

    def _free_orphans(self) -> None:
        """Every CU of this card's kernel is idle now: free what closed devices had to keep."""
        with _USERS_LOCK:
            _card, orphans = _ORPHANS.pop(id(self.card), (None, []))
        for pbuf in orphans:
            try:
                self._free_pynq_buffer(pbuf)
            except Exception:  # noqa: BLE001
                pass

    def _release(self) -> None:
        keep = bool(self._timed_out and self.buffers and self.card.handle and self._reg_base) and self._still_running()
        if keep:
            with _USERS_LOCK:
                _ORPHANS.setdefault(id(self.card), (self.card, []))[1].extend(b.handle for b in self.buffers)
        for buf in list(self.buffers):
            try:
                if not keep:
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
