"""cocotb test of onic_net_tx_retx against hls.net.reliability.Sender (go-back-N with credits).

A seeded sequence of events (new packets, ACKs, NAKs, stale replies, timeouts) drives the RTL and
the Python Sender alike; after each event the RTL is left to settle and the sequence numbers it
sent must equal what Sender.poll returned. Every frame out must equal hls.net.wire.build_frame
for its sequence number (header beat and payload, a short last packet included), a send never
has min(window, credit) or more packets in flight before it, and the counters match at the end.
Random idle on the inputs, random back-pressure on the output.

Environment: ONIC_SEED, ONIC_EVENTS, ONIC_PACKETS, ONIC_PAYLOAD (bytes), ONIC_WINDOW,
ONIC_CREDIT, SLOTS_LOG2 (the module's parameter).
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hls.net import reliability, wire

RTO_OFF = 0xFFFFFFFF
RTO_TEST = 24
QUIET = 48  # clocks with TVALID low: the sender has nothing more to send


def header_beat(frame: bytes) -> bytes:
    """The frame's first beat as onic_net_tx_header emits it: its UDP checksum covers the header
    alone, which is the frame's with a zero payload (the sender adds the payload's sum)."""
    p = wire.parse_frame(frame)
    assert isinstance(p, wire.Frame), p
    src, dst = wire.Endpoint(p.src_mac, p.src_ip, p.src_port), wire.Endpoint(p.dst_mac, p.dst_ip, p.dst_port)
    return wire.build_frame(src, dst, p.header, bytes(len(p.payload)))[:64]


def pause(rng: random.Random, p: float):  # noqa: ANN201 - a generator for cocotbext-axi
    while True:
        yield rng.random() < p


class TB:
    def __init__(self, dut: Any, rng: random.Random) -> None:
        self.dut = dut
        self.rng = rng
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.src.set_pause_generator(pause(rng, 0.2))
        self.sink.set_pause_generator(pause(rng, 0.3))
        self.headers: list[bytes] = []
        self.sent: list[int] = []  # sequence numbers of the frames received, in order
        self.frames: dict[int, bytes] = {}
        self.credit = 0
        self.window = 0
        self.violations: list[str] = []

    async def reset(self, window: int, credit: int, step: int) -> None:
        dut = self.dut
        dut.rst.value = 1
        dut.start.value = 0
        dut.s_hdr_valid.value = 0
        dut.s_ack_valid.value = 0
        dut.cfg_window.value = window
        dut.cfg_credit.value = credit
        dut.cfg_step.value = step
        dut.cfg_rto.value = RTO_OFF
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        self.window, self.credit = window, credit
        cocotb.start_soon(self.drive_headers())
        cocotb.start_soon(self.collect())
        cocotb.start_soon(self.watch_in_flight())

    async def drive_headers(self) -> None:
        dut = self.dut
        sent = 0
        while True:
            if sent == len(self.headers) or self.rng.random() < 0.2:
                dut.s_hdr_valid.value = 0
                await RisingEdge(dut.clk)
                continue
            dut.s_hdr_data.value = int.from_bytes(self.headers[sent], "little")
            dut.s_hdr_valid.value = 1
            await RisingEdge(dut.clk)
            while not int(dut.s_hdr_ready.value):
                await RisingEdge(dut.clk)
            sent += 1
            dut.s_hdr_valid.value = 0

    def provide(self, frame: bytes) -> None:
        self.headers.append(header_beat(frame))
        self.src.send_nowait(AxiStreamFrame(frame[64:]))

    async def collect(self) -> None:
        while True:
            frame = await self.sink.recv()
            data = bytes(frame.tdata)
            seq = int.from_bytes(data[54:58], "big")
            self.sent.append(seq)
            self.frames.setdefault(seq, data)
            assert self.frames[seq] == data, f"replay of {seq} differs"

    async def watch_in_flight(self) -> None:
        """On every send, the packets already in flight are below min(window, credit)."""
        dut = self.dut
        frames = int(dut.cnt_frames.value)
        nxt, base = int(dut.stat_next.value), int(dut.stat_base.value)
        while True:
            await RisingEdge(dut.clk)
            now = int(dut.cnt_frames.value)
            if now != frames and nxt - base >= min(self.window, self.credit):
                self.violations.append(f"send with {nxt - base} in flight, limit {min(self.window, self.credit)}")
            frames = now
            nxt, base = int(dut.stat_next.value), int(dut.stat_base.value)

    async def settle(self) -> None:
        dut = self.dut
        quiet = 0
        while quiet < QUIET:
            await RisingEdge(dut.clk)
            busy = int(dut.m_axis_tvalid.value) or not self.src.empty() or int(dut.s_hdr_valid.value) \
                or int(dut.stat_provided.value) < len(self.headers)
            quiet = 0 if busy else quiet + 1

    async def reply(self, nak: bool, step: int, seq: int, credit: int) -> None:
        dut = self.dut
        dut.s_ack_nak.value = int(nak)
        dut.s_ack_step.value = step
        dut.s_ack_seq.value = seq
        dut.s_ack_credit.value = credit
        dut.s_ack_valid.value = 1
        await RisingEdge(dut.clk)
        while not int(dut.s_ack_ready.value):
            await RisingEdge(dut.clk)
        dut.s_ack_valid.value = 0

    async def timeout(self) -> bool:
        """A short timeout for a moment; True if the RTL timed out."""
        dut = self.dut
        before = int(dut.cnt_timeouts.value)
        dut.cfg_rto.value = RTO_TEST
        fired = False
        for _ in range(4 * RTO_TEST):
            await RisingEdge(dut.clk)
            if int(dut.cnt_timeouts.value) != before:
                fired = True
                break
        dut.cfg_rto.value = RTO_OFF
        return fired


@cocotb.test()
async def test_go_back_n(dut: Any) -> None:
    rng = random.Random(int(os.environ.get("ONIC_SEED", "1")))
    events = int(os.environ.get("ONIC_EVENTS", "120"))
    total = int(os.environ.get("ONIC_PACKETS", "40"))
    payload = int(os.environ.get("ONIC_PAYLOAD", "1408"))
    window = int(os.environ.get("ONIC_WINDOW", "6"))
    credit0 = int(os.environ.get("ONIC_CREDIT", "5"))
    slots = 1 << int(os.environ["SLOTS_LOG2"])
    step = rng.randrange(2**32 - 1)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())

    local, peer = wire.endpoint_for_rank(rng.randrange(8)), wire.endpoint_for_rank(rng.randrange(8, 16))
    sizes = [payload] * (total - 1) + [rng.randrange(1, payload)]
    expected = []
    for seq, n in enumerate(sizes):
        header = wire.Header(wire.Opcode.RS, "fp32", wire.FLAG_LAST if seq == total - 1 else 0, comm=7, src=3,
                             step=step, seq=seq, offset=seq * payload // 4, length=n)
        expected.append(wire.build_frame(local, peer, header, bytes(rng.randrange(256) for _ in range(n))))

    tb = TB(dut, rng)
    await tb.reset(window, credit0, step)
    model = reliability.Sender(step=step, total=total, window=window, credit=credit0, rto=1.0)
    now = 0.0
    provided = 0
    want: list[int] = []

    async def check(out: list[int], what: str) -> None:
        want.extend(out)
        await tb.settle()
        assert tb.sent == want, f"after {what}: RTL sent {tb.sent[len(want) - len(out):]}, model {out}"

    for k in range(events):
        kind = rng.choices(["provide", "ack", "nak", "stale", "timeout"], [3, 3, 2, 1, 1])[0]
        if kind == "provide":
            room = min(total, model.base + slots) - provided
            if room <= 0:
                continue
            for _ in range(rng.randint(1, min(room, 4))):
                tb.provide(expected[provided])
                model.provide(provided, sizes[provided])
                provided += 1
            await check(model.poll(now), f"event {k}: provide up to {provided}")
        elif kind in ("ack", "nak"):
            seq = rng.randint(model.base, model.sent_high)
            credit = rng.choice([0, 1, 2, window, window + 2, rng.randint(0, 3 * window)])
            await tb.reply(kind == "nak", step, seq, credit)
            (model.on_nak if kind == "nak" else model.on_ack)(step, seq, credit, now)
            tb.credit = credit
            await check(model.poll(now), f"event {k}: {kind} {seq} credit {credit}")
        elif kind == "stale":
            if model.base and rng.random() < 0.5:
                s, seq = step, rng.randrange(model.base)
            else:
                s, seq = step + 1, rng.randint(model.base, model.sent_high)
            nak = rng.random() < 0.5
            await tb.reply(nak, s, seq, 0)
            (model.on_nak if nak else model.on_ack)(s, seq, 0, now)
            await check(model.poll(now), f"event {k}: stale {'nak' if nak else 'ack'} {s}/{seq}")
        else:
            due = bool(model.in_flight and model.timer_start is not None)
            fired = await tb.timeout()
            assert fired == due, f"event {k}: timeout fired {fired}, model {due}"
            if due:
                now += 1.0
            await check(model.poll(now), f"event {k}: timeout")

    # drain: provide the rest, acknowledge everything
    while not model.done:
        while provided < min(total, model.base + slots):
            tb.provide(expected[provided])
            model.provide(provided, sizes[provided])
            provided += 1
        await check(model.poll(now), "drain provide")
        await tb.reply(False, step, model.sent_high, window)
        model.on_ack(step, model.sent_high, window, now)
        tb.credit = window
        await check(model.poll(now), "drain ack")

    assert not tb.violations, tb.violations[:5]
    for seq, frame in tb.frames.items():
        assert frame == expected[seq], f"frame {seq} differs from build_frame"
    assert sorted(tb.frames) == list(range(total))
    c = model.counters
    got = {name: int(getattr(dut, f"cnt_{name}").value) for name in
           ("frames", "bytes", "retx_frames", "retx_bytes", "timeouts", "acks", "naks", "stale")}
    assert got == {"frames": c.frames_sent, "bytes": c.bytes_sent, "retx_frames": c.retransmitted_frames,
                   "retx_bytes": c.retransmitted_bytes, "timeouts": c.timeouts, "acks": c.acks_received,
                   "naks": c.naks_received, "stale": c.stale_replies}, c
    assert not int(dut.err_proto.value) and not int(dut.err_long.value)
    # an ACK beyond anything sent is a protocol error: flagged, ignored
    await tb.reply(False, step, model.sent_high + 3, window)
    await ClockCycles(dut.clk, 4)
    assert int(dut.err_proto.value) and int(dut.stat_base.value) == total
    # the error belongs to its step: the next step's start clears it (STATUS is per step)
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0
    await ClockCycles(dut.clk, 2)
    assert not int(dut.err_proto.value) and not int(dut.err_long.value)
    dut._log.info("%d frames (%d retransmitted), %d timeouts, %d NAKs", c.frames_sent, c.retransmitted_frames,
                  c.timeouts, c.naks_received)
