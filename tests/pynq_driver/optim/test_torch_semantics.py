"""NicAdamW where torch.optim.AdamW's semantics are easy to lose: in-place edits of the state
tensors, state_dict/load_state_dict hooks, parameters replaced in param_groups, torch.compile,
torch's keywords, a parameter whose layout changed. Each test runs the same script on
torch.optim.AdamW and on NicAdamW (golden backend): the same effect, parameters within the fp32
tolerance of test_optim.py, or bit for bit where both run the card's arithmetic.
"""

from __future__ import annotations

import copy

import pytest
import torch

from optimusnic.demo.run import max_param_diff, regression_task
from pynq_driver.errors import StateError
from pynq_driver.optim.adam import NicAdam, NicAdamW

PARAM_TOL = 2e-6  # test_optim.py's fp32 tolerance


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def twins(seed=20):
    task = regression_task(seed=seed)
    ref = copy.deepcopy(task.model)
    nic = NicAdamW(task.model.parameters(), lr=3e-3, backend="golden")
    tor = torch.optim.AdamW(ref.parameters(), lr=3e-3)
    return task, task.model, ref, nic, tor


def both(task, model, ref, nic, tor, s):
    for m, opt in ((model, nic), (ref, tor)):
        x, y = task.batch(s)
        opt.zero_grad()
        task.loss(m, x, y).backward()
        opt.step()


def _edit_in_place(opt, model):
    """Edits of torch's state tensors in the ways scripts do them (each tensor a temporary)."""
    w, b = model[0].weight, model[0].bias
    opt.state[w]["exp_avg"].zero_()
    opt.state[w]["exp_avg_sq"].mul_(0.5)
    opt.state[b]["exp_avg"][opt.state[b]["exp_avg"] > 0] = 0.0
    opt.state[b]["step"].fill_(10)
    sd = opt.state_dict()  # torch's state_dict holds the state tensors themselves
    sd["state"][2]["exp_avg"].mul_(-1.0)


def _edit_by_assignment(opt, model):
    """The same edits as `_edit_in_place`, each written back by assignment."""
    w, b = model[0].weight, model[0].bias
    opt.state[w]["exp_avg"] = torch.zeros_like(w)
    opt.state[w]["exp_avg_sq"] = opt.state[w]["exp_avg_sq"].clone() * 0.5
    m = opt.state[b]["exp_avg"].clone()
    m[m > 0] = 0.0
    opt.state[b]["exp_avg"] = m
    opt.state[b]["step"] = torch.tensor(10.0)
    p2 = list(model.parameters())[2]
    opt.state[p2]["exp_avg"] = -opt.state[p2]["exp_avg"].clone()


def test_in_place_state_edits_reach_the_card():
    task, model, ref, nic, tor = twins()
    twin_model = copy.deepcopy(model)
    twin = NicAdamW(twin_model.parameters(), lr=3e-3, backend="golden")
    for s in range(3):
        both(task, model, ref, nic, tor, s)
        x, y = task.batch(s)
        twin.zero_grad()
        task.loss(twin_model, x, y).backward()
        twin.step()
    before = nic.state[model[0].weight]["exp_avg_sq"].clone()
    _edit_in_place(nic, model)
    _edit_in_place(tor, ref)
    _edit_by_assignment(twin, twin_model)
    # Read back before any step: the edits are the state, as in torch.
    w, q = model[0].weight, ref[0].weight
    assert torch.equal(nic.state[w]["exp_avg"], torch.zeros_like(w)) and not tor.state[q]["exp_avg"].any()
    assert torch.equal(nic.state[w]["exp_avg_sq"], before * 0.5)
    assert nic.state[model[0].bias]["step"].item() == tor.state[ref[0].bias]["step"].item() == 10.0
    assert not (nic.state[model[0].bias]["exp_avg"] > 0).any()
    # Two reads of one state alias, as torch's (the same tensor).
    a, b = nic.state[w]["exp_avg"], nic.state[w]["exp_avg"]
    a.add_(0.0)
    assert a.data_ptr() == b.data_ptr()
    del a, b
    for s in range(3, 8):
        both(task, model, ref, nic, tor, s)
        x, y = task.batch(s)
        twin.zero_grad()
        task.loss(twin_model, x, y).backward()
        twin.step()
    # In-place edits and the same edits by assignment: the same steps, bit for bit ...
    for p, t in zip(model.parameters(), twin_model.parameters(), strict=True):
        assert torch.equal(p, t)
    assert nic.state[model[0].bias]["step"].item() == tor.state[ref[0].bias]["step"].item() == 15.0
    # ... and torch.optim.AdamW with the same edits, within the rounding of the update.
    diff = max_param_diff(model, ref)
    print(f"in-place state edits mid-training: max |param diff| vs AdamW {diff:.3g}")
    assert diff < PARAM_TOL


def test_an_edit_after_a_later_step_raises_instead_of_landing_on_newer_state():
    task, model, ref, nic, tor = twins()
    both(task, model, ref, nic, tor, 0)
    held = nic.state[model[0].weight]["exp_avg"]
    both(task, model, ref, nic, tor, 1)
    held.zero_()  # torch: zeroes the live state; the card's moved on since this copy was read
    x, y = task.batch(2)
    nic.zero_grad()
    task.loss(model, x, y).backward()
    kept = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(StateError, match="read before a step and edited in place after it"):
        nic.step()
    assert all(torch.equal(p, k) for p, k in zip(model.parameters(), kept, strict=True))  # nothing ran
    assert nic.state[model[0].weight]["step"].item() == 2.0
    nic.step()  # raised once: a fresh read is the state again
    assert nic.state[model[0].weight]["step"].item() == 3.0


def test_hooks_run_where_torch_runs_them():
    task, model, ref, nic, tor = twins()
    for s in range(3):
        both(task, model, ref, nic, tor, s)
    seen = {}
    for name, opt, m in (("nic", nic, model), ("torch", tor, ref)):
        w = m[0].weight
        sd = opt.state_dict()
        got = seen[name] = {}

        def load_pre(o, state_dict, got=got):
            got["pre_saw_lr"] = state_dict["param_groups"][0]["lr"]
            new = copy.deepcopy(state_dict)
            new["param_groups"][0]["lr"] = 1e-4
            new["state"][0]["exp_avg"] = torch.full_like(new["state"][0]["exp_avg"], 0.25)
            return new  # torch loads the returned dict

        def load_post(o, w=w, got=got):
            got["post_exp_avg"] = o.state[w]["exp_avg"].clone()  # the loaded state is in place by now
            got["post_lr"] = o.param_groups[0]["lr"]

        def sd_pre(o, w=w):
            o.state[w]["exp_avg_sq"].mul_(2.0)  # a pre-hook's edit is part of the state (and the saved dict)

        def sd_post(o, state_dict, got=got):
            got["post_sq"] = state_dict["state"][0]["exp_avg_sq"].clone()
            return {**state_dict, "extra": 1}

        handles = [opt.register_load_state_dict_pre_hook(load_pre), opt.register_load_state_dict_post_hook(load_post),
                   opt.register_state_dict_pre_hook(sd_pre), opt.register_state_dict_post_hook(sd_post)]
        opt.load_state_dict(sd)
        out = opt.state_dict()
        got["extra"] = out.get("extra")
        got["sq_after"] = opt.state[w]["exp_avg_sq"].clone()
        for h in handles:
            h.remove()
    nic_seen, tor_seen = seen["nic"], seen["torch"]
    assert nic_seen["pre_saw_lr"] == tor_seen["pre_saw_lr"] == 3e-3
    assert nic_seen["post_lr"] == tor_seen["post_lr"] == 1e-4
    assert torch.equal(nic_seen["post_exp_avg"], tor_seen["post_exp_avg"])  # 0.25 everywhere in both
    assert nic_seen["extra"] == tor_seen["extra"] == 1
    assert torch.equal(nic_seen["post_sq"], nic_seen["sq_after"])  # the pre-hook's edit reached the card
    torch.testing.assert_close(nic_seen["post_sq"], tor_seen["post_sq"], rtol=1e-5, atol=1e-12)
    for s in range(3, 6):
        both(task, model, ref, nic, tor, s)
    assert max_param_diff(model, ref) < PARAM_TOL


def test_a_parameter_replaced_in_param_groups_is_trained_with_fresh_state():
    task, model, ref, nic, tor = twins()
    for s in range(3):
        both(task, model, ref, nic, tor, s)
    for m, opt in ((model, nic), (ref, tor)):
        new = torch.nn.Parameter(m[0].weight.detach() * 0.5)
        m[0].weight = new  # the model trains the new tensor ...
        opt.param_groups[0]["params"][0] = new  # ... and so does the optimizer, as torch's
    for s in range(3, 6):
        both(task, model, ref, nic, tor, s)
    assert nic.state[model[0].weight]["step"].item() == tor.state[ref[0].weight]["step"].item() == 3.0
    assert nic.state[model[0].bias]["step"].item() == 6.0
    diff = max_param_diff(model, ref)
    print(f"parameter replaced in param_groups: max |param diff| vs AdamW {diff:.3g}")
    assert diff < PARAM_TOL
    # What the card cannot follow is refused by name, before anything runs.
    nic.param_groups[0]["params"][1] = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[1\] was replaced .* another dtype, size"):
        nic.step()
    nic.param_groups[0]["params"][1] = model[0].bias
    nic.param_groups[0]["params"].append(torch.nn.Parameter(torch.zeros(3)))
    with pytest.raises(ValueError, match="changed length"):
        nic.step()


def test_compiled_train_step_matches_eager_bit_for_bit():
    """opt.step() inside torch.compile'd code: a graph break (the card's step is host calls), the
    forward and backward compiled; the same bits as the eager script."""
    task, model, _, nic, _ = twins()
    twin = copy.deepcopy(model)
    twin_opt = NicAdamW(twin.parameters(), lr=3e-3, backend="golden")

    def train_step(m, opt, x, y):
        opt.zero_grad()
        loss = task.loss(m, x, y)
        loss.backward()
        opt.step()
        return loss

    compiled = torch.compile(train_step, backend="aot_eager")
    for s in range(3):
        x, y = task.batch(s)
        assert torch.equal(train_step(model, nic, x, y), compiled(twin, twin_opt, x, y))
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
    assert twin_opt.state[twin[0].weight]["step"].item() == 3.0


def test_torch_keywords_are_honoured_or_refused_by_name():
    task = twins()[0]
    params = list(task.model.parameters())
    # Misspelt: TypeError as torch raises it, naming the optimizer the user called.
    with pytest.raises(TypeError) as theirs:
        torch.optim.AdamW(params, lrr=1e-3)
    with pytest.raises(TypeError) as ours:
        NicAdamW(params, lrr=1e-3, backend="golden")
    assert str(ours.value) == str(theirs.value).replace("AdamW", "NicAdamW")
    with pytest.raises(TypeError, match="'threads' \\(an option of backend='csim', not 'golden'\\)"):
        NicAdamW(params, threads=2, backend="golden")
    with pytest.raises(TypeError, match="decoupled_weight_decay"):
        NicAdamW(params, decoupled_weight_decay=True, backend="golden")  # torch.optim.AdamW refuses it too
    for kw, why in (({"capturable": True}, "capturable=True: .*CUDA graph"),
                    ({"differentiable": True}, "differentiable=True: autograd"),
                    ({"amsgrad": True}, "amsgrad=True is not implemented"),
                    ({"fused": True, "foreach": True}, "`fused` and `foreach` cannot be `True` together")):
        with pytest.raises(ValueError, match=why):
            NicAdamW(params, backend="golden", **kw)
    # Kept for the state dict (torch's host implementations; one card): accepted.
    for kw in ({"foreach": False}, {"fused": True}, {"maximize": False}):
        NicAdamW(params, backend="golden", **kw).close()
    # torch.optim.Adam(decoupled_weight_decay=True) is AdamW: so is NicAdam's, bit for bit.
    runs = []
    for make in (lambda ps: NicAdam(ps, lr=3e-3, weight_decay=0.1, decoupled_weight_decay=True, backend="golden"),
                 lambda ps: NicAdamW(ps, lr=3e-3, weight_decay=0.1, backend="golden")):
        t = twins()[0]
        opt = make(t.model.parameters())
        for s in range(3):
            x, y = t.batch(s)
            opt.zero_grad()
            t.loss(t.model, x, y).backward()
            opt.step()
        runs.append(t.model)
        assert opt.state_dict()["param_groups"][0]["decoupled_weight_decay"] is True
    assert all(torch.equal(p, q) for p, q in zip(runs[0].parameters(), runs[1].parameters(), strict=True))


def test_a_parameter_made_channels_last_after_construction_is_refused_clearly():
    conv = torch.nn.Conv2d(3, 8, 3)
    opt = NicAdamW(conv.parameters(), lr=1e-3, backend="golden")
    conv.to(memory_format=torch.channels_last)
    conv(torch.randn(2, 3, 8, 8)).sum().backward()
    kept = conv.weight.detach().clone()
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\] is not contiguous \(channels_last\)"):
        opt.step()
    assert torch.equal(conv.weight, kept) and conv.weight not in opt.state
