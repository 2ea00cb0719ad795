"""The packet-level model of ONE card on the ring (design.md 8): what the RTL implements and the
driver runs, frame for frame.

Use::

    card = Card(CardConfig(rank=r, world=n, length=L, endpoints=eps, wire_dtype="bf16"), update=kernel)
    card.start_step(step, local_grad)          # local_grad: L elements of the wire dtype
    while not card.done:
        for frame in card.poll(now):           # frames to transmit; the Ethernet header says where
            transmit(frame)
        for frame in arrived:                  # every frame the MAC delivers, in any order
            card.receive(frame, now)
        if card.error: raise card.error        # a peer sent an impossible frame
    params = card.gathered                     # L elements of the param dtype, the same on every card

`update(reduced_chunk, grad_scale)` is the owner's Adam kernel: it gets the card's reduced chunk
(S elements of the wire dtype: float32, or uint16 bf16 patterns) and the float64 gradient scale
(the kernel rounds it once to fp32), updates its shard's p, m, v and returns the S updated
parameters (float32, or uint16 bf16 patterns for `param_dtype="bf16"`). `grad_scale` None means
the two-phase step found a non-finite gradient: skip the update and return the current
parameters. `ReferenceKernel` is that callable on a `hls.net.ring.Shard` with `hls.golden`.

Flows: reduce-scatter (RS), all-gather (AG) and the two-phase step's scalar exchange each have their
own go-back-N sender towards the successor and receiver from the predecessor
(`hls.net.reliability`); sequence numbers run over the phase's hops, hop-major (seq = hop x
packets per chunk + packet index) or, with `segment` B, round-major (`wire.seq_of`: B packets of
the own chunk, then the same packets of every later hop, then the next B; a ring of cards with
finite buffers cannot deadlock when 2 B < transmit + receive slots: sim/rtl/net/README.md). The
card forwards a packet as soon as it consumed its predecessor's (streaming per packet). The model
calls `update` once per step with the whole reduced chunk; the update is elementwise, so a kernel
streaming it packet by packet computes the same bits.

The card consumes a packet at once (its copy lives in card memory), so the credit it advertises is
always `slots`. When the successor has moved on to the next step and a retransmission of the
previous step arrives (its last ACK was lost), the successor drops it and re-ACKs the whole
previous flow, so the sender finishes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hls.golden import Hyper
from hls.net import ring, wire
from hls.net.reliability import ProtocolError, Receiver, Reply, Sender, Verdict
from hls.net.wire import Drop, Endpoint, Flow, Header, Opcode

# Payload elements are little-endian, as in card memory.
_PAYLOAD_DTYPE = {"fp32": np.dtype("<f4"), "bf16": np.dtype("<u2")}

# The two-phase step's scalar entry: rank, non-finite flag, 6 pad bytes, float64 sum of squares
# (little-endian, as card memory); a scalar frame at hop k carries k + 1 entries.
_SCALAR_ENTRY = struct.Struct("<B?6xd")
SCALAR_ENTRY_BYTES = _SCALAR_ENTRY.size

# Every counter the card keeps (design.md 8.3), beside dropped_<cause> for each cause in DROP_CAUSES.
COUNTER_NAMES = (
    "frames_in", "bytes_in", "frames_out", "bytes_out", "retransmitted_frames", "retransmitted_bytes",
    "acks_sent", "acks_received", "naks_sent", "naks_received", "timeouts",
    "rs_payload_bytes_out", "ag_payload_bytes_out", "scalar_payload_bytes_out",
)
# Causes beyond the codec's (`wire.Drop`): another communicator; a step neither current nor the
# previous one, or no step started; the previous step (re-ACKed); the go-back-N receiver's verdicts;
# ACK/NAKs of another step or below the window.
CARD_DROP_CAUSES = ("comm", "step", "previous_step", "duplicate", "gap", "overflow", "stale_reply")
DROP_CAUSES = tuple(d.value for d in Drop) + CARD_DROP_CAUSES


class UpdateKernel(Protocol):
    def __call__(self, reduced_chunk: np.ndarray, grad_scale: float | None) -> np.ndarray: ...


@dataclass(frozen=True)
class CardConfig:
    """One card's place on the ring and its protocol parameters (the same on every card but `rank`).

    `endpoints[r]` are rank r's addresses; `window` caps the packets past the last ACK, `slots` is
    the credit the card advertises, `rto` the retransmission timeout (in the caller's time unit).
    """

    rank: int
    world: int
    length: int  # L, the flat parameter vector's element count
    endpoints: tuple[Endpoint, ...]
    comm: int = 0
    wire_dtype: str = "fp32"
    param_dtype: str = "fp32"
    payload_bytes: int = wire.DEFAULT_PAYLOAD_BYTES
    window: int = 64
    slots: int = 64
    rto: float = 1e-3
    fcs: bool = True
    # The RTL card's ag_release rule (design.md 8.4) for a software peer beside an RTL card: no AG
    # frame before every RS frame (and every scalar frame of a two-phase step) is ACKed. Off for
    # rings of software cards, whose receivers take frames of any flow in any order.
    ag_release: bool = False
    # Packets per round of the RS and AG flows' sequence numbers (design.md 8.2); 0: the whole chunk.
    segment: int = 0

    def __post_init__(self) -> None:
        ring.validate_world(self.world)
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} out of 0 .. {self.world - 1}")
        if len(self.endpoints) != self.world:
            raise ValueError(f"{len(self.endpoints)} endpoints for {self.world} ranks")
        if len({e.mac for e in self.endpoints}) != self.world:
            raise ValueError("endpoints: every rank needs its own MAC address")
        wire.validate_wire_dtype(self.wire_dtype)
        wire.validate_wire_dtype(self.param_dtype)
        wire.validate_payload_bytes(self.payload_bytes)
        if not 0 <= self.comm <= 0xFFFF:
            raise ValueError(f"comm: {self.comm} out of 0 .. 65535")
        if self.window < 1 or self.slots < 1 or not self.rto > 0:
            raise ValueError("window and slots must be >= 1 and rto > 0")
        ring.chunk_elems(self.length, self.world)  # validates length
        wire.validate_segment(self.segment)

    @property
    def chunk_elems(self) -> int:
        return ring.chunk_elems(self.length, self.world)

    @property
    def successor(self) -> int:
        return (self.rank + 1) % self.world

    @property
    def predecessor(self) -> int:
        return (self.rank - 1) % self.world


@dataclass
class ReferenceKernel:
    """The reference `update`: `hls.golden.adam_update` on one owner's shard (p, m, v updated in place).

    Set `hyper` (lr, betas, step t, ...) before each step, as the host writes the kernel's registers;
    its `grad_scale` is ignored: the card passes the step's scale.
    """

    shard: ring.Shard
    hyper: Hyper = field(default_factory=Hyper)
    optimizer: str = "adamw"
    wire_dtype: str = "fp32"
    param_dtype: str = "fp32"

    def __call__(self, reduced_chunk: np.ndarray, grad_scale: float | None) -> np.ndarray:
        return ring.shard_update(self.shard, reduced_chunk, self.hyper, grad_scale, wire_dtype=self.wire_dtype,
                                 out_dtype=self.param_dtype, optimizer=self.optimizer)


@dataclass
class _Flow:
    """One phase's sender (to the successor) and receiver (from the predecessor), and the frames sent."""

    flow: Flow
    per_hop: int  # packets per hop
    sender: Sender
    receiver: Receiver
    frames: dict[int, bytes] = field(default_factory=dict)  # seq -> frame, kept for retransmission
    payload_bytes: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.sender.total


class Card:
    """One card: see the module docstring for the protocol and the calling pattern."""

    def __init__(self, config: CardConfig, update: UpdateKernel) -> None:
        self.config = config
        self.update = update
        self.error: ProtocolError | None = None
        self.step: int | None = None
        self._totals = dict.fromkeys(COUNTER_NAMES, 0) | {f"dropped_{c}": 0 for c in DROP_CAUSES}
        self._flows: dict[Flow, _Flow] = {}
        self._previous: tuple[int, dict[Flow, int]] | None = None  # last step and each flow's final ACK
        self._late_replies: list[bytes] = []  # re-ACKs of the previous step's flows
        c = config
        self._elems_per_packet = {d: c.payload_bytes // wire.ELEMENT_BYTES[d] for d in wire.WIRE_DTYPES}
        self._size = c.chunk_elems
        self._local: np.ndarray | None = None
        self._reduced: np.ndarray | None = None
        self._gathered = np.zeros(0)
        self._updated = False
        self._two_phase = False
        self._max_norm: float | None = None
        self._grad_scale = 1.0
        self._own_scalar: tuple[float, bool] | None = None
        self._scalars: dict[int, tuple[float, bool]] = {}
        self._scalar_inbox: dict[int, list[tuple[int, float, bool]]] = {}  # hop -> entries, until ours is known

    # -- the host side --------------------------------------------------------------------------------

    def start_step(self, step: int, local_grad: np.ndarray, *, two_phase: bool = False,
                   max_norm: float | None = None, grad_scale: float = 1.0) -> None:
        """Begin step `step` with this rank's local gradient (L elements of the wire dtype).

        `grad_scale` is the host's unscale factor (the kernel gets grad_scale / N, x the clip
        coefficient); `max_norm` clips (needs `two_phase`). The previous step must be done.
        """
        c = self.config
        if self.step is not None and not self.done:
            raise RuntimeError(f"card {c.rank}: step {self.step} is not done")
        if self.step is not None and step == self.step:
            raise ValueError(f"step {step} again: every step needs a new step number")
        if not 0 <= step <= 0xFFFFFFFF:
            raise ValueError(f"step {step} out of 0 .. 2**32 - 1")
        if max_norm is not None and not two_phase:
            raise ValueError("max_norm needs the two-phase step (two_phase=True)")
        ring.check_wire_array(local_grad, c.wire_dtype, "local_grad")
        if local_grad.size != c.length:
            raise ValueError(f"local_grad: {local_grad.size} elements, expected {c.length}")
        self._fold_counters()
        if self.step is not None:
            self._previous = (self.step, {f: fl.receiver.expected for f, fl in self._flows.items()})
        self.step = step
        self._local = ring.pad(local_grad, c.world)
        self._reduced = np.zeros(self._size, _PAYLOAD_DTYPE[c.wire_dtype])
        self._gathered = np.zeros(c.world * self._size, _PAYLOAD_DTYPE[c.param_dtype])
        self._updated = False
        self._two_phase, self._max_norm, self._grad_scale = two_phase, max_norm, float(grad_scale)
        self._own_scalar, self._scalars, self._scalar_inbox = None, {}, {}
        hops = c.world - 1
        self._flows = {Flow.RS: self._new_flow(Flow.RS, self._packets(c.wire_dtype), hops),
                       Flow.AG: self._new_flow(Flow.AG, self._packets(c.param_dtype), hops)}
        if two_phase:
            self._flows[Flow.SCALAR] = self._new_flow(Flow.SCALAR, 1, hops)
        rs = self._flows[Flow.RS]
        chunk = ring.rs_send_chunk(c.rank, 0, c.world)
        for i in range(rs.per_hop):  # hop 0: this rank's own gradient of chunk r - 1, straight from memory
            lo, hi = self._span(c.wire_dtype, i)
            self._provide(rs, Opcode.RS, c.wire_dtype, 0, i, chunk, self._local[chunk * self._size :][lo:hi].tobytes())

    @property
    def gathered(self) -> np.ndarray | None:
        """The full updated parameter vector (L elements, param dtype) once every chunk is in, else None."""
        if not self._gathered_complete():
            return None
        return self._gathered[: self.config.length].copy()

    @property
    def done(self) -> bool:
        """This step's parameters are gathered and every packet this card sent is acknowledged."""
        return (self.error is None and self.step is not None and self._gathered_complete()
                and all(f.sender.done for f in self._flows.values()))

    @property
    def counters(self) -> dict[str, int]:
        """Every counter of design.md 8.3 since the card was made: names in COUNTER_NAMES, dropped_<cause>."""
        out = dict(self._totals)
        for name, value in self._flow_counters().items():
            out[name] += value
        return out

    # -- the wire side --------------------------------------------------------------------------------

    def receive(self, frame: bytes, now: float) -> None:
        """One frame from the MAC. Frames not ours or damaged are dropped and counted by cause; a
        frame no correct peer sends sets `error` (and the card stops)."""
        if self.error is not None:
            return
        c = self.config
        self._totals["frames_in"] += 1
        self._totals["bytes_in"] += len(frame)
        parsed = wire.parse_frame(frame, local=c.endpoints[c.rank], with_fcs=c.fcs)
        if isinstance(parsed, Drop):
            self._totals[f"dropped_{parsed.value}"] += 1
            return
        h = parsed.header
        if h.comm != c.comm:
            self._totals["dropped_comm"] += 1
            return
        try:
            if h.opcode in (Opcode.ACK, Opcode.NAK):
                self._on_reply(h, now)
            else:
                self._on_data(h, parsed.payload)
        except ProtocolError as exc:
            self.error = exc

    def poll(self, now: float) -> list[bytes]:
        """Frames to transmit now: ACK/NAKs to the predecessor, then data to the successor."""
        if self.error is not None or self.step is None:
            return []
        out, self._late_replies = self._late_replies, []
        self._totals["acks_sent"] += len(out)
        for fl in self._flows.values():
            # every reply due: the flow's final ACK and its repeat leave together, as from the RTL
            while (reply := fl.receiver.take_reply()) is not None:
                kind, expected, credit = reply
                out.append(self._reply_frame(kind, fl.flow, self.step, expected, credit))
        released = not self.config.ag_release or all(self._flows[f].sender.done for f in (Flow.RS, Flow.SCALAR)
                                                      if f in self._flows)
        for fl in self._flows.values():
            if fl.flow is Flow.AG and not released:
                # the ag_release rule (design.md 8.4): no AG frame before every RS frame (and, in a
                # two-phase step, every scalar frame) is ACKed, so the successor meets this card's AG
                # frames only after all its RS and scalar frames; an RTL card takes frames in arrival
                # order and cannot hold AG frames while it waits for RS or scalar ones
                continue
            for seq in fl.sender.poll(now):
                out.append(fl.frames[seq])
                self._totals[f"{fl.flow.name.lower()}_payload_bytes_out"] += fl.payload_bytes[seq]
        self._totals["frames_out"] += len(out)
        self._totals["bytes_out"] += sum(len(f) for f in out)
        return out

    # -- internals ------------------------------------------------------------------------------------

    def _packets(self, dtype: str) -> int:
        return wire.packets_per_chunk(self._size, dtype, self.config.payload_bytes)

    def _span(self, dtype: str, index: int) -> tuple[int, int]:
        """Element range [lo, hi) of packet `index` within a chunk."""
        per = self._elems_per_packet[dtype]
        return index * per, min((index + 1) * per, self._size)

    def _seq(self, fl: _Flow, hop: int, index: int) -> int:
        return wire.seq_of(hop, index, fl.per_hop, self.config.world - 1, self.config.segment)

    def _hop_index(self, fl: _Flow, seq: int) -> tuple[int, int]:
        return wire.hop_index_of(seq, fl.per_hop, self.config.world - 1, self.config.segment)

    def _new_flow(self, flow: Flow, per_hop: int, hops: int) -> _Flow:
        c = self.config
        assert self.step is not None
        return _Flow(flow, per_hop, Sender(step=self.step, total=per_hop * hops, window=c.window, credit=c.slots,
                                           rto=c.rto), Receiver(step=self.step, slots=c.slots))

    def _provide(self, fl: _Flow, opcode: Opcode, dtype: str, hop: int, index: int, chunk: int,
                 payload: bytes) -> None:
        """Build the frame of packet `index` of hop `hop` and hand it to the flow's sender."""
        c = self.config
        assert self.step is not None
        seq = self._seq(fl, hop, index)
        offset = self._span(dtype, index)[0] if opcode is not Opcode.SCALAR else 0
        flags = wire.FLAG_LAST if index == fl.per_hop - 1 else 0
        header = Header(opcode, dtype, flags, c.comm, c.rank, hop, chunk, self.step, seq, offset, len(payload))
        frame = wire.build_frame(c.endpoints[c.rank], c.endpoints[c.successor], header, payload, with_fcs=c.fcs)
        fl.frames[seq] = frame
        fl.payload_bytes[seq] = len(payload)
        fl.sender.provide(seq, len(frame))

    def _reply_frame(self, kind: Reply, flow: Flow, step: int, expected: int, credit: int) -> bytes:
        c = self.config
        opcode = Opcode.ACK if kind is Reply.ACK else Opcode.NAK
        header = Header(opcode, "fp32", wire.ack_flags(flow), c.comm, c.rank, 0, 0, step, expected, credit, 0)
        return wire.build_frame(c.endpoints[c.rank], c.endpoints[c.predecessor], header, with_fcs=c.fcs)

    def _on_reply(self, h: Header, now: float) -> None:
        c = self.config
        if h.src != c.successor:
            raise ProtocolError(f"card {c.rank}: {h.opcode.name} from rank {h.src}; only {c.successor} answers it")
        if h.flow is None:
            raise ProtocolError(f"card {c.rank}: {h.opcode.name} names no flow (flags {h.flags:#04x})")
        fl = self._flows.get(h.flow)
        if h.step != self.step or fl is None:
            self._totals["dropped_stale_reply"] += 1
            return
        if h.opcode is Opcode.ACK:
            fl.sender.on_ack(h.step, h.seq, h.offset, now)
        else:
            fl.sender.on_nak(h.step, h.seq, h.offset, now)

    def _on_data(self, h: Header, payload: bytes) -> None:
        c = self.config
        if h.src != c.predecessor:
            raise ProtocolError(f"card {c.rank}: {h.opcode.name} data from rank {h.src}; only {c.predecessor} sends it")
        flow = wire.DATA_OPCODE_FLOW[h.opcode]
        if self.step is None or h.step != self.step:
            if self._previous is not None and h.step == self._previous[0] and flow in self._previous[1]:
                # a retransmission of the previous step: its sender missed our last ACK; finish it
                self._totals["dropped_previous_step"] += 1
                step, final = self._previous
                self._late_replies.append(self._reply_frame(Reply.ACK, flow, step, final[flow], c.slots))
            else:
                self._totals["dropped_step"] += 1
            return
        fl = self._flows.get(flow)
        if fl is None:
            raise ProtocolError(f"card {c.rank}: scalar frame in a one-phase step {h.step}")
        self._check_data(h, fl)
        verdict = fl.receiver.on_frame(h.step, h.seq, final=h.seq == fl.total - 1)
        if verdict is not Verdict.ACCEPT:
            self._totals[f"dropped_{verdict.value}"] += 1
            return
        hop, index = self._hop_index(fl, h.seq)
        if flow is Flow.RS:
            self._consume_rs(hop, index, payload)
        elif flow is Flow.AG:
            self._consume_ag(hop, index, payload)
        else:
            self._consume_scalars(hop, payload)

    def _check_data(self, h: Header, fl: _Flow) -> None:
        """Every field of a data frame follows from its sequence number; anything else is a broken peer."""
        c = self.config
        if h.seq >= fl.total:
            raise ProtocolError(f"card {c.rank}: {h.opcode.name} seq {h.seq} beyond the flow's {fl.total} packets")
        hop, index = self._hop_index(fl, h.seq)
        if fl.flow is Flow.SCALAR:
            want = (hop, 0, (hop + 1) * SCALAR_ENTRY_BYTES, "fp32", 0)
            got = (h.hop, h.chunk, h.length, h.dtype, h.offset)
        else:
            dtype = c.wire_dtype if fl.flow is Flow.RS else c.param_dtype
            recv_chunk = ring.rs_recv_chunk if fl.flow is Flow.RS else ring.ag_recv_chunk
            lo, hi = self._span(dtype, index)
            want = (hop, recv_chunk(c.rank, hop, c.world), (hi - lo) * wire.ELEMENT_BYTES[dtype], dtype, lo)
            got = (h.hop, h.chunk, h.length, h.dtype, h.offset)
        if got != want or h.last != (index == fl.per_hop - 1):
            raise ProtocolError(f"card {c.rank}: {h.opcode.name} seq {h.seq}: (hop, chunk, length, dtype, offset) "
                                f"{got}, expected {want} (last flag {h.last})")

    def _consume_rs(self, hop: int, index: int, payload: bytes) -> None:
        c = self.config
        assert self._local is not None and self._reduced is not None
        chunk = ring.rs_recv_chunk(c.rank, hop, c.world)
        lo, hi = self._span(c.wire_dtype, index)
        partial = np.frombuffer(payload, _PAYLOAD_DTYPE[c.wire_dtype]).astype(ring.STORAGE[c.wire_dtype])
        total = ring.add_partial(partial, self._local[chunk * self._size + lo : chunk * self._size + hi], c.wire_dtype)
        rs = self._flows[Flow.RS]
        if hop < c.world - 2:  # not ours yet: forward the new partial at once
            self._provide(rs, Opcode.RS, c.wire_dtype, hop + 1, index, chunk, total.tobytes())
            return
        self._reduced[lo:hi] = total  # the owner's sum
        if rs.receiver.expected == rs.total:
            self._on_reduced()

    def _on_reduced(self) -> None:
        c = self.config
        assert self._reduced is not None
        if not self._two_phase:
            self._run_update(ring.step_grad_scale(None, c.world, grad_scale=self._grad_scale))
            return
        self._own_scalar = ring.chunk_scalars(self._reduced, c.wire_dtype)
        self._scalars[c.rank] = self._own_scalar
        own = _SCALAR_ENTRY.pack(c.rank, self._own_scalar[1], self._own_scalar[0])
        self._provide(self._flows[Flow.SCALAR], Opcode.SCALAR, "fp32", 0, 0, 0, own)
        for hop, entries in sorted(self._scalar_inbox.items()):
            self._forward_scalars(hop, entries)
        self._scalar_inbox = {}
        self._maybe_scale()

    def _consume_scalars(self, hop: int, payload: bytes) -> None:
        c = self.config
        entries = [_SCALAR_ENTRY.unpack_from(payload, k * SCALAR_ENTRY_BYTES) for k in range(hop + 1)]
        want = [(c.rank - 1 - hop + k) % c.world for k in range(hop + 1)]
        if [e[0] for e in entries] != want:
            raise ProtocolError(f"card {c.rank}: scalar hop {hop} carries ranks {[e[0] for e in entries]}, "
                                f"expected {want}")
        for rank, flag, sumsq in entries:
            self._scalars[rank] = (sumsq, flag)
        if self._own_scalar is None:
            self._scalar_inbox[hop] = entries  # forward once our own sum is known
        else:
            self._forward_scalars(hop, entries)
        self._maybe_scale()

    def _forward_scalars(self, hop: int, entries: list[tuple[int, bool, float]]) -> None:
        c = self.config
        if hop >= c.world - 2:
            return
        assert self._own_scalar is not None
        payload = b"".join(_SCALAR_ENTRY.pack(*e) for e in entries)
        payload += _SCALAR_ENTRY.pack(c.rank, self._own_scalar[1], self._own_scalar[0])
        self._provide(self._flows[Flow.SCALAR], Opcode.SCALAR, "fp32", hop + 1, 0, 0, payload)

    def _maybe_scale(self) -> None:
        c = self.config
        if self._updated or self._own_scalar is None or len(self._scalars) < c.world:
            return
        scalars = [self._scalars[r] for r in range(c.world)]
        self._run_update(ring.step_grad_scale(scalars, c.world, grad_scale=self._grad_scale, max_norm=self._max_norm))

    def _run_update(self, scale: float | None) -> None:
        c = self.config
        want = _PAYLOAD_DTYPE[c.param_dtype]
        out = np.asarray(self.update(self._reduced, scale))
        if out.shape != (self._size,) or out.dtype != want:
            raise TypeError(f"update returned {out.dtype} {out.shape}; expected {self._size} elements of {want}")
        self._updated = True
        own = slice(c.rank * self._size, (c.rank + 1) * self._size)
        self._gathered[own] = out
        ag = self._flows[Flow.AG]
        for i in range(ag.per_hop):  # AG hop 0: the owner's updated chunk
            lo, hi = self._span(c.param_dtype, i)
            self._provide(ag, Opcode.AG, c.param_dtype, 0, i, c.rank, self._gathered[own][lo:hi].tobytes())

    def _consume_ag(self, hop: int, index: int, payload: bytes) -> None:
        c = self.config
        chunk = ring.ag_recv_chunk(c.rank, hop, c.world)
        lo, hi = self._span(c.param_dtype, index)
        base = chunk * self._size
        self._gathered[base + lo : base + hi] = np.frombuffer(payload, _PAYLOAD_DTYPE[c.param_dtype])
        if hop < c.world - 2:  # every card but the owner's predecessor passes it on
            self._provide(self._flows[Flow.AG], Opcode.AG, c.param_dtype, hop + 1, index, chunk, payload)

    def _gathered_complete(self) -> bool:
        ag = self._flows.get(Flow.AG)
        return self._updated and ag is not None and ag.receiver.expected == ag.total

    def _flow_counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for fl in self._flows.values():
            s, r = fl.sender.counters, fl.receiver.counters
            for name, value in (("retransmitted_frames", s.retransmitted_frames),
                                ("retransmitted_bytes", s.retransmitted_bytes), ("timeouts", s.timeouts),
                                ("acks_received", s.acks_received), ("naks_received", s.naks_received),
                                ("acks_sent", r.acks_sent), ("naks_sent", r.naks_sent),
                                ("dropped_stale_reply", s.stale_replies)):
                out[name] = out.get(name, 0) + value
        return out

    def _fold_counters(self) -> None:
        for name, value in self._flow_counters().items():
            self._totals[name] += value

