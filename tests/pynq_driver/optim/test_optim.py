"""NicAdamW / NicAdam against torch.optim.AdamW / Adam on real models.

The golden semantics (design.md section 3) differ from torch's only by rounding: torch divides
sqrt(v) by sqrt(bc2) and lr by bc1 per step in its own order, the kernel multiplies by scalars
rounded once to fp32. Measured on this machine (csim backend, lr 3e-3, 60 steps):
  MLP regression (5.5k params):      max |param diff| 7.5e-8, max relative loss diff 2.9e-7
  char transformer (43k params):     max |param diff| 2.4e-7, max relative loss diff 2.0e-7
The tests allow 2e-6 (params) and 1e-5 (relative loss), ten times the worst we saw.
"""

from __future__ import annotations

import copy

import pytest
import torch

from hls.errors import UserError
from optimusnic.demo.run import lm_task, max_param_diff, regression_task
from pynq_driver.optim.adam import MASTER_KEY, NicAdam, NicAdamW

PARAM_TOL = 2e-6
LOSS_RTOL = 1e-5


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny models: one thread is fastest, and two threads thrash on a loaded 2-core CI box.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train(task, model, opt, steps, *, start=0, scheduler=None, losses=None):
    losses = [] if losses is None else losses
    for s in range(start, start + steps):
        x, y = task.batch(s)
        opt.zero_grad()
        loss = task.loss(model, x, y)
        loss.backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
    return losses


def rel_loss_diff(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


def params_of(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("make_task", [regression_task, lm_task], ids=["mlp", "transformer"])
def test_parity_with_torch_adamw_csim(make_task):
    task = make_task()
    ref = copy.deepcopy(task.model)
    nic = NicAdamW(task.model.parameters(), lr=3e-3)  # default backend: csim
    assert {s.backend for s in nic.shards()} == {"csim"}
    l_nic = train(task, task.model, nic, 60)
    l_ref = train(task, ref, torch.optim.AdamW(ref.parameters(), lr=3e-3), 60)
    diff = max_param_diff(task.model, ref)
    print(f"{task.name}: 60 steps, max |param diff| {diff:.3g}, rel loss diff {rel_loss_diff(l_nic, l_ref):.3g}")
    assert l_nic[-1] < 0.9 * l_nic[0]  # it trained
    assert rel_loss_diff(l_nic, l_ref) < LOSS_RTOL
    assert diff < PARAM_TOL


def test_csim_equals_golden_bit_for_bit():
    runs = []
    for backend in ("golden", "csim"):
        task = regression_task(seed=3)
        opt = NicAdamW(task.model.parameters(), lr=1e-2, weight_decay=0.1, backend=backend)
        train(task, task.model, opt, 20)
        runs.append(params_of(task.model))
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_nic_adam_matches_torch_adam_with_l2():
    task = regression_task(seed=1)
    ref = copy.deepcopy(task.model)
    nic = NicAdam(task.model.parameters(), lr=3e-3, weight_decay=1e-2, backend="golden")
    assert nic.param_groups[0]["decoupled_weight_decay"] is False
    l_nic = train(task, task.model, nic, 50)
    tor = torch.optim.Adam(ref.parameters(), lr=3e-3, weight_decay=1e-2)
    l_ref = train(task, ref, tor, 50)
    assert_same_format(nic.state_dict(), tor.state_dict())
    assert rel_loss_diff(l_nic, l_ref) < LOSS_RTOL
    assert max_param_diff(task.model, ref) < PARAM_TOL


def group_params(model):
    """Two groups: weights (lr 5e-3, wd 0.1) and biases (lr 1e-2, no decay)."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    return [{"params": weights, "lr": 5e-3, "weight_decay": 0.1}, {"params": biases, "lr": 1e-2, "weight_decay": 0.0}]


@pytest.mark.parametrize("make_sched", [
    lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=[1e-2, 2e-2], total_steps=40),
    lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40, eta_min=1e-4),
    lambda o: torch.optim.lr_scheduler.SequentialLR(o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=10),
                                                        torch.optim.lr_scheduler.StepLR(o, 10, 0.5)], [10]),
], ids=["onecycle", "cosine", "warmup-step"])
def test_param_groups_and_lr_schedulers(make_sched):
    task = regression_task(seed=2)
    ref = copy.deepcopy(task.model)
    nic = NicAdamW(group_params(task.model), backend="golden")
    tor = torch.optim.AdamW(group_params(ref))
    assert len(nic.shards()) == 2
    l_nic = train(task, task.model, nic, 40, scheduler=make_sched(nic))
    l_ref = train(task, ref, tor, 40, scheduler=make_sched(tor))
    assert [g["lr"] for g in nic.param_groups] == [g["lr"] for g in tor.param_groups]
    assert rel_loss_diff(l_nic, l_ref) < LOSS_RTOL
    assert max_param_diff(task.model, ref) < PARAM_TOL


def assert_same_format(sd_nic, sd_torch):
    assert sd_nic["param_groups"] == sd_torch["param_groups"]
    assert sd_nic["state"].keys() == sd_torch["state"].keys()
    for k, st in sd_torch["state"].items():
        mine = sd_nic["state"][k]
        assert set(mine) == set(st)
        for key, value in st.items():
            assert mine[key].dtype == value.dtype and mine[key].shape == value.shape, key


def test_state_dict_format_is_torch_adamw():
    task = regression_task()
    ref = copy.deepcopy(task.model)
    nic = NicAdamW(group_params(task.model), backend="golden")
    tor = torch.optim.AdamW(group_params(ref))
    assert nic.state_dict()["state"] == {}  # no state before the first step, as torch
    train(task, task.model, nic, 3)
    train(task, ref, tor, 3)
    sd_nic, sd_tor = nic.state_dict(), tor.state_dict()
    assert_same_format(sd_nic, sd_tor)
    assert sd_nic["state"][0]["step"].item() == 3.0
    for k in sd_tor["state"]:
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sd_nic["state"][k][key], sd_tor["state"][k][key], rtol=1e-5, atol=1e-9)
    # optimizer.state: torch's keys, each value read from the card on access
    assert len(nic.state) == len(tor.state)
    for p, q in zip(task.model.parameters(), ref.parameters(), strict=True):
        assert set(nic.state[p]) == set(tor.state[q])
        torch.testing.assert_close(nic.state[p]["exp_avg"], tor.state[q]["exp_avg"], rtol=1e-5, atol=1e-9)
        assert nic.state[p]["step"].item() == 3.0


def test_switch_between_torch_and_nic_mid_training():
    """torch.optim.AdamW for 15 steps, NicAdamW for 15, torch again for 15: as if never switched."""
    task = regression_task(seed=4)
    straight = copy.deepcopy(task.model)
    l_straight = train(task, straight, torch.optim.AdamW(group_params(straight), lr=3e-3), 45)

    model = task.model
    losses = []
    tor = torch.optim.AdamW(group_params(model), lr=3e-3)
    train(task, model, tor, 15, losses=losses)
    nic = NicAdamW(group_params(model), lr=3e-3, backend="golden")
    nic.load_state_dict(tor.state_dict())
    assert nic.shards()[0].step_count == 15
    train(task, model, nic, 15, start=15, losses=losses)
    tor2 = torch.optim.AdamW(group_params(model), lr=3e-3)
    tor2.load_state_dict(nic.state_dict())
    assert tor2.state_dict()["state"][0]["step"].item() == 30.0
    train(task, model, tor2, 15, start=30, losses=losses)
    assert rel_loss_diff(losses, l_straight) < LOSS_RTOL
    assert max_param_diff(model, straight) < PARAM_TOL


def test_nic_checkpoint_resumes_bit_for_bit():
    task = regression_task(seed=5)
    twin = copy.deepcopy(task.model)
    a = NicAdamW(task.model.parameters(), lr=5e-3, backend="golden")
    train(task, task.model, a, 30)
    # Checkpoint after 10 steps of the twin, into a fresh optimizer (another device).
    b = NicAdamW(twin.parameters(), lr=5e-3, backend="golden")
    train(task, twin, b, 10)
    sd = b.state_dict()
    b.close()
    c = NicAdamW(twin.parameters(), lr=5e-3, backend="golden")
    c.load_state_dict(sd)
    train(task, twin, c, 20, start=10)
    for p, q in zip(task.model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)


def test_bf16_parameters_keep_fp32_masters_on_the_card():
    torch.manual_seed(0)
    task = regression_task(seed=6)
    model = task.model.to(torch.bfloat16)
    masters = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
    host = torch.optim.AdamW(masters, lr=3e-3)
    nic = NicAdamW(model.parameters(), lr=3e-3, backend="golden")
    assert {s.spec.grad_dtype for s in nic.shards()} == {"bf16"}
    for s in range(30):
        x, y = task.batch(s)
        nic.zero_grad()
        task.loss(model, x.bfloat16(), y.bfloat16()).backward()
        for m, p in zip(masters, model.parameters(), strict=True):
            m.grad = p.grad.float()
        host.step()
        nic.step()
    card = torch.cat([nic.state[p][MASTER_KEY].reshape(-1) for p in model.parameters()])
    flat_masters = torch.cat([m.detach().reshape(-1) for m in masters])
    # The card's masters track torch's fp32 AdamW on the same bf16 gradients (rounding only)...
    assert (card - flat_masters).abs().max() < PARAM_TOL
    # ... and the model holds their bf16 rounding, bit for bit.
    flat_model = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(flat_model, card.bfloat16())

    sd = nic.state_dict()
    assert sd["state"][0][MASTER_KEY].dtype == torch.float32
    # Into torch.optim.AdamW (it casts the moments to bf16 and ignores the masters) and back:
    tor = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tor.load_state_dict(sd)
    nic2 = NicAdamW(model.parameters(), lr=3e-3, backend="golden")

    def masters(opt):
        return torch.cat([opt.state[p][MASTER_KEY].reshape(-1) for p in model.parameters()])

    nic2.load_state_dict(sd)  # straight back: the saved masters
    assert torch.equal(masters(nic2), card)
    nic2.load_state_dict(tor.state_dict())  # masters went through bf16: taken from the model
    assert torch.equal(masters(nic2), flat_model.float())


def test_grad_scaler_unscales_and_skips_inf_steps():
    task = regression_task(seed=7)
    ref = copy.deepcopy(task.model)
    runs = []
    nic = NicAdamW(task.model.parameters(), lr=3e-3, backend="golden")
    for model, opt in ((task.model, nic), (ref, torch.optim.AdamW(ref.parameters(), lr=3e-3))):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=5)
        scales = []
        for s in range(25):
            x, y = task.batch(s)
            opt.zero_grad()
            scaler.scale(task.loss(model, x, y)).backward()
            if s in (6, 13):  # an overflow: the scaler must skip this step and halve its scale
                next(model.parameters()).grad[0, 0] = float("inf")
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        runs.append(scales)
    assert runs[0] == runs[1]
    assert runs[0][6] < runs[0][5]
    assert nic.shards()[0].step_count == 25 - 2 and nic.skipped_steps == 0  # skipped by the scaler, not the card
    assert max_param_diff(task.model, ref) < PARAM_TOL


def test_nonfinite_gradient_is_applied_as_torch_applies_it_by_default():
    """torch.optim.AdamW takes a NaN gradient (the parameter and its moments become NaN where it
    reaches); so does NicAdamW by default, bit pattern aside (any NaN is a NaN)."""
    task = regression_task()
    ref = copy.deepcopy(task.model)
    opt = NicAdamW(task.model.parameters(), backend="golden")
    tor = torch.optim.AdamW(ref.parameters())
    for model, o in ((task.model, opt), (ref, tor)):
        x, y = task.batch(0)
        task.loss(model, x, y).backward()
        next(model.parameters()).grad[0, 0] = float("nan")
        o.step()
    assert opt.skipped_steps == 0 and opt.shards()[0].step_count == 1
    for a, b in zip(ref.parameters(), task.model.parameters(), strict=True):
        assert torch.equal(torch.isnan(a), torch.isnan(b))
        assert torch.allclose(a[~torch.isnan(a)], b[~torch.isnan(b)], rtol=0, atol=PARAM_TOL)
    assert torch.isnan(next(task.model.parameters())[0, 0])
    w = next(task.model.parameters())
    assert torch.equal(torch.isnan(opt.state[w]["exp_avg"]), torch.isnan(tor.state[next(ref.parameters())]["exp_avg"]))


def test_nonfinite_gradient_skips_on_the_card_when_asked():
    task = regression_task()
    opt = NicAdamW(task.model.parameters(), backend="golden", skip_nonfinite=True)
    before = params_of(task.model)
    x, y = task.batch(0)
    task.loss(task.model, x, y).backward()
    next(task.model.parameters()).grad[0, 0] = float("nan")
    opt.step()
    assert opt.skipped_steps == 1 and opt.shards()[0].step_count == 0
    for a, b in zip(before, task.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_external_parameter_change_is_picked_up():
    """model.load_state_dict after the optimizer was made: the card's masters follow the model."""
    task = regression_task(seed=8)
    ref = copy.deepcopy(task.model)
    nic = NicAdamW(task.model.parameters(), lr=3e-3, backend="golden")
    tor = torch.optim.AdamW(ref.parameters(), lr=3e-3)
    train(task, task.model, nic, 5)
    train(task, ref, tor, 5)
    fresh = regression_task(seed=9).model.state_dict()
    task.model.load_state_dict(fresh)
    ref.load_state_dict(fresh)
    train(task, task.model, nic, 10, start=5)
    train(task, ref, tor, 10, start=5)
    assert max_param_diff(task.model, ref) < PARAM_TOL


def test_zero_grad_maximize_closure_and_frozen_parameters():
    task = regression_task(seed=10)
    ref = copy.deepcopy(task.model)
    for m in (task.model, ref):
        m[0].weight.requires_grad_(False)  # frozen: no state, never touched
    nic = NicAdamW(task.model.parameters(), lr=3e-3, maximize=True, backend="golden")
    tor = torch.optim.AdamW(ref.parameters(), lr=3e-3, maximize=True)
    assert 0 not in nic.state and task.model[0].weight not in nic.state  # frozen: no state, as torch
    for s in range(10):
        x, y = task.batch(s)
        for model, opt in ((task.model, nic), (ref, tor)):
            opt.zero_grad(set_to_none=s % 2 == 0)

            def closure(model=model, opt=opt, x=x, y=y):
                opt.zero_grad()
                loss = -task.loss(model, x, y)
                loss.backward()
                return loss

            opt.step(closure)
    assert max_param_diff(task.model, ref) < PARAM_TOL
    assert all(p.grad is None for p in (task.model[0].weight,))


def test_bad_options_fail_clearly():
    model = regression_task().model
    with pytest.raises(UserError, match="backend"):
        NicAdamW(model.parameters(), backend="fpga")
    with pytest.raises(UserError, match="amsgrad"):
        NicAdamW([{"params": list(model.parameters()), "amsgrad": True}])
    with pytest.raises(UserError, match="float64"):
        NicAdamW(model.double().parameters())
    with pytest.raises(ValueError):
        NicAdamW(model.parameters(), lr=-1.0)
