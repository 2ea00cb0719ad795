"""A plan's inputs resolved once: node layout, link efficiency, the cards, the rails of both views."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hls.targets import Target
from optimusnic.planner.assumptions import Assumptions, positive_int
from optimusnic.planner.card import NicSide, nic_side
from optimusnic.planner.costs import GRAD_BUFFERS, PCIE_USABLE_FRACTION, link_efficiency_at, parse_link_efficiency
from optimusnic.planner.errors import PlanError
from optimusnic.planner.presets import ClusterPreset, GpuPreset, ModelPreset


@dataclass
class Context:
    """Everything resolved once per plan; the timing and memory helpers read it."""

    params: int
    n: int
    nodes: int
    g: int
    gpu: GpuPreset
    cluster: ClusterPreset
    target: Target
    model: ModelPreset | None
    a: Assumptions
    nic: NicSide
    eff: float
    nvlink: float
    gpu_pcie: float
    rails: dict[str, float]  # view -> per-GPU rail of the baselines
    card_rail: float  # per-GPU share of the cards' links

    @property
    def gb(self) -> int:
        return GRAD_BUFFERS[self.a.grad_buffer]


def layout(n: int, nodes: int | None, cluster: ClusterPreset) -> tuple[int, int]:
    if nodes is None:
        per_node = min(n, cluster.gpus_per_node)
        nodes = math.ceil(n / per_node)
    else:
        nodes = positive_int("nodes", nodes)
        if n % nodes:
            raise PlanError(f"{n} GPUs do not split evenly over {nodes} nodes")
        per_node = n // nodes
        if per_node > cluster.gpus_per_node:
            raise PlanError(f"{per_node} GPUs per node; a {cluster.name} node has {cluster.gpus_per_node}")
    if n % per_node:
        raise PlanError(f"{n} GPUs do not fill whole {cluster.name} nodes of {cluster.gpus_per_node}; give --nodes")
    return nodes, per_node


def make_context(params: int, n: int, gpu: GpuPreset, target: Target, cluster: ClusterPreset, nodes: int, per_node: int,
             model: ModelPreset | None, a: Assumptions) -> Context:
    eff = link_efficiency_at(parse_link_efficiency(a.link_efficiency), nodes)
    slots = a.pcie_slots if a.pcie_slots is not None else cluster.card_slots
    k = a.cards_per_node or per_node
    if k > per_node and k % per_node or k < per_node and per_node % k:
        raise PlanError(f"cards-per-node: {k} must divide or be a multiple of the {per_node} GPUs per node")
    nic = nic_side(target, params, nodes, per_node, a, eff, slots)
    cluster_rail = (a.rail_gbps or cluster.nic_gbps_per_gpu) * 1e9 / 8 * eff
    same_links = k * a.nic_ports * target.line_rate_gbps * 1e9 / 8 * eff / per_node
    return Context(params=params, n=n, nodes=nodes, g=per_node, gpu=gpu, cluster=cluster, target=target, model=model,
                a=a, nic=nic, eff=eff, nvlink=gpu.nvlink_bytes_per_s * eff,
                gpu_pcie=gpu.pcie_bytes_per_s * PCIE_USABLE_FRACTION,
                rails={"iso-hardware": cluster_rail, "iso-network": same_links},
                card_rail=k * nic.card_link_bytes_per_s / per_node)
