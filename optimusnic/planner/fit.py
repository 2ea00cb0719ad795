"""Whether a scheme fits: memory per GPU, host memory (ZeRO-Offload), parameters per card (OptimusNIC)."""

from __future__ import annotations

import math

from optimusnic.planner.context import Context
from optimusnic.planner.costs import (
    FSDP_SCHEMES,
    STATE_BYTES,
    activation_bytes,
    fsdp_buffer_bytes,
    gpu_memory_bytes,
    layer_params,
    logits_bytes,
)
from optimusnic.planner.schemes import OPTIMUSNIC


def scheme_memory(c: Context, key: str, n: int, micro_batch: float, seq: int) -> dict[str, float]:
    mem = gpu_memory_bytes(key, c.params, n, c.a.nic_grads, ranks_per_node=min(n, c.g), grad_bytes=c.gb,
                           fsdp_param_bytes=4 if c.a.param_dtype == "fp32" else 2)
    if c.a.nic_placement == "rail":
        mem["buffers"] = 0.0  # the rail card runs the reduce-scatter itself: no ShardedNicOptimizer bucket
    m = c.model
    if m is not None and m.has_shape:
        if key in FSDP_SCHEMES and n > 1:
            mem["buffers"] += fsdp_buffer_bytes(layer_params(c.params, m), m.layers, c.gb)
        mem["activations"] = activation_bytes(m.layers, m.hidden, m.heads, seq, micro_batch, c.a.recompute,
                                              c.a.attention)
        mem["logits"] = logits_bytes(m.vocab, seq, micro_batch) if m.vocab else 0.0
    else:
        mem["activations"] = mem["logits"] = 0.0
    mem["total"] = sum(mem.values())
    return mem


def host_bytes(c: Context, n: int) -> float:
    g = min(n, c.g)
    return g * (STATE_BYTES + c.gb) * c.params / n


def cards_in_use(c: Context, n: int, slots: bool = False) -> int:
    """Cards in use on `n` GPUs at this plan's cards per node (with `slots`, no more per node than
    the node's PCIe slots for cards)."""
    k = min(c.nic.cards_per_node, c.nic.pcie_slots) if slots else c.nic.cards_per_node
    return max(0, math.ceil(n * k / c.g)) if slots else max(1, math.ceil(n * k / c.g))


def card_misfit(c: Context, n: int, *, slots: bool = False, capacity: int | None = None) -> str:
    """Why the cards on `n` GPUs do not hold the state ('' when they do)."""
    cards = cards_in_use(c, n, slots)
    cap = capacity or c.nic.max_params_per_card
    if cards == 0:
        return f"no PCIe slot for a card ({c.nic.pcie_slots} per node)"
    card_params = math.ceil(c.params / cards)
    if card_params > cap:
        return (f"{card_params / 1e9:.2f} G params per card > {cap / 1e9:.2f} G per {c.target.name} ({cards} cards; "
                f"needs {math.ceil(c.params / cap)})")
    return ""


def misfit(c: Context, key: str, n: int, mem: dict[str, float], *, slots: bool = False,
           capacity: int | None = None) -> list[str]:
    why = []
    if mem["total"] > c.gpu.memory_bytes:
        why.append(f"needs {mem['total'] / 1e9:.1f} GB per GPU > {c.gpu.memory_bytes / 1e9:.0f} GB")
    if key == "offload":
        host = host_bytes(c, n)
        if host > c.cluster.host_memory_bytes:
            why.append(f"needs {host / 1e12:.2f} TB host memory per node > {c.cluster.host_memory_bytes / 1e12:.1f} TB")
    if key in OPTIMUSNIC:
        card = card_misfit(c, n, slots=slots, capacity=capacity)
        if card:
            why.append(card)
    return why
