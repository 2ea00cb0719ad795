"""Go-back-N sender and receiver (hls.net.reliability) over seeded lossy, duplicating, reordering links."""

from __future__ import annotations

import heapq
import random

import pytest

from hls.net.reliability import ProtocolError, Receiver, Reply, Sender, Verdict


class Link:
    """A one-way link with seeded loss, duplication and reordering (random delay)."""

    def __init__(self, rng: random.Random, loss: float, dup: float, jitter: float) -> None:
        self.rng, self.loss, self.dup, self.jitter = rng, loss, dup, jitter
        self.queue: list[tuple[float, int, object]] = []
        self.count = 0

    def send(self, now: float, item: object) -> None:
        copies = 0 if self.rng.random() < self.loss else 1
        copies += self.rng.random() < self.dup
        for _ in range(copies):
            self.count += 1
            heapq.heappush(self.queue, (now + 1.0 + self.rng.random() * self.jitter, self.count, item))

    def due(self, now: float) -> list[object]:
        out = []
        while self.queue and self.queue[0][0] <= now:
            out.append(heapq.heappop(self.queue)[2])
        return out


def run_flow(seed: int, total: int, window: int, slots: int, loss: float, dup: float, jitter: float,
             steps: int = 3) -> tuple[list[tuple[int, int]], Sender, int]:
    """`steps` flows one after the other over the same links; returns what the receiver consumed."""
    rng = random.Random(seed)
    data, replies = Link(rng, loss, dup, jitter), Link(rng, loss, dup, jitter)
    consumed: list[tuple[int, int]] = []
    stale = 0
    now = 0.0
    sender = None
    for step in range(steps):
        sender = Sender(step=step, total=total, window=window, credit=slots, rto=8.0)
        receiver = Receiver(step=step, slots=slots)
        order = list(range(total))
        rng.shuffle(order)  # packets become ready out of order: only the contiguous prefix may go
        for tick in range(100000):
            now = tick * 0.25
            if order:
                sender.provide(order.pop(), 64)
            for seq in sender.poll(now):
                assert sender.in_flight <= min(sender.window, sender.credit)
                data.send(now, (step, seq))
            for frame_step, seq in data.due(now):
                verdict = receiver.on_frame(frame_step, seq)
                if frame_step != step:
                    assert verdict is Verdict.STALE  # a stale step's frame is never accepted
                    stale += 1
                if verdict is Verdict.ACCEPT:
                    consumed.append((frame_step, seq))
                    receiver.hold()  # a slow consumer: slots free later
            if receiver.held and rng.random() < 0.5:
                receiver.release()
            if tick % 40 == 0:
                receiver.refresh()  # keep-alive: a lost credit update would stall a closed window
            reply = receiver.take_reply()
            if reply is not None:
                replies.send(now, (step, *reply))
            for reply_step, kind, ack, credit in replies.due(now):
                (sender.on_ack if kind is Reply.ACK else sender.on_nak)(reply_step, ack, credit, now)
            if sender.done and receiver.expected == total:
                break
        else:
            pytest.fail(f"step {step}: no progress: base {sender.base} of {total}")
    assert sender is not None
    return consumed, sender, stale


def test_stale_frames_arrive_and_are_refused() -> None:
    # heavy duplication and long delays: the previous step's frames reach the next step's receiver
    consumed, _, stale = run_flow(3, 20, 6, 6, loss=0.1, dup=0.5, jitter=30.0, steps=4)
    assert stale > 0 and consumed == [(step, seq) for step in range(4) for seq in range(20)]


@pytest.mark.parametrize("seed", range(12))
def test_exactly_once_in_order_under_loss_dup_reorder(seed: int) -> None:
    rng = random.Random(seed)
    total, window, slots = rng.randrange(1, 60), rng.randrange(1, 12), rng.randrange(1, 12)
    consumed, sender, _ = run_flow(seed, total, window, slots, loss=0.15, dup=0.1, jitter=3.0)
    assert consumed == [(step, seq) for step in range(3) for seq in range(total)]
    if total > 5:
        assert sender.counters.retransmitted_frames > 0


def test_clean_link_sends_each_packet_once() -> None:
    consumed, sender, _ = run_flow(1, 40, 8, 8, loss=0.0, dup=0.0, jitter=0.0, steps=1)
    assert consumed == [(0, s) for s in range(40)]
    c = sender.counters
    assert c.frames_sent == 40 and c.bytes_sent == 40 * 64 and c.retransmitted_frames == 0 and c.timeouts == 0


def test_receiver_nak_once_per_gap_and_reack_duplicates() -> None:
    r = Receiver(step=5, slots=4)
    assert r.on_frame(5, 0) is Verdict.ACCEPT and r.take_reply() == (Reply.ACK, 1, 4)
    assert r.on_frame(5, 2) is Verdict.GAP and r.on_frame(5, 3) is Verdict.GAP
    assert r.take_reply() == (Reply.NAK, 1, 4) and r.take_reply() is None
    assert r.on_frame(5, 3) is Verdict.GAP and r.take_reply() is None  # one NAK per gap
    assert r.on_frame(5, 0) is Verdict.DUPLICATE and r.take_reply() == (Reply.ACK, 1, 4)
    assert r.on_frame(4, 1) is Verdict.STALE and r.on_frame(6, 1) is Verdict.STALE and r.take_reply() is None
    assert r.on_frame(5, 1) is Verdict.ACCEPT and r.on_frame(5, 3) is Verdict.GAP
    assert r.take_reply() == (Reply.NAK, 2, 4)  # a new gap, a new NAK
    r.hold(4)
    assert r.on_frame(5, 2) is Verdict.OVERFLOW and r.take_reply() == (Reply.ACK, 2, 0)
    assert (r.counters.duplicates, r.counters.gaps, r.counters.stale, r.counters.naks_sent) == (1, 4, 2, 2)


def test_sender_window_credit_nak_timeout() -> None:
    s = Sender(step=0, total=10, window=4, credit=3, rto=1.0)
    for seq in range(10):
        s.provide(seq, 100)
    assert s.poll(0.0) == [0, 1, 2]  # min(window, credit)
    s.on_ack(0, 1, 4, 0.1)
    assert s.poll(0.1) == [3, 4]
    s.on_nak(0, 2, 4, 0.2)  # packet 2 lost: go back to it
    assert s.poll(0.2) == [2, 3, 4, 5]
    assert s.counters.retransmitted_frames == 3 and s.counters.retransmitted_bytes == 300
    assert s.poll(1.1) == [] and s.poll(1.2) == [2, 3, 4, 5]  # timeout: go back N
    assert s.counters.timeouts == 1
    s.on_ack(1, 6, 4, 1.3)  # another step's ACK: ignored
    assert s.base == 2 and s.counters.stale_replies == 1
    with pytest.raises(ProtocolError):
        s.on_ack(0, 9, 4, 1.4)  # never sent
    s.on_ack(0, 6, 4, 1.5)
    assert s.poll(1.5) == [6, 7, 8, 9]
    s.on_ack(0, 10, 4, 1.6)
    assert s.done and s.poll(5.0) == []
