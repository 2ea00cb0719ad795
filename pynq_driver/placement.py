"""Where a shard lives on the card: its compute units' parts, the buffers of their stripes, and
striped copies between host arrays and those buffers (hls/layout.py: stripe k holds beats k,
k + S, ...).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from hls import layout
from hls.ports import port_names, read_port
from hls.sizing import CHUNK_ELEMS
from hls.spec import BEAT_BYTES
from pynq_driver.device import Device
from pynq_driver.errors import ShardTooLarge
from pynq_driver.registers import KernelRunner

DEFAULT_CHUNK_ELEMS = CHUNK_ELEMS  # 4 MiB of fp32 gradient per staging chunk (sizing plans for it)
# Shards and buckets above the driver start on 64-byte boundaries (one 512-bit beat).
CHUNK_ALIGN = BEAT_BYTES // 4


class CuPart:
    """One compute unit's part [lo, hi) of the shard: its stripes of p, m, v (`state`), its two
    staging slots of gradient and output stripes, and the runner of its registers."""

    def __init__(self, cu: int, lo: int, hi: int, runner: KernelRunner) -> None:
        self.cu, self.lo, self.hi = cu, lo, hi
        self.runner = runner
        self.state: dict[str, list[Any]] = {}
        self.grad_stage: list[list[Any]] = []
        self.out_stage: list[list[Any]] = []

    @property
    def n(self) -> int:
        return self.hi - self.lo


def cu_ranges(n: int, cus: int, align: int) -> list[tuple[int, int]]:
    """Each compute unit's contiguous part of the shard (parts start stripe-aligned; the last may be short)."""
    per_cu = -(-n // cus)
    part = -(-per_cu // align) * align
    return [(min(n, c * part), min(n, (c + 1) * part)) for c in range(cus)]


def default_chunk_elems(dev: Device, n: int) -> int:
    """The chunk sizing planned for (1M elements), never more than one CU's part of the shard."""
    align = dev.stripes.beat_align()
    part = max(hi - lo for lo, hi in cu_ranges(n, dev.cus, align))
    return max(align, min(DEFAULT_CHUNK_ELEMS // align * align, -(-part // align) * align))


def plan_buffers(dev: Device, ranges: list[tuple[int, int]],
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
                nbytes = max(BEAT_BYTES, layout.stripe_bytes(hi - lo, 4, st.state, k))
                plan.append((cu, a, banks[read_port(a, k)], k, -1, nbytes))
        for a, elem in (("grad", spec.grad_bytes), ("out", spec.out_bytes)):
            for k in range(st.of(a)):
                nbytes = layout.stripe_bytes(min(chunk, hi - lo), elem, st.of(a), 0)
                port = port_names(a, k)[0]  # a staging array has one port per stripe
                plan += [(cu, a, banks[port], k, slot, nbytes) for slot in (0, 1)]
    return plan


def check_fits(dev: Device, n: int, chunk: int) -> None:
    """Raise ShardTooLarge (saying how many cards) if the state and staging exceed a channel."""
    ranges = cu_ranges(n, dev.cus, dev.stripes.beat_align())
    need: dict[str, int] = {}
    for _, _, bank, _, _, nbytes in plan_buffers(dev, ranges, chunk):
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


def stripe_rows(raw: np.ndarray, stripes: int) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """For the bytes `raw` of a chunk (hls/layout.py: stripe k holds beats k, k + S, ...), each stripe
    that holds beats: (k, its beats, its whole beats, a view of its whole beats, the partial tail)."""
    full = raw.size // BEAT_BYTES
    rows = raw[: full * BEAT_BYTES].reshape(full, BEAT_BYTES)
    nb = -(-raw.size // BEAT_BYTES)
    tail = raw[full * BEAT_BYTES:]
    for k in range(stripes):
        cnt = layout.stripe_beats(nb, stripes, k)
        if cnt:
            yield k, cnt, layout.stripe_beats(full, stripes, k), rows[k::stripes], tail


def stripe_scratch(bufs: list[Any], data: np.ndarray) -> np.ndarray:
    """Room for stripe 0 of `data` (the largest); none is needed with one stripe."""
    if len(bufs) == 1:
        return np.empty(0, np.uint8)
    return np.empty(layout.stripe_bytes(data.size, data.itemsize, len(bufs)), np.uint8)


def write_striped(dev: Device, bufs: list[Any], data: np.ndarray, beat0: int, tmp: np.ndarray | None = None) -> None:
    """Write `data` into its stripes `bufs`, starting at stripe beat `beat0` (a chunk's first beat / S);
    each stripe is gathered into `tmp` (uint8, at least one stripe's bytes; allocated when None)."""
    if len(bufs) == 1:
        dev.write(bufs[0], data, BEAT_BYTES * beat0)
        return
    if tmp is None:
        tmp = stripe_scratch(bufs, data)
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    for k, cnt, whole, rows, tail in stripe_rows(raw, len(bufs)):
        t = tmp[: cnt * BEAT_BYTES]
        t[: whole * BEAT_BYTES].reshape(whole, BEAT_BYTES)[...] = rows
        if whole < cnt:  # this stripe holds the last, partial beat: zero-padded, as layout.split
            t[whole * BEAT_BYTES: whole * BEAT_BYTES + tail.size] = tail
            t[whole * BEAT_BYTES + tail.size:] = 0
        dev.write(bufs[k], t, BEAT_BYTES * beat0)


def read_striped(dev: Device, bufs: list[Any], out: np.ndarray, beat0: int, tmp: np.ndarray | None = None) -> None:
    """Fill `out` from its stripes `bufs`, starting at stripe beat `beat0`: each stripe is read into
    `tmp` (uint8 scratch as for `write_striped`) and scattered into `out` in place."""
    if len(bufs) == 1:
        dev.read(bufs[0], out, BEAT_BYTES * beat0)
        return
    if tmp is None:
        tmp = stripe_scratch(bufs, out)
    for k, cnt, whole, rows, tail in stripe_rows(out.reshape(-1).view(np.uint8), len(bufs)):
        t = tmp[: cnt * BEAT_BYTES]
        dev.read(bufs[k], t, BEAT_BYTES * beat0)
        rows[...] = t[: whole * BEAT_BYTES].reshape(whole, BEAT_BYTES)
        if whole < cnt:
            tail[...] = t[whole * BEAT_BYTES: whole * BEAT_BYTES + tail.size]


__all__ = ["CHUNK_ALIGN", "DEFAULT_CHUNK_ELEMS", "CuPart", "check_fits", "cu_ranges", "default_chunk_elems",
           "plan_buffers", "read_striped", "stripe_rows", "stripe_scratch", "write_striped"]
