"""NicAdamW under torch's own engines: FSDP2 (fully_shard), ZeroRedundancyOptimizer, and
torch.distributed.checkpoint. gloo on 127.0.0.1, one process per rank.

FSDP2 + NicAdamW against FSDP2 + torch.optim.AdamW on the same model, data and sharding: the
gradients are the same bits (the same reduce-scatter), so the parameters differ only by the
update's rounding; the tests allow PARAM_TOL (tests/pynq_driver/optim/test_optim.py) and print what they measure.
Checkpoints: saved sharded with DCP (each rank writes its own shard), resumed at another world
size (2 -> 4 -> 1): the state each run reads back is compared bit for bit with the state saved,
and with what torch.optim.AdamW reads from the same checkpoint.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from optimusnic.demo.run import free_port, regression_task
from pynq_driver.optim.sharded import init_gloo, run_ranks

PARAM_TOL = 2e-6


def _fsdp_models(seed, world, mp=False):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world,))
    task = regression_task(seed=seed, outputs=3)  # 3 rows: at 4 ranks one rank's shard of the last layer is empty
    models = [task.model, copy.deepcopy(task.model), copy.deepcopy(task.model)]
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mp else None
    for m in models:
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh, **({"mp_policy": policy} if policy else {}))
        fully_shard(m, mesh=mesh, **({"mp_policy": policy} if policy else {}))
    return task, models


def _train(task, model, opt, steps, rank, world, start=0, clip=None):
    for s in range(start, start + steps):
        x, y = task.batch(s)
        opt.zero_grad()
        out = model(x.chunk(world)[rank])
        torch.nn.functional.mse_loss(out.float(), y.chunk(world)[rank]).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()


def _full(model):
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def _fsdp_worker(rank, world, port, out):
    import torch.distributed as dist

    from pynq_driver.optim.adam import NicAdamW

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        result = {}
        for mp in (False, True):
            task, (model, ref_model, fused_model) = _fsdp_models(30, world, mp=mp)
            nic = NicAdamW(model.parameters(), lr=3e-3, weight_decay=0.05, backend="golden")
            ref = torch.optim.AdamW(ref_model.parameters(), lr=3e-3, weight_decay=0.05)
            # The card holds this rank's local shard of each parameter, in fp32, and nothing else.
            local = sum(p.to_local().numel() for p in model.parameters())
            card = nic.card_numel()
            dtypes = sorted({str(p.dtype) for p in model.parameters()})
            # torch's own two implementations, for scale: fused against foreach on the same run
            fused = torch.optim.AdamW(fused_model.parameters(), lr=3e-3, weight_decay=0.05, fused=True)
            diff = torch_diff = 0.0
            for s in range(12):
                for m, o in ((model, nic), (ref_model, ref), (fused_model, fused)):
                    _train(task, m, o, 1, rank, world, start=s, clip=0.5)
                diff = max(diff, *((a - b).abs().max().item() for a, b in zip(_full(model), _full(ref_model),
                                                                                 strict=True)))
                torch_diff = max(torch_diff, *((a - b).abs().max().item()
                                               for a, b in zip(_full(fused_model), _full(ref_model), strict=True)))
                if mp:
                    # bf16 compute turns a one-ulp difference of an fp32 master into a different bf16
                    # weight and gradient, which then grows: each step starts from torch's masters
                    # (written through .data, which the card picks up), so every step is compared
                    # on the same gradients.
                    for m in (model, fused_model):
                        for p, q in zip(m.parameters(), ref_model.parameters(), strict=True):
                            p.data.to_local().copy_(q.data.to_local())
            p0, q0 = next(model.parameters()), next(ref_model.parameters())
            st = nic.state[p0]["exp_avg"]
            moment = (st.full_tensor() - ref.state[q0]["exp_avg"].full_tensor()).abs().max().item()
            result["mp" if mp else "fp32"] = {
                "diff": diff, "torch_diff": torch_diff, "moment_diff": moment, "local": local, "card": card,
                "param_dtypes": dtypes,
                "state_is_dtensor": type(st).__name__ == "DTensor", "placements": str(st.placements),
                "steps": nic.state[p0]["step"].item(),
            }
            nic.close()
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


# 4 ranks on 2 cores under --full (make test budget); DCP 2 -> 4 -> 1 runs 4 ranks by default
@pytest.mark.parametrize("world_size", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_fsdp2_with_nicadamw_matches_fsdp2_with_adamw(world_size, tmp_path):
    out = tmp_path / "fsdp.json"
    run_ranks(_fsdp_worker, world_size, (free_port(), str(out)), timeout_s=240)
    r = json.loads(out.read_text())
    for kind in ("fp32", "mp"):
        x = r[kind]
        print(f"world {world_size} {kind}: max |param diff| {x['diff']:.3g} (torch fused vs foreach "
              f"{x['torch_diff']:.3g}), exp_avg {x['moment_diff']:.3g}")
        assert x["diff"] < PARAM_TOL and x["moment_diff"] < 1e-6
        assert x["card"] == x["local"]  # the rank's local shard, nothing more
        assert x["param_dtypes"] == ["torch.float32"]  # sharded masters stay fp32 (also with bf16 compute)
        assert x["state_is_dtensor"] and x["placements"] == "(Shard(dim=0),)"
        assert x["steps"] == 12.0


# ---- distributed checkpoint: 2 -> 4 -> 1 ranks ----------------------------------------------------
def _dcp_phase(rank, world, port, ckpt_in, ckpt_out, start, steps, out, use_torch):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from pynq_driver.optim.adam import NicAdamW

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        task, (model, *_) = _fsdp_models(31, world)
        opt = (torch.optim.AdamW(model.parameters(), lr=3e-3) if use_torch
               else NicAdamW(model.parameters(), lr=3e-3, backend="golden"))
        loaded = {}
        if ckpt_in:
            msd, osd = get_state_dict(model, opt)
            dcp.load({"model": msd, "optim": osd}, checkpoint_id=ckpt_in)
            set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
            loaded = _gathered(model, opt)
        _train(task, model, opt, steps, rank, world, start=start)
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt_out)
        saved = _gathered(model, opt)
        if rank == 0:
            torch.save({"loaded": loaded, "saved": saved}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _gathered(model, opt):
    """Full state and parameters (for the test's comparison only: the checkpoint itself is sharded)."""
    out = {}
    for (name, p) in model.named_parameters():
        out[name] = p.full_tensor().clone()
        for k, v in opt.state[p].items():
            out[f"{name}.{k}"] = v.full_tensor().clone() if hasattr(v, "full_tensor") else v.clone()
    return out


def test_dcp_resharded_resume_2_4_1(tmp_path):
    """NicAdamW: 2 ranks save, 4 load and save, 1 loads. torch.optim.AdamW loads the NicAdamW
    checkpoint of the 2-rank run at 4 ranks (interchange) and runs the same 4 -> 1 resume."""
    runs = {}
    nic_w2 = tmp_path / "nic-w2"
    for kind, use_torch in (("nic", False), ("torch", True)):
        ck = [tmp_path / f"{kind}-w4", tmp_path / f"{kind}-w1"]
        res = [tmp_path / f"{kind}-{i}.pt" for i in range(3)]
        if kind == "nic":
            run_ranks(_dcp_phase, 2, (free_port(), None, str(nic_w2), 0, 5, str(res[0]), False), timeout_s=240)
        run_ranks(_dcp_phase, 4, (free_port(), str(nic_w2), str(ck[0]), 5, 5, str(res[1]), use_torch), timeout_s=240)
        run_ranks(_dcp_phase, 1, (free_port(), str(ck[0]), str(ck[1]), 10, 5, str(res[2]), use_torch), timeout_s=240)
        runs[kind] = [torch.load(r) if r.exists() else None for r in res]
        # Sharded on disk: every rank wrote its own file, none the whole state.
        assert len(list(ck[0].glob("*.distcp"))) == 4
    saved_w2 = runs["nic"][0]["saved"]
    for kind in ("nic", "torch"):
        r = runs[kind]
        for before, after in ((saved_w2, r[1]["loaded"]), (r[1]["saved"], r[2]["loaded"])):
            assert before.keys() == after.keys()
            for k in before:  # what was saved at one world size is what is read back at the next
                assert torch.equal(before[k], after[k]), (kind, k)
    # From the same state at step 5, both optimizers run 4 ranks then 1: they track each other.
    nic, tor = runs["nic"][2]["saved"], runs["torch"][2]["saved"]
    assert nic.keys() == tor.keys()
    diff = max((nic[k] - tor[k]).abs().max().item() for k in nic if not k.endswith("step"))
    print(f"2 -> 4 -> 1 ranks, 15 steps: max |diff| NicAdamW vs AdamW (params and moments) {diff:.3g}")
    assert diff < PARAM_TOL
    assert all(nic[k].item() == tor[k].item() == 15.0 for k in nic if k.endswith("step"))


# ---- ZeroRedundancyOptimizer(optimizer_class=NicAdamW) -------------------------------------------
def _zero_worker(rank, world, port, out):
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pynq_driver.optim.adam import NicAdamW

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        task = regression_task(seed=32)
        models = [DDP(task.model), DDP(copy.deepcopy(task.model))]
        opts = [ZeroRedundancyOptimizer(models[0].parameters(), optimizer_class=NicAdamW, lr=3e-3,
                                        weight_decay=0.05, backend="golden"),
                ZeroRedundancyOptimizer(models[1].parameters(), optimizer_class=torch.optim.AdamW, lr=3e-3,
                                        weight_decay=0.05)]
        for s in range(10):
            x, y = task.batch(s)
            for m, opt in zip(models, opts, strict=True):
                opt.zero_grad()
                task.loss(m, x.chunk(world)[rank], y.chunk(world)[rank]).backward()
                opt.step()
        # consolidate_state_dict / state_dict / load_state_dict: ZeRO writes the local optimizer's
        # state (opt.optim.state[p] = ...), which lands on the card.
        for opt in opts:
            opt.consolidate_state_dict(to=0)
        sd = opts[0].state_dict() if rank == 0 else None
        objs = [sd]
        dist.broadcast_object_list(objs, src=0)
        # The resumed optimizer steps on the same gradients (a second DDP would reduce in another
        # bucket order, which at 4 ranks rounds differently).
        fresh_model = copy.deepcopy(models[0].module)
        fresh = ZeroRedundancyOptimizer(fresh_model.parameters(), optimizer_class=NicAdamW, lr=3e-3,
                                        weight_decay=0.05, backend="golden")
        fresh.load_state_dict(objs[0])
        for s in range(10, 15):
            x, y = task.batch(s)
            for m, opt in zip(models, opts, strict=True):
                opt.zero_grad()
                task.loss(m, x.chunk(world)[rank], y.chunk(world)[rank]).backward()
            for p, q in zip(fresh_model.parameters(), models[0].parameters(), strict=True):
                p.grad = q.grad.clone()
            for opt in (*opts, fresh):
                opt.step()
        models.append(fresh_model)
        diff = max((a - b).abs().max().item() for a, b in zip(models[0].parameters(), models[1].parameters(),
                                                               strict=True))
        same = all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[2].parameters(), strict=True))
        owned = sum(p.numel() for g in opts[0].optim.param_groups for p in g["params"])
        card = opts[0].optim.card_numel()
        total = sum(p.numel() for p in models[0].parameters())
        if rank == 0:
            Path(out).write_text(json.dumps({"diff": diff, "resumed_identical": same, "owned": owned, "card": card,
                                             "total": total}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


# 4 ranks on 2 cores under --full (make test budget); DCP 2 -> 4 -> 1 runs 4 ranks by default
@pytest.mark.parametrize("world_size", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_zero_redundancy_optimizer_with_nicadamw(world_size, tmp_path):
    out = tmp_path / "zero.json"
    run_ranks(_zero_worker, world_size, (free_port(), str(out)), timeout_s=240)
    r = json.loads(out.read_text())
    print(f"ZeroRedundancyOptimizer, {world_size} ranks: max |param diff| vs AdamW {r['diff']:.3g}")
    assert r["diff"] < PARAM_TOL
    assert r["resumed_identical"]  # consolidated state_dict -> a new ZeRO + NicAdamW: bit for bit
    assert r["card"] == r["owned"] < r["total"]  # this rank's partition only


# ---- recipes: bf16 parameters with fp32 masters on the card; CPUOffloadPolicy --------------------
RECIPE_STEPS = 30
OTHER_STEPS = 10  # the CPUOffloadPolicy pair, and mixed precision + NicAdamW (there for its bytes only)
MASTER_TOL = 1e-5  # card masters vs torch's fp32 masters over RECIPE_STEPS free-running steps (1.7e-6 measured)


def _device_tensors_held(opt, params):
    """Bytes of torch tensors reachable from `opt` that live on the parameters' device, the
    parameters and gradients themselves and 0-dim tensors (torch's step counts, host scalars on a
    GPU run too) excepted: the optimizer's state on the device. Found by walking the object graph
    (gc referents, closures), so whatever the optimizer keeps is seen, not what it says it keeps."""
    import gc
    import types

    import numpy as np

    device = params[0].to_local().device
    skip = {t.untyped_storage().data_ptr() for p in params
            for t in (p.to_local(), p.grad.to_local() if p.grad is not None else None) if t is not None}
    seen, todo, storages = set(), [opt], {}
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            t = getattr(o, "_local_tensor", o)
            if t.dim() and t.device == device and t.untyped_storage().data_ptr() not in skip:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            continue
        if isinstance(o, (types.ModuleType, type, np.ndarray, str, bytes, int, float, torch.nn.Module)):
            continue
        if isinstance(o, types.FunctionType):
            todo.extend(c.cell_contents for c in (o.__closure__ or ()))
            continue
        todo.extend(gc.get_referents(o))
    return sum(storages.values())


def _bytes_per_param(opt, model):
    params = list(model.parameters())
    local = sum(p.to_local().numel() for p in params)
    held = sum(p.to_local().nbytes for p in params) + sum(p.grad.to_local().nbytes for p in params)
    return (held + _device_tensors_held(opt, params)) / local


def _recipe_models(world, seed=33):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world,))
    task = regression_task(seed=seed, outputs=3)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    # The recipe's pin_memory=True pins through the accelerator ("Cannot access accelerator device
    # when none is available" on this machine): here the same policy without page-locking.
    offload = CPUOffloadPolicy(pin_memory=torch.accelerator.is_available())
    # The recipe's card masters start from the bf16 model (fp32 values rounded once): so do torch's here.
    rounded = copy.deepcopy(task.model).to(torch.bfloat16).float()
    kinds = {
        "bf16": (copy.deepcopy(task.model).to(torch.bfloat16), {}),  # the recipe: bf16 sharded parameters
        "mp_torch": (copy.deepcopy(rounded), {"mp_policy": mp}),  # torch's fp32 masters, bf16 compute
        "mp_nic": (copy.deepcopy(rounded), {"mp_policy": mp}),
        "offload_nic": (copy.deepcopy(task.model), {"offload_policy": offload}),
        "offload_torch": (copy.deepcopy(task.model), {"offload_policy": offload}),
    }
    for m, kw in kinds.values():
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh, **kw)
        fully_shard(m, mesh=mesh, **kw)
    return task, {k: m for k, (m, _) in kinds.items()}


def _recipe_step(task, model, opt, s, rank, world, dtype=torch.float32):
    x, y = task.batch(s)
    opt.zero_grad()
    out = model(x.chunk(world)[rank].to(dtype))
    torch.nn.functional.mse_loss(out.float(), y.chunk(world)[rank]).backward()
    opt.step()


def _recipe_worker(rank, world, port, steps, ckpt, out):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from pynq_driver.optim.adam import MASTER_KEY, NicAdamW

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    try:
        task, models = _recipe_models(world)
        opts = {k: (torch.optim.AdamW if k.endswith("torch") else
                    lambda ps, **kw: NicAdamW(ps, backend="golden", **kw))(m.parameters(), lr=3e-3, weight_decay=0.05)
                for k, m in models.items()}
        nic, ref, card = models["bf16"], models["mp_torch"], opts["bf16"]
        master = 0.0
        for s in range(steps):
            for k, m in models.items():
                if k in ("bf16", "mp_torch") or s < OTHER_STEPS:
                    _recipe_step(task, m, opts[k], s, rank, world, torch.bfloat16 if k == "bf16" else torch.float32)
            master = max(master, *((card.state[p][MASTER_KEY].full_tensor() - q.full_tensor()).abs().max().item()
                                   for p, q in zip(nic.parameters(), ref.parameters(), strict=True)))
        offload = max((p.full_tensor() - q.full_tensor()).abs().max().item()
                      for p, q in zip(models["offload_nic"].parameters(), models["offload_torch"].parameters(),
                                      strict=True))
        result = {
            "master_diff": master, "offload_diff": offload,
            "param_dtypes": sorted({str(p.dtype) for p in nic.parameters()}),
            "master_dtype": str(card.state[next(nic.parameters())][MASTER_KEY].dtype),
            "offload_param_device": str(next(models["offload_nic"].parameters()).to_local().device),
            "bytes_per_param": {k: _bytes_per_param(opts[k], models[k]) for k in ("bf16", "mp_nic", "mp_torch")},
        }
        if ckpt:
            msd, osd = get_state_dict(nic, card)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
            saved = {f"{n}.{MASTER_KEY}": card.state[p][MASTER_KEY].full_tensor() for n, p in nic.named_parameters()}
            saved.update({n: p.full_tensor() for n, p in nic.named_parameters()})
            if rank == 0:
                torch.save(saved, Path(out).with_suffix(".pt"))
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        for o in opts.values():
            if hasattr(o, "close"):
                o.close()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _recipe_resume_worker(rank, world, port, ckpt, out):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from pynq_driver.optim.adam import MASTER_KEY, NicAdamW

    init_gloo(rank, world, port, 60.0)
    try:
        _, models = _recipe_models(world, seed=34)  # other values everywhere: all must come from the checkpoint
        model = models["bf16"]
        opt = NicAdamW(model.parameters(), lr=3e-3, weight_decay=0.05, backend="golden")
        msd, osd = get_state_dict(model, opt)
        dcp.load({"model": msd, "optim": osd}, checkpoint_id=ckpt)
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        loaded = {f"{n}.{MASTER_KEY}": opt.state[p][MASTER_KEY].full_tensor() for n, p in model.named_parameters()}
        loaded.update({n: p.full_tensor() for n, p in model.named_parameters()})
        if rank == 0:
            torch.save(loaded, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_fsdp2_recipes_bf16_parameters_and_cpu_offload(tmp_path):
    """README's recipes at 2 ranks. bf16 sharded parameters (`model.to(bfloat16)` before
    fully_shard), NicAdamW holding fp32 masters on the card, against torch's fp32 masters
    (MixedPrecisionPolicy(param_dtype=bf16), AdamW, started from the same bf16-rounded weights): the
    masters agree within MASTER_TOL at every one of RECIPE_STEPS free-running steps,
    and the device holds 4 B/param (parameter + gradient + optimizer state) instead of 16
    (mixed precision with NicAdamW: 8). CPUOffloadPolicy (pin_memory=True where an accelerator
    exists) with NicAdamW against the same with AdamW: within PARAM_TOL."""
    out = tmp_path / "recipe.json"
    run_ranks(_recipe_worker, 2, (free_port(), RECIPE_STEPS, None, str(out)), timeout_s=300)
    r = json.loads(out.read_text())
    b = r["bytes_per_param"]
    print(f"bf16 parameters + NicAdamW, {RECIPE_STEPS} steps at 2 ranks: card masters vs AdamW's fp32 masters, "
          f"max over the steps {r['master_diff']:.3g}; CPUOffloadPolicy: NicAdamW vs AdamW "
          f"after {OTHER_STEPS} steps {r['offload_diff']:.3g}; "
          f"device bytes/param (parameter + gradient + optimizer state): bf16 recipe {b['bf16']:.2f}, "
          f"mixed precision + NicAdamW {b['mp_nic']:.2f}, mixed precision + AdamW {b['mp_torch']:.2f}")
    assert r["param_dtypes"] == ["torch.bfloat16"] and r["master_dtype"] == "torch.float32"
    assert r["master_diff"] < MASTER_TOL
    assert r["offload_diff"] < PARAM_TOL and r["offload_param_device"] == "cpu"
    assert b == {"bf16": 4.0, "mp_nic": 8.0, "mp_torch": 16.0}


@pytest.mark.slow
def test_fsdp2_bf16_recipe_dcp_2_to_1_restores_the_masters(tmp_path):
    """The bf16 recipe saved with DCP at 2 ranks and loaded at 1: the card's fp32 masters and the
    bf16 parameters come back bit for bit."""
    out, ckpt = tmp_path / "recipe.json", tmp_path / "ckpt-w2"
    run_ranks(_recipe_worker, 2, (free_port(), 5, str(ckpt), str(out)), timeout_s=300)
    saved = torch.load(out.with_suffix(".pt"))
    res = tmp_path / "resumed.pt"
    run_ranks(_recipe_resume_worker, 1, (free_port(), str(ckpt), str(res)), timeout_s=300)
    loaded = torch.load(res)
    assert saved.keys() == loaded.keys()
    for k in saved:
        assert torch.equal(saved[k], loaded[k]), k  # masters and bf16 parameters, bit for bit
