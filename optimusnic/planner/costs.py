"""The cost formulas, pure functions: memory per GPU, activations, FLOPs, collectives, PCIe and link rates.

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
  OptimusNIC    params 2P      grads GP (or GP/N with `nic_grads="sharded"`)   optimizer 0, plus
                ShardedNicOptimizer's reduction: its gradient shard (GP/N, counted as the grads with
                "sharded") and three buckets (two reduce-scatter inputs in flight, one being filled)
  OptimusNIC+Z3 params 2P/N    grads GP/N    optimizer 0
Activations (Korthikanti et al. 2022, section 4.1, 16-bit activations, no tensor/sequence
parallelism), per layer: none s*b*h*34, selective 34*s*b*h, full 2*s*b*h bytes plus one layer's
34*s*b*h working set while it is recomputed; the 5*a*s/h term of stored attention scores only
with `attention="eager"` (FlashAttention/SDPA never store them). FSDP schemes add their unsharded
buffers: two layers of bf16 parameters (current and prefetched) and one layer's gradients;
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
per node, on its own rail). Latency terms are left out (the buffers are GBs).
"""

from __future__ import annotations

import re

from optimusnic.planner.errors import PlanError
from optimusnic.planner.presets import ModelPreset

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
# ShardedNicOptimizer (pynq_driver.optim.sharded): bucket_cap_mb's default (DDP's 25 MiB) and the
# reduce-scatters it keeps in flight (their inputs are its only bucket-sized buffers).
SHARDED_BUCKET_BYTES = 25 * 2**20
SHARDED_REDUCE_IN_FLIGHT = 2

RECOMPUTE = ("full", "selective", "none")
PCIE_USABLE_FRACTION = 0.825  # GPU PCIe: usable fraction of raw (13.0 / 15.75 GB/s on Gen3 x16)
# Alveo card DMA, per direction, as fractions of the raw Gen3 x16 rate (15.754 GB/s): AMD Vitis
# tutorial "Determine the Maximum Achievable Throughput" (Vitis-Tutorials, Hardware_Acceleration),
# `xbutil validate` DMA test: host->card 8.5-9.6 GB/s (9.0 taken), card->host 12.2 GB/s.
CARD_PCIE_SOURCE = ("AMD Vitis tutorial 'Determine the Maximum Achievable Throughput': xbutil validate DMA on an "
                    "Alveo at 8.5-9.6 GB/s host->card (9.0 taken) and 12.2 GB/s card->host, Gen3 x16")
CARD_H2C_FRACTION = 9.0e9 / (16 * 8e9 * 128 / 130 / 8)
CARD_C2H_FRACTION = 12.2e9 / (16 * 8e9 * 128 / 130 / 8)
PCIE_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 1.0}


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
                     ranks_per_node: int | None = None, grad_bytes: int = GRAD_BYTES,
                     fsdp_param_bytes: int = PARAM_BYTES) -> dict[str, float]:
    """Parameters, gradients and optimizer state per GPU (bytes) under `scheme`.

    `fsdp_param_bytes` is FSDP2's sharded parameter dtype for `optimusnic_z3` (FSDP2 + NicAdamW): 4
    under `MixedPrecisionPolicy(param_dtype=bf16)` on an fp32 model (FSDP2 keeps the fp32 shard and
    its fp32 gradient on the GPU), 2 for a bf16 model. `optimusnic` (ShardedNicOptimizer) adds its
    reduction (`buffers`): the gradient shard it keeps until the step (GP/N; with "sharded" that
    shard is the grads already) and `sharded_buffer_bytes`. Its all-gather's output (2P) lives
    from the step to the next forward, when activations and (sharded) gradients are gone, so it
    never adds to the peak counted here."""
    p, n, gb, fb = params, ranks, grad_bytes, fsdp_param_bytes
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
        "optimusnic_z3": (fb * p / n, fb * p / n, 0.0),
    }
    if scheme not in table:
        raise PlanError(f"unknown scheme {scheme!r}; known schemes: {', '.join(table)}")
    prm, grd, opt = table[scheme]
    buffers = 0.0
    if scheme == "optimusnic":
        buffers = (gb * p / n if nic_grads == "full" else 0.0) + sharded_buffer_bytes()
    return {"params": prm, "grads": grd, "optimizer": opt, "buffers": buffers}


def sharded_buffer_bytes(bucket_bytes: float = SHARDED_BUCKET_BYTES) -> float:
    """ShardedNicOptimizer's bucket-sized buffers at their peak, in the backward pass: the inputs of
    the reduce-scatters in flight and the gradients of the bucket being filled."""
    return (SHARDED_REDUCE_IN_FLIGHT + 1) * bucket_bytes


def freed_bytes_per_param(a: object) -> int:
    """GPU bytes per parameter the cards free in the README's recipe (FSDP2 + NicAdamW): Adam's m and v
    (8) while FSDP2 keeps fp32 sharded parameters (`param_dtype` "fp32"), all 12 with bf16 ones."""
    return STATE_BYTES - 4 if getattr(a, "param_dtype", "fp32") == "fp32" else STATE_BYTES


FSDP_SCHEMES = ("zero3", "hsdp", "zeropp", "optimusnic_z3")


def fsdp_buffer_bytes(layer_params: float, layers: int, grad_bytes: int = GRAD_BYTES) -> float:
    """FSDP's unsharded buffers at their peak: the layer being computed and the one prefetched (bf16
    parameters, two layers) and the unsharded gradient of one layer waiting for its reduce-scatter."""
    per_layer = layer_params / layers
    return 2 * PARAM_BYTES * per_layer + grad_bytes * per_layer


def activation_bytes(layers: int, hidden: int, heads: int, seq: int, micro_batch: float, recompute: str,
                     attention: str = "flash") -> float:
    """Activation memory of one micro-batch at its peak (Korthikanti et al. 2022, no tensor/sequence
    parallelism). `attention="flash"` (FlashAttention / SDPA, the default of every current stack):
    the s x s scores (5as/h per sbh) are never stored; "eager" stores them. Full recompute keeps each
    layer's input (2sbh) plus the working set of the one layer recomputed in backward; selective
    keeps 34sbh per layer plus, with eager attention, the recomputed scores of one layer."""
    sbh = seq * micro_batch * hidden
    scores = 5 * heads * seq / hidden if attention == "eager" else 0.0
    if recompute == "full":
        return layers * 2 * sbh + sbh * (34 + scores)
    if recompute == "selective":
        return layers * 34 * sbh + sbh * scores
    if recompute == "none":
        return layers * sbh * (34 + scores)
    raise PlanError(f"recompute {recompute!r}; choose one of {', '.join(RECOMPUTE)}")


def logits_bytes(vocab: int, seq: int, micro_batch: float) -> float:
    """The fp32 logits of one micro-batch, held for the loss and its gradient."""
    return seq * micro_batch * vocab * LOGIT_BYTES


def _matmul_params(params: float, model: ModelPreset | None) -> float:
    if model is None or not model.has_shape or model.vocab is None:
        return params
    return params - model.vocab * model.hidden  # the input embedding is a lookup, not a matmul


def layer_params(params: float, model: ModelPreset | None) -> float:
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
        return tokens * (2 * layer_params(params, model) + attention_fwd)
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
