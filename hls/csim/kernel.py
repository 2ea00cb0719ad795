"""C simulation, running: the compiled kernel library (hls.csim.compile) called from numpy.

A host harness (`hls/csim/harness/`) calls the kernel chunk by chunk on the caller's buffers, in
place, on a pool of threads. Like the card, it takes one buffer per m_axi port: each array's
stripes (design.md section 3b, hls/layout.py). This is the `csim` backend of the driver and the
engine of the demo; `hls.csim.check` compares it with the golden model bit for bit.

Speed: C simulation executes the DATAFLOW region as written, so every 512-bit beat goes through
one FIFO per m_axi port (8 for the U55C AdamW kernel: grad, p/m/v read, p/m/v write, out), each a
std::deque in AMD's hls::stream, and the processes run one after another, so memory traffic is
not overlapped with the arithmetic. Measured on one thread (CPU time per 16-element beat, 4M
elements, EPYC): about 45 ns, of which about 5 ns is the arithmetic, about 20 ns the FIFO
writes and reads and the per-port copies (in cache), and the rest waiting on DRAM; the same
update_one in a plain loop over the buffers takes about 19 ns. What made it so (from about
93 ns): compute reading the stripe FIFOs itself (no merge process), hls::vector as one SIMD word
(hls/csim/include/hls_vector.h), 4 KiB deque nodes (DEQUE_FLAGS) and 8192-element chunks.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hls import layout
from hls.csim.compile import CsimError, compile_kernel, kernel_source, load_library, project_dir_checked
from hls.errors import UserError
from hls.golden import scalar_names
from hls.manifest import load_manifest, spec_from_manifest
from hls.ports import PARAM_STREAM, is_written_port, port_names, read_port, write_port
from hls.sizing import StripeCounts
from hls.spec import BEAT_BYTES, STORAGE_DTYPES, KernelSpec

# 3: per-port beat, stripe and flag words; aligned scratch copies; a shared worker pool; stream
# warnings of the simulation model counted (any HLS headers). 4: buffer lengths, checked in C too.
# 5: a pitch word per port (a read port's beats may lie a multiple of 64 bytes apart).
ABI_VERSION = 6
# Elements per kernel call (rounded to the stripe alignment). C simulation runs the dataflow
# processes one after another, so each call's FIFOs hold the whole chunk: for 8192 fp32 elements
# 128 KiB of g, p, m, v beats in and 128 KiB of p, m, v, out beats out, within a core's L2; and
# constructing the call's streams (a name string and a deque map each, with AMD's hls_stream.h)
# is paid once per 8192 elements. On one thread (4M elements, CPU time): 1024 -> 8192 took the
# U55C AdamW kernel from about 60 to 44 ns per 16-element beat with AMD's headers.
DEFAULT_CHUNK = 8192
FLAG_PREFETCH = 1  # port flag of the harness ABI
MAX_ELEMENTS = (1 << 32) - 33  # the `n` register is 32 bits; the harness keeps a 32-element margin
_F32 = STORAGE_DTYPES["fp32"]


@dataclass(frozen=True)
class PortInfo:
    """One m_axi port of the kernel: which stripe of which array it reaches, and how."""

    name: str  # register-map name: grad0, p1_rd, p1_wr, out0, ...
    array: str  # grad, p, m, v, out
    index: int  # stripe index
    stripes: int  # stripes of its array
    elem_bytes: int
    written: bool  # the kernel writes through it (state _wr ports and out)

    def nbytes(self, n: int) -> int:
        """Bytes this port's buffer must hold for a shard of n elements: its stripe in whole beats."""
        return layout.stripe_bytes(n, self.elem_bytes, self.stripes, self.index)


def _stripe_counts(manifest: dict) -> StripeCounts:
    s = manifest["register_map"]["stripes"]
    return StripeCounts(grad=int(s["grad"]), state=int(s["state"]), out=int(s["out"]))


def _beat_pitch(arr: np.ndarray) -> int | None:
    """Bytes from one 64-byte beat of `arr` to the next: 64 for a C-contiguous array, the row
    stride of uint8 rows of one beat each (a positive multiple of 64), else None."""
    if arr.flags.c_contiguous:
        return BEAT_BYTES
    if arr.ndim == 2 and arr.dtype == np.uint8 and arr.shape[1] == BEAT_BYTES and arr.strides[1] == 1:
        pitch = arr.strides[0]
        if pitch >= BEAT_BYTES and pitch % BEAT_BYTES == 0:
            return int(pitch)
    return None


def aligned_zeros(nbytes: int, align: int = BEAT_BYTES) -> np.ndarray:
    """A zeroed uint8 array of nbytes whose data starts on an `align`-byte boundary."""
    raw = np.zeros(int(nbytes) + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + int(nbytes)]


def _prefetched(port: PortInfo) -> bool:
    """Ports whose next chunk the harness prefetches while the kernel runs this one: those touched by
    one loop alone (gradient and output stripes); prefetching p, m, v too measured no faster."""
    return port.array in ("grad", "out")


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), at most 64."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 64))


class CsimKernel:
    """The generated kernel as a callable, bit-exact to the golden model.

    `headers`: "amd" (AMD's ap_int.h and hls_stream.h from hls4ml, the default) or "own" (our
    stand-ins); the result is the same bit for bit. `threads` (default: the cores this process
    may use) caps the worker threads one call uses; the library's workers are shared by calls
    made at the same time (the driver runs a card's compute units concurrently), so together
    they use at most the largest `threads` asked for. Buffers need no particular alignment: a
    port whose buffer is not 64-byte aligned (as AMD's hls::vector beat requires) goes through
    an aligned copy, chunk by chunk; `aligned_zeros` gives buffers that need none.

    Two ways to run one optimizer step (both in place, GIL released, chunked over `threads`):

    `run_ports(buffers, n, scalars)`: what the card does, for a device backend. `buffers` maps
    every port name of `self.ports` (the pointer arguments of the register map, in order:
    grad0.., p0_rd, p0_wr, p1_rd, .., m.., v.., out0..) to a numpy array holding that port's
    stripe buffer (any dtype, e.g. a uint8 view; C-contiguous; at least `port_bytes(n)[port]`
    bytes, i.e. the stripe in whole 64-byte beats, hls/layout.py). Point a state stripe's `_rd`
    and `_wr` ports at the same buffer, as the host does on the card; p, m, v stripes are updated
    in place and the out stripes written. A stream-source kernel (spec.grad_source == "stream")
    has no grad ports; instead `buffers["grad"]` holds the gradient of the step in array order
    (at least n elements of the gradient dtype), which the harness sends as the AXI4-Stream.
    A kernel that also sends its updated parameters on an AXI4-Stream (spec.out_sink
    "memory+stream") takes `buffers["param"]` too: a writeable array of at least n elements of the
    output dtype's bytes, where the harness lands that stream in array order (each kernel call of
    a chunk is one packet; its beat count, TKEEP, TLAST and zero padding are checked, and a wrong
    one raises CsimError like a stream underflow).
    `scalars` is the register dict of `Scalars.registers(optimizer)` or the uint32 array of
    `scalar_bits(...)`. Lanes past n in the last beat of every stripe keep their old state.
    Buffers may be larger than needed; for a chunk of a shard that starts at element c (a
    multiple of `align`), pass views from `port_offsets(c)[port]` bytes on. A port the kernel
    only reads (p0_rd, grad0, ...) may instead get a uint8 array of shape (beats, 64) whose rows
    lie a multiple of 64 bytes apart, e.g. `rows[k::stripes]` of an unstriped array's 64-byte
    rows: stripe k of it, without a copy (each chunk's beats are gathered into the harness's
    aligned scratch).

    `run(grad, p, m, v, out, n, scalars)`: the whole-array convenience (tests, bench, demo):
    stripes the first n elements with hls.layout.split, calls run_ports, and joins p, m, v and
    out back in place.
    """

    def __init__(self, project_dir: Path, build_dir: Path | None = None, threads: int | None = None,
                 headers: str = "amd") -> None:
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise UserError(f"threads: {threads!r} must be a positive integer")
        self.project_dir = Path(project_dir)
        self.headers = headers
        manifest = load_manifest(project_dir_checked(self.project_dir))
        self.spec: KernelSpec = spec_from_manifest(manifest)
        kernel_source(self.project_dir, self.spec)
        self.stripes = _stripe_counts(manifest)
        self.ports: list[str] = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
        if self.ports != self.stripes.ports():
            raise CsimError(f"{self.project_dir}: manifest ports {self.ports} do not follow its stripes "
                            f"{self.stripes}; regenerate the project")
        spec = self.spec
        sizes = {"grad": spec.grad_bytes, "out": spec.out_bytes}
        self.port_info: dict[str, PortInfo] = {}
        for array, index in self.stripes.stripes():
            for port in port_names(array, index):
                self.port_info[port] = PortInfo(port, array, index, self.stripes.of(array), sizes.get(array, 4),
                                                is_written_port(port))
        self.align = self.stripes.beat_align()  # chunk starts: every stripe of every array at a round start
        self.library = compile_kernel(self.project_dir, build_dir, headers, spec=self.spec, manifest=manifest)
        self.threads = threads or default_threads()
        self.chunk = DEFAULT_CHUNK
        self._names = scalar_names(spec.optimizer)
        self._lib: ctypes.CDLL | None = load_library(self.library)
        ptr = ctypes.c_void_p
        u64 = ctypes.c_ulonglong
        abi = self._lib.optimusnic_csim_abi()
        if abi != ABI_VERSION:
            raise CsimError(f"{self.library}: harness ABI {abi}, expected {ABI_VERSION}; delete build/csim and retry")
        self._run = self._lib.optimusnic_csim_run
        self._run.argtypes = [ptr, ptr, ptr, u64, ptr, u64, u64, ptr, u64, u64, u64, ptr, ctypes.c_int, u64, u64]
        self._run.restype = ctypes.c_long
        nports = self._lib.optimusnic_csim_ports
        nports.restype = u64
        if nports() != len(self.ports):
            raise CsimError(f"{self.library}: the kernel has {nports()} pointer arguments, the manifest "
                            f"{len(self.ports)}; regenerate the project")
        info = [self.port_info[p] for p in self.ports]
        # Per port: elements per beat, stripes, stripe index, flags, pitch of its beats (run_ports
        # sets the pitch of a buffer whose beats are not back to back).
        self._info = np.array([[BEAT_BYTES // i.elem_bytes, i.stripes, i.index,
                                FLAG_PREFETCH if _prefetched(i) else 0, BEAT_BYTES]
                               for i in info], dtype=np.uint64).reshape(-1, 5)

    def port_bytes(self, n: int) -> dict[str, int]:
        """Bytes each port's buffer must hold for a shard of n elements (stripe 0 is the largest)."""
        return {p: self.port_info[p].nbytes(int(n)) for p in self.ports}

    def port_offsets(self, first: int) -> dict[str, int]:
        """Byte offset of element `first` of the shard in each port's stripe buffer.

        To run a chunk of a shard that starts at element `first`, pass each port a view of its
        stripe buffer from this offset (what a card's host does with the pointer registers).
        `first` must start a round of every stripe: a multiple of `self.align` (32 x lcm of the
        stripe counts, StripeCounts.beat_align()).
        """
        if isinstance(first, bool) or not isinstance(first, (int, np.integer)) or first < 0 or first % self.align:
            raise ValueError(f"first: {first!r} must be a multiple of {self.align} (32 x lcm of the stripe counts)")
        return {p: int(first) // (BEAT_BYTES // i.elem_bytes * i.stripes) * BEAT_BYTES
                for p, i in self.port_info.items()}

    def scalar_bits(self, scalars: dict[str, int]) -> np.ndarray:
        """The scalar registers in register-map order as a uint32 array (validated)."""
        if not isinstance(scalars, dict) or set(scalars) != set(self._names):
            got = sorted(scalars) if isinstance(scalars, dict) else type(scalars).__name__
            raise ValueError(f"scalars: expected registers {', '.join(self._names)}; got {got}")
        values = []
        for name in self._names:
            value = scalars[name]
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= int(value) < 1 << 32:
                raise ValueError(f"scalars[{name!r}]: {value!r} is not a 32-bit register pattern")
            values.append(int(value))
        return np.array(values, dtype=np.uint32)

    def _bits(self, scalars: dict[str, int] | np.ndarray) -> np.ndarray:
        if isinstance(scalars, np.ndarray):
            if scalars.dtype != np.uint32 or scalars.shape != (len(self._names),):
                raise ValueError(f"scalars: expected {len(self._names)} uint32 register patterns "
                                 f"({', '.join(self._names)}), got {scalars.dtype} {scalars.shape}")
            return np.ascontiguousarray(scalars)
        return self.scalar_bits(scalars)

    def _check_n(self, n: int) -> int:
        if self._lib is None:
            raise CsimError("this CsimKernel is closed")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= int(n) <= MAX_ELEMENTS:
            raise ValueError(f"n: {n!r} must be an integer from 0 to {MAX_ELEMENTS}")
        return int(n)

    def run_ports(self, buffers: dict[str, np.ndarray], n: int, scalars: dict[str, int] | np.ndarray) -> None:
        """One optimizer step on the stripe buffers of every port, in place (see the class docstring)."""
        n = self._check_n(n)
        bits = self._bits(scalars)
        stream = self.spec.grad_source == "stream"
        pstream = self.spec.param_stream
        wanted = set(self.ports) | ({"grad"} if stream else set()) | ({PARAM_STREAM} if pstream else set())
        if not isinstance(buffers, dict) or set(buffers) != wanted:
            have = set(buffers) if isinstance(buffers, dict) else set()
            missing, extra = sorted(wanted - have), sorted(have - wanted)
            raise ValueError(f"buffers: one per port of {self.spec.name} ({', '.join(sorted(wanted))}); "
                             f"missing {missing or 'none'}, unexpected {extra or 'none'}")
        need = self.port_bytes(n)
        if stream:
            need["grad"] = n * self.spec.grad_bytes
        if pstream:
            need[PARAM_STREAM] = n * self.spec.out_bytes
            if not isinstance(buffers[PARAM_STREAM], np.ndarray) or not buffers[PARAM_STREAM].flags.writeable \
                    or not buffers[PARAM_STREAM].flags.c_contiguous:
                raise ValueError(f"buffers[{PARAM_STREAM!r}]: must be a writeable C-contiguous numpy array "
                                 "(the parameter stream lands there)")
        info = self._info
        for name, arr in buffers.items():
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"buffers[{name!r}]: expected a numpy array, got {type(arr).__name__}")
            pitch = _beat_pitch(arr)
            if pitch is None:
                raise ValueError(f"buffers[{name!r}]: must be C-contiguous, or uint8 rows of one 64-byte beat "
                                 "each a multiple of 64 bytes apart")
            if pitch != BEAT_BYTES:
                if name not in self.port_info or self.port_info[name].written:
                    raise ValueError(f"buffers[{name!r}]: beats {pitch} bytes apart, on a port the kernel "
                                     "writes (only read ports take rows that are not back to back)")
                if info is self._info:
                    info = self._info.copy()
                info[self.ports.index(name), 4] = pitch
            if name in self.port_info and self.port_info[name].written and not arr.flags.writeable:
                raise ValueError(f"buffers[{name!r}]: must be writeable (the kernel writes through {name})")
            if arr.nbytes < need[name]:
                raise ValueError(f"buffers[{name!r}]: {arr.nbytes} bytes, fewer than the {need[name]} its "
                                 f"stripe takes for n={n} (whole 64-byte beats)")
        ports = (ctypes.c_void_p * max(1, len(self.ports)))(*[buffers[p].ctypes.data for p in self.ports])
        lengths = (ctypes.c_ulonglong * max(1, len(self.ports)))(*[buffers[p].nbytes for p in self.ports])
        grad = buffers["grad"].ctypes.data if stream else None
        grad_length = buffers["grad"].nbytes if stream else 0
        param = buffers[PARAM_STREAM].ctypes.data if pstream else None
        param_length = buffers[PARAM_STREAM].nbytes if pstream else 0
        threads = self.threads if n >= 1 << 16 else 1  # below that, handing work to threads costs more than it saves
        rc = self._run(ports, lengths, info.ctypes.data, len(self.ports), grad,
                       self.spec.grad_bytes if stream else 0, grad_length, param,
                       self.spec.out_bytes if pstream else 0, param_length, n, bits.ctypes.data, threads, self.chunk,
                       self.align)
        if rc == -2:
            raise CsimError(f"{self.library}: port count does not match the kernel; regenerate the project")
        if rc == -3:
            raise MemoryError(f"{self.spec.name}: C simulation could not allocate its scratch buffers")
        if rc == -4:
            raise CsimError(f"{self.library}: the harness refused the buffers (shorter than n={n} elements take, "
                            "or a layout that is not this kernel's); nothing was read or written")
        if rc:
            raise CsimError(f"{self.spec.name}: the C simulation model reported {rc} stream underflow(s), "
                            "leftover beat(s) (two dataflow processes disagree on a beat count) or wrong "
                            "parameter-stream packet(s) (beats, TKEEP, TLAST or padding)")

    def _check(self, grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray,
               n: int) -> None:
        self._check_n(n)
        spec = self.spec
        wanted = {"grad": STORAGE_DTYPES[spec.grad_dtype], "p": _F32, "m": _F32, "v": _F32,
                  "out": STORAGE_DTYPES[spec.out_dtype]}
        for name, arr in (("grad", grad), ("p", p), ("m", m), ("v", v), ("out", out)):
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"{name}: expected a numpy array, got {type(arr).__name__}")
            if arr.dtype != wanted[name]:
                raise ValueError(f"{name}: expected {wanted[name]} for this kernel "
                                 f"({spec.grad_dtype} grad, {spec.out_dtype} out), got {arr.dtype}")
            if not arr.flags.c_contiguous:
                raise ValueError(f"{name}: must be C-contiguous")
            if name != "grad" and not arr.flags.writeable:
                raise ValueError(f"{name}: must be writeable (updated in place)")
            if arr.size < n:
                raise ValueError(f"{name}: has {arr.size} elements, fewer than n={n}")

    def run(self, grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray, out: np.ndarray, n: int,
            scalars: dict[str, int], param: np.ndarray | None = None) -> None:
        """One optimizer step on the first `n` elements of whole arrays, in place on `p`, `m`, `v`; writes `out`.

        The arrays are striped as the card holds them (hls.layout.split), run with `run_ports`, and
        joined back; elements past n are not touched. A kernel with the parameter stream
        (out_sink "memory+stream") writes what it sent there into `param` (the output dtype, at
        least n elements; without it the stream is still checked, then dropped).
        """
        self._check(grad, p, m, v, out, n)
        n = int(n)
        buffers, state, outs = self.stripe_arrays(grad, p, m, v, n)
        if self.spec.param_stream:
            if param is None:
                param = np.zeros(n, out.dtype)
            elif not isinstance(param, np.ndarray) or param.dtype != out.dtype or param.size < n:
                raise ValueError(f"param: expected a {out.dtype} array of at least n={n} elements")
            buffers[PARAM_STREAM] = param
        elif param is not None:
            raise ValueError(f"param: {self.spec.name} sends no parameter stream (out_sink {self.spec.out_sink!r})")
        self.run_ports(buffers, n, scalars)
        for name, arr in (("p", p), ("m", m), ("v", v)):
            arr[:n] = layout.join(state[name], n, _F32)
        out[:n] = layout.join(outs, n, out.dtype)

    def stripe_arrays(self, grad: np.ndarray, p: np.ndarray, m: np.ndarray, v: np.ndarray,
                      n: int) -> tuple[dict[str, np.ndarray], dict[str, list[np.ndarray]], list[np.ndarray]]:
        """Whole arrays striped as the card holds them (hls.layout.split): the buffer of every port
        (a state stripe's _rd and _wr ports share one), the state stripes and the out stripes."""
        s = self.stripes
        buffers: dict[str, np.ndarray] = {}
        if self.spec.grad_source == "stream":
            buffers["grad"] = grad[:n]
        else:
            for k, part in enumerate(layout.split(grad[:n], s.grad)):
                buffers[read_port("grad", k)] = part
        state = {}
        for name, arr in (("p", p), ("m", m), ("v", v)):
            state[name] = layout.split(arr[:n], s.state)
            for k, part in enumerate(state[name]):
                buffers.update(dict.fromkeys(port_names(name, k), part))
        outs = [np.zeros(self.port_info[write_port("out", k)].nbytes(n), np.uint8) for k in range(s.out)]
        for k, part in enumerate(outs):
            buffers[write_port("out", k)] = part
        return buffers, state, outs

    def close(self) -> None:
        # ctypes cannot unload safely while references may remain; dropping ours is enough, and the
        # next build of a changed kernel gets a new file name.
        self._lib = None

    def __enter__(self) -> CsimKernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
