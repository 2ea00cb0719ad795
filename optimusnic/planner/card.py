"""The card side of a plan: what one card holds, how fast it updates, and its link (uses `hls.sizing`).

The card's PCIe rates, one per direction, are fractions of the raw rate of the catalog's `pcie`
string (Gen3 x16 = 15.75 GB/s raw): host->card 9.0 GB/s (0.571 of raw) and card->host 12.2 GB/s
(0.774), from AMD's Vitis tutorial "Determine the Maximum Achievable Throughput" (`xbutil validate`
on an Alveo: 8.5-9.6 GB/s host->card, the middle taken, and 12.2 GB/s card->host).
Card capacity and rate come from `hls.sizing.size` for the gradient path the driver uses
(`grad_source="memory"` for staged, "stream" for the stream path). Sizing plans for line rate
first (the fewest stripes that carry the demand, with as many CUs as it needs); when that plan does
not hold the shard the planner also asks for the capacity-first plan (one CU, as many state stripes
as the card's channels and memory AXI ports take) and reports both: the rate of the one, the capacity of the other.
`compute_units` and `stripes` pass through to sizing when given.

Rail placement: sizing runs with `placement="rail"` (the ring's payload goodput as the demand, the
ring's lgrad and gather streams in the memory plan, window buffers on chip) and the card's wire is
ports x payload goodput = line rate x P / (P + 88) per port (design.md 8.2) -- framing is the only
loss counted until measured: the ring's loss beyond framing (ACK/NAK frames, retransmissions) is
the software-card benchmark's figure when `make bench` has written it (build/bench/net.json), a
protocol figure that carries over to a card, and nil before. Every rail figure is listed with its
status and source (`RailFigure`): the others say "assumed until measured by `make bench`".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hls.sizing import FRAME_OVERHEAD_BYTES, SizingError, size
from hls.targets import Target
from optimusnic.planner.assumptions import Assumptions
from optimusnic.planner.costs import (
    CARD_C2H_FRACTION,
    CARD_H2C_FRACTION,
    GRAD_BUFFERS,
    STATE_BYTES,
    pcie_bytes_per_s,
)
from optimusnic.planner.errors import PlanError

UNMEASURED = "assumed until measured by `make bench`"


@dataclass
class RailFigure:
    """One figure a rail plan uses, whether it is measured (by the software-card simulation) or assumed."""
    name: str
    value: float
    unit: str
    status: str  # "measured" | UNMEASURED | "assumed"
    source: str


@dataclass
class NicSide:
    target: str
    target_name: str
    placement: str
    grad_path: str
    grad_source: str  # what sizing was asked for: memory (staged) or stream
    cards_per_node: int
    card_params: int  # parameters whose state one card holds
    card_state_bytes: int
    max_params_per_card: int
    fits: bool
    cards_per_gpu_needed: int  # with the shard of one GPU spread over cards
    cards_per_node_needed: int
    pcie_slots: int
    slots_ok: bool
    line_rate_gbps: float  # ports x port rate
    card_pcie_bytes_per_s: float  # host -> card (the gradient's direction)
    card_c2h_bytes_per_s: float  # card -> host (parameters and, with change detection, masters back)
    card_link_bytes_per_s: float  # min(ports x rate x efficiency, PCIe host -> card)
    rtl_efficiency: float
    achieved_params_per_s: float
    keeps_up: bool  # with the gradient arrival rate over the card link
    update_time_s: float
    sizing_fields: list[str]
    sizing: Any = None
    rail: list[RailFigure] | None = None  # rail placement only (sidecar plans stay as they were)
    plan_kind: str = "line-rate"  # line-rate | capacity-first | given (--compute-units / --stripes)
    compute_units: int = 0
    stripes: int = 0  # state stripes per CU
    line_rate_plan: dict[str, float] | None = None  # sizing's plan: capacity, rate (when another is used)
    capacity_plan: dict[str, float] | None = None  # the capacity-first plan, when asked for
    max_params_any_plan: int = 0  # the most a card holds under either plan (for the questions)


def nic_side(target: Target, params: int, nodes: int, gpus_per_node: int, a: Assumptions,
             link_efficiency: float, pcie_slots: int) -> NicSide:
    """The cards: what one holds and how fast it updates, for the gradient path the driver uses.

    Reads only `max_params_per_card`, `achieved_params_per_s` and, when present, to derate the
    kernel by the RTL benchmark's efficiency, `kernel_params_per_s` of `hls.sizing.size`; whether the
    card keeps up is judged here against the card's link (sizing judges one port's line rate).
    """
    k = a.cards_per_node or gpus_per_node
    cards = nodes * k
    grad_dtype = "fp32" if a.grad_buffer == "fp32" else "bf16"
    source = "stream" if a.nic_grad_path == "stream" else "memory"
    rail = a.nic_placement == "rail"
    ring = {"placement": "rail", "payload_bytes": a.nic_payload_bytes, "ring_ports": a.nic_ports} if rail else {}
    kw = {"cards": cards, "grad_dtype": grad_dtype, "out_dtype": "bf16", "grad_source": source, **ring}
    given = a.compute_units is not None or a.stripes is not None
    try:
        report = size(target, params, compute_units=a.compute_units, stripes=a.stripes, **kw)
    except SizingError as exc:
        raise PlanError(str(exc).replace("compute_units", "compute-units")) from None
    kind, line_plan, cap_plan = ("given" if given else "line-rate"), None, None
    best_cap = int(report.max_params_per_card)
    if not given:
        first = capacity_first(target, params, kw)
        if first is not None:
            cap_plan = _summary(first)
            best_cap = max(best_cap, int(first.max_params_per_card))
            if not report.fits and first.max_params_per_card > report.max_params_per_card:
                line_plan, report, kind = _summary(report), first, "capacity-first"
    used = ["max_params_per_card", "achieved_params_per_s"]
    achieved = float(report.achieved_params_per_s)
    kernel = getattr(report, "kernel_params_per_s", None)
    if kernel is not None:
        achieved = min(achieved, kernel * a.rtl_efficiency)
        used.append("kernel_params_per_s")
    cap = int(report.max_params_per_card)
    card_params = math.ceil(params / cards)
    raw = pcie_bytes_per_s(target.pcie)
    raw_pcie = a.card_h2c_bytes_per_s or a.card_pcie_bytes_per_s or raw * CARD_H2C_FRACTION
    c2h = a.card_c2h_bytes_per_s or a.card_pcie_bytes_per_s or raw * CARD_C2H_FRACTION
    wire = a.nic_ports * target.line_rate_gbps * 1e9 / 8 * link_efficiency
    if rail:  # the cards' own ring: the payload goodput of its ports (sizing's figure)
        wire = report.network.goodput_bytes_per_s * (1.0 - a.ring_loss)
        used.append("network")
    link = min(wire, raw_pcie)
    grad_b = GRAD_BUFFERS[a.grad_buffer]
    shard_per_gpu = params / (nodes * gpus_per_node)
    per_node_needed = math.ceil(params / nodes / cap)
    return NicSide(
        target=target.key, target_name=target.name, placement=a.nic_placement, grad_path=a.nic_grad_path,
        grad_source=source, cards_per_node=k, card_params=card_params, card_state_bytes=card_params * STATE_BYTES,
        max_params_per_card=cap, fits=card_params <= cap,
        cards_per_gpu_needed=math.ceil(shard_per_gpu / cap), cards_per_node_needed=per_node_needed,
        pcie_slots=pcie_slots, slots_ok=max(k, per_node_needed) <= pcie_slots,
        line_rate_gbps=a.nic_ports * target.line_rate_gbps, card_pcie_bytes_per_s=raw_pcie, card_c2h_bytes_per_s=c2h,
        card_link_bytes_per_s=link, rtl_efficiency=a.rtl_efficiency, achieved_params_per_s=achieved,
        keeps_up=achieved >= link / grad_b, update_time_s=card_params / achieved, sizing_fields=used,
        sizing=report, rail=rail_figures(target, a, report, achieved, raw_pcie) if rail else None,
        plan_kind=kind, compute_units=int(report.compute_units), stripes=int(report.stripes.state),
        line_rate_plan=line_plan, capacity_plan=cap_plan, max_params_any_plan=best_cap)


def _summary(report: Any) -> dict[str, float]:
    return {"max_params_per_card": int(report.max_params_per_card), "params_per_s": float(report.achieved_params_per_s),
            "compute_units": int(report.compute_units), "state_stripes": int(report.stripes.state)}


def capacity_first(target: Target, params: int, kw: dict[str, Any]) -> Any:
    """Sizing's plan with one CU and as many state stripes as the card's channels and resource budget
    take (the most parameters a card can hold), or None where no such plan exists."""
    stripes = max(1, (target.memory.channels - 2) // 3)  # three state arrays, grad and out staging
    while stripes >= 1:
        try:
            return size(target, params, compute_units=1, stripes=stripes, **kw)
        except SizingError:
            stripes -= 1
    return None


def rail_figures(target: Target, a: Assumptions, report: Any, achieved: float, pcie: float) -> list[RailFigure]:
    """The figures a rail plan rests on, each labelled measured or assumed, with its source."""
    n = report.network
    net_src = target.sources.get("network", "the target catalog")
    lgrad, gather = (next(st for st in n.streams if st.name == k) for k in ("lgrad", "gather"))
    onchip = f"{n.uram} URAM" if n.uram else f"{n.bram36} BRAM36"
    return [
        RailFigure("line rate per port", target.line_rate_gbps, "Gb/s", "assumed",
                   f"catalog {target.key} network ({net_src})"),
        RailFigure("payload goodput, all ring ports", n.goodput_bytes_per_s, "B/s", UNMEASURED,
                   f"{a.nic_ports} port(s) x line rate x {n.payload_bytes}/({n.payload_bytes}+{FRAME_OVERHEAD_BYTES}): "
                   "frame overhead of design.md 8.2 (hls.sizing.net_goodput_bytes_per_s)"),
        RailFigure("ring losses beyond framing (ACK frames, retransmissions)", a.ring_loss, "fraction",
                   "measured" if a.ring_loss_source.startswith("measured") else UNMEASURED,
                   a.ring_loss_source if a.ring_loss_source.startswith("measured") else
                   "taken as nil until `make bench` measures it on the software cards"),
        RailFigure("card update rate with the ring streams", achieved, "params/s", UNMEASURED,
                   f"hls.sizing rail memory plan (design.md 3b; HBM efficiency {target.memory_efficiency:.0%} from the "
                   f"catalog) x RTL efficiency {a.rtl_efficiency:.2f} ({a.rtl_efficiency_source})"),
        RailFigure("local-gradient reads + host DMA writes (lgrad)", lgrad.bytes_per_s, "B/s", UNMEASURED,
                   f"hls.sizing: 2 x goodput, {lgrad.stripes} channel stripe(s), in the reduce-scatter hops"),
        RailFigure("gathered-parameter writes + host DMA reads (gather)", gather.bytes_per_s, "B/s", UNMEASURED,
                   f"hls.sizing: 2 x goodput, {gather.stripes} channel stripe(s), in the all-gather hops"),
        RailFigure("card memory traffic in the update hop", n.update_bytes_per_s, "B/s", UNMEASURED,
                   f"hls.sizing (the kernel alone: {n.sidecar_update_bytes_per_s / 1e9:.2f} GB/s)"),
        RailFigure("window buffers on chip", float(n.uram or n.bram36), onchip.split()[1], UNMEASURED,
                   f"hls.sizing: {len(n.window_buffers)} x {n.window_packets} packets x {n.payload_bytes} B "
                   f"(RS and AG, retransmit and receive, per ring port)"),
        RailFigure("card PCIe usable host -> card (local gradient in)", pcie, "B/s", "assumed",
                   f"catalog pcie {target.pcie} raw x {CARD_H2C_FRACTION:.3f} (AMD xbutil validate figures)"
                   if not a.card_pcie_bytes_per_s else "given with --card-pcie-gbs"),
    ]
