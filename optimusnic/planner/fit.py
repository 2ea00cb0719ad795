"""Whether a scheme fits: memory per GPU, host memory (ZeRO-Offload), parameters per card (OptimusNIC)."""

from __future__ import annotations

import math

from optimusnic.planner.context import Context
from optimusnic.planner.costs import STATE_BYTES, activation_bytes, gpu_memory_bytes, logits_bytes
from optimusnic.planner.schemes import OPTIMUSNIC


def scheme_memory(c: Context, key: str, n: int, micro_batch: float, seq: int) -> dict[str, float]:
    mem = gpu_memory_bytes(key, c.params, n, c.a.nic_grads, ranks_per_node=min(n, c.g), grad_bytes=c.gb)
    m = c.model
    if m is not None and m.has_shape:
        mem["activations"] = activation_bytes(m.layers, m.hidden, m.heads, seq, micro_batch, c.a.recompute)
        mem["logits"] = logits_bytes(m.vocab, seq, micro_batch) if m.vocab else 0.0
    else:
        mem["activations"] = mem["logits"] = 0.0
    mem["total"] = sum(mem.values())
    return mem


def host_bytes(c: Context, n: int) -> float:
    g = min(n, c.g)
    return g * (STATE_BYTES + c.gb) * c.params / n


def cards_in_use(c: Context, n: int) -> int:
    """Cards in use on `n` GPUs at this plan's cards per node."""
    return max(1, math.ceil(n * c.nic.cards_per_node / c.g))


def misfit(c: Context, key: str, n: int, mem: dict[str, float]) -> list[str]:
    why = []
    if mem["total"] > c.gpu.memory_bytes:
        why.append(f"needs {mem['total'] / 1e9:.1f} GB per GPU > {c.gpu.memory_bytes / 1e9:.0f} GB")
    if key == "offload":
        host = host_bytes(c, n)
        if host > c.cluster.host_memory_bytes:
            why.append(f"needs {host / 1e12:.2f} TB host memory per node > {c.cluster.host_memory_bytes / 1e12:.1f} TB")
    if key in OPTIMUSNIC:
        cards = cards_in_use(c, n)
        card_params = math.ceil(c.params / cards)
        if card_params > c.nic.max_params_per_card:
            why.append(f"{card_params / 1e9:.2f} G params per card > {c.nic.max_params_per_card / 1e9:.2f} G per "
                       f"{c.target.name} ({cards} cards; needs {math.ceil(c.params / c.nic.max_params_per_card)})")
    return why
