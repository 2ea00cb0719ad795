"""The card side of a plan: what one card holds, how fast it updates, and its link (uses `hls.sizing`).

The card's PCIe usable rate comes from the catalog's `pcie` string (Gen3 x16 = 15.75 GB/s raw) x
0.825 = 13.0 GB/s (the brief's ~13 GB/s; AMD's Vitis tutorial "Determine the Maximum Achievable
Throughput" shows `xbutil validate` at 8.5-9.6 GB/s host->card and 12.2 GB/s card->host on an
Alveo, so the default is optimistic for host->card).
Card capacity and rate come from `hls.sizing.size` for the gradient path the driver uses
(`grad_source="memory"` for staged, "stream" for the stream path).

Rail placement: sizing runs with `placement="rail"` (the ring's payload goodput as the demand, the
ring's lgrad and gather streams in the memory plan, window buffers on chip) and the card's wire is
ports x payload goodput = line rate x P / (P + 88) per port (design.md 8.2) -- framing is the only
loss counted: ACK frames and retransmissions are assumed free until measured. Every rail figure is
listed with its status and source (`RailFigure`): none is measured yet (the software-card
simulation's ring benchmark is not in `make bench` yet), so each says "assumed until measured by
`make bench`".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hls.sizing import FRAME_OVERHEAD_BYTES, size
from hls.targets import Target
from optimusnic.planner.assumptions import Assumptions
from optimusnic.planner.costs import GRAD_BUFFERS, PCIE_USABLE_FRACTION, STATE_BYTES, pcie_bytes_per_s

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
    card_pcie_bytes_per_s: float
    card_link_bytes_per_s: float  # min(ports x rate x efficiency, PCIe)
    rtl_efficiency: float
    achieved_params_per_s: float
    keeps_up: bool  # with the gradient arrival rate over the card link
    update_time_s: float
    sizing_fields: list[str]
    sizing: Any = None
    rail: list[RailFigure] | None = None  # rail placement only (sidecar plans stay as they were)


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
    report = size(target, params, cards=cards, grad_dtype=grad_dtype, out_dtype="bf16", grad_source=source, **ring)
    used = ["max_params_per_card", "achieved_params_per_s"]
    achieved = float(report.achieved_params_per_s)
    kernel = getattr(report, "kernel_params_per_s", None)
    if kernel is not None:
        achieved = min(achieved, kernel * a.rtl_efficiency)
        used.append("kernel_params_per_s")
    cap = int(report.max_params_per_card)
    card_params = math.ceil(params / cards)
    raw_pcie = a.card_pcie_bytes_per_s or pcie_bytes_per_s(target.pcie) * PCIE_USABLE_FRACTION
    wire = a.nic_ports * target.line_rate_gbps * 1e9 / 8 * link_efficiency
    if rail:  # the cards' own ring: the payload goodput of its ports (sizing's figure)
        wire = report.network.goodput_bytes_per_s
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
        line_rate_gbps=a.nic_ports * target.line_rate_gbps, card_pcie_bytes_per_s=raw_pcie,
        card_link_bytes_per_s=link, rtl_efficiency=a.rtl_efficiency, achieved_params_per_s=achieved,
        keeps_up=achieved >= link / grad_b, update_time_s=card_params / achieved, sizing_fields=used,
        sizing=report, rail=rail_figures(target, a, report, achieved, raw_pcie) if rail else None)


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
        RailFigure("ring losses beyond framing (ACK frames, retransmissions)", 0.0, "fraction", UNMEASURED,
                   "taken as nil; the software-card simulation will measure them"),
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
        RailFigure("card PCIe usable (local gradient in, parameters out)", pcie, "B/s", "assumed",
                   f"catalog pcie {target.pcie} x {PCIE_USABLE_FRACTION}"
                   if not a.card_pcie_bytes_per_s else "given with --card-pcie-gbs"),
    ]
