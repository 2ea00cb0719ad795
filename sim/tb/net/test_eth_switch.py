"""cocotb tests of the bench models sim/tb/models/eth_switch.py, soft_peer.py and eth_port.py.

Rings of N software peers (`SoftPeer`: the exact card model `hls.net.card.Card`) through the
seeded switch complete a step whose gathered parameters equal `hls.net.ring.ring_step` bit for bit
on every peer: lossless, with drops, with duplicates / reordering / bit flips, and with an egress
buffer small enough to force tail drops; the switch's counters reconcile with themselves and with
the cards' (every frame a card sent entered the switch, every frame the switch delivered reached a
card, every bit flip failed a card's FCS check); the same seed gives the same counters and frame
log. The port adapters: the generator's frames go through the stand-in card's MAC transmit stream
(TxAdapter), the switch and back into its receive stream (RxAdapter): beats intact with their
TKEEP, a flipped frame with TUSER on its last beat, a TVALID gap inside a frame flagged.

Top: eth_port_loop.v (the ring tests use none of its ports). Environment: ONIC_SEED.
"""

from __future__ import annotations

import itertools
import os
import random
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource
from eth_port import RxAdapter, TxAdapter, fcs
from eth_switch import DROP_CAUSES, EthSwitch, PortFaults, SwitchConfig, last_bit_ps, wire_ps
from soft_peer import SoftPeer

from hls.golden import Hyper, to_bf16_bits
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel

SEED = int(os.environ.get("ONIC_SEED", "1"))
RTO_S = 20e-6


async def run_ring(world: int, length: int, switch_config: SwitchConfig, *, seed: int, wire_dtype: str = "fp32",
                   two_phase: bool = False, peer_rate: float = 100e9, timeout_s: float = 0.02) -> dict[str, Any]:
    """One step of `world` peers through a fresh switch; checks every peer against ring_step and the
    counters' reconciliation; returns the switch's and the cards' counters and the frame log."""
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(length).astype(np.float32)
    grads = [rng.standard_normal(length).astype(np.float32) * np.float32(0.1) for _ in range(world)]
    if wire_dtype == "bf16":
        grads = [to_bf16_bits(g) for g in grads]
    hyper = Hyper(lr=1e-3, step=1)
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    kw = {"two_phase": True, "max_norm": 0.5} if two_phase else {}
    ref = ring.ring_step(shards, grads, hyper, wire_dtype=wire_dtype, **kw)
    endpoints = tuple(wire.endpoint_for_rank(r) for r in range(world))
    switch = EthSwitch(switch_config)
    peers = []
    for r in range(world):
        cfg = CardConfig(rank=r, world=world, length=length, endpoints=endpoints, wire_dtype=wire_dtype, fcs=True,
                         rto=RTO_S, window=32, slots=32)
        kernel = ReferenceKernel(shards[r].copy(), hyper, wire_dtype=wire_dtype)
        peers.append(SoftPeer(Card(cfg, kernel), switch, r, line_rate=peer_rate))
    switch.start()
    t0 = int(get_sim_time("ps"))
    for r, peer in enumerate(peers):
        peer.start()
        peer.start_step(7, grads[r], **kw)
    for peer in peers:
        await peer.wait_done(timeout_s)
    elapsed_us = (get_sim_time("ps") - t0) * 1e-6
    for _ in range(100000):  # duplicates and held frames still in the switch
        if switch.idle:
            break
        await Timer(1, "us")
    assert switch.idle, "the switch never drained"
    for r, peer in enumerate(peers):
        got = peer.gathered
        assert got is not None and got.dtype == ref.gathered.dtype
        assert np.array_equal(got.view(np.uint8), ref.gathered.view(np.uint8)), f"peer {r}: gathered differs"
    counters = switch.core.reconcile()
    cards = [p.counters for p in peers]
    for r, c in enumerate(cards):
        port = switch.core.ports[r]
        assert port.frames_in == c["frames_out"], (r, port, c)
        assert port.frames_out == c["frames_in"], (r, port, c)
    assert sum(c["dropped_fcs"] for c in cards) == counters["bitflipped"], (counters, cards)
    log = [(t - t0, *rest) for t, *rest in switch.core.log]
    cocotb.log.info("N=%d L=%d %s: %.1f us simulated; switch %s; retransmitted %d, timeouts %d", world, length,
                    wire_dtype, elapsed_us, {k: v for k, v in counters.items() if v},
                    sum(c["retransmitted_frames"] for c in cards), sum(c["timeouts"] for c in cards))
    return {"switch": counters, "cards": cards, "log": log,
            "ports": [p.as_dict() for p in switch.core.ports]}


@cocotb.test()
async def ring_lossless(dut: Any) -> None:
    """N = 2, 3, 4 peers, nothing lost: every peer equals ring_step; nothing dropped or retransmitted."""
    for world, dtype in ((2, "fp32"), (3, "bf16"), (4, "fp32")):
        out = await run_ring(world, 3000 + 517 * world, SwitchConfig(ports=world), seed=SEED + world,
                             wire_dtype=dtype)
        assert all(out["switch"][f"dropped_{c}"] == 0 for c in DROP_CAUSES), out["switch"]
        assert sum(c["retransmitted_frames"] for c in out["cards"]) == 0


@cocotb.test()
async def ring_two_phase(dut: Any) -> None:
    """The two-phase step (scalar exchange, clipping) through the switch, with a configured table."""
    world = 3
    table = {wire.endpoint_for_rank(r).mac: r for r in range(world)}
    out = await run_ring(world, 2500, SwitchConfig(ports=world, table=table, learn=False), seed=SEED,
                         two_phase=True, wire_dtype="bf16")
    assert out["switch"]["flooded"] == 0


@cocotb.test()
async def ring_drop(dut: Any) -> None:
    """Drop probability 1e-2 on every link: the go-back-N recovers; every peer bit-exact."""
    out = await run_ring(3, 40000, SwitchConfig(ports=3, faults=PortFaults(drop=1e-2, seed=SEED)), seed=SEED)
    assert out["switch"]["dropped_fault"] > 0, out["switch"]
    assert sum(c["retransmitted_frames"] for c in out["cards"]) > 0


FAULTS = PortFaults(drop=0.01, duplicate=0.03, reorder=0.05, bitflip=0.03, reorder_depth=2)


@cocotb.test()
async def ring_faults(dut: Any) -> None:
    """Duplicates, reordering (behind 2 frames), bit flips and drops on every link, N = 4."""
    out = await run_ring(4, 12000, SwitchConfig(ports=4, faults=FAULTS), seed=SEED)
    s = out["switch"]
    assert s["duplicated"] > 0 and s["reordered"] > 0 and s["bitflipped"] > 0, s
    assert sum(c["dropped_duplicate"] for c in out["cards"]) > 0


@cocotb.test()
async def ring_buffer_limit(dut: Any) -> None:
    """Peers at 100 Gb/s into a 25 Gb/s switch with 6000-byte egress buffers: tail drops, still bit-exact."""
    out = await run_ring(3, 12000, SwitchConfig(ports=3, line_rate=25e9, buffer_bytes=6000), seed=SEED)
    s = out["switch"]
    assert s["dropped_buffer"] > 0 and s["max_buffer_bytes"] <= 6000, s


@cocotb.test()
async def ring_same_seed(dut: Any) -> None:
    """The same seed twice: the same switch and card counters and the same frame log (times relative);
    another seed: other faults."""
    cfg = SwitchConfig(ports=3, faults=PortFaults(**{**FAULTS.__dict__, "seed": SEED}), frame_log=True)
    a = await run_ring(3, 6000, cfg, seed=SEED)
    b = await run_ring(3, 6000, cfg, seed=SEED)
    assert a == b
    other = SwitchConfig(ports=3, faults=PortFaults(**{**FAULTS.__dict__, "seed": SEED + 1}), frame_log=True)
    c = await run_ring(3, 6000, other, seed=SEED)
    assert c["log"] != a["log"]


# -- port adapters ------------------------------------------------------------------------------------------

MAC_A, MAC_B = wire.endpoint_for_rank(0).mac, wire.endpoint_for_rank(1).mac


class LoopTB:
    """gen -> stand-in card -> TxAdapter -> switch port 0 -> port 1 -> RxAdapter -> card -> mon beats."""

    def __init__(self, dut: Any, faults: dict[int, PortFaults] | None = None, strict: bool = True) -> None:
        self.dut = dut
        dut.rst.value = 1
        dut.gen_tvalid.value = 0
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.switch = EthSwitch(SwitchConfig(ports=2, table={MAC_A: 0, MAC_B: 1}, learn=False, flood=False,
                                             faults=faults or {}, frame_log=True, latency_s=100e-9))
        self.switch.start()
        self.gen = AxiStreamSource(AxiStreamBus.from_prefix(dut, "gen"), dut.clk, dut.rst)
        self.gen.log.setLevel("WARNING")
        self.tx = TxAdapter(dut, "tx", dut.clk, self.switch, 0, strict=strict)
        self.rx = RxAdapter(dut, "rx", dut.clk, self.switch, 1, reset=dut.rst)
        self.beats: list[list[tuple[bytes, int, int]]] = [[]]  # per frame: (data, keep, tuser) per beat

    async def _monitor(self) -> None:
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            if int(d.mon_tvalid.value):
                keep = int(d.mon_tkeep.value)
                self.beats[-1].append((int(d.mon_tdata.value).to_bytes(64, "little"), keep, int(d.mon_tuser.value)))
                if int(d.mon_tlast.value):
                    self.beats.append([])

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        cocotb.start_soon(self._monitor())  # mon_* are X until the reset has reached them

    async def drain(self) -> None:
        for _ in range(20000):
            await ClockCycles(self.dut.clk, 10)
            if self.gen.empty() and self.gen.idle() and self.tx.idle and self.switch.idle and self.rx.idle:
                await ClockCycles(self.dut.clk, 4)
                return
        raise AssertionError("the loop never drained")

    @property
    def frames(self) -> list[list[tuple[bytes, int, int]]]:
        return self.beats[:-1]


def random_frames(rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        n = rng.choice([60, 64, 65, 127, 128, 1000, 1472, 1500, 1514]) if rng.random() < 0.5 else rng.randint(60, 1514)
        out.append(MAC_B + MAC_A + b"\x08\x00" + rng.randbytes(n - 14))
    return out


def check_beats(frame: bytes, beats: list[tuple[bytes, int, int]]) -> int:
    """The frame's beats intact, TKEEP full but on the last beat (contiguous, its length); its TUSER."""
    want = [frame[i : i + 64] for i in range(0, len(frame), 64)]
    assert len(beats) == len(want), (len(beats), len(want))
    for k, ((data, keep, user), chunk) in enumerate(zip(beats, want, strict=True)):
        assert keep == (1 << len(chunk)) - 1, f"beat {k}: TKEEP {keep:#x} for {len(chunk)} bytes"
        assert data[: len(chunk)] == chunk, f"beat {k} differs"
        assert k == len(beats) - 1 or user == 0, f"TUSER on beat {k}, not the last"
    return beats[-1][2]


@cocotb.test()
async def port_loopback(dut: Any) -> None:
    """Random frames (60 .. 1514 bytes) through tx adapter -> switch -> rx adapter: every beat and TKEEP
    intact, no TUSER; the tx adapter paces the line: arrivals at the switch a wire time apart at least."""
    tb = LoopTB(dut)
    await tb.reset()
    rng = random.Random(SEED)
    frames = random_frames(rng, 60)
    for f in frames:
        tb.gen.send_nowait(AxiStreamFrame(f))
    await tb.drain()
    assert len(tb.frames) == len(frames)
    for f, beats in zip(frames, tb.frames, strict=True):
        assert check_beats(f, beats) == 0
    assert tb.tx.frames == [f + fcs(f) for f in frames]
    assert not tb.tx.errors and tb.tx.counters["backpressure_clocks"] > 0, tb.tx.counters
    assert not tb.rx.errors and tb.rx.counters["max_queued_bytes"] <= 2 * 1518, tb.rx.counters
    # when each frame's first bit went out: its arrival (its last bit) less its own time on the line
    starts = [(t - last_bit_ps(n), n) for t, ev, port, n, _ in tb.switch.core.log if ev == "in"]
    for (t1, n1), (t2, _) in itertools.pairwise(starts):
        assert t2 - t1 >= wire_ps(n1), (t1, t2, n1)
    span = starts[-1][0] - starts[0][0]
    busy = sum(wire_ps(n) for _, n in starts[:-1])
    cocotb.log.info("tx line busy %.3f of %d ps between the first and last arrival", busy / span, span)
    assert busy / span > 0.9  # back to back at line rate, not slower
    tb.switch.core.reconcile()


@cocotb.test()
async def port_bitflip(dut: Any) -> None:
    """Bit flips on the link into the receiving port: each damaged frame arrives with TUSER set on its
    last beat (flips in the FCS itself too), the others without."""
    tb = LoopTB(dut, faults={1: PortFaults(bitflip=0.4, seed=SEED)})
    await tb.reset()
    frames = random_frames(random.Random(SEED + 1), 40)
    for f in frames:
        tb.gen.send_nowait(AxiStreamFrame(f))
    await tb.drain()
    flagged = 0
    for f, beats in zip(frames, tb.frames, strict=True):
        got = b"".join(data[: bin(keep).count("1")] for data, keep, _ in beats)
        user = beats[-1][2]
        assert all(u == 0 for _, _, u in beats[:-1])
        if got != f:
            assert user == 1, "a damaged frame arrived without TUSER"
        flagged += user
    counters = tb.switch.counters()
    assert flagged == counters["bitflipped"] == tb.rx.counters["fcs_failed"] > 0, (flagged, counters)


@cocotb.test()
async def port_tx_underflow(dut: Any) -> None:
    """A TVALID gap inside a frame is a MAC underflow: flagged by the tx adapter, the frame aborted
    (it arrives with TUSER set); frames without gaps arrive clean."""
    tb = LoopTB(dut, strict=False)
    await tb.reset()
    frames = random_frames(random.Random(SEED + 2), 3)
    frames = [f[:200] for f in frames]  # four beats each
    tb.gen.send_nowait(AxiStreamFrame(frames[0]))
    await tb.drain()
    tb.gen.set_pause_generator(itertools.cycle([0, 0, 1, 0]))
    tb.gen.send_nowait(AxiStreamFrame(frames[1]))
    await tb.drain()
    tb.gen.set_pause_generator(None)
    tb.gen.pause = False  # removing the generator leaves its last value: a 1 would stall for good
    tb.gen.send_nowait(AxiStreamFrame(frames[2]))
    await tb.drain()
    users = [check_beats(f, beats) for f, beats in zip(frames, tb.frames, strict=True)]
    assert users == [0, 1, 0], users
    assert tb.tx.counters["underflows"] == 1 and len(tb.tx.errors) == 1, tb.tx.errors
