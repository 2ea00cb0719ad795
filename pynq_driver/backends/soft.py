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

from hls import layout
from hls.golden import SCALAR_NAMES, Scalars, adam_update, to_bf16_bits
from hls.ports import port_array, read_port, write_port
from hls.sizing import StripeCounts
from hls.spec import BEAT_BYTES, STORAGE_DTYPES
from pynq_driver.device import ALIGN, Buffer, BumpAllocator, Device
from pynq_driver.errors import DeviceError, KernelTimeout

# execute(ports, n, scalar register bits by name): in place on the stripe buffers each m_axi
# port points at (uint8 views; a state stripe's _rd and _wr ports usually see the same bytes).
Executor = Callable[[dict[str, np.ndarray], int, dict[str, int]], None]

# Fault injection for tests of the driver's error paths (a kernel that never finishes).
FAULTS = ("hang",)
# Imported host memory (`import_host`) gets addresses far above the banks (64 GiB apart from 1 << 36).
_IMPORT_BASE = 1 << 56


def bank_layout(dev: Device) -> tuple[dict[str, int], dict[str, int]]:
    """Base address and capacity of every bank of every CU: banks 64 GiB apart, as on a real card."""
    names = sorted({b for cu in range(dev.cus) for b in dev.banks(cu).values()})
    bases = {b: (i + 1) << 36 for i, b in enumerate(names)}
    return bases, dict.fromkeys(bases, dev.bank_capacity())


def _port_geometry(dev: Device, port: str) -> tuple[int, int, int]:
    """(element bytes, stripes of its array, its stripe index) of pointer argument `port`: a run over
    n elements touches `layout.stripe_bytes(n, *geometry)` bytes through it (whole beats)."""
    array, index = port_array(port)
    elem = {"grad": dev.spec.grad_bytes, "out": dev.spec.out_bytes}.get(array, 4)
    return elem, dev.stripes.of(array), index


class _CuState:
    """One compute unit of the soft card: its register file and its run."""

    def __init__(self) -> None:
        self.regs: dict[int, int] = {}
        self.finished = threading.Event()
        self.finished.set()
        self.running = False
        self.done_bit = False
        self.error: BaseException | None = None


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
        self._cu_state = [_CuState() for _ in range(self.cus)]
        self._args = {a["name"]: a for a in manifest["register_map"]["args"]}
        self._ports = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
        # What a launch needs of the manifest, looked up once: (element bytes, stripes, stripe index)
        # and the bank of every port of every CU, and the offsets of n and the scalars.
        self._port_geometry = {p: _port_geometry(self, p) for p in self._ports}
        self._port_offsets = {p: int(self._args[p]["offset"]) for p in self._ports}
        self._port_bytes: dict[int, dict[str, int]] = {}  # n -> bytes each port reaches
        self._port_banks = [self.banks(cu) for cu in range(self.cus)]
        self._port_written = {a["name"]: a.get("direction") != "in"
                              for a in manifest["register_map"]["args"] if a["kind"] == "pointer"}
        self._n_offset = int(self._args["n"]["offset"])
        self._scalar_offsets = {a: int(self._args[a]["offset"]) for a in SCALAR_NAMES if a in self._args}
        # One worker per CU: the CUs of a card run concurrently.
        self._pool = ThreadPoolExecutor(self.cus, thread_name_prefix=f"{backend}-kernel")
        self.faults: set[str] = set()
        self._imports = 0  # live imported buffers; their addresses restart at _IMPORT_BASE when none is
        self._next_import = _IMPORT_BASE

    # ---- memory --------------------------------------------------------------------------
    def _allocate(self, nbytes: int, bank: str) -> Buffer:
        with self._lock:  # the address list is shared with imports and launches on other threads
            addr = self._alloc.take(nbytes, bank)
            buf = Buffer(addr, nbytes, bank, handle=np.zeros(nbytes, np.uint8))
            i = bisect.bisect(self._addrs, addr)
            self._addrs.insert(i, addr)
            self._bufs.insert(i, buf)
        return buf

    def _free(self, buf: Buffer) -> None:
        with self._lock:
            i = self._addrs.index(buf.address)
            del self._addrs[i], self._bufs[i]
            buf.handle = None
            if buf.imported:
                self._imports -= 1
                if not self._imports:
                    self._next_import = _IMPORT_BASE
                return
            self._alloc.release(buf.bank)

    def import_host(self, array: np.ndarray, bank: str, stripes: int = 1, index: int = 0) -> Buffer | None:
        """Card memory is host memory here: `array` itself becomes the buffer (see Device.import_host),
        at an address of its own above every bank's range. A stripe of it (`stripes` > 1) is a
        (beats, 64) view of its rows index, index + stripes, ...: the kernel's ports reach it beat
        by beat (both executors take such rows on a port they only read)."""
        self._check_open()
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
            return None
        if not 0 <= index < stripes:
            raise ValueError(f"import_host: stripe {index} of {stripes}")
        raw = array.reshape(-1).view(np.uint8)
        if not raw.nbytes or raw.ctypes.data % BEAT_BYTES:
            return None
        handle = raw
        if stripes > 1:
            if raw.nbytes % BEAT_BYTES or raw.nbytes // BEAT_BYTES <= index:
                return None
            handle = raw.reshape(-1, BEAT_BYTES)[index::stripes]
        nbytes = handle.size
        with self._lock:
            addr = self._next_import
            self._next_import += -(-nbytes // ALIGN) * ALIGN + ALIGN  # a page apart: an overrun hits no buffer
            buf = Buffer(addr, nbytes, bank, handle=handle, imported=True)
            i = bisect.bisect(self._addrs, addr)
            self._addrs.insert(i, addr)
            self._bufs.insert(i, buf)
            self._imports += 1
        return buf

    @staticmethod
    def _span(buf: Buffer, offset: int, nbytes: int) -> np.ndarray:
        """The buffer's bytes [offset, offset + nbytes): flat, or rows of 64 for a lent stripe."""
        if buf.handle.ndim == 1:
            return buf.handle[offset : offset + nbytes]
        if offset % BEAT_BYTES or nbytes % BEAT_BYTES:
            raise DeviceError(f"a lent stripe is reached in whole 64-byte beats, not {nbytes} bytes at {offset}")
        return buf.handle[offset // BEAT_BYTES : (offset + nbytes) // BEAT_BYTES]

    def _write(self, buf: Buffer, data: np.ndarray, offset: int) -> None:
        span = self._span(buf, offset, data.nbytes)
        span[...] = data.reshape(-1).view(np.uint8).reshape(span.shape)

    def _read(self, buf: Buffer, out: np.ndarray, offset: int) -> None:
        span = self._span(buf, offset, out.nbytes)
        out.reshape(-1).view(np.uint8).reshape(span.shape)[...] = span

    def host_view(self, buf: Buffer, offset: int, nbytes: int) -> np.ndarray | None:
        """Card memory is host memory here: the buffer's bytes themselves (read-only view; None for
        a lent stripe, whose beats are not back to back)."""
        self._check_open()
        buf.check(offset, nbytes)
        if buf.handle.ndim != 1:
            return None
        view = buf.handle[offset : offset + nbytes]
        view = view.view()
        view.flags.writeable = False
        return view

    def _view(self, cu: _CuState, cu_index: int, name: str, nbytes: int) -> np.ndarray:
        """The bytes pointer argument `name` reaches: nbytes at the address in its registers."""
        off = self._port_offsets[name]
        addr = cu.regs.get(off, 0) | (cu.regs.get(off + 4, 0) << 32)
        i = bisect.bisect(self._addrs, addr) - 1
        if i < 0 or addr + nbytes > self._addrs[i] + self._bufs[i].nbytes:
            raise DeviceError(
                f"{self.backend}: CU {cu_index} argument {name} = {addr:#x} with {nbytes} bytes is outside "
                "every allocated buffer (an AXI access to unmapped card memory)"
            )
        buf = self._bufs[i]
        expected = self._port_banks[cu_index][name]
        if buf.bank != expected:
            # On a card a port reaches only the channel v++ connected it to.
            raise DeviceError(f"{self.backend}: CU {cu_index} argument {name} points into bank {buf.bank}; "
                              f"the port is connected to {expected}")
        if buf.handle.ndim != 1 and self._port_written[name]:
            raise DeviceError(f"{self.backend}: CU {cu_index} argument {name} points at a lent stripe, whose beats "
                              "are not back to back; the kernel writes through this port")
        return self._span(buf, addr - self._addrs[i], nbytes)

    # ---- registers and control -----------------------------------------------------------
    def _write_reg(self, offset: int, value: int, cu: int = 0) -> None:
        if offset != self.ctrl_offset:
            self._cu_state[cu].regs[offset] = value
            return
        if value & self.ap_start:
            self._launch(cu)

    def _read_reg(self, offset: int, cu: int = 0) -> int:
        st = self._cu_state[cu]
        if offset != self.ctrl_offset:
            return st.regs.get(offset, 0)
        value = 0 if st.running else self.ap_idle
        if st.done_bit:
            value |= self.ap_done
            st.done_bit = False  # clear on read, as ap_ctrl_hs
        return value

    def _launch(self, cu: int) -> None:
        st = self._cu_state[cu]
        if st.running:
            raise DeviceError(f"{self.backend}: ap_start of CU {cu} while it is still running")
        st.running = True
        st.done_bit = False
        st.error = None
        st.finished.clear()
        if "hang" in self.faults:
            return  # the injected fault: ap_done never comes
        n = st.regs.get(self._n_offset, 0)
        scalars = {a: st.regs.get(off, 0) for a, off in self._scalar_offsets.items()}
        try:
            sizes = self._port_bytes.get(n)
            if sizes is None:  # the same few chunk sizes come back every step
                sizes = {p: layout.stripe_bytes(n, elem, stripes, k) for p, (elem, stripes, k)
                         in self._port_geometry.items()}
                if len(self._port_bytes) < 64:
                    self._port_bytes[n] = sizes
            with self._lock:
                views = {p: self._view(st, cu, p, nbytes) for p, nbytes in sizes.items()}
        except DeviceError as exc:
            self._finish(st, exc)
            return
        self._pool.submit(self._run, st, views, n, scalars)

    def _run(self, st: _CuState, views: dict[str, np.ndarray], n: int, scalars: dict[str, int]) -> None:
        try:
            self._executor(views, n, scalars)
        except BaseException as exc:  # reported by wait(), like a card error status
            self._finish(st, exc)
            return
        self._finish(st, None)

    def _finish(self, st: _CuState, error: BaseException | None) -> None:
        st.error = error
        st.running = False
        st.done_bit = True
        st.finished.set()

    def _wait_done(self, timeout_s: float, cu: int = 0) -> None:
        st = self._cu_state[cu]
        if not st.finished.wait(timeout_s):
            raise KernelTimeout(
                f"{self.backend}: kernel did not finish within {timeout_s:g} s (ap_done never set); "
                "card memory is still readable"
            )
        if not self.read_reg(self.ctrl_offset, cu) & self.ap_done:
            raise DeviceError(f"{self.backend}: wait() without a kernel run (ap_done not set)")
        if st.error is not None:
            err, st.error = st.error, None
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


def golden_executor(spec: Any, stripes: StripeCounts) -> Executor:
    """The golden model behind the card's ports: gather the stripes, update, scatter back."""
    gnp = STORAGE_DTYPES[spec.grad_dtype]

    def gather(ports: dict[str, np.ndarray], array: str, n: int, dtype: Any) -> np.ndarray:
        parts = [ports[read_port(array, k)] for k in range(stripes.of(array))]
        return layout.join(parts, n, dtype)

    def scatter(ports: dict[str, np.ndarray], array: str, data: np.ndarray) -> None:
        for k, part in enumerate(layout.split(data, stripes.of(array))):
            dest = ports[write_port(array, k)]
            dest[: part.size] = part[: dest.size]

    def run(ports: dict[str, np.ndarray], n: int, scalars: dict[str, int]) -> None:
        if n == 0:
            return
        s = _scalars_from_bits(scalars, spec.optimizer)
        grad = gather(ports, "grad", n, gnp)
        p, m, v = (gather(ports, a, n, np.float32) for a in ("p", "m", "v"))
        out = adam_update(p, m, v, grad, s, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                          out_dtype=spec.out_dtype)
        # Whole beats go back, as the kernel writes them: lanes past n keep what was read, and
        # out carries p there (bf16: a last out beat with one fp32 beat of p has a zero upper half).
        nfull = layout.beats(n, 4) * 16
        full = {}
        for a, arr in (("p", p), ("m", m), ("v", v)):
            full[a] = gather(ports, a, nfull, np.float32)
            full[a][:n] = arr
            scatter(ports, a, full[a])
        if spec.out_dtype == "bf16":
            full_out = np.zeros(layout.beats(n, 2) * 32, np.uint16)
            full_out[:nfull] = to_bf16_bits(full["p"])
        else:
            full_out = full["p"].copy()
        full_out[:n] = out
        scatter(ports, "out", full_out)

    return run


def csim_executor(project_dir: Path, threads: int | None = None, headers: str = "amd") -> Executor:
    """The generated HLS C++ compiled by hls.csim.kernel into a shared library (ctypes, GIL released).

    `headers`: "amd" (AMD's ap_int.h/hls_stream.h, the default) or "own" (our stand-ins, about 1.5x
    faster here: the stream model is lighter); both bit-exact with the golden model.
    """
    from hls.csim import kernel as csim  # loaded with the csim backend only (it compiles the kernel)

    kernel = csim.CsimKernel(project_dir, threads=threads, headers=headers)

    def run(ports: dict[str, np.ndarray], n: int, scalars: dict[str, int]) -> None:
        kernel.run_ports(ports, n, scalars)

    return run
