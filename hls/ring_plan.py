"""Sizing of the rail placement (`placement="rail"`, design.md section 8: the card is its rank's network rail and
runs the ring's reduce-scatter, the owner's update and the all-gather):
  goodput          a frame carries P payload bytes and costs P + 88 on the wire (preamble + SFD 8,
                   Ethernet 14, IPv4 20, UDP 8, our header 22, FCS 4, inter-frame gap 12), so
                   goodput = line rate x P / (P + 88) (fp32, 100 Gb/s, P = 1408: 2.94 G elements/s)
  demand           ring ports x goodput / wire bytes per element (the reduced shard arrives at the
                   payload goodput, not the line rate)
  ports            one ring port carries one direction's goodput to the successor (through a switch on
                   a one-port U50, or cabled switchless on a two-port card: port 0 to the successor,
                   port 1 from the predecessor: the same goodput per direction); `ring_ports=k` (up to
                   the card's ports) runs k rings, 1/k of the vector each, one per port: k times the demand
  extra streams    (card level, HBM/DDR staging buffers, double-buffered chunks)
    lgrad          the local gradient of every chunk: the ring reads it (wire bytes per element at the
                   goodput) in every reduce-scatter hop, the update hop included; the host's DMA fills
                   the other half of the double buffer at the same rate: 2 x goodput bytes/s
    gather         the gathered parameters of the other N - 1 chunks: written in every all-gather hop at
                   the goodput and drained by the host's DMA at the same rate: 2 x goodput bytes/s (the
                   owner's own chunk is the kernel's `out` stream, at the update hop)
                   The update hop runs lgrad, p/m/v and out together; gather runs in the all-gather
                   hops (it does not add to a channel's load at the update).
  window buffers   per ring port, flows RS and AG each: a retransmit buffer and a receive buffer of
                   window x P bytes, 512 bits wide, in URAM (8 x 4K x 72 = 256 KiB per group) where the
                   target has it, else BRAM36 (8 x 512 x 72 = 32 KiB per group), against the target's
                   usable on-chip memory
  RTL chunk bound  the packaged RTL network kernel (hls.vitis.netpkg: 2^ceil(log2 window) transmit slots
                   per flow, 32 receive slots) on every card of a ring deadlocks in hop-major order once
                   a chunk has transmit + receive slots packets per flow or more (hls.net.ring_bound: 160
                   at the default window of 128); round-major order with a segment B, 2 B below that
                   (79), runs any chunk in two-phase steps (design.md 8.2). The plan reports the bound,
                   the largest hop-major chunk, the segment and, with the parameter count, this ring's
                   chunk and whether it needs round-major order
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hls import layout
from hls.memory_plan import (
    CHUNK_ELEMS,
    ChannelLoad,
    CuAssignment,
    SizingError,
    bank_expr,
    channel_loads,
    channel_usable,
)
from hls.net import ring_bound, wire
from hls.spec import DTYPE_BYTES
from hls.targets import Target

PLACEMENTS = ("sidecar", "rail")


# The frame format is hls.net.wire's (design.md 8.2): a frame costs its payload plus 88 bytes of wire
# time (preamble + SFD 8, Ethernet 14, IPv4 20, UDP 8, our header 22, FCS 4, inter-frame gap 12).
FRAME_OVERHEAD_BYTES = wire.WIRE_OVERHEAD_BYTES


PAYLOAD_BYTES = wire.DEFAULT_PAYLOAD_BYTES  # 22 beats: a 1458-byte IP packet fits a 1500-byte MTU


PAYLOAD_MIN, PAYLOAD_MAX = wire.PAYLOAD_MIN, wire.PAYLOAD_MAX


WINDOW_PACKETS = 128  # go-back-N window per flow (assumed: covers a ~14 us round trip at 100 Gb/s, P = 1408)


MAX_WINDOW_PACKETS = 1 << 16


# On-chip memories holding a 512-bit-wide buffer: 8 blocks side by side (72-bit ports, 64 data bits).
URAM_GROUP_BYTES = 8 * 4096 * 8  # 8 URAM288 of 4K x 72


BRAM_GROUP_BYTES = 8 * 512 * 8  # 8 BRAM36 of 512 x 72


def net_goodput_bytes_per_s(line_rate_gbps: float, payload_bytes: int) -> float:
    """Payload bytes per second one port carries per direction: line rate x P / (P + 88).

    A frame of P payload bytes costs P + 88 bytes of wire time (FRAME_OVERHEAD: preamble and SFD,
    Ethernet, IPv4, UDP, our header, FCS and the inter-frame gap). 100 Gb/s at P = 1408:
    12.5e9 x 1408 / 1496 = 11.76 GB/s = 2.94 G fp32 elements/s.
    """
    return wire.goodput(line_rate_gbps * 1e9, payload_bytes) / 8


def check_payload_bytes(payload_bytes: object) -> int:
    try:
        return wire.validate_payload_bytes(payload_bytes)  # type: ignore[arg-type]
    except wire.WireError as exc:
        raise SizingError(str(exc)) from None


@dataclass
class NetStream:
    """A rail-mode HBM/DDR stream of the ring engine (not a kernel port): lgrad or gather."""
    name: str
    what: str
    phase: str  # when it runs at the goodput
    stripes: int
    channels: list[int]
    banks: list[str | None]
    bytes_per_s: float  # at the demand, ring and host DMA together, all stripes
    traffic_bytes_per_elem: float  # per element of the demand (reduce-scatter elements), all stripes
    staging_bytes: int  # double-buffered chunks, all stripes
    shares_kernel_channel: bool


@dataclass
class WindowBuffer:
    flow: str  # "RS" | "AG"
    kind: str  # "retransmit" | "receive"
    ring_port: int
    bytes: int
    memory: str  # "uram" | "bram36"
    blocks: int


@dataclass
class NetworkPlan:
    placement: str
    card_ports: int
    ring_ports: int
    port_assumption: str
    line_rate_gbps: float  # one port
    payload_bytes: int
    frame_overhead_bytes: int
    frame_efficiency: float  # P / (P + 88)
    goodput_bytes_per_s: float  # per direction, all ring ports
    line_params_per_s: float  # what the raw line rate would carry (ring ports x line rate / wire bytes)
    goodput_params_per_s: float  # the demand: ring ports x goodput / wire bytes
    streams: list[NetStream]
    loads: list[ChannelLoad]  # channels only the ring engine uses
    extra_bytes_per_elem: float  # lgrad + gather per demand element (the sidecar has neither)
    update_bytes_per_s: float  # card memory traffic during the update hop at the demand
    sidecar_update_bytes_per_s: float  # the same kernel fed from the stream with no ring streams
    memory_params_per_s: float  # what the ring streams' channels allow (each in its phase)
    window_packets: int
    window_buffers: list[WindowBuffer]
    window_bytes: int
    uram: int
    bram36: int
    uram_usable: int | None
    bram36_usable: int | None
    onchip_fits: bool
    # The packaged RTL network kernel on N RTL cards (hls.net.ring_bound): a chunk with rtl_packets_bound
    # packets per flow (RS at the wire dtype, AG at the output dtype) or more deadlocks in hop-major order;
    # round-major order with rtl_segment packets per round (two-phase steps) runs any chunk.
    rtl_packets_bound: int = 0
    rtl_max_chunk_elems: int = 0  # the largest chunk under the bound at this payload
    rtl_chunk_elems: int | None = None  # one ring's chunk (the card's shard over the ring ports), with params
    rtl_chunk_packets: dict[str, int] | None = None  # {"rs": ..., "ag": ...} packets per hop of that chunk
    rtl_chunk_deadlocks: bool | None = None  # that chunk reaches the bound: hop-major order would deadlock
    rtl_segment: int = 0  # the largest round-major segment (packets per round) the buffers allow
    # One-phase steps on cards with streaming Adam kernels take chunks of at most the receive slots' RS packets
    # (ring_bound.one_phase_fits); a larger chunk runs as the two phases, in either order.
    rtl_one_phase_max_elems: int = 0
    rtl_chunk_one_phase: bool | None = None  # this ring's chunk runs as a one-phase step


def ring_streams(target: Target, assignments: list[CuAssignment], wire_bytes: int, out_bytes: int,
                  demand: float) -> list[NetStream]:
    """Place the ring engine's lgrad and gather stripes: free channels first, else the least used."""
    used: dict[int, int] = {}
    for a in assignments:
        for st in a.stripes:
            used[st.channel] = used.get(st.channel, 0) + 1
    free = [c for c in range(target.memory.channels) if c not in used]
    streams = []
    for name, what, phase, esize in (
        ("lgrad", "local gradient of every chunk: ring reads + host DMA writes",
         "every reduce-scatter hop, the update hop included", wire_bytes),
        ("gather", "gathered parameters of the other chunks: ring writes + host DMA reads",
         "every all-gather hop", out_bytes),
    ):
        traffic = 2.0 * wire_bytes  # bytes per demand element: the goodput, twice (ring and host)
        n = ring_stream_stripes(target, wire_bytes, demand)
        chans, shared = [], False
        for _ in range(n):
            if free:
                chans.append(free.pop(0))
            else:
                c = min(used, key=lambda k: (used[k], k))
                chans.append(c)
                shared = True
            used[chans[-1]] = used.get(chans[-1], 0) + 1
        streams.append(NetStream(
            name=name, what=what, phase=phase, stripes=n, channels=chans,
            banks=[bank_expr(target, [c]) for c in chans], bytes_per_s=traffic * demand,
            traffic_bytes_per_elem=traffic, staging_bytes=n * 2 * layout.stripe_bytes(CHUNK_ELEMS, esize, n),
            shares_kernel_channel=shared,
        ))
    return streams


def ring_stream_stripes(target: Target, wire_bytes: int, demand: float) -> int:
    """Stripes of one ring stream (lgrad or gather): 2 x the goodput over usable channels, read and written
    (the ring one way, the host's DMA the other), rounded up to a power of two (at most
    layout.RING_MAX_STRIPES): the network RTL maps a run's first beat to its stripe and index with a mask
    and a shift (hls.layout.run_stripes)."""
    need = max(1, math.ceil(2.0 * wire_bytes * demand / channel_usable(target, mixed=True) - 1e-9))
    return min(layout.RING_MAX_STRIPES, 1 << (need - 1).bit_length())


def rail_cu_limit(target: Target, a0: CuAssignment, streams: list[NetStream], cus: int) -> float:
    """CU elements/s the channels allow with the ring streams, each stream in its phase.

    Update hop: kernel stripes and lgrad together; all-gather hops: gather alone."""
    usable = channel_usable(target, mixed=True)  # a ring stream's channel is read and written
    loads = channel_loads(target, a0, 1.0)
    kernel = {c.channel: c.load_bytes_per_elem for c in loads}
    own = {c.channel: c.usable_bytes_per_s for c in loads}
    lgrad: dict[int, float] = {}
    gather: dict[int, float] = {}
    for st in streams:
        into = lgrad if st.name == "lgrad" else gather
        for c in st.channels:  # per CU element: a card element is 1/cus of a CU's
            into[c] = into.get(c, 0.0) + st.traffic_bytes_per_elem / st.stripes * cus
    limit = math.inf
    for c in set(kernel) | set(lgrad):
        limit = min(limit, min(own.get(c, usable), usable if c in lgrad else own.get(c, usable))
                    / (kernel.get(c, 0.0) + lgrad.get(c, 0.0)))
    for load in gather.values():
        limit = min(limit, usable / load)
    return limit


def annotate_rail(target: Target, assignments: list[CuAssignment], streams: list[NetStream], cus: int,
                   cu_rate: float) -> list[ChannelLoad]:
    """Add the ring stripes to the channel loads they share; return the loads of ring-only channels."""
    usable = channel_usable(target, mixed=True)  # a ring stream's channel is read and written
    by_chan = {c.channel: c for a in assignments for c in a.loads}
    own: dict[int, ChannelLoad] = {}
    for st in streams:
        for i, c in enumerate(st.channels):
            load = st.traffic_bytes_per_elem / st.stripes * cus
            # gather runs in the all-gather hops: it shares capacity, not the update hop's bandwidth
            add = load if st.name == "lgrad" else 0.0
            staging = st.staging_bytes // st.stripes
            cl = by_chan.get(c)
            if cl is None:
                cl = own.setdefault(c, ChannelLoad(
                    channel=c, bank=st.banks[i], stripes=[], load_bytes_per_elem=0.0, usable_bytes_per_s=usable,
                    utilization=0.0, staging_bytes=0, state_stripes=0))
                add = load
            cl.stripes.append(f"{st.name}{i}")
            cl.load_bytes_per_elem += add
            cl.usable_bytes_per_s = min(cl.usable_bytes_per_s, usable)
            cl.utilization = cl.load_bytes_per_elem * cu_rate / cl.usable_bytes_per_s
            cl.staging_bytes += staging
    return [own[c] for c in sorted(own)]


def window_buffers(target: Target, ring_ports: int, window: int, payload: int) -> tuple[list[WindowBuffer], str]:
    uram = target.resources.get("uram") or 0
    memory = "uram" if uram else "bram36"
    group = URAM_GROUP_BYTES if uram else BRAM_GROUP_BYTES
    nbytes = window * payload
    blocks = 8 * math.ceil(nbytes / group)
    bufs = [WindowBuffer(flow=f, kind=k, ring_port=r, bytes=nbytes, memory=memory, blocks=blocks)
            for r in range(ring_ports) for f in ("RS", "AG") for k in ("retransmit", "receive")]
    return bufs, memory


def check_rail(target: Target, placement: str, payload_bytes: object, ring_ports: object,
                window_packets: object) -> None:
    if placement not in PLACEMENTS:
        raise SizingError(f"placement: {placement!r} must be one of {', '.join(PLACEMENTS)}")
    check_payload_bytes(payload_bytes)
    if (isinstance(ring_ports, bool) or not isinstance(ring_ports, int)
            or not 1 <= ring_ports <= target.network_ports):
        raise SizingError(f"ring_ports: {ring_ports!r} must be 1..{target.network_ports} "
                          f"({target.name} has {target.network_ports} network port(s))")
    if (isinstance(window_packets, bool) or not isinstance(window_packets, int)
            or not 1 <= window_packets <= MAX_WINDOW_PACKETS):
        raise SizingError(f"window_packets: {window_packets!r} must be 1..{MAX_WINDOW_PACKETS}")


def port_assumption(target: Target, ring_ports: int) -> str:
    if ring_ports >= 2:
        return (f"{ring_ports} rings, 1/{ring_ports} of the vector each, one on each of {ring_ports} of the "
                f"{target.name}'s {target.network_ports} ports (through a switch): {ring_ports} x one port's goodput "
                f"per direction")
    if target.network_ports == 1:
        return (f"one ring on the {target.name}'s one port, through a switch: it sends to the successor and "
                f"receives from the predecessor on the same port (full duplex)")
    return (f"one ring: one port's goodput per direction (through a switch on one port, or cabled switchless, "
            f"port 0 to the successor and port 1 from the predecessor); ring_ports={target.network_ports} runs "
            f"a ring on each of the {target.name}'s {target.network_ports} ports")


def rtl_chunk_bound(ring_ports: int, payload: int, window: int, wire_bytes: int, out_bytes: int,
                    shard: int | None) -> dict[str, object]:
    """The NetworkPlan's rtl_* fields: the packaged network kernel's deadlock bound (hls.net.ring_bound) and,
    for a card's `shard` (elements), one ring's chunk (the shard over the ring ports, whole 64-byte beats)."""
    limit = ring_bound.bound(*ring_bound.packaged_slots_log2(window))
    one_phase = ring_bound.one_phase_packets(ring_bound.PACKAGED_RX_SLOT_LOG2)
    out: dict[str, object] = {"rtl_packets_bound": limit, "rtl_segment": ring_bound.segment_for(limit),
                              "rtl_max_chunk_elems": ring_bound.max_chunk_elems_of_width(limit, payload,
                                                                                         max(wire_bytes, out_bytes)),
                              "rtl_one_phase_max_elems": ring_bound.max_chunk_elems_of_width(one_phase + 1, payload,
                                                                                             wire_bytes)}
    if shard:
        chunk = math.ceil(math.ceil(shard / ring_ports) / 16) * 16
        packets = {"rs": math.ceil(chunk * wire_bytes / payload), "ag": math.ceil(chunk * out_bytes / payload)}
        out |= {"rtl_chunk_elems": chunk, "rtl_chunk_packets": packets,
                "rtl_chunk_deadlocks": max(packets.values()) >= limit,
                "rtl_chunk_one_phase": packets["rs"] <= one_phase}
    return out


def network_plan(target: Target, ring_ports: int, payload: int, window: int, grad_dtype: str, ob: int,
                  demand: float, streams: list[NetStream], ring_loads: list[ChannelLoad], gb: int,
                  mem_rate: float, notes: list[str], shard: int | None = None) -> NetworkPlan:
    wire = DTYPE_BYTES[grad_dtype]
    rtl = rtl_chunk_bound(ring_ports, payload, window, wire, ob, shard)
    goodput = ring_ports * net_goodput_bytes_per_s(target.line_rate_gbps, payload)
    bufs, memory = window_buffers(target, ring_ports, window, payload)
    used = sum(b.blocks for b in bufs)
    uram = used if memory == "uram" else 0
    bram = used if memory == "bram36" else 0
    uram_ok, bram_ok = target.usable("uram"), target.usable("bram36")
    onchip_fits = (uram_ok is None or uram <= uram_ok) and (bram_ok is None or bram <= bram_ok)
    lgrad = next(st for st in streams if st.name == "lgrad")
    notes.append(f"rail: demand = {ring_ports} ring port(s) x {target.line_rate_gbps:g} Gb/s x {payload}/"
                 f"({payload}+{FRAME_OVERHEAD_BYTES}) payload goodput = {goodput / 1e9:.2f} GB/s = "
                 f"{goodput / wire / 1e9:.2f} G {grad_dtype} elements/s (the raw line rate would give "
                 f"{ring_ports * target.line_rate_gbps * 1e9 / 8 / wire / 1e9:.3f})")
    notes.append("rail: lgrad and gather are the ring engine's streams (not kernel ports), each at twice the "
                 "goodput (ring + host DMA); lgrad runs with the update, gather in the all-gather hops")
    if gb:
        notes.append("rail with gradients from memory = the two-phase step (clipping or the non-finite check): the "
                     "reduce-scatter's sum lands in the grad stripes, the update is a second pass over them; "
                     "sizing budgets lgrad alongside it (conservative)")
    if any(st.shares_kernel_channel for st in streams):
        notes.append("rail: too few free channels: ring streams share the kernel's channels")
    if ob > wire:
        notes.append(f"rail: the output is wider than the wire gradient: the all-gather carries {ob} bytes per "
                     f"element, so its hops take {ob / wire:g}x the reduce-scatter's")
    if not onchip_fits:
        notes.append(f"rail: window buffers need {uram or bram} {memory}, more than the {target.name}'s usable "
                     f"{uram_ok if memory == 'uram' else bram_ok}: lower window_packets or payload_bytes")
    if rtl.get("rtl_chunk_deadlocks"):
        packets = rtl["rtl_chunk_packets"]
        assert isinstance(packets, dict)
        notes.append(f"rail: RTL network kernel: a ring chunk of {rtl['rtl_chunk_elems']:,} elements is "
                     f"{packets['rs']:,} RS / {packets['ag']:,} AG packets of {payload} bytes, at or over its deadlock "
                     f"bound of {rtl['rtl_packets_bound']} packets per flow (transmit + receive slots): in "
                     f"hop-major order a ring of RTL cards would deadlock, {ring_bound.DEFECT}; it runs in "
                     f"round-major order with a segment of at most {rtl['rtl_segment']} packets (the network "
                     f"kernel's `segment`, two-phase steps; hop-major takes chunks up to "
                     f"{rtl['rtl_max_chunk_elems']:,} elements)")
    elif rtl.get("rtl_chunk_one_phase") is False:
        notes.append(f"rail: RTL network kernel: a ring chunk of {rtl['rtl_chunk_elems']:,} elements is over the "
                     f"one-phase bound ({rtl['rtl_one_phase_max_elems']:,} elements at {payload} bytes: the receive "
                     "slots' RS packets, hls.net.ring_bound.one_phase_fits): every step runs as the two phases, in "
                     "hop-major order")
    return NetworkPlan(
        placement="rail", card_ports=target.network_ports, ring_ports=ring_ports,
        port_assumption=port_assumption(target, ring_ports), line_rate_gbps=target.line_rate_gbps,
        payload_bytes=payload, frame_overhead_bytes=FRAME_OVERHEAD_BYTES,
        frame_efficiency=payload / (payload + FRAME_OVERHEAD_BYTES), goodput_bytes_per_s=goodput,
        line_params_per_s=ring_ports * target.line_rate_gbps * 1e9 / 8 / wire,
        goodput_params_per_s=goodput / wire, streams=streams, loads=ring_loads,
        extra_bytes_per_elem=sum(st.traffic_bytes_per_elem for st in streams),
        update_bytes_per_s=demand * (gb + 24 + ob + lgrad.traffic_bytes_per_elem),
        sidecar_update_bytes_per_s=demand * (gb + 24 + ob), memory_params_per_s=mem_rate,
        window_packets=window, window_buffers=bufs, window_bytes=sum(b.bytes for b in bufs),
        uram=uram, bram36=bram, uram_usable=uram_ok, bram36_usable=bram_ok, onchip_fits=onchip_fits,
        **rtl,  # type: ignore[arg-type]
    )
