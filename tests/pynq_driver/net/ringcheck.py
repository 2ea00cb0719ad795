"""Shared by the software-cards-on-the-wire tests: gradients, and the comparison with
`hls.net.ring.ring_step` bit for bit (gathered parameters on every rank, every owner's p, m, v)."""

from __future__ import annotations

import numpy as np

from hls.golden import Hyper, to_bf16_bits
from hls.net import ring


def grads(rng: np.random.Generator, world: int, length: int, wire_dtype: str) -> list[np.ndarray]:
    """Each rank's local gradient in the wire dtype, with a spread of magnitudes (so sums round)."""
    out = []
    for _ in range(world):
        g = (rng.standard_normal(length) * np.exp2(rng.integers(-6, 6, length))).astype(np.float32)
        out.append(to_bf16_bits(g) if wire_dtype == "bf16" else g)
    return out


def hyper(step: int) -> Hyper:
    return Hyper(lr=1e-2, weight_decay=0.05, step=step, grad_scale=1.0 if step % 2 else 0.5)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.float32 else a.view(np.uint16)


def check_step(outs: list[np.ndarray], state_dicts: list[dict], ref: ring.StepResult) -> None:
    """Every rank's gathered vector and every owner's shard equal the reference bit for bit."""
    for rank, out in enumerate(outs):
        assert out.dtype == ref.gathered.dtype and out.shape == ref.gathered.shape, rank
        assert np.array_equal(bits(out), bits(ref.gathered)), f"rank {rank}: gathered parameters differ"
    for rank, (sd, shard) in enumerate(zip(state_dicts, ref.shards, strict=True)):
        for key, want in (("params", shard.p), ("exp_avg", shard.m), ("exp_avg_sq", shard.v)):
            assert np.array_equal(bits(sd[key]), bits(want)), f"rank {rank}: {key} differs"


def run_steps(cluster, params: np.ndarray, steps: int, seed: int, *, timeout_s: float = 60.0, **kw) -> None:
    """`steps` steps of `cluster` against ring_step, checked after each."""
    rng = np.random.default_rng(seed)
    world = cluster.world
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    opt = cluster.nodes[0].spec.optimizer
    for step in range(1, steps + 1):
        local = grads(rng, world, params.size, cluster.wire_dtype)
        outs = cluster.step(local, hyper(step), timeout_s=timeout_s, **kw)
        ref = ring.ring_step(shards, local, hyper(step), wire_dtype=cluster.wire_dtype,
                             out_dtype=cluster.param_dtype, optimizer=opt, **kw)
        check_step(outs, cluster.state_dicts(), ref)
        shards = ref.shards


# ---- one rank in its own process (multiprocessing spawn) ----------------------------------------------

def rank_main(rank: int, world: int, store_port: int, out: str, *, backend: str = "golden", wire_dtype: str = "fp32",
              length: int = 3001, steps: int = 3, die_before: int | None = None, peer_timeout_s: float = 20.0) -> None:
    """Rank `rank`: join the ring through the TCPStore at `store_port`, run `steps` steps (the
    gradients of every rank come from one seed), save each step's gathered vector and the shard
    state to `out` (.npz). `die_before`: this rank kills itself (SIGKILL) before that step; the
    others record the error they raised and how long it took."""
    import datetime
    import json
    import os
    import signal
    import time

    import torch.distributed as dist

    from hls.spec import KernelSpec
    from pynq_driver.net.node import RingNode

    store = dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=datetime.timedelta(seconds=60))
    params = np.random.default_rng(1).standard_normal(length).astype(np.float32)
    rng = np.random.default_rng(11)
    arrays: dict[str, np.ndarray] = {}
    info: dict[str, object] = {"rank": rank}
    with RingNode.join(backend, KernelSpec(), store=store, rank=rank, world=world, params=params,
                       wire_dtype=wire_dtype, peer_timeout_s=peer_timeout_s, rendezvous_timeout_s=60) as node:
        for step in range(1, steps + 1):
            local = grads(rng, world, length, wire_dtype)
            if die_before == step and rank == world - 1:
                os.kill(os.getpid(), signal.SIGKILL)
            t0 = time.monotonic()
            try:
                arrays[f"out{step}"] = node.step(local[rank], hyper(step), timeout_s=120)
            except Exception as exc:  # the test checks what and when
                info.update(error=type(exc).__name__, message=str(exc), seconds=time.monotonic() - t0,
                            peer=getattr(exc, "peer", None))
                break
            sd = node.state_dict()
            for key in ("params", "exp_avg", "exp_avg_sq"):
                arrays[f"{key}{step}"] = sd[key]
        info["counters"] = node.counters
    np.savez(out, info=np.array(json.dumps(info)), **arrays)
