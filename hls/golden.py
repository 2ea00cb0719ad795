"""The golden model: the update semantics of design.md section 3, op by op, in numpy float32.

This is the one source of truth for what every kernel computes. The HLS template and the RTL
datapath mirror the order of operations below; C simulation and RTL simulation must equal this
model bit for bit (NaN equals any NaN).

numpy evaluates each float32 ufunc as one IEEE-754 binary32 operation, round to nearest even,
with subnormals kept and no fused multiply-add, which is exactly the kernel's arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hls.spec import GRAD_DTYPES, OPTIMIZERS, OUT_DTYPES

F32 = np.float32
BF16_NAN = np.uint16(0x7FC0)
F32_NAN_BITS = 0x7FC00000

# Names of the scalar registers, in register-map order. Which of them a kernel has depends on
# the optimizer: AdamW has `decay` and no `l2`; Adam has `l2` and no `decay`.
SCALAR_NAMES = ("step_size", "rbc2", "decay", "l2", "b1", "omb1", "b2", "omb2", "eps", "gs")


def scalar_names(optimizer: str) -> tuple[str, ...]:
    drop = "l2" if optimizer == "adamw" else "decay"
    return tuple(n for n in SCALAR_NAMES if n != drop)


@dataclass(frozen=True)
class Hyper:
    """Host-side hyperparameters of one step (what torch keeps in a param group, plus `step`)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 1e-2
    step: int = 1  # 1-based step count after increment, as torch
    grad_scale: float = 1.0  # multiplies the gradient on the card (unscale and clip factor)
    bias_correction: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, (int, np.integer)) or self.step < 1:
            raise ValueError(f"step: {self.step!r} must be an integer >= 1 (1-based, as torch counts)")
        for name in ("lr", "beta1", "beta2", "eps", "weight_decay", "grad_scale"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.floating)) or not math.isfinite(value):
                raise ValueError(f"{name}: {value!r} must be a finite number")
        if not 0.0 <= self.beta1 < 1.0 or not 0.0 <= self.beta2 < 1.0:
            raise ValueError(f"betas: ({self.beta1}, {self.beta2}) must each be in [0, 1)")
        if self.lr < 0 or self.eps < 0 or self.weight_decay < 0:
            raise ValueError("lr, eps and weight_decay must be >= 0")


@dataclass(frozen=True)
class Scalars:
    """The fp32 scalars the kernel receives as 32-bit registers (rounded once from float64)."""

    step_size: np.float32
    rbc2: np.float32
    decay: np.float32
    l2: np.float32
    b1: np.float32
    omb1: np.float32
    b2: np.float32
    omb2: np.float32
    eps: np.float32
    gs: np.float32

    def registers(self, optimizer: str) -> dict[str, int]:
        """Register name -> 32-bit pattern, only the scalars `optimizer`'s kernel has."""
        return {n: int(np.asarray(getattr(self, n), F32).view(np.uint32)) for n in scalar_names(optimizer)}


def prepare_scalars(hyper: Hyper, optimizer: str) -> Scalars:
    """design.md section 3: float64 on the host, one rounding to fp32 per scalar."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    t = int(hyper.step)
    beta1, beta2 = float(hyper.beta1), float(hyper.beta2)
    if hyper.bias_correction:
        bc1 = 1.0 - beta1**t
        bc2 = 1.0 - beta2**t
    else:
        bc1 = bc2 = 1.0
    adamw = optimizer == "adamw"
    lr, wd = float(hyper.lr), float(hyper.weight_decay)
    return Scalars(
        step_size=F32(lr / bc1),
        rbc2=F32(1.0 / math.sqrt(bc2)),
        decay=F32(1.0 - lr * wd) if adamw else F32(1.0),
        l2=F32(0.0) if adamw else F32(wd),
        b1=F32(beta1),
        omb1=F32(1.0 - beta1),
        b2=F32(beta2),
        omb2=F32(1.0 - beta2),
        eps=F32(hyper.eps),
        gs=F32(hyper.grad_scale),
    )


def widen_grad(grad: np.ndarray, grad_dtype: str) -> np.ndarray:
    """Gradient as fp32, exactly: bf16 arrives as its uint16 bit patterns, fp16 as float16."""
    if grad_dtype == "fp32":
        if grad.dtype != np.float32:
            raise TypeError(f"fp32 gradients must be float32 arrays, got {grad.dtype}")
        return grad
    if grad_dtype == "fp16":
        if grad.dtype != np.float16:
            raise TypeError(f"fp16 gradients must be float16 arrays, got {grad.dtype}")
        return grad.astype(F32)
    if grad_dtype == "bf16":
        if grad.dtype != np.uint16:
            raise TypeError(f"bf16 gradients must be uint16 arrays of bf16 bit patterns, got {grad.dtype}")
        return (grad.astype(np.uint32) << 16).view(F32)
    raise ValueError(f"grad_dtype: {grad_dtype!r}; choose one of {', '.join(GRAD_DTYPES)}")


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit patterns, round to nearest even; NaN -> 0x7FC0 (what the hardware emits)."""
    bits = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    out = rounded.astype(np.uint16)
    out[np.isnan(x)] = BF16_NAN
    return out


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(F32)


def adam_update(
    p: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    grad: np.ndarray,
    scalars: Scalars,
    *,
    optimizer: str = "adamw",
    grad_dtype: str = "fp32",
    out_dtype: str = "fp32",
) -> np.ndarray:
    """One step on a shard, in place on `p`, `m`, `v` (float32); returns the output parameters.

    The output is float32, or uint16 bf16 bit patterns when `out_dtype` is "bf16".
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer: {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype: {out_dtype!r}; choose one of {', '.join(OUT_DTYPES)}")
    for name, arr in (("p", p), ("m", m), ("v", v)):
        if arr.dtype != F32 or arr.shape != p.shape:
            raise TypeError(f"{name}: expected float32 of shape {p.shape}, got {arr.dtype} {arr.shape}")
    s = scalars
    with np.errstate(all="ignore"):
        g = widen_grad(grad, grad_dtype) * s.gs
        # torch.optim.Adam adds the L2 term only when weight_decay != 0, so p = +-inf with
        # weight_decay 0 gives no 0 * inf = NaN (design.md section 3).
        if optimizer == "adam" and s.l2 != 0:
            g = g + s.l2 * p
        else:
            p *= s.decay
        m[...] = s.b1 * m + s.omb1 * g
        v[...] = s.b2 * v + s.omb2 * (g * g)
        d = np.sqrt(v) * s.rbc2 + s.eps
        p -= s.step_size * (m / d)
    return to_bf16_bits(p) if out_dtype == "bf16" else p.copy()


def bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bit equality where any NaN equals any NaN (float32, or uint16 bf16 patterns)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype == np.uint16:
        nan_a = ((a & 0x7F80) == 0x7F80) & ((a & 0x7F) != 0)
        nan_b = ((b & 0x7F80) == 0x7F80) & ((b & 0x7F) != 0)
        return (a == b) | (nan_a & nan_b)
    ua = a.view(np.uint32)
    ub = b.view(np.uint32)
    return (ua == ub) | (np.isnan(a) & np.isnan(b))


def first_mismatch(a: np.ndarray, b: np.ndarray) -> int | None:
    """Index of the first element where `a` and `b` differ bit-wise (NaN equals NaN), else None."""
    bad = np.flatnonzero(~bits_equal(a, b))
    return int(bad[0]) if bad.size else None
