"""All or nothing: an optimizer step or load_state_dict that raises leaves
everything as it was: parameters, card state, step counts, param_groups, bit for bit.

Every error class below is checked before the first shard steps (NicAdamW/NicAdam/_plan and
ShardedNicOptimizer) and before anything is loaded (load_state_dict validates every group and
every parameter's state first). A parameter without a gradient is not an error: it is skipped
exactly as torch skips it (tests/pynq_driver/optim/test_optim_patterns.py).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pynq_driver.optim.adam import NicAdam, NicAdamW  # noqa: E402


def _model(seed: int = 0) -> tuple[torch.nn.Parameter, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.nn.Parameter(torch.randn(n, generator=g)) for n in (40, 24, 16))


def _grads(params: tuple[torch.nn.Parameter, ...]) -> None:
    for i, p in enumerate(params):
        p.grad = torch.full_like(p, 0.01 * (i + 1))


def _snapshot(opt: Any, params: tuple[torch.nn.Parameter, ...]) -> tuple:
    card = []
    for shard in opt.shards():
        sd = shard.state_dict()
        card.append((sd["step"], sd["params"].tobytes(), sd["exp_avg"].tobytes(), sd["exp_avg_sq"].tobytes()))
    groups = [{k: (v if k != "params" else [id(p) for p in v]) for k, v in g.items()} for g in opt.param_groups]
    return (tuple(p.detach().clone().numpy().tobytes() for p in params), tuple(card), repr(groups),
            opt.skipped_steps)


def _two_groups(cls: type, params: tuple[torch.nn.Parameter, ...]) -> Any:
    return cls([{"params": [params[0]]}, {"params": [params[1], params[2]], "lr": 1e-2}], lr=1e-3,
               backend="golden")


def _bad_lr(opt: Any, params: Any) -> None:
    opt.param_groups[1]["lr"] = -1.0


def _bad_betas(opt: Any, params: Any) -> None:
    opt.param_groups[1]["betas"] = (0.9, 1.5)


def _nan_eps(opt: Any, params: Any) -> None:
    opt.param_groups[1]["eps"] = float("nan")


def _sparse_grad(opt: Any, params: Any) -> None:
    params[2].grad = params[2].grad.to_sparse()


def _negative_weight_decay(opt: Any, params: Any) -> None:
    opt.param_groups[1]["weight_decay"] = -0.5


def _amsgrad(opt: Any, params: Any) -> None:
    opt.param_groups[1]["amsgrad"] = True


ERRORS = {"lr<0 in group 1": _bad_lr, "betas out of range in group 1": _bad_betas, "eps NaN in group 1": _nan_eps,
          "a sparse grad in group 1": _sparse_grad,
          "weight_decay<0 in group 1": _negative_weight_decay, "amsgrad in group 1": _amsgrad}


@pytest.mark.parametrize("cls", [NicAdamW, NicAdam])
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_step_error_leaves_everything_unchanged(cls: type, case: str) -> None:
    params = _model()
    opt = _two_groups(cls, params)
    try:
        _grads(params)
        opt.step()  # non-zero state on the card
        _grads(params)
        ERRORS[case](opt, params)
        before = _snapshot(opt, params)
        with pytest.raises((ValueError, RuntimeError, TypeError)):
            opt.step()
        assert _snapshot(opt, params) == before
    finally:
        opt.close()


@pytest.mark.parametrize("cls", [NicAdamW, NicAdam])
@pytest.mark.parametrize("case", ["wrong size in group 1", "step mismatch in group 1", "missing exp_avg_sq",
                                  "lr string in group 1"])
def test_load_state_dict_error_leaves_everything_unchanged(cls: type, case: str) -> None:
    params = _model()
    opt = _two_groups(cls, params)
    try:
        _grads(params)
        opt.step()
        sd = opt.state_dict()
        _grads(params)
        opt.step()  # now differs from sd
        bad = {"state": {k: dict(v) for k, v in sd["state"].items()},
               "param_groups": [dict(g) for g in sd["param_groups"]]}
        bad["param_groups"][0]["lr"] = 0.123  # would be applied if group 0 were loaded first
        last = max(bad["state"])
        if case == "wrong size in group 1":
            bad["state"][last]["exp_avg"] = torch.zeros(3)
        elif case == "step mismatch in group 1":
            bad["state"][last]["step"] = torch.tensor(-5.0)
        elif case == "missing exp_avg_sq":
            del bad["state"][last]["exp_avg_sq"]
        else:
            bad["param_groups"][1]["lr"] = "fast"
        before = _snapshot(opt, params)
        with pytest.raises((ValueError, RuntimeError, TypeError, KeyError)):
            opt.load_state_dict(bad)
        assert _snapshot(opt, params) == before
    finally:
        opt.close()


@pytest.mark.parametrize("case", ["lr<0 in group 1", "a sparse grad in group 1", "betas out of range in group 1"])
def test_sharded_step_error_leaves_everything_unchanged(case: str) -> None:
    import torch.distributed as dist

    from pynq_driver.optim.sharded import ShardedNicOptimizer

    with tempfile.TemporaryDirectory() as tmp:
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0,
                                    world_size=1)
        try:
            params = _model()
            opt = ShardedNicOptimizer([{"params": [params[0]]}, {"params": [params[1], params[2]], "lr": 1e-2}],
                                      lr=1e-3, backend="golden")
            try:
                _grads(params)
                opt.step()
                _grads(params)
                ERRORS[case](opt, params)
                before = (tuple(p.detach().numpy().tobytes() for p in params),
                          tuple(np.asarray(s.state_dict()["params"]).tobytes() for s in opt.shards()),
                          repr(opt.param_groups))
                with pytest.raises((ValueError, RuntimeError, TypeError)):
                    opt.step()
                after = (tuple(p.detach().numpy().tobytes() for p in params),
                         tuple(np.asarray(s.state_dict()["params"]).tobytes() for s in opt.shards()),
                         repr(opt.param_groups))
                assert after == before
            finally:
                opt.close()
        finally:
            dist.destroy_process_group()


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.none(), st.text(max_size=3),
                    st.tuples(st.floats(-1, 2), st.floats(-1, 2)))


@settings(max_examples=int(os.environ.get("FUZZ_OPTIM_EXAMPLES", "10")), deadline=None, database=None,
          suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@given(group=st.integers(0, 1), key=st.sampled_from(["lr", "eps", "weight_decay", "betas", "maximize", "amsgrad"]),
       value=_values, drop_grad=st.sampled_from([None, 0, 1, 2]))
def test_fuzz_step_is_all_or_nothing(group: int, key: str, value: Any, drop_grad: int | None) -> None:
    """Whatever one hyperparameter of one group is set to and whichever gradient is missing, a step
    either runs or raises with everything unchanged."""
    params = _model()
    opt = _two_groups(NicAdamW, params)
    try:
        _grads(params)
        opt.step()
        _grads(params)
        opt.param_groups[group][key] = value
        if drop_grad is not None:
            params[drop_grad].grad = None
        before = _snapshot(opt, params)
        try:
            opt.step()
        except (ValueError, RuntimeError, TypeError):
            assert _snapshot(opt, params) == before
    finally:
        opt.close()
