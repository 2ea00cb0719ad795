"""Tensors of one param group and dtype on one card shard: the layer between torch and `ShardState`.

Each tensor (a parameter, the local shard of an FSDP2 DTensor parameter, or a rank's slice of a
replicated parameter) gets its own range of the card shard, starting on a multiple of the
kernel's beat alignment, and its own step count, as torch keeps one per parameter. Tensors of at
least half a chunk come first, each streaming through chunks of its own; the small ones follow,
packed, so that they share kernel runs. A step runs the kernel over the runs of consecutive
tensors that have a gradient and share a step count, each run with its own scalar registers;
tensors without a gradient are not touched (their moments and step count stay as they are),
exactly as torch skips them.

Gradients stream from wherever they live (`p.grad`, a reduce-scatter output) to the card, through
one host chunk only where a chunk mixes tensors; results go straight into the tensors (on the
software cards the kernel reads the gradient and writes the tensor in place: `Device.import_host`):
a step holds two chunks of host memory beyond the model, every scratch included. Before the kernel
runs on a chunk, the masters on the card are compared bit for bit with the tensors (fp32: where the
card's memory is host memory, every stripe in place in one compiled pass, `pynq_driver.native`;
after one readback into the free host chunk on a real card), or
with the bf16 rounding the card last returned (bf16): whatever changed a tensor since the last
step (`p.data` edits, `load_state_dict` of the model, a broadcast; -0.0 for 0.0, another NaN
payload) is picked up, element by element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from hls.errors import UserError
from hls.golden import Hyper, prepare_scalars
from hls.spec import BEAT_BYTES
from pynq_driver.device import Device
from pynq_driver.host import SCAN_BLOCK, all_finite
from pynq_driver.shard import DEFAULT_CHUNK_ELEMS, ShardState

_BF16_BLOCK = 1 << 14  # elements per block of the bf16 masters' comparison (temporaries of 64 KiB at most)
_TORCH_FOR_KERNEL = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _grad_pieces(runs: list[tuple[list[Slot], int, int, dict]], step: int) -> Iterator[tuple[torch.Tensor, bool]]:
    """The runs' gradients in pieces of `step` elements, each with whether it is a contiguous host
    tensor (numpy can read it in place)."""
    for slots, *_ in runs:
        for s in slots:
            g = s.grad()
            for a in range(0, s.numel, step):
                piece = g[a:a + step]
                yield piece, piece.device.type == "cpu" and piece.is_contiguous()


def _finite_fp32(chunk: np.ndarray, zeros: np.ndarray, _blk: np.ndarray) -> bool:
    return not np.isnan(np.dot(chunk, zeros[: chunk.size]))  # 0 when finite, NaN from any inf or NaN


def _unit(nbytes: int, fn: Callable[..., bool], *args: Any) -> Callable[[np.ndarray], bool]:
    """A unit of a step's scan or comparison (see CardOptimizer._prefix): `fn(*args, block)`,
    knowing the bytes of tensor it reads (small work runs without a second thread)."""
    unit = functools.partial(fn, *args)
    unit.nbytes = nbytes  # type: ignore[attr-defined]
    return unit


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The local part of a DTensor (FSDP2's sharded parameters and gradients), else the tensor."""
    inner = getattr(t, "_local_tensor", None)
    return inner if inner is not None else t


def is_dtensor(t: torch.Tensor) -> bool:
    return getattr(t, "_local_tensor", None) is not None


def _np(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor (bf16 as its uint16 bit patterns)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _torch(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(a)
    return t.view(dtype) if dtype == torch.bfloat16 else t


class Slot:
    """One tensor's range on the card: [offset, offset + numel), its step count and accessors."""

    __slots__ = ("key", "offset", "numel", "step", "has_state", "data", "grad")

    def __init__(self, key: torch.Tensor, numel: int, data: Callable[[], torch.Tensor],
                 grad: Callable[[], torch.Tensor | None]) -> None:
        self.key = key  # the parameter torch knows (state is keyed by it)
        self.offset = 0
        self.numel = numel
        self.step = 0
        self.has_state = False  # torch has state for a parameter once it stepped (or state was loaded)
        self.data = data  # -> 1-D tensor the results go into (a view of the parameter)
        self.grad = grad  # -> 1-D gradient for this slot, or None when there is none this step


def param_slot(p: torch.Tensor) -> Slot:
    """A slot for parameter `p` (its local shard if it is a DTensor): results land in `p` itself."""
    loc = local_tensor(p)
    if not loc.is_contiguous():
        raise UserError("NicAdamW: a non-contiguous parameter (its local tensor has strides "
                        f"{tuple(loc.stride())}); the card writes results in place into contiguous memory")

    def data() -> torch.Tensor:
        return local_tensor(p).detach().view(-1)

    def grad() -> torch.Tensor | None:
        g = p.grad
        if g is None:
            return None
        if g.is_sparse:
            raise UserError("NicAdamW does not support sparse gradients (neither does torch.optim.AdamW)")
        return local_tensor(g).detach().reshape(-1)

    return Slot(p, loc.numel(), data, grad)


def slot_parts(slots: list[Slot], starts: np.ndarray, a: int, b: int) -> list[tuple[Slot, int, int]]:
    """(slot, lo, hi): the part [lo, hi) of each slot (sorted by offset, `starts` their offsets)
    inside card range [a, b), in slot coordinates."""
    i = max(0, int(np.searchsorted(starts, a, side="right")) - 1)
    out = []
    while i < len(slots) and slots[i].offset < b:
        s = slots[i]
        lo, hi = max(a, s.offset), min(b, s.offset + s.numel)
        if hi > lo:
            out.append((s, lo - s.offset, hi - s.offset))
        i += 1
    return out


class CardBucket:
    """Slots of one dtype laid out on one `ShardState`, each on a beat-aligned offset."""

    def __init__(self, slots: list[Slot], dev: Device, dtype: torch.dtype, chunk_elems: int | None) -> None:
        self.slots = slots
        self.dtype = dtype
        self.kernel_dtype = _TORCH_FOR_KERNEL[dev.spec.grad_dtype]
        align = dev.stripes.beat_align()
        # Tensors of at least half a chunk first, the small ones (biases, norms) packed together
        # after them: a big tensor's chunks are its own (the card reads its gradient and writes its
        # values in place), and the small ones share chunks instead of one kernel run each.
        chunk = max(align, (chunk_elems or DEFAULT_CHUNK_ELEMS) // align * align)
        slots = [s for s in slots if s.numel >= chunk // 2] + [s for s in slots if s.numel < chunk // 2]
        self.slots = slots  # in card order
        off = 0
        for s in slots:
            s.offset = off
            off = -(-(off + s.numel) // align) * align
        self.n = max((s.offset + s.numel for s in slots), default=0)
        self.shard: ShardState | None = None
        if self.n:
            self.shard = ShardState(dev, self.n, chunk_elems, nonfinite="skip")
            try:
                for s in slots:
                    self.reset_masters(s)
            except BaseException:
                self.shard.close()
                raise
        self.maximize = False
        self._compared: set[int] = set()  # slots compared with the masters before this step's stream
        self._in_place: dict[int, tuple[int, bool]] = {}  # slot -> (data_ptr, _masters_in_place's answer)

    # ---- per-slot state on the card ------------------------------------------------------------
    def _ranges(self, s: Slot) -> list[tuple[int, int]]:
        """The slot cut into chunk-sized host transfers (each starts beat-aligned)."""
        c = self.shard.chunk_elems
        return [(a, min(a + c, s.numel)) for a in range(0, s.numel, c)]

    def read(self, s: Slot, array: str) -> torch.Tensor:
        """A fresh fp32 copy of state array `array` ("p", "m", "v") of the slot, from the card."""
        out = np.empty(s.numel, np.float32)
        if s.numel:
            self.shard.read_range(array, s.offset, out)
        return torch.from_numpy(out)

    def write(self, s: Slot, array: str, value: torch.Tensor | None) -> None:
        """Write `value` (any float dtype and device, s.numel elements) or zeros into the slot's state."""
        if not s.numel:
            return
        if value is not None:
            value = value.detach().reshape(-1)
            if value.numel() != s.numel:
                raise UserError(f"state has {value.numel()} elements, the parameter has {s.numel}")
        scratch = self.shard.host_chunks()[0].view(np.float32)
        for a, b in self._ranges(s):
            buf = scratch[: b - a]
            if value is None:
                buf[...] = 0
            else:
                torch.from_numpy(buf).copy_(value[a:b])
            self.shard.write_range(array, s.offset + a, buf, self.shard.host_chunks()[1].view(np.uint8))

    def load_slots(self, items: list[tuple[Slot, tuple[Any, ...] | None]]) -> None:
        """Replace the state of every slot of this bucket (load_state_dict): `items` holds each slot
        with (step, exp_avg, exp_avg_sq, master or None), or None for no state (zeros, masters := the
        tensor). Small slots are packed into chunk-sized writes, so the cost is linear in the elements
        (one device write per chunk per array), not a device write per slot per array."""
        by_id = {id(s): c for s, c in items}
        if self.shard is not None and {id(s) for s in self.slots if s.numel} <= set(by_id):
            for array, at in (("m", 1), ("v", 2), ("p", 3)):
                values: dict[int, torch.Tensor | None] = {}
                for s in self.slots:
                    c = by_id[id(s)] if s.numel else None
                    got = None if c is None else c[at]
                    values[id(s)] = s.data() if array == "p" and got is None and s.numel else got
                self._write_packed(array, values)
        else:
            for s, c in items:
                self.write(s, "m", None if c is None else c[1])
                self.write(s, "v", None if c is None else c[2])
                self.write(s, "p", s.data() if c is None or c[3] is None else c[3])
        for s, c in items:
            s.step, s.has_state = (0, False) if c is None else (c[0], True)
        self.shard_step_changed()
        if self.shard is not None and {id(s) for s in self.slots} <= set(by_id):
            self.shard.inconsistent = None  # every slot's state was just written whole

    def _write_packed(self, array: str, values: dict[int, torch.Tensor | None]) -> None:
        """Write every slot's value (None: zeros) of state array `array`: slots of up to half a chunk
        gathered into one chunk-sized write each, larger ones on their own."""
        chunk = self.shard.chunk_elems
        scratch = self.shard.host_chunks()[0].view(np.float32)
        tmp = self.shard.host_chunks()[1].view(np.uint8)
        batch: list[Slot] = []
        for s in [*(s for s in self.slots if s.numel), None]:  # card order; None flushes the last batch
            big = s is not None and s.numel > chunk // 2
            # A batch is consecutive slots only: it never spans a large slot written on its own.
            if batch and (s is None or big or s.offset + s.numel - batch[0].offset > chunk):
                lo = batch[0].offset
                buf = scratch[: batch[-1].offset + batch[-1].numel - lo]
                buf[...] = 0  # alignment padding between tensors: zeros, as the card starts
                for t in batch:
                    v = values[id(t)]
                    if v is not None:
                        torch.from_numpy(buf[t.offset - lo:t.offset - lo + t.numel]).copy_(v.detach().reshape(-1))
                self.shard.write_range(array, lo, buf, tmp)
                batch.clear()
            if big:
                self.write(s, array, values[id(s)])
            elif s is not None:
                batch.append(s)

    def reset_masters(self, s: Slot) -> None:
        """The card's masters of the slot := the tensor's current values (widened exactly to fp32)."""
        self.write(s, "p", s.data())

    # ---- the step --------------------------------------------------------------------------------
    def plan(self, group_hyper: Callable[[int], Hyper], optimizer: str) -> list[tuple[list[Slot], int, int, dict]]:
        """Runs of consecutive slots that have a gradient and share a step count, with their registers."""
        runs: list[tuple[list[Slot], int, int, dict]] = []
        cur: list[Slot] = []
        bits_of: dict[int, dict[str, int]] = {}

        def close() -> None:
            if cur:
                step = cur[0].step + 1
                if step not in bits_of:
                    bits_of[step] = prepare_scalars(group_hyper(step), optimizer).registers(optimizer)
                runs.append((list(cur), cur[0].offset, cur[-1].offset + cur[-1].numel, bits_of[step]))
                cur.clear()

        for s in self.slots:
            if not s.numel:
                continue
            g = s.grad()
            if g is None:
                close()
                continue
            if g.dtype != self.kernel_dtype:
                raise UserError(f"a {self.dtype} parameter has a {g.dtype} gradient; the kernel needs "
                                f"{self.kernel_dtype}")
            if cur and cur[0].step != s.step:
                close()
            cur.append(s)
        close()
        return runs

    def grads_finite(self, runs: list[tuple[list[Slot], int, int, dict]]) -> bool:
        """No inf/NaN in any gradient of the runs (read chunk by chunk, nothing chunk-sized allocated
        on the host for CPU gradients: the shard's own scan, a dot product with zeros for fp32)."""
        if not runs:
            return True
        shard = self.shard
        name = shard.spec.grad_dtype
        step = shard.chunk_elems if shard.finite_zeros is not None else SCAN_BLOCK  # bf16: a block at a time
        scratch = shard.host_chunks()[0]  # free until the step streams: the scan's scratch (bf16)
        for piece, host in _grad_pieces(runs, step):
            ok = all_finite(_np(piece), name, scratch, shard.finite_zeros) if host \
                else bool(torch.isfinite(piece).all())
            if not ok:
                return False
        return True

    def _pieces_plan(self, runs: list[tuple[list[Slot], int, int, dict]]) -> list[tuple[int, int, dict]]:
        """The runs cut so that a parameter of at least half a chunk starts its own chunks: those
        chunks are all one parameter's, so the card reads its gradient and writes its values in
        place; small parameters share chunks (every slot starts beat-aligned, so any cut is valid)."""
        big = self.shard.chunk_elems // 2
        out: list[tuple[int, int, dict]] = []
        for slots, _, _, bits in runs:
            lo = None
            for s in slots:
                if s.numel >= big:
                    if lo is not None:
                        out.append((lo, s.offset, bits))
                        lo = None
                    out.append((s.offset, s.offset + s.numel, bits))
                elif lo is None:
                    lo = s.offset
            if lo is not None:
                out.append((lo, slots[-1].offset + slots[-1].numel, bits))
        return out

    def empty_with_grad(self) -> list[Slot]:
        """Slots with no elements here (an FSDP2 shard that is empty on this rank) but a gradient:
        torch gives them (empty) state and counts their steps, so do we."""
        return [s for s in self.slots if not s.numel and s.grad() is not None]

    def run(self, runs: list[tuple[list[Slot], int, int, dict]], detect: bool = True,
            gate: Callable[[], bool] | None = None) -> bool:
        """Stream the runs through the kernel; results land in the tensors, step counts advance.

        `gate` (if given) is asked once the first piece is staged and its masters compared, before
        anything is launched or counted; when it says False nothing changes and run returns False."""
        if not runs:
            if gate is not None and not gate():
                return False
            self._count_empty()
            self.shard_step_changed()
            return True
        slots = [s for r in runs for s in r[0]]
        starts = np.array([s.offset for s in slots])
        grads = {id(s): s.grad() for s in slots}
        kd = self.kernel_dtype
        negate = self.maximize

        seen: dict[tuple[int, int], list[tuple[Slot, int, int]]] = {}  # fill, direct and sole ask for each piece

        def overlapping(a: int, b: int) -> list[tuple[Slot, int, int]]:
            """(slot, lo, hi): the part [lo, hi) of each slot inside card range [a, b), in slot coordinates."""
            got = seen.get((a, b))
            if got is None:
                got = seen[(a, b)] = slot_parts(slots, starts, a, b)
            return got

        def sole(a: int, b: int, t: torch.Tensor | None) -> np.ndarray | None:
            """The numpy view of `t` (slot coordinates) when one slot covers all of [a, b) and `t` is
            host memory: the card can read from / write to it with no copy in between."""
            parts = overlapping(a, b)
            if len(parts) != 1 or t is None:
                return None
            s, lo, hi = parts[0]
            if s.offset + lo != a or s.offset + hi != b:
                return None
            piece = t[lo:hi]
            return _np(piece) if piece.device.type == "cpu" and piece.is_contiguous() else None

        def fill(a: int, b: int, g: np.ndarray) -> np.ndarray | None:
            if not negate:
                parts = overlapping(a, b)
                own = sole(a, b, grads[id(parts[0][0])]) if len(parts) == 1 else None
                if own is not None:
                    return own
            gt = _torch(g, kd)
            pos = a
            for s, lo, hi in overlapping(a, b):
                at = s.offset + lo
                if at > pos:
                    gt[pos - a:at - a].zero_()
                gt[at - a:at - a + hi - lo].copy_(grads[id(s)][lo:hi])
                pos = at + hi - lo
            if pos < b:
                gt[pos - a:].zero_()
            if negate:  # maximize: the negation is exact, so it is the same update as torch's
                gt.neg_()
            return None

        def direct(a: int, b: int) -> np.ndarray | None:
            parts = overlapping(a, b)
            return sole(a, b, parts[0][0].data()) if len(parts) == 1 else None

        def prepare(a: int, b: int, scratch: np.ndarray, tmp: np.ndarray) -> None:
            if kd == torch.float32:
                # Each tensor's part against the card's masters, bit for bit, where both lie (compiled loop;
                # the card's copy read into `tmp` only where it is not host memory); a part that
                # differs anywhere is written whole (equal elements are rewritten with the same bits).
                blk = self.shard.host_chunks()[0]  # `scratch`'s whole chunk: free once the gradient is sent
                for s, lo, hi in overlapping(a, b):
                    if id(s) in compared:
                        continue
                    cur = s.data()[lo:hi]
                    if cur.device.type != "cpu":
                        cur = cur.cpu()
                    mine = _np(cur.contiguous())
                    if not self.shard.state_equals("p", s.offset + lo, mine, tmp, blk):
                        self.shard.write_range("p", s.offset + lo, mine, tmp)
                return
            self.shard.read_range("p", a, scratch, tmp)
            for s, lo, hi in overlapping(a, b):
                card = scratch[s.offset + lo - a:s.offset + hi - a]
                cur = s.data()[lo:hi]
                if cur.device.type != "cpu":
                    cur = cur.cpu()
                # The card holds fp32 masters of bf16 tensors: compare what it returned (their bf16
                # rounding), block by block so that the temporaries stay small.
                from hls.golden import to_bf16_bits

                now, dirty = _np(cur), False
                for k in range(0, now.size, _BF16_BLOCK):
                    mb, nb = card[k:k + _BF16_BLOCK], now[k:k + _BF16_BLOCK]
                    changed = to_bf16_bits(mb) != nb
                    if changed.any():
                        mb[changed] = (nb[changed].astype(np.uint32) << 16).view(np.float32)
                        dirty = True
                if dirty:
                    self.shard.write_range("p", s.offset + lo, card, tmp)

        def drain(a: int, b: int, o: np.ndarray) -> None:
            ot = _torch(o, kd)
            for s, lo, hi in overlapping(a, b):
                at = s.offset + lo
                s.data()[lo:hi].copy_(ot[at - a:at - a + hi - lo])

        label = max(s.step for s in slots) + 1
        compared, self._compared = self._compared, set()  # this step's, by compare_units
        if not self.shard.stream(self._pieces_plan(runs), fill, drain, prepare if detect else None, label, direct,
                                 gate, masters_in_direct=kd == torch.float32):
            return False
        self._count_empty()
        for s in slots:
            s.step += 1
            s.has_state = True
        self.shard_step_changed()
        return True

    def _count_empty(self) -> None:
        for s in self.empty_with_grad():
            s.step += 1
            s.has_state = True

    def compare_slots(self, runs: list[tuple[list[Slot], int, int, dict]]) -> list[tuple[Slot, torch.Tensor]] | None:
        """The runs' tensors (with their data) whose masters must be compared before the step:
        all but those the kernel will read its masters from in place (`_masters_in_place`). None
        where the card's memory is not host memory (a readback needs a second chunk per thread),
        the masters are bf16's or a tensor is not a contiguous host tensor: the stream's `prepare`
        compares those piece by piece."""
        self._compared = set()
        if self.kernel_dtype != torch.float32:
            return None
        if not runs:
            return []
        probe = self.shard.parts[0].state["p"][0]
        if self.shard.dev.host_view(probe, 0, BEAT_BYTES) is None:
            return None
        out = []
        for slots, *_ in runs:
            for s in slots:
                data = s.data()
                if data.device.type != "cpu" or not data.is_contiguous():
                    return None
                if not self._masters_in_place(s, data):
                    out.append((s, data))
        return out

    def compare_units(self, todo: list[tuple[Slot, torch.Tensor]]) -> list[Callable[[np.ndarray], bool]]:
        """The comparison of `todo` (from compare_slots) with the card's masters cut into chunk-sized
        units that may run on any thread, each with its own block (a host chunk): what the stream's
        `prepare` does piece by piece (it skips the tensors given here)."""
        units: list[Callable[[np.ndarray], bool]] = []
        step = self.shard.chunk_elems
        for s, data in todo:
            for a in range(0, s.numel, step):
                mine = _np(data[a:a + step])
                units.append(_unit(mine.nbytes, self._compare, s.offset + a, mine))
            self._compared.add(id(s))
        return units

    def _masters_in_place(self, s: Slot, data: torch.Tensor) -> bool:
        """Whether the stream lends every piece of `s` (a host-memory card: see compare_units) to the
        kernel as its masters (`ShardState.stream`'s masters_in_direct): `s` has pieces of its own,
        each of whole 64-byte beats (one at least per stripe of the masters) and 64-byte aligned.
        A piece that is not lent after all is compared by the stream's `prepare`."""
        shard = self.shard
        if shard.spec.out_dtype != "fp32" or s.numel < shard.chunk_elems // 2:
            return False
        base = data.data_ptr()
        known = self._in_place.get(id(s))
        if known is not None and known[0] == base:  # the slot's pieces never change, its memory may
            return known[1]
        ok = True
        for pt, a, b in shard.pieces(s.offset, s.offset + s.numel):
            nbytes = 4 * (b - a)
            start = base + 4 * (a - s.offset)
            if nbytes % BEAT_BYTES or nbytes < BEAT_BYTES * len(pt.state["p"]) or start % BEAT_BYTES:
                ok = False
        self._in_place[id(s)] = (base, ok)
        return ok

    def _compare(self, at: int, mine: np.ndarray, blk: np.ndarray) -> bool:
        if not self.shard.state_equals("p", at, mine, blk, blk):  # host memory: `tmp` is never used
            self.shard.write_range("p", at, mine, blk)
        return True

    def scan_units(self, runs: list[tuple[list[Slot], int, int, dict]]
                   ) -> tuple[list[Callable[[np.ndarray], bool]], bool]:
        """The inf/NaN scan of the runs' gradients cut into chunk-sized units that may run on any
        thread (fp32 host tensors: a dot product with zeros, GIL released, nothing allocated), and
        the verdict of the rest, scanned here (bf16 with the host chunk as scratch, device tensors)."""
        shard = self.shard
        units: list[Callable[[np.ndarray], bool]] = []
        if not runs:
            return units, True
        if shard.finite_zeros is None:
            return units, self.grads_finite(runs)
        zeros, step = shard.finite_zeros, shard.chunk_elems
        for piece, host in _grad_pieces(runs, step):
            if host:
                units.append(_unit(piece.numel() * 4, _finite_fp32, _np(piece), zeros))
            elif not bool(torch.isfinite(piece).all()):
                return units, False
        return units, True

    def shard_step_changed(self) -> None:
        """The shard's own count (checkpoints, placement) follows the slots: the highest of them."""
        if self.shard is not None:
            self.shard.step_count = max((s.step for s in self.slots), default=0)

    def close(self) -> None:
        if self.shard is not None:
            self.shard.close()


__all__ = ["CardBucket", "Slot", "is_dtensor", "local_tensor", "param_slot"]
