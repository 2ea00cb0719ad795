"""Sizing: will a shard's optimizer state fit on the card, and will the kernel keep up?

Formulas (per parameter of the shard, per step):
  resident on the card   = 12 bytes: fp32 master parameter + fp32 m + fp32 v
                           (gradient and output staging buffers are per chunk, not per shard)
  moved through memory   = grad_bytes (read; 0 when gradients arrive on the network stream)
                           + 12 (read p, m, v) + 12 (write p, m, v) + out_bytes (write)
  line-rate demand       = line_rate_bits / 8 / grad_bytes parameters per second: the reduced
                           gradient shard arrives on one network port at line rate, and the
                           update keeps up if it consumes gradients at least that fast
  memory-bound rate      = min over channel groups of
                           (channels x channel bandwidth x efficiency) / bytes moved in that group
  kernel-bound rate      = lanes x compute units x clock

Channels are assigned per compute unit: on HBM, gradient and output take one pseudo-channel
each and p, m, v split the rest equally (their traffic and size are equal); on DDR with fewer
banks than arguments, arguments share banks round-robin.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from hls.errors import UserError
from hls.spec import DTYPE_BYTES, MAX_LANES, KernelSpec
from hls.targets import Target

STATE_BYTES = 12  # fp32 master parameter + two fp32 moments
STATE_ARGS = ("p", "m", "v")


class SizingError(UserError):
    """Impossible sizing input (no parameters, no cards, ...)."""


def arg_traffic(arg: str, grad_bytes: int, out_bytes: int) -> int:
    """Bytes per parameter per step that `arg` moves through card memory."""
    return {"grad": grad_bytes, "p": 8, "m": 8, "v": 8, "out": out_bytes}[arg]


def memory_args(grad_source: str) -> tuple[str, ...]:
    return ("p", "m", "v", "out") if grad_source == "stream" else ("grad", "p", "m", "v", "out")


@dataclass
class ChannelGroup:
    channels: list[int]
    args: list[str]
    capacity_bytes: int
    bandwidth_bytes_per_s: float  # after the efficiency factor
    resident_bytes_per_param: int
    traffic_bytes_per_param: int


@dataclass
class CuAssignment:
    cu: int
    slr: int | None
    banks: dict[str, str | None]  # arg -> v++ sp= bank expression (None where the flow has no sp=)
    channels: dict[str, list[int]]
    groups: list[ChannelGroup] = field(default_factory=list)


def bank_expr(target: Target, channels: list[int]) -> str | None:
    """The v++ `sp=` memory expression (HBM[0:9], DDR[1]); None for the non-XRT V80 flow."""
    if not target.has_xrt_flow:
        return None
    prefix = target.memory.bank_prefix
    lo, hi = channels[0], channels[-1]
    return f"{prefix}[{lo}]" if lo == hi else f"{prefix}[{lo}:{hi}]"


def assign_channels(target: Target, compute_units: int, grad_source: str) -> list[CuAssignment]:
    mem = target.memory
    args = memory_args(grad_source)
    per_cu = mem.channels // compute_units
    if per_cu < 1:
        raise SizingError(
            f"{compute_units} compute units need at least one memory channel each; "
            f"{target.name} has {mem.channels}"
        )
    result = []
    for cu in range(compute_units):
        base = cu * per_cu
        chans: dict[str, list[int]] = {}
        if per_cu >= len(args):
            small = [a for a in args if a not in STATE_ARGS]
            share = (per_cu - len(small)) // len(STATE_ARGS)
            for i, a in enumerate(STATE_ARGS):
                chans[a] = list(range(base + i * share, base + (i + 1) * share))
            # Channels p, m, v cannot split equally go to the streaming arguments (more bandwidth).
            rest = list(range(base + len(STATE_ARGS) * share, base + per_cu))
            # (contiguous blocks, since a v++ sp= range names consecutive channels)
            start = 0
            for i, a in enumerate(small):
                count = len(rest) // len(small) + (1 if i < len(rest) % len(small) else 0)
                chans[a] = rest[start : start + count]
                start += count
        else:
            # State arguments first, so p, m and v land on different banks when they can.
            ordered = [a for a in STATE_ARGS] + [a for a in args if a not in STATE_ARGS]
            for i, a in enumerate(ordered):
                chans[a] = [base + i % per_cu]
        slr = 0 if mem.is_hbm else (mem.bank_slr[chans["p"][0]] if mem.bank_slr else None)
        result.append(
            CuAssignment(cu=cu, slr=slr, banks={a: bank_expr(target, c) for a, c in chans.items()}, channels=chans)
        )
    return result


def _groups(target: Target, assignment: CuAssignment, grad_bytes: int, out_bytes: int) -> list[ChannelGroup]:
    mem = target.memory
    by_channels: dict[tuple[int, ...], list[str]] = {}
    for arg, chans in assignment.channels.items():
        by_channels.setdefault(tuple(chans), []).append(arg)
    groups = []
    for chans, args in sorted(by_channels.items()):
        groups.append(
            ChannelGroup(
                channels=list(chans),
                args=args,
                capacity_bytes=len(chans) * mem.channel_capacity_bytes,
                bandwidth_bytes_per_s=len(chans) * mem.channel_bandwidth_bytes_per_s * target.memory_efficiency,
                resident_bytes_per_param=4 * sum(a in STATE_ARGS for a in args),
                traffic_bytes_per_param=sum(arg_traffic(a, grad_bytes, out_bytes) for a in args),
            )
        )
    return groups


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
    state_bytes_per_param: int
    moved_bytes_per_param: int
    shard_state_bytes: int
    max_params_per_card: int
    line_rate_gbps: float
    line_rate_params_per_s: float
    memory_params_per_s: float
    memory_efficiency: float
    kernel_params_per_s: float
    achieved_params_per_s: float
    elements_per_clock_needed: float
    lanes_needed: int
    compute_units_needed: int
    bottleneck: str
    fits: bool
    keeps_up: bool
    cards_needed: int
    step_time_s: float
    assignments: list[CuAssignment]
    notes: list[str]

    @property
    def verdict(self) -> str:
        fit = "fits" if self.fits else f"does NOT fit (needs {self.cards_needed} cards)"
        pace = "keeps up with line rate" if self.keeps_up else f"falls behind line rate ({self.bottleneck}-bound)"
        return f"{fit}; {pace}"

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["verdict"] = self.verdict
        return d


def recommend_width(elements_per_clock: float) -> tuple[int, int]:
    """Smallest (lanes, compute units) whose lanes x CUs >= the elements per clock needed."""
    needed = max(1, math.ceil(elements_per_clock - 1e-9))
    if needed <= MAX_LANES:
        return 1 << (needed - 1).bit_length(), 1
    return MAX_LANES, math.ceil(needed / MAX_LANES)


def size(
    target: Target,
    params: int,
    *,
    grad_dtype: str = "fp32",
    out_dtype: str = "fp32",
    grad_source: str = "memory",
    cards: int = 1,
    lanes: int | None = None,
    compute_units: int | None = None,
    clock_mhz: float | None = None,
    optimizer: str = "adamw",
) -> SizingReport:
    """Size a shard of `params / cards` parameters on `target` (lanes/CUs chosen if not given)."""
    if isinstance(params, bool) or not isinstance(params, int) or params < 1:
        raise SizingError(f"params: {params!r} must be a positive integer")
    if isinstance(cards, bool) or not isinstance(cards, int) or cards < 1:
        raise SizingError(f"cards: {cards!r} must be a positive integer")
    # Validate the dtype/lanes choices through the spec, the one place that knows them.
    KernelSpec(target=target.key, grad_dtype=grad_dtype, out_dtype=out_dtype, grad_source=grad_source,
               lanes=lanes or 1, compute_units=compute_units or 1)
    gb = DTYPE_BYTES[grad_dtype] if grad_source == "memory" else 0
    ob = DTYPE_BYTES[out_dtype]
    clock = float(clock_mhz or target.kernel_clock_mhz)
    line_params = target.line_rate_gbps * 1e9 / 8 / DTYPE_BYTES[grad_dtype]
    per_clock = line_params / (clock * 1e6)
    lanes_needed, cus_needed = recommend_width(per_clock)
    lanes = lanes or lanes_needed
    cus = compute_units or cus_needed
    notes: list[str] = []
    if cus > target.memory.channels:
        raise SizingError(f"{cus} compute units exceed the {target.memory.channels} memory channels")

    assignments = assign_channels(target, cus, grad_source)
    per_cu_max = []
    per_cu_rate = []
    for a in assignments:
        a.groups = _groups(target, a, gb, ob)
        per_cu_max.append(min(g.capacity_bytes // g.resident_bytes_per_param for g in a.groups
                              if g.resident_bytes_per_param))
        per_cu_rate.append(min(g.bandwidth_bytes_per_s / g.traffic_bytes_per_param for g in a.groups
                               if g.traffic_bytes_per_param))
    # The driver splits a shard evenly over CUs, so the smallest CU bounds the card.
    max_params = min(per_cu_max) * cus
    mem_rate = min(per_cu_rate) * cus
    kernel_rate = lanes * cus * clock * 1e6
    achieved = min(mem_rate, kernel_rate)
    bottleneck = "memory" if mem_rate < kernel_rate else "kernel"
    shard = math.ceil(params / cards)
    moved = gb + 24 + ob
    if target.memory.channels % cus:
        notes.append(f"{target.memory.channels % cus} memory channel(s) left unused by {cus} compute units")
    if grad_source == "stream":
        notes.append("gradients arrive on the AXI4-Stream network path; no gradient buffer in card memory")
    if not target.has_xrt_flow:
        notes.append(f"{target.name}: {target.flow_note}")
    notes += _synth_notes(target, optimizer, grad_dtype, out_dtype, grad_source, lanes, cus)
    return SizingReport(
        target=target.key,
        target_name=target.name,
        params=params,
        cards=cards,
        shard_params=shard,
        grad_dtype=grad_dtype,
        out_dtype=out_dtype,
        grad_source=grad_source,
        lanes=lanes,
        compute_units=cus,
        clock_mhz=clock,
        state_bytes_per_param=STATE_BYTES,
        moved_bytes_per_param=moved,
        shard_state_bytes=shard * STATE_BYTES,
        max_params_per_card=int(max_params),
        line_rate_gbps=target.line_rate_gbps,
        line_rate_params_per_s=line_params,
        memory_params_per_s=mem_rate,
        memory_efficiency=target.memory_efficiency,
        kernel_params_per_s=kernel_rate,
        achieved_params_per_s=achieved,
        elements_per_clock_needed=per_clock,
        lanes_needed=lanes_needed,
        compute_units_needed=cus_needed,
        bottleneck=bottleneck,
        fits=shard <= max_params,
        keeps_up=achieved >= line_params,
        cards_needed=math.ceil(params / max_params),
        step_time_s=shard / achieved,
        assignments=assignments,
        notes=notes,
    )


def _synth_notes(target: Target, optimizer: str, grad_dtype: str, out_dtype: str, grad_source: str, lanes: int,
                 cus: int) -> list[str]:
    """A warning from cached yosys figures (`optimusnic synth`) when this width cannot fit; never runs yosys."""
    from hls.synth import fit_note  # lazy: hls.synth imports modules that import this one

    if not (1 <= cus <= 16 and 1 <= lanes <= MAX_LANES):
        return []
    spec = KernelSpec(target=target.key, optimizer=optimizer, grad_dtype=grad_dtype, out_dtype=out_dtype,
                      grad_source=grad_source, lanes=lanes, compute_units=cus)
    note = fit_note(spec, target)
    return [note] if note else []


def size_spec(spec: KernelSpec, target: Target, params: int = 1 << 30) -> SizingReport:
    """Sizing for an exact spec (lanes and CUs as the spec says)."""
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
    )
