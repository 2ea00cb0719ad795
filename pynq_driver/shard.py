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

import hashlib
import io
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from hls.errors import UserError
from hls.golden import Hyper, prepare_scalars
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
from pynq_driver.kernel import KernelRunner

log = logging.getLogger(__name__)

DEFAULT_CHUNK_ELEMS = 1 << 20  # 4 MiB of fp32 gradient per staging buffer
# Chunks start on 64-byte boundaries in p, m and v (one 512-bit beat), whatever the lanes.
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


def default_chunk_elems(dev: Device, n: int) -> int:
    """1M elements, or less where the staging banks are smaller, never more than the shard."""
    spec = dev.spec
    limit = DEFAULT_CHUNK_ELEMS
    for args, cap in dev.bank_capacity():
        per_elem = 2 * (spec.grad_bytes * ("grad" in args) + spec.out_bytes * ("out" in args))
        if per_elem:
            limit = min(limit, cap // 2 // per_elem)  # leave half the bank to the state when shared
    return max(CHUNK_ALIGN, min(limit, -(-n // CHUNK_ALIGN) * CHUNK_ALIGN))


def check_fits(dev: Device, n: int, chunk: int) -> None:
    """Raise ShardTooLarge (saying how many cards) if the state and staging exceed a bank group."""
    spec = dev.spec
    need = {"p": 4 * n, "m": 4 * n, "v": 4 * n, "grad": 2 * chunk * spec.grad_bytes, "out": 2 * chunk * spec.out_bytes}
    for args, cap in dev.bank_capacity():
        total = sum(need.get(a, 0) for a in args)
        if total > cap:
            max_params = int(dev.manifest["sizing"]["max_params_per_card"])
            cards = math.ceil(n / max(1, max_params))
            target = dev.manifest.get("target", {}).get("name", spec.target)
            raise ShardTooLarge(
                f"a shard of {n:,} parameters needs {total:,} bytes in {'+'.join(args)} but {target} has "
                f"{cap:,} there (at most {max_params:,} parameters per card): shard the model over "
                f"at least {cards} cards"
            )


class ShardState:
    """Optimizer state of one shard of N parameters, resident on `dev` across steps."""

    def __init__(self, dev: Device, params: Any, chunk_elems: int | None = None, *, nonfinite: str = "skip") -> None:
        dev._check_open()
        if nonfinite not in NONFINITE_POLICIES:
            raise UserError(f"nonfinite: {nonfinite!r}; choose one of {', '.join(NONFINITE_POLICIES)}")
        n = _numel(params)
        if n < 1:
            raise BadGradient("params: the shard needs at least one parameter")
        p_host = host_array(params, "fp32", n, "params")
        self.dev = dev
        self.spec: KernelSpec = dev.spec
        self.backend = dev.backend
        self.n = n
        self.nonfinite = nonfinite
        if chunk_elems is None:
            chunk = default_chunk_elems(dev, n)
        else:
            if isinstance(chunk_elems, bool) or not isinstance(chunk_elems, int) or chunk_elems < CHUNK_ALIGN:
                raise UserError(f"chunk_elems: {chunk_elems!r} must be an integer >= {CHUNK_ALIGN}")
            # Round down to whole 64-byte beats so every chunk of p, m, v starts beat-aligned.
            chunk = min(chunk_elems // CHUNK_ALIGN * CHUNK_ALIGN, -(-n // CHUNK_ALIGN) * CHUNK_ALIGN)
        self.chunk_elems = chunk
        check_fits(dev, n, chunk)
        self.runner = KernelRunner(dev)
        banks = dev.banks()
        self._bufs = []
        try:
            self.p = self._alloc(4 * n, banks["p"])
            self.m = self._alloc(4 * n, banks["m"])
            self.v = self._alloc(4 * n, banks["v"])
            self.grad_stage = [self._alloc(chunk * self.spec.grad_bytes, banks["grad"]) for _ in range(2)]
            self.out_stage = [self._alloc(chunk * self.spec.out_bytes, banks["out"]) for _ in range(2)]
            zeros = np.zeros(min(n, chunk), np.float32)
            for lo, hi in self._chunks():
                dev.write(self.p, p_host[lo:hi], 4 * lo)
                dev.write(self.m, zeros[: hi - lo], 4 * lo)
                dev.write(self.v, zeros[: hi - lo], 4 * lo)
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
        c = self.chunk_elems
        return [(lo, min(lo + c, self.n)) for lo in range(0, self.n, c)]

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
        dev, run = self.dev, self.runner
        launched = 0

        def launch(i: int) -> None:
            nonlocal launched
            lo, hi = chunks[i]
            slot = i % 2
            run.launch(
                {"grad": (self.grad_stage[slot], 0), "p": (self.p, 4 * lo), "m": (self.m, 4 * lo),
                 "v": (self.v, 4 * lo), "out": (self.out_stage[slot], 0)},
                hi - lo, bits,
            )
            launched += 1

        def collect(i: int) -> None:
            lo, hi = chunks[i]
            dev.read(self.out_stage[i % 2], result[lo:hi])

        try:
            dev.write(self.grad_stage[0], g[chunks[0][0] : chunks[0][1]])
            launch(0)
            for i in range(1, len(chunks)):
                lo, hi = chunks[i]
                dev.write(self.grad_stage[i % 2], g[lo:hi])  # overlaps the kernel on chunk i-1
                run.wait()
                launch(i)
                collect(i - 1)  # overlaps the kernel on chunk i
            run.wait()
            collect(len(chunks) - 1)
        except BaseException as exc:
            if launched:
                self.inconsistent = (
                    f"step {step} stopped after {launched} of {len(chunks)} chunks ({type(exc).__name__}); "
                    f"the state on the card mixes steps {self.step_count} and {step}"
                )
            raise

    # ---- reading and restoring the state ------------------------------------------------------
    def _read_state(self, buf: Any) -> np.ndarray:
        self._check_open()
        out = np.empty(self.n, np.float32)
        for lo, hi in self._chunks():
            self.dev.read(buf, out[lo:hi], 4 * lo)
        return out

    def params(self) -> np.ndarray:
        """A copy of the fp32 master parameters, read from the card."""
        return self._read_state(self.p)

    def state_dict(self) -> dict[str, Any]:
        """`torch.optim.AdamW` per-parameter state (step, exp_avg, exp_avg_sq) plus the fp32 params."""
        return {
            "step": self.step_count,
            "exp_avg": self._read_state(self.m),
            "exp_avg_sq": self._read_state(self.v),
            "params": self._read_state(self.p),
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
        for (key, buf) in (("params", self.p), ("exp_avg", self.m), ("exp_avg_sq", self.v)):
            for lo, hi in self._chunks():
                self.dev.write(buf, arrays[key][lo:hi], 4 * lo)
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


def read_state_file(path: str | os.PathLike[str], spec: KernelSpec) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Header and arrays of a saved shard, verified (format, spec, lengths, sha256)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise StateFileError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            names = set(z.files)
            if not {"header", *_STATE_ARRAYS} <= names:
                raise StateFileError(f"{path}: not an optimusnic shard file (arrays: {', '.join(sorted(names))})")
            header = json.loads(bytes(z["header"]).decode())
            arrays = {k: z[k] for k in _STATE_ARRAYS}
    except StateFileError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, EOFError, ValueError from a truncated member
        raise StateFileError(f"{path}: truncated or corrupt state file ({type(exc).__name__}: {exc})") from exc
    if header.get("format") != STATE_FORMAT or header.get("version") != STATE_VERSION:
        raise StateFileError(f"{path}: format {header.get('format')!r} v{header.get('version')!r}, "
                             f"expected {STATE_FORMAT!r} v{STATE_VERSION}")
    _check_spec(header.get("spec", {}), spec, str(path), StateFileError)
    n = header.get("n")
    for k, arr in arrays.items():
        if arr.dtype != np.float32 or arr.shape != (n,):
            raise StateFileError(f"{path}: {k} is {arr.dtype} {arr.shape}, header says float32 ({n},)")
        if hashlib.sha256(arr.tobytes()).hexdigest() != header["sha256"].get(k):
            raise StateFileError(f"{path}: {k} does not match its sha256 in the header (corrupt file)")
    if not header.get("consistent", True):
        raise StateFileError(f"{path}: saved from a shard whose last step stopped half-way; not a usable checkpoint")
    return header, arrays


def _check_spec(saved: dict[str, Any], spec: KernelSpec, where: str, err: type[UserError]) -> None:
    mine = spec.to_dict()
    diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
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


__all__ = ["ShardState", "DeviceError", "default_chunk_elems", "read_state_file", "host_array"]
