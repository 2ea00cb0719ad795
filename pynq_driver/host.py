"""Host arrays the driver takes from its callers: numpy arrays or CPU torch tensors, checked and
viewed in place, scanned for inf/NaN and compared bit for bit without chunk-sized temporaries.

This module never imports torch: a tensor's own module is loaded whenever a caller passes one
(`sys.modules["torch"]`), so a ShardState takes tensors with or without `pynq_driver.optim`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

import numpy as np

from hls.errors import UserError
from hls.spec import STORAGE_DTYPES
from pynq_driver.errors import BadGradient

# Elements per block of a scan or fallback comparison (no chunk-sized temporaries).
SCAN_BLOCK = 1 << 16
_TORCH_NAME = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def is_torch(x: object) -> bool:
    """Whether `x` is an object of torch's (a tensor, a torch scalar type, ...)."""
    return type(x).__module__.split(".")[0] == "torch"


def host_array(x: object, dtype_name: str, n: int, what: str, *, writable: bool = False,
               err: type[UserError] = BadGradient) -> np.ndarray:
    """A zero-copy numpy view of a contiguous CPU array/tensor of `n` elements of `dtype_name`.

    bf16 is numpy uint16 bit patterns or a torch.bfloat16 tensor (viewed as its bits).
    """
    np_dtype = STORAGE_DTYPES[dtype_name]
    if is_torch(x):
        torch = sys.modules["torch"]  # loaded: `x` is one of its objects
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


def numel(x: Any) -> int:
    """Elements of a numpy array or torch tensor (BadGradient for anything else)."""
    if is_torch(x):
        return int(x.numel())
    if isinstance(x, np.ndarray):
        return int(x.size)
    raise BadGradient(f"params: expected a numpy array or torch tensor, got {type(x).__name__}")


def all_finite(chunk: np.ndarray, dtype_name: str, scratch: np.ndarray, zeros: np.ndarray | None) -> bool:
    """Whether the host chunk `chunk` (`dtype_name`'s storage dtype) holds no inf or NaN.

    `scratch`: uint8, at least 2 bytes per element (bf16's masked bits, fp16's verdicts); `zeros`:
    float32 zeros of at least the chunk's length for fp32 (`ShardState.finite_zeros`), or None.
    Allocates nothing.
    """
    if dtype_name == "bf16":
        return not np.any(np.bitwise_and(chunk, 0x7F80, out=scratch[: 2 * chunk.size].view(np.uint16)) == 0x7F80)
    if zeros is not None:
        # fp32: a dot product with zeros is 0 for finite values and NaN as soon as one is inf or
        # NaN (inf * 0 = NaN, and NaN survives every sum). BLAS reads the chunk at memory speed,
        # three times faster than np.isfinite, and allocates nothing.
        return not np.isnan(np.dot(chunk, zeros[: chunk.size]))
    return bool(np.isfinite(chunk, out=scratch[: chunk.size].view(np.bool_)).all())


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
    return all(np.array_equal(x[i:i + SCAN_BLOCK], y[i:i + SCAN_BLOCK]) for i in range(0, x.size, SCAN_BLOCK))


__all__ = ["SCAN_BLOCK", "all_finite", "host_array", "is_torch", "numel", "same_bytes"]
