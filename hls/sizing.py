"""Sizing: will a shard's optimizer state fit on the card, and will the kernel keep up?

`size()` puts the memory plan (`hls.memory_plan`: the model and its formulas) and, for a card that
is its rank's network rail, the ring's streams and window buffers (`hls.ring_plan`) together into
one `SizingReport`: stripes, channels, rate, capacity, the binding resource, and what would keep up.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from hls.bursts import BurstPlan, burst_plan
from hls.errors import UserError
from hls.memory_plan import (  # noqa: F401  (re-exported: the plan's types are read from here)
    CHUNK_ELEMS,
    STATE_BYTES,
    ChannelLoad,
    CuAssignment,
    SizingError,
    Stripe,
    StripeCounts,
    array_traffic,
    bank_expr,
    channel_loads,
    channel_usable,
    choose_stripes,
    memory_arrays,
    place,
    port_limit,
)
from hls.resources import ResourcePlan, max_ports_per_cu, plan_resources
from hls.ring_plan import (  # noqa: F401  (re-exported: the rail figures are read from here)
    FRAME_OVERHEAD_BYTES,
    MAX_WINDOW_PACKETS,
    PAYLOAD_BYTES,
    PAYLOAD_MAX,
    PAYLOAD_MIN,
    PLACEMENTS,
    WINDOW_PACKETS,
    NetStream,
    NetworkPlan,
    WindowBuffer,
    annotate_rail,
    check_payload_bytes,
    check_rail,
    net_goodput_bytes_per_s,
    network_plan,
    rail_cu_limit,
    ring_stream_stripes,
    ring_streams,
)
from hls.spec import DTYPE_BYTES, MAX_COMPUTE_UNITS, MAX_LANES, KernelSpec
from hls.targets import Target


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
    memory_efficiency: float  # read-only and write-only channels
    memory_mixed_efficiency: float  # channels that carry reads and writes together (state stripes)
    channel_usable_bytes_per_s: float
    channel_mixed_usable_bytes_per_s: float
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
    resources: ResourcePlan | None = None  # ports, per-SLR use, CU placement, SLR crossings
    bursts: BurstPlan | None = None  # outstanding bursts of every port (HLS pragmas, RTL read FIFO)

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
    check_rail(target, placement, payload_bytes, ring_ports, window_packets)
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
    if compute_units is None:  # sizing chooses: the widest plan that the memory and the budgets allow
        cus = min(cus_needed, target.memory.channels, MAX_COMPUTE_UNITS)
    else:
        cus = compute_units
    if cus > target.memory.channels:
        raise SizingError(f"{cus} compute units exceed the {target.memory.channels} memory channels")
    shard = math.ceil(params / cards) if params is not None else None
    bursts = burst_plan(clock)
    # The ring engine's lgrad and gather stripes are m_axi ports on card memory too.
    ring_ports_extra = 2 * ring_stream_stripes(target, DTYPE_BYTES[grad_dtype], demand) if rail else 0
    while True:
        # The spec validates dtypes, lanes, CUs, stripes and clock: the one place that knows them.
        spec = KernelSpec(target=target.key, optimizer=optimizer, grad_dtype=grad_dtype, out_dtype=out_dtype,
                          grad_source=grad_source, lanes=lanes, compute_units=cus, clock_mhz=clock_mhz,
                          stripes=stripes)
        per_cu = target.memory.channels // cus
        kernel_cu = lanes * clock * 1e6
        cu_demand = min(demand / cus, kernel_cu)
        counts = choose_stripes(target, spec, cu_demand, clock, math.ceil(shard / cus) if shard else None,
                                max_ports_per_cu(target, cus, ring_ports_extra))
        if 3 * counts.state + counts.grad + counts.out > per_cu and stripes is not None and target.memory.is_hbm:
            raise SizingError(
                f"stripes: {stripes} state stripes x 3 arrays + {counts.grad + counts.out} staging stripes need "
                f"{3 * stripes + counts.grad + counts.out} channels; {target.name} has {per_cu} per compute unit"
            )
        assignments = [place(target, cu, per_cu, counts, spec) for cu in range(cus)]
        resources = plan_resources(target, spec, counts, assignments, bursts, ring_ports_extra)
        # Sizing's own choices give way to the budgets: fewer state stripes, then fewer CUs.
        while not resources.fits and stripes is None and counts.state > 1:
            counts = StripeCounts(grad=counts.grad, state=counts.state - 1, out=counts.out)
            assignments = [place(target, cu, per_cu, counts, spec) for cu in range(cus)]
            resources = plan_resources(target, spec, counts, assignments, bursts, ring_ports_extra)
        if resources.fits or compute_units is not None or cus == 1:
            break
        cus -= 1
    if not resources.fits:
        raise SizingError(str(resources.overrun))
    for a, slr in zip(assignments, resources.cu_slr, strict=True):
        a.slr = slr
    gb = DTYPE_BYTES[grad_dtype] if grad_source == "memory" else 0
    ob = DTYPE_BYTES[out_dtype]
    usable = channel_usable(target)
    a0 = assignments[0]
    # Memory-bound rate of one CU: the busiest channel, or one port's beat per clock.
    chan_loads = channel_loads(target, a0, 1.0)
    mem_cu = min(c.usable_bytes_per_s / c.load_bytes_per_elem for c in chan_loads)
    port_cu = port_limit(clock) * counts.state / 4
    if counts.grad:
        port_cu = min(port_cu, port_limit(clock) * counts.grad / gb)
    port_cu = min(port_cu, port_limit(clock) * counts.out / ob)
    mem_cu = min(mem_cu, port_cu)
    streams: list[NetStream] = []
    kernel_mem_cu = mem_cu
    if rail:
        streams = ring_streams(target, assignments, DTYPE_BYTES[grad_dtype], ob, demand)
        mem_cu = min(mem_cu, rail_cu_limit(target, a0, streams, cus))
    cu_rate = min(mem_cu, kernel_cu)
    # Channel use at the rate the CU runs when fed at the demand (what headroom is left).
    for a in assignments:
        a.loads = channel_loads(target, a, min(cu_rate, cu_demand))
    ring_loads = annotate_rail(target, assignments, streams, cus, min(cu_rate, cu_demand)) if rail else []
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
                   f"{busiest.usable_bytes_per_s / 1e9:.2f} GB/s usable" if mem_cu < port_cu else
                   f"memory: one 512-bit port per direction at {clock:g} MHz")
        if rail and mem_cu < kernel_mem_cu:
            binding = (f"memory with the ring streams: channel {busiest.bank or busiest.channel} "
                       f"({', '.join(busiest.stripes)}) at {busiest.usable_bytes_per_s / 1e9:.2f} GB/s usable")
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
        network = network_plan(target, ring_ports, payload_bytes, window_packets, grad_dtype, ob, demand,
                                streams, ring_loads, gb, mem_cu * cus, notes, shard=shard)
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
        memory_mixed_efficiency=target.efficiency_mixed,
        channel_usable_bytes_per_s=usable,
        channel_mixed_usable_bytes_per_s=channel_usable(target, mixed=True),
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
        resources=resources,
        bursts=bursts,
    )
    if _alternatives and not (keeps_up and fits):
        ring = {} if not rail else {"placement": placement, "payload_bytes": payload_bytes,
                                    "ring_ports": ring_ports, "window_packets": window_packets}
        report.alternatives = _what_would(target, report, optimizer, rate, ring)
    return report


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


def size_rail(spec: KernelSpec, target: Target, payload_bytes: int = PAYLOAD_BYTES) -> SizingReport:
    """Sizing for an exact spec on a card that runs the ring (`placement="rail"` at `payload_bytes`): its
    `network` plan places the ring's lgrad and gather stripes beside the kernel's."""
    return size(
        target, None, grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype, grad_source=spec.grad_source,
        lanes=spec.lanes, compute_units=spec.compute_units, clock_mhz=spec.clock_mhz, optimizer=spec.optimizer,
        stripes=spec.stripes, rate=spec.rate_gps * 1e9 if spec.rate_gps is not None else None, placement="rail",
        payload_bytes=payload_bytes,
    )


def stripe_counts(spec: KernelSpec, target: Target) -> StripeCounts:
    """The stripes `spec`'s kernel has on `target`: what the register map and the driver follow."""
    return size_spec(spec, target).stripes
