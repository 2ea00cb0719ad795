"""A ring of card models (hls.net.card) over a seeded lossy in-memory switch equals ring_step bit for bit."""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from hls.golden import Hyper, bits_equal, to_bf16_bits
from hls.net import ring, wire
from hls.net.card import COUNTER_NAMES, DROP_CAUSES, Card, CardConfig, ReferenceKernel
from hls.net.reliability import ProtocolError
from hls.net.wire import Header, Opcode


class Switch:
    """Seeded faults per frame: drop, duplicate, flip one bit (the FCS catches it), delay with jitter (reorder)."""

    def __init__(self, seed: int, *, drop: float = 0.0, dup: float = 0.0, flip: float = 0.0, jitter: float = 0.0,
                 delay: float = 1.0) -> None:
        self.rng = random.Random(seed)
        self.drop, self.dup, self.flip, self.jitter, self.delay = drop, dup, flip, jitter, delay
        self.queue: list[tuple[float, int, int, bytes]] = []
        self.count = 0

    def send(self, now: float, frame: bytes) -> None:
        dst = frame[5]  # wire.endpoint_for_rank: the MAC's last byte is the rank
        copies = (self.rng.random() >= self.drop) + (self.rng.random() < self.dup)
        for _ in range(copies):
            data = bytearray(frame)
            if self.rng.random() < self.flip:
                bit = self.rng.randrange(8 * len(data))
                data[bit // 8] ^= 1 << (bit % 8)
            self.count += 1
            heapq.heappush(self.queue, (now + self.delay + self.rng.random() * self.jitter, self.count, dst,
                                        bytes(data)))

    def due(self, now: float) -> list[tuple[int, bytes]]:
        out = []
        while self.queue and self.queue[0][0] <= now:
            _, _, dst, data = heapq.heappop(self.queue)
            out.append((dst, data))
        return out


def make_ring(world: int, length: int, params: np.ndarray, **config: object) -> tuple[list[Card], list]:
    endpoints = tuple(wire.endpoint_for_rank(r) for r in range(world))
    kernels, cards = [], []
    for r in range(world):
        cfg = CardConfig(rank=r, world=world, length=length, endpoints=endpoints, **config)
        kernels.append(ReferenceKernel(ring.Shard.from_params(params, r, world), wire_dtype=cfg.wire_dtype,
                                       param_dtype=cfg.param_dtype))
        cards.append(Card(cfg, kernels[-1]))
    return cards, kernels


def run_step(cards: list[Card], switch: Switch, now: float, dt: float = 0.5, limit: int = 200000) -> float:
    for _ in range(limit):
        for card in cards:
            for frame in card.poll(now):
                switch.send(now, frame)
        for dst, frame in switch.due(now):
            cards[dst].receive(frame, now)
        for card in cards:
            if card.error is not None:
                raise card.error
        if all(card.done for card in cards):
            return now
        now += dt
    pytest.fail(f"no progress by t = {now}: done {[c.done for c in cards]}")


def grads_for(rng: np.random.Generator, world: int, length: int, dtype: str) -> list[np.ndarray]:
    g = [rng.standard_normal(length).astype(np.float32) * np.float32(10.0 ** rng.integers(-3, 3)) for _ in range(world)]
    return [to_bf16_bits(x) for x in g] if dtype == "bf16" else g


CASES = [  # world, wire dtype, param dtype, payload bytes, two-phase
    (2, "fp32", "fp32", 1408, False),
    (3, "bf16", "bf16", 1408, True),
    (4, "fp32", "bf16", 8192, False),
    (4, "bf16", "fp32", 1408, True),
    (8, "fp32", "fp32", 1408, True),
    (8, "bf16", "bf16", 8192, False),
    (2, "bf16", "bf16", 8192, True),
    (3, "fp32", "fp32", 8192, False),
]


def run_steps(cards: list[Card], kernels: list[ReferenceKernel], switch: Switch, plans: list[tuple],
              dt: float = 0.5, limit: int = 400000) -> list[list[tuple]]:
    """Each card starts its next step as soon as it is done itself (no barrier between the cards), so a
    card can be a step ahead of its neighbours: the previous-step re-ACK and future-step drops run.

    plans[t] = (hyper, local grads, start_step keywords); returns per card, per step, a snapshot of
    (gathered, p, m, v) taken when the card was done."""
    snaps: list[list[tuple]] = [[] for _ in cards]

    def start(r: int, t: int) -> None:
        hyper, grads, kw = plans[t]
        kernels[r].hyper = hyper
        cards[r].start_step(100 + t, grads[r], **kw)

    for r in range(len(cards)):
        start(r, 0)
    now = 0.0
    for _ in range(limit):
        for card in cards:
            for frame in card.poll(now):
                switch.send(now, frame)
        for dst, frame in switch.due(now):
            cards[dst].receive(frame, now)
        for r, card in enumerate(cards):
            if card.error is not None:
                raise card.error
            if card.done and len(snaps[r]) == card.step - 100:  # done with a step not yet recorded
                sh = kernels[r].shard
                snaps[r].append((card.gathered, sh.p.copy(), sh.m.copy(), sh.v.copy()))
                if len(snaps[r]) < len(plans):
                    start(r, len(snaps[r]))
        if all(len(s) == len(plans) for s in snaps):
            return snaps
        now += dt
    pytest.fail(f"no progress by t = {now}: steps done {[len(s) for s in snaps]}")


def assert_snaps_equal_ring_steps(snaps: list[list[tuple]], plans: list[tuple], params: np.ndarray,
                                  wire_dtype: str, param_dtype: str) -> None:
    """Every card's snapshot of every step (run_steps) bit for bit against the lossless ring step."""
    world = len(snaps)
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    for t, (hyper, grads, kw) in enumerate(plans):
        want = ring.ring_step(shards, grads, hyper, wire_dtype=wire_dtype, out_dtype=param_dtype, **kw)
        shards = want.shards
        for r in range(world):
            gathered, *pmv = snaps[r][t]
            assert gathered.dtype == want.gathered.dtype and bits_equal(gathered, want.gathered).all(), (t, r)
            for name, got in zip("pmv", pmv, strict=True):
                assert bits_equal(got, getattr(shards[r], name)).all(), (t, r, name)


@pytest.mark.parametrize(("world", "wire_dtype", "param_dtype", "payload", "two_phase"), CASES)
def test_ring_of_cards_equals_ring_step(world: int, wire_dtype: str, param_dtype: str, payload: int,
                                        two_phase: bool) -> None:
    seed = world * 1000 + payload + two_phase
    rng = np.random.default_rng(seed)
    per_packet = payload // wire.ELEMENT_BYTES[wire_dtype]
    length = world * (2 * per_packet + per_packet // 3) - 5  # about 2.3 packets per chunk, a short last packet
    params = rng.standard_normal(length).astype(np.float32)
    cards, kernels = make_ring(world, length, params, wire_dtype=wire_dtype, param_dtype=param_dtype,
                               payload_bytes=payload, window=4, slots=6, rto=25.0, comm=7)
    switch = Switch(seed, drop=0.05, dup=0.03, flip=0.03, jitter=3.0)
    max_norm = 1.0 if two_phase else None
    plans = [(Hyper(lr=1e-2, step=t), grads_for(rng, world, length, wire_dtype),
              {"two_phase": two_phase, "max_norm": max_norm}) for t in range(1, 4)]
    snaps = run_steps(cards, kernels, switch, plans)
    assert_snaps_equal_ring_steps(snaps, plans, params, wire_dtype, param_dtype)
    counters = [card.counters for card in cards]
    total = {name: sum(c[name] for c in counters) for name in counters[0]}
    # the faults happened and were repaired (seeded: the same counts every run)
    assert total["retransmitted_frames"] > 0 and total["retransmitted_bytes"] > 0
    assert total["dropped_fcs"] + total["dropped_duplicate"] + total["dropped_gap"] > 0
    assert total["naks_sent"] + total["timeouts"] > 0  # the go-back paths ran
    assert set(counters[0]) == set(COUNTER_NAMES) | {f"dropped_{d}" for d in DROP_CAUSES}
    assert total["dropped_previous_step"] > 0  # a card a step ahead re-ACKed its predecessor's last flow


@pytest.mark.parametrize(("world", "wire_dtype", "param_dtype", "payload"), [(3, "fp32", "fp32", 1408),
                                                                             (4, "bf16", "fp32", 8192),
                                                                             (8, "bf16", "bf16", 1408)])
def test_clean_wire_bytes_per_step(world: int, wire_dtype: str, param_dtype: str, payload: int) -> None:
    rng = np.random.default_rng(world)
    length = 3000 * world + 1
    params = rng.standard_normal(length).astype(np.float32)
    cards, _ = make_ring(world, length, params, wire_dtype=wire_dtype, param_dtype=param_dtype,
                         payload_bytes=payload, rto=1e9)
    for card, g in zip(cards, grads_for(rng, world, length, wire_dtype), strict=True):
        card.start_step(0, g)
    run_step(cards, Switch(0), 0.0)
    size = ring.chunk_elems(length, world)
    per_step = (world - 1) * size * (wire.ELEMENT_BYTES[wire_dtype] + wire.ELEMENT_BYTES[param_dtype])
    for card in cards:
        c = card.counters
        assert c["rs_payload_bytes_out"] + c["ag_payload_bytes_out"] == per_step
        assert c["retransmitted_frames"] == 0 and c["timeouts"] == 0 and c["naks_sent"] == 0
        assert all(c[f"dropped_{d}"] == 0 for d in DROP_CAUSES)


def test_nonfinite_gradient_skips_everywhere() -> None:
    world, length = 4, 500
    rng = np.random.default_rng(3)
    params = rng.standard_normal(length).astype(np.float32)
    cards, kernels = make_ring(world, length, params, rto=20.0)
    grads = grads_for(rng, world, length, "fp32")
    grads[2][17] = np.inf
    for card, g in zip(cards, grads, strict=True):
        card.start_step(1, g, two_phase=True)
    run_step(cards, Switch(1, drop=0.1, jitter=2.0), 0.0)
    for card in cards:
        assert card.gathered.tobytes() == params.tobytes()
    assert all(not k.shard.m.any() for k in kernels)


def test_impossible_frame_sets_error_and_foreign_frames_are_counted() -> None:
    world, length = 3, 100
    params = np.zeros(length, np.float32)
    cards, _ = make_ring(world, length, params, comm=5)
    eps = [c.config.endpoints[r] for r, c in enumerate(cards)]
    cards[1].start_step(9, np.zeros(length, np.float32))
    good = Header(Opcode.RS, comm=5, src=0, hop=0, chunk=ring.rs_recv_chunk(1, 0, world), step=9, seq=0,
                  flags=wire.FLAG_LAST, length=64)
    cards[1].receive(wire.build_frame(eps[0], eps[1], Header(**{**good.__dict__, "comm": 6}), bytes(64),
                                      with_fcs=True), 0.0)
    cards[1].receive(wire.build_frame(eps[0], eps[2], good, bytes(64), with_fcs=True), 0.0)
    cards[1].receive(wire.build_frame(eps[0], eps[1], Header(**{**good.__dict__, "step": 3}), bytes(64),
                                      with_fcs=True), 0.0)
    c = cards[1].counters
    assert (c["dropped_comm"], c["dropped_mac"], c["dropped_step"], c["frames_in"]) == (1, 1, 1, 3)
    assert cards[1].error is None
    cards[1].receive(wire.build_frame(eps[0], eps[1], Header(**{**good.__dict__, "chunk": 2}), bytes(64),
                                      with_fcs=True), 0.0)
    assert isinstance(cards[1].error, ProtocolError) and "chunk" in str(cards[1].error)
    assert cards[1].poll(0.0) == [] and not cards[1].done


@pytest.mark.parametrize("world", [3, 5])
def test_ag_release_holds_ag_until_rs_and_scalars_are_acked(world: int) -> None:
    """The ag_release rule of a software peer beside an RTL card (design.md 8.4), two-phase step over
    a lossy, reordering switch: each card's first AG frame goes out only after its RS and scalar
    senders are done (every frame ACKed), and the ring still equals ring_step bit for bit."""
    rng = np.random.default_rng(world + 40)
    length = world * 700 + 3
    params = rng.standard_normal(length).astype(np.float32)
    cards, kernels = make_ring(world, length, params, payload_bytes=1408, window=4, slots=6, rto=25.0,
                               ag_release=True)
    switch = Switch(world, drop=0.08, dup=0.03, jitter=3.0)
    grads = grads_for(rng, world, length, "fp32")
    hyper = Hyper(lr=1e-2, step=1)
    for card, kernel, g in zip(cards, kernels, grads, strict=True):
        kernel.hyper = hyper
        card.start_step(5, g, two_phase=True, max_norm=1.0)
    first_ag: list[bool | None] = [None] * world  # RS and scalar senders done at the card's first AG frame
    now = 0.0
    while not all(card.done for card in cards):
        for r, card in enumerate(cards):
            for frame in card.poll(now):
                if frame[42] & 0xF == Opcode.AG and first_ag[r] is None:
                    first_ag[r] = all(card._flows[f].sender.done for f in (wire.Flow.RS, wire.Flow.SCALAR))
                switch.send(now, frame)
        for dst, frame in switch.due(now):
            cards[dst].receive(frame, now)
        assert all(card.error is None for card in cards)
        now += 0.5
        assert now < 1e5, "no progress"
    assert first_ag == [True] * world
    want = ring.ring_step([ring.Shard.from_params(params, r, world) for r in range(world)], grads, hyper,
                          two_phase=True, max_norm=1.0)
    for r, card in enumerate(cards):
        assert bits_equal(card.gathered, want.gathered).all(), r
        for name in "pmv":
            assert bits_equal(getattr(kernels[r].shard, name), getattr(want.shards[r], name)).all(), (r, name)
    assert sum(card.counters["retransmitted_frames"] for card in cards) > 0


@pytest.mark.parametrize(("world", "wire_dtype", "param_dtype", "segment", "two_phase"), [
    (3, "fp32", "fp32", 1, False),
    (4, "bf16", "fp32", 2, True),
    (5, "fp32", "bf16", 3, False),
])
def test_round_major_ring_equals_ring_step(world: int, wire_dtype: str, param_dtype: str, segment: int,
                                          two_phase: bool) -> None:
    """Round-major sequence numbers (segment B: several rounds, a short last one) under drops, duplicates,
    bit flips and reordering: the same bits as the hop-major ring step, over three steps."""
    seed = 31 * world + segment
    rng = np.random.default_rng(seed)
    per_packet = 1408 // wire.ELEMENT_BYTES[wire_dtype]
    length = world * (7 * per_packet + per_packet // 2) - 3  # 8 packets per chunk, a short last one
    params = rng.standard_normal(length).astype(np.float32)
    cards, kernels = make_ring(world, length, params, wire_dtype=wire_dtype, param_dtype=param_dtype,
                               window=4, slots=6, rto=25.0, segment=segment)
    switch = Switch(seed, drop=0.04, dup=0.03, flip=0.02, jitter=3.0)
    plans = [(Hyper(lr=1e-2, step=t), grads_for(rng, world, length, wire_dtype),
              {"two_phase": two_phase, "max_norm": 1.0 if two_phase else None}) for t in range(1, 4)]
    snaps = run_steps(cards, kernels, switch, plans)
    assert_snaps_equal_ring_steps(snaps, plans, params, wire_dtype, param_dtype)
    assert sum(card.counters["retransmitted_frames"] for card in cards) > 0


def test_round_major_frames_leave_in_round_order() -> None:
    """On a clean wire every data frame of a flow leaves in sequence order, and with B = 2 that order is
    B packets of the own chunk, the same packets of each later hop, then the next B (wire.seq_of)."""
    world, segment = 4, 2
    per_packet = 1408 // 4
    length = world * 5 * per_packet  # 5 packets per chunk: rounds of 2, 2, 1
    rng = np.random.default_rng(5)
    params = rng.standard_normal(length).astype(np.float32)
    cards, _ = make_ring(world, length, params, rto=1e9, segment=segment)
    sent: dict[tuple[int, int], list] = {}
    for card, g in zip(cards, grads_for(rng, world, length, "fp32"), strict=True):
        card.start_step(0, g)
    now = 0.0
    switch = Switch(0)
    while not all(card.done for card in cards):
        for card in cards:
            for frame in card.poll(now):
                h = wire.parse_frame(frame, with_fcs=True).header
                if h.opcode in (Opcode.RS, Opcode.AG):
                    sent.setdefault((card.config.rank, h.opcode.value), []).append((h.seq, h.hop, h.offset))
                switch.send(now, frame)
        for dst, frame in switch.due(now):
            cards[dst].receive(frame, now)
        now += 0.5
    order = [(hop, index) for r in range(3) for hop in range(world - 1)
             for index in range(2 * r, min(2 * r + 2, 5))]
    for frames in sent.values():
        assert [s for s, _, _ in frames] == list(range(5 * (world - 1)))
        assert [(hop, off // per_packet) for _, hop, off in frames] == order


def test_segment_is_validated_and_must_match_on_the_ring() -> None:
    endpoints = tuple(wire.endpoint_for_rank(r) for r in range(3))
    for bad in (-1, 1 << 16, 1.5, True):
        with pytest.raises(ValueError, match="segment"):
            CardConfig(rank=0, world=3, length=3000, endpoints=endpoints, segment=bad)
    rng = np.random.default_rng(2)
    length = 3 * 4 * 352
    params = rng.standard_normal(length).astype(np.float32)
    cards, _ = make_ring(3, length, params, rto=1e9)
    cards[1] = Card(CardConfig(rank=1, world=3, length=length, endpoints=endpoints, segment=1),
                    cards[1].update)
    for card, g in zip(cards, grads_for(rng, 3, length, "fp32"), strict=True):
        card.start_step(0, g)
    with pytest.raises(ProtocolError, match="expected"):
        run_step(cards, Switch(0), 0.0)
