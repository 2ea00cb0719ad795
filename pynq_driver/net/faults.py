"""A seeded fault layer between a card's port and its cable: drop, duplicate, reorder, bit-flip
and delay, each with its own probability per frame.

A bit flip inverts one bit anywhere in the frame (headers, payload or the FCS itself), so the
frame fails its check at the receiver (CRC-32 catches every single-bit error) and is dropped
there as a real MAC would drop it. With `flip_behind_fcs` the flip lands where no frame check
sees it: inside the frame before its FCS, and the FCS is recomputed over the damaged bytes (a
store-and-forward switch's buffer memory does this; so does a flip past the receiving MAC's
check, in the CMAC's receive clock-crossing FIFO, whose frame-check flag AMD's XUP VNx
integration does not pass on). Only the UDP checksum catches those (`Drop.UDP_CHECKSUM`). Frames
must then carry their FCS (cards with `fcs=True`, the default). Reorder holds a frame back and
sends it after the next one (or after `hold_s` when no next frame comes). Delay holds a frame for a uniform time in
[0, `delay_s`]. Every decision comes from one `random.Random(seed)`, so a run's faults repeat
for a given seed and sequence of frames.

`FaultLayer.send(frame, address, now)` replaces the transport's `send`; the event loop calls
`flush(now)` every turn to release the held frames that are due, and `next_due()` tells it how
long it may sleep.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from hls.errors import UserError
from hls.net.wire import FCS_BYTES, flip_bit

Send = Callable[[bytes, Any], None]


@dataclass(frozen=True)
class Faults:
    """Per-frame probabilities of each fault, the longest delay and the seed."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    bitflip: float = 0.0
    delay: float = 0.0
    delay_s: float = 0.002
    hold_s: float = 0.002  # a reordered frame waits at most this long for a frame to overtake it
    flip_behind_fcs: bool = False  # a flip the FCS does not see (the FCS recomputed), see above
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "reorder", "bitflip", "delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise UserError(f"faults.{name}: {value!r} must be a probability in [0, 1)")
        for name in ("delay_s", "hold_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise UserError(f"faults.{name}: {value!r} must be 0 .. 1 seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UserError(f"faults.seed: {self.seed!r} must be an integer")
        if not isinstance(self.flip_behind_fcs, bool):
            raise UserError(f"faults.flip_behind_fcs: {self.flip_behind_fcs!r} must be true or false")

    @property
    def any(self) -> bool:
        return any((self.drop, self.duplicate, self.reorder, self.bitflip, self.delay))

    def for_rank(self, rank: int) -> Faults:
        """The same faults with a seed of the rank's own (each card's faults independent, repeatable)."""
        return Faults(**{**asdict(self), "seed": self.seed * 1009 + rank})


@dataclass
class FaultCounters:
    frames: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0
    bitflipped: int = 0
    delayed: int = 0


@dataclass
class FaultLayer:
    """Applies `faults` to the frames handed to `send`, then passes them to `out(frame, address)`."""

    faults: Faults
    out: Send
    counters: FaultCounters = field(default_factory=FaultCounters)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.faults.seed)
        self._held: list[tuple[float, int, bytes, Any]] = []  # (due, order, frame, address)
        self._order = 0
        self._reordered: tuple[float, bytes, Any] | None = None

    def _hold(self, due: float, frame: bytes, address: Any) -> None:
        self._order += 1
        self._held.append((due, self._order, frame, address))

    def send(self, frame: bytes, address: Any, now: float) -> None:
        f, rng, c = self.faults, self._rng, self.counters
        c.frames += 1
        if not f.any:
            self.out(frame, address)
            return
        # Draw every decision each time, so one fault's probability does not shift another's stream.
        r_drop, r_dup, r_reorder, r_flip, r_delay = (rng.random() for _ in range(5))
        bit = rng.randrange(8 * len(frame)) if frame else 0
        wait = rng.uniform(0.0, f.delay_s)
        if r_drop < f.drop:
            c.dropped += 1
            return
        flipped = r_flip < f.bitflip and len(frame) > (FCS_BYTES if f.flip_behind_fcs else 0)
        if flipped:
            frame = flip_bit(frame, bit, behind_fcs=f.flip_behind_fcs)
        copies = 2 if r_dup < f.duplicate else 1
        c.duplicated += copies - 1
        c.bitflipped += copies if flipped else 0  # corrupted frames handed to the wire
        for _ in range(copies):
            if r_delay < f.delay:
                c.delayed += 1
                self._hold(now + wait, frame, address)
            elif r_reorder < f.reorder and self._reordered is None:
                c.reordered += 1
                self._reordered = (now + f.hold_s, frame, address)
            else:
                self.out(frame, address)
                if self._reordered is not None:  # the held frame goes after the one that overtook it
                    _, held, where = self._reordered
                    self._reordered = None
                    self.out(held, where)

    def flush(self, now: float) -> None:
        """Send the held frames that are due."""
        if self._reordered is not None and self._reordered[0] <= now:
            _, held, where = self._reordered
            self._reordered = None
            self.out(held, where)
        if self._held:
            due = sorted(h for h in self._held if h[0] <= now)
            self._held = [h for h in self._held if h[0] > now]
            for _, _, frame, address in due:
                self.out(frame, address)

    def next_due(self) -> float | None:
        """When the next held frame is due (None: nothing held)."""
        times = [h[0] for h in self._held] + ([self._reordered[0]] if self._reordered else [])
        return min(times) if times else None


__all__ = ["FaultCounters", "FaultLayer", "Faults"]
