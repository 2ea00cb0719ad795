"""Sweeps: one plan per GPU count, tokens per micro-batch or card line rate, flattened into rows."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hls.targets import Target
from optimusnic.planner.assumptions import Assumptions, positive_int
from optimusnic.planner.costs import STATE_BYTES, freed_bytes_per_param
from optimusnic.planner.errors import PlanError
from optimusnic.planner.planning import plan
from optimusnic.planner.presets import ClusterPreset, GpuPreset, ModelPreset

SWEEPS = ("gpus", "tokens", "line-rate")
SWEEP_DEFAULTS = {"gpus": [8, 16, 32, 64, 128, 256, 512, 1024], "tokens": None, "line-rate": [25, 50, 100, 200, 400]}


@dataclass
class SweepRow:
    value: float
    gpus: int
    scheme: str
    fits: bool
    memory_gb: float
    step_s_iso_hardware: float
    step_s_iso_network: float
    freed_gb_per_gpu: float
    card_capacity_gb_per_gpu: float
    note: str = ""  # why the scheme does not fit; scheme "none": nothing fits at this point (figures 0)


def sweep(what: str, values: list[float] | None, *, params: int, gpus: int, gpu: GpuPreset, target: Target,
          cluster: ClusterPreset | None = None, model: ModelPreset | None = None,
          assumptions: Assumptions | None = None) -> list[SweepRow]:
    """Plans over GPU counts, tokens per micro-batch (multiples of seq) or card line rate (Gb/s per port)."""
    a = assumptions or Assumptions()
    if what not in SWEEPS:
        raise PlanError(f"sweep {what!r}; choose one of {', '.join(SWEEPS)}")
    if values is None:
        values = SWEEP_DEFAULTS[what] or [a.seq * k for k in (1, 2, 4, 8, 16)]
    rows = []
    for v in values:
        kw: dict[str, Any] = {"params": params, "gpus": gpus, "gpu": gpu, "target": target, "cluster": cluster,
                              "model": model, "questions": False}
        b = dataclasses.replace(a)
        if what == "gpus":
            kw["gpus"] = positive_int("sweep value", int(v) if float(v).is_integer() else v)
        elif what == "tokens":
            if v <= 0 or v % a.seq:
                raise PlanError(f"sweep tokens: {v:g} is not a positive multiple of --seq {a.seq}")
            b.micro_batch = int(v // a.seq)
        else:
            if not v > 0:
                raise PlanError(f"sweep line-rate: {v!r} must be positive (Gb/s per port)")
            kw["target"] = dataclasses.replace(target, line_rate_gbps=float(v))
        kw["assumptions"] = b
        try:
            p = plan(**kw)
        except PlanError as exc:
            if "fits under no scheme" not in str(exc):
                raise
            # Nothing fits at this point: one row says so (no figures), none is dropped silently.
            rows.append(SweepRow(value=float(v), gpus=int(kw["gpus"]), scheme="none", fits=False, memory_gb=0.0,
                                 step_s_iso_hardware=0.0, step_s_iso_network=0.0, freed_gb_per_gpu=0.0,
                                 card_capacity_gb_per_gpu=0.0, note=str(exc)))
            continue
        cap = p.nic.max_params_per_card * p.nic.cards_per_node / p.gpus_per_node * STATE_BYTES
        for s in p.schemes:
            rows.append(SweepRow(value=float(v), gpus=p.gpus, scheme=s.key, fits=s.fits,
                                 memory_gb=s.memory["total"] / 1e9,
                                 step_s_iso_hardware=p.views["iso-hardware"][s.key],
                                 step_s_iso_network=p.views["iso-network"][s.key],
                                 freed_gb_per_gpu=freed_bytes_per_param(b) * p.params / p.gpus / 1e9,
                                 card_capacity_gb_per_gpu=cap / 1e9, note=s.why_not))
    if all(r.scheme == "none" for r in rows):
        raise PlanError(f"nothing fits at any point of the {what} sweep")
    return rows
