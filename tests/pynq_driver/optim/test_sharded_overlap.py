"""ShardedNicOptimizer's overlapped collectives, gradient accumulation and collective devices (gloo).

World 3 on 127.0.0.1 (one process per rank; the 64-row weights split 22/22/20, the 4-row one 2/2/0):
reduce-scatter per bucket from the backward pass, the all-gather left in flight by step() and
waited by the forward, gradient accumulation over micro-batches with and without no_sync(),
against the synchronous path (bit for bit), torch DDP + AdamW and single-process AdamW (within
the tolerance of test_distributed: the reduction's rounding differs, not the update).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from optimusnic.demo.run import free_port, regression_task
from pynq_driver.optim.sharded import ShardedNicOptimizer, backend_device, init_gloo, run_ranks

PARAM_TOL = 2e-6  # test_distributed's: max |param diff| against torch
WORLD = 3
MICRO = 3
SMALL_BUCKETS = 0.005  # MiB: 5 KiB of gradient per bucket, so the MLP's four weights and biases fill several


def test_backend_device_is_the_process_groups():
    assert backend_device("gloo") == torch.device("cpu")
    assert backend_device("nccl").type == "cuda"
    assert backend_device("xccl").type == "xpu"
    assert backend_device("cpu:gloo,cuda:nccl") == torch.device("cpu")  # scalars stay on the host
    assert backend_device("cuda:nccl").type == "cuda"
    from hls.errors import UserError

    with pytest.raises(UserError, match="unknown"):
        backend_device("carrier-pigeon")


def _record_collectives() -> list[tuple[str, list[str], bool]]:
    """Every collective the optimizer issues: (name, device types of its tensors, async)."""
    import torch.distributed as dist

    import pynq_driver.optim.sharded as sh

    seen: list[tuple[str, list[str], bool]] = []

    def wrap(name, fn):
        def call(*args, **kwargs):
            devs = sorted({t.device.type for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)})
            seen.append((name, devs, bool(kwargs.get("async_op"))))
            return fn(*args, **kwargs)
        return call

    sh._reduce_scatter = wrap("reduce_scatter", sh._reduce_scatter)
    sh._all_gather = wrap("all_gather", sh._all_gather)
    dist.all_reduce = wrap("all_reduce", dist.all_reduce)
    return seen


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a.parameters(), b.parameters(), strict=True))


def _worker(rank: int, world: int, port: int, out: str, steps: int) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pynq_driver.optim.sharded import collective_device

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        seen = _record_collectives()
        task = regression_task(seed=21, batch_size=world * MICRO * 4)

        def micro(s: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
            x, y = task.batch(s)
            return list(zip(x.chunk(world)[rank].chunk(MICRO), y.chunk(world)[rank].chunk(MICRO), strict=True))

        def global_micro(s: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
            x, y = task.batch(s)
            xs = [xr.chunk(MICRO) for xr in x.chunk(world)]
            ys = [yr.chunk(MICRO) for yr in y.chunk(world)]
            return [(torch.cat([xr[k] for xr in xs]), torch.cat([yr[k] for yr in ys])) for k in range(MICRO)]

        result: dict = {"device": str(collective_device()), "world": world}

        # 1. One backward per step: buckets reduced from the backward, all-gathers left in flight by
        # step(), against today's synchronous path (reduced and gathered in step()).
        models = [copy.deepcopy(task.model) for _ in range(2)]
        fast = ShardedNicOptimizer(models[0].parameters(), lr=3e-3, backend="golden", overlap=True,
                                   bucket_cap_mb=SMALL_BUCKETS, async_all_gather=True, skip_nonfinite=True)
        # The same buckets: at world 3 gloo's reduce-scatter sums each element in an order that depends
        # on its place in the buffer, so another bucketing rounds differently (as DDP's bucket_cap_mb).
        plain = ShardedNicOptimizer(models[1].parameters(), lr=3e-3, backend="golden", bucket_cap_mb=SMALL_BUCKETS)
        for s in range(steps):
            x, y = task.batch(s)
            for m, opt in zip(models, (fast, plain), strict=True):
                opt.zero_grad()
                task.loss(m, x.chunk(world)[rank], y.chunk(world)[rank]).backward()
                if opt is fast:
                    opt.clip_grad_norm_(1e3)  # the norm all-reduce (never clips here)
                opt.step()
        # The next forward completes them: a forward pass that reads every parameter.
        models[0](torch.zeros(1, models[0][0].in_features))
        result["identical"] = _same(*models)
        result["buckets"] = len(fast.placement()) and fast.placement()[0]["reduce_buckets"]
        result["overlapped"] = fast.overlapped_reductions
        result["waited_by_forward"] = fast.gathers_waited_by_forward
        result["collectives"] = [c for c in seen]
        result["peak_bucket_bytes"], result["bucket_bytes"] = fast.peak_bucket_bytes(), fast.bucket_bytes()
        result["params"] = sum(p.numel() for p in models[0].parameters())
        fast.close()
        plain.close()
        seen.clear()

        # 2. Gradient accumulation over MICRO micro-batches.
        kinds = {
            "overlap": dict(overlap=True, bucket_cap_mb=SMALL_BUCKETS, async_all_gather=True),
            "overlap_keep_grads": dict(overlap=True, free_grads=False, bucket_cap_mb=SMALL_BUCKETS),
            "overlap_no_sync": dict(overlap=True, bucket_cap_mb=SMALL_BUCKETS, async_all_gather=True),
            "sync_no_sync": dict(bucket_cap_mb=SMALL_BUCKETS),
        }
        runs = {k: copy.deepcopy(task.model) for k in (*kinds, "ddp", "ddp_no_sync", "torch")}
        opts = {k: ShardedNicOptimizer(runs[k].parameters(), lr=3e-3, backend="golden", **kw)
                for k, kw in kinds.items()}
        ddp = {k: DDP(runs[k]) for k in ("ddp", "ddp_no_sync")}
        opts.update({k: torch.optim.AdamW(ddp[k].parameters(), lr=3e-3) for k in ddp})
        opts["torch"] = torch.optim.AdamW(runs["torch"].parameters(), lr=3e-3)
        for s in range(steps):
            for k, opt in opts.items():
                opt.zero_grad()
                if k == "torch":
                    for x, y in global_micro(s):
                        task.loss(runs[k], x, y).backward()
                    opt.step()
                    continue
                model = ddp.get(k, runs[k])
                for i, (x, y) in enumerate(micro(s)):
                    quiet = "no_sync" in k and i < MICRO - 1
                    with (model if k in ddp else opt).no_sync() if quiet else _nothing():
                        task.loss(model, x, y).backward()
                opt.step()
        for k in kinds:
            opts[k].wait_all_gather()  # read by hand below, no forward in between
        result["accum_vs_torch"] = {k: _diff(runs[k], runs["torch"]) for k in runs}
        result["accum_vs_ddp"] = {k: _diff(runs[k], runs["ddp"]) for k in runs}
        result["accum_no_sync_identical"] = _same(runs["overlap_no_sync"], runs["sync_no_sync"])
        result["accum_overlapped"] = {k: opts[k].overlapped_reductions for k in kinds}
        result["accum_buckets"] = opts["overlap"].placement()[0]["reduce_buckets"]
        result["accum_collectives"] = [c for c in seen]
        for k in kinds:
            opts[k].close()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _check(r: dict, steps: int) -> None:
    assert r["device"] == "cpu"
    for name, devs, _ in r["collectives"] + r["accum_collectives"]:
        assert devs == [r["device"]], (name, devs)  # every collective's tensors on the group's device
    names = [c[0] for c in r["collectives"]]
    assert names.count("all_reduce") == 2 * steps  # the clip norm and the inf/NaN vote...
    assert r["identical"]  # overlapped buckets and in-flight gathers: the synchronous path's bits
    nb = r["buckets"]
    assert nb >= 3
    assert r["overlapped"] == nb * steps  # every bucket reduced from the backward pass
    rs = [c for c in r["collectives"] if c[0] == "reduce_scatter"]
    assert sum(a for _, _, a in rs) == nb * steps  # ... asynchronously
    ag = [c for c in r["collectives"] if c[0] == "all_gather"]
    assert sum(a for _, _, a in ag) == nb * steps  # the overlapped optimizer's all-gathers are asynchronous
    assert r["waited_by_forward"] > 0  # step() left them to the forward, whose pre-hook completed them
    # No full-size bucket between steps: the shards are about 1/world of the gradients.
    assert r["bucket_bytes"] < 4 * r["params"] / r["world"] * 1.2
    print(f"shards {r['bucket_bytes']} B, reduction peak {r['peak_bucket_bytes']} B for {r['params']} fp32 params")
    for k, d in r["accum_vs_torch"].items():
        print(f"accumulation {k}: max |param diff| vs single-process torch {d:.3g}, vs DDP "
              f"{r['accum_vs_ddp'][k]:.3g}")
        assert d < PARAM_TOL, k
        assert r["accum_vs_ddp"][k] < PARAM_TOL, k
    assert r["accum_no_sync_identical"]  # no_sync: one reduction of the accumulated gradient either way
    nb = r["accum_buckets"]
    assert r["accum_overlapped"] == {"overlap": MICRO * nb * steps, "overlap_keep_grads": MICRO * nb * steps,
                                     "overlap_no_sync": nb * steps, "sync_no_sync": 0}


def test_overlap_and_accumulation_at_world_3(tmp_path):
    out = tmp_path / "overlap.json"
    run_ranks(_worker, WORLD, (free_port(), str(out), 3), timeout_s=240)
    _check(json.loads(out.read_text()), 3)


def test_accumulation_zero_grad_and_bucket_cap_in_one_process(tmp_path):
    """A world of one: overlapped accumulation adds each backward's gradient in torch's order, so it
    is the synchronous path's bits; zero_grad() drops what earlier backward passes reduced."""
    import torch.distributed as dist

    from hls.errors import UserError

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        task = regression_task(seed=22, batch_size=MICRO * 8)
        for bad in (0, -1.0, float("nan"), "25", True):
            with pytest.raises(UserError, match="bucket_cap_mb"):
                ShardedNicOptimizer(task.model.parameters(), bucket_cap_mb=bad)
        models = [copy.deepcopy(task.model) for _ in range(3)]
        opts = [ShardedNicOptimizer(models[0].parameters(), lr=3e-3, backend="golden", overlap=True,
                                    bucket_cap_mb=SMALL_BUCKETS, async_all_gather=True),
                ShardedNicOptimizer(models[1].parameters(), lr=3e-3, backend="golden"),
                torch.optim.AdamW(models[2].parameters(), lr=3e-3)]
        for s in range(3):
            x, y = task.batch(s)
            for m, opt in zip(models, opts, strict=True):
                if s == 1:  # a backward pass thrown away by zero_grad
                    task.loss(m, x, y).backward()
                opt.zero_grad()
                for xm, ym in zip(x.chunk(MICRO), y.chunk(MICRO), strict=True):
                    task.loss(m, xm, ym).backward()
                opt.step()
        assert opts[0].overlapped_reductions == 3 * MICRO * opts[0].placement()[0]["reduce_buckets"] + \
            opts[0].placement()[0]["reduce_buckets"]
        assert _same(models[0], models[1])
        assert _diff(models[0], models[2]) < PARAM_TOL
        for opt in opts[:2]:
            opt.close()
    finally:
        dist.destroy_process_group()


def _scaler_worker(rank: int, world: int, port: int, out: str) -> None:
    """Clipping and GradScaler with accumulation over micro-batches, overlapped and async-gathered."""
    import torch.distributed as dist
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        task = regression_task(seed=23, batch_size=world * MICRO * 4)
        model, ref_model = task.model, copy.deepcopy(task.model)
        opt = ShardedNicOptimizer(model.parameters(), lr=3e-3, backend="golden", overlap=True,
                                  bucket_cap_mb=SMALL_BUCKETS, async_all_gather=True)
        ref = torch.optim.AdamW(ref_model.parameters(), lr=3e-3)
        scaler = ShardedGradScaler("cpu", init_scale=2.0**10, growth_interval=3)
        ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
        norms = []
        for s in range(8):
            x, y = task.batch(s)
            blow = float("inf") if s == 4 else 1.0  # an overflow in one micro-batch of the last rank
            opt.zero_grad()
            xs, ys = x.chunk(world)[rank].chunk(MICRO), y.chunk(world)[rank].chunk(MICRO)
            for i in range(MICRO):
                f = blow if (rank == world - 1 and i == 1) else 1.0
                scaler.scale(task.loss(model, xs[i], ys[i]) * f).backward()
            norm = opt.clip_grad_norm_(0.05, grad_scaler=scaler)
            scaler.step(opt)
            scaler.update()
            ref.zero_grad()
            for i in range(MICRO):
                xg = torch.cat([xr.chunk(MICRO)[i] for xr in x.chunk(world)])
                yg = torch.cat([yr.chunk(MICRO)[i] for yr in y.chunk(world)])
                ref_scaler.scale(task.loss(ref_model, xg, yg) * (blow if i == 1 else 1.0)).backward()
            ref_scaler.unscale_(ref)
            ref_norm = torch.nn.utils.clip_grad_norm_(ref_model.parameters(), 0.05)
            ref_scaler.step(ref)
            ref_scaler.update()
            norms.append((norm.item(), ref_norm.item()))
        opt.wait_all_gather()
        result = {"diff": _diff(model, ref_model), "norms": norms, "scale": [scaler.get_scale(),
                                                                            ref_scaler.get_scale()],
                  "steps": opt.state[model[0].weight]["step"].item()}
        opt.close()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_clip_and_scaler_with_accumulation_at_world_3(tmp_path):
    out = tmp_path / "scaler.json"
    run_ranks(_scaler_worker, WORLD, (free_port(), str(out)), timeout_s=240)
    r = json.loads(out.read_text())
    print(f"clip + GradScaler + accumulation, world {WORLD}: max |param diff| {r['diff']:.3g}")
    assert r["diff"] < PARAM_TOL
    assert r["steps"] == 7.0 and r["scale"][0] == r["scale"][1]
    finite = [(a, b) for a, b in r["norms"] if b == b and b != float("inf")]
    assert all(abs(a - b) <= 1e-5 * b for a, b in finite)
    assert sum(b > 0.05 for _, b in finite) >= 3
