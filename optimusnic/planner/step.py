"""Step time: the compute of a step, and how much of each scheme's collectives shows outside it.

Overlap (explicit, the same for all schemes, flags `overlap_reduce` and `overlap_gather`):
gradient reductions hide under the backward pass of their micro-batch; parameter all-gathers
(ZeRO-3/HSDP/ZeRO++ before forward and backward, the post-step gather of ZeRO-1/2, Offload and
OptimusNIC before the next forward) hide under that forward or backward. What does not fit in
the window shows. The optimizer step never hides on a GPU or CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimusnic.planner.assumptions import Assumptions
from optimusnic.planner.context import Context
from optimusnic.planner.costs import forward_flops, model_flops, recompute_flops
from optimusnic.planner.schemes import SCHEMES, Phases, phases


def _window(window: float, gathers: list[float], reduces: list[float], a: Assumptions) -> float:
    hidden = (gathers if a.overlap_gather else []) + (reduces if a.overlap_reduce else [])
    shown = (gathers if not a.overlap_gather else []) + (reduces if not a.overlap_reduce else [])
    return max(0.0, sum(hidden) - window) + sum(shown)


def exposed(ph: Phases, a: Assumptions, t_fwd: float, t_bwd: float) -> tuple[float, float]:
    """(link seconds of the collectives, seconds of them that show) over one step."""
    A = a.grad_accum
    first_fwd = _window(t_fwd, ph.fwd + ph.post_gather, [], a)
    other_fwd = (A - 1) * _window(t_fwd, ph.fwd, [], a)
    mid_bwd = (A - 1) * _window(t_bwd, ph.bwd_gather, ph.reduce_each, a)
    last_bwd = _window(t_bwd, ph.bwd_gather, ph.reduce_each + ph.reduce_last, a)
    total = A * (sum(ph.fwd) + sum(ph.bwd_gather) + sum(ph.reduce_each)) + sum(ph.reduce_last) + sum(ph.post_gather)
    return total, first_fwd + other_fwd + mid_bwd + last_bwd


@dataclass
class Compute:
    step_s: float
    fwd_s: float
    bwd_s: float
    model_flops: float
    hardware_flops: float
    mfu: float  # model FLOPs / (time x peak)
    hfu: float  # hardware FLOPs / (time x peak)


def compute_time(c: Context, tokens: float) -> Compute:
    """Compute time of one step for `tokens` tokens per GPU per micro-batch."""
    a, seq = c.a, c.a.seq
    mf = model_flops(c.params, tokens, c.model, seq)
    hw = mf + recompute_flops(c.params, tokens, a.recompute, c.model, seq)
    peak = c.gpu.bf16_flops
    # HFU by default: the recomputed forward takes time. A given MFU sets the time from model FLOPs.
    t_micro = mf / (peak * a.mfu) if a.mfu is not None else hw / (peak * a.hfu)
    t_fwd = t_micro * forward_flops(c.params, tokens, c.model, seq) / hw
    return Compute(a.grad_accum * t_micro, t_fwd, t_micro - t_fwd, a.grad_accum * mf, a.grad_accum * hw,
                   mf / (t_micro * peak), hw / (t_micro * peak))


def timings(c: Context, view: str, tokens: float) -> dict[str, tuple[Phases, float, float, float]]:
    """Per scheme: (phases, link seconds, exposed collective seconds, step seconds)."""
    comp = compute_time(c, tokens)
    out = {}
    for key in SCHEMES:
        ph = phases(c, key, view)
        total, shown = exposed(ph, c.a, comp.fwd_s, comp.bwd_s)
        out[key] = (ph, total, shown, comp.step_s + shown + ph.optimizer_shown + ph.transfer_shown)
    return out
