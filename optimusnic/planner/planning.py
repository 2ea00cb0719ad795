"""One plan: memory per GPU and step time of every scheme in both views, the questions, the warnings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hls.targets import Target
from optimusnic.planner.assumptions import VIEWS, Assumptions, positive_int, validate
from optimusnic.planner.card import NicSide
from optimusnic.planner.context import Context, layout, make_context
from optimusnic.planner.errors import PlanError
from optimusnic.planner.fit import host_bytes, misfit, scheme_memory
from optimusnic.planner.notes import assumption_notes
from optimusnic.planner.presets import ClusterPreset, GpuPreset, ModelPreset, get_cluster
from optimusnic.planner.questions import answer_questions
from optimusnic.planner.schemes import OPTIMUSNIC, SCHEME_NAMES, SCHEMES, Phases, card_legs
from optimusnic.planner.step import Compute, compute_time, timings


@dataclass
class SchemeResult:
    key: str
    name: str
    memory: dict[str, float]  # params, grads, optimizer, activations, logits, total (bytes per GPU)
    fits: bool
    why_not: str
    comm_bytes: dict[str, float]  # bytes each rank sends per step, by collective
    compute_s: float
    comm_s: float  # link time of the collectives
    comm_exposed_s: float
    optimizer_s: float
    optimizer_exposed_s: float
    transfer_s: float  # PCIe copies (ZeRO-Offload, OptimusNIC)
    transfer_exposed_s: float
    step_s: float
    host_bytes_per_node: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class Plan:
    model: str
    model_name: str
    params: int
    gpus: int
    nodes: int
    gpus_per_node: int
    gpu: str
    gpu_name: str
    gpu_memory_bytes: float
    cluster: str
    cluster_name: str
    view: str
    nic: NicSide
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    mfu: float
    hfu: float
    links: dict[str, float]  # bytes per second after efficiency
    assumptions: list[str]
    schemes: list[SchemeResult]
    views: dict[str, dict[str, float]]  # view -> scheme -> step seconds (fitting or not)
    questions: dict[str, Any]
    warnings: list[str]
    chain: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # OptimusNIC rows: the card's legs
    param_dtype: str = "fp32"

    def fitting(self) -> list[SchemeResult]:
        return [s for s in self.schemes if s.fits]

    @property
    def fastest(self) -> SchemeResult | None:
        fit = self.fitting()
        return min(fit, key=lambda s: s.step_s) if fit else None

    def scheme(self, key: str) -> SchemeResult:
        return next(s for s in self.schemes if s.key == key)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nic"]["sizing"] = self.nic.sizing.to_dict() if hasattr(self.nic.sizing, "to_dict") else None
        if d["nic"]["rail"] is None:  # sidecar: no rail figures (its output stays as it was)
            del d["nic"]["rail"]
        d["fastest"] = self.fastest.key if self.fastest else None
        return d


def _result(c: Context, key: str, view: str, timing: tuple[Phases, float, float, float], comp: Compute) -> SchemeResult:
    ph, total, shown, step = timing
    mem = scheme_memory(c, key, c.n, c.a.micro_batch, c.a.seq)
    why = misfit(c, key, c.n, mem)
    notes = []
    if key == "offload":
        notes.append("no delayed parameter update (DPU): the CPU step is on the critical path")
    if key in OPTIMUSNIC:
        notes.append(f"card {c.a.nic_placement}, gradients {c.a.nic_grad_path}"
                     + (", card chain pipelined into the reduce-scatter" if ph.merged_chain else
                        ", card update after the whole reduce-scatter" + (" and the global norm" if c.a.clip else "")))
        if key == "optimusnic":
            notes.append(f"gradients on the GPU: {c.a.nic_grads}")
    return SchemeResult(
        key=key, name=SCHEME_NAMES[key], memory=mem, fits=not why, why_not="; ".join(why), comm_bytes=ph.comm_bytes,
        compute_s=comp.step_s, comm_s=total, comm_exposed_s=shown, optimizer_s=ph.optimizer,
        optimizer_exposed_s=ph.optimizer_shown, transfer_s=ph.transfer, transfer_exposed_s=ph.transfer_shown,
        step_s=step, host_bytes_per_node=host_bytes(c, c.n) if key == "offload" else 0.0, notes=notes)


def plan(
    *,
    params: int,
    gpus: int,
    gpu: GpuPreset,
    target: Target,
    cluster: ClusterPreset | None = None,
    nodes: int | None = None,
    model: ModelPreset | None = None,
    assumptions: Assumptions | None = None,
    questions: bool = True,
) -> Plan:
    """Memory per GPU and step time of every scheme in both views; raises PlanError when nothing fits."""
    a = assumptions or Assumptions()
    params = positive_int("params", params)
    n = positive_int("gpus", gpus)
    validate(a, target)
    cluster = cluster or get_cluster(gpu.default_cluster)
    nodes, per_node = layout(n, nodes, cluster)
    c = make_context(params, n, gpu, target, cluster, nodes, per_node, model, a)
    tokens = a.micro_batch * a.seq
    comp = compute_time(c, tokens)
    views = {}
    results: list[SchemeResult] = []
    for view in VIEWS:
        timing = timings(c, view, tokens)
        views[view] = {k: t[3] for k, t in timing.items()}
        if view == a.view:
            results = [_result(c, k, view, timing[k], comp) for k in SCHEMES]

    name = model.name if model else f"{params / 1e9:g}B-parameter model"
    if not any(r.fits for r in results):
        best = min(results, key=lambda r: r.memory["total"])
        raise PlanError(
            f"{name} fits under no scheme on {n} x {gpu.name}: the smallest need is {best.name} at "
            f"{best.memory['total'] / 1e9:.1f} GB per GPU ({best.why_not}); use more GPUs, a larger GPU"
            + (", a shorter --seq or --micro-batch, or --recompute full" if a.recompute != "full" else ""))
    warnings = []
    nic = c.nic
    if not nic.slots_ok:
        warnings.append(f"{max(nic.cards_per_node, nic.cards_per_node_needed)} card(s) per node needed but a "
                        f"{cluster.name} has {nic.pcie_slots} PCIe slot(s) for add-in cards "
                        f"({cluster.card_slots_source})")
    if nic.plan_kind == "capacity-first":
        warnings.append(f"sizing's line-rate plan holds {nic.line_rate_plan['max_params_per_card'] / 1e9:.2f} G params "
                        f"per card, not the {nic.card_params / 1e9:.2f} G shard: the capacity-first plan (1 CU) is "
                        "used, "
                        f"at {nic.achieved_params_per_s / 1e9:.2f} G params/s")
    if nic.cards_per_gpu_needed > 1:
        warnings.append(f"one GPU's shard needs {nic.cards_per_gpu_needed} {target.name} cards "
                        f"({params / n / 1e9:.2f} G params > {nic.max_params_per_card / 1e9:.2f} G per card)")
    return Plan(
        model=model.key if model else "custom", model_name=name, params=params, gpus=n, nodes=nodes,
        gpus_per_node=per_node, gpu=gpu.key, gpu_name=gpu.name, gpu_memory_bytes=gpu.memory_bytes,
        cluster=cluster.key, cluster_name=cluster.name, view=a.view, nic=nic, tokens_per_step=n * a.grad_accum * tokens,
        model_flops_per_step=comp.model_flops, hardware_flops_per_step=comp.hardware_flops, mfu=comp.mfu,
        hfu=comp.hfu,
        links={"nvlink": c.nvlink, "rail_iso_hardware": c.rails["iso-hardware"],
               "rail_iso_network": c.rails["iso-network"], "card_rail_per_gpu": c.card_rail,
               "card_link": nic.card_link_bytes_per_s, "card_pcie": nic.card_pcie_bytes_per_s,
               "gpu_pcie": c.gpu_pcie, "link_efficiency": c.eff},
        assumptions=assumption_notes(c, comp), schemes=results, views=views,
        questions=answer_questions(c) if questions else {}, warnings=warnings,
        chain={k: [(leg.name, leg.seconds) for leg in card_legs(c, k)[0]] for k in OPTIMUSNIC},
        param_dtype=a.param_dtype)
