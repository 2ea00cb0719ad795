"""A shard of optimizer state resident in card memory, and gradient shards streamed through it.

The fp32 master parameters and both moments stay on the card across steps. A step splits the
gradient into chunks that fit the two staging buffers and double-buffers them: the copy of
chunk i+1 to the card, and of the output of chunk i-1 back, overlap the kernel run on chunk i.

Every check on the caller's input runs before the first write to the card, so bad input leaves
the state bit-identical. A step that fails half-way (a kernel that never finishes, a simulator
that dies) marks the shard inconsistent: its state stays readable, and `step()` refuses to run
until a checkpoint is loaded.

Beside it: `host.py` (the caller's arrays and tensors, viewed and scanned in place),
`placement.py` (compute-unit parts, buffers, striped copies), `pipeline.py` (the one
double-buffered launch pipeline that `step()` and `stream()` both run) and `state_file.py`
(checkpoints written by `save`, read back verified by `load`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from hls import layout
from hls.errors import UserError
from hls.golden import Hyper, prepare_scalars
from hls.ports import read_port
from hls.spec import BEAT_BYTES, STORAGE_DTYPES, KernelSpec
from pynq_driver.device import Buffer, Device
from pynq_driver.errors import (
    BadGradient,
    DeviceClosed,
    DeviceError,
    NonFiniteGradient,
    StateError,
)
from pynq_driver.host import all_finite, host_array, is_torch, numel, same_bytes
from pynq_driver.native import stripe_equal, striped_equal
from pynq_driver.pipeline import LaunchPipeline, Lent, Piece, give_back, lend, lend_stripes, port_pointers
from pynq_driver.placement import (
    CHUNK_ALIGN,
    DEFAULT_CHUNK_ELEMS,
    CuPart,
    check_fits,
    cu_ranges,
    default_chunk_elems,
    plan_buffers,
    read_striped,
    write_striped,
)
from pynq_driver.registers import KernelRunner
from pynq_driver.state_file import STATE_ARRAYS, check_spec, read_state_file, write_state_file

log = logging.getLogger(__name__)

NONFINITE_POLICIES = ("skip", "raise")
_BEAT_ELEMS = BEAT_BYTES // 4  # fp32 state elements per beat


class ShardState:
    """Optimizer state of one shard of N parameters, resident on `dev` across steps.

    The shard is split over the kernel's compute units (each a contiguous part, stripe-aligned),
    and each part over its stripes (hls.layout): every stripe one buffer in the bank the
    manifest's memory plan names for it. Gradients and outputs pass through two staging slots
    per CU, striped the same way.

    Public attributes: `n`, `chunk_elems`, `parts` (each CU's `CuPart`), `step_count`,
    `last_step_skipped`, `skipped_steps`, `inconsistent` (why the state is not usable, or None),
    `finite_zeros` (fp32 gradients: float32 zeros of a chunk for `host.all_finite`'s scan, else None).
    """

    def __init__(self, dev: Device, params: Any, chunk_elems: int | None = None, *, nonfinite: str = "skip") -> None:
        dev.check_open()
        if nonfinite not in NONFINITE_POLICIES:
            raise UserError(f"nonfinite: {nonfinite!r}; choose one of {', '.join(NONFINITE_POLICIES)}")
        # `params` may be a number of elements: the shard starts at zeros and the caller writes its
        # masters range by range (write_range), so no full-size host copy is ever needed.
        by_count = isinstance(params, (int, np.integer)) and not isinstance(params, bool)
        n = int(params) if by_count else numel(params)
        if n < 1:
            raise BadGradient("params: the shard needs at least one parameter")
        p_host = None if by_count else host_array(params, "fp32", n, "params")
        self.dev = dev
        self.spec: KernelSpec = dev.spec
        self.backend = dev.backend
        self.stripes = dev.stripes
        self.n = n
        self.nonfinite = nonfinite
        # Writes of the masters from the host (not the kernel's): a data path that remembers what it
        # last wrote into the parameters knows the card's copy is no longer that when this moved.
        self.masters_written = 0
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
        ranges = cu_ranges(n, dev.cus, align)
        self.parts = [CuPart(cu, lo, hi, KernelRunner(dev, cu)) for cu, (lo, hi) in enumerate(ranges) if hi > lo]
        self.runner = self.parts[0].runner
        self._bufs: list[Buffer] = []
        try:
            by_cu = {pt.cu: pt for pt in self.parts}
            for cu, array, bank, _, slot, nbytes in plan_buffers(dev, ranges, chunk):
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
            for part, lo, hi in self.chunks():
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
        self.finite_zeros: np.ndarray | None = np.zeros(chunk, np.float32) if self.spec.grad_dtype == "fp32" else None
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
            raise DeviceClosed("shard is closed; create a new ShardState (or ShardState.load a checkpoint)")
        self.dev.check_open()

    def chunks(self) -> list[tuple[CuPart, int, int]]:
        """Every chunk of the shard, in order: (its CU's part, lo, hi), each inside one part."""
        c = self.chunk_elems
        return [(pt, lo, min(lo + c, pt.hi)) for pt in self.parts for lo in range(pt.lo, pt.hi, c)]

    def _rounds(self, bits: dict[str, int]) -> list[list[Piece]]:
        """Chunks grouped into rounds: round i runs chunk i of every CU at once."""
        c = self.chunk_elems
        per_cu = [[(pt, lo, min(lo + c, pt.hi), bits) for lo in range(pt.lo, pt.hi, c)] for pt in self.parts]
        return [[cs[i] for cs in per_cu if i < len(cs)] for i in range(max(len(cs) for cs in per_cu))]

    # ---- striped copies (hls/layout.py: stripe k holds beats k, k + S, ...) -------------------
    def write_stripes(self, bufs: list[Buffer], data: np.ndarray, beat0: int = 0,
                      tmp: np.ndarray | None = None) -> None:
        """Write `data` into its stripes `bufs` (a part's `state[...]` or a staging slot), starting at
        stripe beat `beat0`; `tmp`: uint8 scratch of a stripe's bytes (None: allocated)."""
        write_striped(self.dev, bufs, data, beat0, tmp)

    def read_stripes(self, bufs: list[Buffer], out: np.ndarray, beat0: int = 0, tmp: np.ndarray | None = None) -> None:
        """Fill `out` from its stripes `bufs`, starting at stripe beat `beat0` (`tmp` as for write_stripes)."""
        read_striped(self.dev, bufs, out, beat0, tmp)

    def _state_beat(self, part: CuPart, lo: int) -> int:
        return (lo - part.lo) // _BEAT_ELEMS // self.stripes.state

    def _put_state(self, part: CuPart, array: str, lo: int, data: np.ndarray, tmp: np.ndarray | None = None) -> None:
        if array == "p":
            self.masters_written += 1
        write_striped(self.dev, part.state[array], data, self._state_beat(part, lo), tmp)

    def _get_state(self, part: CuPart, array: str, lo: int, out: np.ndarray, tmp: np.ndarray | None = None) -> None:
        read_striped(self.dev, part.state[array], out, self._state_beat(part, lo), tmp)

    # ---- lending host memory to the card, and the kernel's ports ---------------------------------
    def lend(self, bufs: list[Buffer], data: np.ndarray | None) -> Buffer | None:
        """`data` as the buffer of the one-stripe port of `bufs` (see `pipeline.lend`), or None."""
        return lend(self.dev, bufs, data)

    def lend_stripes(self, bufs: list[Buffer], data: np.ndarray | None) -> list[Buffer] | None:
        """Every stripe of `data` as the buffer of the port of `bufs[k]` (see `pipeline.lend_stripes`)."""
        return lend_stripes(self.dev, bufs, data)

    def give_back(self, own: Lent) -> None:
        """Free the buffers `lend`/`lend_stripes` gave (a dict of them), and empty it."""
        give_back(self.dev, own)

    def pointers(self, pt: CuPart, lo: int, slot: int, grad: Buffer | None = None, out: Buffer | None = None,
                 p_rd: list[Buffer] | None = None) -> dict[str, tuple[Any, int]]:
        """Every port of `pt`'s CU for the chunk at `lo`: state stripes at the chunk's beat, staging
        slot `slot` at 0 (or the lent buffers: `grad`/`out`, see `lend`; `p_rd`, the masters' stripes
        to read, see `lend_stripes`: the results still go to the card's own masters)."""
        return port_pointers(pt, self._state_beat(pt, lo), slot, grad, out, p_rd)

    def _piece_pointers(self, piece: Piece, slot: int, own: Lent) -> dict[str, tuple[Any, int]]:
        pt, lo, _, _ = piece
        p_rd = [v for k, v in own.items() if k.startswith("p")]
        return self.pointers(pt, lo, slot, own.get("grad"), own.get("out"), p_rd)

    def run_chunk(self, pt: CuPart, lo: int, hi: int, bits: dict[str, int], grad: np.ndarray | None = None,
                  out: np.ndarray | None = None) -> None:
        """The bare kernel once on the chunk [lo, hi) of `pt`, and its wait: no checks, no copies. The
        gradient is read from `grad` and the output written to `out` where they can be lent to the
        card (`lend`), else from/to staging slot 0 as it is (a benchmark's lower bound of a step)."""
        own: Lent = {k: b for k, b in (("grad", self.lend(pt.grad_stage[0], grad)),
                                       ("out", self.lend(pt.out_stage[0], out))) if b is not None}
        try:
            pt.runner.launch(self.pointers(pt, lo, 0, own.get("grad"), own.get("out")), hi - lo, bits)
            pt.runner.wait()
        finally:
            self.give_back(own)

    def _pipeline(self, rounds: list[list[Piece]], stage: Any, collect: Any, step: int, mixes: str,
                  gate: Any = None, overlap: bool = False) -> bool:
        """The one launch pipeline (pynq_driver.pipeline) over `rounds`; a failure after a launch marks
        the shard inconsistent (the state on the card mixes `mixes`). `overlap`: uploads and downloads
        on their own workers where the device's DMA runs beside the host (only for callers whose
        stage and collect share no scratch)."""
        pipe = LaunchPipeline(self.dev, rounds, self._piece_pointers, overlap=overlap)
        try:
            return pipe.run(stage, collect, gate)
        except BaseException as exc:
            if pipe.launched:
                self.inconsistent = (
                    f"step {step} stopped after {pipe.launched} of {pipe.total} chunks ({type(exc).__name__}); "
                    f"the state on the card mixes {mixes}"
                )
            raise

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
        self.last_step_skipped = False
        finite = apply_nonfinite or all(all_finite(g[lo:hi], spec.grad_dtype, self._scratch, self.finite_zeros)
                                        for _, lo, hi in self.chunks())
        if not finite:
            if self.nonfinite == "raise":
                raise NonFiniteGradient(f"gradient of step {hyper.step} holds inf or NaN; state unchanged")
            self.last_step_skipped = True
            self.skipped_steps += 1
            log.warning("step %d skipped: the gradient holds inf or NaN (state unchanged)", hyper.step)
            return None
        bits = prepare_scalars(hyper, spec.optimizer).registers(spec.optimizer)
        result = o if o is not None else np.empty(self.n, STORAGE_DTYPES[spec.out_dtype])
        self._stream(g, result, bits, hyper.step)
        self.step_count = int(hyper.step)
        return out if out is not None else result

    def _stream(self, g: np.ndarray, result: np.ndarray, bits: dict[str, int], step: int) -> None:
        """The whole shard through the launch pipeline, every CU's chunk i in round i (all CUs at once)."""

        def stage(i: int, piece: Piece, own: Lent) -> None:
            pt, lo, hi, _ = piece
            for key, data in (("grad", g[lo:hi]), ("out", result[lo:hi])):
                bufs = pt.grad_stage[i % 2] if key == "grad" else pt.out_stage[i % 2]
                buf = self.lend(bufs, data)
                if buf is not None:
                    own[key] = buf
                elif key == "grad":
                    self.write_stripes(bufs, data)

        def collect(i: int, piece: Piece, own: Lent) -> None:
            pt, lo, hi, _ = piece
            if "out" not in own:  # else the kernel wrote `result` itself
                self.read_stripes(pt.out_stage[i % 2], result[lo:hi])

        # stage and collect touch only their own slices of g and result: safe to overlap.
        self._pipeline(self._rounds(bits), stage, collect, step, f"steps {self.step_count} and {step}", overlap=True)

    # ---- streaming by ranges (the torch layer: gradients read from, results written to, the model) --
    def pieces(self, lo: int, hi: int) -> list[tuple[CuPart, int, int]]:
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
                                 np.empty(self.chunk_elems, STORAGE_DTYPES[self.spec.out_dtype]))
        return self._host_chunks

    def share_host_chunks(self, raw: np.ndarray, out_raw: np.ndarray) -> None:
        """Use the caller's host chunks (uint8, at least 4 x chunk_elems bytes each): the shards of
        one optimizer run one after another, so they can share two chunks instead of two each."""
        if raw.nbytes < 4 * self.chunk_elems or out_raw.nbytes < 4 * self.chunk_elems:
            raise UserError(f"share_host_chunks: needs {4 * self.chunk_elems} bytes per chunk")
        out_np = STORAGE_DTYPES[self.spec.out_dtype]
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
                self._get_state(pt, array, a, out[a - lo:b - lo], tmp)
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
        beats_per_blk = blk.size // BEAT_BYTES
        if beats_per_blk < 1:
            raise UserError(f"state_equals: the gathering scratch holds {blk.size} bytes; it needs one 64-byte beat")
        gathered = blk[: beats_per_blk * BEAT_BYTES].view(f"V{BEAT_BYTES}")
        native = stripe_equal()
        for pt, a, b in self.pieces(lo, lo + expect.size):
            want = want_all[4 * (a - lo):4 * (b - lo)]
            bufs = pt.state[array]
            stripes = len(bufs)
            offset = BEAT_BYTES * self._state_beat(pt, a)
            full = want.size // BEAT_BYTES
            nb = -(-want.size // BEAT_BYTES)
            beats = want[: full * BEAT_BYTES].view(f"V{BEAT_BYTES}")
            if stripes > 1:  # card memory is host memory: every stripe compared where it lies, in one pass
                views = [self.dev.host_view(buf, offset, layout.stripe_beats(nb, stripes, k) * BEAT_BYTES)
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
                card = self.dev.host_view(buf, offset, cnt * BEAT_BYTES)
                if card is None:  # a real card: the stripe comes over once, into the free host chunk
                    card = self.dev.read(buf, tmp[: cnt * BEAT_BYTES], offset)
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
                    if not same_bytes(g, card[BEAT_BYTES * j:BEAT_BYTES * (j + part.size)]):
                        return False
                if mine.size < cnt:  # this stripe holds the partial last beat
                    tail = want[full * BEAT_BYTES:]
                    at = BEAT_BYTES * mine.size
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
                self._put_state(pt, array, a, data[a - lo:b - lo], tmp)

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
        kernel reads and writes those arrays in place (`lend`), with no copy at all. With
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
        work = [[(pt, a, b, bits)] for lo, hi, bits in runs for pt, a, b in self.pieces(lo, hi)]
        if not work:
            return gate is None or bool(gate())
        raw, obuf = self.host_chunks()
        gbuf = raw[: self.chunk_elems * self.spec.grad_bytes].view(STORAGE_DTYPES[self.spec.grad_dtype])
        pbuf = raw.view(np.float32)
        otmp = obuf.view(np.uint8)  # free between collects: scratch for striped copies
        dsts: dict[int, np.ndarray] = {}  # piece -> the output's own memory, where it is copied to

        def stage(i: int, piece: Piece, own: Lent) -> None:
            pt, a, b, _ = piece
            g = gbuf[: b - a]
            src = fill(a, b, g)  # or the gradient itself, when it can go to the card as it is
            buf = self.lend(pt.grad_stage[i % 2], src)
            if buf is None:
                self.write_stripes(pt.grad_stage[i % 2], g if src is None else src, 0, otmp)
            else:
                own["grad"] = buf
            dst = None if direct is None else direct(a, b)
            buf = self.lend(pt.out_stage[i % 2], dst)
            if buf is not None:
                own["out"] = buf
            elif dst is not None:
                dsts[i] = dst
            if masters_in_direct and self.spec.out_dtype == "fp32":
                stripes = self.lend_stripes(pt.state["p"], dst)
                if stripes is not None:
                    own.update({read_port("p", k): buf for k, buf in enumerate(stripes)})
                    return
            if prepare is not None:  # the gradient chunk is on the card: its host chunk is free again
                prepare(a, b, pbuf[: b - a], otmp)

        def collect(i: int, piece: Piece, own: Lent) -> None:
            pt, a, b, _ = piece
            dst = dsts.pop(i, None)
            if "out" in own:  # the kernel wrote into the parameter's memory itself
                pass
            elif dst is not None:  # straight into the parameter's memory
                self.read_stripes(pt.out_stage[i % 2], dst, 0, raw)
            else:
                o = obuf[: b - a]
                self.read_stripes(pt.out_stage[i % 2], o, 0, raw)  # the gradient/master chunk is free here
                drain(a, b, o)

        return self._pipeline(work, stage, collect, step, "two steps", gate)

    def run_pieces(self, work: list[Piece], stage: Any, collect: Any, step: int, gate: Any = None) -> bool:
        """The launch pipeline over `work` (pieces: (part, lo, hi, register bits), one per round,
        each inside one part) with the caller's own `stage(i, piece, own)` and `collect(i, piece,
        own)` (`pipeline.LaunchPipeline`): for a data path that stages through host memory of its
        own (`pynq_driver.optim.devpath`). Staging slot i % 2 is piece i's; `gate` as for `stream`."""
        self._check_open()
        if self.inconsistent:
            raise StateError(f"{self.inconsistent}; load a checkpoint (load_state_dict / ShardState.load) first")
        if not work:
            return gate is None or bool(gate())
        return self._pipeline([[w] for w in work], stage, collect, step, "two steps", gate)

    # ---- reading and restoring the state ------------------------------------------------------
    def _read_state(self, array: str) -> np.ndarray:
        self._check_open()
        out = np.empty(self.n, np.float32)
        for part, lo, hi in self.chunks():
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
        missing = [k for k in ("step", *STATE_ARRAYS) if k not in sd]
        if missing:
            raise UserError(f"state_dict: missing {', '.join(missing)} (needs step, params, exp_avg, exp_avg_sq)")
        if "spec" in sd and sd["spec"] is not None:
            check_spec(dict(sd["spec"]), self.spec, "state_dict", UserError)
        step = _as_step(sd["step"])
        arrays = {k: host_array(sd[k], "fp32", self.n, f"state_dict[{k!r}]", err=UserError) for k in STATE_ARRAYS}
        for key, array in (("params", "p"), ("exp_avg", "m"), ("exp_avg_sq", "v")):
            for part, lo, hi in self.chunks():
                self._put_state(part, array, lo, arrays[key][lo:hi])
        self.step_count = step
        self.inconsistent = None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the state as .npz (no pickle) with a JSON header: spec, n, step, sha256 of each array."""
        return write_state_file(path, self.state_dict(), self.n, self.inconsistent is None)

    @classmethod
    def load(cls, path: str | os.PathLike[str], dev: Device, chunk_elems: int | None = None,
             **kw: Any) -> ShardState:
        """A new shard on `dev` from a file written by `save` (any backend)."""
        try:
            max_n = int(dev.manifest["sizing"]["max_params_per_card"])
        except (AttributeError, KeyError, TypeError, ValueError):
            max_n = None
        header, arrays = read_state_file(path, dev.spec, max_n)
        shard = cls(dev, arrays["params"], chunk_elems, **kw)
        try:
            shard.load_state_dict({"step": header["step"], **arrays})
        except BaseException:
            shard.close()
            raise
        return shard


def _as_step(step: Any) -> int:
    if is_torch(step):
        step = step.item()
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)) or step < 0 \
            or float(step) != int(step):
        raise UserError(f"state_dict['step']: {step!r} must be a non-negative integer")
    return int(step)


__all__ = ["CHUNK_ALIGN", "DEFAULT_CHUNK_ELEMS", "DeviceError", "ShardState", "check_fits", "default_chunk_elems",
           "host_array", "read_state_file", "same_bytes"]
