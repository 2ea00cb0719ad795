"""The receive side of one card as the RTL (sim/rtl/net/onic_net_rx.v) implements it, built from
the exact Python model: hls.net.wire.parse_frame for the codec's drop causes, the communicator
check and the previous-step re-ACK of hls.net.card.Card._on_data, and one
hls.net.reliability.Receiver per flow. Differences from Card, all on the RTL's side of the line:
the MAC strips the FCS (its verdict comes as a flag; bytes_in excludes the 4 FCS bytes), ACK/NAK
frames are delivered for the transmit side to judge (Card judges them itself), the three flows
always exist (Card has no scalar flow in a one-phase step), protocol errors (a data frame from a
rank other than the predecessor, a sequence number past the flow's end) are not detected, and
the previous step's re-ACKs of one flow are coalesced into one (their contents are identical).
A flow's final packet is known from its header (LAST at hop `last_hop`, the RTL's cfg_last_hop),
where Card knows it from the flow's length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hls.net import wire
from hls.net.card import DROP_CAUSES
from hls.net.reliability import Receiver, Reply, Verdict
from hls.net.wire import Drop, Endpoint, Flow, Opcode

FLOWS = (Flow.RS, Flow.AG, Flow.SCALAR)


@dataclass
class Delivered:
    header: wire.Header
    src_mac: bytes
    src_ip: str
    src_port: int
    payload: bytes


@dataclass
class RxModel:
    local: Endpoint
    comm: int
    slots: int
    step: int | None = None
    previous: tuple[int, dict[Flow, int]] | None = None
    receivers: dict[Flow, Receiver] = field(default_factory=dict)
    late: set[Flow] = field(default_factory=set)
    counters: dict[str, int] = field(default_factory=dict)
    last_hop: int = 0  # N - 2: a LAST frame at this hop is its flow's final one (its ACK goes twice)

    def __post_init__(self) -> None:
        self.counters = {"frames_in": 0, "bytes_in": 0, "frames_accepted": 0} | {
            f"dropped_{c}": 0 for c in DROP_CAUSES if c != "stale_reply"}

    def start_step(self, step: int) -> None:
        if self.step is not None:
            self.previous = (self.step, {f: r.expected for f, r in self.receivers.items()})
        self.step = step
        self.receivers = {f: Receiver(step=step, slots=self.slots) for f in FLOWS}
        self.late = set()

    def receive(self, frame: bytes, fcs_bad: bool = False, fits: bool = True) -> tuple[str, Delivered | None]:
        """The verdict ('accept' or the drop cause) and what is delivered."""
        self.counters["frames_in"] += 1
        self.counters["bytes_in"] += len(frame)
        cause, out = self._verdict(frame, fcs_bad, fits)
        self.counters["frames_accepted" if cause == "accept" else f"dropped_{cause}"] += 1
        return cause, out

    def _verdict(self, frame: bytes, fcs_bad: bool, fits: bool) -> tuple[str, Delivered | None]:
        if fcs_bad:
            return Drop.FCS.value, None
        parsed = wire.parse_frame(frame, local=self.local)
        if isinstance(parsed, Drop):
            return parsed.value, None
        h = parsed.header
        if h.comm != self.comm:
            return "comm", None
        out = Delivered(h, parsed.src_mac, parsed.src_ip, parsed.src_port, parsed.payload)
        if h.opcode in (Opcode.ACK, Opcode.NAK):
            return ("accept", out) if fits else ("overflow", None)
        flow = wire.DATA_OPCODE_FLOW[h.opcode]
        if self.step is None or h.step != self.step:
            if self.previous is not None and h.step == self.previous[0] and flow in self.previous[1]:
                self.late.add(flow)
                return "previous_step", None
            return "step", None
        rx = self.receivers[flow]
        final = h.last and h.hop == self.last_hop
        if not fits and h.seq == rx.expected:
            rx.held = rx.slots  # the RTL's buffer is full: Receiver's overflow
            verdict = rx.on_frame(h.step, h.seq, final)
            rx.held = 0
        else:
            verdict = rx.on_frame(h.step, h.seq, final)
        if verdict is Verdict.ACCEPT:
            return "accept", out
        return verdict.value, None

    def take_replies(self) -> list[tuple[int, int, int, int, int]]:
        """Every reply due, in the RTL's order: (nak, flow, step, next expected, credit)."""
        out = []
        if self.previous is not None:
            for flow in FLOWS:
                if flow in self.late:
                    out.append((0, int(flow), self.previous[0], self.previous[1][flow], self.slots))
        self.late = set()
        for flow in FLOWS:
            rx = self.receivers.get(flow)
            # every reply due: a final ACK's copy follows it at once
            while rx is not None and (reply := rx.take_reply()) is not None:
                kind, expected, credit = reply
                out.append((int(kind is Reply.NAK), int(flow), self.step, expected, credit))
        return out
