"""Software cards: the `golden` (numpy) and `csim` (compiled HLS C++) backends.

They behave like the card on purpose: buffers live at bus addresses in named banks, the kernel's
arguments arrive as register writes at the manifest's offsets, and ap_start makes the "card"
decode its own register file, find the buffers the pointers point into and run the update on a
worker thread; ap_done (clear on read) reports the end. So the driver above the device
interface runs the very code it runs on a card, and the double buffering overlaps for real
(numpy and ctypes release the GIL while they compute).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from hls.golden import SCALAR_NAMES, Scalars, adam_update
from pynq_driver.device import Buffer, BumpAllocator, Device
from pynq_driver.errors import DeviceError, KernelTimeout

GRAD_NP = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}
OUT_NP = {"fp32": np.float32, "bf16": np.uint16}

# execute(grad, p, m, v, out, n, scalar register bits by name): in place on the views.
Executor = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, dict[str, int]], None]

# Fault injection for tests of the driver's error paths (a kernel that never finishes).
FAULTS = ("hang",)


def bank_layout(dev: Device) -> tuple[dict[str, int], dict[str, int]]:
    """Base address and capacity of each bank of CU 0: banks 64 GiB apart, as on a real card."""
    banks = dev.banks()
    caps: dict[str, int] = {}
    for args, cap in dev.bank_capacity():
        for a in args:
            caps[banks[a]] = cap
    bases = {b: (i + 1) << 36 for i, b in enumerate(sorted(set(banks.values())))}
    return bases, {b: caps.get(b, 1 << 30) for b in bases}


class SoftDevice(Device):
    """A card simulated in host memory; `executor` is the kernel's arithmetic."""

    def __init__(self, manifest: dict[str, Any], executor: Executor, *, backend: str, timeout_s: float) -> None:
        super().__init__(manifest, timeout_s=timeout_s)
        self.backend = backend
        self._executor = executor
        bases, caps = bank_layout(self)
        self._alloc = BumpAllocator(bases, caps)
        self._addrs: list[int] = []
        self._bufs: list[Buffer] = []
        self._regs: dict[int, int] = {}
        self._args = {a["name"]: a for a in manifest["register_map"]["args"]}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"{backend}-kernel")
        self._finished = threading.Event()
        self._finished.set()
        self._running = False
        self._done_bit = False
        self._error: BaseException | None = None
        self.faults: set[str] = set()

    # ---- memory --------------------------------------------------------------------------
    def _allocate(self, nbytes: int, bank: str) -> Buffer:
        addr = self._alloc.take(nbytes, bank)
        buf = Buffer(addr, nbytes, bank, handle=np.zeros(nbytes, np.uint8))
        i = bisect.bisect(self._addrs, addr)
        self._addrs.insert(i, addr)
        self._bufs.insert(i, buf)
        return buf

    def _free(self, buf: Buffer) -> None:
        i = self._addrs.index(buf.address)
        del self._addrs[i], self._bufs[i]
        self._alloc.release(buf.bank)
        buf.handle = None

    def _write(self, buf: Buffer, data: np.ndarray, offset: int) -> None:
        buf.handle[offset : offset + data.nbytes] = data

    def _read(self, buf: Buffer, out: np.ndarray, offset: int) -> None:
        out[...] = buf.handle[offset : offset + out.nbytes]

    def _view(self, name: str, n: int, dtype: type) -> np.ndarray:
        """The kernel's view of pointer argument `name`: n elements at the address in its registers."""
        off = int(self._args[name]["offset"])
        addr = self._regs.get(off, 0) | (self._regs.get(off + 4, 0) << 32)
        i = bisect.bisect(self._addrs, addr) - 1
        nbytes = n * np.dtype(dtype).itemsize
        if i < 0 or addr + nbytes > self._addrs[i] + self._bufs[i].nbytes:
            raise DeviceError(
                f"{self.backend}: kernel argument {name} = {addr:#x} with {nbytes} bytes is outside "
                "every allocated buffer (an AXI access to unmapped card memory)"
            )
        start = addr - self._addrs[i]
        return self._bufs[i].handle[start : start + nbytes].view(dtype)

    # ---- registers and control -----------------------------------------------------------
    def _write_reg(self, offset: int, value: int) -> None:
        if offset != self.ctrl_offset:
            self._regs[offset] = value
            return
        if value & self.ap_start:
            self._launch()

    def _read_reg(self, offset: int) -> int:
        if offset != self.ctrl_offset:
            return self._regs.get(offset, 0)
        value = 0 if self._running else self.ap_idle
        if self._done_bit:
            value |= self.ap_done
            self._done_bit = False  # clear on read, as ap_ctrl_hs
        return value

    def _launch(self) -> None:
        if self._running:
            raise DeviceError(f"{self.backend}: ap_start while the kernel is still running")
        self._running = True
        self._done_bit = False
        self._error = None
        self._finished.clear()
        if "hang" in self.faults:
            return  # the injected fault: ap_done never comes
        spec = self.spec
        n = self._regs.get(int(self._args["n"]["offset"]), 0)
        scalars = {a: self._regs.get(int(self._args[a]["offset"]), 0) for a in SCALAR_NAMES if a in self._args}
        try:
            views = (
                self._view("grad", n, GRAD_NP[spec.grad_dtype]),
                self._view("p", n, np.float32),
                self._view("m", n, np.float32),
                self._view("v", n, np.float32),
                self._view("out", n, OUT_NP[spec.out_dtype]),
            )
        except DeviceError as exc:
            self._finish(exc)
            return
        self._pool.submit(self._run, views, n, scalars)

    def _run(self, views: tuple[np.ndarray, ...], n: int, scalars: dict[str, int]) -> None:
        try:
            self._executor(*views, n, scalars)
        except BaseException as exc:  # reported by wait(), like a card error status
            self._finish(exc)
            return
        self._finish(None)

    def _finish(self, error: BaseException | None) -> None:
        self._error = error
        self._running = False
        self._done_bit = True
        self._finished.set()

    def _wait_done(self, timeout_s: float) -> None:
        if not self._finished.wait(timeout_s):
            raise KernelTimeout(
                f"{self.backend}: kernel did not finish within {timeout_s:g} s (ap_done never set); "
                "card memory is still readable"
            )
        if not self.read_reg(self.ctrl_offset) & self.ap_done:
            raise DeviceError(f"{self.backend}: wait() without a kernel run (ap_done not set)")
        if self._error is not None:
            err, self._error = self._error, None
            raise DeviceError(f"{self.backend}: kernel run failed: {err}") from err

    def _close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for buf in self._bufs:
            buf.handle = None
            buf.freed = True
        self._bufs.clear()
        self._addrs.clear()


def _scalars_from_bits(bits: dict[str, int], optimizer: str) -> Scalars:
    # The kernel of one optimizer has no register for the other's term; its value is neutral.
    def f(name: str, default: float) -> np.float32:
        if name not in bits:
            return np.float32(default)
        return np.array(bits[name], np.uint32).view(np.float32)[()]

    return Scalars(
        step_size=f("step_size", 0), rbc2=f("rbc2", 1), decay=f("decay", 1), l2=f("l2", 0), b1=f("b1", 0),
        omb1=f("omb1", 0), b2=f("b2", 0), omb2=f("omb2", 0), eps=f("eps", 0), gs=f("gs", 1),
    )


def golden_executor(spec: Any) -> Executor:
    def run(grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray, n: int,
            scalars: dict[str, int]) -> None:
        s = _scalars_from_bits(scalars, spec.optimizer)
        out[...] = adam_update(p, m, v, grad, s, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                               out_dtype=spec.out_dtype)

    return run


def csim_executor(project_dir: Path, threads: int | None = None) -> Executor:
    """The generated HLS C++ compiled by hls.csim into a shared library (ctypes, GIL released)."""
    try:
        from hls import csim
    except ImportError as exc:
        raise DeviceError("the csim backend needs hls/csim.py (C simulation of the HLS kernel)") from exc
    kernel = csim.CsimKernel(project_dir, threads=threads)

    def run(grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray, n: int,
            scalars: dict[str, int]) -> None:
        kernel.run(grad, p, m, v, out, n, scalars)

    return run
