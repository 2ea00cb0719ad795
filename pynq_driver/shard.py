"""A shard of optimizer state resident in card memory, and gradient shards streamed through it.

The fp32 master parameters and both moments stay on the card across steps. A step splits the
gradient into chunks that fit the two staging buffers and double-buffers them: the copy of
chunk i+1 to the card, and of the output of chunk i-1 back, overlap the kernel run on chunk i.

Every check on the caller's input runs before the first write to the card, so bad input leaves
the state bit-identical. A step that fails half-way (a kernel that never finishes, a simulator
that dies) marks the shard inconsistent: its state stays readable, and `step()` refuses to run
until a checkpoint is loaded.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import logging
import math
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hls import layout, safe_io, validate
from hls.errors import UserError
from hls.golden import Hyper, prepare_scalars
from hls.sizing import CHUNK_ELEMS
from hls.spec import KernelSpec
from pynq_driver.device import Device
from pynq_driver.errors import (
    BadGradient,
    DeviceError,
    NonFiniteGradient,
    ShardTooLarge,
    StateError,
    StateFileError,
)
from pynq_driver.native import stripe_equal, striped_equal
from pynq_driver.registers import KernelRunner

log = logging.getLogger(__name__)

DEFAULT_CHUNK_ELEMS = CHUNK_ELEMS  # 4 MiB of fp32 gradient per staging chunk (sizing plans for it)
# Shards and buckets above the driver start on 64-byte boundaries (one 512-bit beat).
CHUNK_ALIGN = 16
NONFINITE_POLICIES = ("skip", "raise")
STATE_FORMAT = "optimusnic-shard"
STATE_VERSION = 1
_STATE_ARRAYS = ("params", "exp_avg", "exp_avg_sq")

_GRAD_NP = {"fp32": np.dtype(np.float32), "fp16": np.dtype(np.float16), "bf16": np.dtype(np.uint16)}
_OUT_NP = {"fp32": np.dtype(np.float32), "bf16": np.dtype(np.uint16)}
_TORCH_NAME = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _is_torch(x: object) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def host_array(x: object, dtype_name: str, n: int, what: str, *, writable: bool = False,
               err: type[UserError] = BadGradient) -> np.ndarray:
    """A zero-copy numpy view of a contiguous CPU array/tensor of `n` elements of `dtype_name`.

    bf16 is numpy uint16 bit patterns or a torch.bfloat16 tensor (viewed as its bits).
    """
    np_dtype = {**_GRAD_NP, **_OUT_NP}[dtype_name]
    if _is_torch(x):
        import torch

        if not isinstance(x, torch.Tensor):
            raise err(f"{what}: expected a tensor, got {type(x).__name__}")
        if x.device.type != "cpu":
            raise err(f"{what}: tensor is on {x.device}; the driver copies from host memory, pass a CPU tensor")
        want = getattr(torch, _TORCH_NAME[dtype_name])
        if x.dtype != want:
            raise err(f"{what}: dtype {x.dtype}, the kernel spec needs {want}")
        if not x.is_contiguous():
            raise err(f"{what}: tensor is not contiguous; call .contiguous() first")
        if x.numel() != n:
            raise err(f"{what}: {x.numel()} elements, the shard has {n}")
        t = x.detach()
        arr = t.view(torch.int16).numpy().view(np.uint16) if dtype_name == "bf16" else t.numpy()
        return arr.reshape(-1)
    if not isinstance(x, np.ndarray):
        raise err(f"{what}: expected a numpy array or torch tensor, got {type(x).__name__}")
    if x.dtype != np_dtype:
        hint = " (bf16 as uint16 bit patterns or torch.bfloat16)" if dtype_name == "bf16" else ""
        raise err(f"{what}: dtype {x.dtype}, the kernel spec needs {np_dtype}{hint}")
    if not x.flags.c_contiguous:
        raise err(f"{what}: array is not contiguous; pass np.ascontiguousarray(...)")
    if x.size != n:
        raise err(f"{what}: {x.size} elements, the shard has {n}")
    if writable and not x.flags.writeable:
        raise err(f"{what}: array is read-only")
    return x.reshape(-1)


def _all_finite(chunk: np.ndarray, dtype_name: str, scratch: np.ndarray, zeros: np.ndarray | None) -> bool:
    if dtype_name == "bf16":
        return not np.any(np.bitwise_and(chunk, 0x7F80, out=scratch[: 2 * chunk.size].view(np.uint16)) == 0x7F80)
    if zeros is not None:
        # fp32: a dot product with zeros is 0 for finite values and NaN as soon as one is inf or
        # NaN (inf * 0 = NaN, and NaN survives every sum). BLAS reads the chunk at memory speed,
        # three times faster than np.isfinite, and allocates nothing.
        return not np.isnan(np.dot(chunk, zeros[: chunk.size]))
    return bool(np.isfinite(chunk, out=scratch[: chunk.size].view(np.bool_)).all())


_BLOCK = 1 << 16  # elements per block of a scan or fallback comparison (no chunk-sized temporaries)


def _load_memcmp() -> Any:
    """libc's memcmp through ctypes (None where no C library is found): compares at memory speed,
    allocates nothing, and runs without the GIL (ctypes releases it), so a kernel thread runs on."""
    for name in (None, ctypes.util.find_library("c"), "msvcrt"):
        try:
            fn = ctypes.CDLL(name).memcmp
        except (OSError, AttributeError, TypeError):
            continue
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        return fn
    return None


_MEMCMP = _load_memcmp()


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the contiguous arrays `a` and `b` hold the same bytes: bit patterns, so -0.0 differs
    from 0.0 and NaNs with different payloads differ (what "unchanged" means for a master)."""
    if a.nbytes != b.nbytes:
        return False
    if not a.nbytes:
        return True
    if _MEMCMP is not None:
        return _MEMCMP(a.ctypes.data, b.ctypes.data, a.nbytes) == 0
    x, y = a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)
    return all(np.array_equal(x[i:i + _BLOCK], y[i:i + _BLOCK]) for i in range(0, x.size, _BLOCK))


def _cu_ranges(n: int, cus: int, align: int) -> list[tuple[int, int]]:
    """Each compute unit's contiguous part of the shard (parts start stripe-aligned; the last may be short)."""
    per_cu = -(-n // cus)
    part = -(-per_cu // align) * align
    return [(min(n, c * part), min(n, (c + 1) * part)) for c in range(cus)]


def default_chunk_elems(dev: Device, n: int) -> int:
    """The chunk sizing planned for (1M elements), never more than one CU's part of the shard."""
    align = dev.stripes.beat_align()
    part = max(hi - lo for lo, hi in _cu_ranges(n, dev.cus, align))
    return max(align, min(DEFAULT_CHUNK_ELEMS // align * align, -(-part // align) * align))


class _CuPart:
    """One compute unit's part of the shard: its stripes of p, m, v and its staging stripes."""

    def __init__(self, cu: int, lo: int, hi: int, runner: KernelRunner) -> None:
        self.cu, self.lo, self.hi = cu, lo, hi
        self.runner = runner
        self.state: dict[str, list[Any]] = {}
        self.grad_stage: list[list[Any]] = []
        self.out_stage: list[list[Any]] = []

    @property
    def n(self) -> int:
        return self.hi - self.lo


def _plan_buffers(dev: Device, ranges: list[tuple[int, int]],
                  chunk: int) -> list[tuple[int, str, str, int, int, int]]:
    """(cu, array, bank, stripe, slot, bytes) of every buffer the shard needs.

    State stripes hold the CU's whole part (slot -1); staging stripes hold one chunk, twice
    (slots 0 and 1, for double buffering).
    """
    spec, st = dev.spec, dev.stripes
    plan = []
    for cu, (lo, hi) in enumerate(ranges):
        if hi == lo:
            continue
        banks = dev.banks(cu)
        for a in ("p", "m", "v"):
            for k in range(st.state):
                nbytes = max(64, layout.stripe_bytes(hi - lo, 4, st.state, k))
                plan.append((cu, a, banks[f"{a}{k}_rd"], k, -1, nbytes))
        for a, elem in (("grad", spec.grad_bytes), ("out", spec.out_bytes)):
            for k in range(st.of(a)):
                nbytes = layout.stripe_bytes(min(chunk, hi - lo), elem, st.of(a), 0)
                plan += [(cu, a, banks[f"{a}{k}"], k, slot, nbytes) for slot in (0, 1)]
    return plan


def check_fits(dev: Device, n: int, chunk: int) -> None:
    """Raise ShardTooLarge (saying how many cards) if the state and staging exceed a channel."""
    ranges = _cu_ranges(n, dev.cus, dev.stripes.beat_align())
    need: dict[str, int] = {}
    for _, _, bank, _, _, nbytes in _plan_buffers(dev, ranges, chunk):
        need[bank] = need.get(bank, 0) + -(-nbytes // 4096) * 4096
    cap = dev.bank_capacity()
    for bank, total in sorted(need.items()):
        if total > cap:
            max_params = int(dev.manifest["sizing"]["max_params_per_card"])
            cards = math.ceil(n / max(1, max_params))
            target = dev.manifest.get("target", {}).get("name", dev.spec.target)
            raise ShardTooLarge(
                f"a shard of {n:,} parameters needs {total:,} bytes in {bank} but one channel of {target} holds "
                f"{cap:,} (this kernel's plan holds at most {max_params:,} parameters per card): shard the "
                f"model over at least {cards} cards, or generate a kernel with more stripes (optimusnic size "
                f"--params {n} says how many)"
            )


def _stripe_rows(raw: np.ndarray, stripes: int) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """For the bytes `raw` of a chunk (hls/layout.py: stripe k holds beats k, k + S, ...), each stripe
    that holds beats: (k, its beats, its whole beats, a view of its whole beats, the partial tail)."""
    full = raw.size // 64
    rows = raw[: full * 64].reshape(full, 64)
    nb = -(-raw.size // 64)
    tail = raw[full * 64:]
    for k in range(stripes):
        cnt = layout.stripe_beats(nb, stripes, k)
        if cnt:
            yield k, cnt, layout.stripe_beats(full, stripes, k), rows[k::stripes], tail


class ShardState:
    """Optimizer state of one shard of N parameters, resident on `dev` across steps.

    The shard is split over the kernel's compute units (each a contiguous part, stripe-aligned),
    and each part over its stripes (hls.layout): every stripe one buffer in the bank the
    manifest's memory plan names for it. Gradients and outputs pass through two staging slots
    per CU, striped the same way.
    """

    def __init__(self, dev: Device, params: Any, chunk_elems: int | None = None, *, nonfinite: str = "skip") -> None:
        dev._check_open()
        if nonfinite not in NONFINITE_POLICIES:
            raise UserError(f"nonfinite: {nonfinite!r}; choose one of {', '.join(NONFINITE_POLICIES)}")
        # `params` may be a number of elements: the shard starts at zeros and the caller writes its
        # masters range by range (write_range), so no full-size host copy is ever needed.
        by_count = isinstance(params, (int, np.integer)) and not isinstance(params, bool)
        n = int(params) if by_count else _numel(params)
        if n < 1:
            raise BadGradient("params: the shard needs at least one parameter")
        p_host = None if by_count else host_array(params, "fp32", n, "params")
        self.dev = dev
        self.spec: KernelSpec = dev.spec
        self.backend = dev.backend
        self.stripes = dev.stripes
        self.n = n
        self.nonfinite = nonfinite
        align = self.stripes.beat_align()
        if chunk_elems is None:
            chunk = default_chunk_elems(dev, n)
        else:
            if isinstance(chunk_elems, bool) or not isinstance(chunk_elems, int) or chunk_elems < align:
                raise UserError(f"chunk_elems: {chunk_elems!r} must be an integer >= {align} "
                                f"(this kernel's stripes restart every {align} elements)")
            # Round down so every chunk starts at beat 0 of every stripe.
            chunk = min(chunk_elems // align * align, -(-n // align) * align)
        self.chunk_elems = chunk
        check_fits(dev, n, chunk)
        ranges = _cu_ranges(n, dev.cus, align)
        self.parts = [_CuPart(cu, lo, hi, KernelRunner(dev, cu)) for cu, (lo, hi) in enumerate(ranges) if hi > lo]
        self.runner = self.parts[0].runner
        self._bufs = []
        try:
            by_cu = {pt.cu: pt for pt in self.parts}
            for cu, array, bank, _, slot, nbytes in _plan_buffers(dev, ranges, chunk):
                part = by_cu[cu]
                buf = self._alloc(nbytes, bank)
                if slot < 0:
                    part.state.setdefault(array, []).append(buf)
                else:
                    stage = part.grad_stage if array == "grad" else part.out_stage
                    while len(stage) <= slot:
                        stage.append([])
                    stage[slot].append(buf)
            zeros = np.zeros(min(n, chunk), np.float32)
            for part, lo, hi in self._all_chunks():
                self._put_state(part, "p", lo, zeros[: hi - lo] if p_host is None else p_host[lo:hi])
                self._put_state(part, "m", lo, zeros[: hi - lo])
                self._put_state(part, "v", lo, zeros[: hi - lo])
        except BaseException:
            self._free_all()
            raise
        self.step_count = 0
        self.last_step_skipped = False
        self.skipped_steps = 0
        self.inconsistent: str | None = None
        self.closed = False
        self._scratch = np.empty(2 * chunk, np.uint8)
        self._zeros = np.zeros(chunk, np.float32) if self.spec.grad_dtype == "fp32" else None
        self._host_chunks: tuple[np.ndarray, np.ndarray] | None = None

    # ---- life cycle ------------------------------------------------------------------------
    def _alloc(self, nbytes: int, bank: str) -> Any:
        buf = self.dev.allocate(nbytes, bank)
        self._bufs.append(buf)
        return buf

    def _free_all(self) -> None:
        for buf in self._bufs:
            self.dev.free(buf)
        self._bufs = []

    def close(self) -> None:
        if not getattr(self, "closed", True):
            self.closed = True
            self._free_all()

    def __enter__(self) -> ShardState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            from pynq_driver.errors import DeviceClosed

            raise DeviceClosed("shard is closed; create a new ShardState (or ShardState.load a checkpoint)")
        self.dev._check_open()

    def _chunks(self) -> list[tuple[int, int]]:
        """Every chunk of the shard, in order (each inside one CU's part)."""
        return [(lo, hi) for _, lo, hi in self._all_chunks()]

    def _all_chunks(self) -> list[tuple[_CuPart, int, int]]:
        c = self.chunk_elems
        return [(pt, lo, min(lo + c, pt.hi)) for pt in self.parts for lo in range(pt.lo, pt.hi, c)]

    def _rounds(self) -> list[list[tuple[_CuPart, int, int]]]:
        """Chunks grouped into rounds: round i runs chunk i of every CU at once."""
        c = self.chunk_elems
        per_cu = [[(pt, lo, min(lo + c, pt.hi)) for lo in range(pt.lo, pt.hi, c)] for pt in self.parts]
        return [[cs[i] for cs in per_cu if i < len(cs)] for i in range(max(len(cs) for cs in per_cu))]

    # ---- striped copies (hls/layout.py: stripe k holds beats k, k + S, ...) -------------------
    def _put(self, bufs: list[Any], data: np.ndarray, beat0: int) -> None:
        """Write `data` into its stripes, starting at stripe beat `beat0` (a chunk's first beat / S)."""
        self._put_via(bufs, data, beat0, self._stripe_scratch(bufs, data))

    def _get(self, bufs: list[Any], out: np.ndarray, beat0: int) -> None:
        """Fill `out` from its stripes, starting at stripe beat `beat0`."""
        self._get_via(bufs, out, beat0, self._stripe_scratch(bufs, out))

    @staticmethod
    def _stripe_scratch(bufs: list[Any], data: np.ndarray) -> np.ndarray:
        """Room for stripe 0 of `data` (the largest); none is needed with one stripe."""
        if len(bufs) == 1:
            return np.empty(0, np.uint8)
        return np.empty(layout.stripe_bytes(data.size, data.itemsize, len(bufs)), np.uint8)

    def _state_beat(self, part: _CuPart, lo: int) -> int:
        return (lo - part.lo) // 16 // self.stripes.state

    def _put_state(self, part: _CuPart, array: str, lo: int, data: np.ndarray) -> None:
        self._put(part.state[array], data, self._state_beat(part, lo))

    def _get_state(self, part: _CuPart, array: str, lo: int, out: np.ndarray) -> None:
        self._get(part.state[array], out, self._state_beat(part, lo))

    # ---- the step --------------------------------------------------------------------------
    def next_hyper(self, **kw: Any) -> Hyper:
        """Hyper for the next step (step_count + 1) with the given lr, betas, ..."""
        return Hyper(step=self.step_count + 1, **kw)

    def step(self, grad: Any, hyper: Hyper, out: Any = None, apply_nonfinite: bool = False) -> Any:
        """One optimizer step on the shard; returns the updated parameters (or fills `out`).

        Returns None (and sets `last_step_skipped`) when the gradient is not finite, unless
        `apply_nonfinite` is set; with `nonfinite="raise"` the shard raises NonFiniteGradient.
        """
        self._check_open()
        if self.inconsistent:
            raise StateError(f"{self.inconsistent}; load a checkpoint (load_state_dict / ShardState.load) first")
        spec = self.spec
        g = host_array(grad, spec.grad_dtype, self.n, "grad")
        if not isinstance(hyper, Hyper):
            raise UserError(f"hyper: expected hls.golden.Hyper, got {type(hyper).__name__}")
        o = None if out is None else host_array(out, spec.out_dtype, self.n, "out", writable=True)
        chunks = self._chunks()
        self.last_step_skipped = False
        finite = apply_nonfinite or all(_all_finite(g[lo:hi], spec.grad_dtype, self._scratch, self._zeros)
                                        for lo, hi in chunks)
        if not finite:
            if self.nonfinite == "raise":
                raise NonFiniteGradient(f"gradient of step {hyper.step} holds inf or NaN; state unchanged")
            self.last_step_skipped = True
            self.skipped_steps += 1
            log.warning("step %d skipped: the gradient holds inf or NaN (state unchanged)", hyper.step)
            return None
        bits = prepare_scalars(hyper, spec.optimizer).registers(spec.optimizer)
        result = o if o is not None else np.empty(self.n, _OUT_NP[spec.out_dtype])
        self._stream(g, result, bits, chunks, hyper.step)
        self.step_count = int(hyper.step)
        return out if out is not None else result

    def _stream(self, g: np.ndarray, result: np.ndarray, bits: dict[str, int], chunks: list[tuple[int, int]],
                step: int) -> None:
        """Double-buffered: the copies of round i+1 in and round i-1 out overlap the kernels of round i."""
        rounds = self._rounds()
        launched = 0

        lent: dict[int, dict[str, Any]] = {}  # round -> the host arrays lent to the card as its buffers

        def stage_in(i: int) -> None:
            own = lent.setdefault(i, {})
            for pt, lo, hi in rounds[i]:
                for key, data in (("grad", g[lo:hi]), ("out", result[lo:hi])):
                    bufs = pt.grad_stage[i % 2] if key == "grad" else pt.out_stage[i % 2]
                    buf = self._lend(bufs, data)
                    if buf is not None:
                        own[(pt.cu, key)] = buf
                    elif key == "grad":
                        self._put(bufs, data, 0)

        def launch(i: int) -> None:
            nonlocal launched
            for pt, lo, hi in rounds[i]:
                own = lent.get(i, {})
                pt.runner.launch(self._pointers(pt, lo, i % 2, own.get((pt.cu, "grad")), own.get((pt.cu, "out"))),
                                 hi - lo, bits)
                launched += 1

        def wait(i: int) -> None:
            for pt, _, _ in rounds[i]:
                pt.runner.wait()

        def collect(i: int) -> None:
            own = lent.pop(i, {})
            for pt, lo, hi in rounds[i]:
                if (pt.cu, "out") not in own:  # else the kernel wrote `result` itself
                    self._get(pt.out_stage[i % 2], result[lo:hi], 0)
            self._give_back(own)

        try:
            stage_in(0)
            launch(0)
            for i in range(1, len(rounds)):
                stage_in(i)  # overlaps the kernels of round i-1
                wait(i - 1)
                launch(i)
                collect(i - 1)  # overlaps the kernels of round i
            wait(len(rounds) - 1)
            collect(len(rounds) - 1)
        except BaseException as exc:
            if launched:
                self.inconsistent = (
                    f"step {step} stopped after {launched} of {len(chunks)} chunks ({type(exc).__name__}); "
                    f"the state on the card mixes steps {self.step_count} and {step}"
                )
            raise
        finally:
            for own in lent.values():
                self._give_back(own)

    def _lend(self, bufs: list[Any], data: np.ndarray | None) -> Any:
        """`data` itself as the port's buffer (`Device.import_host`) where the card's memory is host
        memory, the port has one stripe and `data` fills whole 64-byte beats: the kernel reads the
        gradient from, or writes the results into, the caller's memory, and the host copy a card's
        DMA would make is saved. None: the caller copies through the staging buffers."""
        lent = self._lend_stripes(bufs, data) if len(bufs) == 1 else None
        return lent[0] if lent else None

    def _lend_stripes(self, bufs: list[Any], data: np.ndarray | None) -> list[Any] | None:
        """Every stripe of `data` (whole 64-byte beats, a piece's start: stripe k holds beats k,
        k + stripes, ...) lent as the buffer of the port of `bufs[k]` (`Device.import_host`), for
        ports the kernel only reads. None where any stripe cannot be lent (nothing is kept)."""
        if data is None or data.nbytes % 64:
            return None
        lent: list[Any] = []
        for k, buf in enumerate(bufs):
            got = self.dev.import_host(data, buf.bank, len(bufs), k)
            if got is None:
                for b in lent:
                    self.dev.free(b)
                return None
            lent.append(got)
        return lent

    def _give_back(self, own: dict[Any, Any]) -> None:
        for buf in own.values():
            self.dev.free(buf)
        own.clear()

    # ---- striped copies through a caller's scratch (no allocation: the streamed step's path) -------
    def _put_via(self, bufs: list[Any], data: np.ndarray, beat0: int, tmp: np.ndarray) -> None:
        """As `_put`, but each stripe is gathered into `tmp` (uint8, at least one stripe's bytes)."""
        if len(bufs) == 1:
            self.dev.write(bufs[0], data, 64 * beat0)
            return
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        for k, cnt, whole, rows, tail in _stripe_rows(raw, len(bufs)):
            t = tmp[: cnt * 64]
            t[: whole * 64].reshape(whole, 64)[...] = rows
            if whole < cnt:  # this stripe holds the last, partial beat: zero-padded, as layout.split
                t[whole * 64: whole * 64 + tail.size] = tail
                t[whole * 64 + tail.size:] = 0
            self.dev.write(bufs[k], t, 64 * beat0)

    def _get_via(self, bufs: list[Any], out: np.ndarray, beat0: int, tmp: np.ndarray) -> None:
        """As `_get`, but each stripe is read into `tmp` and scattered into `out` in place."""
        if len(bufs) == 1:
            self.dev.read(bufs[0], out, 64 * beat0)
            return
        for k, cnt, whole, rows, tail in _stripe_rows(out.reshape(-1).view(np.uint8), len(bufs)):
            t = tmp[: cnt * 64]
            self.dev.read(bufs[k], t, 64 * beat0)
            rows[...] = t[: whole * 64].reshape(whole, 64)
            if whole < cnt:
                tail[...] = t[whole * 64: whole * 64 + tail.size]

    # ---- streaming by ranges (the torch layer: gradients read from, results written to, the model) --
    def pieces(self, lo: int, hi: int) -> list[tuple[_CuPart, int, int]]:
        """[lo, hi) cut at compute-unit parts and into chunks; `lo` must be a multiple of beat_align()."""
        align = self.stripes.beat_align()
        if lo % align or not 0 <= lo <= hi <= self.n:
            raise UserError(f"range [{lo}, {hi}) of a {self.n}-element shard must start at a multiple of {align}")
        out = []
        for pt in self.parts:
            a, b = max(lo, pt.lo), min(hi, pt.hi)
            out += [(pt, x, min(x + self.chunk_elems, b)) for x in range(a, b, self.chunk_elems)]
        return out

    def host_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """The two host chunks a streamed step uses: 4 bytes x chunk (the inf/NaN scan's scratch,
        then each piece's gradient, then the gathered stripes of its masters' comparison) and one
        output chunk (the card's copy of the masters where it must be read back). Allocated once,
        on first use."""
        if self._host_chunks is None:
            self._host_chunks = (np.empty(4 * self.chunk_elems, np.uint8),
                                 np.empty(self.chunk_elems, _OUT_NP[self.spec.out_dtype]))
        return self._host_chunks

    def share_host_chunks(self, raw: np.ndarray, out_raw: np.ndarray) -> None:
        """Use the caller's host chunks (uint8, at least 4 x chunk_elems bytes each): the shards of
        one optimizer run one after another, so they can share two chunks instead of two each."""
        if raw.nbytes < 4 * self.chunk_elems or out_raw.nbytes < 4 * self.chunk_elems:
            raise UserError(f"share_host_chunks: needs {4 * self.chunk_elems} bytes per chunk")
        out_np = _OUT_NP[self.spec.out_dtype]
        self._host_chunks = (raw[: 4 * self.chunk_elems],
                             out_raw[: self.chunk_elems * out_np.itemsize].view(out_np))

    def read_range(self, array: str, lo: int, out: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
        """State array `array` ("p", "m" or "v") at [lo, lo + out.size) into the float32 array `out`
        (`tmp`: uint8 scratch of a chunk's bytes, so that striped reads allocate nothing)."""
        self._check_open()
        for pt, a, b in self.pieces(lo, lo + out.size):
            if tmp is None:
                self._get_state(pt, array, a, out[a - lo:b - lo])
            else:
                self._get_via(pt.state[array], out[a - lo:b - lo], self._state_beat(pt, a), tmp)
        return out

    def state_equals(self, array: str, lo: int, expect: np.ndarray, tmp: np.ndarray, blk: np.ndarray) -> bool:
        """Whether state array `array` at [lo, lo + expect.size) holds exactly the bits of `expect`
        (a contiguous array of 4-byte elements), with no temporaries: each stripe is compared where
        it lies when card memory is host memory (`Device.host_view`), else read into `tmp` (uint8
        scratch of a chunk's bytes) first. The beats of `expect` the stripes hold are compared in
        place by a compiled loop (`pynq_driver.native`: all stripes in one pass where they lie in
        host memory); without a C compiler they are gathered block by block into `blk` (uint8
        scratch, a chunk's bytes) and compared with memcmp."""
        self._check_open()
        want_all = expect.reshape(-1).view(np.uint8)
        beats_per_blk = blk.size // 64
        if beats_per_blk < 1:
            raise UserError(f"state_equals: the gathering scratch holds {blk.size} bytes; it needs one 64-byte beat")
        gathered = blk[: beats_per_blk * 64].view("V64")
        native = stripe_equal()
        for pt, a, b in self.pieces(lo, lo + expect.size):
            want = want_all[4 * (a - lo):4 * (b - lo)]
            bufs = pt.state[array]
            stripes = len(bufs)
            offset = 64 * self._state_beat(pt, a)
            full = want.size // 64
            nb = -(-want.size // 64)
            beats = want[: full * 64].view("V64")
            if stripes > 1:  # card memory is host memory: every stripe compared where it lies, in one pass
                views = [self.dev.host_view(buf, offset, layout.stripe_beats(nb, stripes, k) * 64)
                         for k, buf in enumerate(bufs)]
                if all(v is not None for v in views):
                    same = striped_equal(want, views)
                    if same is not None:
                        if not same:
                            return False
                        continue
            for k, buf in enumerate(bufs):
                cnt = layout.stripe_beats(nb, stripes, k)
                if not cnt:
                    continue
                card = self.dev.host_view(buf, offset, cnt * 64)
                if card is None:  # a real card: the stripe comes over once, into the free host chunk
                    card = self.dev.read(buf, tmp[: cnt * 64], offset)
                if stripes == 1:
                    if not same_bytes(want, card[: want.size]):
                        return False
                    continue
                if native is not None:  # each byte read once, in place (see pynq_driver/native.py)
                    if not native(want.ctypes.data, want.size, card.ctypes.data, stripes, k):
                        return False
                    continue
                mine = beats[k::stripes]  # this stripe's whole beats of `expect`, in place
                for j in range(0, mine.size, beats_per_blk):
                    part = mine[j:j + beats_per_blk]
                    g = gathered[: part.size]
                    g[...] = part
                    if not same_bytes(g, card[64 * j:64 * (j + part.size)]):
                        return False
                if mine.size < cnt:  # this stripe holds the partial last beat
                    tail = want[full * 64:]
                    at = 64 * mine.size
                    if not same_bytes(tail, card[at:at + tail.size]):
                        return False
        return True

    def write_range(self, array: str, lo: int, data: np.ndarray, tmp: np.ndarray | None = None) -> None:
        """Write float32 `data` into state array `array` at [lo, lo + data.size) (the tail of the last
        64-byte beat may be zeroed: ranges end where the next beat-aligned range starts)."""
        self._check_open()
        data = np.ascontiguousarray(data, np.float32).reshape(-1)
        for pt, a, b in self.pieces(lo, lo + data.size):
            if tmp is None:
                self._put_state(pt, array, a, data[a - lo:b - lo])
            else:
                self._put_via(pt.state[array], data[a - lo:b - lo], self._state_beat(pt, a), tmp)

    def stream(self, runs: list[tuple[int, int, dict[str, int]]], fill: Any, drain: Any, prepare: Any = None,
               step: int | None = None, direct: Any = None, gate: Any = None, masters_in_direct: bool = False
               ) -> bool:
        """Run the kernel over ranges of the shard, each with its own scalar registers, double-buffered.

        `runs`: (lo, hi, register bits). For every piece (chunk) [a, b): `fill(a, b, g)` writes its
        gradient into the host chunk `g` (grad dtype), `prepare(a, b, scratch, tmp)` may compare and
        fix the masters on the card before the kernel runs (the gradient is on the card by then:
        `scratch` is its host chunk as float32, `tmp` the free output chunk's bytes), `drain(a, b, o)` takes
        the output chunk `o` (out dtype). `fill` may instead return an array to send as it is
        (the gradient's own memory), and `direct(a, b)` may return the array the output goes to
        (the parameter's own memory), saving a host copy each; where card memory is host memory the
        kernel reads and writes those arrays in place (`_lend`), with no copy at all. With
        `masters_in_direct` (fp32 outputs: `direct`'s array is the parameter, whose bits are what the
        card's masters must be before the step), the kernel also reads its masters from that array
        where it is lent, and `prepare` is not called for the piece: what a comparison followed by a
        write of the differing bits would give, with neither. The host holds these two chunks
        and nothing else; no checks on the values run here (the caller checks before calling, or
        hands over `gate`: asked once the first piece is staged and prepared, before the first
        launch; False leaves the state as it was and returns False, else True once all ran).
        """
        self._check_open()
        if self.inconsistent:
            raise StateError(f"{self.inconsistent}; load a checkpoint (load_state_dict / ShardState.load) first")
        work = [(pt, a, b, bits) for lo, hi, bits in runs for pt, a, b in self.pieces(lo, hi)]
        if not work:
            return gate is None or bool(gate())
        raw, obuf = self.host_chunks()
        gbuf = raw[: self.chunk_elems * self.spec.grad_bytes].view(_GRAD_NP[self.spec.grad_dtype])
        pbuf = raw.view(np.float32)
        launched = 0

        otmp = obuf.view(np.uint8)  # free between collects: scratch for striped copies

        lent: dict[int, dict[str, Any]] = {}  # piece -> the caller's arrays lent to the card as its buffers
        dsts: dict[int, np.ndarray] = {}  # piece -> the output's own memory, where it is copied to

        def stage(i: int) -> None:
            pt, a, b, _ = work[i]
            g = gbuf[: b - a]
            src = fill(a, b, g)  # or the gradient itself, when it can go to the card as it is
            own = lent.setdefault(i, {})
            buf = self._lend(pt.grad_stage[i % 2], src)
            if buf is None:
                self._put_via(pt.grad_stage[i % 2], g if src is None else src, 0, otmp)
            else:
                own["grad"] = buf
            dst = None if direct is None else direct(a, b)
            buf = self._lend(pt.out_stage[i % 2], dst)
            if buf is not None:
                own["out"] = buf
            elif dst is not None:
                dsts[i] = dst
            if masters_in_direct and self.spec.out_dtype == "fp32":
                stripes = self._lend_stripes(pt.state["p"], dst)
                if stripes is not None:
                    own.update({f"p{k}_rd": buf for k, buf in enumerate(stripes)})
                    return
            if prepare is not None:  # the gradient chunk is on the card: its host chunk is free again
                prepare(a, b, pbuf[: b - a], otmp)

        def launch(i: int) -> None:
            nonlocal launched
            pt, a, b, bits = work[i]
            own = lent.get(i, {})
            pt.runner.launch(self._pointers(pt, a, i % 2, own.get("grad"), own.get("out"),
                                            [v for k, v in own.items() if k.startswith("p")]), b - a, bits)
            launched += 1

        def collect(i: int) -> None:
            pt, a, b, _ = work[i]
            own, dst = lent.pop(i, {}), dsts.pop(i, None)
            if "out" in own:  # the kernel wrote into the parameter's memory itself
                pass
            elif dst is not None:  # straight into the parameter's memory
                self._get_via(pt.out_stage[i % 2], dst, 0, raw)
            else:
                o = obuf[: b - a]
                self._get_via(pt.out_stage[i % 2], o, 0, raw)  # the gradient/master chunk is free here
                drain(a, b, o)
            self._give_back(own)

        try:
            stage(0)
            if gate is not None and not gate():  # nothing launched: the state is as it was
                return False
            launch(0)
            for i in range(1, len(work)):
                stage(i)  # overlaps the kernel on piece i-1
                work[i - 1][0].runner.wait()
                launch(i)
                collect(i - 1)  # overlaps the kernel on piece i
            work[-1][0].runner.wait()
            collect(len(work) - 1)
            return True
        except BaseException as exc:
            if launched:
                self.inconsistent = (
                    f"step {step} stopped after {launched} of {len(work)} chunks ({type(exc).__name__}); "
                    "the state on the card mixes two steps"
                )
            raise
        finally:
            for own in lent.values():
                self._give_back(own)

    def _pointers(self, pt: _CuPart, lo: int, slot: int, grad: Any = None, out: Any = None,
                  p_rd: list[Any] | None = None) -> dict[str, tuple[Any, int]]:
        """Every port of `pt`'s CU for the chunk at `lo`: state stripes at the chunk's beat, staging at 0
        (or the lent buffers: `grad`/`out`, one stripe each, see `_lend`; `p_rd`, the masters'
        stripes to read, see `_lend_stripes`: the results still go to the card's own masters)."""
        offset = 64 * self._state_beat(pt, lo)
        ptrs: dict[str, tuple[Any, int]] = {}
        for a in ("p", "m", "v"):
            for k, buf in enumerate(pt.state[a]):
                ptrs[f"{a}{k}_rd"] = ptrs[f"{a}{k}_wr"] = (buf, offset)
        for k, buf in enumerate(p_rd or ()):
            ptrs[f"p{k}_rd"] = (buf, 0)
        for k, buf in enumerate([grad] if grad is not None else pt.grad_stage[slot]):
            ptrs[f"grad{k}"] = (buf, 0)
        for k, buf in enumerate([out] if out is not None else pt.out_stage[slot]):
            ptrs[f"out{k}"] = (buf, 0)
        return ptrs

    # ---- reading and restoring the state ------------------------------------------------------
    def _read_state(self, array: str) -> np.ndarray:
        self._check_open()
        out = np.empty(self.n, np.float32)
        for part, lo, hi in self._all_chunks():
            self._get_state(part, array, lo, out[lo:hi])
        return out

    def params(self) -> np.ndarray:
        """A copy of the fp32 master parameters, read from the card."""
        return self._read_state("p")

    def state_dict(self) -> dict[str, Any]:
        """`torch.optim.AdamW` per-parameter state (step, exp_avg, exp_avg_sq) plus the fp32 params."""
        return {
            "step": self.step_count,
            "exp_avg": self._read_state("m"),
            "exp_avg_sq": self._read_state("v"),
            "params": self._read_state("p"),
            "spec": self.spec.to_dict(),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore a state_dict (numpy arrays or torch tensors); checks everything before writing."""
        self._check_open()
        if not isinstance(sd, dict):
            raise UserError(f"state_dict: expected a dict, got {type(sd).__name__}")
        missing = [k for k in ("step", *_STATE_ARRAYS) if k not in sd]
        if missing:
            raise UserError(f"state_dict: missing {', '.join(missing)} (needs step, params, exp_avg, exp_avg_sq)")
        if "spec" in sd and sd["spec"] is not None:
            _check_spec(dict(sd["spec"]), self.spec, "state_dict", UserError)
        step = _as_step(sd["step"])
        arrays = {k: host_array(sd[k], "fp32", self.n, f"state_dict[{k!r}]", err=UserError) for k in _STATE_ARRAYS}
        for key, array in (("params", "p"), ("exp_avg", "m"), ("exp_avg_sq", "v")):
            for part, lo, hi in self._all_chunks():
                self._put_state(part, array, lo, arrays[key][lo:hi])
        self.step_count = step
        self.inconsistent = None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the state as .npz (no pickle) with a JSON header: spec, n, step, sha256 of each array."""
        sd = self.state_dict()
        header = {
            "format": STATE_FORMAT, "version": STATE_VERSION, "spec": sd["spec"], "n": self.n,
            "step": sd["step"], "consistent": self.inconsistent is None,
            "sha256": {k: hashlib.sha256(sd[k].tobytes()).hexdigest() for k in _STATE_ARRAYS},
        }
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, header=np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8),
                     **{k: sd[k] for k in _STATE_ARRAYS})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # a crash mid-save never leaves a half-written checkpoint at `path`
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], dev: Device, chunk_elems: int | None = None,
             **kw: Any) -> ShardState:
        """A new shard on `dev` from a file written by `save` (any backend)."""
        header, arrays = read_state_file(path, dev.spec)
        shard = cls(dev, arrays["params"], chunk_elems, **kw)
        try:
            shard.load_state_dict({"step": header["step"], **arrays})
        except BaseException:
            shard.close()
            raise
        return shard


STATE_HEADER_MAX = 64 << 10  # the JSON header member of a checkpoint (~700 bytes)
_NPY_HEADER_MAX = 4096  # an .npy header (magic, dict, padding) is 128 bytes for these arrays


def read_state_file(path: str | os.PathLike[str], spec: KernelSpec) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Header and arrays of a saved shard, verified (format, spec, lengths, sha256), with bounded work.

    The file must be a regular file (a FIFO or /dev/zero is refused before any read); the zip
    holds exactly the members `save` writes, stored uncompressed (so nothing decompresses to more
    than the file holds); the header member is parsed and checked against its schema
    (hls/validate.py) first, then each array member's declared size, dtype and shape are checked
    against the header's element count before a byte of it is read.
    """
    path = Path(path)
    try:
        with safe_io.open_regular(path, safe_io.STATE_FILE_MAX, "state file") as (f, size):
            return _read_state_zip(path, f, size, spec)
    except StateFileError:
        raise
    except UserError as exc:  # not a regular file, unreadable
        raise StateFileError(str(exc)) from exc


def _read_state_zip(path: Path, f: Any, size: int, spec: KernelSpec) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise StateFileError(f"{path}: truncated or corrupt state file (not a readable .npz: {exc})") from exc
    with zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        want = sorted(f"{k}.npy" for k in ("header", *_STATE_ARRAYS))
        if sorted(names) != want:
            raise StateFileError(f"{path}: not an optimusnic shard file (members {', '.join(sorted(names)[:8])}; "
                                 f"expected exactly {', '.join(want)})")
        by_name = {i.filename: i for i in infos}
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size \
                    or info.header_offset + info.file_size > size:
                raise StateFileError(f"{path}: member {info.filename} is compressed or runs past the end of the file; "
                                     "state files hold their arrays stored, as ShardState.save writes them")
        try:
            raw_header = _read_member(zf, by_name["header.npy"], np.dtype(np.uint8), None, STATE_HEADER_MAX, path)
            try:
                header_data = json.loads(raw_header.tobytes().decode("utf-8"), parse_constant=_no_json_constant)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise StateFileError(f"{path}: header: not JSON ({exc})") from exc
            try:
                header = validate.checkpoint_header(header_data, str(path))
            except validate.Invalid as exc:
                raise StateFileError(str(exc)) from exc
            _check_spec(header["spec"], spec, str(path), StateFileError)
            n = header["n"]
            arrays = {k: _read_member(zf, by_name[f"{k}.npy"], np.dtype("<f4"), n, None, path) for k in _STATE_ARRAYS}
        except StateFileError:
            raise
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:  # a member that is cut short
            raise StateFileError(f"{path}: truncated or corrupt state file ({type(exc).__name__}: {exc})") from exc
    for k, arr in arrays.items():
        if hashlib.sha256(arr.tobytes()).hexdigest() != header["sha256"][k]:
            raise StateFileError(f"{path}: {k} does not match its sha256 in the header (corrupt file)")
    if not header.get("consistent", True):
        raise StateFileError(f"{path}: saved from a shard whose last step stopped half-way; not a usable checkpoint")
    return header, arrays


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dtype: np.dtype, n: int | None,
                 max_bytes: int | None, path: Path) -> np.ndarray:
    """One .npy member, its declared dtype, shape and byte size checked before its data is read:
    a 1-D array of `dtype` with `n` elements (or at most `max_bytes` when n is None)."""
    what = f"{path}: {info.filename}"
    with zf.open(info) as m:
        try:
            version = np.lib.format.read_magic(m)
            if version == (1, 0):
                shape, fortran, got = np.lib.format.read_array_header_1_0(m, max_header_size=_NPY_HEADER_MAX)
            elif version == (2, 0):
                shape, fortran, got = np.lib.format.read_array_header_2_0(m, max_header_size=_NPY_HEADER_MAX)
            else:
                raise StateFileError(f"{what}: .npy format version {version} (expected 1.0 or 2.0)")
        except StateFileError:
            raise
        except (ValueError, SyntaxError, EOFError, OSError) as exc:
            raise StateFileError(f"{what}: not a readable .npy member ({exc})") from exc
        if got != dtype or fortran or len(shape) != 1:
            raise StateFileError(f"{what}: is {got} {shape}{' (Fortran order)' if fortran else ''}; "
                                 f"expected a 1-D {dtype} array")
        count = shape[0]
        if n is not None and count != n:
            raise StateFileError(f"{what}: holds {count:,} elements; the header says {n:,}")
        if max_bytes is not None and count * dtype.itemsize > max_bytes:
            raise StateFileError(f"{what}: holds {count:,} bytes; at most {max_bytes:,}")
        nbytes = count * dtype.itemsize
        if info.file_size != m.tell() + nbytes:
            raise StateFileError(f"{what}: member is {info.file_size:,} bytes; its .npy header declares "
                                 f"{m.tell() + nbytes:,}")
        buf = bytearray(nbytes)
        view, got_bytes = memoryview(buf), 0
        while got_bytes < nbytes:
            k = m.readinto(view[got_bytes:])
            if not k:
                raise StateFileError(f"{what}: truncated ({got_bytes:,} of {nbytes:,} bytes)")
            got_bytes += k
    return np.frombuffer(buf, dtype=dtype)


def _no_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# Fields that only place the same arrays differently on the card (saved state is in element order).
_PLACEMENT_FIELDS = frozenset({"stripes", "rate_gps", "compute_units"})


def _check_spec(saved: dict[str, Any], spec: KernelSpec, where: str, err: type[UserError]) -> None:
    mine = spec.to_dict()
    diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k) and k not in _PLACEMENT_FIELDS)
    if diff:
        detail = ", ".join(f"{k}: saved {saved.get(k)!r} vs device {mine.get(k)!r}" for k in diff)
        raise err(f"{where}: state is for another kernel spec ({detail})")


def _as_step(step: Any) -> int:
    if _is_torch(step):
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)) or step < 0 \
            or float(step) != int(step):
        raise UserError(f"state_dict['step']: {step!r} must be a non-negative integer")
    return int(step)


def _numel(x: Any) -> int:
    if _is_torch(x):
        return int(x.numel())
    if isinstance(x, np.ndarray):
        return int(x.size)
    raise BadGradient(f"params: expected a numpy array or torch tensor, got {type(x).__name__}")


__all__ = ["ShardState", "DeviceError", "default_chunk_elems", "host_array", "read_state_file", "same_bytes"]
