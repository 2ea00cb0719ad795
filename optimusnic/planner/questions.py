"""The questions planners are asked: fewest GPUs, largest micro-batch and sequence, tokens that hide
the collectives, cards needed, and for which GPU counts the memory the cards free matters."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from optimusnic.planner.assumptions import VIEWS
from optimusnic.planner.context import Context
from optimusnic.planner.costs import STATE_BYTES, activation_bytes, freed_bytes_per_param, logits_bytes
from optimusnic.planner.fit import cards_in_use, misfit, scheme_memory
from optimusnic.planner.schemes import OPTIMUSNIC, SCHEMES, phases
from optimusnic.planner.step import compute_time, exposed


def gpu_counts(gpus_per_node: int, limit: int = 1 << 16) -> list[int]:
    """GPU counts a cluster is used in: powers of two inside a node, then whole nodes."""
    small = [k for k in (1, 2, 4, 8, 16, 32) if k < gpus_per_node]
    return small + list(range(gpus_per_node, limit + 1, gpus_per_node))


FEWEST_LIMIT = 1 << 16  # GPUs: the fewest-GPUs search stops here and answers "> limit"


def _fits_at(c: Context, key: str, n: int, micro_batch: float, seq: int, *, inverse: bool = False) -> bool:
    # The inverse query honours the PCIe slots and may use either card plan (the most a card holds).
    kw = {"slots": True, "capacity": c.nic.max_params_any_plan} if inverse else {}
    return not misfit(c, key, n, scheme_memory(c, key, n, micro_batch, seq), **kw)


def _fewest_nodes(fits: Callable[[int], bool], limit: int) -> int | None:
    """Fewest nodes k in 1..limit with fits(k), fits monotone in k (memory per GPU falls, cards grow)."""
    if not fits(limit):
        return None
    lo, hi = 0, 1
    while not fits(hi):
        lo, hi = hi, min(2 * hi, limit)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _largest(fits: Callable[[int], bool], limit: int) -> int:
    """Largest k in 1..limit with fits(k), assuming fits is monotone (0 when even 1 does not fit)."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _hide_tokens(c: Context, key: str, view: str, limit: float = 1e8) -> float | None:
    """Fewest tokens per micro-batch (at this seq) at which the collectives no longer show."""
    ph = phases(c, key, view)  # link times do not depend on the tokens

    def shown(tokens: float) -> float:
        comp = compute_time(c, tokens)
        return exposed(ph, c.a, comp.fwd_s, comp.bwd_s)[1]

    if shown(limit) > 1e-12:
        return None
    lo, hi = 0.0, limit
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if shown(mid) > 1e-12 else (lo, mid)
    return hi


def answer_questions(c: Context) -> dict[str, Any]:
    """Fewest GPUs, largest micro-batch and sequence, tokens that hide communication, cards, freed memory."""
    a = c.a
    fewest = {}
    node_limit = FEWEST_LIMIT // c.cluster.gpus_per_node
    per_node = c.cluster.gpus_per_node  # whole nodes of the cluster
    for key in SCHEMES:
        k = _fewest_nodes(lambda nodes, key=key: _fits_at(c, key, nodes * per_node, a.micro_batch, a.seq,
                                                          inverse=True), node_limit)
        n = None if k is None else k * per_node
        entry: dict[str, Any] = {"gpus": n, "nodes": k, "limit": node_limit * per_node}
        if key in OPTIMUSNIC and n is not None:
            entry["cards"] = cards_in_use(c, n, slots=True)
        fewest[key] = entry
    max_batch = {k: _largest(lambda mb, k=k: _fits_at(c, k, c.n, mb, a.seq), 1 << 16) for k in SCHEMES}
    # (the per-N answers use this plan's cards as placed)
    max_seq = {k: _largest(lambda s, k=k: _fits_at(c, k, c.n, a.micro_batch, s), 1 << 24) for k in SCHEMES}
    hide = {view: {k: _hide_tokens(c, k, view) for k in SCHEMES} for view in VIEWS}
    # Freed memory: OptimusNIC moves 12P/N bytes per GPU off the GPU (compared with ZeRO-1/2 at the same N).
    nic = c.nic
    per_gpu_capacity = nic.max_params_per_card * nic.cards_per_node / c.g  # params whose state a GPU's cards hold
    m = c.model
    if a.freed_threshold_bytes:
        threshold, basis = a.freed_threshold_bytes, "given with --freed-threshold-gb"
    elif m is not None and m.has_shape:
        threshold = (activation_bytes(m.layers, m.hidden, m.heads, a.seq, 1, a.recompute, a.attention)
                     + logits_bytes(m.vocab, a.seq, 1))
        basis = f"one more sequence of {a.seq} tokens (activations + logits)"
    else:
        threshold, basis = 0.05 * c.gpu.memory_bytes, "5% of GPU memory"
    # FSDP2 + NicAdamW (the README's recipe): with param_dtype fp32 FSDP2 keeps the fp32 shard on the GPU,
    # so the card frees Adam's m and v (8 bytes per parameter); with bf16 parameters all 12.
    freed_b = freed_bytes_per_param(a)
    n_lo = math.ceil(c.params / per_gpu_capacity)
    n_hi = math.floor(freed_b * c.params / threshold)
    return {
        "fewest_gpus": fewest,
        "max_micro_batch": max_batch,
        "max_seq": max_seq,
        "hide_tokens_per_micro_batch": hide,
        "cards": {"cards_per_gpu_needed": nic.cards_per_gpu_needed, "cards_per_node_needed": nic.cards_per_node_needed,
                  "cards_per_node": nic.cards_per_node, "pcie_slots": nic.pcie_slots, "slots_ok": nic.slots_ok},
        "freed": {"freed_bytes_per_gpu": freed_b * c.params / c.n, "freed_bytes_per_param": freed_b,
                  "card_state_capacity_bytes_per_gpu": STATE_BYTES * per_gpu_capacity,
                  "threshold_bytes": threshold, "threshold_basis": basis,
                  "gpus_min": n_lo, "gpus_max": n_hi if n_hi >= n_lo else None},
    }
