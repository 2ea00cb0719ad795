"""cocotb tests of onic_net_rx, the card's receive path, bit-exact against the Python model
(rx_model.RxModel: hls.net.wire.parse_frame, hls.net.reliability.Receiver per flow, the card's
communicator and previous-step rules).

Environment: ONIC_SEED, ONIC_FRAMES (random frames), PAYLOAD_DEPTH_LOG2 / SLOT_LOG2 (the module's
parameters, set by the runner). Frames are built with hls.net.wire.build_frame (no FCS: the MAC
strips it; its verdict is TUSER on the last beat) and sent by cocotbext-axi's AxiStreamSource
with no TREADY and random idle clocks (also inside frames). The header and payload outputs drop
their readys at random. After each group of frames the bench waits until everything delivered
has been taken, then takes every pending reply and compares: every delivered header field,
every payload byte (TKEEP included), every reply (ACK/NAK, flow, step, next expected, credit),
and at the end every counter.
"""

from __future__ import annotations

import logging
import os
import random
import struct
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from rx_model import FLOWS, Delivered, RxModel

from hls.net import wire
from hls.net.wire import Endpoint, Flow, Header, Opcode

LOCAL = wire.endpoint_for_rank(1)
PEER = wire.endpoint_for_rank(0)
OTHER = wire.endpoint_for_rank(2)
WRONG_IP = Endpoint(mac=LOCAL.mac, ip="10.78.0.99", port=LOCAL.port)
COMM = 0x1234
LAST_HOP = 3  # cfg_last_hop: a LAST frame at this hop is its flow's final one (its ACK goes twice)
COUNTERS = ("frames_in", "bytes_in", "frames_accepted") + tuple(
    f"dropped_{c}" for c in ("truncated", "fcs", "mac", "ethertype", "ip_header", "ip_checksum", "ip_address",
                             "protocol", "port", "version", "opcode", "dtype", "udp_checksum", "comm", "step",
                             "previous_step",
                             "duplicate", "gap", "overflow"))


def fix_ip_checksum(frame: bytearray) -> None:
    frame[24:26] = b"\0\0"
    frame[24:26] = struct.pack("!H", wire.ipv4_checksum(bytes(frame[14:34])))


class TB:
    def __init__(self, dut: Any, rng: random.Random, *, source: bool = True) -> None:
        self.dut = dut
        self.rng = rng
        self.slots = 1 << int(os.environ.get("SLOT_LOG2", "3"))
        self.depth = 1 << int(os.environ.get("PAYLOAD_DEPTH_LOG2", "5"))
        self.frame_beats = int(os.environ.get("FRAME_BEATS", "4"))
        self.model = RxModel(LOCAL, COMM, self.slots, last_hop=LAST_HOP)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst) if source else None
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_payload"), dut.clk, dut.rst)
        for ep in (self.source, self.sink):
            if ep is not None:
                ep.log.setLevel(logging.WARNING)
        self.headers: list[dict[str, int]] = []
        self.hdr_ready_p = 0.7
        self.stall = False
        dut.local_mac.value = int.from_bytes(LOCAL.mac, "big")
        dut.local_ip.value = int.from_bytes(LOCAL.ip_bytes, "big")
        dut.local_comm.value = COMM
        dut.cfg_last_hop.value = LAST_HOP
        dut.step_start.value = 0
        dut.step_id.value = 0
        dut.evt_ready.value = 0
        # an ACK per accepted frame (no coalescing): the replies rx_model predicts
        dut.cfg_ack_every.value = 0
        dut.ack_credit.value = 0
        dut.m_axis_hdr_tready.value = 0

    def random_idle(self, p: float) -> None:
        self.source.set_pause_generator(iter(lambda: self.rng.random() < p, None))

    def random_backpressure(self, p: float) -> None:
        self.sink.set_pause_generator(iter(lambda: self.stall or self.rng.random() < p, None))
        self.hdr_ready_p = 1 - p

    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        cocotb.start_soon(self._hdr_reader())

    async def _hdr_reader(self) -> None:
        d = self.dut
        fields = ("src_mac", "src_ip", "src_port", "version", "opcode", "dtype", "flags", "comm", "src", "hop",
                  "chunk", "step", "seq", "offset", "length")
        while True:
            await FallingEdge(d.clk)
            ready = not self.stall and self.rng.random() < self.hdr_ready_p
            d.m_axis_hdr_tready.value = int(ready)
            await Timer(1, "ns")
            if ready and int(d.m_axis_hdr_tvalid.value):
                self.headers.append({f: int(getattr(d, f"m_axis_hdr_{f}").value) for f in fields})

    async def start_step(self, step: int) -> None:
        d = self.dut
        await FallingEdge(d.clk)
        d.step_start.value = 1
        d.step_id.value = step
        await FallingEdge(d.clk)
        d.step_start.value = 0
        self.model.start_step(step)

    async def send(self, frame: bytes, fcs_bad: bool = False) -> None:
        tuser = [0] * (len(frame) - 1) + [int(fcs_bad)]
        await self.source.send(AxiStreamFrame(frame, tuser=tuser))

    async def quiesce(self) -> None:
        if self.source is not None:
            await self.source.wait()
        await ClockCycles(self.dut.clk, 16)
        while int(self.dut.m_axis_hdr_tvalid.value) or int(self.dut.m_axis_payload_tvalid.value):
            await ClockCycles(self.dut.clk, 4)
        await ClockCycles(self.dut.clk, 4)

    async def take_events(self) -> list[tuple[int, int, int, int, int]]:
        d = self.dut
        out = []
        await FallingEdge(d.clk)
        d.evt_ready.value = 1
        while True:
            await Timer(1, "ns")
            if not int(d.evt_valid.value):
                break
            out.append((int(d.evt_nak.value), int(d.evt_flow.value), int(d.evt_step.value), int(d.evt_seq.value),
                        int(d.evt_credit.value)))
            await FallingEdge(d.clk)
        d.evt_ready.value = 0
        return out

    async def check_delivered(self, expected: list[Delivered]) -> None:
        got = self.headers[: len(expected)]
        assert len(self.headers) == len(expected), f"{len(self.headers)} headers delivered, expected {len(expected)}"
        self.headers.clear()
        for want, h in zip(expected, got, strict=True):
            w = want.header
            ref = {"src_mac": int.from_bytes(want.src_mac, "big"),
                   "src_ip": int.from_bytes(Endpoint(b"\0" * 6, want.src_ip, 0).ip_bytes, "big"),
                   "src_port": want.src_port, "version": wire.VERSION, "opcode": int(w.opcode),
                   "dtype": wire.DTYPE_CODE[w.dtype], "flags": w.flags, "comm": w.comm, "src": w.src, "hop": w.hop,
                   "chunk": w.chunk, "step": w.step, "seq": w.seq, "offset": w.offset, "length": w.length}
            assert h == ref, f"header {h} != {ref}"
            if w.length:
                frame = self.sink.recv_nowait()
                assert bytes(frame.tdata) == want.payload, f"payload of seq {w.seq}: {len(frame.tdata)} bytes differ"
        assert self.sink.empty(), "payload frames beyond the delivered headers"

    def counters(self) -> dict[str, int]:
        return {c: int(getattr(self.dut, c).value) for c in COUNTERS}


def data_frame(rng: random.Random, flow: Flow, step: int, seq: int, *, comm: int = COMM,
               dst: Endpoint = LOCAL, max_beats: int = 4) -> bytes:
    if flow is Flow.SCALAR:
        nbytes = 16 * rng.randint(1, 4 * max_beats)
    else:
        nbytes = 64 * rng.randint(1, max_beats) - rng.choice((0, 0, 0, 2, 4, 30))
    payload = rng.randbytes(nbytes)
    op = wire.FLOW_OPCODE[flow]
    hop = LAST_HOP if rng.random() < 0.3 else rng.randrange(256)  # LAST at LAST_HOP: a flow's final frame
    h = Header(op, rng.choice(wire.WIRE_DTYPES), rng.choice((0, wire.FLAG_LAST)), comm, 0, hop,
               rng.randrange(1 << 16), step, seq, rng.randrange(1 << 32), nbytes)
    return wire.build_frame(PEER, dst, h, payload)


def reply_frame(rng: random.Random, step: int) -> bytes:
    op = rng.choice((Opcode.ACK, Opcode.NAK))
    h = Header(op, "fp32", wire.ack_flags(rng.choice(FLOWS)), COMM, 2, 0, 0, step, rng.randrange(1 << 32),
               rng.randrange(1 << 16), 0)
    return wire.build_frame(OTHER, LOCAL, h)


CORRUPTIONS = ("fcs", "mac", "ethertype", "ip_header", "ip_checksum", "ip_address", "protocol", "port", "udp_len",
               "version", "opcode", "dtype", "length", "cut", "comm", "pad", "pad", "payload", "header",
               "udp_checksum")


def corrupt(rng: random.Random, frame: bytes, how: str) -> tuple[bytes, bool]:
    f = bytearray(frame)
    if how == "fcs":
        return frame, True
    if how == "ethertype":
        f[12:14] = b"\x86\xdd"
    elif how == "ip_header":
        f[14] = rng.choice((0x46, 0x65, 0x44))
    elif how == "ip_checksum":
        f[22] ^= 1 << rng.randrange(8)
    elif how == "protocol":
        f[23] = rng.choice((6, 1, 16))
        fix_ip_checksum(f)
    elif how == "port":
        f[36:38] = struct.pack("!H", rng.choice((0x4F4F, 53, 0)))
    elif how == "udp_len":
        f[38:40] = struct.pack("!H", struct.unpack("!H", f[38:40])[0] + rng.choice((1, -1, 64)))
    elif how == "version":
        f[42] = (rng.choice((0, 2, 15)) << 4) | (f[42] & 0xF)
    elif how == "opcode":
        f[42] = 0x10 | rng.choice((0, 6, 9, 15))
    elif how == "dtype":
        f[43] = (rng.choice((2, 3)) << 6) | (f[43] & 0x3F)
    elif how == "length":
        f[62:64] = struct.pack("!H", struct.unpack("!H", f[62:64])[0] ^ (1 << rng.randrange(8)))
    elif how == "cut":
        f = f[: rng.randrange(1, len(f))]
    elif how == "pad":  # Ethernet padding after the IPv4 packet: not delivered, the frame is
        f += rng.randbytes(rng.randint(1, 130))
    elif how == "payload":  # a flip behind the FCS (valid FCS, TUSER 0): only the UDP checksum sees it
        f[rng.randrange(64, len(f))] ^= 1 << rng.randrange(8)
    elif how == "header":  # ... in a ring header field no other check covers (step, sequence number, offset)
        f[rng.randrange(50, 62)] ^= 1 << rng.randrange(8)
    elif how == "udp_checksum":
        f[40 + rng.randrange(2)] ^= 1 << rng.randrange(8)
    return bytes(f), False


async def run_group(tb: TB, frames: list[tuple[bytes, bool]]) -> None:
    delivered = []
    for frame, fcs_bad in frames:
        await tb.send(frame, fcs_bad)
        _, out = tb.model.receive(frame, fcs_bad)
        if out is not None:
            delivered.append(out)
    await tb.quiesce()
    await tb.check_delivered(delivered)
    events = await tb.take_events()
    want = tb.model.take_replies()
    assert events == want, f"replies {events} != model {want}"


@cocotb.test()
async def test_random_traffic(dut: Any) -> None:
    """Seeded loss / duplication / reordering per flow, damaged and foreign frames, steps moving on."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    nframes = int(os.environ.get("ONIC_FRAMES", "400"))
    rng = random.Random(seed)
    tb = TB(dut, rng)
    tb.random_idle(0.2)
    tb.random_backpressure(0.3)
    await tb.reset()
    step = rng.randrange(1 << 32)
    # no step yet: data frames are dropped (step)
    await run_group(tb, [(data_frame(rng, Flow.RS, step, 0), False)])
    await tb.start_step(step)
    sent = 0
    while sent < nframes:
        group = []
        for _ in range(rng.randint(1, 6)):
            m = tb.model
            flow = rng.choice(FLOWS)
            expected = m.receivers[flow].expected
            r = rng.random()
            if r < 0.45:
                frame = data_frame(rng, flow, step, expected, max_beats=tb.frame_beats)
            elif r < 0.55 and expected:
                frame = data_frame(rng, flow, step, rng.randrange(expected))  # duplicate
            elif r < 0.65:
                frame = data_frame(rng, flow, step, expected + rng.randint(1, 3))  # gap (loss or reorder)
            elif r < 0.72:
                frame = reply_frame(rng, rng.choice((step, step - 1 & 0xFFFFFFFF)))
            elif r < 0.77 and m.previous is not None:
                prev = m.previous[0]
                frame = data_frame(rng, flow, prev, rng.randrange(m.previous[1][flow] + 1))  # late retransmission
            elif r < 0.80:
                frame = data_frame(rng, flow, step + rng.randint(2, 9) & 0xFFFFFFFF, expected)  # another step
            elif r < 0.83:
                frame = data_frame(rng, flow, step, expected, dst=rng.choice((OTHER, WRONG_IP)))
            else:
                how = rng.choice(CORRUPTIONS)
                frame = data_frame(rng, flow, step, expected, comm=COMM ^ 1 if how == "comm" else COMM)
                group.append(corrupt(rng, frame, how))
                continue
            group.append((frame, False))
        sent += len(group)
        await run_group(tb, group)
        if rng.random() < 0.04:
            step = step + 1 & 0xFFFFFFFF
            await tb.start_step(step)
    got = tb.counters()
    assert got == tb.model.counters, f"counters {got} != model {tb.model.counters}"
    dut._log.info(f"{sent} frames, counters {got}")
    if nframes >= 200:  # damage only the UDP checksum sees, in the payload, the header and the field itself
        assert got["dropped_udp_checksum"] >= 3, got


@cocotb.test()
async def test_stalled_downstream(dut: Any) -> None:
    """Nobody reads: frames that do not fit are dropped whole (overflow, then gaps), never corrupted;
    the retransmission after the stall is delivered intact. Payload beats and header slots both run out."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed + 1)
    tb = TB(dut, rng)
    tb.random_idle(0.1)
    tb.random_backpressure(0.0)
    await tb.reset()
    step = 7
    await tb.start_step(step)
    # first the header slots run out, then (frames longer than FRAME_BEATS) the payload beats
    for beats, nframes in ((4, tb.slots + 4), ((tb.depth + 2) // (tb.slots // 2) + 1, tb.slots)):
        tb.stall = True
        base = tb.model.receivers[Flow.RS].expected
        payloads = [rng.randbytes(64 * beats) for _ in range(nframes)]

        def frame(i: int, payloads: list[bytes] = payloads, base: int = base) -> bytes:
            h = Header(Opcode.RS, "fp32", 0, COMM, 0, 0, 0, step, base + i, 0, len(payloads[i]))
            return wire.build_frame(PEER, LOCAL, h, payloads[i])

        # capacity with nobody reading: the header slots, and the payload RAM plus its 2 output registers
        fits = min(tb.slots, (tb.depth + 2) // beats)
        delivered = []
        for i in range(nframes):
            await tb.send(frame(i))
            _, out = tb.model.receive(frame(i), fits=i < fits)
            if out is not None:
                delivered.append(out)
        await tb.source.wait()
        await ClockCycles(dut.clk, 20)
        assert len(tb.headers) == 0 and tb.sink.empty()
        tb.stall = False
        await tb.quiesce()
        await tb.check_delivered(delivered)
        assert len(delivered) == fits
        events = await tb.take_events()
        assert events == tb.model.take_replies() == [(1, int(Flow.RS), step, base + fits, tb.slots)], events
        # the sender goes back to the first frame not acknowledged
        await run_group(tb, [(frame(i), False) for i in range(fits, nframes)])
    got = tb.counters()
    assert got == tb.model.counters, f"counters {got} != model {tb.model.counters}"
    assert got["dropped_overflow"] == 2


@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_eth_mac_rx(dut: Any) -> None:
    """Frames from cocotbext-eth's 100G EthMacRx model (preamble and inter-frame gap timing; it
    keeps TUSER bit 0, the frame-check flag, at 0): in-order data and ACKs of every flow delivered."""
    from cocotbext.eth import EthMacRx

    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed + 2)
    tb = TB(dut, rng, source=False)
    tb.random_backpressure(0.2)
    mac = EthMacRx(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst, speed=100e9)
    mac.log.setLevel(logging.WARNING)
    await tb.reset()
    step = 0xFFFFFFFF
    await tb.start_step(step)
    delivered = []
    for _ in range(24):
        flow = rng.choice(FLOWS)
        frame = (data_frame(rng, flow, step, tb.model.receivers[flow].expected, max_beats=tb.frame_beats)
                 if rng.random() < 0.8 else reply_frame(rng, step))
        await mac.send(frame)
        _, out = tb.model.receive(frame)
        assert out is not None
        delivered.append(out)
    # (EthMacRx's idle()/wait() do not cover the frame on the wire: wait for the frame counter)
    while int(dut.frames_in.value) < len(delivered):
        await ClockCycles(dut.clk, 16)
    await tb.quiesce()
    await tb.check_delivered(delivered)
    events = await tb.take_events()
    assert events == tb.model.take_replies()
    got = tb.counters()
    assert got == tb.model.counters, f"counters {got} != model {tb.model.counters}"


@cocotb.test()
async def test_step_start_in_flight(dut: Any) -> None:
    """step_start while a frame is between its header latch and its end: the frame is judged in
    the new step (accepted as its seq 0; then, one step on, re-ACKed as a previous-step frame)."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed + 3)
    tb = TB(dut, rng)
    tb.random_backpressure(0.2)
    await tb.reset()
    await tb.start_step(10)
    delivered = []
    for new_step in (11, 12):
        payload = rng.randbytes(64 * 20)
        h = Header(Opcode.RS, "fp32", 0, COMM, 0, 0, 0, 11, 0, 0, len(payload))
        frame = wire.build_frame(PEER, LOCAL, h, payload)
        await tb.send(frame)
        while not int(dut.s_axis_tvalid.value):
            await FallingEdge(dut.clk)
        await ClockCycles(dut.clk, 9)  # the header is latched (6 clocks in), the end ~26 clocks in
        await tb.start_step(new_step)
        cause, out = tb.model.receive(frame)
        assert cause == ("accept" if new_step == 11 else "previous_step"), cause
        if out is not None:
            delivered.append(out)
        await tb.quiesce()
    await tb.check_delivered(delivered)
    events = await tb.take_events()
    assert events == tb.model.take_replies() == [(0, int(Flow.RS), 11, 1, tb.slots)], events
    got = tb.counters()
    assert got == tb.model.counters, f"counters {got} != model {tb.model.counters}"
