"""Why rings of RTL cards need round-major sequence numbers: a packet-level model of the buffers.

Each card of the ring has, per flow, T transmit slots (a packet admitted and not yet accepted by the
successor) and R receive slots (accepted and not yet consumed); a card admits the packets of its own
flow strictly in sequence order (go-back-N), its own chunk's packets at once, a forward only with the
predecessor's packet of the hop before at the head of its receive slots; last-hop packets go to card
memory. Lossless: the model asks only whether some order of events can stall the ring, which loss
does not change (a retransmission re-sends a packet the model already counts in the slots). It is
the RTL card's buffering as sim/rtl/net/README.md "Known defect" describes it, not its timing.

Found: hop-major order (today's RTL) deadlocks exactly when a chunk has T + R packets or more;
round-major order with segment B never deadlocked with 2 B < T + R (the bound the README proves)
for any chunk, under lock-step and random schedules.
"""

from __future__ import annotations

import random
from collections import deque

import pytest

from hls.net.wire import hop_index_of


def ring_finishes(world: int, packets: int, tx_slots: int, rx_slots: int, segment: int,
                  seed: int | None = None) -> bool:
    """Whether one flow's step of `world` cards (chunks of `packets` packets) finishes: lock-step rounds
    of every possible move (`seed` None) or one random possible move at a time (seeded)."""
    hops = world - 1
    order = [hop_index_of(s, packets, hops, segment) for s in range(packets * hops)]
    nxt = [0] * world
    tx: list[deque] = [deque() for _ in range(world)]
    rx: list[deque] = [deque() for _ in range(world)]
    rng = random.Random(seed)

    def moves(k: int) -> list[str]:
        out = []
        if tx[k] and len(rx[(k + 1) % world]) < rx_slots:
            out.append("send")
        if rx[k] and rx[k][0][0] == hops - 1:
            out.append("drain")
        if nxt[k] < len(order) and len(tx[k]) < tx_slots:
            hop, index = order[nxt[k]]
            if hop == 0 or (rx[k] and rx[k][0] == (hop - 1, index)):
                out.append("admit")
        return out

    def do(k: int, move: str) -> None:
        if move == "send":
            rx[(k + 1) % world].append(tx[k].popleft())
        elif move == "drain":
            rx[k].popleft()
        else:
            hop, index = order[nxt[k]]
            if hop:
                rx[k].popleft()
            tx[k].append((hop, index))
            nxt[k] += 1

    while True:
        possible = [(k, m) for k in range(world) for m in moves(k)]
        if not possible:
            return all(n == len(order) for n in nxt) and not any(tx) and not any(rx)
        if seed is None:
            for k in range(world):
                for m in moves(k):
                    if m in moves(k):
                        do(k, m)
        else:
            do(*rng.choice(possible))


@pytest.mark.parametrize(("tx_slots", "rx_slots"), [(16, 8), (4, 4), (6, 2), (3, 1)])
def test_hop_major_deadlocks_at_transmit_plus_receive_slots(tx_slots: int, rx_slots: int) -> None:
    bound = tx_slots + rx_slots
    for world in (3, 4, 6):
        assert all(ring_finishes(world, p, tx_slots, rx_slots, 0) for p in range(1, bound))
        assert not any(ring_finishes(world, p, tx_slots, rx_slots, 0) for p in (bound, bound + 1, 3 * bound))
        assert not ring_finishes(world, bound, tx_slots, rx_slots, 0, seed=1)


@pytest.mark.parametrize(("tx_slots", "rx_slots"), [(16, 8), (4, 4), (6, 2), (3, 2)])
def test_round_major_never_deadlocks_below_the_bound(tx_slots: int, rx_slots: int) -> None:
    segment = (tx_slots + rx_slots - 1) // 2  # the largest B with 2 B < T + R
    for world in (3, 4, 5):
        for packets in (segment + 1, 2 * segment + 1, 4 * (tx_slots + rx_slots) + 3):
            assert ring_finishes(world, packets, tx_slots, rx_slots, segment), (world, packets)
            assert all(ring_finishes(world, packets, tx_slots, rx_slots, segment, seed=s) for s in range(8))
