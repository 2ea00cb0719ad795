"""The golden model against torch.optim.AdamW / Adam, and its bf16 rounding against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hls import golden
from hls.golden import Hyper, adam_update, prepare_scalars

N = 65_536
STEPS = 100
LR, BETAS, EPS, WD, GS = 1e-3, (0.9, 0.999), 1e-8, 1e-2, 0.5
# Measured max abs parameter difference after 100 steps (see the printed figures): the golden
# order of operations differs from torch's only in rounding, about 5e-7 in this regime.
TOLERANCE = 1e-6


def _run_pair(optimizer: str, torch_kwargs: dict) -> float:
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(N).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
    tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    cls = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
    opt = cls([tp], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, **torch_kwargs)
    for step in range(1, STEPS + 1):
        grad = (rng.standard_normal(N) * 3).astype(np.float32)
        # torch receives the already-scaled gradient (as a GradScaler would hand it over);
        # the kernel receives the raw gradient and the grad_scale register: one fp32 multiply both ways.
        tp.grad = torch.from_numpy(grad) * torch.tensor(GS, dtype=torch.float32)
        opt.step()
        hyper = Hyper(lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, weight_decay=WD, step=step, grad_scale=GS)
        adam_update(p, m, v, grad, prepare_scalars(hyper, optimizer), optimizer=optimizer)
    state = opt.state[tp]
    np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-7)
    return float(np.max(np.abs(p - tp.detach().numpy())))


@pytest.mark.parametrize("optimizer", ["adamw", "adam"])
@pytest.mark.parametrize("impl", [{"foreach": False}, {"fused": True}], ids=["foreach=False", "fused=True"])
def test_golden_tracks_torch(optimizer: str, impl: dict) -> None:
    diff = _run_pair(optimizer, impl)
    print(f"{optimizer} vs torch {impl}: max |dp| after {STEPS} steps on {N} params = {diff:.3g}")
    assert diff <= TOLERANCE


def test_bf16_rounding_matches_torch() -> None:
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    special = np.array([0, 0x80000000, 1, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x3F808000, 0x3F818000,
                        0x3F807FFF, 0x7F7F8000, 0x007F8000, 0x00008000], np.uint32)
    x = np.concatenate([bits, special]).view(np.float32)
    ours = golden.to_bf16_bits(x)
    theirs = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert golden.bits_equal(ours, theirs).all()
    assert (ours[np.isnan(x)] == 0x7FC0).all()


def test_grad_widening_is_exact() -> None:
    h = np.arange(0, 2**16, dtype=np.uint32).astype(np.uint16)
    fp16 = h.view(np.float16)
    assert golden.bits_equal(golden.widen_grad(fp16, "fp16"), fp16.astype(np.float32)).all()
    bf = golden.widen_grad(h, "bf16")
    tb = torch.from_numpy(h.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
    assert golden.bits_equal(bf, tb).all()


def test_scalars_follow_design() -> None:
    h = Hyper(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, step=3, grad_scale=0.25)
    s = prepare_scalars(h, "adamw")
    assert s.step_size == np.float32(1e-3 / (1 - 0.9**3))
    assert s.rbc2 == np.float32(1 / np.sqrt(1 - 0.999**3))
    assert s.decay == np.float32(1 - 1e-3 * 0.1) and s.l2 == 0
    a = prepare_scalars(h, "adam")
    assert a.decay == 1 and a.l2 == np.float32(0.1)
    assert set(s.registers("adamw")) == set(golden.scalar_names("adamw"))
    assert "l2" not in s.registers("adamw") and "decay" not in a.registers("adam")
    off = prepare_scalars(Hyper(bias_correction=False, step=7), "adamw")
    assert off.step_size == np.float32(1e-3) and off.rbc2 == 1


def test_special_values_follow_ieee() -> None:
    p = np.array([0.0, -0.0, 1e-45, 3e38, np.inf, -np.inf, np.nan, 1.0], np.float32)
    g = np.array([0.0, -0.0, 1e-45, -3e38, 1.0, 1.0, 1.0, np.nan], np.float32)
    m, v = np.zeros_like(p), np.zeros_like(p)
    out = adam_update(p, m, v, g, prepare_scalars(Hyper(), "adamw"))
    assert np.isnan(out[6]) and np.isnan(out[7]) and np.isinf(out[4])
    assert golden.bits_equal(out, p).all()


@pytest.mark.parametrize("bad", [dict(step=0), dict(lr=float("nan")), dict(beta1=1.0), dict(eps=-1.0)])
def test_bad_hyper_rejected(bad: dict) -> None:
    with pytest.raises(ValueError):
        Hyper(**bad)


def test_adam_without_weight_decay_skips_the_l2_term() -> None:
    """torch.optim.Adam adds weight_decay * p only when weight_decay != 0: p = +-inf with weight_decay 0
    stays +-inf (0 * inf would be NaN), and every other value is unchanged too (design.md section 3)."""
    p0 = np.array([np.inf, -np.inf, 1.5, -0.0, 3e-39], np.float32)
    g = np.array([0.5, -0.25, 1.0, 2.0, -1.0], np.float32)
    ours = p0.copy()
    adam_update(ours, np.zeros(5, np.float32), np.zeros(5, np.float32), g,
                prepare_scalars(Hyper(step=1, lr=1e-2, weight_decay=0.0), "adam"), optimizer="adam")
    tp = torch.tensor(p0, requires_grad=True)
    tp.grad = torch.tensor(g)
    torch.optim.Adam([tp], lr=1e-2, weight_decay=0.0, foreach=False).step()
    theirs = tp.detach().numpy()
    assert not np.isnan(ours).any() and not np.isnan(theirs).any()
    assert (ours[:2] == p0[:2]).all() and (theirs[:2] == p0[:2]).all()
    # the rest tracks torch as the golden model does everywhere (torch divides by sqrt(bc2) first)
    assert np.allclose(ours[2:], theirs[2:], rtol=0, atol=1e-6)
