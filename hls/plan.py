"""Plan a training step: memory per GPU and step time for DDP, ZeRO-1/2/3, ZeRO-Offload and OptimusNIC.

A first-order model for data parallelism only (no tensor or pipeline parallelism), mixed
precision with bf16 parameters and gradients and Adam with fp32 master weights and moments.
Every assumption the numbers rest on is returned with them (`Plan.assumptions`).

Memory per GPU (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 3.1 and figure 1: 2 + 2 + K bytes per parameter with K = 12 for
mixed-precision Adam; N = data-parallel degree, P = parameters):
  DDP           params 2P      grads 2P      optimizer 12P
  ZeRO-1        params 2P      grads 2P      optimizer 12P/N
  ZeRO-2        params 2P      grads 2P/N    optimizer 12P/N
  ZeRO-3        params 2P/N    grads 2P/N    optimizer 12P/N
  ZeRO-Offload  params 2P      grads 2P/N    optimizer 0 (fp32 state and a grad copy in host memory;
                Ren et al. 2021, "ZeRO-Offload", on top of ZeRO-2)
  OptimusNIC    params 2P      grads 2P      optimizer 0 (fp32 state on the rank's SmartNIC);
                grads 2P/N with ZeRO-2-style bucketed reduce-scatter (`nic_grads="sharded"`)
  OptimusNIC+Z3 params 2P/N    grads 2P/N    optimizer 0 (ZeRO-3 parameter sharding, state on the NIC)
Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4.1, 16-bit activations, no tensor or sequence parallelism), per layer:
  none       s*b*h*(34 + 5*a*s/h) bytes
  selective  s*b*h*34 bytes (attention scores recomputed, as FlashAttention does)
  full       s*b*h*2 bytes (only each layer's input is kept; one extra forward pass of compute)
The formula was derived for GPT-style layers (4h MLP, multi-head attention); for Llama's
SwiGLU and grouped-query attention it is an estimate.

Step time (per optimizer step of `grad_accum` micro-batches of `micro_batch x seq` tokens):
  compute   6 * P * tokens FLOPs (8 * P * tokens with full recomputation) at MFU x peak bf16;
            the backward pass is 2/3 of the 6 (Kaplan et al. 2020); attention-score FLOPs ignored
  ring collectives over N ranks, bytes each rank sends (Patarasuk & Yuan 2009; NCCL docs):
            all-reduce 2(N-1)/N x bytes, reduce-scatter and all-gather (N-1)/N x bytes each,
            at the slowest link on the ring: NVLink inside one node, the per-GPU network link
            across nodes (a flat ring; hierarchical algorithms do somewhat better)
  overlap   gradient reduction hides under the backward pass, ZeRO-3's parameter all-gathers
            under forward and backward; the optimizer and the post-step all-gather do not hide,
            except on OptimusNIC where the update runs on the gradient stream and only the part
            longer than the reduce-scatter shows
  optimizer on a GPU: 28 bytes per parameter of the shard (read p, m, v fp32 and the bf16 grad,
            write p, m, v and the bf16 copy) at a fraction of HBM bandwidth; on the CPU: an
            assumed CPU-Adam rate; on the NIC: `hls.sizing` (memory-bound rate) with the kernel
            rate (lanes x CUs x clock) derated by the RTL benchmark's measured efficiency
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from hls.errors import UserError
from hls.paths import BUILD_DIR
from hls.sizing import SizingReport, size
from hls.targets import Target

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
RTL_BENCH_JSON = BUILD_DIR / "bench" / "rtl.json"

PARAM_BYTES = 2  # bf16 parameters on the GPU
GRAD_BYTES = 2  # bf16 gradients
STATE_BYTES = 12  # fp32 master + m + v (the ZeRO paper's K = 12)
GPU_ADAM_BYTES = 28  # read p, m, v (12) + grad (2); write p, m, v (12) + bf16 param copy (2)
BACKWARD_SHARE = 2 / 3  # backward is 4 of the 6 P*tokens FLOPs

RECOMPUTE = ("full", "selective", "none")
NIC_GRADS = ("full", "sharded")

# Defaults for the assumptions; each is printed with the plan and can be overridden.
DEFAULT_MFU = 0.40
MFU_SOURCE = "Llama 3 paper (Grattafiori et al. 2024), Table 4: 38-43% BF16 MFU training 405B on H100s"
DEFAULT_LINK_EFFICIENCY = 0.85
DEFAULT_GPU_ADAM_EFFICIENCY = 0.80
DEFAULT_CPU_ADAM_PARAMS_PER_S = 1.0e9  # per socket
DEFAULT_RTL_EFFICIENCY = 0.95


class PlanError(UserError):
    """Impossible plan input: no GPUs, an unknown preset, a model that fits under no scheme."""


@dataclass(frozen=True)
class ModelPreset:
    key: str
    name: str
    params: int
    layers: int | None = None
    hidden: int | None = None
    ffn: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    vocab: int | None = None
    source: str = ""

    @property
    def has_shape(self) -> bool:
        return self.layers is not None and self.hidden is not None and self.heads is not None


@dataclass(frozen=True)
class GpuPreset:
    key: str
    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    bf16_flops: float
    nvlink_bytes_per_s: float
    pcie_bytes_per_s: float
    default_cluster: str
    source: str


@dataclass(frozen=True)
class ClusterPreset:
    key: str
    name: str
    gpu: str
    gpus_per_node: int
    nic_gbps_per_gpu: float
    host_memory_bytes: float
    cpu_sockets: int
    source: str


# ---------------------------------------------------------------- formulas (pure functions)


def transformer_params(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, vocab: int,
                       tied_embeddings: bool = False) -> int:
    """Parameters of a Llama-style decoder: GQA attention, SwiGLU FFN, RMSNorm, untied head."""
    head_dim = hidden // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim  # q, o + k, v
    mlp = 3 * hidden * ffn  # gate, up, down
    norms = 2 * hidden
    embeddings = vocab * hidden * (1 if tied_embeddings else 2)
    return layers * (attention + mlp + norms) + hidden + embeddings


def ring_all_reduce_bytes(ranks: int, nbytes: float) -> float:
    """Bytes each rank sends in a ring all-reduce of `nbytes`."""
    return 2 * (ranks - 1) / ranks * nbytes


def ring_reduce_scatter_bytes(ranks: int, nbytes: float) -> float:
    return (ranks - 1) / ranks * nbytes


def ring_all_gather_bytes(ranks: int, nbytes: float) -> float:
    return (ranks - 1) / ranks * nbytes


def gpu_memory_bytes(scheme: str, params: float, ranks: int, nic_grads: str = "full") -> dict[str, float]:
    """Parameters, gradients and optimizer state per GPU (bytes) under `scheme`."""
    p, n = params, ranks
    table = {
        "ddp": (2 * p, 2 * p, 12 * p),
        "zero1": (2 * p, 2 * p, 12 * p / n),
        "zero2": (2 * p, 2 * p / n, 12 * p / n),
        "zero3": (2 * p / n, 2 * p / n, 12 * p / n),
        "offload": (2 * p, 2 * p / n, 0.0),
        "optimusnic": (2 * p, 2 * p if nic_grads == "full" else 2 * p / n, 0.0),
        "optimusnic_z3": (2 * p / n, 2 * p / n, 0.0),
    }
    if scheme not in table:
        raise PlanError(f"unknown scheme {scheme!r}; known schemes: {', '.join(table)}")
    prm, grd, opt = table[scheme]
    return {"params": prm, "grads": grd, "optimizer": opt}


def activation_bytes(layers: int, hidden: int, heads: int, seq: int, micro_batch: int, recompute: str) -> float:
    """Activation memory of one micro-batch (Korthikanti et al. 2022, no tensor/sequence parallelism)."""
    sbh = seq * micro_batch * hidden
    if recompute == "full":
        per_layer = 2 * sbh
    elif recompute == "selective":
        per_layer = 34 * sbh
    elif recompute == "none":
        per_layer = sbh * (34 + 5 * heads * seq / hidden)
    else:
        raise PlanError(f"recompute {recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    return layers * per_layer


def train_flops(params: float, tokens: float, recompute: str) -> float:
    """FLOPs of forward + backward (+ the recomputed forward) for `tokens` tokens."""
    return (8 if recompute == "full" else 6) * params * tokens


# ---------------------------------------------------------------- presets


def _load(name: str) -> dict[str, Any]:
    return json.loads((PRESETS_DIR / name).read_text())


@lru_cache(maxsize=1)
def models() -> dict[str, ModelPreset]:
    out = {}
    for key, m in _load("models.json")["models"].items():
        params = transformer_params(m["layers"], m["hidden"], m["ffn"], m["heads"], m["kv_heads"], m["vocab"],
                                    m.get("tied_embeddings", False))
        out[key] = ModelPreset(key=key, name=m["name"], params=params, layers=m["layers"], hidden=m["hidden"],
                               ffn=m["ffn"], heads=m["heads"], kv_heads=m["kv_heads"], vocab=m["vocab"],
                               source=m["source"])
    return out


@lru_cache(maxsize=1)
def _gpu_data() -> tuple[dict[str, GpuPreset], dict[str, str]]:
    data = _load("gpus.json")
    gpus = {k: GpuPreset(key=k, **{f: v[f] for f in GpuPreset.__dataclass_fields__ if f != "key"})
            for k, v in data["gpus"].items()}
    return gpus, dict(data.get("aliases", {}))


def gpus() -> dict[str, GpuPreset]:
    return dict(_gpu_data()[0])


@lru_cache(maxsize=1)
def clusters() -> dict[str, ClusterPreset]:
    return {k: ClusterPreset(key=k, **{f: v[f] for f in ClusterPreset.__dataclass_fields__ if f != "key"})
            for k, v in _load("clusters.json")["clusters"].items()}


def get_model(key: str) -> ModelPreset:
    known = models()
    if key not in known:
        raise PlanError(f"unknown model {key!r}; known models: {', '.join(known)} (or give --params N)")
    return known[key]


def get_gpu(key: str) -> GpuPreset:
    known, aliases = _gpu_data()
    key = aliases.get(key.lower(), key.lower())
    if key not in known:
        names = sorted([*known, *aliases])
        raise PlanError(f"unknown GPU {key!r}; known GPUs: {', '.join(names)}")
    return known[key]


def get_cluster(key: str) -> ClusterPreset:
    known = clusters()
    if key not in known:
        raise PlanError(f"unknown cluster {key!r}; known clusters: {', '.join(known)}")
    return known[key]


def read_rtl_efficiency(path: Path = RTL_BENCH_JSON) -> tuple[float, str]:
    """The RTL benchmark's measured efficiency (elements per clock / lanes) and where it came from."""
    try:
        value = json.loads(path.read_text()).get("efficiency")
    except (OSError, ValueError, AttributeError):
        return DEFAULT_RTL_EFFICIENCY, f"assumed (no RTL benchmark result at {path}; run `optimusnic bench`)"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        return DEFAULT_RTL_EFFICIENCY, f"assumed ({path} has no usable 'efficiency' in (0, 1])"
    return float(value), f"measured by the RTL benchmark ({path})"


# ---------------------------------------------------------------- the plan


@dataclass
class Assumptions:
    micro_batch: int = 1
    seq: int = 8192
    grad_accum: int = 1
    recompute: str = "full"
    mfu: float = DEFAULT_MFU
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY
    gpu_adam_efficiency: float = DEFAULT_GPU_ADAM_EFFICIENCY
    cpu_adam_params_per_s: float = DEFAULT_CPU_ADAM_PARAMS_PER_S
    rtl_efficiency: float = DEFAULT_RTL_EFFICIENCY
    rtl_efficiency_source: str = "assumed"
    nic_grads: str = "full"
    nic_ports: int = 1


@dataclass
class NicSide:
    target: str
    target_name: str
    shard_params: int
    shard_state_bytes: int
    max_params_per_card: int
    cards_needed: int
    fits: bool
    line_rate_gbps: float
    line_rate_params_per_s: float
    memory_params_per_s: float
    kernel_params_per_s: float
    rtl_efficiency: float
    achieved_params_per_s: float
    keeps_up: bool
    bottleneck: str
    lanes: int
    compute_units: int
    clock_mhz: float
    update_time_s: float
    sizing: SizingReport


@dataclass
class SchemeResult:
    key: str
    name: str
    memory: dict[str, float]  # params, grads, optimizer, activations, total (bytes per GPU)
    fits: bool
    why_not: str
    comm_bytes: dict[str, float]  # bytes each rank sends per step, by collective
    compute_s: float
    comm_s: float  # total link time of the collectives
    comm_exposed_s: float
    optimizer_s: float
    optimizer_exposed_s: float
    transfer_exposed_s: float  # PCIe host<->GPU copies (ZeRO-Offload)
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
    nic: NicSide
    tokens_per_step: int
    assumptions: list[str]
    schemes: list[SchemeResult]

    def fitting(self) -> list[SchemeResult]:
        return [s for s in self.schemes if s.fits]

    @property
    def fastest(self) -> SchemeResult | None:
        fit = self.fitting()
        return min(fit, key=lambda s: s.step_s) if fit else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["nic"]["sizing"] = self.nic.sizing.to_dict()
        d["fastest"] = self.fastest.key if self.fastest else None
        return d


SCHEME_NAMES = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "offload": "ZeRO-Offload",
    "optimusnic": "OptimusNIC",
    "optimusnic_z3": "OptimusNIC+Z3",
}


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{name}: {value!r} must be a positive whole number")
    return value


def _fraction(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise PlanError(f"{name}: {value!r} must be in (0, 1]")
    return float(value)


def nic_side(target: Target, params: int, gpus: int, rtl_efficiency: float, ports: int = 1) -> NicSide:
    """One card per GPU holds that rank's 1/N of the fp32 state; the gradient shard streams in (bf16).

    Sizing picks lanes and compute units for one port's line rate; with more ports the demand
    grows and the same kernel may fall behind (keeps_up says so).
    """
    report = size(target, params, cards=gpus, grad_dtype="bf16", out_dtype="bf16", grad_source="stream")
    kernel = report.kernel_params_per_s * rtl_efficiency
    achieved = min(report.memory_params_per_s, kernel)
    line_params = report.line_rate_params_per_s * ports
    return NicSide(
        target=target.key,
        target_name=target.name,
        shard_params=report.shard_params,
        shard_state_bytes=report.shard_state_bytes,
        max_params_per_card=report.max_params_per_card,
        cards_needed=report.cards_needed,
        fits=report.fits,
        line_rate_gbps=report.line_rate_gbps * ports,
        line_rate_params_per_s=line_params,
        memory_params_per_s=report.memory_params_per_s,
        kernel_params_per_s=report.kernel_params_per_s,
        rtl_efficiency=rtl_efficiency,
        achieved_params_per_s=achieved,
        keeps_up=achieved >= line_params,
        bottleneck="memory" if report.memory_params_per_s <= kernel else "kernel",
        lanes=report.lanes,
        compute_units=report.compute_units,
        clock_mhz=report.clock_mhz,
        update_time_s=report.shard_params / achieved,
        sizing=report,
    )


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
) -> Plan:
    """Memory per GPU and step time of every scheme; raises PlanError when nothing fits."""
    a = assumptions or Assumptions()
    params = _positive_int("params", params)
    n = _positive_int("gpus", gpus)
    for name in ("micro_batch", "seq", "grad_accum"):
        _positive_int(name.replace("_", "-"), getattr(a, name))
    for name in ("mfu", "link_efficiency", "gpu_adam_efficiency", "rtl_efficiency"):
        _fraction(name.replace("_", "-"), getattr(a, name))
    if not a.cpu_adam_params_per_s > 0:
        raise PlanError(f"cpu-adam-rate: {a.cpu_adam_params_per_s!r} must be positive")
    if a.recompute not in RECOMPUTE:
        raise PlanError(f"recompute {a.recompute!r}; choose one of {', '.join(RECOMPUTE)}")
    if not 1 <= a.nic_ports <= target.network_ports:
        raise PlanError(f"nic-ports: {a.nic_ports} must be 1..{target.network_ports} ({target.name} ports)")
    if a.nic_grads not in NIC_GRADS:
        raise PlanError(f"nic-grads {a.nic_grads!r}; choose one of {', '.join(NIC_GRADS)}")
    cluster = cluster or get_cluster(gpu.default_cluster)
    if nodes is None:
        per_node = min(n, cluster.gpus_per_node)
        nodes = math.ceil(n / per_node)
    else:
        nodes = _positive_int("nodes", nodes)
        if n % nodes:
            raise PlanError(f"{n} GPUs do not split evenly over {nodes} nodes")
        per_node = n // nodes
        if per_node > cluster.gpus_per_node:
            raise PlanError(f"{per_node} GPUs per node; a {cluster.name} node has {cluster.gpus_per_node}")
    if n % per_node:
        raise PlanError(f"{n} GPUs do not fill whole {cluster.name} nodes of {cluster.gpus_per_node}; give --nodes")

    nic = nic_side(target, params, n, a.rtl_efficiency, a.nic_ports)

    # Links, bytes per second per direction after the efficiency factor.
    nvlink = gpu.nvlink_bytes_per_s * a.link_efficiency
    network = cluster.nic_gbps_per_gpu * 1e9 / 8 * a.link_efficiency
    card_link = a.nic_ports * target.line_rate_gbps * 1e9 / 8 * a.link_efficiency
    ring_bw = nvlink if nodes == 1 else min(nvlink, network)
    pcie = gpu.pcie_bytes_per_s * a.link_efficiency

    tokens = a.micro_batch * a.seq  # per GPU per micro-batch
    flops_rate = gpu.bf16_flops * a.mfu
    t_micro = train_flops(params, tokens, a.recompute) / flops_rate
    t_fwd = train_flops(params, tokens, "none") * (1 - BACKWARD_SHARE) / flops_rate
    t_bwd = t_micro - t_fwd  # backward plus the recomputed forward
    compute = a.grad_accum * t_micro
    acts = (activation_bytes(model.layers, model.hidden, model.heads, a.seq, a.micro_batch, a.recompute)
            if model and model.has_shape else 0.0)

    grad_b = GRAD_BYTES * params
    param_b = PARAM_BYTES * params
    shard = params / n
    gpu_adam_rate = gpu.memory_bandwidth_bytes_per_s * a.gpu_adam_efficiency / GPU_ADAM_BYTES
    cpu_adam_rate = cluster.cpu_sockets * a.cpu_adam_params_per_s / per_node  # per GPU's share of the host

    def ring(nbytes: float) -> float:
        return nbytes / ring_bw

    def nic_ring(nbytes: float, shard_bytes: float) -> float:
        # Across nodes the card is each rank's network link; inside one node the ring runs on
        # NVLink and the rank's shard still has to stream through its card.
        if nodes == 1:
            return max(nbytes / nvlink, shard_bytes / card_link)
        return nbytes / min(nvlink, card_link)

    rs_v = ring_reduce_scatter_bytes(n, grad_b)
    ag_v = ring_all_gather_bytes(n, param_b)
    ar_v = ring_all_reduce_bytes(n, grad_b)
    results: list[SchemeResult] = []

    def add(key: str, comm: dict[str, float], comm_s: float, comm_exposed: float, opt_s: float,
            opt_exposed: float, transfer: float = 0.0, host: float = 0.0, notes: list[str] | None = None,
            extra_misfit: str = "") -> None:
        mem = gpu_memory_bytes(key, params, n, a.nic_grads)
        mem["activations"] = acts
        mem["total"] = sum(mem.values())
        why = []
        if mem["total"] > gpu.memory_bytes:
            why.append(f"needs {mem['total'] / 1e9:.1f} GB per GPU > {gpu.memory_bytes / 1e9:.0f} GB")
        if extra_misfit:
            why.append(extra_misfit)
        step = compute + comm_exposed + opt_exposed + transfer
        results.append(SchemeResult(
            key=key, name=SCHEME_NAMES[key], memory=mem, fits=not why, why_not="; ".join(why), comm_bytes=comm,
            compute_s=compute, comm_s=comm_s, comm_exposed_s=comm_exposed, optimizer_s=opt_s,
            optimizer_exposed_s=opt_exposed, transfer_exposed_s=transfer, step_s=step,
            host_bytes_per_node=host, notes=notes or []))

    # DDP: one all-reduce of the accumulated gradients under the last backward; full update on every GPU.
    t = ring(ar_v)
    opt = params / gpu_adam_rate
    add("ddp", {"all_reduce_grads": ar_v}, t, max(0.0, t - t_bwd), opt, opt)

    # ZeRO-1: reduce-scatter under the last backward, shard update, all-gather of the new params.
    t_rs, t_ag = ring(rs_v), ring(ag_v)
    opt = shard / gpu_adam_rate
    add("zero1", {"reduce_scatter_grads": rs_v, "all_gather_params": ag_v}, t_rs + t_ag,
        max(0.0, t_rs - t_bwd) + t_ag, opt, opt)

    # ZeRO-2: gradients are sharded, so each micro-batch's gradients are reduce-scattered.
    add("zero2", {"reduce_scatter_grads": a.grad_accum * rs_v, "all_gather_params": ag_v},
        a.grad_accum * t_rs + t_ag, a.grad_accum * max(0.0, t_rs - t_bwd) + t_ag, opt, opt)

    # ZeRO-3: parameters gathered for forward and again for backward, every micro-batch (prefetched).
    exposed = a.grad_accum * (max(0.0, t_ag - t_fwd) + max(0.0, t_ag + t_rs - t_bwd))
    add("zero3", {"all_gather_params": 2 * a.grad_accum * ag_v, "reduce_scatter_grads": a.grad_accum * rs_v},
        a.grad_accum * (2 * t_ag + t_rs), exposed, opt, opt)

    # ZeRO-Offload (on ZeRO-2): grads to host under backward, CPU Adam, bf16 shard back, all-gather.
    t_d2h = GRAD_BYTES * shard / pcie
    t_h2d = PARAM_BYTES * shard / pcie
    opt = shard / cpu_adam_rate
    host = per_node * (STATE_BYTES + GRAD_BYTES) * shard
    add("offload", {"reduce_scatter_grads": a.grad_accum * rs_v, "all_gather_params": ag_v},
        a.grad_accum * t_rs + t_ag, a.grad_accum * max(0.0, max(t_rs, t_d2h) - t_bwd) + t_ag, opt, opt,
        transfer=t_h2d, host=host,
        extra_misfit=(f"needs {host / 1e12:.2f} TB host memory per node > {cluster.host_memory_bytes / 1e12:.1f} TB"
                      if host > cluster.host_memory_bytes else ""),
        notes=["no delayed parameter update (DPU): the CPU step is on the critical path"])

    # OptimusNIC: the reduced gradient shard streams through the rank's card, which updates as it arrives.
    nic_misfit = "" if nic.fits else (
        f"shard of {nic.shard_params / 1e9:.2f} G params > {nic.max_params_per_card / 1e9:.2f} G per "
        f"{target.name} (needs {nic.cards_needed} cards)")
    sharded = a.nic_grads == "sharded"
    rounds = a.grad_accum if sharded else 1
    n_rs = nic_ring(rs_v, GRAD_BYTES * shard)
    n_ag = nic_ring(ag_v, PARAM_BYTES * shard)
    add("optimusnic", {"reduce_scatter_grads": rounds * rs_v, "all_gather_params": ag_v}, rounds * n_rs + n_ag,
        rounds * max(0.0, n_rs - t_bwd) + n_ag, nic.update_time_s, max(0.0, nic.update_time_s - n_rs),
        extra_misfit=nic_misfit,
        notes=[f"gradients on the GPU: {a.nic_grads}" + (" (ZeRO-2-style buckets)" if sharded else " (bf16 buffer)")])

    # OptimusNIC + ZeRO-3 parameter sharding: the card link carries every collective.
    exposed = a.grad_accum * (max(0.0, n_ag - t_fwd) + max(0.0, n_ag + n_rs - t_bwd))
    add("optimusnic_z3", {"all_gather_params": 2 * a.grad_accum * ag_v, "reduce_scatter_grads": a.grad_accum * rs_v},
        a.grad_accum * (2 * n_ag + n_rs), exposed, nic.update_time_s, max(0.0, nic.update_time_s - n_rs),
        extra_misfit=nic_misfit)

    name = model.name if model else f"{params / 1e9:g}B-parameter model"
    if not any(r.fits for r in results):
        best = min(results, key=lambda r: r.memory["total"])
        raise PlanError(
            f"{name} fits under no scheme on {n} x {gpu.name}: the smallest need is {best.name} at "
            f"{best.memory['total'] / 1e9:.1f} GB per GPU ({best.why_not}); use more GPUs, a larger GPU"
            + (", a shorter --seq or --micro-batch, or --recompute full" if a.recompute != "full" else ""))

    notes = [
        f"data parallelism only over {n} GPUs ({nodes} node(s) x {per_node} of {cluster.name}); no tensor or "
        "pipeline parallelism",
        "memory: ZeRO paper (Rajbhandari et al. 2020) 2 + 2 + 12 bytes per parameter (bf16 params, bf16 grads, "
        "fp32 master + Adam m + v); framework workspace, fragmentation and ZeRO-3 gather buffers not counted",
        (f"activations: Korthikanti et al. 2022, recompute={a.recompute} "
         + {"full": "(2sbh bytes per layer)", "selective": "(34sbh bytes per layer)",
            "none": "(sbh(34 + 5as/h) bytes per layer)"}[a.recompute]
         + f", micro-batch {a.micro_batch} x seq {a.seq}; GPT-style formula applied to a SwiGLU/GQA model")
        if acts else "activations: not estimated (no model architecture; give --model for an estimate)",
        f"compute: {'8' if a.recompute == 'full' else '6'} x params x tokens FLOPs "
        f"({'6 + one recomputed forward' if a.recompute == 'full' else 'forward + backward'}), "
        f"{a.grad_accum} micro-batch(es) of {tokens} tokens per GPU per step, attention-score FLOPs ignored",
        f"MFU {a.mfu:.0%} of {gpu.bf16_flops / 1e12:g} TFLOPS bf16 dense"
        + (f" ({MFU_SOURCE})" if a.mfu == DEFAULT_MFU else " (given)"),
        f"links at {a.link_efficiency:.0%} of peak (assumed): NVLink {gpu.nvlink_bytes_per_s / 1e9:g} GB/s per "
        f"direction, network {cluster.nic_gbps_per_gpu:g} Gb/s per GPU, PCIe {gpu.pcie_bytes_per_s / 1e9:g} GB/s, "
        f"{target.name} {a.nic_ports} x {target.line_rate_gbps:g} Gb/s port(s) (sizing sizes the kernel for one)",
        "collectives: flat ring over the slowest link (NVLink inside a node, the per-GPU network link across "
        "nodes); all-reduce 2(N-1)/N, reduce-scatter and all-gather (N-1)/N of the bytes",
        "overlap: gradient reduction hides under backward, ZeRO-3 gathers under forward/backward; the optimizer "
        "step and the post-step all-gather are exposed, except the OptimusNIC update, which hides under the "
        "reduce-scatter that feeds it",
        f"GPU Adam: {GPU_ADAM_BYTES} bytes per parameter at {a.gpu_adam_efficiency:.0%} of "
        f"{gpu.memory_bandwidth_bytes_per_s / 1e12:g} TB/s HBM (assumed)",
        f"CPU Adam (ZeRO-Offload): {a.cpu_adam_params_per_s / 1e9:g} G params/s per socket x "
        f"{cluster.cpu_sockets} sockets shared by {per_node} GPUs (assumed, not measured)",
        f"OptimusNIC: one {target.name} per GPU holds the rank's fp32 master + m + v (12 bytes per parameter), "
        f"bf16 gradient shard streams in, bf16 parameters stream out; sizing from hls.sizing; kernel rate x "
        f"RTL efficiency {a.rtl_efficiency:.2f}, {a.rtl_efficiency_source}",
        f"OptimusNIC gradients on the GPU: {a.nic_grads} "
        + ("(2 bytes per parameter, a bf16 buffer as in DDP/ZeRO-1)" if a.nic_grads == "full"
           else "(2/N bytes per parameter, ZeRO-2-style bucketed reduce-scatter)")
        + "; OptimusNIC+Z3 also shards the bf16 parameters as ZeRO-3 does (a variant, not in the design yet)",
    ]
    return Plan(
        model=model.key if model else "custom",
        model_name=name,
        params=params,
        gpus=n,
        nodes=nodes,
        gpus_per_node=per_node,
        gpu=gpu.key,
        gpu_name=gpu.name,
        gpu_memory_bytes=gpu.memory_bytes,
        cluster=cluster.key,
        cluster_name=cluster.name,
        nic=nic,
        tokens_per_step=n * a.grad_accum * tokens,
        assumptions=notes,
        schemes=results,
    )
