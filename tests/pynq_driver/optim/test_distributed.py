"""ShardedNicOptimizer over torch.distributed (gloo on 127.0.0.1, one process per rank).

Each rank trains on its slice of every batch; rank 0 also trains a single-process
torch.optim.AdamW on the whole batch. The sharded run averages the ranks' gradients, so it
differs from the single-process run only by the rounding of that average and of the update.
Measured here (csim, MLP, 30 steps): max |param diff| 3.0e-8 for 2 ranks; the test allows 2e-6.
Every collective has a 60 s timeout and every launch a deadline, so a failing rank fails the test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import gloo_teardown
import pytest
import torch

from optimusnic.demo.run import free_port, regression_task, run_sharded
from pynq_driver.optim.sharded import ShardedNicOptimizer, init_gloo, run_ranks

PARAM_TOL = 2e-6
LOSS_RTOL = 1e-5
ALIGN = 16  # elements per 64-byte beat: each rank's shard is a whole number of beats


@pytest.mark.parametrize("world_size", [2, 4])
def test_sharded_matches_single_process_adamw(world_size, tmp_path):
    r = run_sharded("golden", 30, world_size, task_name="mlp", progress=False, timeout_s=240, scratch=tmp_path)
    print(f"world {world_size}: max |param diff| {r['max_param_diff']:.3g}, rel loss {r['max_rel_loss_diff']:.3g}")
    assert r["losses_nic"][-1] < 0.5 * r["losses_nic"][0]
    assert r["max_rel_loss_diff"] < LOSS_RTOL
    assert r["max_param_diff"] < PARAM_TOL
    assert r["max_moment_diff"] < 1e-6
    assert len(set(r["rank_param_checksums"])) == 1  # every rank holds the same parameters
    assert r["state_dict_format_equal"]  # the gathered state_dict is torch.optim.AdamW's format
    # Each rank's card holds its rows (dim-0 chunk, as FSDP2) of every parameter, and only that.
    rows = r["placement"]
    assert [row["rank"] for row in rows] == list(range(world_size))
    n = rows[0]["bucket_params"]
    assert sum(row["shard_params"] for row in rows) == n
    for row in rows:
        assert row["backend"] == "golden"
        assert row["shard_params"] <= -(-n // world_size) + 64 * world_size  # about 1/world of the model
    assert r["host_state_tensors"] == 0


def _groups(model):
    weights = [p for name, p in model.named_parameters() if name.endswith("weight")]
    biases = [p for name, p in model.named_parameters() if not name.endswith("weight")]
    return [{"params": weights, "lr": 4e-3, "weight_decay": 0.1}, {"params": biases, "lr": 8e-3, "weight_decay": 0.0}]


def _groups_worker(rank: int, world_size: int, port: int, out: str) -> None:
    """Two param groups, a scheduler, a checkpoint into a fresh sharded optimizer half-way."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    init_gloo(rank, world_size, port, 60.0)
    try:
        task = regression_task(seed=11)
        model, ref_model = task.model, copy.deepcopy(task.model)
        opt = ShardedNicOptimizer(_groups(model), backend="golden")
        ref = torch.optim.AdamW(_groups(ref_model))
        sch = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[4e-3, 8e-3], total_steps=20)
        ref_sch = torch.optim.lr_scheduler.OneCycleLR(ref, max_lr=[4e-3, 8e-3], total_steps=20)
        for s in range(20):
            if s == 10:  # checkpoint: the full state in torch format, loaded into a new sharded optimizer
                sd = opt.state_dict()
                sch_sd = sch.state_dict()
                opt.close()
                opt = ShardedNicOptimizer(_groups(model), backend="golden")
                sch = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[4e-3, 8e-3], total_steps=20)
                sch.load_state_dict(sch_sd)
                opt.load_state_dict(sd)
                assert opt.shards()[0].step_count == 10
            x, y = task.batch(s)
            opt.zero_grad()
            task.loss(model, x.chunk(world_size)[rank], y.chunk(world_size)[rank]).backward()
            opt.step()
            sch.step()
            ref.zero_grad()
            task.loss(ref_model, x, y).backward()
            ref.step()
            ref_sch.step()
        diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref_model.parameters(), strict=True))
        lrs = [g["lr"] for g in opt.param_groups] == [g["lr"] for g in ref.param_groups]
        sd = opt.full_state_dict()
        # The gathered state loads into a plain torch.optim.AdamW (interchangeable format)...
        torch.optim.AdamW(_groups(copy.deepcopy(model))).load_state_dict(sd)
        # ... and torch.optim.AdamW's plain state loads into ShardedNicOptimizer (each rank its rows).
        back = ShardedNicOptimizer(_groups(copy.deepcopy(ref_model)), backend="golden")
        back.load_state_dict(ref.state_dict())
        ref_sd, back_sd = ref.state_dict(), back.full_state_dict()
        interchange = all(torch.equal(ref_sd["state"][k][key], back_sd["state"][k][key])
                          for k in ref_sd["state"] for key in ("step", "exp_avg", "exp_avg_sq"))
        back.close()
        result = {"diff": diff, "lrs_equal": lrs, "shards": len(opt.shards()), "interchange": interchange,
                  "steps": [s.step_count for s in opt.shards()]}
        opt.close()
        result.update(_scaler_phase(rank, world_size))
        result.update(_overlap_phase(rank, world_size))
        result.update(_partial_phase(rank, world_size))
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _scaler_phase(rank: int, world_size: int) -> dict:
    """Loss scaling: torch's ShardedGradScaler all-reduces the inf flags, so every rank skips together."""
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    task = regression_task(seed=13)
    model, ref_model = task.model, copy.deepcopy(task.model)
    opt = ShardedNicOptimizer(model.parameters(), lr=3e-3, backend="golden")
    ref = torch.optim.AdamW(ref_model.parameters(), lr=3e-3)
    scaler = ShardedGradScaler("cpu", init_scale=2.0**12, growth_interval=4)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=4)
    scales = []
    for s in range(16):
        x, y = task.batch(s)
        opt.zero_grad()
        scaler.scale(task.loss(model, x.chunk(world_size)[rank], y.chunk(world_size)[rank])).backward()
        ref.zero_grad()
        ref_scaler.scale(task.loss(ref_model, x, y)).backward()
        if s == 6:  # an overflow on the last rank only (and in the single-process run)
            if rank == world_size - 1:
                model[0].weight.grad[0, 0] = float("inf")
            ref_model[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        ref_scaler.step(ref)
        ref_scaler.update()
        scales.append((scaler.get_scale(), ref_scaler.get_scale()))
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref_model.parameters(), strict=True))
    result = {"scaler_diff": diff, "scales": scales, "scaler_steps": opt.shards()[0].step_count}
    opt.close()
    return result


def _overlap_phase(rank: int, world_size: int) -> dict:
    """Reduce-scatter launched from the backward pass (and no_sync accumulation): same bits as in step()."""
    task = regression_task(seed=14)
    models = [task.model, copy.deepcopy(task.model)]
    opts = [ShardedNicOptimizer(_groups(models[0]), backend="golden", overlap=True),
            ShardedNicOptimizer(_groups(models[1]), backend="golden")]
    for s in range(6):
        x, y = task.batch(s)
        xs, ys = x.chunk(world_size)[rank].chunk(2), y.chunk(world_size)[rank].chunk(2)
        for model, opt in zip(models, opts, strict=True):
            opt.zero_grad()
            if s % 2:  # two micro-batches: accumulate without reducing, reduce after the last
                with opt.no_sync():
                    task.loss(model, xs[0], ys[0]).backward()
                task.loss(model, xs[1], ys[1]).backward()
            else:
                task.loss(model, x.chunk(world_size)[rank], y.chunk(world_size)[rank]).backward()
            opt.step()
    same = all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True))
    steps = [s.step_count for s in opts[0].shards()]
    launched = (opts[0].overlapped_reductions, opts[1].overlapped_reductions)
    for opt in opts:
        opt.close()
    return {"overlap_identical": same, "overlap_steps": steps, "overlap_launched": launched}


def _partial_phase(rank: int, world_size: int) -> dict:
    """Mid-run freezing (no gradient on every rank), with overlap and ZeRO-2's freed gradients
    against the plain step-time reduction (same reduction: same bits) and against torch."""
    task = regression_task(seed=17)
    models = [task.model, copy.deepcopy(task.model), copy.deepcopy(task.model)]
    opts = [ShardedNicOptimizer(models[0].parameters(), lr=3e-3, backend="golden", overlap=True, free_grads=True),
            ShardedNicOptimizer(models[1].parameters(), lr=3e-3, backend="golden"),
            torch.optim.AdamW(models[2].parameters(), lr=3e-3)]
    freed = True
    for s in range(8):
        x, y = task.batch(s)
        for m, opt in zip(models, opts, strict=True):
            m[2].weight.requires_grad_(s % 2 == 0)  # frozen every other step
            opt.zero_grad()
            if m is models[2]:
                task.loss(m, x, y).backward()
            else:
                task.loss(m, x.chunk(world_size)[rank], y.chunk(world_size)[rank]).backward()
            if m is models[0] and s % 2 == 0:  # reduced from the backward pass, then freed
                freed &= all(p.grad is None for p in m.parameters())
            opt.step()
            if m is models[0]:  # frozen steps: reduced in step(), freed there
                freed &= all(p.grad is None for p in m.parameters())
    same = all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True))
    diff = max((a - b).abs().max().item() for a, b in zip(models[0].parameters(), models[2].parameters(),
                                                           strict=True))
    steps = [opts[0].state[p]["step"].item() for p in models[0].parameters()]
    ref_steps = [opts[2].state[p]["step"].item() for p in models[2].parameters()]
    for opt in opts[:2]:
        opt.close()
    return {"partial_identical": same, "partial_diff": diff, "partial_steps": steps, "partial_ref_steps": ref_steps,
            "grads_freed": freed}


def test_sharded_param_groups_scheduler_checkpoint_and_loss_scaling(tmp_path):
    out = tmp_path / "groups.json"
    run_ranks(_groups_worker, 2, (free_port(), str(out)), timeout_s=240)
    r = json.loads(out.read_text())
    assert r["lrs_equal"] and r["shards"] == 2 and r["steps"] == [20, 20] and r["interchange"]
    assert r["diff"] < PARAM_TOL
    assert all(mine == ref for mine, ref in r["scales"]) and r["scales"][6][0] < r["scales"][5][0]
    assert r["scaler_steps"] == 16 - 1
    assert r["scaler_diff"] < PARAM_TOL
    assert r["overlap_identical"] and r["overlap_steps"] == [6, 6]
    assert r["overlap_launched"] == [6 * 2, 0]  # every step, both buckets, from the backward pass
    assert r["partial_identical"] and r["grads_freed"]
    # vs single-process torch: 2.3e-6 measured here, the same without freezing (this seed has
    # near-zero gradients, where the rounding of the two-rank mean flips the sign of Adam's step)
    assert r["partial_diff"] < 5 * PARAM_TOL
    assert r["partial_steps"] == r["partial_ref_steps"] and 4.0 in r["partial_steps"]


def _clip_worker(rank: int, world_size: int, port: int, out: str) -> None:
    """clip_grad_norm_ and GradScaler on the card, overlap on and off, against single-process torch."""
    import torch.distributed as dist
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    torch.set_num_threads(1)
    init_gloo(rank, world_size, port, 60.0)
    try:
        result = {}
        for overlap, explicit in ((False, False), (True, False), (False, True), (True, True)):
            task = regression_task(seed=15)
            model, ref_model = task.model, copy.deepcopy(task.model)
            opt = ShardedNicOptimizer(model.parameters(), lr=3e-3, backend="golden", overlap=overlap)
            ref = torch.optim.AdamW(ref_model.parameters(), lr=3e-3)
            scaler = ShardedGradScaler("cpu", init_scale=2.0**10, growth_interval=3)
            ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=3)
            norms = []
            for s in range(12):
                x, y = task.batch(s)
                # step 5: an overflow in the backward pass of the last rank only (and of the single run)
                blow = float("inf") if s == 5 else 1.0
                opt.zero_grad()
                loss = task.loss(model, x.chunk(world_size)[rank], y.chunk(world_size)[rank])
                scaler.scale(loss * (blow if rank == world_size - 1 else 1.0)).backward()
                ref.zero_grad()
                ref_scaler.scale(task.loss(ref_model, x, y) * blow).backward()
                if explicit:  # torch's pattern: unscale_ first (host with overlap=False; the card with True)
                    scaler.unscale_(opt)
                norm = opt.clip_grad_norm_(0.05, grad_scaler=scaler)  # clips most steps
                ref_scaler.unscale_(ref)
                ref_norm = torch.nn.utils.clip_grad_norm_(ref_model.parameters(), 0.05)
                norms.append((norm.item(), ref_norm.item()))
                scaler.step(opt)
                scaler.update()
                ref_scaler.step(ref)
                ref_scaler.update()
            diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref_model.parameters(),
                                                                   strict=True))
            result[("overlap" if overlap else "plain") + ("+unscale_" if explicit else "")] = {
                "diff": diff, "norms": norms, "steps": opt.state[model[0].weight]["step"].item(),
                "scale": [scaler.get_scale(), ref_scaler.get_scale()]}
            opt.close()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_clip_and_unscale_on_the_card_match_single_process_torch(tmp_path):
    out = tmp_path / "clip.json"
    run_ranks(_clip_worker, 2, (free_port(), str(out)), timeout_s=240)
    r = json.loads(out.read_text())
    for kind in ("plain", "overlap", "plain+unscale_", "overlap+unscale_"):
        x = r[kind]
        print(f"{kind}: max |param diff| {x['diff']:.3g}")
        assert x["diff"] < PARAM_TOL
        assert x["steps"] == 11.0 and x["scale"][0] == x["scale"][1]
        finite = [(a, b) for a, b in x["norms"] if b == b and b != float("inf")]
        assert all(abs(a - b) <= 1e-5 * b for a, b in finite)
        assert sum(b > 0.05 for _, b in finite) >= 5  # clipping really happened


def _dcp_sharded_phase(rank, world, port, ckpt_in, ckpt_out, start, steps, out):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        task = regression_task(seed=16)
        model = task.model
        opt = ShardedNicOptimizer(_groups(model), backend="golden")

        def full():
            return {f"{n}.{k}": v.full_tensor().clone() if hasattr(v, "full_tensor") else v.clone()
                    for n, p in model.named_parameters() for k, v in opt.state[p].items()}

        loaded = {}
        if ckpt_in:
            msd, osd = get_state_dict(model, opt)
            dcp.load({"model": msd, "optim": osd}, checkpoint_id=ckpt_in)
            set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
            loaded = full()
        for s in range(start, start + steps):
            x, y = task.batch(s)
            opt.zero_grad()
            task.loss(model, x.chunk(world)[rank], y.chunk(world)[rank]).backward()
            opt.step()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt_out)
        saved = full()
        if rank == 0:
            torch.save({"loaded": loaded, "saved": saved}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_sharded_dcp_resume_2_4_1(tmp_path):
    ck = [tmp_path / f"w{w}" for w in (2, 4, 1)]
    res = [tmp_path / f"{i}.pt" for i in range(3)]
    run_ranks(_dcp_sharded_phase, 2, (free_port(), None, str(ck[0]), 0, 4, str(res[0])), timeout_s=240)
    run_ranks(_dcp_sharded_phase, 4, (free_port(), str(ck[0]), str(ck[1]), 4, 4, str(res[1])), timeout_s=240)
    run_ranks(_dcp_sharded_phase, 1, (free_port(), str(ck[1]), str(ck[2]), 8, 2, str(res[2])), timeout_s=240)
    r = [torch.load(x) for x in res]
    assert len(list(ck[1].glob("*.distcp"))) == 4  # each rank wrote its own shard
    for before, after in ((r[0]["saved"], r[1]["loaded"]), (r[1]["saved"], r[2]["loaded"])):
        assert before.keys() == after.keys() and before
        for k in before:
            assert torch.equal(before[k], after[k]), k
    assert all(v.item() == 10.0 for k, v in r[2]["saved"].items() if k.endswith("step"))


def _dtensor_teardown_worker(rank: int, world_size: int, port: int, out: str) -> None:
    import atexit

    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard

    init_gloo(rank, world_size, port, 60.0)
    mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    full = DTensor.from_local(torch.full((2,), float(rank)), mesh, [Shard(0)]).full_tensor()
    del mesh
    dist.destroy_process_group()
    Path(out, f"{rank}.json").write_text(json.dumps({"full": full.tolist(),
                                                     "gloo_workers": gloo_teardown.gloo_worker_threads()}))
    atexit.register(Path(out, f"{rank}.finalized").touch)


def test_spawned_ranks_skip_interpreter_finalization(tmp_path):
    """A DTensor program's gloo group outlives destroy_process_group (torch's DTensor caches keep its
    mesh), so its worker threads live on; a rank that returns ends without interpreter finalization,
    where such a worker taking the GIL would abort the rank (std::terminate)."""
    run_ranks(_dtensor_teardown_worker, 2, (free_port(), str(tmp_path)), timeout_s=240)
    for rank in range(2):
        res = json.loads((tmp_path / f"{rank}.json").read_text())
        assert res["full"] == [0.0, 0.0, 1.0, 1.0]
        print(f"rank {rank}: gloo worker threads alive after destroy_process_group: {res['gloo_workers']}")
        assert not (tmp_path / f"{rank}.finalized").exists()  # atexit handlers never ran


def _failing_worker(rank: int, world_size: int, port: int) -> None:
    init_gloo(rank, world_size, port, 10.0)
    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    import torch.distributed as dist

    dist.barrier()  # rank 0 waits here for a rank that is gone: the timeout or the launcher ends it


def test_a_failing_rank_never_hangs():
    with pytest.raises(Exception, match="rank 1 fails on purpose"):
        run_ranks(_failing_worker, 2, (free_port(),), timeout_s=120)


def test_needs_an_initialized_process_group():
    from hls.errors import UserError

    with pytest.raises(UserError, match="init_process_group"):
        ShardedNicOptimizer(regression_task().model.parameters())


def test_grad_scaler_attribute_contract_in_one_process(tmp_path):
    """GradScaler's announced contract (it sets optimizer.grad_scale / found_inf instead of passing
    itself): a 1024-scaled gradient unscaled on the card gives the same bits as the plain one."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        task = regression_task(seed=18)
        models = [task.model, copy.deepcopy(task.model)]
        opts = [ShardedNicOptimizer(m.parameters(), lr=3e-3, backend="golden") for m in models]
        for s in range(4):
            x, y = task.batch(s)
            for i, (m, opt) in enumerate(zip(models, opts, strict=True)):
                opt.zero_grad()
                (task.loss(m, x, y) * (1024.0 if i == 0 else 1.0)).backward()
            opts[0].grad_scale, opts[0].found_inf = torch.tensor(1024.0), torch.tensor(float(s == 2))
            for opt in opts:
                if s == 2 and opt is opts[1]:
                    continue  # the scaler's skip, on the other side by hand
                opt.step()
            del opts[0].grad_scale, opts[0].found_inf
        assert all(torch.equal(a, b) for a, b in zip(*(m.parameters() for m in models), strict=True))
        assert opts[0].state[models[0][0].weight]["step"].item() == 3.0 and opts[0].skipped_steps == 0
        for opt in opts:
            opt.close()
    finally:
        dist.destroy_process_group()
