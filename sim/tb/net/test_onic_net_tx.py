"""cocotb test of onic_net_tx (headers + RS and AG go-back-N flows + arbiter) end to end.

The MAC is cocotbext-eth's EthMacTx at 100 Gb/s (it fails on a transmit underflow: TVALID low
mid-frame), plus a TVALID monitor. A peer model (hls.net.reliability.Receiver per flow) takes
the frames with random loss, its ACK/NAKs come back with random loss, and the retransmission
timeout recovers lost tails (each flow's last packet is lost until its flow has timed out once).
Every frame on the wire must equal hls.net.wire.build_frame for
its header and payload (RS fp32 and AG bf16 packets of ONIC_PAYLOAD bytes, a short last packet;
ACK/NAK frames requested on s_ctl_*), and both flows must complete.

ONIC_SCALAR=1: the AG sender first carries the two-phase step's scalar flow (s_ag_desc_scalar):
the scalar frames rank 5 of a ring of 8 `hls.net.card.Card`s sends in a two-phase step (hops 0 .. 6,
16 (k + 1) bytes), byte for byte as that reference card builds them, through the same lossy peer;
once every one is acknowledged, `start_ag` restarts the AG sender for the AG packets (the scalar
flow's late replies are then dropped, as the kernel must route them).

Environment: ONIC_SEED, ONIC_PAYLOAD, ONIC_PACKETS, ONIC_LOSS, ONIC_SCALAR.
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource
from cocotbext.eth import EthMacTx

from hls.golden import Hyper
from hls.net import reliability, ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel

WINDOW = 8
CREDIT = 6
RTO = 1500


def pause(rng: random.Random, p: float):  # noqa: ANN201 - a generator for cocotbext-axi
    while True:
        yield rng.random() < p


def scalar_packets(step: int, comm: int, seed: int) -> list[tuple[wire.Header, bytes]]:
    """The scalar packets rank 5 of a lossless two-phase ring of 8 reference cards sends (clipping on)."""
    n, r, size = 8, 5, 16
    rng = np.random.default_rng(seed)
    eps = tuple(wire.endpoint_for_rank(k) for k in range(n))
    params = (rng.standard_normal(n * size) * 0.1).astype(np.float32)
    cards = []
    for k in range(n):
        kernel = ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper())
        cfg = CardConfig(rank=k, world=n, length=n * size, endpoints=eps, comm=comm, payload_bytes=64,
                         window=1 << 16, slots=1 << 16, rto=1e9, fcs=False)
        cards.append(Card(cfg, kernel))
        cards[k].start_step(step, (rng.standard_normal(n * size) * 4.0).astype(np.float32), two_phase=True,
                            max_norm=1.0)
    by_mac = {e.mac: k for k, e in enumerate(eps)}
    sent: dict[int, tuple[wire.Header, bytes]] = {}
    now = 0.0
    while not all(c.done for c in cards):
        now += 1.0
        for k, card in enumerate(cards):
            for frame in card.poll(now):
                parsed = wire.parse_frame(frame, with_fcs=False)
                assert not isinstance(parsed, wire.Drop)
                if k == r and parsed.header.opcode is wire.Opcode.SCALAR:
                    assert wire.build_frame(eps[r], eps[r + 1], parsed.header, parsed.payload) == frame
                    sent[parsed.header.seq] = (parsed.header, parsed.payload)
                cards[by_mac[frame[:6]]].receive(frame, now)
        assert now < 1e4, "the reference ring did not finish"
    assert sorted(sent) == list(range(n - 1))
    return [sent[k] for k in range(n - 1)]


class Flow:
    def __init__(self, dut: Any, name: str, rng: random.Random, packets: list[tuple[wire.Header, bytes]]) -> None:
        self.dut, self.name, self.rng = dut, name, rng
        self.src = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"s_{name}_axis"), dut.clk, dut.rst)
        self.src.set_pause_generator(pause(rng, 0.2))
        self.restart(packets)

    def restart(self, packets: list[tuple[wire.Header, bytes]], timeouts0: int = 0) -> None:
        """A new flow on the same sender (the scalar flow, then AG): a new peer receiver."""
        self.packets, self.timeouts0 = packets, timeouts0
        self.peer = reliability.Receiver(step=packets[0][0].step, slots=CREDIT)
        self.replies: list[tuple[bool, int, int]] = []

    async def drive(self) -> None:
        dut, name = self.dut, self.name
        for header, payload in self.packets:
            if name == "ag":
                dut.s_ag_desc_scalar.value = int(header.opcode is wire.Opcode.SCALAR)
            self.src.send_nowait(AxiStreamFrame(payload))
            for field, value in (("dtype", wire.DTYPE_CODE[header.dtype]), ("flags", header.flags),
                                 ("hop", header.hop), ("chunk", header.chunk), ("seq", header.seq),
                                 ("offset", header.offset), ("len", header.length)):
                getattr(dut, f"s_{name}_desc_{field}").value = value
            getattr(dut, f"s_{name}_desc_valid").value = 1
            await RisingEdge(dut.clk)
            while not int(getattr(dut, f"s_{name}_desc_ready").value):
                await RisingEdge(dut.clk)
            getattr(dut, f"s_{name}_desc_valid").value = 0
            await ClockCycles(dut.clk, self.rng.randrange(3))

    async def answer(self) -> None:
        dut, name = self.dut, self.name
        while True:
            if not self.replies:
                await RisingEdge(dut.clk)
                continue
            nak, seq, credit = self.replies.pop(0)
            getattr(dut, f"s_{name}_ack_nak").value = int(nak)
            getattr(dut, f"s_{name}_ack_step").value = self.peer.step
            getattr(dut, f"s_{name}_ack_seq").value = seq
            getattr(dut, f"s_{name}_ack_credit").value = credit
            getattr(dut, f"s_{name}_ack_valid").value = 1
            await RisingEdge(dut.clk)
            while not int(getattr(dut, f"s_{name}_ack_ready").value):
                await RisingEdge(dut.clk)
            getattr(dut, f"s_{name}_ack_valid").value = 0

    def timeouts(self) -> int:
        return (int(getattr(self.dut, f"{self.name}_counters").value) >> 128) & 0xFFFFFFFF

    def on_frame(self, seq: int, loss: float) -> None:
        if seq == len(self.packets) - 1 and self.timeouts() == self.timeouts0:
            return  # the last packet is lost until the sender has timed out once
        if self.rng.random() < loss:
            return  # lost on the wire
        self.peer.on_frame(self.peer.step, seq)
        reply = self.peer.take_reply()
        if reply is not None and self.rng.random() >= loss / 2:
            kind, expected, credit = reply
            self.replies.append((kind is reliability.Reply.NAK, expected, credit))


def packets_of(opcode: wire.Opcode, dtype: str, step: int, total: int, payload: int, rng: random.Random,
               chunk: int) -> list[tuple[wire.Header, bytes]]:
    per_chunk = max(2, total // 2)  # two hops
    out = []
    for seq in range(total):
        last_in_chunk = seq % per_chunk == per_chunk - 1 or seq == total - 1
        n = payload if seq < total - 1 else rng.randrange(1, payload)
        header = wire.Header(opcode, dtype, wire.FLAG_LAST if last_in_chunk else 0, comm=0x1234, src=5,
                             hop=seq // per_chunk, chunk=chunk, step=step, seq=seq,
                             offset=(seq % per_chunk) * payload // wire.ELEMENT_BYTES[dtype], length=n)
        out.append((header, bytes(rng.randrange(256) for _ in range(n))))
    return out


@cocotb.test()
async def test_transmit(dut: Any) -> None:
    rng = random.Random(int(os.environ.get("ONIC_SEED", "1")))
    payload = int(os.environ.get("ONIC_PAYLOAD", "1408"))
    total = int(os.environ.get("ONIC_PACKETS", "24"))
    loss = float(os.environ.get("ONIC_LOSS", "0.08"))
    scalar = os.environ.get("ONIC_SCALAR", "0") == "1"
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    local, peer = wire.endpoint_for_rank(5), wire.endpoint_for_rank(6)
    step = rng.randrange(2**32)
    for name, value in (("local_mac", int.from_bytes(local.mac, "big")), ("peer_mac", int.from_bytes(peer.mac, "big")),
                        ("local_ip", int.from_bytes(local.ip_bytes, "big")),
                        ("peer_ip", int.from_bytes(peer.ip_bytes, "big")), ("udp_sport", local.port),
                        ("pred_mac", int.from_bytes(peer.mac, "big")),
                        ("pred_ip", int.from_bytes(peer.ip_bytes, "big")),
                        ("comm", 0x1234), ("rank", 5), ("step", step), ("rto", RTO), ("rs_window", WINDOW),
                        ("rs_credit", CREDIT), ("ag_window", WINDOW - 3), ("ag_credit", CREDIT)):
        getattr(dut, f"cfg_{name}").value = value
    for sig in ("start", "start_ag", "s_ag_desc_scalar", "s_rs_desc_valid", "s_ag_desc_valid", "s_rs_ack_valid",
                "s_ag_ack_valid", "s_ctl_valid"):
        getattr(dut, sig).value = 0
    mac = EthMacTx(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst, speed=100e9)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 10)  # the header checksum pipelines
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0

    ag_packets = packets_of(wire.Opcode.AG, "bf16", step, total, payload, rng, chunk=5)
    scalars = scalar_packets(step, 0x1234, rng.randrange(2**32)) if scalar else []
    flows = {
        "rs": Flow(dut, "rs", rng, packets_of(wire.Opcode.RS, "fp32", step, total, payload, rng, chunk=4)),
        "ag": Flow(dut, "ag", rng, scalars or ag_packets),
    }
    expected = {"rs": [wire.build_frame(local, peer, h, p) for h, p in flows["rs"].packets],
                "ag": [wire.build_frame(local, peer, h, p) for h, p in ag_packets],
                "scalar": [wire.build_frame(local, peer, h, p) for h, p in scalars]}
    phase = {"scalar": scalar}  # the AG sender carries the scalar flow until every scalar packet is ACKed
    ctl = [wire.Header(rng.choice([wire.Opcode.ACK, wire.Opcode.NAK]),
                       flags=wire.ack_flags(rng.choice(list(wire.Flow))), comm=0x1234, src=5,
                       step=rng.choice([step, step - 1 & 0xFFFFFFFF]), seq=rng.randrange(2**32),
                       offset=rng.randrange(2**32)) for _ in range(12)]
    ctl_frames = [wire.build_frame(local, peer, h) for h in ctl]

    gaps: list[int] = []

    async def monitor() -> None:
        in_frame = False
        cycle = 0
        while True:
            await RisingEdge(dut.clk)
            cycle += 1
            valid = int(dut.m_axis_tvalid.value)
            if in_frame and not valid:
                gaps.append(cycle)
            if valid and int(dut.m_axis_tready.value):
                in_frame = not int(dut.m_axis_tlast.value)

    async def send_ctl() -> None:
        for h in ctl:
            await ClockCycles(dut.clk, rng.randrange(20, 200))
            dut.s_ctl_nak.value = int(h.opcode == wire.Opcode.NAK)
            dut.s_ctl_flow.value = int(h.flow)
            dut.s_ctl_step.value = h.step
            dut.s_ctl_seq.value = h.seq
            dut.s_ctl_credit.value = h.offset
            dut.s_ctl_valid.value = 1
            await RisingEdge(dut.clk)
            while not int(dut.s_ctl_ready.value):
                await RisingEdge(dut.clk)
            dut.s_ctl_valid.value = 0

    async def ag_sender() -> None:
        ag = flows["ag"]
        if phase["scalar"]:
            await ag.drive()
            hops = len(scalars)
            while not (ag.peer.expected == hops and int(dut.ag_state.value) & 0xFFFFFFFF == hops):
                await RisingEdge(dut.clk)
            await ClockCycles(dut.clk, rng.randrange(1, 20))
            phase["scalar"] = False  # the scalar flow's replies from now on are not the AG sender's
            ag.replies.clear()
            while int(dut.s_ag_ack_valid.value):  # one on its way finishes first
                await RisingEdge(dut.clk)
            ag.restart(ag_packets, ag.timeouts())
            await RisingEdge(dut.clk)
            dut.start_ag.value = 1
            await RisingEdge(dut.clk)
            dut.start_ag.value = 0
            await ClockCycles(dut.clk, 2)
            state = int(dut.ag_state.value)
            assert state & 0xFFFFFFFF == 0 and state >> 96 == 0, f"AG sender not restarted: {state:#x}"
        await ag.drive()

    cocotb.start_soon(monitor())
    cocotb.start_soon(flows["rs"].drive())
    cocotb.start_soon(ag_sender())
    for f in flows.values():
        cocotb.start_soon(f.answer())
    ctl_task = cocotb.start_soon(send_ctl())

    got_ctl: list[bytes] = []
    counts = {"rs": 0, "ag": 0, "scalar": 0}
    def take(data: bytes) -> None:
        opcode = data[42] & 0xF
        if opcode in (wire.Opcode.ACK, wire.Opcode.NAK):
            got_ctl.append(data)
            return
        name = {wire.Opcode.RS: "rs", wire.Opcode.AG: "ag", wire.Opcode.SCALAR: "scalar"}[wire.Opcode(opcode)]
        seq = int.from_bytes(data[54:58], "big")
        assert data == expected[name][seq], f"{name} frame {seq} differs from build_frame"
        counts[name] += 1
        if name == "scalar" and not phase["scalar"]:
            assert scalar, "a scalar frame with the scalar flow off"
            return  # a retransmission queued before the last ACK: the peer would re-ACK; the caller drops it
        assert name != "ag" or not phase["scalar"], "an AG frame during the scalar flow"
        flows["rs" if name == "rs" else "ag"].on_frame(seq, loss)

    while (phase["scalar"] or not all(f.peer.expected == total for f in flows.values()) or not ctl_task.done()
           or len(got_ctl) < len(ctl)):
        take(bytes((await mac.recv()).data))
    # the last ACKs in, then the frames sent meanwhile (retransmissions the peer no longer needs)
    settled = 0
    while settled < 1000:
        await RisingEdge(dut.clk)
        done = all(int(getattr(dut, f"{name}_state").value) & 0xFFFFFFFF == total for name in flows)
        settled = settled + 1 if done else 0
        while not mac.empty():  # a lost last ACK: the timeout resends, the peer re-acknowledges
            take(bytes(mac.recv_nowait().data))
    assert got_ctl == ctl_frames
    assert not gaps, f"TVALID low mid-frame at cycles {gaps[:5]}"
    if scalar:
        assert counts["scalar"] >= len(scalars)
        dut._log.info("scalar: %d frames (%d packets)", counts["scalar"], len(scalars))
    for k, name in enumerate(("rs", "ag")):
        counters = int(getattr(dut, f"{name}_counters").value)
        frames, retx, timeouts = (counters & 0xFFFFFFFF, (counters >> 64) & 0xFFFFFFFF, (counters >> 128) & 0xFFFFFFFF)
        sent = counts[name] + (counts["scalar"] if name == "ag" else 0)  # the AG sender's counters run on
        assert frames == sent, (name, frames, sent)
        tx = (int(dut.tx_counters.value) >> (32 * (k + 1))) & 0xFFFFFFFF
        assert tx == frames
        dut._log.info("%s: %d frames, %d retransmitted, %d timeouts", name, frames, retx, timeouts)
        assert timeouts >= 1 and retx >= 1
    assert int(dut.errors.value) == 0
