"""Plan a training step: memory per GPU and step time of DDP, ZeRO-1/2/3, HSDP, ZeRO++, ZeRO-Offload, OptimusNIC.

A first-order model for data parallelism only (no tensor or pipeline parallelism), mixed
precision with bf16 parameters and Adam with fp32 master weights and moments. Every assumption
the numbers rest on is returned with them (`Plan.assumptions`) and printed by `optimusnic plan`.

Memory per GPU (Rajbhandari et al. 2020, "ZeRO", section 3.1 and figure 1: 2 + 2 + K bytes per
parameter, K = 12 for mixed-precision Adam; P parameters, N data-parallel ranks, g ranks per
node, G = gradient-buffer bytes per parameter: 2 for bf16, 4 for a Megatron-style fp32 buffer):
  DDP           params 2P      grads GP      optimizer 12P
  ZeRO-1        params 2P      grads GP      optimizer 12P/N
  ZeRO-2        params 2P      grads GP/N    optimizer 12P/N
  ZeRO-3        params 2P/N    grads GP/N    optimizer 12P/N
  HSDP          params 2P/g    grads GP/g    optimizer 12P/g  (shard inside a node, replicate across;
                PyTorch FSDP HYBRID_SHARD)
  ZeRO++        params 2P/N + 2P/g (hpZ keeps a secondary bf16 partition per node; Wang et al. 2023,
                "ZeRO++", section 3.2), grads GP/N, optimizer 12P/N
  ZeRO-Offload  params 2P      grads GP/N    optimizer 0 (fp32 state + a grad copy in host memory;
                Ren et al. 2021, on top of ZeRO-2)
  OptimusNIC    params 2P      grads GP (or GP/N with `nic_grads="sharded"`)   optimizer 0
  OptimusNIC+Z3 params 2P/N    grads GP/N    optimizer 0
Activations (Korthikanti et al. 2022, section 4.1, 16-bit activations, no tensor/sequence
parallelism), per layer: none s*b*h*(34 + 5*a*s/h), selective 34*s*b*h, full 2*s*b*h bytes;
derived for GPT layers, an estimate for Llama's SwiGLU/GQA. Plus the logits of one micro-batch,
s*b*V*4 bytes (fp32 logits for the loss; 8192 x 128,256 x 4 B = 4.2 GB per Llama 3 sequence).

FLOPs (Chowdhery et al. 2022, "PaLM", appendix B; Narayanan et al. 2021 for the attention term):
  model FLOPs    = tokens * (6 * P_matmul + 12 * L * h * s)   (P_matmul = P minus the input
                   embedding, a lookup; 12Lhs = QK^T and AV, forward 4Lhs + backward 8Lhs,
                   causal masking not discounted, as PaLM counts it)
  hardware FLOPs = model FLOPs + the recomputed forward: full + tokens*(2*P_layers + 4*L*h*s),
                   selective + tokens*4*L*h*s (attention scores), none + 0
  time           = model FLOPs / (MFU x peak): MFU is defined on model FLOPs, so recomputation
                   shows as hardware FLOPs utilisation (HFU = MFU x hardware/model), not as time
                   on top of a given MFU. Forward and backward windows split the time by their
                   share of hardware FLOPs.

Collectives (one model for every scheme). A group of ranks spans `nodes` nodes with g ranks each;
bus bandwidth follows NCCL's convention (nccl-tests doc/PERFORMANCE.md): a ring all-reduce
sends 2(n-1)/n of the buffer per rank, reduce-scatter and all-gather (n-1)/n, and
  time = factor * (n-1)/n * bytes / busbw,
  busbw = NVLink                              inside one node
        = min(NVLink, g x per-GPU rail)       across nodes: NCCL's rings enter and leave a node once
                                              and spread over all its NICs (NVIDIA/nccl issues 687
                                              and 812: a DGX A100 with 8x 200G HDR reaches ~192 GB/s
                                              all-reduce bus bandwidth, i.e. ~8 x 25 GB/s)
with every link at a link efficiency that may depend on the node count. Hierarchical schemes run
the same formula on their subgroups: inside a node (g ranks, NVLink) and across nodes (one rank
per node, on its own rail). Latency terms are left out (the buffers are GBs). Per step:
  DDP           all-reduce of the G-byte gradients (once, last micro-batch)
  ZeRO-1        reduce-scatter (once) + post-step all-gather of bf16 params; ZeRO-2 reduce-scatters
                every micro-batch; ZeRO-Offload as ZeRO-2 plus the shard's PCIe copies
  ZeRO-3        all-gather before forward and backward and reduce-scatter, every micro-batch
  HSDP          gathers and reduce-scatter inside the node every micro-batch, all-reduce of the
                node's 1/g shard across nodes once
  ZeRO++        qwZ int8 all-gather over all ranks before forward, hpZ bf16 all-gather inside the
                node before backward, qgZ int4 all-to-all inside the node then across nodes on
                1/g of it (Wang et al. 2023, section 3; 3M -> 0.75M across nodes)

Overlap (explicit, the same for all schemes, flags `overlap_reduce` and `overlap_gather`):
gradient reductions hide under the backward pass of their micro-batch; parameter all-gathers
(ZeRO-3/HSDP/ZeRO++ before forward and backward, the post-step gather of ZeRO-1/2, Offload and
OptimusNIC before the next forward) hide under that forward or backward. What does not fit in
the window shows. The optimizer step never hides on a GPU or CPU.

Where the card sits (`nic_placement`):
  sidecar  what the driver builds today (`pynq_driver.optim.sharded.ShardedNicOptimizer`): the
           collectives run on the GPUs' fabric; after the whole reduce-scatter each rank copies its
           gradient shard to the host (GPU PCIe), to the card (card PCIe), the card updates, and the
           bf16 parameters come back the same way; then the all-gather. Sequential as built;
           `nic_overlap` pipelines the copies and the update over chunks (the longest stage shows).
  rail     the card is the GPU's network rail: cross-node reduction arrives on the card, which
           updates its shard and starts the all-gather. Per-card link = min(ports x line rate x
           efficiency, card PCIe usable). On one node there is no wire: the shard crosses the card's
           PCIe both ways.
The card's PCIe usable rate comes from the catalog's `pcie` string (Gen3 x16 = 15.75 GB/s raw) x
0.825 = 13.0 GB/s (the brief's ~13 GB/s; AMD's Vitis tutorial "Determine the Maximum Achievable
Throughput" shows `xbutil validate` at 8.5-9.6 GB/s host->card and 12.2 GB/s card->host on an
Alveo, so the default is optimistic for host->card).
Global-norm clipping (`clip`, on by default) needs the whole gradient norm before any element is
updated, so the card's update never overlaps the reduce-scatter while it is on; with it off and
the stream path (`nic_grad_path="stream"`, rail only) the card updates as the shard arrives.
Card capacity and rate come from `hls.sizing.size` for the gradient path the driver uses
(`grad_source="memory"` for staged, "stream" for the stream path).

Two views of every plan: iso-hardware (baselines on the cluster's own NICs) and iso-network
(baselines on the same links the cards have: cards per node x ports x line rate per node).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from hls.errors import UserError
from hls.paths import BUILD_DIR
from hls.sizing import size
from hls.targets import Target

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
RTL_BENCH_JSON = BUILD_DIR / "bench" / "rtl.json"

PARAM_BYTES = 2  # bf16 parameters on the GPU
GRAD_BYTES = 2  # bf16 gradients (the default gradient buffer)
GRAD_BUFFERS = {"bf16": 2, "fp32": 4}  # fp32: Megatron-style main_grad accumulation buffer
STATE_BYTES = 12  # fp32 master + m + v (the ZeRO paper's K = 12)
LOGIT_BYTES = 4  # fp32 logits kept for the loss and its gradient
# GPU Adam reads p, m, v (12) and the gradient, writes p, m, v (12) and the bf16 copy (2).
GPU_ADAM_FIXED_BYTES = 26
GPU_ADAM_BYTES = GPU_ADAM_FIXED_BYTES + GRAD_BYTES  # 28 with bf16 gradients
QWZ_BYTES = 1  # ZeRO++ qwZ: int8 weights in the forward all-gather (block scales not counted)
QGZ_BYTES = 0.5  # ZeRO++ qgZ: int4 gradients in the all-to-all reduction

RECOMPUTE = ("full", "selective", "none")
NIC_GRADS = ("full", "sharded")
PLACEMENTS = ("sidecar", "rail")
GRAD_PATHS = ("staged", "stream")
VIEWS = ("iso-hardware", "iso-network")
SCHEMES = ("ddp", "zero1", "zero2", "zero3", "hsdp", "zeropp", "offload", "optimusnic", "optimusnic_z3")
SCHEME_NAMES = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
    "hsdp": "HSDP",
    "zeropp": "ZeRO++",
    "offload": "ZeRO-Offload",
    "optimusnic": "OptimusNIC",
    "optimusnic_z3": "OptimusNIC+Z3",
}
OPTIMUSNIC = ("optimusnic", "optimusnic_z3")

# Defaults for the assumptions; each is printed with the plan and can be overridden.
DEFAULT_MFU = 0.40
MFU_SOURCE = "Llama 3 paper (Grattafiori et al. 2024), Table 4: 38-43% BF16 MFU training 405B on H100s"
DEFAULT_LINK_EFFICIENCY = 0.85
DEFAULT_GPU_ADAM_EFFICIENCY = 0.80
DEFAULT_CPU_ADAM_PARAMS_PER_S = 0.7e9  # per socket
CPU_ADAM_SOURCE = (
    "DeepSpeed PR #735 (deepspeedai/DeepSpeed, 2021-02): DeepSpeedCPUAdam takes 8.2 s for an 11.6B-parameter "
    "GPT-2 (1.41e9 params/s per host; taken as two sockets, 0.7e9 each; socket count not stated); PR #378: "
    "5.1-6.5x faster than torch's CPU Adam for 1-10B parameters")
DEFAULT_RTL_EFFICIENCY = 0.95
PCIE_USABLE_FRACTION = 0.825  # 13.0 / 15.75 GB/s on Gen3 x16 (brief: ~13 GB/s usable on the U55C)
PCIE_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 1.0}


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
    tied_embeddings: bool = False
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
    card_slots: int
    card_slots_source: str
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


COLLECTIVE_FACTOR = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}


def bus_bandwidth(ranks_per_node: int, nodes: int, nvlink: float, rail_per_gpu: float) -> float:
    """NCCL ring bus bandwidth of a group: NVLink in one node, min(NVLink, g x rail) across nodes."""
    if nodes == 1:
        return nvlink
    return min(nvlink, ranks_per_node * rail_per_gpu)


def collective_time(kind: str, nbytes: float, ranks_per_node: int, nodes: int, nvlink: float,
                    rail_per_gpu: float) -> float:
    """Seconds for a collective of `nbytes` (the full buffer) over `nodes` x `ranks_per_node` ranks."""
    n = ranks_per_node * nodes
    if n == 1 or nbytes == 0:
        return 0.0
    volume = COLLECTIVE_FACTOR[kind] * (n - 1) / n * nbytes
    return volume / bus_bandwidth(ranks_per_node, nodes, nvlink, rail_per_gpu)


def gpu_memory_bytes(scheme: str, params: float, ranks: int, nic_grads: str = "full", *,
                     ranks_per_node: int | None = None, grad_bytes: int = GRAD_BYTES) -> dict[str, float]:
    """Parameters, gradients and optimizer state per GPU (bytes) under `scheme`."""
    p, n, gb = params, ranks, grad_bytes
    g = min(n, ranks_per_node) if ranks_per_node else n
    table = {
        "ddp": (2 * p, gb * p, 12 * p),
        "zero1": (2 * p, gb * p, 12 * p / n),
        "zero2": (2 * p, gb * p / n, 12 * p / n),
        "zero3": (2 * p / n, gb * p / n, 12 * p / n),
        "hsdp": (2 * p / g, gb * p / g, 12 * p / g),
        # hpZ's secondary partition is only needed across nodes; on one node it is the primary one.
        "zeropp": (2 * p / n + (2 * p / g if g < n else 0.0), gb * p / n, 12 * p / n),
        "offload": (2 * p, gb * p / n, 0.0),
        "optimusnic": (2 * p, gb * p if nic_grads == "full" else gb * p / n, 0.0),
        "optimusnic_z3": (2 * p / n, gb * p / n, 0.0),
    }
    if scheme not in table:
        raise PlanError(f"unknown scheme {scheme!r}; known schemes: {', '.join(table)}")
    prm, grd, opt = table[scheme]
    return {"params": prm, "grads": grd, "optimizer": opt}


def activation_bytes(layers: int, hidden: int, heads: int, seq: int, micro_batch: float, recompute: str) -> float:
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


def logits_bytes(vocab: int, seq: int, micro_batch: float) -> float:
    """The fp32 logits of one micro-batch, held for the loss and its gradient."""
    return seq * micro_batch * vocab * LOGIT_BYTES


def _matmul_params(params: float, model: ModelPreset | None) -> float:
    if model is None or not model.has_shape or model.vocab is None:
        return params
    return params - model.vocab * model.hidden  # the input embedding is a lookup, not a matmul


def _layer_params(params: float, model: ModelPreset | None) -> float:
    if model is None or not model.has_shape or model.vocab is None:
        return params
    embeddings = model.vocab * model.hidden * (1 if model.tied_embeddings else 2)
    return params - embeddings - model.hidden  # minus embeddings, head and final norm


def model_flops(params: float, tokens: float, model: ModelPreset | None = None, seq: int = 0) -> float:
    """Model FLOPs of forward + backward for `tokens` tokens (PaLM appendix B)."""
    attention = 12 * model.layers * model.hidden * seq if model is not None and model.has_shape else 0
    return tokens * (6 * _matmul_params(params, model) + attention)


def recompute_flops(params: float, tokens: float, recompute: str, model: ModelPreset | None = None,
                    seq: int = 0) -> float:
    """Extra hardware FLOPs of activation recomputation (the forward run again in backward)."""
    attention_fwd = 4 * model.layers * model.hidden * seq if model is not None and model.has_shape else 0
    if recompute == "full":
        return tokens * (2 * _layer_params(params, model) + attention_fwd)
    if recompute == "selective":
        return tokens * attention_fwd
    if recompute == "none":
        return 0.0
    raise PlanError(f"recompute {recompute!r}; choose one of {', '.join(RECOMPUTE)}")


def forward_flops(params: float, tokens: float, model: ModelPreset | None = None, seq: int = 0) -> float:
    """FLOPs of one forward pass: a third of the matmul term plus the forward attention term."""
    attention_fwd = 4 * model.layers * model.hidden * seq if model is not None and model.has_shape else 0
    return tokens * (2 * _matmul_params(params, model) + attention_fwd)


def pcie_bytes_per_s(pcie: str) -> float:
    """Raw one-direction rate of a link described as 'Gen3 x16 ...' (lanes x GT/s x encoding / 8)."""
    m = re.search(r"gen\s*(\d)\s*x\s*(\d+)", pcie, re.IGNORECASE)
    if not m or int(m.group(1)) not in PCIE_GT_PER_S:
        raise PlanError(f"cannot read a PCIe generation and width from {pcie!r}; give --card-pcie-gbs")
    gen, lanes = int(m.group(1)), int(m.group(2))
    return lanes * PCIE_GT_PER_S[gen] * 1e9 * PCIE_ENCODING[gen] / 8


def parse_link_efficiency(text: str | float) -> tuple[tuple[int, float], ...]:
    """'0.85' or a scale table 'nodes:eff,...' ('1:0.9,8:0.85,64:0.75'): the entry for the largest
    node count not above the plan's applies (the first entry below its own node count)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        points = [(1, float(text))]
    else:
        points = []
        for part in str(text).split(","):
            bits = part.strip().split(":")
            try:
                nodes, eff = (1, float(bits[0])) if len(bits) == 1 else (int(bits[0]), float(bits[1]))
            except ValueError:
                raise PlanError(f"link-efficiency: {text!r} must be a fraction or nodes:fraction,...") from None
            points.append((nodes, eff))
    for nodes, eff in points:
        if nodes < 1 or not 0 < eff <= 1:
            raise PlanError(f"link-efficiency: {text!r} needs node counts >= 1 and fractions in (0, 1]")
    return tuple(sorted(points))


def link_efficiency_at(points: tuple[tuple[int, float], ...], nodes: int) -> float:
    chosen = points[0][1]
    for at, eff in points:
        if at <= nodes:
            chosen = eff
    return chosen


# ---------------------------------------------------------------- presets


def _load(name: str) -> dict[str, Any]:
    return json.loads((PRESETS_DIR / name).read_text())


@lru_cache(maxsize=1)
def models() -> dict[str, ModelPreset]:
    out = {}
    for key, m in _load("models.json")["models"].items():
        tied = m.get("tied_embeddings", False)
        params = transformer_params(m["layers"], m["hidden"], m["ffn"], m["heads"], m["kv_heads"], m["vocab"], tied)
        out[key] = ModelPreset(key=key, name=m["name"], params=params, layers=m["layers"], hidden=m["hidden"],
                               ffn=m["ffn"], heads=m["heads"], kv_heads=m["kv_heads"], vocab=m["vocab"],
                               tied_embeddings=tied, source=m["source"])
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
    link_efficiency: str | float = DEFAULT_LINK_EFFICIENCY
    gpu_adam_efficiency: float = DEFAULT_GPU_ADAM_EFFICIENCY
    cpu_adam_params_per_s: float = DEFAULT_CPU_ADAM_PARAMS_PER_S
    rtl_efficiency: float = DEFAULT_RTL_EFFICIENCY
    rtl_efficiency_source: str = "assumed"
    nic_grads: str = "full"
    nic_ports: int = 1
    nic_placement: str = "sidecar"
    nic_grad_path: str = "staged"
    nic_overlap: bool = False  # the driver as built copies, updates and copies back one after another
    clip: bool = True  # global-norm gradient clipping (Llama 3 clips at 1.0)
    overlap_reduce: bool = True
    overlap_gather: bool = True
    grad_buffer: str = "bf16"
    cards_per_node: int | None = None  # default: one card per GPU
    pcie_slots: int | None = None  # default: the cluster preset's card_slots
    card_pcie_bytes_per_s: float | None = None  # default: from the catalog's pcie string
    rail_gbps: float | None = None  # per-GPU network for the baselines; default: the cluster's
    view: str = "iso-hardware"
    freed_threshold_bytes: float | None = None  # default: one micro-batch of activations + logits


@dataclass
class NicSide:
    target: str
    target_name: str
    placement: str
    grad_path: str
    grad_source: str  # what sizing was asked for: memory (staged) or stream
    cards_per_node: int
    card_params: int  # parameters whose state one card holds
    card_state_bytes: int
    max_params_per_card: int
    fits: bool
    cards_per_gpu_needed: int  # with the shard of one GPU spread over cards
    cards_per_node_needed: int
    pcie_slots: int
    slots_ok: bool
    line_rate_gbps: float  # ports x port rate
    card_pcie_bytes_per_s: float
    card_link_bytes_per_s: float  # min(ports x rate x efficiency, PCIe)
    rtl_efficiency: float
    achieved_params_per_s: float
    keeps_up: bool  # with the gradient arrival rate over the card link
    update_time_s: float
    sizing_fields: list[str]
    sizing: Any = None


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
        d["fastest"] = self.fastest.key if self.fastest else None
        return d


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{name}: {value!r} must be a positive whole number")
    return value


def _fraction(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise PlanError(f"{name}: {value!r} must be in (0, 1]")
    return float(value)


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise PlanError(f"{name}: {value!r} must be a positive number")


def nic_side(target: Target, params: int, nodes: int, gpus_per_node: int, a: Assumptions,
             link_efficiency: float, pcie_slots: int) -> NicSide:
    """The cards: what one holds and how fast it updates, for the gradient path the driver uses.

    Reads only `max_params_per_card`, `achieved_params_per_s` and, when present, to derate the
    kernel by the RTL benchmark's efficiency, `kernel_params_per_s` of `hls.sizing.size`; whether the
    card keeps up is judged here against the card's link (sizing judges one port's line rate).
    """
    k = a.cards_per_node or gpus_per_node
    cards = nodes * k
    grad_dtype = "fp32" if a.grad_buffer == "fp32" else "bf16"
    source = "stream" if a.nic_grad_path == "stream" else "memory"
    report = size(target, params, cards=cards, grad_dtype=grad_dtype, out_dtype="bf16", grad_source=source)
    used = ["max_params_per_card", "achieved_params_per_s"]
    achieved = float(report.achieved_params_per_s)
    kernel = getattr(report, "kernel_params_per_s", None)
    if kernel is not None:
        achieved = min(achieved, kernel * a.rtl_efficiency)
        used.append("kernel_params_per_s")
    cap = int(report.max_params_per_card)
    card_params = math.ceil(params / cards)
    raw_pcie = a.card_pcie_bytes_per_s or pcie_bytes_per_s(target.pcie) * PCIE_USABLE_FRACTION
    wire = a.nic_ports * target.line_rate_gbps * 1e9 / 8 * link_efficiency
    link = min(wire, raw_pcie)
    grad_b = GRAD_BUFFERS[a.grad_buffer]
    shard_per_gpu = params / (nodes * gpus_per_node)
    per_node_needed = math.ceil(params / nodes / cap)
    return NicSide(
        target=target.key, target_name=target.name, placement=a.nic_placement, grad_path=a.nic_grad_path,
        grad_source=source, cards_per_node=k, card_params=card_params, card_state_bytes=card_params * STATE_BYTES,
        max_params_per_card=cap, fits=card_params <= cap,
        cards_per_gpu_needed=math.ceil(shard_per_gpu / cap), cards_per_node_needed=per_node_needed,
        pcie_slots=pcie_slots, slots_ok=max(k, per_node_needed) <= pcie_slots,
        line_rate_gbps=a.nic_ports * target.line_rate_gbps, card_pcie_bytes_per_s=raw_pcie,
        card_link_bytes_per_s=link, rtl_efficiency=a.rtl_efficiency, achieved_params_per_s=achieved,
        keeps_up=achieved >= link / grad_b, update_time_s=card_params / achieved, sizing_fields=used,
        sizing=report)


@dataclass
class _Ctx:
    """Everything resolved once per plan; the timing and memory helpers read it."""

    params: int
    n: int
    nodes: int
    g: int
    gpu: GpuPreset
    cluster: ClusterPreset
    target: Target
    model: ModelPreset | None
    a: Assumptions
    nic: NicSide
    eff: float
    nvlink: float
    gpu_pcie: float
    rails: dict[str, float]  # view -> per-GPU rail of the baselines
    card_rail: float  # per-GPU share of the cards' links

    @property
    def gb(self) -> int:
        return GRAD_BUFFERS[self.a.grad_buffer]


@dataclass
class _Phases:
    """One scheme's work in a step, by where it can hide (seconds)."""

    comm_bytes: dict[str, float]
    fwd: list[float] = field(default_factory=list)  # gathers before each forward
    bwd_gather: list[float] = field(default_factory=list)  # gathers during each backward
    reduce_each: list[float] = field(default_factory=list)  # reductions of every micro-batch
    reduce_last: list[float] = field(default_factory=list)  # reductions once per step
    post_gather: list[float] = field(default_factory=list)  # after the update, before the next forward
    optimizer: float = 0.0
    transfer: float = 0.0
    optimizer_shown: float = 0.0
    transfer_shown: float = 0.0
    merged_chain: bool = False  # the card's chain runs inside the last reduction


def _card_chain(c: _Ctx) -> tuple[list[float], list[float], float]:
    """The card's work after the reduce: (copies, all stages in order, update seconds)."""
    a, nic = c.a, c.nic
    shard = c.params / c.n
    u = nic.update_time_s
    pcie = nic.card_pcie_bytes_per_s
    if a.nic_placement == "sidecar":
        # As built: GPU -> host -> card, update, card -> host -> GPU (ShardedNicOptimizer.step).
        copies = [c.gb * shard / c.gpu_pcie, c.gb * nic.card_params / pcie,
                  PARAM_BYTES * nic.card_params / pcie, PARAM_BYTES * shard / c.gpu_pcie]
        return copies, [copies[0], copies[1], u, copies[2], copies[3]], u
    if c.nodes == 1:
        # Rail on one node: no wire; the shard crosses the card's PCIe (peer to peer) both ways.
        copies = [c.gb * nic.card_params / pcie, PARAM_BYTES * nic.card_params / pcie]
        return copies, [copies[0], u, copies[1]], u
    return [], [u], u


def _phases(c: _Ctx, key: str, view: str) -> _Phases:
    ph = _scheme_phases(c, key, view)
    if key not in ("offload", *OPTIMUSNIC):
        ph.optimizer_shown = ph.optimizer  # a GPU's optimizer step sits between reduce and gather
    return ph


def _scheme_phases(c: _Ctx, key: str, view: str) -> _Phases:
    P, n, g, nodes, gb = c.params, c.n, c.g, c.nodes, c.gb
    rail = c.rails[view]
    grads, params_b = gb * P, PARAM_BYTES * P
    adam_rate = c.gpu.memory_bandwidth_bytes_per_s * c.a.gpu_adam_efficiency / (GPU_ADAM_FIXED_BYTES + gb)

    def world(kind: str, nbytes: float, r: float = rail) -> float:
        return collective_time(kind, nbytes, g, nodes, c.nvlink, r)

    def intra(kind: str, nbytes: float) -> float:
        return collective_time(kind, nbytes, g, 1, c.nvlink, math.inf)

    def inter(kind: str, nbytes: float) -> float:
        return collective_time(kind, nbytes, 1, nodes, c.nvlink, rail)

    rs_v = ring_reduce_scatter_bytes(n, grads)
    ag_v = ring_all_gather_bytes(n, params_b)
    A = c.a.grad_accum
    if key == "ddp":
        return _Phases({"all_reduce_grads": ring_all_reduce_bytes(n, grads)},
                       reduce_last=[world("all_reduce", grads)], optimizer=P / adam_rate)
    if key == "zero1":
        return _Phases({"reduce_scatter_grads": rs_v, "all_gather_params": ag_v},
                       reduce_last=[world("reduce_scatter", grads)], post_gather=[world("all_gather", params_b)],
                       optimizer=P / n / adam_rate)
    if key == "zero2":
        return _Phases({"reduce_scatter_grads": A * rs_v, "all_gather_params": ag_v},
                       reduce_each=[world("reduce_scatter", grads)], post_gather=[world("all_gather", params_b)],
                       optimizer=P / n / adam_rate)
    if key == "zero3":
        t_ag = world("all_gather", params_b)
        return _Phases({"all_gather_params": 2 * A * ag_v, "reduce_scatter_grads": A * rs_v},
                       fwd=[t_ag], bwd_gather=[t_ag], reduce_each=[world("reduce_scatter", grads)],
                       optimizer=P / n / adam_rate)
    if key == "hsdp":
        t_ag = intra("all_gather", params_b)
        return _Phases({"all_gather_params_intra": 2 * A * ring_all_gather_bytes(g, params_b),
                        "reduce_scatter_grads_intra": A * ring_reduce_scatter_bytes(g, grads),
                        "all_reduce_grads_inter": ring_all_reduce_bytes(nodes, grads / g)},
                       fwd=[t_ag], bwd_gather=[t_ag], reduce_each=[intra("reduce_scatter", grads)],
                       reduce_last=[inter("all_reduce", grads / g)], optimizer=P / g / adam_rate)
    if key == "zeropp":
        qgz = QGZ_BYTES * P
        hpz = intra("all_gather", params_b) if nodes > 1 else world("all_gather", params_b)
        return _Phases({"all_gather_params_qwz": A * ring_all_gather_bytes(n, QWZ_BYTES * P),
                        "all_gather_params_hpz": A * ring_all_gather_bytes(g, params_b),
                        "all_to_all_grads_qgz": A * (ring_reduce_scatter_bytes(g, qgz)
                                                     + ring_reduce_scatter_bytes(nodes, qgz / g))},
                       fwd=[world("all_gather", QWZ_BYTES * P)], bwd_gather=[hpz],
                       reduce_each=[intra("all_to_all", qgz) + inter("all_to_all", qgz / g)],
                       optimizer=P / n / adam_rate)
    if key == "offload":
        shard = P / n
        d2h = gb * shard / c.gpu_pcie
        h2d = PARAM_BYTES * shard / c.gpu_pcie
        cpu_rate = c.cluster.cpu_sockets * c.a.cpu_adam_params_per_s / g  # this GPU's share of the host
        opt = shard / cpu_rate
        return _Phases({"reduce_scatter_grads": A * rs_v, "all_gather_params": ag_v},
                       reduce_each=[max(world("reduce_scatter", grads), d2h)],
                       post_gather=[world("all_gather", params_b)], optimizer=opt, transfer=d2h + h2d,
                       optimizer_shown=opt, transfer_shown=h2d)
    # OptimusNIC: collectives on the view's rails (sidecar) or on the cards (rail).
    r = c.card_rail if c.a.nic_placement == "rail" else rail
    t_rs = world("reduce_scatter", grads, r)
    t_ag = world("all_gather", params_b, r)
    copies, chain, u = _card_chain(c)
    ph = _Phases({"reduce_scatter_grads": rs_v, "all_gather_params": ag_v}, post_gather=[t_ag],
                 optimizer=u, transfer=sum(copies))
    sharded = key == "optimusnic_z3" or c.a.nic_grads == "sharded"
    if key == "optimusnic_z3":
        ph.comm_bytes = {"all_gather_params": 2 * A * ag_v, "reduce_scatter_grads": A * rs_v}
        ph.fwd, ph.bwd_gather, ph.post_gather = [t_ag], [t_ag], []
    elif sharded:
        ph.comm_bytes["reduce_scatter_grads"] = A * rs_v
    pipelined = c.a.nic_grad_path == "stream" or c.a.nic_overlap
    if pipelined and not c.a.clip:
        # No norm to wait for: each chunk goes through the card as its reduction completes.
        ph.merged_chain = True
        if sharded:
            ph.reduce_each = [t_rs]
        ph.reduce_last = [max(t_rs, *chain) - (t_rs if sharded else 0.0)]
        return ph
    if sharded:
        ph.reduce_each = [t_rs]
    else:
        ph.reduce_last = [t_rs]
    shown = max(chain) if pipelined else sum(chain)
    if pipelined:
        ph.optimizer_shown, ph.transfer_shown = (shown, 0.0) if u >= max(copies, default=0.0) else (0.0, shown)
    else:
        ph.optimizer_shown, ph.transfer_shown = u, sum(copies)
    return ph


def _window(window: float, gathers: list[float], reduces: list[float], a: Assumptions) -> float:
    hidden = (gathers if a.overlap_gather else []) + (reduces if a.overlap_reduce else [])
    shown = (gathers if not a.overlap_gather else []) + (reduces if not a.overlap_reduce else [])
    return max(0.0, sum(hidden) - window) + sum(shown)


def _exposed(ph: _Phases, a: Assumptions, t_fwd: float, t_bwd: float) -> tuple[float, float]:
    """(link seconds of the collectives, seconds of them that show) over one step."""
    A = a.grad_accum
    first_fwd = _window(t_fwd, ph.fwd + ph.post_gather, [], a)
    other_fwd = (A - 1) * _window(t_fwd, ph.fwd, [], a)
    mid_bwd = (A - 1) * _window(t_bwd, ph.bwd_gather, ph.reduce_each, a)
    last_bwd = _window(t_bwd, ph.bwd_gather, ph.reduce_each + ph.reduce_last, a)
    total = A * (sum(ph.fwd) + sum(ph.bwd_gather) + sum(ph.reduce_each)) + sum(ph.reduce_last) + sum(ph.post_gather)
    return total, first_fwd + other_fwd + mid_bwd + last_bwd


@dataclass
class _Compute:
    step_s: float
    fwd_s: float
    bwd_s: float
    model_flops: float
    hardware_flops: float


def _compute(c: _Ctx, tokens: float) -> _Compute:
    """Compute time of one step for `tokens` tokens per GPU per micro-batch."""
    a, seq = c.a, c.a.seq
    mf = model_flops(c.params, tokens, c.model, seq)
    hw = mf + recompute_flops(c.params, tokens, a.recompute, c.model, seq)
    t_micro = mf / (c.gpu.bf16_flops * a.mfu)
    t_fwd = t_micro * forward_flops(c.params, tokens, c.model, seq) / hw
    return _Compute(a.grad_accum * t_micro, t_fwd, t_micro - t_fwd, a.grad_accum * mf, a.grad_accum * hw)


def _timings(c: _Ctx, view: str, tokens: float) -> dict[str, tuple[_Phases, float, float, float]]:
    """Per scheme: (phases, link seconds, exposed collective seconds, step seconds)."""
    comp = _compute(c, tokens)
    out = {}
    for key in SCHEMES:
        ph = _phases(c, key, view)
        total, shown = _exposed(ph, c.a, comp.fwd_s, comp.bwd_s)
        out[key] = (ph, total, shown, comp.step_s + shown + ph.optimizer_shown + ph.transfer_shown)
    return out


def _memory(c: _Ctx, key: str, n: int, micro_batch: float, seq: int) -> dict[str, float]:
    mem = gpu_memory_bytes(key, c.params, n, c.a.nic_grads, ranks_per_node=min(n, c.g), grad_bytes=c.gb)
    m = c.model
    if m is not None and m.has_shape:
        mem["activations"] = activation_bytes(m.layers, m.hidden, m.heads, seq, micro_batch, c.a.recompute)
        mem["logits"] = logits_bytes(m.vocab, seq, micro_batch) if m.vocab else 0.0
    else:
        mem["activations"] = mem["logits"] = 0.0
    mem["total"] = sum(mem.values())
    return mem


def _host_bytes(c: _Ctx, n: int) -> float:
    g = min(n, c.g)
    return g * (STATE_BYTES + c.gb) * c.params / n


def _cards(c: _Ctx, n: int) -> int:
    """Cards in use on `n` GPUs at this plan's cards per node."""
    return max(1, math.ceil(n * c.nic.cards_per_node / c.g))


def _misfit(c: _Ctx, key: str, n: int, mem: dict[str, float]) -> list[str]:
    why = []
    if mem["total"] > c.gpu.memory_bytes:
        why.append(f"needs {mem['total'] / 1e9:.1f} GB per GPU > {c.gpu.memory_bytes / 1e9:.0f} GB")
    if key == "offload":
        host = _host_bytes(c, n)
        if host > c.cluster.host_memory_bytes:
            why.append(f"needs {host / 1e12:.2f} TB host memory per node > {c.cluster.host_memory_bytes / 1e12:.1f} TB")
    if key in OPTIMUSNIC:
        cards = _cards(c, n)
        card_params = math.ceil(c.params / cards)
        if card_params > c.nic.max_params_per_card:
            why.append(f"{card_params / 1e9:.2f} G params per card > {c.nic.max_params_per_card / 1e9:.2f} G per "
                       f"{c.target.name} ({cards} cards; needs {math.ceil(c.params / c.nic.max_params_per_card)})")
    return why


def _result(c: _Ctx, key: str, view: str, timing: tuple[_Phases, float, float, float], comp: _Compute) -> SchemeResult:
    ph, total, shown, step = timing
    mem = _memory(c, key, c.n, c.a.micro_batch, c.a.seq)
    why = _misfit(c, key, c.n, mem)
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
        step_s=step, host_bytes_per_node=_host_bytes(c, c.n) if key == "offload" else 0.0, notes=notes)


def _validate(a: Assumptions, target: Target) -> None:
    for name in ("micro_batch", "seq", "grad_accum"):
        _positive_int(name.replace("_", "-"), getattr(a, name))
    for name in ("mfu", "gpu_adam_efficiency", "rtl_efficiency"):
        _fraction(name.replace("_", "-"), getattr(a, name))
    if not a.cpu_adam_params_per_s > 0:
        raise PlanError(f"cpu-adam-rate: {a.cpu_adam_params_per_s!r} must be positive")
    choices = (("recompute", RECOMPUTE), ("nic_grads", NIC_GRADS), ("nic_placement", PLACEMENTS),
               ("nic_grad_path", GRAD_PATHS), ("grad_buffer", tuple(GRAD_BUFFERS)), ("view", VIEWS))
    for name, allowed in choices:
        if getattr(a, name) not in allowed:
            raise PlanError(f"{name.replace('_', '-')} {getattr(a, name)!r}; choose one of {', '.join(allowed)}")
    if not 1 <= a.nic_ports <= target.network_ports:
        raise PlanError(f"nic-ports: {a.nic_ports} must be 1..{target.network_ports} ({target.name} ports)")
    if a.nic_grad_path == "stream" and a.nic_placement != "rail":
        raise PlanError("nic-grad-path stream needs --nic-placement rail: a sidecar card gets gradients over PCIe "
                        "into its memory")
    if a.nic_grad_path == "stream" and a.clip:
        raise PlanError("nic-grad-path stream needs --no-clip: with global-norm clipping the update of the first "
                        "element waits for the norm of the whole gradient, so it cannot run on the stream")
    for name in ("card_pcie_bytes_per_s", "rail_gbps", "freed_threshold_bytes"):
        _positive(name.replace("_", "-"), getattr(a, name))
    for name in ("cards_per_node", "pcie_slots"):
        if getattr(a, name) is not None and not (isinstance(getattr(a, name), int) and getattr(a, name) >= 0):
            raise PlanError(f"{name.replace('_', '-')}: {getattr(a, name)!r} must be a whole number")
    if a.cards_per_node == 0:
        raise PlanError("cards-per-node: 0; OptimusNIC needs at least one card per node")


def _layout(n: int, nodes: int | None, cluster: ClusterPreset) -> tuple[int, int]:
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
    return nodes, per_node


def _context(params: int, n: int, gpu: GpuPreset, target: Target, cluster: ClusterPreset, nodes: int, per_node: int,
             model: ModelPreset | None, a: Assumptions) -> _Ctx:
    eff = link_efficiency_at(parse_link_efficiency(a.link_efficiency), nodes)
    slots = a.pcie_slots if a.pcie_slots is not None else cluster.card_slots
    k = a.cards_per_node or per_node
    if k > per_node and k % per_node or k < per_node and per_node % k:
        raise PlanError(f"cards-per-node: {k} must divide or be a multiple of the {per_node} GPUs per node")
    nic = nic_side(target, params, nodes, per_node, a, eff, slots)
    cluster_rail = (a.rail_gbps or cluster.nic_gbps_per_gpu) * 1e9 / 8 * eff
    same_links = k * a.nic_ports * target.line_rate_gbps * 1e9 / 8 * eff / per_node
    return _Ctx(params=params, n=n, nodes=nodes, g=per_node, gpu=gpu, cluster=cluster, target=target, model=model,
                a=a, nic=nic, eff=eff, nvlink=gpu.nvlink_bytes_per_s * eff,
                gpu_pcie=gpu.pcie_bytes_per_s * PCIE_USABLE_FRACTION,
                rails={"iso-hardware": cluster_rail, "iso-network": same_links},
                card_rail=k * nic.card_link_bytes_per_s / per_node)


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
    params = _positive_int("params", params)
    n = _positive_int("gpus", gpus)
    _validate(a, target)
    cluster = cluster or get_cluster(gpu.default_cluster)
    nodes, per_node = _layout(n, nodes, cluster)
    c = _context(params, n, gpu, target, cluster, nodes, per_node, model, a)
    tokens = a.micro_batch * a.seq
    comp = _compute(c, tokens)
    views = {}
    results: list[SchemeResult] = []
    for view in VIEWS:
        timing = _timings(c, view, tokens)
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
    if nic.cards_per_gpu_needed > 1:
        warnings.append(f"one GPU's shard needs {nic.cards_per_gpu_needed} {target.name} cards "
                        f"({params / n / 1e9:.2f} G params > {nic.max_params_per_card / 1e9:.2f} G per card)")
    return Plan(
        model=model.key if model else "custom", model_name=name, params=params, gpus=n, nodes=nodes,
        gpus_per_node=per_node, gpu=gpu.key, gpu_name=gpu.name, gpu_memory_bytes=gpu.memory_bytes,
        cluster=cluster.key, cluster_name=cluster.name, view=a.view, nic=nic, tokens_per_step=n * a.grad_accum * tokens,
        model_flops_per_step=comp.model_flops, hardware_flops_per_step=comp.hardware_flops, mfu=a.mfu,
        hfu=a.mfu * comp.hardware_flops / comp.model_flops,
        links={"nvlink": c.nvlink, "rail_iso_hardware": c.rails["iso-hardware"],
               "rail_iso_network": c.rails["iso-network"], "card_rail_per_gpu": c.card_rail,
               "card_link": nic.card_link_bytes_per_s, "card_pcie": nic.card_pcie_bytes_per_s,
               "gpu_pcie": c.gpu_pcie, "link_efficiency": c.eff},
        assumptions=_notes(c, comp), schemes=results, views=views,
        questions=answer_questions(c) if questions else {}, warnings=warnings)


def _notes(c: _Ctx, comp: _Compute) -> list[str]:
    a, gpu, cluster, target, nic = c.a, c.gpu, c.cluster, c.target, c.nic
    m = c.model
    tokens = a.micro_batch * a.seq
    shape = m is not None and m.has_shape
    recompute_text = {"full": "(2sbh bytes per layer)", "selective": "(34sbh bytes per layer)",
                      "none": "(sbh(34 + 5as/h) bytes per layer)"}[a.recompute]
    return [
        f"data parallelism only over {c.n} GPUs ({c.nodes} node(s) x {c.g} of {cluster.name}); no tensor or "
        "pipeline parallelism",
        f"memory: ZeRO paper 2 + {c.gb} + 12 bytes per parameter (bf16 params, {a.grad_buffer} gradient buffer, fp32 "
        "master + Adam m + v); HSDP shards inside a node; ZeRO++ hpZ adds a 2P/g secondary partition; framework "
        "workspace, fragmentation and gather buffers not counted",
        (f"activations: Korthikanti et al. 2022, recompute={a.recompute} {recompute_text}, micro-batch "
         f"{a.micro_batch} x seq {a.seq}; plus fp32 logits s x b x {m.vocab} x 4 B; GPT-style formula applied to a "
         "SwiGLU/GQA model") if shape else
        "activations and logits: not estimated (no model architecture; give --model for an estimate)",
        "compute: model FLOPs 6 x P_matmul x tokens" + (" + 12 x L x h x s x tokens (attention, PaLM appendix B)"
                                                        if shape else " (no attention term without --model)")
        + f"; {a.grad_accum} micro-batch(es) of {tokens} tokens per GPU per step; MFU on model FLOPs, recompute="
        f"{a.recompute} adds hardware FLOPs: HFU {a.mfu * comp.hardware_flops / comp.model_flops:.0%}",
        f"MFU {a.mfu:.0%} of {gpu.bf16_flops / 1e12:g} TFLOPS bf16 dense"
        + (f" ({MFU_SOURCE})" if a.mfu == DEFAULT_MFU else " (given)"),
        f"links at {c.eff:.0%} of peak at {c.nodes} node(s) (link efficiency {a.link_efficiency}): NVLink "
        f"{gpu.nvlink_bytes_per_s / 1e9:g} GB/s per direction; cluster rail "
        f"{a.rail_gbps or cluster.nic_gbps_per_gpu:g} Gb/s per GPU; GPU PCIe {gpu.pcie_bytes_per_s / 1e9:g} GB/s "
        f"x {PCIE_USABLE_FRACTION}",
        "collectives: NCCL bus bandwidth, busbw = NVLink in a node, min(NVLink, g x per-GPU rail) across nodes "
        "(rings spread over all NICs; nccl issues 687/812, nccl-tests PERFORMANCE.md); all-reduce 2(n-1)/n, "
        "reduce-scatter and all-gather (n-1)/n of the buffer; HSDP and ZeRO++ run it per node and across nodes",
        f"overlap: gradient reductions {'hide under backward' if a.overlap_reduce else 'do NOT overlap (shown)'}; "
        f"parameter all-gathers (ZeRO-3 style and the post-step gather of every scheme) "
        f"{'hide under forward/backward' if a.overlap_gather else 'do NOT overlap (shown)'}; the same for every "
        "scheme; the optimizer step on a GPU or CPU always shows",
        f"views: iso-hardware = baselines on the cluster's {a.rail_gbps or cluster.nic_gbps_per_gpu:g} Gb/s per GPU; "
        f"iso-network = baselines on the cards' links ({nic.cards_per_node} x {a.nic_ports} x "
        f"{target.line_rate_gbps:g} Gb/s per node)",
        f"GPU Adam: {GPU_ADAM_FIXED_BYTES + c.gb} bytes per parameter at {a.gpu_adam_efficiency:.0%} of "
        f"{gpu.memory_bandwidth_bytes_per_s / 1e12:g} TB/s HBM (assumed)",
        f"CPU Adam (ZeRO-Offload): {a.cpu_adam_params_per_s / 1e9:g} G params/s per socket x {cluster.cpu_sockets} "
        f"sockets shared by {c.g} GPUs"
        + (f" ({CPU_ADAM_SOURCE})" if a.cpu_adam_params_per_s == DEFAULT_CPU_ADAM_PARAMS_PER_S else " (given)"),
        f"OptimusNIC: {nic.cards_per_node} {target.name} per node, placement {a.nic_placement}, gradients "
        f"{a.nic_grad_path} (sizing grad_source={nic.grad_source}); card PCIe "
        f"{nic.card_pcie_bytes_per_s / 1e9:.1f} GB/s usable ({target.pcie}); card link "
        f"min({a.nic_ports} x {target.line_rate_gbps:g} Gb/s x {c.eff:.2f}, PCIe) = "
        f"{nic.card_link_bytes_per_s / 1e9:.2f} GB/s; kernel x RTL efficiency {a.rtl_efficiency:.2f}, "
        f"{a.rtl_efficiency_source}",
        ("OptimusNIC sidecar as built: reduce-scatter on the GPU fabric, shard GPU -> host -> card, update, "
         "card -> host -> GPU, all-gather; " if a.nic_placement == "sidecar" else
         "OptimusNIC rail: reduce-scatter and all-gather over the cards (NVLink inside the node); ")
        + ("copies and update pipelined over chunks (--nic-overlap)" if a.nic_overlap else
           "copies and update one after another (as built)")
        + ("; global-norm clipping on: the card's update waits for the whole reduce-scatter and the norm"
           if a.clip else "; clipping off"),
        "not counted: latency terms, the non-finite-flag and norm all-reduces (a few bytes), link contention "
        "between overlapped collectives and compute",
    ]


# ---------------------------------------------------------------- the questions planners are asked


def gpu_counts(gpus_per_node: int, limit: int = 1 << 16) -> list[int]:
    """GPU counts a cluster is used in: powers of two inside a node, then whole nodes."""
    small = [k for k in (1, 2, 4, 8, 16, 32) if k < gpus_per_node]
    return small + list(range(gpus_per_node, limit + 1, gpus_per_node))


def _fits_at(c: _Ctx, key: str, n: int, micro_batch: float, seq: int) -> bool:
    return not _misfit(c, key, n, _memory(c, key, n, micro_batch, seq))


def _largest(fits: Callable[[int], bool], limit: int) -> int:
    """Largest k in 1..limit with fits(k), assuming fits is monotone (0 when even 1 does not fit)."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _hide_tokens(c: _Ctx, key: str, view: str, limit: float = 1e8) -> float | None:
    """Fewest tokens per micro-batch (at this seq) at which the collectives no longer show."""
    ph = _phases(c, key, view)  # link times do not depend on the tokens

    def shown(tokens: float) -> float:
        comp = _compute(c, tokens)
        return _exposed(ph, c.a, comp.fwd_s, comp.bwd_s)[1]

    if shown(limit) > 1e-12:
        return None
    lo, hi = 0.0, limit
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if shown(mid) > 1e-12 else (lo, mid)
    return hi


def answer_questions(c: _Ctx) -> dict[str, Any]:
    """Fewest GPUs, largest micro-batch and sequence, tokens that hide communication, cards, freed memory."""
    a = c.a
    fewest = {}
    for key in SCHEMES:
        n = next((k for k in gpu_counts(c.g, 1 << 14) if _fits_at(c, key, k, a.micro_batch, a.seq)), None)
        entry: dict[str, Any] = {"gpus": n}
        if key in OPTIMUSNIC and n is not None:
            entry["cards"] = _cards(c, n)
        fewest[key] = entry
    max_batch = {k: _largest(lambda mb, k=k: _fits_at(c, k, c.n, mb, a.seq), 1 << 16) for k in SCHEMES}
    max_seq = {k: _largest(lambda s, k=k: _fits_at(c, k, c.n, a.micro_batch, s), 1 << 24) for k in SCHEMES}
    hide = {view: {k: _hide_tokens(c, k, view) for k in SCHEMES} for view in VIEWS}
    # Freed memory: OptimusNIC moves 12P/N bytes per GPU off the GPU (compared with ZeRO-1/2 at the same N).
    nic = c.nic
    per_gpu_capacity = nic.max_params_per_card * nic.cards_per_node / c.g  # params whose state a GPU's cards hold
    m = c.model
    if a.freed_threshold_bytes:
        threshold, basis = a.freed_threshold_bytes, "given with --freed-threshold-gb"
    elif m is not None and m.has_shape:
        threshold = (activation_bytes(m.layers, m.hidden, m.heads, a.seq, 1, a.recompute)
                     + logits_bytes(m.vocab, a.seq, 1))
        basis = f"one more sequence of {a.seq} tokens (activations + logits)"
    else:
        threshold, basis = 0.05 * c.gpu.memory_bytes, "5% of GPU memory"
    n_lo = math.ceil(c.params / per_gpu_capacity)
    n_hi = math.floor(STATE_BYTES * c.params / threshold)
    return {
        "fewest_gpus": fewest,
        "max_micro_batch": max_batch,
        "max_seq": max_seq,
        "hide_tokens_per_micro_batch": hide,
        "cards": {"cards_per_gpu_needed": nic.cards_per_gpu_needed, "cards_per_node_needed": nic.cards_per_node_needed,
                  "cards_per_node": nic.cards_per_node, "pcie_slots": nic.pcie_slots, "slots_ok": nic.slots_ok},
        "freed": {"freed_bytes_per_gpu": STATE_BYTES * c.params / c.n,
                  "card_state_capacity_bytes_per_gpu": STATE_BYTES * per_gpu_capacity,
                  "threshold_bytes": threshold, "threshold_basis": basis,
                  "gpus_min": n_lo, "gpus_max": n_hi if n_hi >= n_lo else None},
    }


# ---------------------------------------------------------------- sweeps

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
            kw["gpus"] = _positive_int("sweep value", int(v) if float(v).is_integer() else v)
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
            continue  # nothing fits at this point of the sweep; the CSV simply has no row for it
        cap = p.nic.max_params_per_card * p.nic.cards_per_node / p.gpus_per_node * STATE_BYTES
        for s in p.schemes:
            rows.append(SweepRow(value=float(v), gpus=p.gpus, scheme=s.key, fits=s.fits,
                                 memory_gb=s.memory["total"] / 1e9,
                                 step_s_iso_hardware=p.views["iso-hardware"][s.key],
                                 step_s_iso_network=p.views["iso-network"][s.key],
                                 freed_gb_per_gpu=STATE_BYTES * p.params / p.gpus / 1e9,
                                 card_capacity_gb_per_gpu=cap / 1e9))
    if not rows:
        raise PlanError(f"nothing fits at any point of the {what} sweep")
    return rows
