"""The schemes, one row each: what DDP, ZeRO-1/2/3, HSDP, ZeRO++, ZeRO-Offload and OptimusNIC do in a step.

Collectives per step (the formula is `costs.collective_time`):
  DDP           all-reduce of the G-byte gradients (once, last micro-batch)
  ZeRO-1        reduce-scatter (once) + post-step all-gather of bf16 params; ZeRO-2 reduce-scatters
                every micro-batch; ZeRO-Offload as ZeRO-2 plus the shard's PCIe copies
  ZeRO-3        all-gather before forward and backward and reduce-scatter, every micro-batch
  HSDP          gathers and reduce-scatter inside the node every micro-batch, all-reduce of the
                node's 1/g shard across nodes once
  ZeRO++        qwZ int8 all-gather over all ranks before forward, hpZ bf16 all-gather inside the
                node before backward, qgZ int4 all-to-all inside the node then across nodes on
                1/g of it (Wang et al. 2023, section 3; 3M -> 0.75M across nodes)

Where the card sits (`nic_placement`):
  sidecar  what the driver builds today. `OptimusNIC` is `ShardedNicOptimizer` (model replicated,
           bf16) with overlap=True and async_all_gather=True: each bucket is reduce-scattered from
           the backward pass (every micro-batch with `nic_grads="sharded"`, free_grads as ZeRO-2;
           once, after no_sync() accumulation, with "full", as ZeRO-1) and the all-gather left
           in flight for the next forward; `OptimusNIC+Z3` is FSDP2 +
           `NicAdamW` (FSDP2's own reduce-scatter and gathers hide as ZeRO-3's). The card chain
           (`card_legs`): one host thread copies the gradient GPU -> host -> card, with change
           detection (default) reads the fp32 masters back and the parameters from the GPU, and
           takes the results card -> host -> GPU, leg after leg; the kernel overlaps that thread
           (double-buffered), so the chain shows max(legs, update). `nic_overlap` pipelines the
           legs over threads (not built): the longest stage shows.
  rail     the card is the GPU's network rail: cross-node reduction arrives on the card, which
           updates its shard and starts the all-gather. Per-card link = min(ports x line rate x
           efficiency, card PCIe usable). On one node there is no wire: the shard crosses the card's
           PCIe both ways.
Global-norm clipping (`clip`, on by default) needs the whole gradient norm before any element is
updated, so the card's update never overlaps the reduce-scatter while it is on; with it off and
the stream path (`nic_grad_path="stream"`, rail only) the card updates as the shard arrives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from optimusnic.planner.context import Context
from optimusnic.planner.costs import (
    GPU_ADAM_FIXED_BYTES,
    PARAM_BYTES,
    QGZ_BYTES,
    QWZ_BYTES,
    collective_time,
    ring_all_gather_bytes,
    ring_all_reduce_bytes,
    ring_reduce_scatter_bytes,
)

SCHEMES = ("ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "offload", "optimusnic", "optimusnic_z3")
SCHEME_NAMES = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "hsdp": "HSDP",
    "zeropp": "ZeRO++",
    "offload": "ZeRO-Offload",
    "optimusnic": "OptimusNIC",
    "optimusnic_z3": "OptimusNIC+Z3",
}
OPTIMUSNIC = ("optimusnic", "optimusnic_z3")


@dataclass
class Phases:
    """One scheme's work in a step, by where it can hide (seconds)."""

    comm_bytes: dict[str, float]
    fwd: list[float] = field(default_factory=list)  # gathers before each forward
    bwd_gather: list[float] = field(default_factory=list)  # gathers during each backward
    reduce_each: list[float] = field(default_factory=list)  # reductions of every micro-batch
    reduce_last: list[float] = field(default_factory=list)  # reductions once per step
    post_gather: list[float] = field(default_factory=list)  # after the update, before the next forward
    optimizer: float = 0.0
    transfer: float = 0.0
    optimizer_shown: float = 0.0
    transfer_shown: float = 0.0
    merged_chain: bool = False  # the card's chain runs inside the last reduction


@dataclass
class Leg:
    """One copy of the card chain: what it moves, which way, how long (seconds)."""

    name: str
    seconds: float


def card_legs(c: Context, key: str) -> tuple[list[Leg], float]:
    """The card chain of one step as the driver runs it: the host thread's legs, one after another,
    and the kernel's update seconds (it overlaps the host thread: double-buffered staging slots).

    Sidecar (what `NicAdamW` on FSDP2 and `ShardedNicOptimizer` do in `CardBucket.run` ->
    `ShardState.stream`): per chunk the gradient is copied GPU -> host and host -> card; with change
    detection (the default) the fp32 masters are read back card -> host and the parameters copied
    GPU -> host to be compared; the results come back card -> host and host -> GPU. FSDP2 keeps its
    sharded parameters and gradients in `param_dtype` (fp32 under the README's recipe), so its legs
    move 4 bytes where ShardedNicOptimizer (bf16 model, bucket in the parameters' dtype) moves 2.
    """
    a, nic = c.a, c.nic
    shard, cp = c.params / c.n, nic.card_params
    u = nic.update_time_s
    h2c, c2h = nic.card_pcie_bytes_per_s, nic.card_c2h_bytes_per_s
    if a.nic_placement == "sidecar":
        fsdp = key == "optimusnic_z3"
        grad_b = (4 if a.param_dtype == "fp32" else 2) if fsdp else c.gb
        out_b = (4 if a.param_dtype == "fp32" else 2) if fsdp else PARAM_BYTES
        legs = [Leg("gradient GPU -> host", grad_b * shard / c.gpu_pcie),
                Leg("gradient host -> card", grad_b * cp / h2c)]
        if a.detect_changes:
            legs += [Leg("fp32 masters card -> host (change detection)", 4 * cp / c2h),
                     Leg("parameters GPU -> host (change detection)", out_b * shard / c.gpu_pcie)]
        legs += [Leg("parameters card -> host", out_b * cp / c2h),
                 Leg("parameters host -> GPU", out_b * shard / c.gpu_pcie)]
        return legs, u
    if c.nodes == 1:
        # Rail on one node: no wire; the shard crosses the card's PCIe (peer to peer) both ways.
        return [Leg("gradient GPU -> card", c.gb * cp / h2c), Leg("parameters card -> GPU", PARAM_BYTES * cp / c2h)], u
    return [], u


def card_chain(c: Context, key: str = "optimusnic") -> tuple[list[float], list[float], float]:
    """(copies, all stages in order, update seconds): the legs of `card_legs` as seconds."""
    legs, u = card_legs(c, key)
    copies = [leg.seconds for leg in legs]
    return copies, copies + [u], u


def phases(c: Context, key: str, view: str) -> Phases:
    ph = _scheme_phases(c, key, view)
    if key not in ("offload", *OPTIMUSNIC):
        ph.optimizer_shown = ph.optimizer  # a GPU's optimizer step sits between reduce and gather
    return ph


def _scheme_phases(c: Context, key: str, view: str) -> Phases:
    P, n, g, nodes, gb = c.params, c.n, c.g, c.nodes, c.gb
    rail = c.rails[view]
    grads, params_b = gb * P, PARAM_BYTES * P
    adam_rate = c.gpu.memory_bandwidth_bytes_per_s * c.a.gpu_adam_efficiency / (GPU_ADAM_FIXED_BYTES + gb)

    def world(kind: str, nbytes: float, r: float = rail) -> float:
        return collective_time(kind, nbytes, g, nodes, c.nvlink, r)

    def intra(kind: str, nbytes: float) -> float:
        return collective_time(kind, nbytes, g, 1, c.nvlink, math.inf)

    def inter(kind: str, nbytes: float) -> float:
        return collective_time(kind, nbytes, 1, nodes, c.nvlink, rail)

    rs_v = ring_reduce_scatter_bytes(n, grads)
    ag_v = ring_all_gather_bytes(n, params_b)
    A = c.a.grad_accum
    if key == "ddp":
        return Phases({"all_reduce_grads": ring_all_reduce_bytes(n, grads)},
                       reduce_last=[world("all_reduce", grads)], optimizer=P / adam_rate)
    if key == "zero1":
        return Phases({"reduce_scatter_grads": rs_v, "all_gather_params": ag_v},
                       reduce_last=[world("reduce_scatter", grads)], post_gather=[world("all_gather", params_b)],
                       optimizer=P / n / adam_rate)
    if key == "zero2":
        return Phases({"reduce_scatter_grads": A * rs_v, "all_gather_params": ag_v},
                       reduce_each=[world("reduce_scatter", grads)], post_gather=[world("all_gather", params_b)],
                       optimizer=P / n / adam_rate)
    if key == "zero3":
        t_ag = world("all_gather", params_b)
        return Phases({"all_gather_params": 2 * A * ag_v, "reduce_scatter_grads": A * rs_v},
                       fwd=[t_ag], bwd_gather=[t_ag], reduce_each=[world("reduce_scatter", grads)],
                       optimizer=P / n / adam_rate)
    if key == "hsdp":
        t_ag = intra("all_gather", params_b)
        return Phases({"all_gather_params_intra": 2 * A * ring_all_gather_bytes(g, params_b),
                        "reduce_scatter_grads_intra": A * ring_reduce_scatter_bytes(g, grads),
                        "all_reduce_grads_inter": ring_all_reduce_bytes(nodes, grads / g)},
                       fwd=[t_ag], bwd_gather=[t_ag], reduce_each=[intra("reduce_scatter", grads)],
                       reduce_last=[inter("all_reduce", grads / g)], optimizer=P / g / adam_rate)
    if key == "zeropp":
        qgz = QGZ_BYTES * P
        hpz = intra("all_gather", params_b) if nodes > 1 else world("all_gather", params_b)
        return Phases({"all_gather_params_qwz": A * ring_all_gather_bytes(n, QWZ_BYTES * P),
                        "all_gather_params_hpz": A * ring_all_gather_bytes(g, params_b),
                        "all_to_all_grads_qgz": A * (ring_reduce_scatter_bytes(g, qgz)
                                                     + ring_reduce_scatter_bytes(nodes, qgz / g))},
                       fwd=[world("all_gather", QWZ_BYTES * P)], bwd_gather=[hpz],
                       reduce_each=[intra("all_to_all", qgz) + inter("all_to_all", qgz / g)],
                       optimizer=P / n / adam_rate)
    if key == "offload":
        shard = P / n
        d2h = gb * shard / c.gpu_pcie
        h2d = PARAM_BYTES * shard / c.gpu_pcie
        cpu_rate = c.cluster.cpu_sockets * c.a.cpu_adam_params_per_s / g  # this GPU's share of the host
        opt = shard / cpu_rate
        return Phases({"reduce_scatter_grads": A * rs_v, "all_gather_params": ag_v},
                       reduce_each=[max(world("reduce_scatter", grads), d2h)],
                       post_gather=[world("all_gather", params_b)], optimizer=opt, transfer=d2h + h2d,
                       optimizer_shown=opt, transfer_shown=h2d)
    # OptimusNIC: collectives on the view's rails (sidecar) or on the cards (rail).
    r = c.card_rail if c.a.nic_placement == "rail" else rail
    t_rs = world("reduce_scatter", grads, r)
    t_ag = world("all_gather", params_b, r)
    copies, chain, u = card_chain(c, key)
    ph = Phases({"reduce_scatter_grads": rs_v, "all_gather_params": ag_v}, post_gather=[t_ag],
                 optimizer=u, transfer=sum(copies))
    sharded = key == "optimusnic_z3" or c.a.nic_grads == "sharded"
    if key == "optimusnic_z3":
        ph.comm_bytes = {"all_gather_params": 2 * A * ag_v, "reduce_scatter_grads": A * rs_v}
        ph.fwd, ph.bwd_gather, ph.post_gather = [t_ag], [t_ag], []
    elif sharded:
        ph.comm_bytes["reduce_scatter_grads"] = A * rs_v
    pipelined = c.a.nic_grad_path == "stream" or c.a.nic_overlap
    if pipelined and not c.a.clip:
        # No norm to wait for: each chunk goes through the card as its reduction completes.
        ph.merged_chain = True
        if sharded:
            ph.reduce_each = [t_rs]
        ph.reduce_last = [max(t_rs, *chain) - (t_rs if sharded else 0.0)]
        return ph
    if sharded:
        ph.reduce_each = [t_rs]
    else:
        ph.reduce_last = [t_rs]
    if pipelined:
        shown = max(chain)
        ph.optimizer_shown, ph.transfer_shown = (shown, 0.0) if u >= max(copies, default=0.0) else (0.0, shown)
    else:
        # As built: one host thread runs the legs one after another; the kernel overlaps them.
        ph.optimizer_shown, ph.transfer_shown = u, max(0.0, sum(copies) - u)
    return ph
