"""The training-run planner (`optimusnic plan`): what a cluster's step costs with and without cards.

Plan a training step: memory per GPU and step time of DDP, ZeRO-1/2/3, HSDP, ZeRO++, ZeRO-Offload, OptimusNIC.
A first-order model for data parallelism only (no tensor or pipeline parallelism), mixed
precision with bf16 parameters and Adam with fp32 master weights and moments. Every assumption
the numbers rest on is returned with them (`Plan.assumptions`) and printed by `optimusnic plan`.
Two views of every plan: iso-hardware (baselines on the cluster's own NICs) and iso-network
(baselines on the same links the cards have: cards per node x ports x line rate per node).

The modules, each importing only those listed before it:
  errors       PlanError
  presets      models, GPUs and clusters from presets/*.json
  costs        the formulas: memory, activations, FLOPs, collectives, PCIe and link rates
  assumptions  the defaults with their sources, `Assumptions`, their checks
  card         the card side: capacity, update rate and link (`hls.sizing`)
  context      a plan's inputs resolved once (layout, links, cards)
  schemes      what each scheme does in a step (collectives, copies, optimizer)
  step         compute time and what of the collectives shows
  fit          whether a scheme fits (GPU memory, host memory, cards)
  questions    fewest GPUs, largest micro-batch and sequence, tokens that hide the collectives
  notes        the assumptions printed with a plan
  validation   the compute model against published runs (the guide's validation table)
  planning     `plan()`: every scheme in both views
  sweeps       `sweep()`: plans over GPU count, tokens or line rate
  report       a plan as text, a sweep as CSV
  charts       charts of a plan and of a sweep

This package re-exports what the command and the tests use.
"""

from __future__ import annotations

from optimusnic.planner.assumptions import (
    ATTENTIONS,
    CPU_ADAM_SOURCE,
    DEFAULT_CPU_ADAM_PARAMS_PER_S,
    DEFAULT_GPU_ADAM_EFFICIENCY,
    DEFAULT_HFU,
    DEFAULT_LINK_EFFICIENCY,
    DEFAULT_RTL_EFFICIENCY,
    GRAD_PATHS,
    HFU_SOURCE,
    NET_BENCH_JSON,
    NIC_GRADS,
    PARAM_DTYPES,
    PLACEMENTS,
    RTL_BENCH_JSON,
    VIEWS,
    Assumptions,
    read_ring_loss,
    read_rtl_efficiency,
)
from optimusnic.planner.card import UNMEASURED, NicSide, RailFigure, nic_side
from optimusnic.planner.charts import write_chart, write_sweep_chart
from optimusnic.planner.costs import (
    GRAD_BUFFERS,
    PARAM_BYTES,
    RECOMPUTE,
    STATE_BYTES,
    activation_bytes,
    bus_bandwidth,
    collective_time,
    forward_flops,
    gpu_memory_bytes,
    link_efficiency_at,
    logits_bytes,
    model_flops,
    parse_link_efficiency,
    pcie_bytes_per_s,
    recompute_flops,
    ring_all_gather_bytes,
    ring_all_reduce_bytes,
    ring_reduce_scatter_bytes,
)
from optimusnic.planner.errors import PlanError
from optimusnic.planner.planning import Plan, SchemeResult, plan
from optimusnic.planner.presets import (
    ClusterPreset,
    GpuPreset,
    ModelPreset,
    clusters,
    get_cluster,
    get_gpu,
    get_model,
    gpus,
    models,
    transformer_params,
)
from optimusnic.planner.questions import gpu_counts
from optimusnic.planner.report import format_plan, write_sweep_csv
from optimusnic.planner.schemes import OPTIMUSNIC, SCHEME_NAMES, SCHEMES
from optimusnic.planner.sweeps import SWEEPS, SweepRow, sweep

__all__ = [
    "CPU_ADAM_SOURCE", "DEFAULT_CPU_ADAM_PARAMS_PER_S", "DEFAULT_GPU_ADAM_EFFICIENCY", "DEFAULT_LINK_EFFICIENCY",
    "ATTENTIONS", "DEFAULT_HFU", "DEFAULT_RTL_EFFICIENCY", "GRAD_BUFFERS", "GRAD_PATHS", "HFU_SOURCE", "NIC_GRADS",
    "PARAM_DTYPES", "OPTIMUSNIC",
    "NET_BENCH_JSON", "PARAM_BYTES", "PLACEMENTS", "RECOMPUTE", "RTL_BENCH_JSON", "SCHEMES", "SCHEME_NAMES",
    "STATE_BYTES", "SWEEPS",
    "VIEWS", "Assumptions", "ClusterPreset", "GpuPreset", "ModelPreset", "NicSide", "Plan", "PlanError",
    "RailFigure", "SchemeResult", "SweepRow", "UNMEASURED", "activation_bytes", "bus_bandwidth", "clusters",
    "collective_time", "format_plan",
    "forward_flops", "get_cluster", "get_gpu", "get_model", "gpu_counts", "gpu_memory_bytes", "gpus",
    "link_efficiency_at", "logits_bytes", "model_flops", "models", "nic_side", "parse_link_efficiency",
    "pcie_bytes_per_s", "plan", "read_ring_loss", "read_rtl_efficiency", "recompute_flops", "ring_all_gather_bytes",
    "ring_all_reduce_bytes", "ring_reduce_scatter_bytes", "sweep", "transformer_params", "write_chart",
    "write_sweep_chart", "write_sweep_csv",
]
