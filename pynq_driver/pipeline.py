"""The one launch pipeline of a shard: its kernel runs double-buffered through the two staging slots.

Work comes in rounds, each a list of pieces (a chunk of one compute unit's part with its scalar
registers); the pieces of a round run at once, one per CU. While the kernels of round i run, the
inputs of round i+1 are staged into the other slot and the outputs of round i-1 collected:

    stage(0) [gate] launch(0) | stage(i) wait(i-1) launch(i) collect(i-1) | ... wait(last) collect(last)

With `overlap` (a card whose DMA runs beside the host: the alveo backend, for callers whose `stage`
and `collect` touch disjoint host memory), uploads run on one worker thread and downloads on
another, so the next round's upload, this round's kernels and the previous round's download all
overlap; the main thread only waits and launches:

    stage(0) [gate] launch(0) up:stage(1) | wait(i-1) [stage(i) done] [collect(i-2) done] launch(i)
        down:collect(i-1) up:stage(i+1) | ... wait(last) collect(last)

Where card memory is host memory, a piece's own arrays may be lent to the card as its buffers
(`lend`, `Device.import_host`); what a piece borrowed is given back once it is collected, or when
the pipeline stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from hls.ports import port_names, read_port, write_port
from hls.spec import BEAT_BYTES
from pynq_driver.device import Buffer, Device
from pynq_driver.placement import CuPart

# (the CU's part, the chunk [lo, hi) inside it, the kernel's scalar registers)
Piece = tuple[CuPart, int, int, dict[str, int]]
# Buffers a piece borrowed: "grad", "out" (one stripe each), "p{k}_rd" (the masters' stripes to read)
Lent = dict[str, Any]


def lend_stripes(dev: Device, bufs: list[Any], data: np.ndarray | None) -> list[Buffer] | None:
    """Every stripe of `data` (whole 64-byte beats, a piece's start: stripe k holds beats k,
    k + stripes, ...) lent as the buffer of the port of `bufs[k]` (`Device.import_host`), for
    ports the kernel only reads. None where any stripe cannot be lent (nothing is kept)."""
    if data is None or data.nbytes % BEAT_BYTES:
        return None
    lent: list[Buffer] = []
    for k, buf in enumerate(bufs):
        got = dev.import_host(data, buf.bank, len(bufs), k)
        if got is None:
            for b in lent:
                dev.free(b)
            return None
        lent.append(got)
    return lent


def lend(dev: Device, bufs: list[Any], data: np.ndarray | None) -> Buffer | None:
    """`data` itself as the port's buffer (`Device.import_host`) where the card's memory is host
    memory, the port has one stripe and `data` fills whole 64-byte beats: the kernel reads the
    gradient from, or writes the results into, the caller's memory, and the host copy a card's
    DMA would make is saved. None: the caller copies through the staging buffers."""
    lent = lend_stripes(dev, bufs, data) if len(bufs) == 1 else None
    return lent[0] if lent else None


def give_back(dev: Device, own: Lent) -> None:
    """Free every buffer a piece borrowed (`lend`, `lend_stripes`) and forget them."""
    for buf in own.values():
        dev.free(buf)
    own.clear()


def port_pointers(pt: CuPart, state_beat: int, slot: int, grad: Any = None, out: Any = None,
                  p_rd: list[Any] | None = None) -> dict[str, tuple[Any, int]]:
    """Every port of `pt`'s CU for a chunk whose state starts at stripe beat `state_beat`: state
    stripes there, staging slot `slot` at 0 (or the lent buffers: `grad`/`out`, one stripe each;
    `p_rd`, the masters' stripes to read: the results still go to the card's own masters)."""
    offset = BEAT_BYTES * state_beat
    ptrs: dict[str, tuple[Any, int]] = {}
    for a in ("p", "m", "v"):
        for k, buf in enumerate(pt.state[a]):
            ptrs.update(dict.fromkeys(port_names(a, k), (buf, offset)))
    for k, buf in enumerate(p_rd or ()):
        ptrs[read_port("p", k)] = (buf, 0)
    for k, buf in enumerate([grad] if grad is not None else pt.grad_stage[slot]):
        ptrs[read_port("grad", k)] = (buf, 0)
    for k, buf in enumerate([out] if out is not None else pt.out_stage[slot]):
        ptrs[write_port("out", k)] = (buf, 0)
    return ptrs


class LaunchPipeline:
    """Runs rounds of pieces double-buffered (see the module's docstring); `launched` counts the
    kernel runs started, so a caller whose run stops half-way can say how far it got.

    `stage(i, piece, own)` puts a piece's inputs into staging slot i % 2 (or lends them, recording
    the buffers in `own`); `collect(i, piece, own)` takes its outputs once its kernel finished;
    `pointers(piece, slot, own)` gives the kernel's ports for the launch.
    """

    def __init__(self, dev: Device, rounds: list[list[Piece]],
                 pointers: Callable[[Piece, int, Lent], dict[str, tuple[Any, int]]], *, overlap: bool = False) -> None:
        self.dev = dev
        self.rounds = rounds
        self.pointers = pointers
        self.total = sum(len(r) for r in rounds)
        self.launched = 0
        # Workers only where the device's DMA runs beside the host (the soft and rtlsim cards keep the
        # one-thread order: their card is this process, and rtlsim's server takes one request at a time).
        self.overlap = bool(overlap) and bool(getattr(dev, "overlap_dma", False)) and len(rounds) > 1

    def run(self, stage: Callable[[int, Piece, Lent], None], collect: Callable[[int, Piece, Lent], None],
            gate: Callable[[], bool] | None = None) -> bool:
        """Every round through the kernel. `gate` is asked once round 0 is staged, before the first
        launch: False stops there (nothing ran) and returns False; else True once all ran."""
        rounds = self.rounds
        lent: dict[int, list[Lent]] = {}  # round -> what each of its pieces borrowed
        lent_lock = threading.Lock()  # the upload and download workers both touch `lent`

        def stage_round(i: int) -> None:
            with lent_lock:
                owns = lent.setdefault(i, [])
            for piece in rounds[i]:
                owns.append({})
                stage(i, piece, owns[-1])

        def launch_round(i: int) -> None:
            for piece, own in zip(rounds[i], lent[i], strict=True):
                pt, lo, hi, bits = piece
                pt.runner.launch(self.pointers(piece, i % 2, own), hi - lo, bits)
                self.launched += 1

        def wait_round(i: int) -> None:
            for pt, *_ in rounds[i]:
                pt.runner.wait()

        def collect_round(i: int) -> None:
            with lent_lock:
                owns = lent.pop(i, [])
            try:
                for piece, own in zip(rounds[i], owns, strict=True):
                    collect(i, piece, own)
            finally:
                for own in owns:
                    give_back(self.dev, own)

        if self.overlap:
            return self._run_overlapped(stage_round, launch_round, wait_round, collect_round, gate, lent)
        try:
            if not rounds:
                return gate is None or bool(gate())
            stage_round(0)
            if gate is not None and not gate():  # nothing launched: the state is as it was
                return False
            launch_round(0)
            for i in range(1, len(rounds)):
                stage_round(i)  # overlaps the kernels of round i-1
                wait_round(i - 1)
                launch_round(i)
                collect_round(i - 1)  # overlaps the kernels of round i
            wait_round(len(rounds) - 1)
            collect_round(len(rounds) - 1)
            return True
        finally:
            for owns in lent.values():
                for own in owns:
                    give_back(self.dev, own)


    def _run_overlapped(self, stage_round: Callable[[int], None], launch_round: Callable[[int], None],
                        wait_round: Callable[[int], None], collect_round: Callable[[int], None],
                        gate: Callable[[], bool] | None, lent: dict[int, list[Lent]]) -> bool:
        """`run` with uploads and downloads on their own workers (the module's docstring). Kernel i is
        launched once its inputs are staged (stage(i)) and the download of round i-2, whose output
        slot it writes, is done; stage(i+1) refills the input slot of round i-1, whose kernel ended."""
        last = len(self.rounds) - 1
        up = ThreadPoolExecutor(1, thread_name_prefix="optimusnic-upload")
        down = ThreadPoolExecutor(1, thread_name_prefix="optimusnic-download")
        pending: list[Future[None]] = []
        try:
            stage_round(0)
            if gate is not None and not gate():
                return False
            launch_round(0)
            staged: Future[None] = up.submit(stage_round, 1)
            collected: Future[None] | None = None
            pending.append(staged)
            for i in range(1, last + 1):
                wait_round(i - 1)
                staged.result()
                if collected is not None:
                    collected.result()
                launch_round(i)
                collected = down.submit(collect_round, i - 1)
                pending.append(collected)
                if i < last:
                    staged = up.submit(stage_round, i + 1)
                    pending.append(staged)
            wait_round(last)
            if collected is not None:
                collected.result()
            collect_round(last)
            return True
        finally:
            for f in pending:  # nothing may still touch a buffer that is given back below
                f.cancel()
            up.shutdown(wait=True)
            down.shutdown(wait=True)
            for owns in lent.values():
                for own in owns:
                    give_back(self.dev, own)


__all__ = ["LaunchPipeline", "Lent", "Piece", "give_back", "lend", "lend_stripes", "port_pointers"]
