"""The device interface (design.md section 5) and the parts every backend shares.

A device is one kernel on one card (or in a simulation of one): buffers in named memory banks,
copies to and from them, 32-bit control registers, start, and a wait with a timeout. Nothing
above this interface knows which backend it runs on; `kernel.py` programs the registers from
the manifest's register map the same way for all of them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hls.sizing import StripeCounts
from hls.spec import KernelSpec
from pynq_driver.errors import DeviceClosed, DeviceError, KernelTimeout

# Buffers start on 4 KiB boundaries, as XRT allocates them; AXI bursts never straddle a buffer.
ALIGN = 4096


@dataclass
class Buffer:
    """A region of card memory: its device (bus) address, size in bytes and bank."""

    address: int
    nbytes: int
    bank: str
    handle: Any = field(default=None, repr=False)  # backend object (pynq buffer, numpy bytes)
    freed: bool = False
    imported: bool = False  # host memory lent to the card by `Device.import_host`, not card capacity

    def check(self, offset: int, nbytes: int) -> None:
        if self.freed:
            raise DeviceError(f"buffer at {self.address:#x} in {self.bank} was freed")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise DeviceError(
                f"copy of {nbytes} bytes at offset {offset} outside a {self.nbytes}-byte buffer in {self.bank}"
            )


class Device:
    """Base of every backend. Subclasses implement the `_`-prefixed primitives."""

    backend = "abstract"
    # True where the card's DMA runs beside the host and `write`/`read` may be called from an upload
    # and a download thread at once (pipeline.LaunchPipeline's `overlap`): the alveo backend.
    overlap_dma = False

    def __init__(self, manifest: dict[str, Any], *, timeout_s: float = 10.0) -> None:
        self.manifest = manifest
        self.spec = KernelSpec.from_dict(dict(manifest["spec"]))
        self.timeout_s = float(timeout_s)
        rm = manifest["register_map"]
        self.ctrl_offset = int(rm["control"]["CTRL"])
        bits = rm["ctrl_bits"]
        self.ap_start = 1 << int(bits["ap_start"])
        self.ap_done = 1 << int(bits["ap_done"])
        self.ap_idle = 1 << int(bits["ap_idle"])
        self.cus = int(self.spec.compute_units)
        self.stripes = StripeCounts(**{k: int(v) for k, v in rm["stripes"].items()})
        self.closed = False
        self._lock = threading.RLock()

    # ---- the interface ------------------------------------------------------------------
    def allocate(self, nbytes: int, bank: str) -> Buffer:
        """A buffer of `nbytes` in memory bank `bank` (a v++ sp= name such as "HBM[0:9]")."""
        self._check_open()
        if nbytes <= 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        return self._allocate(int(nbytes), bank)

    def free(self, buf: Buffer) -> None:
        if not buf.freed and not self.closed:
            self._free(buf)
        buf.freed = True

    def write(self, buf: Buffer, array: np.ndarray, offset: int = 0) -> None:
        """Copy a contiguous host array into `buf` at byte `offset` (host -> card sync)."""
        self._check_open()
        data = np.ascontiguousarray(array)
        buf.check(offset, data.nbytes)
        self._write(buf, data.reshape(-1).view(np.uint8), offset)

    def read(self, buf: Buffer, out: np.ndarray, offset: int = 0) -> np.ndarray:
        """Fill the contiguous host array `out` from `buf` at byte `offset` (card -> host sync)."""
        self._check_open()
        if not out.flags.c_contiguous:
            raise DeviceError("read: the destination array must be contiguous")
        buf.check(offset, out.nbytes)
        self._read(buf, out.reshape(-1).view(np.uint8), offset)
        return out

    def host_view(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray | None:
        """The bytes [offset, offset + nbytes) of `buf` as a read-only host array, without a copy,
        when the backend's card memory is host memory (the software cards); None when reading them
        takes a transfer (a real card: use `read`)."""
        return None

    def import_host(self, array: np.ndarray, bank: str, stripes: int = 1, index: int = 0) -> Buffer | None:
        """`array`'s own memory as a buffer of bank `bank`, without a copy, when the backend's card
        memory is host memory (the software cards): a kernel pointed at it reads and writes the
        array in place, which is what a card's DMA copy would achieve. With `stripes` > 1 the
        buffer is stripe `index` of the array (its 64-byte beats index, index + stripes, ...: the
        array must be whole beats), for a port the kernel only reads. None when the array cannot
        be lent (a real card, or memory that is not contiguous and 64-byte aligned, the kernel's
        beat): copy with `write`/`read` instead. `free` hands it back; nothing is ever freed in
        `array`, which must outlive the buffer."""
        return None

    def write_reg(self, offset: int, value: int, cu: int = 0) -> None:
        """Write a register of compute unit `cu` (each CU has its own register file, as in XRT)."""
        self._check_open()
        self._write_reg(int(offset), int(value) & 0xFFFFFFFF, self._cu(cu))

    def write_regs(self, values: dict[int, int], cu: int = 0) -> None:
        """Write several registers of `cu` in order (a kernel's arguments): `write_reg` for each,
        with the checks done once."""
        self._check_open()
        cu = self._cu(cu)
        for offset, value in values.items():
            self._write_reg(int(offset), int(value) & 0xFFFFFFFF, cu)

    def read_reg(self, offset: int, cu: int = 0) -> int:
        self._check_open()
        return int(self._read_reg(int(offset), self._cu(cu))) & 0xFFFFFFFF

    def start(self, cu: int = 0) -> None:
        """Set ap_start of `cu` (the kernel's arguments are already in its registers)."""
        self.write_reg(self.ctrl_offset, self.ap_start, cu)

    def wait(self, timeout_s: float | None = None, cu: int = 0) -> None:
        """Return when `cu` raises ap_done; KernelTimeout after `timeout_s` seconds."""
        self._check_open()
        self._wait_done(self.timeout_s if timeout_s is None else float(timeout_s), self._cu(cu))

    def _cu(self, cu: int) -> int:
        if isinstance(cu, bool) or not isinstance(cu, int) or not 0 <= cu < self.cus:
            raise DeviceError(f"compute unit {cu!r}: this kernel has {self.cus} (0..{self.cus - 1})")
        return cu

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what a backend provides (polling wait is shared) --------------------------------
    def _wait_done(self, timeout_s: float, cu: int = 0) -> None:
        # ap_done is clear-on-read: one read that sees it consumes it, as on the card.
        deadline = time.monotonic() + timeout_s
        pause = 0.0
        while True:
            if self.read_reg(self.ctrl_offset, cu) & self.ap_done:
                return
            if time.monotonic() >= deadline:
                raise KernelTimeout(
                    f"{self.backend}: kernel did not finish within {timeout_s:g} s "
                    "(ap_done never set); card memory is still readable"
                )
            time.sleep(pause)
            pause = min(1e-3, pause * 2 + 2e-5)

    def check_open(self) -> None:
        """Raise DeviceClosed once the device is closed (what every call of the interface checks first)."""
        self._check_open()

    def _check_open(self) -> None:
        if self.closed:
            raise DeviceClosed(f"{self.backend} device is closed; open a new one with open_device()")

    def _allocate(self, nbytes: int, bank: str) -> Buffer:
        raise NotImplementedError

    def _free(self, buf: Buffer) -> None:
        pass

    def _write(self, buf: Buffer, data: np.ndarray, offset: int) -> None:
        raise NotImplementedError

    def _read(self, buf: Buffer, out: np.ndarray, offset: int) -> None:
        raise NotImplementedError

    def _write_reg(self, offset: int, value: int, cu: int = 0) -> None:
        raise NotImplementedError

    def _read_reg(self, offset: int, cu: int = 0) -> int:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    # ---- facts from the manifest ----------------------------------------------------------
    def banks(self, cu: int = 0) -> dict[str, str]:
        """Port name -> memory bank of compute unit `cu` (the manifest's banks).

        Flows without v++ bank names (V80) get one made-up bank per channel, so the simulated
        cards still keep every stripe in a bank of its own.
        """
        for entry in self.manifest["memory_plan"]:
            if entry["cu"] == cu:
                return {p: (s["bank"] or f"channel_{s['channel']}") for s in entry["stripes"] for p in s["ports"]}
        raise DeviceError(f"manifest has no compute unit {cu}")

    def bank_capacity(self) -> int:
        """Bytes one memory channel (one bank of the plan) holds."""
        return int(self.manifest["sizing"]["channel_capacity_bytes"])


class BumpAllocator:
    """Address allocation for the simulated cards: each bank a region, 4 KiB aligned buffers."""

    def __init__(self, bases: dict[str, int], capacities: dict[str, int]) -> None:
        self.bases = bases
        self.capacities = capacities
        self.next = dict(bases)
        self.live = dict.fromkeys(bases, 0)

    def release(self, bank: str) -> None:
        # Space comes back only when a bank is empty; shards allocate once, so this is enough.
        self.live[bank] -= 1
        if self.live[bank] == 0:
            self.next[bank] = self.bases[bank]

    def take(self, nbytes: int, bank: str) -> int:
        if bank not in self.bases:
            raise DeviceError(f"no memory bank {bank!r}; the manifest has {', '.join(sorted(self.bases))}")
        addr = self.next[bank]
        end = addr + -(-nbytes // ALIGN) * ALIGN
        if end - self.bases[bank] > self.capacities[bank]:
            raise DeviceError(
                f"bank {bank}: out of memory ({end - self.bases[bank]} bytes needed, "
                f"{self.capacities[bank]} available)"
            )
        self.next[bank] = end
        self.live[bank] += 1
        return addr
