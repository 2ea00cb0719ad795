"""The switch's engine (sim/tb/models/eth_switch.py SwitchCore) without a simulator: line-rate
timing to the picosecond, forwarding (table, learning, flooding), every fault against
pynq_driver.net.faults.FaultLayer with the same seed, reorder depth and hold, tail drops,
counters reconciled, determinism, and a lossy ring of hls.net.card.Card models through it
bit-exact against hls.net.ring.ring_step. The cocotb benches (tests/hls/rtl/test_eth_switch.py)
run the same engine on simulator time."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest

from hls.golden import Hyper
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel
from hls.paths import TB_MODELS_DIR
from pynq_driver.net.faults import FaultLayer, Faults

sys.path.insert(0, str(TB_MODELS_DIR))
from eth_switch import BROADCAST, PortFaults, SwitchConfig, SwitchCore, last_bit_ps, wire_clocks, wire_ps  # noqa: E402

MAC = [wire.endpoint_for_rank(r).mac for r in range(4)]


def frame(dst: int, src: int, size: int, tag: int = 0) -> bytes:
    body = tag.to_bytes(4, "big") + bytes(size - 18)
    return MAC[dst] + MAC[src] + b"\x08\x00" + body


def drain(core: SwitchCore) -> list:
    out = []
    while core.next_time() is not None:
        out += core.advance(core.next_time())
    return out


def test_line_rate_and_latency_exact() -> None:
    """Back-to-back 1518-byte frames at 100G: 123.04 ns apart, each delivered when its last bit is in."""
    assert wire_ps(1518) == (1518 + 20) * 80 and last_bit_ps(1518) == (1518 + 8) * 80
    assert wire_clocks(1518, 250e6) == pytest.approx(30.76)
    core = SwitchCore(SwitchConfig(ports=2, table={MAC[1]: 1}, learn=False, latency_s=300e-9))
    for k in range(4):
        core.ingress(0, frame(1, 0, 1518, k), 0)
    out = drain(core)
    assert [d.time_ps for d in out] == [300_000 + k * wire_ps(1518) + last_bit_ps(1518) for k in range(4)]
    assert [d.frame[14:18] for d in out] == [k.to_bytes(4, "big") for k in range(4)]
    slow = SwitchCore(SwitchConfig(ports=2, table={MAC[1]: 1}, learn=False, latency_s=0, line_rate=25e9))
    slow.ingress(0, frame(1, 0, 68), 1000)
    assert [d.time_ps for d in drain(slow)] == [1000 + (68 + 8) * 320]


def test_forwarding_learn_flood_filter() -> None:
    core = SwitchCore(SwitchConfig(ports=3, latency_s=0))
    core.ingress(0, frame(1, 0, 100), 0)  # 1 unknown: flooded to 1 and 2
    assert sorted(d.port for d in drain(core)) == [1, 2]
    core.ingress(1, frame(0, 1, 100), 10**6)  # 0 learned at port 0
    assert [d.port for d in drain(core)] == [0]
    core.ingress(0, frame(1, 0, 100), 2 * 10**6)  # 1 now learned
    assert [d.port for d in drain(core)] == [1]
    core.ingress(2, BROADCAST + MAC[2] + bytes(88), 3 * 10**6)
    assert sorted(d.port for d in drain(core)) == [0, 1]
    core.ingress(0, frame(0, 2, 100), 4 * 10**6)  # 0 lives on port 0: filtered
    core.ingress(0, b"\x00" * 10, 4 * 10**6)
    assert drain(core) == []
    t = core.reconcile()
    assert (t["flooded"], t["dropped_no_route"], t["dropped_runt"]) == (2, 1, 1)
    strict = SwitchCore(SwitchConfig(ports=2, learn=False, flood=False))
    strict.ingress(0, frame(1, 0, 100), 0)
    assert drain(strict) == [] and strict.reconcile()["dropped_no_route"] == 1


@pytest.mark.parametrize("seed", [3, 11])
def test_faults_as_fault_layer(seed: int) -> None:
    """The same seed and frames: the same drops, flips, duplicates and reorders as FaultLayer."""
    rates = {"drop": 0.1, "duplicate": 0.1, "reorder": 0.1, "bitflip": 0.1}
    rng = random.Random(seed)
    frames = [frame(1, 0, rng.randint(64, 1500), k) for k in range(300)]
    sent: list[bytes] = []
    layer = FaultLayer(Faults(**rates, seed=seed), lambda f, _a: sent.append(f))
    core = SwitchCore(SwitchConfig(ports=2, table={MAC[1]: 1}, learn=False, latency_s=0,
                                   faults={1: PortFaults(**rates, seed=seed)}))
    for k, f in enumerate(frames):
        layer.send(f, None, 0.0)
        core.ingress(0, f, k * 200_000)  # 200 ns apart: every hold ends behind the next frame
    layer.flush(1e9)
    assert [d.frame for d in drain(core)] == sent
    c, t = layer.counters, core.reconcile()
    assert (t["dropped_fault"], t["duplicated"], t["reordered"], t["bitflipped"]) == (
        c.dropped, c.duplicated, c.reordered, c.bitflipped)
    assert min(c.dropped, c.duplicated, c.reordered, c.bitflipped) > 0


def test_reorder_depth_and_hold() -> None:
    f = PortFaults(reorder=0.95, reorder_depth=3, hold_s=1e-6, seed=1)
    core = SwitchCore(SwitchConfig(ports=2, table={MAC[1]: 1}, learn=False, latency_s=0, faults={1: f}))
    for k in range(8):
        core.ingress(0, frame(1, 0, 100, k), k * 100_000)
    order = [int.from_bytes(d.frame[14:18], "big") for d in drain(core)]
    assert order[:4] == [1, 2, 3, 0], order  # held behind 3 later frames
    assert order[4:] == [5, 6, 7, 4], order  # the last hold ends after hold_s, nothing behind it
    lone = SwitchCore(SwitchConfig(ports=2, table={MAC[1]: 1}, learn=False, latency_s=0, faults={1: f}))
    lone.ingress(0, frame(1, 0, 100), 0)
    assert [d.time_ps for d in drain(lone)] == [1_000_000 + last_bit_ps(100)]


def test_buffer_tail_drop() -> None:
    """3000 bytes per egress buffer (the frame on the wire included): the 4th and 5th of a burst drop."""
    core = SwitchCore(SwitchConfig(ports=3, table={MAC[1]: 1}, learn=False, latency_s=0, buffer_bytes=3000,
                                   frame_log=True))
    for k in range(5):
        core.ingress(0, frame(1, 0, 1000, k), 0)
    core.ingress(2, frame(1, 2, 1000, 9), wire_ps(1000) + 1)  # one left the buffer: room again
    out = drain(core)
    assert [int.from_bytes(d.frame[14:18], "big") for d in out] == [0, 1, 2, 9]
    t = core.reconcile()
    assert (t["dropped_buffer"], t["max_buffer_bytes"], core.ports[1].dropped_buffer) == (2, 3000, 2)
    assert [e[4].split()[0] for e in core.log if e[1] == "drop"] == ["buffer", "buffer"]


def test_validation() -> None:
    with pytest.raises(ValueError, match="faults.drop"):
        PortFaults(drop=1.0)
    with pytest.raises(ValueError, match="reorder_depth"):
        PortFaults(reorder_depth=0)
    with pytest.raises(ValueError, match="ports"):
        SwitchConfig(ports=1)
    with pytest.raises(ValueError, match="buffer_bytes"):
        SwitchConfig(ports=2, buffer_bytes=10)
    with pytest.raises(ValueError, match="table: port 5"):
        SwitchConfig(ports=2, table={MAC[0]: 5})
    with pytest.raises(ValueError, match="6-byte"):
        SwitchConfig(ports=2, table={b"\x01": 0})
    with pytest.raises(TypeError, match="PortFaults"):
        SwitchConfig(ports=2, faults={0: 0.1})
    core = SwitchCore(SwitchConfig(ports=2))
    with pytest.raises(ValueError, match="ingress: port 2"):
        core.ingress(2, frame(1, 0, 100), 0)
    core.advance(100)
    with pytest.raises(ValueError, match="before the switch's time"):
        core.ingress(0, frame(1, 0, 100), 50)


def run_ring(world: int, length: int, config: SwitchConfig, seed: int) -> tuple[dict, list]:
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(length).astype(np.float32)
    grads = [rng.standard_normal(length).astype(np.float32) for _ in range(world)]
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    ref = ring.ring_step(shards, grads, Hyper())
    eps = tuple(wire.endpoint_for_rank(r) for r in range(world))
    cards = [Card(CardConfig(rank=r, world=world, length=length, endpoints=eps, fcs=True, rto=20e-6),
                  ReferenceKernel(shards[r].copy())) for r in range(world)]
    core = SwitchCore(config)
    for r, c in enumerate(cards):
        c.start_step(1, grads[r])
    now = 0
    while not all(c.done for c in cards):  # each card polled every 100 ns
        for r, c in enumerate(cards):
            for f in c.poll(now * 1e-12):
                core.ingress(r, f, now)
        for d in core.advance(now):
            cards[d.port].receive(d.frame, now * 1e-12)
        now += 100_000
        assert now < 10**10 and not any(c.error for c in cards)
    for d in drain(core):  # frames still in flight (a final ACK's repeat) reach their card
        cards[d.port].receive(d.frame, now * 1e-12)
    for c in cards:
        assert np.array_equal(c.gathered.view(np.uint32), ref.gathered.view(np.uint32))
    t = core.reconcile()
    assert sum(c.counters["dropped_fcs"] for c in cards) == t["bitflipped"]
    assert [p.frames_out for p in core.ports] == [c.counters["frames_in"] for c in cards]
    return t, core.log


def test_lossy_ring_bit_exact_and_repeatable() -> None:
    faults = PortFaults(drop=0.02, duplicate=0.03, reorder=0.05, bitflip=0.03, reorder_depth=2, seed=4)
    config = SwitchConfig(ports=3, faults=faults, buffer_bytes=12000, frame_log=True)
    a = run_ring(3, 8000, config, seed=2)
    assert a == run_ring(3, 8000, config, seed=2)
    t = a[0]
    assert min(t["dropped_fault"], t["duplicated"], t["reordered"], t["bitflipped"]) > 0, t
