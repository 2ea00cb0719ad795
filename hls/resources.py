"""The resource budget of a plan: memory ports, and block RAM, DSP, LUT, FF, URAM per SLR.

Sizing (`hls.sizing.size`) asks `plan_resources` whether a memory plan can be built; a plan that
exceeds a budget is refused with one line naming the binding resource, or narrowed when sizing
chose it. Every figure comes from the catalog (`hls/targets/catalog.json`, each with its source):

  memory ports   HBM cards: every kernel m_axi port mapped to HBM takes one of the HBM AXI
                 interfaces (`memory.axi_ports`: 32 on U50/U55C/U280, UG1393); DDR cards: at most
                 `memory.ports_per_channel` kernel ports on one bank (15, UG1393).
  per CU         lanes x lane + ports x adapter. A lane is the update's fp32 operators: for the HLS
                 kernel AMD's floating-point cores (`kernel_costs.hls_fp32`, assumed figures), for
                 the RTL kernel the yosys estimate of onic_adam_lane (`kernel_costs.rtl_lane`,
                 measured), and the RTL kernel's control and datapath plumbing once per CU
                 (`rtl_cu`, measured). An adapter buffers outstanding x burst beats of 512 bits per direction
                 (UG1399), in block RAM by `fifo_bram36` (UG573 shapes), plus its control logic
                 (`hls_port` assumed, `rtl_port` measured). The budget takes, per resource, the
                 larger of the two kernels: generate writes both, either may be built.
  per SLR        resources x usable_fraction / slrs (an even split, assumed). A CU sits in one SLR
                 (its `slr=` line in link.cfg): the SLR its memory attaches to while there is room
                 (HBM: `memory.slr`; DDR: the bank of its first p stripe), else the nearest with room.
  crossings      a port whose CU sits k SLRs away from its memory crosses k SLR boundaries; the
                 report counts port-boundaries (no SLL budget is modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hls.bursts import BurstPlan
from hls.ports import ARRAYS, STATE_ARRAYS
from hls.spec import BEAT_BITS, KernelSpec
from hls.targets import Target, kernel_costs

RESOURCES = ("lut", "ff", "dsp", "bram36", "uram")
# Simple-dual-port block RAM shapes (depth, width, BRAM36 each): RAMB36E2 and RAMB18E2 (UG573).
BRAM_SHAPES = ((512, 72, 1.0), (1024, 36, 1.0), (2048, 18, 1.0), (4096, 9, 1.0),
               (512, 36, 0.5), (1024, 18, 0.5), (2048, 9, 0.5))
# fp32 operators of one update lane (design.md section 3; onic_adam_lane's header lists them).
LANE_OPS = {"adamw": {"mul": 9, "add": 4, "div": 1, "sqrt": 1},
            "adam": {"mul": 9, "add": 5, "div": 1, "sqrt": 1}}


def fifo_bram36(depth: int, width: int = BEAT_BITS) -> float:
    """BRAM36 tiles of a `depth` x `width` FIFO: the cheapest block RAM shape that holds it."""
    if depth < 1 or width < 1:
        raise ValueError(f"fifo_bram36: depth {depth}, width {width}")
    return min(math.ceil(depth / d) * math.ceil(width / w) * c for d, w, c in BRAM_SHAPES)


def port_directions(spec: KernelSpec, counts: Any) -> tuple[int, int]:
    """(read ports, write ports) of one CU: a state stripe has one of each, grad reads, out writes."""
    reads = writes = 0
    for array in ARRAYS:
        n = counts.of(array)
        if array == "grad" and spec.grad_source == "stream":
            continue
        if array in STATE_ARRAYS:
            reads, writes = reads + n, writes + n
        elif array == "grad":
            reads += n
        else:
            writes += n
    return reads, writes


def _zero() -> dict[str, float]:
    return {r: 0.0 for r in RESOURCES}


def cu_cost(spec: KernelSpec, counts: Any, bursts: BurstPlan, costs: dict[str, Any] | None = None
            ) -> dict[str, dict[str, float]]:
    """One CU's resources: {"hls": ..., "rtl": ..., "budgeted": per-resource max of the two}."""
    costs = costs or kernel_costs()
    reads, writes = port_directions(spec, counts)
    buf = fifo_bram36(bursts.fifo_beats)
    hls = _zero()
    for op, n in LANE_OPS[spec.optimizer].items():
        for r, v in costs["hls_fp32"][op].items():
            hls[r] += spec.lanes * n * v
    for r in ("lut", "ff"):
        hls[r] += (reads + writes) * costs["hls_port"][r]
    hls["bram36"] += (reads + writes) * buf
    rtl = _zero()
    for r, v in costs["rtl_lane"][spec.optimizer].items():
        rtl[r] += spec.lanes * v
    for r in RESOURCES:  # control, merge/split, pack/unpack, the core's FIFOs: once per CU
        rtl[r] += costs.get("rtl_cu", {}).get(r, 0)
    for r in ("lut", "ff"):
        rtl[r] += reads * costs["rtl_port"]["read"][r] + writes * costs["rtl_port"]["write"][r]
    # The read engine's FIFO is the outstanding limit; the write engine holds two bursts.
    rtl["bram36"] += reads * buf + writes * fifo_bram36(2 * bursts.burst_beats)
    budgeted = {r: max(hls[r], rtl[r]) for r in RESOURCES}
    return {"hls": hls, "rtl": rtl, "budgeted": budgeted}


@dataclass
class SlrUse:
    slr: int | None  # None: the device as one pool (no SLRs modelled for this memory)
    cus: list[int]
    used: dict[str, float]
    budget: dict[str, int]
    utilization: dict[str, float]  # used / budget


@dataclass
class ResourcePlan:
    per_cu: dict[str, dict[str, float]]  # hls, rtl, budgeted
    memory_ports: int  # kernel m_axi ports on card memory (all CUs)
    memory_ports_available: int | None  # HBM AXI interfaces; None where not limited in all
    ports_per_channel_max: int  # the most kernel ports on one channel
    ports_per_channel_available: int | None
    slrs: list[SlrUse]
    cu_slr: list[int | None]
    crossings: int  # port x SLR boundary between a CU and its memory
    crossings_per_cu: list[int]
    binding: str  # the resource closest to its budget, with its numbers
    fits: bool
    overrun: str | None  # one line: what exceeds which budget, by how much
    sources: dict[str, str] = field(default_factory=dict)


def slr_budget(target: Target) -> dict[str, int]:
    """Usable resources of one SLR: the device's x usable_fraction / slrs (assumed even split)."""
    out = {}
    for r in RESOURCES:
        total = target.resources.get(r)
        out[r] = int(total * target.usable_fraction / max(1, target.slrs)) if isinstance(total, (int, float)) else 0
    return out


def _fmt(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


def plan_resources(target: Target, spec: KernelSpec, counts: Any, assignments: list[Any], bursts: BurstPlan,
                   extra_ports: int = 0) -> ResourcePlan:
    """Ports, per-SLR use and CU placement of a plan; `fits` False with `overrun` set when it cannot be built."""
    costs = kernel_costs()
    cost = cu_cost(spec, counts, bursts, costs)
    need = cost["budgeted"]
    mem = target.memory
    reads, writes = port_directions(spec, counts)
    ports = (reads + writes) * len(assignments) + extra_ports
    per_chan: dict[int, int] = {}
    for a in assignments:
        for s in a.stripes:
            per_chan[s.channel] = per_chan.get(s.channel, 0) + len(s.ports)
    chan_max = max(per_chan.values(), default=0)
    pooled = mem.slr is None and not mem.bank_slr  # no SLR facts: the device is one pool
    nslr = 1 if pooled else max(1, target.slrs)
    budget = slr_budget(target) if not pooled else {r: int(target.usable(r) or 0) for r in RESOURCES}
    used = [_zero() for _ in range(nslr)]
    placed: list[list[int]] = [[] for _ in range(nslr)]
    cu_slr: list[int | None] = []
    crossings: list[int] = []
    overrun = None
    for a in assignments:
        home = 0 if pooled else (mem.slr if mem.slr is not None else (a.slr or 0))
        order = sorted(range(nslr), key=lambda s: (abs(s - home), s))
        fit = next((s for s in order
                    if all(used[s][r] + need[r] <= budget[r] or not need[r] for r in RESOURCES)), None)
        if fit is None:
            s = home
            r = max((r for r in RESOURCES if need[r]), key=lambda r: (used[s][r] + need[r]) / max(budget[r], 1))
            where = "the device" if pooled else f"any SLR (SLR{s}: {_fmt(used[s][r])} used by earlier CUs)"
            overrun = (f"over budget on {target.name}: {r} for CU {a.cu}: {_fmt(need[r])} per CU "
                       f"({spec.lanes} lanes, {reads + writes} m_axi ports) does not fit {where}, "
                       f"{_fmt(budget[r])} usable per SLR")
            fit = s
        for r in RESOURCES:
            used[fit][r] += need[r]
        placed[fit].append(a.cu)
        cu_slr.append(None if pooled else fit)
        if pooled:
            crossings.append(0)
        elif mem.slr is not None:
            crossings.append(len(a.banks) * abs(fit - mem.slr))
        else:
            assert mem.bank_slr is not None
            crossings.append(sum(len(s.ports) * abs(fit - mem.bank_slr[s.channel]) for s in a.stripes))
    slrs = [SlrUse(slr=None if pooled else s, cus=placed[s], used={r: round(v, 1) for r, v in used[s].items()},
                   budget=budget, utilization={r: (used[s][r] / budget[r] if budget[r] else 0.0) for r in RESOURCES})
            for s in range(nslr)]
    # Ports first: no placement helps when the memory has too few.
    if mem.axi_ports is not None and ports > mem.axi_ports:
        overrun = (f"over budget on {target.name}: memory AXI ports: the plan needs {ports} kernel m_axi ports "
                   f"({len(assignments)} CU x {reads + writes}" + (f" + {extra_ports} ring" if extra_ports else "")
                   + f"), the card has {mem.axi_ports} (UG1393)")
    elif mem.ports_per_channel is not None and chan_max > mem.ports_per_channel:
        overrun = (f"over budget on {target.name}: kernel ports per {mem.bank_prefix} bank: {chan_max} on one, "
                   f"at most {mem.ports_per_channel} (UG1393)")
    shares = [(f"memory AXI ports {ports} of {mem.axi_ports}", ports / mem.axi_ports)] if mem.axi_ports else []
    if mem.ports_per_channel:
        shares.append((f"ports on one bank {chan_max} of {mem.ports_per_channel}", chan_max / mem.ports_per_channel))
    for u in slrs:
        for r in RESOURCES:
            if u.budget[r]:
                where = "device" if u.slr is None else f"SLR{u.slr}"
                shares.append((f"{r} in {where} {_fmt(u.used[r])} of {_fmt(u.budget[r])}", u.utilization[r]))
    binding = max(shares, key=lambda x: x[1])[0] if shares else "none"
    sources = {
        "memory_ports": target.sources.get("memory.axi_ports") or target.sources.get("memory.ports_per_channel", ""),
        "per_slr": target.sources.get("resources.per_slr", ""),
        "m_axi_buffer": costs["m_axi_buffer"]["source"],
        "hls_fp32": costs["hls_fp32"]["source"],
        "hls_port": costs["hls_port"]["source"],
        "rtl_lane": costs["rtl_lane"]["source"],
        "rtl_port": costs["rtl_port"]["source"],
        "rtl_cu": costs.get("rtl_cu", {}).get("source", ""),
    }
    return ResourcePlan(
        per_cu={k: {r: round(v, 1) for r, v in d.items()} for k, d in cost.items()},
        memory_ports=ports, memory_ports_available=mem.axi_ports,
        ports_per_channel_max=chan_max, ports_per_channel_available=mem.ports_per_channel,
        slrs=slrs, cu_slr=cu_slr, crossings=sum(crossings), crossings_per_cu=crossings,
        binding=binding, fits=overrun is None, overrun=overrun, sources=sources,
    )


def max_ports_per_cu(target: Target, cus: int, other_ports: int = 0) -> int | None:
    """The most m_axi ports one of `cus` CUs may have on the card's memory AXI interfaces, beside
    `other_ports` (the ring engine's); None: no limit."""
    ports = target.memory.axi_ports
    return None if ports is None else max(0, ports - other_ports) // cus
