"""RingNicAdamW: the ranks' csim cards synchronise the gradients and run AdamW on the ring.

Against DDP + torch.optim.AdamW over gloo on the same model, data and start: the parameters
differ by the update's and the sum's rounding only (PARAM_TOL, as tests/pynq_driver/optim/
test_distributed.py) and are the same bits on every rank. Spawned ranks (gloo on 127.0.0.1, the
ring's store a TCPStore client of the group's own store), then `torchrun` running
docs/examples/ring_train.py: parity, a checkpoint resume that continues bit for bit, and a rank
that leaves making the others raise PeerTimeout within the timeout.

The parent opens a csim device of the ring's kernel first, so the ranks find the C simulation
library built (hls/csim/compile.py renames a finished build into place, so a race would only
compile twice; warming avoids the wasted time on two cores).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import gloo_teardown
import pytest
import torch

from optimusnic.demo.run import free_port
from pynq_driver.optim.sharded import init_gloo, run_ranks

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "docs" / "examples" / "ring_train.py"
TEARDOWN = Path(gloo_teardown.__file__)  # runs the example; counts gloo's threads after destroy_process_group
PARAM_TOL = 2e-6


@pytest.fixture(scope="module", autouse=True)
def warm_csim():
    from hls.spec import KernelSpec
    from pynq_driver.backends import open_device

    for optimizer, wire_dtype in (("adamw", "fp32"), ("adamw", "bf16"), ("adam", "fp32")):
        open_device("csim", KernelSpec(optimizer=optimizer, grad_dtype=wire_dtype)).close()


class _Net(torch.nn.Sequential):
    def __init__(self) -> None:
        super().__init__(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
        self.extra = torch.nn.Parameter(torch.randn(3))  # has a gradient on rank 0 only

    def forward(self, x, use_extra):
        out = super().forward(x)
        return out + self.extra if use_extra else out


def _model(seed=0):
    torch.manual_seed(seed)
    return _Net()


def _loss(model, step, rank, world):
    g = torch.Generator().manual_seed(step)
    x, y = torch.randn(4 * world, 12, generator=g), torch.randn(4 * world, 3, generator=g)
    return torch.nn.functional.mse_loss(model(x[rank::world], rank == 0), y[rank::world])


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _bf16_hook(state, bucket):
    """DDP's bf16_compress_hook on gloo (torch's own wants NCCL): bf16 all-reduce, then / N in fp32."""
    import torch.distributed as dist

    world = dist.get_world_size()
    fut = dist.all_reduce(bucket.buffer().to(torch.bfloat16), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].float().div_(world))


def _parity_worker(rank, world, port, out, wire_dtype="fp32"):
    import torch.distributed as dist

    from hls.errors import UserError
    from pynq_driver.optim import RingNicAdam, RingNicAdamW

    torch.set_num_threads(1)
    init_gloo(rank, world, port, 60.0)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    result = {}
    try:
        configs = [("plain", RingNicAdamW, torch.optim.AdamW, None), ("clip", RingNicAdamW, torch.optim.AdamW, 0.05),
                   ("adam", RingNicAdam, torch.optim.Adam, None)]
        for comm, (key, ring_cls, ref_cls, clip) in enumerate(configs if wire_dtype == "fp32" else configs[:1]):
            model, ref_model = _model(), _model()
            if rank:  # another start on the other ranks: the optimizer broadcasts rank 0's, as DDP does
                with torch.no_grad():
                    for p in (*model.parameters(), *ref_model.parameters()):
                        p.add_(rank)
            ref = torch.nn.parallel.DistributedDataParallel(ref_model, find_unused_parameters=True)
            if wire_dtype == "bf16":  # bf16 gradient compression: the same rounding as the bf16 wire at N = 2
                ref.register_comm_hook(None, _bf16_hook)
            groups = lambda m: [{"params": list(m[0].parameters())},  # noqa: E731
                                {"params": [*m[2].parameters(), m.extra]}]
            opt = ring_cls(groups(model), lr=3e-3, weight_decay=0.05, backend="csim", store=store,
                           wire_dtype=wire_dtype, max_norm=clip, timeout_s=20.0, comm=comm)
            ref_opt = ref_cls(groups(ref_model), lr=3e-3, weight_decay=0.05)
            scheds = [torch.optim.lr_scheduler.StepLR(o, 4, 0.5) for o in (opt, ref_opt)]
            diff = 0.0
            for s in range(12):
                if s == 6:  # an edit between steps on every rank (as model.load_state_dict): the cards pick it up
                    with torch.no_grad():
                        for m in (model, ref_model):
                            m[0].weight.mul_(0.5)
                for o, net in ((opt, model), (ref_opt, ref)):
                    o.zero_grad()
                    _loss(net, s, rank, world).backward()
                    if o is ref_opt and clip is not None:
                        torch.nn.utils.clip_grad_norm_(ref_model.parameters(), clip)
                    o.step()
                for sc in scheds:
                    sc.step()
                diff = max(diff, (_flat(model) - _flat(ref_model)).abs().max().item())
            flat = _flat(model)
            gathered = [torch.empty_like(flat) for _ in range(world)]
            dist.all_gather(gathered, flat)  # the test's check, not the optimizer's
            same = all(torch.equal(g.view(torch.int32), flat.view(torch.int32)) for g in gathered)
            result[key] = {"diff": diff, "same_bits": same, "lr": opt.param_groups[0]["lr"],
                           "ref_lr": ref_opt.param_groups[0]["lr"], "skipped": opt.skipped_steps,
                           "checksum": flat.double().sum().item()}
            if clip is not None:  # inf on one rank: the two-phase step skips it on every card
                before = _flat(model).clone()
                opt.zero_grad()
                _loss(model, 99, rank, world).backward()
                if rank == world - 1:
                    model[0].weight.grad[0, 0] = float("inf")
                opt.step()
                result[key]["inf_skip"] = [opt.last_step_skipped, opt.skipped_steps, torch.equal(_flat(model), before),
                                           opt.state_dict()["state"][0]["step"].item()]
            # refusals: a checkpoint of another world size, a different lr per group (before any card opens)
            sd = opt.state_dict()
            sd["ring"] = {**sd["ring"], "world": world + 1}
            try:
                opt.load_state_dict(sd)
                result[key]["world_refusal"] = None
            except UserError as exc:
                result[key]["world_refusal"] = str(exc)
            result[key]["state_keys"] = sorted(opt.state_dict()["state"][0])
            try:
                opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(3))]})
                result[key]["add_group_refusal"] = None
            except UserError as exc:
                result[key]["add_group_refusal"] = str(exc)
            opt.close()
        try:
            RingNicAdamW([{"params": [torch.nn.Parameter(torch.ones(3))], "lr": 1e-3},
                          {"params": [torch.nn.Parameter(torch.ones(3))], "lr": 2e-3}], store=store)
            result["group_refusal"] = None
        except UserError as exc:
            result["group_refusal"] = str(exc)
        if rank == 0:
            Path(out).write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_ring_matches_ddp_adamw_and_ranks_agree(world, tmp_path):
    out = tmp_path / "parity.json"
    t0 = time.monotonic()
    run_ranks(_parity_worker, world, (free_port(), str(out)), timeout_s=240)
    r = json.loads(out.read_text())
    assert r["clip"]["inf_skip"] == [True, 1, True, 12.0]
    for key in ("plain", "clip", "adam"):
        x = r[key]
        print(f"world {world} {key}: max |param diff| vs DDP+AdamW {x['diff']:.3g} ({time.monotonic() - t0:.1f} s)")
        assert x["diff"] < PARAM_TOL, x
        assert x["same_bits"], x
        assert x["lr"] == x["ref_lr"] == 3e-3 * 0.125  # the scheduler's lr reached the cards
        assert x["skipped"] == 0
        assert "same world size" in x["world_refusal"], x
        assert x["state_keys"] == ["exp_avg", "exp_avg_sq", "master_param", "step"]
        assert "pass every param group to the constructor" in x["add_group_refusal"]
    assert r["plain"]["checksum"] != r["clip"]["checksum"]  # the clip did clip
    assert "every group needs the same" in r["group_refusal"]


def test_bf16_wire_matches_ddp_with_bf16_compression(tmp_path):
    """The gradients cross the wire as bf16: against DDP with its bf16 compression hook (at two ranks
    both round each gradient to bf16 and their sum to bf16, and halve it exactly)."""
    out = tmp_path / "parity.json"
    run_ranks(_parity_worker, 2, (free_port(), str(out), "bf16"), timeout_s=240)
    x = json.loads(out.read_text())["plain"]
    print(f"bf16 wire, world 2: max |param diff| vs DDP + bf16_compress_hook + AdamW {x['diff']:.3g}")
    assert x["diff"] < PARAM_TOL and x["same_bits"], x


def _world_one_worker(rank, world, port, out):
    from hls.errors import UserError
    from pynq_driver.optim import RingNicAdamW

    init_gloo(rank, world, port, 30.0)
    try:
        RingNicAdamW([torch.nn.Parameter(torch.ones(3))])
    except UserError as exc:
        Path(out).write_text(str(exc))
    finally:
        torch.distributed.destroy_process_group()


def test_refusals_before_any_card_opens(tmp_path, monkeypatch):
    from hls.errors import UserError
    from pynq_driver.optim import RingNicAdamW
    from pynq_driver.optim.ring import default_store

    with pytest.raises(UserError, match=r"call dist.init_process_group\(...\) first"):
        RingNicAdamW([torch.nn.Parameter(torch.ones(3))])
    # a misspelt keyword is a TypeError naming the optimizer, as torch's optimizers raise it
    with pytest.raises(TypeError, match=r"RingNicAdamW.__init__\(\) got an unexpected keyword argument 'lrr'"):
        RingNicAdamW([torch.nn.Parameter(torch.ones(3))], lrr=1e-3)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(UserError, match="pass store=dist.TCPStore"):
        default_store(1.0)
    out = tmp_path / "world1.txt"
    run_ranks(_world_one_worker, 1, (free_port(), str(out)), timeout_s=120)
    assert "a ring needs 2 .. 255 ranks, the process group has 1; on one rank use NicAdamW" in out.read_text()


# ---- torchrun: docs/examples/ring_train.py ------------------------------------------------------
def _torchrun(tmp_path: Path, name: str, nproc: int, *args: str, timeout: float = 240) -> tuple[int, Path, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    logs = tmp_path / f"logs-{name}"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                        "--master-port", str(free_port()), "--log-dir", str(logs), "--redirects", "3",
                        str(TEARDOWN), str(EXAMPLE), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, logs, time.monotonic() - t0


def _log(logs: Path, rank: int, what: str) -> str:
    return "\n".join(f.read_text() for f in logs.rglob(f"{what}.log") if f.parent.name == str(rank))


def _results(run: Path, world: int) -> list[dict]:
    return [torch.load(run / f"rank{r}.pt", weights_only=False) for r in range(world)]


def _same_bits(results: list[dict]) -> bool:
    first = results[0]["params"].view(torch.int32)
    return all(torch.equal(first, r["params"].view(torch.int32)) for r in results)


# 4 ranks on 2 cores: 33 s (CI, 2026-12-04), under --full for the make test budget; 2 and 3 (even, odd) stay
@pytest.mark.parametrize("nproc", [2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_torchrun_example_matches_ddp(nproc, tmp_path):
    code, logs, seconds = _torchrun(tmp_path, "run", nproc, "--steps", "12", "--compare", "--out", "run")
    assert code == 0, [_log(logs, r, "stderr")[-2000:] for r in range(nproc)]
    # The group died inside destroy_process_group (gloo's workers joined there, with the GIL
    # released), not later in a DDP reducer's destructor holding the GIL: that teardown hung a
    # rank at exit under load.
    for r in range(nproc):
        assert f"{gloo_teardown.MARK} 0" in _log(logs, r, "stdout"), _log(logs, r, "stdout")[-1000:]
    res = _results(tmp_path / "run", nproc)
    print(f"torchrun x{nproc}: max |param diff| vs DDP+AdamW {res[0]['ref_diff']:.3g} ({seconds:.1f} s)")
    assert _same_bits(res)
    assert all(r["ref_diff"] < PARAM_TOL for r in res)
    assert res[0]["losses"][-1] < res[0]["losses"][0]


def test_torchrun_checkpoint_resume_is_bit_exact(tmp_path):
    code, logs, _ = _torchrun(tmp_path, "full", 2, "--steps", "12", "--save-at", "5", "--out", "full")
    assert code == 0, _log(logs, 0, "stderr")[-2000:]
    code, logs, _ = _torchrun(tmp_path, "resumed", 2, "--steps", "12", "--resume", "--out", "resumed")
    assert code == 0, _log(logs, 0, "stderr")[-2000:]
    full, resumed = _results(tmp_path / "full", 2), _results(tmp_path / "resumed", 2)
    assert _same_bits(full + resumed)
    assert resumed[0]["losses"] == full[0]["losses"][5:]


def test_torchrun_a_rank_that_leaves_makes_the_others_raise(tmp_path):
    timeout = 5.0  # the peer timeout; live peers answer within ms, also on a loaded machine
    code, logs, seconds = _torchrun(tmp_path, "die", 3, "--steps", "12", "--die-rank", "1", "--die-at", "3",
                                    "--timeout", str(timeout), timeout=120)
    print(f"torchrun x3, rank 1 left after step 3: exit {code} after {seconds:.1f} s")
    assert code != 0
    assert "leaving after step 3" in _log(logs, 1, "stdout")
    for rank in (0, 2):
        err = _log(logs, rank, "stderr")
        # torchrun prefixes each line with [rank<r>]:
        lines = [ln for ln in err.splitlines() if re.search(r"pynq_driver\.net\.errors\.PeerTimeout: ", ln)]
        assert lines, err[-2000:]
        assert f"PeerTimeout: rank {rank}: ring peer rank 1 sent nothing for" in lines[-1], lines
        silent = float(re.search(r"sent nothing for ([0-9.]+) s", lines[-1]).group(1))
        assert timeout <= silent < timeout + 3.0, lines[-1]  # raised once the timeout passed, not later
    assert seconds < 90  # start-up, three steps, the timeout and torchrun's shutdown
