"""Where an array's elements live in its stripes (design.md section 3b): the one layout rule.

An array of n elements is cut into 64-byte beats (16 fp32 or 32 bf16/fp16 elements; the last
beat padded). With S stripes, stripe k holds beats k, k + S, k + 2S, ... back to back, so every
stripe is read or written sequentially and all stripes advance together. The kernels (HLS and
RTL), the simulated cards and the driver all use these functions or mirror them exactly.
"""

from __future__ import annotations

import numpy as np

from hls.spec import BEAT_BYTES

RING_MAX_STRIPES = 8  # a ring stream's stripes: a power of two up to this (onic_net_stripe_run's STRIPES)


def ring_stripes_ok(stripes: int) -> bool:
    """A ring stream's stripe count: a power of two from 1 to RING_MAX_STRIPES."""
    return 1 <= stripes <= RING_MAX_STRIPES and stripes & (stripes - 1) == 0


def run_stripes(first_beat: int, run_beats: int, stripes: int) -> list[tuple[int, int]]:
    """The run of beats [first_beat, first_beat + run_beats) of a striped array, per stripe k: (the index
    of its first beat in stripe k, its beats there), as onic_net_stripe_run computes them with
    s = log2(stripes): first = (first_beat + stripes - 1 - k) >> s = ceil((first_beat - k) / stripes),
    count = ((first_beat + run_beats + stripes - 1 - k) >> s) - first. The run's beats come from
    stripes first_beat mod stripes, then the next, round robin (onic_beat_merge's start turn)."""
    if not ring_stripes_ok(stripes):
        raise ValueError(f"stripes: {stripes} is not a power of two from 1 to {RING_MAX_STRIPES}")
    s = stripes.bit_length() - 1
    out = []
    for k in range(stripes):
        first = (first_beat + stripes - 1 - k) >> s
        out.append((first, ((first_beat + run_beats + stripes - 1 - k) >> s) - first))
    return out


def beats(n: int, elem_bytes: int) -> int:
    """64-byte beats that hold n elements of elem_bytes each."""
    return -(-n * elem_bytes // BEAT_BYTES)


def stripe_beats(total_beats: int, stripes: int, k: int) -> int:
    """Beats stripe k holds of an array of total_beats beats split over `stripes`."""
    return max(0, -(-(total_beats - k) // stripes))


def stripe_bytes(n: int, elem_bytes: int, stripes: int, k: int = 0) -> int:
    """Bytes of stripe k (stripe 0 is the largest: the size to allocate for every stripe)."""
    return stripe_beats(beats(n, elem_bytes), stripes, k) * BEAT_BYTES


def split(data: np.ndarray, stripes: int) -> list[np.ndarray]:
    """Stripe a 1-D array: one uint8 array of whole beats per stripe (the last beat zero-padded)."""
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    nb = -(-raw.size // BEAT_BYTES)
    padded = np.zeros(nb * BEAT_BYTES, np.uint8)
    padded[: raw.size] = raw
    rows = padded.reshape(nb, BEAT_BYTES)
    return [np.ascontiguousarray(rows[k::stripes]).reshape(-1) for k in range(stripes)]


def join(parts: list[np.ndarray], n: int, dtype: np.dtype | type) -> np.ndarray:
    """The inverse of `split`: n elements of `dtype` gathered back from their stripes."""
    dt = np.dtype(dtype)
    stripes = len(parts)
    nb = beats(n, dt.itemsize)
    rows = np.empty((nb, BEAT_BYTES), np.uint8)
    for k, part in enumerate(parts):
        count = stripe_beats(nb, stripes, k)
        rows[k::stripes] = np.asarray(part, np.uint8).reshape(-1)[: count * BEAT_BYTES].reshape(count, BEAT_BYTES)
    return rows.reshape(-1)[: n * dt.itemsize].view(dt).copy()
