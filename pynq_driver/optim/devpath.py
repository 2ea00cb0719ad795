"""The staged data path between an accelerator's memory (a GPU) and the card: NicAdamW's step for
parameters that do not live in host memory, and, forced (`data_path="pipeline"`), for CPU tensors.

The direct path (`CardBucket.run`) reads each gradient chunk into host memory, compares the
parameters with the card's masters and writes the results back, every copy blocking; for tensors
on a GPU each of those copies crosses PCIe through pageable memory and serialises with the
compute stream. This path instead:

- stages through a ring of `RING` chunk-sized host buffers, pinned where an accelerator is present
  (a gradient half and an output half each), which the card reads and writes directly where card
  memory is host memory (`Device.import_host`, the software cards) and DMAs from/to elsewhere;
- orders itself after the compute stream with an event (recorded when `step()` is called: after
  backward, and after FSDP2's reduce-scatter, whose stream the current stream already waited on),
  on two side streams: device->host copies ("d2h", the gradients) and host->device copies ("h2d",
  the results), `non_blocking`, one event per chunk;
- keeps `RING` chunks in flight: while the card runs chunk k, the gradient copies of chunks k+1
  and k+2 and the result copy of chunk k-1 are queued or running;
- ends with the compute stream waiting on the last copies' events, not with a host synchronisation:
  `step()` returns while the last results are still being copied, and the next kernel on the
  compute stream sees the new parameters;
- detects changes to the parameters between steps on the device, without crossing PCIe: a 64-bit
  hash of each tensor's bits (`tensor_hash`, torch ops on the accelerator; `HostHash`, CRC-32 and
  SHA-1, for host tensors) is accumulated part by part as the step's results are copied back
  (queued behind each copy on the result stream), and taken again at the next step, on the
  gradient stream just before the tensor's first gradient copy; its flag (changed or not) comes to
  the host with that chunk. Only tensors whose hash differs (or is not known: the first step, and
  after anything else wrote the card's masters, e.g. `load_state_dict` or
  `optimizer.state[p][...] = ...`) are read back and compared bit for bit with the card's masters
  as the direct path does, before the card runs their first chunk. What is detected: any change
  of the tensor's bits by any means (`p.data.copy_`, which `p._version` does not see,
  `model.load_state_dict`, a broadcast, in-place ops, `p.data = other`); a change of one element
  always changes the hash (every step of `tensor_hash` is a bijection of that element's bits;
  CRC-32 sees any change within 32 bits), a change of several is missed only if two 64-bit
  hashes collide. `detect_changes=False` skips the hashes too.

Device-agnostic: streams and events are `torch.Stream` / `torch.Event` of
`torch.accelerator.current_accelerator()`. CPU tensors have no streams or events in torch; for
them `TraceStream`/`TraceEvent` stand in: every operation runs when it is issued (CPU copies are
synchronous) and is appended to `DevicePath.trace`, so a test can assert the order the path issues
things in; the soft card's kernels run on their own thread, so the copies do overlap them there.
"""

from __future__ import annotations

import hashlib
import os
import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hls.errors import UserError
from pynq_driver.optim.buckets import slot_parts
from pynq_driver.pipeline import Lent, Piece

RING = 3  # host buffers in the ring: the chunk on the card, the one arriving, the one leaving
TRACE_KEEP = 1 << 16  # entries of the CPU trace kept (the latest): a long forced run does not grow it without end
DATA_PATHS = ("auto", "direct", "pipeline")
DATA_PATH_ENV = "OPTIMUSNIC_DATA_PATH"
_HASH_BLOCK = 1 << 20  # elements per block of the hash (int64 temporaries of 8 MiB at most)
# Constants of the hash (splitmix64's): odd multipliers, so every multiplication is a bijection.
_H_STEP = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: the position's offset
_H_MUL1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_H_MUL2 = -7723592293110705685  # 0x94D049BB133111EB


def data_path_option(value: Any) -> str:
    """The `data_path=` option, or the OPTIMUSNIC_DATA_PATH environment variable when not given."""
    if value is None:
        value = os.environ.get(DATA_PATH_ENV, "auto") or "auto"
        where = f"{DATA_PATH_ENV}={value!r}"
    else:
        where = f"data_path={value!r}"
    if value not in DATA_PATHS:
        raise UserError(f"{where}: choose one of {', '.join(DATA_PATHS)}")
    return str(value)


_STAGING: dict[str, bool] = {}


def stages(device: torch.device) -> bool:
    """Whether tensors on `device` can take the staged path with real streams: `device` is torch's
    current accelerator and offers streams and pinned host memory (probed once per device type).
    Host tensors, and a device type without them (a custom PrivateUse1 backend without hooks),
    take the direct path under `data_path="auto"`."""
    if device.type == "cpu" or not torch.accelerator.is_available():
        return False
    accel = torch.accelerator.current_accelerator()
    if accel is None or accel.type != device.type:
        return False
    if device.type not in _STAGING:
        try:
            torch.accelerator.current_stream(device)
            torch.empty(1, pin_memory=True)
            _STAGING[device.type] = True
        except (RuntimeError, NotImplementedError):
            _STAGING[device.type] = False
    return _STAGING[device.type]


def tensor_hash(t: torch.Tensor, index: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
    """A 64-bit hash (0-d int64 tensor, on `t`'s device) of the bits of the 1-D tensor `t` (4- or
    2-byte elements), computed where `t` lives (an accelerator's tensors: no copy over the bus),
    block by block. Each element's bits, widened and offset by a multiple of its position, go
    through splitmix64's multiply-xorshift-multiply (each step a bijection) and are summed modulo
    2**64: changing one element always changes the sum. Being a sum, the hash of a tensor is the
    sum of its parts' (`start`: where `t` starts in the whole). `index`: a cached arange of a block."""
    bits = t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int16)
    n = bits.numel()
    blk_n = min(n, _HASH_BLOCK)
    if index is None or index.numel() < blk_n:
        index = torch.arange(blk_n, dtype=torch.int64, device=t.device)
    offsets = index[:blk_n] * _H_STEP
    v = torch.empty(blk_n, dtype=torch.int64, device=t.device)
    tmp = torch.empty_like(v)
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for a in range(0, n, _HASH_BLOCK):
        blk = bits[a:a + _HASH_BLOCK]
        m = blk.numel()
        x, y = v[:m], tmp[:m]
        x.copy_(blk)
        x.add_(offsets[:m]).add_(_wrap((start + a) * _H_STEP)).mul_(_H_MUL1)
        torch.bitwise_right_shift(x, 31, out=y)
        x.bitwise_xor_(y.bitwise_and_((1 << 33) - 1)).mul_(_H_MUL2)  # logical shift: the xorshift is bijective
        total += x.sum()
    return total


class HostHash:
    """The hash of a host tensor's bits, fed part by part in order: where tensors live in host
    memory this is the "hash on the device". CRC-32 in the high half (certain to change with any
    change confined to 32 consecutive bits, so with any one element) and 32 bits of SHA-1 in the
    low half, both at memory speed (hardware instructions) and without the GIL."""

    def __init__(self) -> None:
        self.crc = 0
        self.sha = hashlib.sha1(usedforsecurity=False)

    def update(self, t: torch.Tensor) -> None:
        m = memoryview(_np(t.contiguous()).reshape(-1).view(np.uint8))
        self.crc = zlib.crc32(m, self.crc)
        self.sha.update(m)

    def value(self) -> int:
        return _wrap(self.crc << 32 | int.from_bytes(self.sha.digest()[:4], "little"))


def host_hash(t: torch.Tensor) -> int:
    """`HostHash` of the whole host tensor `t`."""
    h = HostHash()
    h.update(t)
    return h.value()


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """`dst.copy_(src, non_blocking=True)`; between host tensors a plain memcpy (numpy), which
    does not wake torch's intra-op threads for a copy."""
    if dst.device.type == src.device.type == "cpu" and dst.is_contiguous() and src.is_contiguous() \
            and dst.dtype == src.dtype:
        np.copyto(_np(dst), _np(src))
    else:
        dst.copy_(src, non_blocking=True)


def _wrap(x: int) -> int:
    """`x` modulo 2**64 as a signed 64-bit integer (torch's int64 arithmetic wraps alike)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >> 63 else x


# ---- streams and events: torch's on an accelerator, a recording stand-in on the CPU ---------------
class TraceEvent:
    """`torch.Event` for CPU tensors: recorded when issued (the work before it already ran),
    remembering when (`perf_counter`), and logged."""

    def __init__(self, trace: list[tuple[Any, ...]], name: str) -> None:
        self.trace, self.name, self.when = trace, name, None

    def record(self, stream: TraceStream | None = None) -> None:
        self.when = time.perf_counter()
        self.trace.append(("record", stream.name if stream is not None else "compute", self.name))

    def synchronize(self) -> None:
        self.trace.append(("sync", self.name))

    def query(self) -> bool:
        return self.when is not None

    def elapsed_time(self, end: TraceEvent) -> float:
        return 1e3 * (end.when - self.when)


class TraceStream:
    """`torch.Stream` for CPU tensors: `with stream:` marks the work issued on it in the trace."""

    def __init__(self, trace: list[tuple[Any, ...]], name: str) -> None:
        self.trace, self.name = trace, name

    def wait_event(self, event: TraceEvent) -> None:
        self.trace.append(("wait", self.name, event.name))

    def __enter__(self) -> TraceStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Torch:
    """The accelerator's streams and events (`torch.Stream`, `torch.Event`)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.trace: list[tuple[Any, ...]] | None = None

    def current(self) -> Any:
        return torch.accelerator.current_stream(self.device)

    def stream(self, name: str) -> Any:
        return torch.Stream(device=self.device)

    def event(self, name: str, timing: bool = False) -> Any:
        return torch.Event(device=self.device, enable_timing=timing)

    def log(self, *what: Any) -> None:
        return None


class _Trace:
    """The CPU stand-in: TraceStream / TraceEvent, every operation logged in `trace`."""

    def __init__(self) -> None:
        self.trace: list[tuple[Any, ...]] = []
        self._compute = TraceStream(self.trace, "compute")

    def current(self) -> TraceStream:
        return self._compute

    def stream(self, name: str) -> TraceStream:
        return TraceStream(self.trace, name)

    def event(self, name: str, timing: bool = False) -> TraceEvent:
        return TraceEvent(self.trace, name)

    def log(self, *what: Any) -> None:
        self.trace.append(what)


def _np(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


class _Track:
    """A bucket's hashes: per slot the hash of the bits last written (device), whether it is known,
    and the shard's count of master writes when they were taken (other writers make them stale)."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.last = torch.zeros(n, dtype=torch.int64, device=device)
        self.known = np.zeros(n, bool)
        self.epoch = -1


class DevicePath:
    """The staged, stream-ordered step of one optimizer's buckets (see the module's docstring).

    `trace`: on CPU tensors the operations in the order they were issued (None on an
    accelerator). `profile=True` keeps `timeline` of the last bucket stepped: the card's busy
    intervals and each copy's, in seconds on one clock (events' times on an accelerator,
    anchored to the host clock by a synchronised event), for `overlap()`.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = torch.device(device)
        self.accel = self.device.type != "cpu"
        self.streams: Any = _Torch(self.device) if self.accel else _Trace()
        self.d2h = self.streams.stream("d2h")
        self.h2d = self.streams.stream("h2d")
        self.ring: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.ring_spec: tuple[int, torch.dtype, torch.dtype] | None = None
        self.busy: list[Any] = [None] * RING  # per ring buffer: the event of the copy still reading its output half
        self.tracks: dict[int, _Track] = {}
        self.profile = False
        self.timeline: dict[str, list[tuple[float, float]]] = {}
        self._index: torch.Tensor | None = None

    @property
    def trace(self) -> list[tuple[Any, ...]] | None:
        return self.streams.trace

    # ---- host ring ---------------------------------------------------------------------------------
    def _ring(self, chunk: int, gdt: torch.dtype, odt: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self.ring_spec is None or self.ring_spec[0] < chunk or self.ring_spec[1:] != (gdt, odt):
            self._drain_busy()
            # Pinned (page-locked) on an accelerator: its DMA engines copy from/to it asynchronously.
            # 64-byte multiples, so both halves start beat-aligned and the soft card can lend them.
            pin = self.accel
            self.ring = [(torch.empty(chunk, dtype=gdt, pin_memory=pin), torch.empty(chunk, dtype=odt, pin_memory=pin))
                         for _ in range(RING)]
            self.ring_spec = (chunk, gdt, odt)
        return self.ring

    def _drain_busy(self) -> None:
        for ev in self.busy:
            if ev is not None:
                ev.synchronize()
        self.busy = [None] * RING

    def close(self) -> None:
        """Wait for the copies still reading the ring, and let it go."""
        self._drain_busy()
        self.ring, self.ring_spec = [], None
        self.tracks.clear()

    def host_bytes(self) -> int:
        return sum(g.nbytes + o.nbytes for g, o in self.ring)

    def _hash_index(self) -> torch.Tensor:
        if self._index is None:
            self._index = torch.arange(_HASH_BLOCK, dtype=torch.int64, device=self.device)
        return self._index

    # ---- the step of one bucket --------------------------------------------------------------------
    def run(self, bucket: Any, runs: list[tuple[list[Any], int, int, dict]], pieces: list[tuple[int, int, dict]],
            detect: bool, gate: Callable[[], bool] | None = None) -> bool:
        """Stream `pieces` (card ranges with their registers, `CardBucket._pieces_plan(runs)`) of
        `bucket` through the card; results land in the tensors. As `CardBucket.run`, minus the
        step counts (the caller's)."""
        shard = bucket.shard
        chunk = shard.chunk_elems
        kd = bucket.kernel_dtype
        ring = self._ring(chunk, kd, kd)
        slots = [s for r in runs for s in r[0]]
        index = {id(s): i for i, s in enumerate(bucket.slots)}
        grads = {id(s): s.grad() for s in slots}
        starts = np.array([s.offset for s in slots])
        negate = bucket.maximize
        st = self.streams
        log = st.log
        compute = st.current()
        timing = self.profile
        tl: dict[str, list[Any]] = {"card": [], "d2h": [], "h2d": []}

        def parts(a: int, b: int) -> list[tuple[Any, int, int]]:
            return slot_parts(slots, starts, a, b)

        if self.trace is not None and len(self.trace) > 2 * TRACE_KEEP:
            del self.trace[:-TRACE_KEEP]
        work = [(pt, x, y, bits) for lo, hi, bits in pieces for pt, x, y in shard.pieces(lo, hi)]
        cut = [parts(a, b) for _, a, b, _ in work]
        ready = st.event("ready")
        ready.record(compute)  # after backward (and whatever else the compute stream queued)
        self.d2h.wait_event(ready)
        self.h2d.wait_event(ready)
        track = self.tracks.get(id(bucket))
        if track is None:
            track = self.tracks[id(bucket)] = _Track(len(bucket.slots), self.device)
        if track.epoch != shard.masters_written:
            track.known[:] = False
        # Each tensor is hashed (on the device, on the gradient stream) just before the gradient
        # copy of the first piece it is in, and its flag (changed since this path wrote it?) comes
        # over with that piece: the host reads it once the piece has arrived, before the card runs it.
        known = track.known.copy()
        at_slot = {id(s): j for j, s in enumerate(slots)}
        starting: list[list[Any]] = []
        seen: set[int] = set()
        for part in cut:
            starting.append([s for s, _, _ in part if id(s) not in seen])
            seen.update(id(s) for s, _, _ in part)
        flags = torch.zeros(len(slots), dtype=torch.bool, pin_memory=self.accel)

        d2h_ev: dict[int, Any] = {}
        written: dict[int, Any] = {}  # slot -> the hash of what this step wrote into it, so far
        if detect:
            for s in slots:
                written[id(s)] = torch.zeros((), dtype=torch.int64, device=self.device) if self.accel else HostHash()
        spans: dict[int, Any] = {}

        def issue_d2h(k: int) -> None:
            _, a, b, _ = work[k]
            g = ring[k % RING][0]
            gh = _np(g)
            pos = a
            t0 = st.event(f"d2h-start-{k}", timing) if timing else None
            with self.d2h:
                if detect and starting[k]:
                    for s in starting[k]:
                        j, last = at_slot[id(s)], track.last[index[id(s)]]
                        if self.accel:
                            flags[j:j + 1].copy_((tensor_hash(s.data(), self._hash_index()) != last).view(1),
                                                 non_blocking=True)
                        else:
                            flags[j] = host_hash(s.data()) != int(last)
                    log("hash", "d2h", k)
                if t0 is not None:  # the copies' span, without the hashes
                    t0.record(self.d2h)
                for s, lo, hi in cut[k]:
                    at = s.offset + lo
                    if at > pos:
                        gh[pos - a:at - a] = 0  # alignment padding between tensors: zeros, as the card starts
                    _copy(g[at - a:at - a + hi - lo], grads[id(s)][lo:hi])
                    pos = at + hi - lo
                if pos < b:
                    gh[pos - a:b - a] = 0
                ev = st.event(f"d2h-{k}", timing)
                ev.record(self.d2h)
            d2h_ev[k] = ev
            if t0 is not None:
                tl["d2h"].append((t0, ev))
            log("issue", "d2h", k)

        def issue_h2d(k: int) -> None:
            _, a, _, _ = work[k]
            o = ring[k % RING][1]
            t0 = st.event(f"h2d-start-{k}", timing) if timing else None
            with self.h2d:
                if t0 is not None:
                    t0.record(self.h2d)
                for s, lo, hi in cut[k]:
                    at = s.offset + lo
                    _copy(s.data()[lo:hi], o[at - a:at - a + hi - lo])
                ev = st.event(f"h2d-{k}", timing)
                ev.record(self.h2d)
                if detect:  # the hash of the bits written, part by part (on CPU: the card's thread runs meanwhile)
                    for s, lo, hi in cut[k]:
                        at = s.offset + lo
                        if self.accel:
                            written[id(s)] += tensor_hash(s.data()[lo:hi], self._hash_index(), lo)
                        else:
                            written[id(s)].update(o[at - a:at - a + hi - lo])
            self.busy[k % RING] = ev
            if t0 is not None:
                tl["h2d"].append((t0, ev))
            log("issue", "h2d", k)

        raw = shard.host_chunks()[0]  # striped copies' scratch (free: the direct path is not running)

        def stage(i: int, piece: Piece, own: Lent) -> None:
            pt, a, b, _ = piece
            g, o = ring[i % RING]
            d2h_ev[i].synchronize()  # the gradient chunk is in host memory, the flags of its tensors too
            for s in starting[i] if detect else ():
                if not known[index[id(s)]] or bool(flags[at_slot[id(s)]]):
                    log("compare", index[id(s)])
                    self._compare(bucket, s)  # the card's masters := the tensor, before any kernel reads them
            gh = _np(g[: b - a])
            if negate:  # maximize: the negation is exact, so it is the same update as torch's
                g[: b - a].neg_()
            buf = shard.lend(pt.grad_stage[i % 2], gh)
            if buf is None:
                shard.write_stripes(pt.grad_stage[i % 2], gh, 0, raw)
            else:
                own["grad"] = buf
            prev = self.busy[i % RING]
            if prev is not None:  # the output half is still being copied to the device (chunk i - RING)
                prev.synchronize()
                self.busy[i % RING] = None
            buf = shard.lend(pt.out_stage[i % 2], _np(o[: b - a]))
            if buf is not None:
                own["out"] = buf
            log("card.stage", i)
            if timing:
                spans[i] = time.perf_counter()

        def collect(i: int, piece: Piece, own: Lent) -> None:
            pt, a, b, _ = piece
            if timing:
                tl["card"].append((spans.pop(i), time.perf_counter()))
            log("card.collect", i)
            if "out" not in own:
                prev = self.busy[i % RING]
                if prev is not None:
                    prev.synchronize()
                shard.read_stripes(pt.out_stage[i % 2], _np(ring[i % RING][1][: b - a]), 0, raw)
            issue_h2d(i)
            if i + RING < len(work):
                issue_d2h(i + RING)  # into the gradient half the card has just finished with

        anchor = self._anchor() if timing else None
        try:
            for k in range(min(RING, len(work))):
                issue_d2h(k)
            ok = shard.run_pieces(work, stage, collect, max(s.step for s in slots) + 1, gate)
            if ok and detect:
                ids = [index[id(s)] for s in slots]
                with self.h2d:  # queued after the step's results and their hashes
                    track.last[ids] = torch.stack([written[id(s)] for s in slots]) if self.accel else \
                        torch.tensor([written[id(s)].value() for s in slots], dtype=torch.int64)
                log("hash", "h2d", len(slots))
                track.known[ids] = True
                track.epoch = shard.masters_written
            return ok
        except BaseException:
            track.known[:] = False
            raise
        finally:
            # The compute stream, not the host, waits: the next kernel on it sees the new parameters,
            # and the gradients' memory is not reused before the copies from it are done.
            for side in (self.h2d, self.d2h):
                end = st.event("end")
                end.record(side)
                compute.wait_event(end)
            if timing:
                self.timeline = self._times(tl, anchor)

    def _compare(self, bucket: Any, s: Any) -> None:
        """The direct path's bit-for-bit comparison of one tensor with the card's masters (read back
        over the bus: only for tensors whose hash changed or is not known), fixing what differs."""
        shard = bucket.shard
        raw, obuf = shard.host_chunks()
        tmp = obuf.view(np.uint8)
        for a in range(0, s.numel, shard.chunk_elems):
            b = min(a + shard.chunk_elems, s.numel)
            cur = s.data()[a:b].to("cpu").contiguous()  # ordered on the compute stream: every edit seen
            mine = _np(cur)
            if bucket.kernel_dtype == torch.float32:
                if not shard.state_equals("p", s.offset + a, mine, tmp, raw):
                    shard.write_range("p", s.offset + a, mine, tmp)
                continue
            from hls.golden import to_bf16_bits

            card = raw.view(np.float32)[: b - a]
            shard.read_range("p", s.offset + a, card, tmp)
            changed = to_bf16_bits(card) != mine
            if changed.any():  # the card's fp32 master where it still rounds to the tensor, else the tensor
                card[changed] = (mine[changed].astype(np.uint32) << 16).view(np.float32)
                shard.write_range("p", s.offset + a, card, tmp)

    # ---- profiling -----------------------------------------------------------------------------------
    def _anchor(self) -> tuple[Any, float] | None:
        if not self.accel:
            return None
        ev = self.streams.event("anchor", True)
        ev.record(self.streams.current())
        ev.synchronize()
        return ev, time.perf_counter()

    def _times(self, tl: dict[str, list[Any]], anchor: tuple[Any, float] | None
               ) -> dict[str, list[tuple[float, float]]]:
        out: dict[str, list[tuple[float, float]]] = {"card": list(tl["card"])}
        for key in ("d2h", "h2d"):
            spans = []
            for t0, t1 in tl[key]:
                t1.synchronize()
                if anchor is None:
                    spans.append((t0.when, t1.when))
                else:
                    ev, host = anchor
                    spans.append((host + ev.elapsed_time(t0) / 1e3, host + ev.elapsed_time(t1) / 1e3))
            out[key] = spans
        return out


def overlap(timeline: dict[str, list[tuple[float, float]]]) -> float | None:
    """The fraction of the card's busy time during which a copy (either direction) was running
    (None without card time)."""
    return _covered(timeline.get("card", []), timeline.get("d2h", []) + timeline.get("h2d", []))


def copies_hidden(timeline: dict[str, list[tuple[float, float]]]) -> float | None:
    """The fraction of the copies' time (either direction) during which the card was busy: how much
    of the transfers the card's work hides (None without copy time)."""
    return _covered(timeline.get("d2h", []) + timeline.get("h2d", []), timeline.get("card", []))


def _covered(spans: list[tuple[float, float]], by: list[tuple[float, float]]) -> float | None:
    """The fraction of the union of `spans` that the union of `by` covers."""
    mine = _union(spans)
    total = sum(b - a for a, b in mine)
    if total <= 0:
        return None
    other = _union(by)
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in mine for c, d in other) / total


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


__all__ = ["DATA_PATHS", "DATA_PATH_ENV", "RING", "DevicePath", "HostHash", "TraceEvent", "TraceStream",
           "copies_hidden", "data_path_option", "host_hash", "overlap", "tensor_hash"]
