"""cocotb test of onic_net_scalar: one card's end of the two-phase scalar exchange against a
lossless ring of hls.net.card.Card in a two-phase step.

Per case (N = 2 .. 6, every rank r, chunks with a non-finite value on some ranks): the reference
ring runs one two-phase step; card r's received scalar frames feed the header and payload ports
(random idle clocks, junk past the payload), its own entry (ring.chunk_scalars of its reduced
chunk) arrives at a random point (before, between or after them: the reference keeps early
frames until its own entry is known); the descriptor and payload sinks stall at random. Checked:
every descriptor (hop, seq, length) and every payload byte and TKEEP equal the scalar frames card
r sent, TLAST on each packet's last beat; every rank's entry in the table; all_known; no error.
Then frames with a wrong rank byte and a wrong length set `error`.

Environment: ONIC_SEED, ONIC_WORLDS (comma-separated N).
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from ring_streams import Sink, Source

from hls.golden import Hyper, to_bf16_bits
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel

BEAT = 64


def beats_of(payload: bytes, rng: random.Random) -> list[dict[str, int]]:
    out = []
    for k in range(0, len(payload), BEAT):
        part = payload[k:k + BEAT]
        data = part + bytes(rng.randrange(256) for _ in range(BEAT - len(part)))
        out.append({"tdata": int.from_bytes(data, "little"), "tlast": int(k + BEAT >= len(payload))})
    return out


def reference(n: int, r: int, rng: np.random.Generator, wdt: str = "fp32", size: int = 32) -> dict[str, Any]:
    """A lossless two-phase step of N reference cards: card r's scalar frames in and out, its reduced chunk."""
    length = n * size
    eps = tuple(wire.Endpoint(mac=bytes([2, 0, 0, 0, 0, k]), ip=f"10.0.0.{k + 1}", port=4000 + k) for k in range(n))
    params = (rng.standard_normal(length) * 0.1).astype(np.float32)
    grads = [(rng.standard_normal(length) * 2.0 ** int(rng.integers(-40, 40))).astype(np.float32) for _ in range(n)]
    if rng.random() < 0.4:
        grads[int(rng.integers(0, n))][int(rng.integers(0, length))] = rng.choice([np.inf, np.nan])
    if wdt == "bf16":
        grads = [to_bf16_bits(g) for g in grads]
    cards = []
    for k in range(n):
        kernel = ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper(), wire_dtype=wdt, param_dtype="fp32")
        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype="fp32",
                         payload_bytes=128, window=1 << 16, slots=1 << 16, rto=1e9)
        cards.append(Card(cfg, kernel))
    for k, card in enumerate(cards):
        card.start_step(3, grads[k], two_phase=True, max_norm=1.0)
    by_mac = {e.mac: k for k, e in enumerate(eps)}
    received: list[wire.Frame] = []
    sent: list[wire.Frame] = []
    now = 0.0
    while not all(c.done for c in cards):
        now += 1.0
        for k, card in enumerate(cards):
            for frame in card.poll(now):
                dst = by_mac[frame[:6]]
                parsed = wire.parse_frame(frame, with_fcs=True)
                assert not isinstance(parsed, wire.Drop)
                if parsed.header.opcode is wire.Opcode.SCALAR:
                    if k == r and all(f.header.seq != parsed.header.seq for f in sent):
                        sent.append(parsed)
                    if dst == r:
                        received.append(parsed)
                cards[dst].receive(frame, now)
        assert now < 1e5, "the reference ring did not finish"
    reduced = ring.reduce_scatter(grads, wdt)[r]
    own = ring.chunk_scalars(reduced, wdt)
    return {"received": received, "sent": sent, "own": own, "table": dict(cards[r]._scalars), "reduced": reduced}


def f64_bits(x: float) -> int:
    return int(np.array(x, dtype=np.float64).view(np.uint64))


async def reset(dut: Any) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def run_case(dut: Any, n: int, r: int, rng: np.random.Generator, rnd: random.Random) -> None:
    ref = reference(n, r, rng)
    dut.cfg_rank.value = r
    dut.cfg_world.value = n
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    idle = rnd.choice([0.0, 0.3, 0.7])
    hdr = Source(dut, "s_hdr_", ["hop", "len"], rnd, idle)
    pay = Source(dut, "s_pay_", ["tdata", "tlast"], rnd, idle, valid="tvalid", ready="tready")
    desc = Sink(dut, "m_desc_", ["hop", "seq", "len"], rnd, rnd.choice([0.0, 0.5]))
    axis = Sink(dut, "m_axis_", ["tdata", "tkeep", "tlast"], rnd, rnd.choice([0.0, 0.5]), valid="tvalid",
                ready="tready")
    frames = ref["received"]
    hdr_task = hdr.start([{"hop": f.header.hop, "len": f.header.length} for f in frames])
    pay_task = pay.start([b for f in frames for b in beats_of(f.payload, rnd)])
    await ClockCycles(dut.clk, rnd.randint(0, 40 * n))
    dut.own_sumsq.value = f64_bits(ref["own"][0])
    dut.own_flag.value = int(ref["own"][1])
    dut.own_valid.value = 1
    await RisingEdge(dut.clk)
    dut.own_valid.value = 0
    await hdr_task
    await pay_task
    want = ref["sent"]
    want_beats = sum(-(-f.header.length // BEAT) for f in want)
    for _ in range(2000):
        await RisingEdge(dut.clk)
        if len(desc.items) == len(want) and len(axis.items) == want_beats and int(dut.all_known.value):
            break
    tag = f"N={n} r={r}"
    assert not desc.errors and not axis.errors, desc.errors + axis.errors
    assert len(desc.items) == len(want), f"{tag}: {len(desc.items)} descriptors, want {len(want)}"
    assert len(axis.items) == want_beats, f"{tag}: {len(axis.items)} beats, want {want_beats}"
    k = 0
    for f, d in zip(want, desc.items, strict=True):
        h = f.header
        assert (d["hop"], d["seq"], d["len"]) == (h.hop, h.seq, h.length), f"{tag}: descriptor {d} for {h}"
        got = b""
        for b in range(-(-h.length // BEAT)):
            item = axis.items[k]
            k += 1
            keep = bin(item["tkeep"]).count("1")
            assert item["tkeep"] == (1 << keep) - 1, f"{tag}: TKEEP {item['tkeep']:#x}"
            assert item["tlast"] == int(b == -(-h.length // BEAT) - 1), f"{tag}: TLAST of hop {h.hop} beat {b}"
            got += item["tdata"].to_bytes(BEAT, "little")[:keep]
        assert got == f.payload, f"{tag}: hop {h.hop} payload {got.hex()} != {f.payload.hex()}"
    assert int(dut.all_known.value) == 1, f"{tag}: all_known low"
    assert int(dut.error.value) == 0, f"{tag}: error"
    for rank, (sumsq, flag) in ref["table"].items():
        dut.rd_rank.value = rank
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        assert int(dut.rd_sumsq.value) == f64_bits(sumsq), f"{tag}: rank {rank} sumsq"
        assert bool(int(dut.rd_flag.value)) == bool(flag), f"{tag}: rank {rank} flag"


async def bad_frame(dut: Any, n: int, r: int, hop0_payload: bytes, length: int, rnd: random.Random) -> None:
    """A received hop-0 frame with the given payload and length field: `error` must rise."""
    dut.cfg_rank.value = r
    dut.cfg_world.value = n
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    await RisingEdge(dut.clk)
    assert int(dut.error.value) == 0
    hdr = Source(dut, "s_hdr_", ["hop", "len"], rnd, 0.0)
    pay = Source(dut, "s_pay_", ["tdata", "tlast"], rnd, 0.0, valid="tvalid", ready="tready")
    h, p = hdr.start([{"hop": 0, "len": length}]), pay.start(beats_of(hop0_payload, rnd))
    await h
    await p
    await ClockCycles(dut.clk, 8)
    assert int(dut.error.value) == 1, f"no error for payload {hop0_payload.hex()} length {length}"
    await reset(dut)


@cocotb.test()
async def test_scalar(dut: Any) -> None:
    seed = int(os.environ.get("ONIC_SEED", "1"))
    worlds = [int(x) for x in os.environ.get("ONIC_WORLDS", "2,3,4").split(",")]
    rng = np.random.default_rng(seed)
    rnd = random.Random(seed)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    for name in ("start", "own_valid", "own_sumsq", "own_flag", "rd_rank", "cfg_rank", "cfg_world"):
        getattr(dut, name).value = 0
    dut.cfg_world.value = 2
    await reset(dut)
    cases = 0
    for n in worlds:
        for r in range(n):
            await run_case(dut, n, r, rng, rnd)
            cases += 1
    entry = bytes([1, 0]) + bytes(6) + bytes(8)  # rank 1 from card 0's predecessor when N = 3 is rank 2
    await bad_frame(dut, 3, 0, entry, 16, rnd)
    await bad_frame(dut, 3, 0, bytes([2, 0]) + bytes(14), 32, rnd)
    dut._log.info("%d cases of N in %s bit-exact; wrong rank and wrong length raise error", cases, worlds)
