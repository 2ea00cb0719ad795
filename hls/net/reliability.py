"""Go-back-N with credits (design.md 8.3): one flow's sender and receiver as pure state machines.

No sockets and no clocks: time comes in as `now` (seconds, any monotonic origin), frames as
sequence numbers. A flow is (step, phase, source -> destination); sequence numbers start at 0
each step and a flow carries `total` packets.

Sender: `provide(seq, nbytes)` makes a packet sendable (in any order; only the contiguous prefix is
sent), `poll(now)` returns the sequence numbers to transmit now, never more than min(window,
credit) past the last ACK; `on_ack` / `on_nak` take the receiver's answers; a retransmission
timeout with no progress goes back to the oldest unacknowledged packet.

Receiver: `on_frame(step, seq)` says what to do with a data frame (`Verdict.ACCEPT`: consume it
now, in order; anything else: drop it); `take_reply()` gives the ACK or NAK to send, if any:
a cumulative ACK (next expected = every packet below it consumed) with the credit (free slots),
one NAK per gap, a re-ACK for a duplicate. The ACK after the flow's final packet (`final=True`)
goes twice: nothing follows it that could carry a later ACK, so a lost copy would otherwise cost
the sender a retransmission timeout (with loss rate p per frame, p^2 instead of p).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ProtocolError(RuntimeError):
    """A peer sent something no correct peer can send (e.g. an ACK for a packet never sent)."""


class Verdict(enum.Enum):
    ACCEPT = "accept"  # the next expected packet: consume it
    DUPLICATE = "duplicate"  # already consumed: drop, re-ACK
    GAP = "gap"  # beyond the next expected: drop, NAK once per gap
    STALE = "stale"  # another step's frame: drop
    OVERFLOW = "overflow"  # no free slot (the sender used a stale credit): drop, re-ACK


class Reply(enum.Enum):
    ACK = "ack"
    NAK = "nak"


@dataclass
class SenderCounters:
    frames_sent: int = 0
    bytes_sent: int = 0
    retransmitted_frames: int = 0
    retransmitted_bytes: int = 0
    timeouts: int = 0
    acks_received: int = 0
    naks_received: int = 0
    stale_replies: int = 0  # ACK/NAK of another step or below the window: ignored


@dataclass
class Sender:
    """One flow's sender. `credit` starts at the receiver's slot count, known from the configuration."""

    step: int
    total: int
    window: int
    credit: int
    rto: float
    base: int = 0  # oldest unacknowledged sequence number
    next_seq: int = 0  # next sequence number to transmit
    sent_high: int = 0  # one past the highest sequence number ever sent: below it a send is a retransmission
    timer_start: float | None = None  # when the oldest unacknowledged packet's timer started
    sizes: dict[int, int] = field(default_factory=dict)
    counters: SenderCounters = field(default_factory=SenderCounters)

    def __post_init__(self) -> None:
        if self.window < 1 or self.credit < 0 or self.rto <= 0 or self.total < 0:
            raise ValueError(f"sender: window {self.window} >= 1, credit {self.credit} >= 0, rto {self.rto} > 0, "
                             f"total {self.total} >= 0")

    @property
    def done(self) -> bool:
        """Every packet acknowledged."""
        return self.base >= self.total

    @property
    def in_flight(self) -> int:
        return self.next_seq - self.base

    def provide(self, seq: int, nbytes: int) -> None:
        """Packet `seq` (of `nbytes` payload bytes) is ready to send."""
        if not 0 <= seq < self.total:
            raise ValueError(f"seq {seq} outside the flow's 0 .. {self.total - 1}")
        self.sizes[seq] = nbytes

    def poll(self, now: float) -> list[int]:
        """Sequence numbers to transmit now, in order (retransmissions included)."""
        if self.in_flight and self.timer_start is not None and now - self.timer_start >= self.rto:
            self.counters.timeouts += 1
            self.next_seq = self.base  # go back N
            self.timer_start = now
        out = []
        while (self.next_seq < self.total and self.next_seq in self.sizes
               and self.in_flight < min(self.window, self.credit)):
            seq = self.next_seq
            nbytes = self.sizes[seq]
            self.counters.frames_sent += 1
            self.counters.bytes_sent += nbytes
            if seq < self.sent_high:
                self.counters.retransmitted_frames += 1
                self.counters.retransmitted_bytes += nbytes
            if self.in_flight == 0 and self.timer_start is None:
                self.timer_start = now
            self.next_seq += 1
            self.sent_high = max(self.sent_high, self.next_seq)
            out.append(seq)
        return out

    def _advance(self, step: int, ack: int, credit: int, now: float) -> bool:
        if step != self.step or ack < self.base:
            self.counters.stale_replies += 1
            return False
        if ack > self.sent_high:
            raise ProtocolError(f"ACK/NAK for sequence number {ack}, but only {self.sent_high} packets were sent")
        if ack > self.base:
            self.base = ack
            self.timer_start = now if ack < self.next_seq else None  # progress restarts the timer
        self.next_seq = max(self.next_seq, self.base)
        self.credit = credit
        return True

    def on_ack(self, step: int, ack: int, credit: int, now: float) -> None:
        """A cumulative ACK: every packet below `ack` consumed; `credit` free slots past it."""
        self.counters.acks_received += 1
        self._advance(step, ack, credit, now)

    def on_nak(self, step: int, expected: int, credit: int, now: float) -> None:
        """A NAK: everything below `expected` consumed, a gap after it: go back to `expected`."""
        self.counters.naks_received += 1
        if self._advance(step, expected, credit, now) and self.next_seq > expected:
            self.next_seq = expected
            self.timer_start = now


@dataclass
class ReceiverCounters:
    accepted: int = 0
    duplicates: int = 0
    gaps: int = 0  # frames dropped for a gap (not gaps: one gap can drop several frames)
    stale: int = 0
    overflows: int = 0
    acks_sent: int = 0
    naks_sent: int = 0


@dataclass
class Receiver:
    """One flow's receiver with `slots` receive slots.

    A consumer that cannot free a slot at once calls `hold()` after consuming and `release()`
    later; credit = slots - held. The card model consumes at once (its copy of the data lives in
    card memory), so its credit is always `slots`.
    """

    step: int
    slots: int
    expected: int = 0  # the next sequence number to consume; the cumulative ACK value
    held: int = 0
    nak_for: int | None = None  # the expected number a NAK was already sent for (one NAK per gap)
    reply: Reply | None = None
    repeat: bool = False  # the flow's final ACK is to go once more after the pending one
    counters: ReceiverCounters = field(default_factory=ReceiverCounters)

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"receiver: slots {self.slots} must be >= 1")

    @property
    def credit(self) -> int:
        return self.slots - self.held

    def on_frame(self, step: int, seq: int, final: bool = False) -> Verdict:
        """The verdict on data frame `seq` of `step`; `final`: it is the flow's last packet (its
        ACK, once accepted, is sent twice)."""
        if step != self.step:
            self.counters.stale += 1
            return Verdict.STALE
        if seq < self.expected:
            self.counters.duplicates += 1
            self.reply = self.reply or Reply.ACK
            return Verdict.DUPLICATE
        if seq > self.expected:
            self.counters.gaps += 1
            if self.nak_for != self.expected:
                self.nak_for = self.expected
                self.reply = Reply.NAK
            return Verdict.GAP
        if self.held >= self.slots:
            self.counters.overflows += 1
            self.reply = self.reply or Reply.ACK
            return Verdict.OVERFLOW
        self.expected += 1
        self.counters.accepted += 1
        self.reply = Reply.ACK  # a NAK not yet sent is moot: the gap is filled
        self.repeat = final
        return Verdict.ACCEPT

    def hold(self, count: int = 1) -> None:
        if self.held + count > self.slots:
            raise ValueError(f"hold {count}: only {self.slots - self.held} slots free")
        self.held += count

    def release(self, count: int = 1) -> None:
        """Free slots; the credit reopens, so an ACK carrying it is due."""
        if count > self.held:
            raise ValueError(f"release {count}: only {self.held} held")
        self.held -= count
        self.reply = self.reply or Reply.ACK

    def refresh(self) -> None:
        """Send the current ACK again (a keep-alive when a credit update may have been lost)."""
        self.reply = self.reply or Reply.ACK

    def take_reply(self) -> tuple[Reply, int, int] | None:
        """The reply due, as (ACK or NAK, next expected sequence number, credit), or None."""
        if self.reply is None:
            return None
        reply, self.reply = self.reply, None
        if reply is Reply.ACK and self.repeat:
            self.repeat, self.reply = False, Reply.ACK
        if reply is Reply.ACK:
            self.counters.acks_sent += 1
        else:
            self.counters.naks_sent += 1
        return reply, self.expected, self.credit
