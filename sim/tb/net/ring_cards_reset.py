"""A reset of one card of a ring of N RTL `onic_card`s in the middle of a step, and the ring's
restart (test_onic_ring_cards.py with ONIC_RESET; docs/design.md 8.3, sim/rtl/net/README.md "Reset").

The top gives every card its own reset (`c<k>_ap_rst_n`, ANDed with the ring's `ap_rst_n`). What
is not the card is not reset with it: its MAC port (cocotbext-eth's model keeps delivering frames
and taking the one being sent), card memory (the RAM models answer bursts asked for before the
reset; the AXI monitors run with `interconnect_reset=False`, so those answers are stale, expected
and counted) and its host.

A case ("point@k"): a one-phase step (the aborted step) runs on every card until card k reaches
the reset point, then card k's `c<k>_ap_rst_n` is low for 2..8 clocks (at a clock where none of
its write ports has a burst's W beats part-sent: AXI4's W has no ID, design.md 3b) while the
other cards keep running:

  rs      the reduce-scatter: card k has received a frame of it and no all-gather frame, and a
          gradient read is owed. From that first frame on, card k's memory holds back its
          gradient reads' R beats (those of the chunk to add to the frame) and releases them only
          once the restarted step owes the card a read of its own (another chunk): the stale beats
          then come while the restarted step waits for its own, and only the read engine's reset
          epoch (the ARID) tells them apart. Not met where a card reads all its chunks before the
          first frame arrives (two cards, small chunks): the step then ends unreset, a failure.
  update  card k's Adam kernel is writing its update (a write burst on one of its ports), the
          card has sent no all-gather frame: p, m, v in card memory are being updated
  ag      the all-gather: card k has sent its own updated chunk, received a gathered one and
          issued its write burst; its memory holds back the gather port's write responses from
          the step's start the same way (the BID's epoch)

For a retransmission timeout and more the others retransmit to it; card k must stay idle:
ap_idle (both kernels), STATUS 0, its counters restarted and every frame in dropped as the
aborted step's (`dropped_step`, its ACKs `dropped_stale_reply`), at most the frame it was sending
at the reset sent (whole: the top's underflow checker), no payload, retransmission or reply. Then
each other host whose step has not ended aborts it the only way a card allows, its own reset, at
its own time; the same is checked of each. (A card may have finished: at `ag` card k's successor
can have had everything from it before the reset; its host just restarts it, and no frame is
replayed into it: the aborted step is its previous step, whose frames it re-acknowledges.) Every
host restores its owner shard (p, m, v) from its own copy taken before the aborted step (a host's
checkpoint: the update writes p, m, v in place; what card k's memory holds says what the point
was, and that is checked: p, m, v unchanged at `rs`, some changed at `update`, all at `ag`) and
the ring restarts the step as a NEW step number (the next) on every card (`Ring.step`, as any
step). Data frames of the aborted step that reached each reset card are replayed into its MAC
port during the restarted step (up to 4 per card): they must be counted in and dropped
(`dropped_step`), nothing else. The restarted step is checked as every step of the bench
(`check_step`, lossless: bit-exact p, m, v, out buffer and gathered buffers against the lossless
reference ring, which never saw the aborted step; STATUS; counters exact, `dropped_step` the
frames replayed); the held answers came during it and were dropped (the monitor's stale count).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge
from eth_mac_port import FCS_BYTES
from test_onic_ring_cards import (
    AP_DONE,
    AP_IDLE,
    BEAT,
    CTRL,
    FILL,
    GATHER_ADDR,
    ISR,
    LGRAD_ADDR,
    OUT_ADDR,
    P_ADDR,
    READONLY,
    ReferenceRing,
    Ring,
    RtlCard,
    _all,
    check_step,
    local_gradient,
)

from hls.golden import Hyper
from hls.net import ring, wire

POINTS = ("rs", "update", "ag")
REPLAY = 4  # frames of the aborted step replayed into each card during the restarted step


def parse_points(spec: str, n: int) -> list[tuple[str, int]]:
    """"rs@1,ag@2" -> [("rs", 1), ("ag", 2)]."""
    out = []
    for part in spec.split(","):
        point, _, card = part.partition("@")
        if point not in POINTS or not card.isdigit() or not 0 <= int(card) < n:
            raise ValueError(f"ONIC_RESET {part!r}: point@card, point one of {', '.join(POINTS)}, card < {n}")
        out.append((point, int(card)))
    return out


def data_frames(frames: list[bytes], step: int, opcode: wire.Opcode | None = None) -> list[bytes]:
    """The data frames (RS, AG; `opcode`: that one) of `step` among `frames` (FCS included)."""
    out = []
    for f in frames:
        parsed = wire.parse_frame(f[:-FCS_BYTES])
        if isinstance(parsed, wire.Drop) or parsed.header.step != step:
            continue
        wanted = (opcode,) if opcode else (wire.Opcode.RS, wire.Opcode.AG)
        if parsed.header.opcode in wanted:
            out.append(f)
    return out


def held_back(hold: dict[str, bool], stalls: Iterator[bool] | None) -> Iterator[bool]:
    """A channel's pauses: always while `hold["on"]`, then the channel's own random ones."""
    while True:
        yield True if hold["on"] else next(stalls) if stalls is not None else False


def w_settled(card: RtlCard) -> bool:
    """No write burst of the card part-sent (an AW without all its W beats, W beats without an AW)."""
    for port in card.monitor.ports:
        if not port.has_aw:
            continue
        if port.aw_lens or port.w_lens or port.w_beats or port.w_hold is not None \
                or int(port.awvalid.value) or int(port.wvalid.value):
            return False
    return True


class Host:
    """A card's host during the aborted step: polls both interrupts and acknowledges them, until
    it gives up (`stop`) and aborts the step with the card's reset."""

    def __init__(self, ring_: Ring, card: RtlCard) -> None:
        self.ring, self.card = ring_, card
        self.done: set[str] = set()
        self.running = True
        self.task = cocotb.start_soon(self._poll())

    async def _poll(self) -> None:
        while self.running and len(self.done) < len(self.card.irq):
            await ClockCycles(self.ring.dut.ap_clk, self.ring.poll)
            for name, irq in self.card.irq.items():
                if name not in self.done and self.running and int(irq.value):
                    host = self.card.host if name == "net" else self.card.adam
                    assert await host.read_dword(CTRL) & AP_DONE, f"card {self.card.k}: {name} interrupt, no ap_done"
                    await host.write_dword(ISR, 1)
                    self.done.add(name)

    async def stop(self) -> None:
        self.running = False
        await self.task

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.card.irq)


async def card_reset(ring_: Ring, card: RtlCard, rng: random.Random) -> int:
    """Card `card.k`'s own reset, low for 2..8 clocks from a falling edge with no W burst part-sent;
    the clock it fell."""
    dut = ring_.dut
    while True:
        await RisingEdge(dut.ap_clk)
        await ReadOnly()
        if w_settled(card):
            break
    await FallingEdge(dut.ap_clk)
    at = ring_.cycle
    rst = getattr(dut, f"c{card.k}_ap_rst_n")
    rst.value = 0
    await ClockCycles(dut.ap_clk, rng.randrange(2, 9))
    rst.value = 1
    return at


def reached(point: str, card: RtlCard, step: int, marks: tuple[int, int], writes0: dict[str, int],
            hold: dict[str, bool]) -> bool:
    """Card `card` is at the reset point (frames since `marks`: its port's received and sent)."""
    got = card.port.received[marks[0]:]
    sent = card.port.sent[marks[1]:]
    got_ag = data_frames(got, step, wire.Opcode.AG)
    sent_ag = data_frames(sent, step, wire.Opcode.AG)
    if point == "rs":  # from the first frame on, the reads (of the chunk to add to it) are held: owed
        if not data_frames(got, step, wire.Opcode.RS) or got_ag:
            return False
        hold["on"] = True
        return any(b[1] for p in card.monitor.ports if p.name == "lgrad0" for b in p.r_bursts)
    if point == "update":
        adam_writes = {p: n for p, n in card.monitor.burst_counts().items()
                       if p.endswith("AW") and not p.startswith("gather0")}
        return not sent_ag and any(n > writes0.get(p, 0) for p, n in adam_writes.items())
    if point == "ag":  # and a gathered chunk's write burst sent whole (its response held: owed at the reset)
        gather = card.monitor.burst_counts().get("gather0AW", 0) > writes0.get("gather0AW", 0)
        owed = any(p.b_wait for p in card.monitor.ports if p.name == "gather0" and p.has_aw)
        return bool(sent_ag) and bool(got_ag) and gather and owed
    raise ValueError(point)


async def quiet_counters(dut: Any, tag: str, card: RtlCard) -> dict[str, int]:
    """A card reset during the step, after it: idle, STATUS 0, its counters restarted with every
    frame since dropped as the aborted step's, nothing but one frame (part-sent at the reset) out."""
    ctrl = await card.read(CTRL)
    assert ctrl & AP_IDLE and not ctrl & 0x1, f"{tag}: card {card.k} CTRL {ctrl:#x} after its reset (not idle)"
    assert await card.read(READONLY["status"]) == 0, f"{tag}: card {card.k} STATUS after its reset"
    adam_ctrl = await card.adam.read_dword(CTRL)
    assert adam_ctrl & AP_IDLE, f"{tag}: card {card.k} Adam kernel CTRL {adam_ctrl:#x} after the reset"
    c = await card.counters()
    for name in ("rs_payload_bytes_out", "ag_payload_bytes_out", "scalar_payload_bytes_out", "retransmitted_frames",
                 "timeouts", "acks_sent", "naks_sent", "naks_received"):
        assert c[name] == 0, f"{tag}: card {card.k} counter {name} = {c[name]} after its reset"
    other = {n: v for n, v in c.items() if n.startswith("dropped_") and n not in ("dropped_step",
                                                                               "dropped_stale_reply") and v}
    assert not other, f"{tag}: card {card.k} drops after its reset: {other}"
    assert c["frames_in"] == c["dropped_step"] + c["dropped_stale_reply"], \
        f"{tag}: card {card.k}: frames after its reset not all dropped as the aborted step's: {c}"
    assert c["frames_out"] <= 1, f"{tag}: card {card.k} sent {c['frames_out']} frames after its reset"
    return c


async def reset_case(dut: Any, ring_: Ring, refring: ReferenceRing, point: str, k: int, step: int,
                     hyper: Hyper, nrng: np.random.Generator, rng: random.Random, limit: int) -> int:
    """One case (module docstring): the aborted step `step`, card k's reset at `point`, the others'
    aborts, the restart as `step + 1`, checked. The restarted step's clocks."""
    cfg, n = ring_.cfg, ring_.cfg.world
    assert ring_.adam is not None, "the reset cases run on onic_cards (ONIC_MANIFEST)"
    assert ring_.stripes == 1, "the reset cases watch the network kernel's stripe-0 ports: a one-stripe build"
    tag = f"reset at {point}@{k}: N={n} step {step}"
    size = ring.chunk_elems(cfg.length, n)
    wb = -(-size * wire.ELEMENT_BYTES[cfg.wire_dtype] // BEAT)
    pb = -(-size * wire.ELEMENT_BYTES[cfg.param_dtype] // BEAT)
    grads = [local_gradient(nrng, cfg.length, cfg.wire_dtype) for _ in range(n)]
    checkpoint = [s.copy() for s in ring_.card_shards()]  # each host's copy of its shard
    scale = ring.step_grad_scale(None, n, grad_scale=float(hyper.grad_scale))
    assert scale is not None
    marks = [(len(c.port.received), len(c.port.sent)) for c in ring_.cards]
    card = ring_.cards[k]
    late_side = {"rs": "R", "ag": "B"}.get(point)
    hold = {"on": late_side == "B"}
    if late_side:
        port = card.card.ports["lgrad0" if late_side == "R" else "gather0"]
        held = port.read_if.r_channel if late_side == "R" else port.write_if.b_channel
        held.set_pause_generator(held_back(hold, held._pause_generator))

    # ---- the aborted step: one-phase, every card started as Ring.step starts it ----
    for c, g in zip(ring_.cards, grads, strict=True):
        local = ring.pad(np.asarray(g), n)
        for j in range(n):
            data = local[j * size:(j + 1) * size].tobytes()
            c.mem.write(LGRAD_ADDR + j * wb * BEAT, data.ljust(wb * BEAT, b"\0"))
        c.mem.write(GATHER_ADDR, bytes([FILL]) * (n * pb * BEAT))
        c.mem.write(OUT_ADDR, bytes([0x5A]) * (pb * BEAT))
    await _all([c.start_adam(size, hyper, scale, cfg.optimizer) for c in ring_.cards])
    await _all([c.program(cfg, step) for c in ring_.cards])
    writes0 = ring_.cards[k].monitor.burst_counts()
    await _all([c.write("ctrl", 1) for c in ring_.cards])
    start = ring_.cycle
    hosts = [Host(ring_, c) for c in ring_.cards]
    skip = 0 if point == "update" else rng.randrange(0, 3)  # the update's writes may end within a clock
    while True:
        await RisingEdge(dut.ap_clk)
        if reached(point, card, step, marks[k], writes0, hold):
            if skip == 0:
                break
            skip -= 1
        assert ring_.cycle - start < limit, f"{tag}: the reset point not reached in {limit} clocks"
        assert not hosts[k].finished, f"{tag}: card {k} finished the step before its reset point"
    await hosts[k].stop()
    stale0 = [(c.monitor.stale_r_beats, c.monitor.stale_b) for c in ring_.cards]
    owed = (sum(b[1] for p in card.monitor.ports if p.has_ar for b in p.r_bursts),
            sum(len(p.b_wait) for p in card.monitor.ports if p.has_aw))
    at = await card_reset(ring_, card, rng)
    dut._log.info("%s: card %d reset at clock %d of the step", tag, k, at - start)

    # ---- the others keep running: a timeout and more of retransmissions to the reset card ----
    await ClockCycles(dut.ap_clk, cfg.rto_clocks + 1500)
    quiet = {k: await quiet_counters(dut, tag, card)}
    assert not hosts[k].finished
    # every other host whose step has not ended gives up on it and aborts it: the card's reset
    others = [j for j in range(n) if j != k]
    rng.shuffle(others)
    finished = []  # a card may have had all it needed from card k before the reset: its step ended
    for j in others:
        await hosts[j].stop()
        if hosts[j].finished:
            finished.append(j)
            continue
        await ClockCycles(dut.ap_clk, rng.randrange(0, cfg.rto_clocks))
        await card_reset(ring_, ring_.cards[j], rng)
    for _ in range(400):  # what the switch and the MACs still hold reaches reset cards: dropped
        await ClockCycles(dut.ap_clk, 50)
        if ring_.switch.idle and all(c.port.idle for c in ring_.cards):
            break
    await ClockCycles(dut.ap_clk, 200)
    for j in others:
        if j in finished:
            c = ring_.cards[j]
            assert await c.read(CTRL) & AP_IDLE and await c.read(READONLY["status"]) == 0, f"{tag}: card {j}"
        else:
            quiet[j] = await quiet_counters(dut, tag, ring_.cards[j])
    if late_side:
        assert owed[late_side == "B"], f"{tag}: card {k}: no {late_side} owed at the reset"

    # ---- every host restores its shard; what card k's update had written says what the point was ----
    now = ring_.card_shards()[k]
    changed = [name for name in ("p", "m", "v") if not np.array_equal(
        np.asarray(getattr(now, name), np.float32).view(np.uint32),
        np.asarray(getattr(checkpoint[k], name), np.float32).view(np.uint32))]
    want = {"rs": "none", "update": "some", "ag": "all"}[point]
    assert {"none": not changed, "some": bool(changed), "all": len(changed) == 3}[want], \
        f"{tag}: the abort left card {k}'s {changed or 'nothing'} changed, expected {want} of p, m, v"
    for c, s in zip(ring_.cards, checkpoint, strict=True):
        c.load_shard(s)
    assert card.mem.read(P_ADDR, size * 4) == np.asarray(checkpoint[k].p, np.float32).tobytes()

    # ---- the restart: the next step number on every card, the aborted step's frames replayed ----
    # not into a card that finished the aborted step: it is that card's previous step (re-acknowledged)
    replay = [rng.sample(fs, min(REPLAY, len(fs))) if j not in finished else [] for j, fs in
              enumerate(data_frames(c.port.received[m[0]:], step) for c, m in zip(ring_.cards, marks, strict=True))]
    late = [(len(fs), sum(len(f) - FCS_BYTES for f in fs)) for fs in replay]

    async def release() -> None:
        """The held answers go once the restarted step owes card k an answer on that port: a read
        burst of its own (rs) or a write response (ag), each queued behind the stale ones."""
        mon = next(p for p in card.monitor.ports if p.name == ("lgrad0" if late_side == "R" else "gather0"))
        while not any(not b[-1] for b in (mon.r_bursts if late_side == "R" else mon.b_wait)):
            await RisingEdge(dut.ap_clk)
        hold["on"] = False

    async def inject() -> None:
        freed = cocotb.start_soon(release()) if late_side else None
        for c, fs in zip(ring_.cards, replay, strict=True):
            for f in fs:
                await ClockCycles(dut.ap_clk, rng.randrange(20, 200))
                c.port.deliver(f)
        if freed is not None:
            await freed

    new = step + 1
    ref = refring.step(new, grads, hyper)
    res = await ring_.step(new, grads, hyper, limit=limit, during=inject())
    check_step(dut, f"{tag} restarted as {new}", ring_, res, ref, grads, refring, True, late=late)
    stale = [(c.monitor.stale_r_beats - r, c.monitor.stale_b - b)
             for c, (r, b) in zip(ring_.cards, stale0, strict=True)]
    if late_side:  # the held answers came in the restarted step and were dropped (taken, it would not be exact)
        assert stale[k][late_side == "B"], f"{tag}: card {k}: no stale {late_side} came after the reset"
    after = {j: {name: v for name, v in c.items() if v} for j, c in sorted(quiet.items())}
    dut._log.info("%s: card %d's %s changed by the aborted step, restored; cards %s finished it; after the resets "
                  "%s; stale R beats / B responses per card %s; restarted step %d bit-exact in %d clocks, %s frames "
                  "of the aborted step replayed and dropped", tag, k, changed, finished, after, stale, new, res.clocks,
                  [f for f, _ in late])
    return res.clocks


__all__ = ["POINTS", "parse_points", "reset_case"]
