"""Sizing: will a shard's optimizer state fit on the card, and will the kernel keep up?

The memory model (design.md section 3b), per compute unit (CU):
  - Each array (grad, p, m, v, out) is split into stripes. Stripe k of an array holds the
    array's 64-byte beats k, k + S, k + 2S, ... (beat interleaving, so every stripe streams
    sequentially and all stripes of an array advance together).
  - A stripe is one buffer, and a buffer lives in ONE memory channel (an HBM pseudo-channel:
    512 MB on a U55C, 256 MB on a U50/U280; or one DDR bank). v++ maps a kernel m_axi port to
    one HBM AXI port; whatever its `sp=` range says, one port reaches at most one channel's
    bandwidth (UG1393 "HBM Configuration and Use": 14.375 GB/s per pseudo-channel, 256 bits at
    450 MHz, reads and writes together).
  - State stripes (p, m, v) have a read port and a write port on separate bundles, both on the
    stripe's channel; staging stripes (grad, out) have one port each.
  - Usable bandwidth of a channel = its bandwidth x efficiency (catalog: ~0.9 for HBM, measured
    by AMD with one port on one pseudo-channel; ~0.8 for DDR), shared by every port on it.
    A port also moves at most one 512-bit beat per kernel clock per direction.

Formulas (per element of the CU's shard, per step):
  traffic          grad: grad_bytes (0 from the stream), p, m, v: 4 read + 4 written, out: out_bytes
  stripe traffic   = array traffic / stripes of that array
  channel load     = sum of the traffic of the stripes on it (bytes per element)
  memory rate      = min over channels of usable bandwidth / load, and over ports of
                     64 B x clock / (bytes per element one direction of that port)
  kernel rate      = lanes x clock
  CU rate          = min(memory rate, kernel rate); card rate = CUs x CU rate
  demand           = the requested rate (`rate`, elements/s for the card) or, by default, the line
                     rate: line_rate_bits / 8 / grad_bytes elements per second (the reduced
                     gradient shard arrives on one network port at line rate)
  stripes          the fewest that carry the CU's share of the demand (capped at the kernel
                     rate): S = ceil(traffic x rate / usable bandwidth of one channel); state
                     stripes may be raised to hold a given shard (capacity) or fixed by the spec
  capacity         a state stripe holds ceil(n / (16 S)) beats; a channel holds its stripes and
                     the double-buffered staging chunks placed on it; nothing else
Each stripe gets a channel of its own while there are channels; past that (DDR cards) stripes
share channels, balanced by load.

Rail placement (`placement="rail"`, design.md section 8: the card is its rank's network rail and
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
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from hls import layout
from hls.errors import UserError
from hls.net import wire
from hls.ports import ARRAYS, STATE_ARRAYS, port_names
from hls.spec import BEAT_BYTES, DTYPE_BYTES, MAX_LANES, MAX_STRIPES, KernelSpec
from hls.targets import Target

STATE_BYTES = 12  # fp32 master parameter + two fp32 moments
# Elements per staging chunk: the driver streams a shard through the kernel in chunks of this
# size, double-buffered, so staging stripes hold 2 chunks (never a whole shard).
CHUNK_ELEMS = 1 << 20

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


class SizingError(UserError):
    """Impossible sizing input (no parameters, no cards, ...)."""


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


def array_traffic(array: str, grad_bytes: int, out_bytes: int) -> int:
    """Bytes per element per step that `array` moves through card memory (reads and writes)."""
    return {"grad": grad_bytes, "p": 8, "m": 8, "v": 8, "out": out_bytes}[array]


def memory_arrays(grad_source: str) -> tuple[str, ...]:
    return ARRAYS[1:] if grad_source == "stream" else ARRAYS


@dataclass(frozen=True)
class StripeCounts:
    grad: int  # 0 when gradients arrive on the stream
    state: int  # p, m and v each
    out: int

    def of(self, array: str) -> int:
        return self.state if array in STATE_ARRAYS else getattr(self, array)

    def stripes(self) -> list[tuple[str, int]]:
        """(array, index) of every stripe, in register-map order."""
        return [(a, i) for a in ARRAYS for i in range(self.of(a))]

    def ports(self) -> list[str]:
        return [p for a, i in self.stripes() for p in port_names(a, i)]

    def beat_align(self) -> int:
        """Elements a chunk start must be a multiple of, so that every stripe restarts at its beat 0."""
        return MAX_LANES * math.lcm(self.state, max(self.grad, 1), self.out) * 2  # fp32 per beat x 2


@dataclass
class Stripe:
    array: str
    index: int
    ports: list[str]
    channel: int
    bank: str | None  # v++ sp= bank (HBM[3], DDR[1]); None for the non-XRT V80 flow
    traffic_bytes_per_elem: float  # this stripe's share of its array's traffic
    resident_bytes_per_elem: float  # state stripes: 4 / S; staging: 0 (chunk-sized)
    staging_bytes: int  # staging stripes: two chunks' worth


@dataclass
class ChannelLoad:
    channel: int
    bank: str | None
    stripes: list[str]  # "p0", "grad0", ...
    load_bytes_per_elem: float
    usable_bytes_per_s: float
    utilization: float  # of the usable bandwidth, at the CU's rate when fed at the demand
    staging_bytes: int
    state_stripes: int


@dataclass
class CuAssignment:
    cu: int
    slr: int | None
    banks: dict[str, str | None]  # port -> v++ sp= bank expression
    channels: dict[str, list[int]]  # port -> [channel]
    stripes: list[Stripe] = field(default_factory=list)
    loads: list[ChannelLoad] = field(default_factory=list)


def bank_expr(target: Target, channels: list[int]) -> str | None:
    """The v++ `sp=` memory expression (HBM[3], DDR[1]); None for the non-XRT V80 flow."""
    if not target.has_xrt_flow:
        return None
    prefix = target.memory.bank_prefix
    lo, hi = channels[0], channels[-1]
    return f"{prefix}[{lo}]" if lo == hi else f"{prefix}[{lo}:{hi}]"


def channel_usable(target: Target) -> float:
    return target.memory.channel_bandwidth_bytes_per_s * target.memory_efficiency


def port_limit(clock_mhz: float) -> float:
    """Bytes/s one 512-bit port moves per direction at the kernel clock."""
    return BEAT_BYTES * clock_mhz * 1e6


def choose_stripes(target: Target, spec: KernelSpec, cu_rate: float, clock_mhz: float,
                   shard_per_cu: int | None = None) -> StripeCounts:
    """The fewest stripes per array that carry `cu_rate` elements/s (and hold the shard, if given)."""
    usable = min(channel_usable(target), 2 * port_limit(clock_mhz))
    gb = spec.grad_bytes if spec.grad_source == "memory" else 0

    def need(traffic: int) -> int:
        return max(1, math.ceil(traffic * cu_rate / usable - 1e-9)) if traffic else 0

    grad, state, out = need(gb), need(8), need(spec.out_bytes)
    # A port moves one beat per clock per direction: 4 B/element one way on a state stripe.
    state = max(state, math.ceil(4 * cu_rate / port_limit(clock_mhz) - 1e-9))
    if spec.stripes is not None:
        state = spec.stripes
    elif shard_per_cu:
        state = max(state, math.ceil(4 * shard_per_cu / target.memory.channel_capacity_bytes))
    per_cu = target.memory.channels // spec.compute_units
    # Without enough channels (DDR cards) more stripes than channels only add ports: share instead.
    while spec.stripes is None and 3 * state + grad + out > per_cu and max(grad, state, out) > 1:
        if state >= max(grad, out) and state > 1:
            state -= 1
        elif grad >= out and grad > 1:
            grad -= 1
        else:
            out -= 1
    return StripeCounts(grad=grad, state=min(state, MAX_STRIPES), out=out)


def _place(target: Target, cu: int, per_cu: int, counts: StripeCounts, spec: KernelSpec) -> CuAssignment:
    """Put each stripe on a channel of this CU: its own while channels last, else the least loaded."""
    gb = spec.grad_bytes if spec.grad_source == "memory" else 0
    base = cu * per_cu
    loads = [0.0] * per_cu
    count = [0] * per_cu
    stripes: list[Stripe] = []
    order = sorted(counts.stripes(), key=lambda s: -array_traffic(s[0], gb, spec.out_bytes) / counts.of(s[0]))
    for array, index in order:
        traffic = array_traffic(array, gb, spec.out_bytes) / counts.of(array)
        # Fewest stripes first, then least load: one stripe a channel where there are enough.
        slot = min(range(per_cu), key=lambda c: (count[c], loads[c], c))
        loads[slot] += traffic
        count[slot] += 1
        chan = base + slot
        state = array in STATE_ARRAYS
        esize = 4 if state else (gb if array == "grad" else spec.out_bytes)
        stripes.append(Stripe(
            array=array, index=index, ports=port_names(array, index), channel=chan,
            bank=bank_expr(target, [chan]), traffic_bytes_per_elem=traffic,
            resident_bytes_per_elem=4 / counts.state if state else 0.0,
            staging_bytes=0 if state else 2 * layout.stripe_bytes(CHUNK_ELEMS, esize, counts.of(array)),
        ))
    stripes.sort(key=lambda s: (ARRAYS.index(s.array), s.index))
    mem = target.memory
    first_p = next(s for s in stripes if s.array == "p")
    slr = 0 if mem.is_hbm else (mem.bank_slr[first_p.channel] if mem.bank_slr else None)
    ports = {p: s for s in stripes for p in s.ports}
    return CuAssignment(
        cu=cu, slr=slr,
        banks={p: s.bank for p, s in ports.items()},
        channels={p: [s.channel] for p, s in ports.items()},
        stripes=stripes,
    )


def _channel_loads(target: Target, a: CuAssignment, cu_rate: float) -> list[ChannelLoad]:
    by_chan: dict[int, list[Stripe]] = {}
    for s in a.stripes:
        by_chan.setdefault(s.channel, []).append(s)
    usable = channel_usable(target)
    out = []
    for chan, ss in sorted(by_chan.items()):
        load = sum(s.traffic_bytes_per_elem for s in ss)
        out.append(ChannelLoad(
            channel=chan, bank=ss[0].bank, stripes=[f"{s.array}{s.index}" for s in ss],
            load_bytes_per_elem=load, usable_bytes_per_s=usable, utilization=load * cu_rate / usable,
            staging_bytes=sum(s.staging_bytes for s in ss), state_stripes=sum(s.array in STATE_ARRAYS for s in ss),
        ))
    return out


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


@dataclass
class SizingReport:
    target: str
    target_name: str
    params: int
    cards: int
    shard_params: int
    grad_dtype: str
    out_dtype: str
    grad_source: str
    lanes: int
    compute_units: int
    clock_mhz: float
    stripes: StripeCounts
    state_bytes_per_param: int
    moved_bytes_per_param: int
    shard_state_bytes: int
    max_params_per_card: int
    line_rate_gbps: float
    line_rate_params_per_s: float
    demand_params_per_s: float  # what the plan was sized for (line rate unless `rate` was given)
    memory_params_per_s: float
    memory_efficiency: float
    channel_usable_bytes_per_s: float
    channel_capacity_bytes: int
    kernel_params_per_s: float
    achieved_params_per_s: float
    elements_per_clock_needed: float
    elements_per_clock_predicted: float  # per CU, what the simulation under the memory model should show
    lanes_needed: int
    compute_units_needed: int
    bottleneck: str  # "memory" | "kernel"
    binding: str  # the one resource that sets the rate, or capacity when the shard does not fit
    channels_used: int
    fits: bool
    keeps_up: bool
    cards_needed: int
    step_time_s: float
    assignments: list[CuAssignment]
    alternatives: list[str]
    notes: list[str]
    network: NetworkPlan | None = None  # rail placement only (sidecar reports stay as they were)

    @property
    def verdict(self) -> str:
        if not self.params:  # the kernel alone (generate): say what it holds
            fit = f"holds {self.max_params_per_card:,} parameters per card"
        else:
            fit = "fits" if self.fits else f"does NOT fit (needs {self.cards_needed} cards)"
        rate = "line rate" if self.network is None else "the ring's payload goodput"
        pace = f"keeps up with {rate}" if self.keeps_up else f"falls behind {rate} ({self.binding})"
        return f"{fit}; {pace}"

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        if self.network is None:
            del d["network"]
        d["verdict"] = self.verdict
        return d


def _ring_streams(target: Target, assignments: list[CuAssignment], wire_bytes: int, out_bytes: int,
                  demand: float) -> list[NetStream]:
    """Place the ring engine's lgrad and gather stripes: free channels first, else the least used."""
    usable = channel_usable(target)
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
        n = max(1, math.ceil(traffic * demand / usable - 1e-9))
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


def _rail_cu_limit(target: Target, a0: CuAssignment, streams: list[NetStream], cus: int) -> float:
    """CU elements/s the channels allow with the ring streams, each stream in its phase.

    Update hop: kernel stripes and lgrad together; all-gather hops: gather alone."""
    usable = channel_usable(target)
    kernel = {c.channel: c.load_bytes_per_elem for c in _channel_loads(target, a0, 1.0)}
    lgrad: dict[int, float] = {}
    gather: dict[int, float] = {}
    for st in streams:
        into = lgrad if st.name == "lgrad" else gather
        for c in st.channels:  # per CU element: a card element is 1/cus of a CU's
            into[c] = into.get(c, 0.0) + st.traffic_bytes_per_elem / st.stripes * cus
    limit = math.inf
    for c in set(kernel) | set(lgrad):
        limit = min(limit, usable / (kernel.get(c, 0.0) + lgrad.get(c, 0.0)))
    for load in gather.values():
        limit = min(limit, usable / load)
    return limit


def _annotate_rail(target: Target, assignments: list[CuAssignment], streams: list[NetStream], cus: int,
                   cu_rate: float) -> list[ChannelLoad]:
    """Add the ring stripes to the channel loads they share; return the loads of ring-only channels."""
    usable = channel_usable(target)
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
            cl.utilization = cl.load_bytes_per_elem * cu_rate / usable
            cl.staging_bytes += staging
    return [own[c] for c in sorted(own)]


def _window_buffers(target: Target, ring_ports: int, window: int, payload: int) -> tuple[list[WindowBuffer], str]:
    uram = target.resources.get("uram") or 0
    memory = "uram" if uram else "bram36"
    group = URAM_GROUP_BYTES if uram else BRAM_GROUP_BYTES
    nbytes = window * payload
    blocks = 8 * math.ceil(nbytes / group)
    bufs = [WindowBuffer(flow=f, kind=k, ring_port=r, bytes=nbytes, memory=memory, blocks=blocks)
            for r in range(ring_ports) for f in ("RS", "AG") for k in ("retransmit", "receive")]
    return bufs, memory


def _check_rail(target: Target, placement: str, payload_bytes: object, ring_ports: object,
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


def recommend_width(elements_per_clock: float) -> tuple[int, int]:
    """Smallest (lanes, compute units) whose lanes x CUs >= the elements per clock needed."""
    needed = max(1, math.ceil(elements_per_clock - 1e-9))
    if needed <= MAX_LANES:
        return 1 << (needed - 1).bit_length(), 1
    return MAX_LANES, math.ceil(needed / MAX_LANES)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SizingError(f"{name}: {value!r} must be a positive integer")
    return value


def size(
    target: Target,
    params: int | None,
    *,
    grad_dtype: str = "fp32",
    out_dtype: str = "fp32",
    grad_source: str = "memory",
    cards: int = 1,
    lanes: int | None = None,
    compute_units: int | None = None,
    clock_mhz: float | None = None,
    optimizer: str = "adamw",
    stripes: int | None = None,
    rate: float | None = None,
    placement: str = "sidecar",
    payload_bytes: int = PAYLOAD_BYTES,
    ring_ports: int = 1,
    window_packets: int = WINDOW_PACKETS,
    _alternatives: bool = True,
) -> SizingReport:
    """Size a shard of `params / cards` parameters on `target`.

    Lanes and CUs are chosen for the demand when not given; stripes are chosen for the demand and,
    when `params` is given, to hold the shard. `rate` (elements/s for the card) replaces the line
    rate as the demand. `params=None` sizes the kernel alone (capacity is reported, not chosen).
    `placement="rail"`: the card runs the ring (design.md section 8); the demand is the payload goodput of
    its ring ports (`payload_bytes`, `ring_ports`), the ring's lgrad and gather streams enter the memory
    plan and its window buffers (`window_packets`) the on-chip budget; see the module docstring.
    """
    if params is not None:
        _positive_int("params", params)
    _positive_int("cards", cards)
    if rate is not None and not (isinstance(rate, (int, float)) and not isinstance(rate, bool)
                                 and math.isfinite(rate) and rate > 0):
        raise SizingError(f"rate: {rate!r} must be a positive number of elements per second")
    _check_rail(target, placement, payload_bytes, ring_ports, window_packets)
    rail = placement == "rail"
    clock = float(clock_mhz or target.kernel_clock_mhz)
    line_params = target.line_rate_gbps * 1e9 / 8 / DTYPE_BYTES[grad_dtype]
    if rail:  # the reduced shard arrives at the payload goodput of the ring ports
        line_params = ring_ports * net_goodput_bytes_per_s(target.line_rate_gbps, payload_bytes) / DTYPE_BYTES[
            grad_dtype]
    demand = float(rate) if rate is not None else line_params
    per_clock = demand / (clock * 1e6)
    lanes_needed, cus_needed = recommend_width(per_clock)
    lanes = lanes or lanes_needed
    cus = compute_units or cus_needed
    if cus > target.memory.channels:
        raise SizingError(f"{cus} compute units exceed the {target.memory.channels} memory channels")
    # The spec validates dtypes, lanes, CUs, stripes and clock: the one place that knows them.
    spec = KernelSpec(target=target.key, optimizer=optimizer, grad_dtype=grad_dtype, out_dtype=out_dtype,
                      grad_source=grad_source, lanes=lanes, compute_units=cus, clock_mhz=clock_mhz,
                      stripes=stripes)
    per_cu = target.memory.channels // cus
    kernel_cu = lanes * clock * 1e6
    cu_demand = min(demand / cus, kernel_cu)
    shard = math.ceil(params / cards) if params is not None else None
    counts = choose_stripes(target, spec, cu_demand, clock, math.ceil(shard / cus) if shard else None)
    if 3 * counts.state + counts.grad + counts.out > per_cu and stripes is not None and target.memory.is_hbm:
        raise SizingError(
            f"stripes: {stripes} state stripes x 3 arrays + {counts.grad + counts.out} staging stripes need "
            f"{3 * stripes + counts.grad + counts.out} channels; {target.name} has {per_cu} per compute unit"
        )
    gb = DTYPE_BYTES[grad_dtype] if grad_source == "memory" else 0
    ob = DTYPE_BYTES[out_dtype]
    usable = channel_usable(target)
    assignments = [_place(target, cu, per_cu, counts, spec) for cu in range(cus)]
    a0 = assignments[0]
    # Memory-bound rate of one CU: the busiest channel, or one port's beat per clock.
    chan_loads = _channel_loads(target, a0, 1.0)
    mem_cu = min(usable / c.load_bytes_per_elem for c in chan_loads)
    port_cu = port_limit(clock) * counts.state / 4
    if counts.grad:
        port_cu = min(port_cu, port_limit(clock) * counts.grad / gb)
    port_cu = min(port_cu, port_limit(clock) * counts.out / ob)
    mem_cu = min(mem_cu, port_cu)
    streams: list[NetStream] = []
    kernel_mem_cu = mem_cu
    if rail:
        streams = _ring_streams(target, assignments, DTYPE_BYTES[grad_dtype], ob, demand)
        mem_cu = min(mem_cu, _rail_cu_limit(target, a0, streams, cus))
    cu_rate = min(mem_cu, kernel_cu)
    # Channel use at the rate the CU runs when fed at the demand (what headroom is left).
    for a in assignments:
        a.loads = _channel_loads(target, a, min(cu_rate, cu_demand))
    ring_loads = _annotate_rail(target, assignments, streams, cus, min(cu_rate, cu_demand)) if rail else []
    busiest = max(a0.loads + ring_loads, key=lambda c: c.load_bytes_per_elem)
    # Capacity: each channel holds its state stripes' share of the CU's shard and its staging.
    cap = target.memory.channel_capacity_bytes
    per_cu_max = min(
        (cap - c.staging_bytes) * counts.state // (4 * c.state_stripes) for c in a0.loads if c.state_stripes
    )
    # A stripe buffer is whole beats: round down to what whole beats in every stripe hold.
    per_cu_max = max(0, per_cu_max // (MAX_LANES * counts.state) * MAX_LANES * counts.state)
    max_params = per_cu_max * cus
    mem_rate = mem_cu * cus
    kernel_rate = kernel_cu * cus
    achieved = min(mem_rate, kernel_rate)
    fits = shard is None or shard <= max_params
    if mem_cu < kernel_cu:
        bottleneck = "memory"
        binding = (f"memory: channel {busiest.bank or busiest.channel} ({', '.join(busiest.stripes)}) at "
                   f"{usable / 1e9:.2f} GB/s usable" if mem_cu < port_cu else
                   f"memory: one 512-bit port per direction at {clock:g} MHz")
        if rail and mem_cu < kernel_mem_cu:
            binding = (f"memory with the ring streams: channel {busiest.bank or busiest.channel} "
                       f"({', '.join(busiest.stripes)}) at {usable / 1e9:.2f} GB/s usable")
    else:
        bottleneck = "kernel"
        binding = f"kernel: {lanes} lanes x {cus} CU x {clock:g} MHz"
    if not fits:
        binding = f"capacity ({binding})"
    notes: list[str] = []
    used = sum(len(a.loads) for a in assignments)
    if target.memory.channels % cus:
        notes.append(f"{target.memory.channels % cus} memory channel(s) left unused by {cus} compute units")
    if grad_source == "stream":
        notes.append("gradients arrive on the AXI4-Stream network path; no gradient buffer in card memory")
    if not target.has_xrt_flow:
        notes.append(f"{target.name}: {target.flow_note}")
    keeps_up = achieved >= demand * (1 - 1e-9)
    shard_n = shard or 0
    network = None
    if rail:
        network = _network_plan(target, ring_ports, payload_bytes, window_packets, grad_dtype, ob, demand,
                                streams, ring_loads, gb, mem_cu * cus, notes)
    report = SizingReport(
        target=target.key,
        target_name=target.name,
        params=params or 0,
        cards=cards,
        shard_params=shard_n,
        grad_dtype=grad_dtype,
        out_dtype=out_dtype,
        grad_source=grad_source,
        lanes=lanes,
        compute_units=cus,
        clock_mhz=clock,
        stripes=counts,
        state_bytes_per_param=STATE_BYTES,
        moved_bytes_per_param=gb + 24 + ob,
        shard_state_bytes=shard_n * STATE_BYTES,
        max_params_per_card=int(max_params),
        line_rate_gbps=target.line_rate_gbps,
        line_rate_params_per_s=line_params,
        demand_params_per_s=demand,
        memory_params_per_s=mem_rate,
        memory_efficiency=target.memory_efficiency,
        channel_usable_bytes_per_s=usable,
        channel_capacity_bytes=target.memory.channel_capacity_bytes,
        kernel_params_per_s=kernel_rate,
        achieved_params_per_s=achieved,
        elements_per_clock_needed=per_clock,
        elements_per_clock_predicted=cu_rate / (clock * 1e6),
        lanes_needed=lanes_needed,
        compute_units_needed=cus_needed,
        bottleneck=bottleneck,
        binding=binding,
        channels_used=used,
        fits=fits,
        keeps_up=keeps_up,
        cards_needed=math.ceil(params / max_params) if params and max_params else cards,
        step_time_s=shard_n / achieved,
        assignments=assignments,
        alternatives=[],
        notes=notes,
        network=network,
    )
    if _alternatives and not (keeps_up and fits):
        ring = {} if not rail else {"placement": placement, "payload_bytes": payload_bytes,
                                    "ring_ports": ring_ports, "window_packets": window_packets}
        report.alternatives = _what_would(target, report, optimizer, rate, ring)
    return report


def _network_plan(target: Target, ring_ports: int, payload: int, window: int, grad_dtype: str, ob: int,
                  demand: float, streams: list[NetStream], ring_loads: list[ChannelLoad], gb: int,
                  mem_rate: float, notes: list[str]) -> NetworkPlan:
    wire = DTYPE_BYTES[grad_dtype]
    goodput = ring_ports * net_goodput_bytes_per_s(target.line_rate_gbps, payload)
    bufs, memory = _window_buffers(target, ring_ports, window, payload)
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
    )


def _what_would(target: Target, r: SizingReport, optimizer: str, rate: float | None,
                ring: dict[str, object]) -> list[str]:
    """Plans that would keep up (and fit), each sized the same way: more CUs, 16-bit data, more cards."""
    tries: list[tuple[str, dict[str, object]]] = []
    if r.compute_units < target.memory.channels:
        tries.append((f"{r.compute_units * 2} compute units", {"compute_units": r.compute_units * 2}))
    if r.lanes < MAX_LANES:
        tries.append((f"{MAX_LANES} lanes", {"lanes": MAX_LANES}))
    if r.out_dtype == "fp32":
        tries.append(("bf16 output", {"out_dtype": "bf16"}))
    if r.grad_source == "memory":
        tries.append(("gradients from the network stream", {"grad_source": "stream"}))
    out = []
    base = {"grad_dtype": r.grad_dtype, "out_dtype": r.out_dtype, "grad_source": r.grad_source, "lanes": r.lanes,
            "compute_units": r.compute_units, "clock_mhz": r.clock_mhz}
    for label, change in tries:
        kw = {**base, **change}
        try:
            alt = size(target, r.params or None, cards=r.cards, optimizer=optimizer, rate=rate,
                       _alternatives=False, **kw, **ring)  # type: ignore[arg-type]
        except UserError:
            continue
        if alt.keeps_up and alt.fits:
            out.append(f"{label}: {alt.achieved_params_per_s / 1e9:.2f} G elements/s, "
                       f"holds {alt.max_params_per_card / 1e9:.2f} G params, {alt.stripes.state} state stripes")
    if r.params and not r.fits:
        out.append(f"{r.cards_needed} cards: the shard of each then fits")
    if not r.keeps_up:
        share = math.ceil(r.demand_params_per_s / r.achieved_params_per_s)
        out.append(f"{share} cards per network port: each card updates 1/{share} of the stream")
    return out


def size_spec(spec: KernelSpec, target: Target, params: int | None = None) -> SizingReport:
    """Sizing for an exact spec (lanes, CUs, stripes and rate as the spec says)."""
    return size(
        target,
        params,
        grad_dtype=spec.grad_dtype,
        out_dtype=spec.out_dtype,
        grad_source=spec.grad_source,
        lanes=spec.lanes,
        compute_units=spec.compute_units,
        clock_mhz=spec.clock_mhz,
        optimizer=spec.optimizer,
        stripes=spec.stripes,
        rate=spec.rate_gps * 1e9 if spec.rate_gps is not None else None,
    )


def stripe_counts(spec: KernelSpec, target: Target) -> StripeCounts:
    """The stripes `spec`'s kernel has on `target`: what the register map and the driver follow."""
    return size_spec(spec, target).stripes
