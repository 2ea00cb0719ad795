"""The ring collective's schedule and the exact reference of one optimizer step (design.md 8.1).

N ranks in a ring; rank r sends to (r + 1) mod N. The flat vector of L elements is padded with
zeros to N x S, S = `chunk_elems(L, N)`; chunk c = elements [c S, (c + 1) S) is owned by rank c.

- Reduce-scatter hop k (0 .. N - 2): rank r sends chunk `rs_send_chunk(r, k, N)` = (r - 1 - k) mod N.
  The receiver adds its own gradient on the right: chunk c = ((g[c+1] + g[c+2]) + ...) + g[c].
- All-gather hop k: rank r sends chunk `ag_send_chunk(r, k, N)` = (r - k) mod N; the owner starts.

Wire dtypes: "fp32" (float32 arrays) or "bf16" (uint16 arrays of bf16 bit patterns, as
`hls.spec.STORAGE_DTYPES`). A bf16 hop widens both operands to fp32, adds once and rounds to
nearest even (`add_partial`).

`ring_step` is the reference the card model (`hls.net.card`) and every implementation of a card
must equal bit for bit: reduce-scatter, the owner's `hls.golden.adam_update` with grad_scale =
host scale / N (times the clip coefficient in the two-phase step), all-gather.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hls.golden import Hyper, adam_update, prepare_scalars, to_bf16_bits, widen_grad
from hls.net.wire import validate_wire_dtype

CHUNK_ALIGN_ELEMS = 16  # one 64-byte beat of fp32
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s guard in max_norm / (total_norm + eps)
STORAGE = {"fp32": np.dtype(np.float32), "bf16": np.dtype(np.uint16)}


def validate_world(world: int) -> int:
    if isinstance(world, bool) or not isinstance(world, int) or not 2 <= world <= 255:
        raise ValueError(f"world: {world!r} must be an integer in 2 .. 255 (a ring of cards)")
    return world


def chunk_elems(length: int, world: int) -> int:
    """S: ceil(L / N) rounded up to a multiple of 16 elements (whole 64-byte beats of fp32)."""
    validate_world(world)
    if length < 1:
        raise ValueError(f"length: {length} must be >= 1")
    per_rank = -(-length // world)
    return -(-per_rank // CHUNK_ALIGN_ELEMS) * CHUNK_ALIGN_ELEMS


def rs_send_chunk(rank: int, hop: int, world: int) -> int:
    """The chunk whose partial sum `rank` sends at reduce-scatter hop `hop`."""
    return (rank - 1 - hop) % world


def rs_recv_chunk(rank: int, hop: int, world: int) -> int:
    """The chunk `rank` receives from its predecessor at reduce-scatter hop `hop` (its own at N - 2)."""
    return rs_send_chunk(rank - 1, hop, world)


def ag_send_chunk(rank: int, hop: int, world: int) -> int:
    """The chunk `rank` sends at all-gather hop `hop` (hop 0: the one it owns)."""
    return (rank - hop) % world


def ag_recv_chunk(rank: int, hop: int, world: int) -> int:
    """The chunk `rank` receives at all-gather hop `hop`; it forwards it unless hop = N - 2."""
    return ag_send_chunk(rank - 1, hop, world)


def pad(vector: np.ndarray, world: int) -> np.ndarray:
    """`vector` with zeros appended to N x S elements (a copy)."""
    out = np.zeros(world * chunk_elems(vector.size, world), dtype=vector.dtype)
    out[: vector.size] = vector
    return out


def check_wire_array(array: np.ndarray, wire_dtype: str, what: str = "gradient") -> np.ndarray:
    want = STORAGE[validate_wire_dtype(wire_dtype)]
    if not isinstance(array, np.ndarray) or array.dtype != want or array.ndim != 1:
        got = getattr(array, "dtype", type(array).__name__)
        raise TypeError(f"{what}: expected a 1-D {want} array for wire dtype {wire_dtype}, got {got}")
    return array


def add_partial(partial: np.ndarray, own: np.ndarray, wire_dtype: str) -> np.ndarray:
    """One hop's addition: the received partial (left operand) + the card's own gradient.

    fp32: one IEEE-754 binary32 addition per element. bf16: widen both to fp32 (exact), add in
    fp32, round the sum to bf16 (nearest even; NaN becomes 0x7FC0).
    """
    with np.errstate(all="ignore"):
        if wire_dtype == "fp32":
            return partial + own
        return to_bf16_bits(widen_grad(partial, "bf16") + widen_grad(own, "bf16"))


def reduce_scatter(local_grads: Sequence[np.ndarray], wire_dtype: str) -> list[np.ndarray]:
    """Each rank's reduced chunk (S elements, wire dtype) in the pinned order of design.md 8.1."""
    world = validate_world(len(local_grads))
    length = local_grads[0].size
    for g in local_grads:
        check_wire_array(g, wire_dtype)
        if g.size != length:
            raise ValueError(f"local gradients differ in length: {g.size} != {length}")
    size = chunk_elems(length, world)
    padded = [pad(g, world) for g in local_grads]
    out = []
    for c in range(world):
        part = slice(c * size, (c + 1) * size)
        acc = padded[(c + 1) % world][part].copy()
        for j in range(2, world + 1):  # the last addition (j = N) is the owner's own gradient
            acc = add_partial(acc, padded[(c + j) % world][part], wire_dtype)
        out.append(acc)
    return out


def all_gather(shards: Sequence[np.ndarray], length: int) -> np.ndarray:
    """The full vector every rank ends with: the owners' chunks in rank order, trimmed to L."""
    world = validate_world(len(shards))
    size = chunk_elems(length, world)
    for r, s in enumerate(shards):
        if s.shape != (size,) or s.dtype != shards[0].dtype:
            raise ValueError(f"shard {r}: expected {size} elements of {shards[0].dtype}, got {s.shape} {s.dtype}")
    return np.concatenate(list(shards))[:length].copy()


# The sum of squares' fixed order, shaped for hardware that takes a 64-byte beat per clock: a
# pairwise tree over each beat's squares, SUMSQ_SLOTS interleaved accumulators over the beats
# (beat b into slot b mod SUMSQ_SLOTS: an f64 adder's latency is hidden), a pairwise tree over the
# slots. One sequential chain in element order would run at one element per adder latency.
SUMSQ_SLOTS = 8
# A non-finite sum is reported as this quiet NaN or +inf: numpy keeps a NaN operand's sign and
# payload, the RTL adders give the canonical one, and the frames must be equal byte for byte.
SUMSQ_NAN_BITS = 0x7FF8000000000000


def _pairwise(values: np.ndarray) -> np.ndarray:
    """Adjacent pairs added level by level along the last axis (its length a power of two)."""
    while values.shape[-1] > 1:
        values = values[..., 0::2] + values[..., 1::2]
    return values[..., 0]


def chunk_scalars(reduced: np.ndarray, wire_dtype: str) -> tuple[float, bool]:
    """The two-phase step's per-chunk scalars: sum of squares (float64, fixed order) and non-finite flag.

    The squares of the widened fp32 values are exact in float64. Order (design.md 8.1): the chunk
    in 64-byte beats of the wire dtype (16 fp32 or 32 bf16 elements; a short last beat padded
    with +0), each beat's squares added as a pairwise tree, beat b added into accumulator
    b mod SUMSQ_SLOTS (each a sequential float64 chain from +0), the accumulators added as a
    pairwise tree. Every partial is >= +0, so the +0 padding changes nothing. A NaN sum is
    SUMSQ_NAN_BITS.
    """
    wide = widen_grad(reduced, wire_dtype).astype(np.float64)
    finite = bool(np.isfinite(wide).all())
    lanes = 16 if validate_wire_dtype(wire_dtype) == "fp32" else 32
    squares = wide * wide
    beats = -(-squares.size // lanes)
    slots_rows = -(-beats // SUMSQ_SLOTS)
    padded = np.zeros(slots_rows * SUMSQ_SLOTS * lanes, dtype=np.float64)
    padded[: squares.size] = squares
    per_beat = _pairwise(padded.reshape(-1, lanes))
    # np.cumsum along axis 0 is a sequential chain per column (np.sum could pair them)
    slots = np.cumsum(per_beat.reshape(-1, SUMSQ_SLOTS), axis=0)[-1] if slots_rows else np.zeros(SUMSQ_SLOTS)
    total = float(_pairwise(slots))
    if math.isnan(total):
        total = float(np.array(SUMSQ_NAN_BITS, dtype=np.uint64).view(np.float64))
    return total, not finite


def step_grad_scale(
    scalars: Sequence[tuple[float, bool]] | None, world: int, *, grad_scale: float = 1.0, max_norm: float | None = None
) -> float | None:
    """The float64 gradient scale of the step (the kernel rounds it once to fp32), or None to skip.

    One-phase (`scalars` None): grad_scale / N. Two-phase: the ranks' sums of squares are added
    in rank order (float64); the clipped quantity is the averaged, unscaled gradient (what a DDP
    user clips), so total_norm = sqrt(sum) x |grad_scale| / N and coef = min(max_norm /
    (total_norm + 1e-6), 1) as torch.nn.utils.clip_grad_norm_; a non-finite flag on any rank
    returns None (every card skips the update).
    """
    base = float(grad_scale) / world
    if scalars is None:
        return base
    if len(scalars) != world:
        raise ValueError(f"expected {world} scalars, got {len(scalars)}")
    if any(flag for _, flag in scalars):
        return None
    if max_norm is None:
        return base
    total = 0.0
    for sumsq, _ in scalars:  # rank order 0 .. N - 1
        total += sumsq
    total_norm = math.sqrt(total) * abs(base)
    coef = min(float(max_norm) / (total_norm + CLIP_EPS), 1.0)
    return base * coef


@dataclass
class Shard:
    """One owner's optimizer state: fp32 masters and both moments of its chunk (S elements)."""

    p: np.ndarray
    m: np.ndarray
    v: np.ndarray

    @classmethod
    def from_params(cls, params: np.ndarray, rank: int, world: int) -> Shard:
        """Rank `rank`'s shard of the full float32 parameter vector, zero moments."""
        if params.dtype != np.float32 or params.ndim != 1:
            raise TypeError(f"params: expected a 1-D float32 array, got {params.dtype} {params.shape}")
        size = chunk_elems(params.size, world)
        p = pad(params, world)[rank * size : (rank + 1) * size].copy()
        return cls(p, np.zeros_like(p), np.zeros_like(p))

    def copy(self) -> Shard:
        return Shard(self.p.copy(), self.m.copy(), self.v.copy())


def output_params(p: np.ndarray, out_dtype: str) -> np.ndarray:
    """The kernel's output for unchanged masters (a skipped step): fp32 copy or bf16 bits."""
    return to_bf16_bits(p) if out_dtype == "bf16" else p.copy()


def shard_update(
    shard: Shard, reduced: np.ndarray, hyper: Hyper, scale: float | None, *, wire_dtype: str, out_dtype: str,
    optimizer: str,
) -> np.ndarray:
    """The owner's kernel: `adam_update` in place with grad_scale = `scale`; None skips the update."""
    if scale is None:
        return output_params(shard.p, out_dtype)
    scalars = prepare_scalars(dataclasses.replace(hyper, grad_scale=scale), optimizer)
    return adam_update(shard.p, shard.m, shard.v, reduced, scalars, optimizer=optimizer, grad_dtype=wire_dtype,
                       out_dtype=out_dtype)


@dataclass
class StepResult:
    shards: list[Shard]  # each owner's p, m, v after the step
    gathered: np.ndarray  # the full parameter vector (L elements, out dtype), the same on every rank
    reduced: list[np.ndarray]  # each owner's reduced chunk (wire dtype)
    grad_scale: float | None  # the float64 scale the kernels used; None: the step was skipped


def ring_step(
    shards: Sequence[Shard],
    local_grads: Sequence[np.ndarray],
    hyper: Hyper,
    *,
    wire_dtype: str = "fp32",
    out_dtype: str = "fp32",
    optimizer: str = "adamw",
    two_phase: bool = False,
    max_norm: float | None = None,
) -> StepResult:
    """One optimizer step of N ranks, exactly as the cards compute it; the inputs are not modified.

    `hyper.grad_scale` is the host's unscale factor; the kernels get it x 1/N (x the clip coefficient).
    `max_norm` needs `two_phase`.
    """
    if max_norm is not None and not two_phase:
        raise ValueError("max_norm needs the two-phase step (two_phase=True)")
    world = validate_world(len(local_grads))
    if len(shards) != world:
        raise ValueError(f"{len(shards)} shards for {world} ranks")
    reduced = reduce_scatter(local_grads, wire_dtype)
    scalars = [chunk_scalars(r, wire_dtype) for r in reduced] if two_phase else None
    scale = step_grad_scale(scalars, world, grad_scale=hyper.grad_scale, max_norm=max_norm)
    new = [s.copy() for s in shards]
    outs = [shard_update(s, r, hyper, scale, wire_dtype=wire_dtype, out_dtype=out_dtype, optimizer=optimizer)
            for s, r in zip(new, reduced, strict=True)]
    return StepResult(new, all_gather(outs, local_grads[0].size), reduced, scale)
