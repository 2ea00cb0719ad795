"""The memory plan of sizing: stripes, ports and channels of a compute unit, and what they carry.

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
  - Usable bandwidth of a channel = its bandwidth x efficiency, shared by every port on it
    (catalog: ~0.9 for an HBM channel only read or only written, measured by AMD with one port
    reading one pseudo-channel; 0.8 assumed for one both read and written, i.e. a state stripe's;
    DDR ~0.8, the U250 0.68, both read-and-write measurements).
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
                     stripes may be raised to hold a given shard (capacity) or fixed by the spec,
                     and sizing keeps its own choice within the memory's AXI ports
                     (hls.resources: 6 S + grad + out per CU)
  capacity         a state stripe holds ceil(n / (16 S)) beats; a channel holds its stripes and
                     the double-buffered staging chunks placed on it; nothing else
Each stripe gets a channel of its own while there are channels; past that (DDR cards) stripes
share channels, balanced by load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hls import layout
from hls.errors import UserError
from hls.ports import ARRAYS, STATE_ARRAYS, port_names
from hls.spec import BEAT_BYTES, MAX_LANES, MAX_STRIPES, KernelSpec
from hls.targets import Target

STATE_BYTES = 12  # fp32 master parameter + two fp32 moments


# Elements per staging chunk: the driver streams a shard through the kernel in chunks of this
# size, double-buffered, so staging stripes hold 2 chunks (never a whole shard).
CHUNK_ELEMS = 1 << 20


class SizingError(UserError):
    """Impossible sizing input (no parameters, no cards, ...)."""


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


def channel_usable(target: Target, mixed: bool = False) -> float:
    """Usable bytes/s of one channel: `mixed` when it carries reads and writes together (a state stripe)."""
    eff = target.efficiency_mixed if mixed else target.memory_efficiency
    return target.memory.channel_bandwidth_bytes_per_s * eff


def cu_ports(spec: KernelSpec, grad: int, state: int, out: int) -> int:
    """m_axi ports of one CU: a read and a write port per state stripe, one per grad and out stripe."""
    return 2 * 3 * state + (grad if spec.grad_source == "memory" else 0) + out


def port_limit(clock_mhz: float) -> float:
    """Bytes/s one 512-bit port moves per direction at the kernel clock."""
    return BEAT_BYTES * clock_mhz * 1e6


def choose_stripes(target: Target, spec: KernelSpec, cu_rate: float, clock_mhz: float,
                   shard_per_cu: int | None = None, max_ports: int | None = None) -> StripeCounts:
    """The fewest stripes per array that carry `cu_rate` elements/s (and hold the shard, if given),
    with at most `max_ports` m_axi ports when sizing chooses them (the memory's AXI port budget)."""
    usable = min(channel_usable(target), 2 * port_limit(clock_mhz))
    mixed = min(channel_usable(target, mixed=True), 2 * port_limit(clock_mhz))
    gb = spec.grad_bytes if spec.grad_source == "memory" else 0

    def need(traffic: int, usable: float = usable) -> int:
        return max(1, math.ceil(traffic * cu_rate / usable - 1e-9)) if traffic else 0

    grad, state, out = need(gb), need(8, mixed), need(spec.out_bytes)
    # A port moves one beat per clock per direction: 4 B/element one way on a state stripe.
    state = max(state, math.ceil(4 * cu_rate / port_limit(clock_mhz) - 1e-9))
    if spec.stripes is not None:
        state = spec.stripes
    elif shard_per_cu:
        state = max(state, math.ceil(4 * shard_per_cu / target.memory.channel_capacity_bytes))
    per_cu = target.memory.channels // spec.compute_units
    if spec.stripes is None:
        # The loop below takes state down one at a time while it exceeds these: start it there (the
        # same answer, in constant time; a shard of 1e15 elements asks for millions of stripes).
        state = min(state, max(1, per_cu, grad, out))
    # Without enough channels (DDR cards) more stripes than channels only add ports: share instead.
    cap = max_ports if max_ports is not None else 1 << 30

    def over() -> bool:
        return 3 * state + grad + out > per_cu or cu_ports(spec, grad, state, out) > cap

    while spec.stripes is None and over() and max(grad, state, out) > 1:
        if state >= max(grad, out) and state > 1:
            state -= 1
        elif grad >= out and grad > 1:
            grad -= 1
        else:
            out -= 1
    return StripeCounts(grad=grad, state=min(state, MAX_STRIPES), out=out)


def place(target: Target, cu: int, per_cu: int, counts: StripeCounts, spec: KernelSpec) -> CuAssignment:
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
    # HBM: the SLR the stacks attach to; DDR: the bank of the first p stripe (hls.resources may move
    # a CU to the nearest SLR with room and counts the crossings).
    slr = mem.slr if mem.is_hbm else (mem.bank_slr[first_p.channel] if mem.bank_slr else None)
    ports = {p: s for s in stripes for p in s.ports}
    return CuAssignment(
        cu=cu, slr=slr,
        banks={p: s.bank for p, s in ports.items()},
        channels={p: [s.channel] for p, s in ports.items()},
        stripes=stripes,
    )


def channel_loads(target: Target, a: CuAssignment, cu_rate: float) -> list[ChannelLoad]:
    by_chan: dict[int, list[Stripe]] = {}
    for s in a.stripes:
        by_chan.setdefault(s.channel, []).append(s)
    out = []
    for chan, ss in sorted(by_chan.items()):
        load = sum(s.traffic_bytes_per_elem for s in ss)
        reads = any(s.array in STATE_ARRAYS or s.array == "grad" for s in ss)
        writes = any(s.array in STATE_ARRAYS or s.array == "out" for s in ss)
        usable = channel_usable(target, mixed=reads and writes)
        out.append(ChannelLoad(
            channel=chan, bank=ss[0].bank, stripes=[f"{s.array}{s.index}" for s in ss],
            load_bytes_per_elem=load, usable_bytes_per_s=usable, utilization=load * cu_rate / usable,
            staging_bytes=sum(s.staging_bytes for s in ss), state_stripes=sum(s.array in STATE_ARRAYS for s in ss),
        ))
    return out
