"""The assumptions every plan prints with its figures, as sentences with their sources."""

from __future__ import annotations

from hls.sizing import FRAME_OVERHEAD_BYTES
from optimusnic.planner.assumptions import (
    CPU_ADAM_SOURCE,
    DEFAULT_CPU_ADAM_PARAMS_PER_S,
    DEFAULT_HFU,
    HFU_SOURCE,
    HFU_SOURCE_RECOMPUTE,
)
from optimusnic.planner.context import Context
from optimusnic.planner.costs import CARD_PCIE_SOURCE, GPU_ADAM_FIXED_BYTES, PCIE_USABLE_FRACTION
from optimusnic.planner.step import Compute


def assumption_notes(c: Context, comp: Compute) -> list[str]:
    a, gpu, cluster, target, nic = c.a, c.gpu, c.cluster, c.target, c.nic
    m = c.model
    tokens = a.micro_batch * a.seq
    shape = m is not None and m.has_shape
    scores = " + 5as/h" if a.attention == "eager" else ""
    recompute_text = {"full": f"(2sbh bytes per layer + one recomputed layer's sbh(34{scores}))",
                      "selective": "(34sbh bytes per layer" + (" + one layer's recomputed scores)" if scores else ")"),
                      "none": f"(sbh(34{scores}) bytes per layer)"}[a.recompute]
    attention_text = ("eager attention: the s x s scores are stored" if a.attention == "eager" else
                      "FlashAttention/SDPA: no s x s scores stored (--attention eager for a stack without it)")
    return [
        f"data parallelism only over {c.n} GPUs ({c.nodes} node(s) x {c.g} of {cluster.name}); no tensor or "
        "pipeline parallelism",
        f"memory: ZeRO paper 2 + {c.gb} + 12 bytes per parameter (bf16 params, {a.grad_buffer} gradient buffer, fp32 "
        "master + Adam m + v); HSDP shards inside a node; ZeRO++ hpZ adds a 2P/g secondary partition; FSDP-style "
        "schemes add their unsharded buffers (two layers of bf16 parameters, current and prefetched, and one "
        f"layer's gradients); OptimusNIC (ShardedNicOptimizer) adds its reduction: the gradient shard ({c.gb}P/N, "
        "the grads themselves with --nic-grads sharded) and three 25 MiB buckets (two reduce-scatters in flight, "
        "one filling); "
        f"OptimusNIC+Z3 (FSDP2 + NicAdamW) keeps FSDP2's {a.param_dtype} sharded parameters and gradients "
        f"(--param-dtype); framework workspace and fragmentation not counted; units shared with `optimusnic size`: "
        "GB = 1e9 bytes and GB/s = 1e9 bytes/s everywhere, card memory also in GiB = 2^30 bytes (both print the "
        "card's shard state in both)",
        (f"activations: Korthikanti et al. 2022, recompute={a.recompute} {recompute_text}, micro-batch "
         f"{a.micro_batch} x seq {a.seq}; {attention_text}; plus fp32 logits s x b x {m.vocab} x 4 B; GPT-style "
         "formula applied to a SwiGLU/GQA model") if shape else
        "activations and logits: not estimated (no model architecture; give --model for an estimate)",
        "compute: model FLOPs 6 x P_matmul x tokens" + (" + 12 x L x h x s x tokens (attention, PaLM appendix B)"
                                                        if shape else " (no attention term without --model)")
        + f"; {a.grad_accum} micro-batch(es) of {tokens} tokens per GPU per step; recompute={a.recompute} adds "
        f"hardware FLOPs x{comp.hardware_flops / comp.model_flops:.3f}, and they take time",
        (f"MFU {a.mfu:.0%} of {gpu.bf16_flops / 1e12:g} TFLOPS bf16 dense (given with --mfu; time from model "
         f"FLOPs, HFU {comp.hfu:.0%})") if a.mfu is not None else
        (f"HFU {a.hfu:.0%} of {gpu.bf16_flops / 1e12:g} TFLOPS bf16 dense on hardware FLOPs (MFU {comp.mfu:.0%} "
         f"with recompute={a.recompute})"
         + (f" (source: {HFU_SOURCE}; the source's recompute: {HFU_SOURCE_RECOMPUTE})" if a.hfu == DEFAULT_HFU
            else " (given with --hfu)")),
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
        f"{a.nic_grad_path} (sizing grad_source={nic.grad_source}, {nic.plan_kind} plan); card PCIe host -> card "
        f"{nic.card_pcie_bytes_per_s / 1e9:.1f} GB/s, card -> host {nic.card_c2h_bytes_per_s / 1e9:.1f} GB/s ("
        + (f"{target.pcie}; {CARD_PCIE_SOURCE}" if not (a.card_pcie_bytes_per_s or a.card_h2c_bytes_per_s
                                                        or a.card_c2h_bytes_per_s) else "given")
        + "); card link "
        + (f"min({a.nic_ports} x {target.line_rate_gbps:g} Gb/s x {c.eff:.2f}, PCIe) = " if a.nic_placement == "sidecar"
           else f"min({a.nic_ports} x {target.line_rate_gbps:g} Gb/s x {a.nic_payload_bytes}/"
                f"({a.nic_payload_bytes}+{FRAME_OVERHEAD_BYTES}) payload goodput, PCIe) = ")
        + f"{nic.card_link_bytes_per_s / 1e9:.2f} GB/s; kernel x RTL efficiency {a.rtl_efficiency:.2f}, "
        f"{a.rtl_efficiency_source}",
        ("OptimusNIC sidecar as built: ShardedNicOptimizer(overlap=True, async_all_gather=True) reduce-scatters "
         "each bucket from the backward pass (every micro-batch with --nic-grads sharded, the last with full: "
         "no_sync) and leaves its all-gather to the next forward, as ZeRO-2 (ZeRO-1); FSDP2 + NicAdamW hides "
         "FSDP2's own; the chain (pynq_driver "
         "CardBucket.run -> ShardState.stream) runs on one host thread: gradient GPU -> host -> card, "
         + ("with change detection (--detect-changes, the driver's default) the fp32 masters card -> host and the "
            "parameters GPU -> host, " if a.detect_changes else "no change detection, ")
         + "results card -> host -> GPU, the kernel overlapping that thread (double-buffered); "
         if a.nic_placement == "sidecar" else
         "OptimusNIC rail: reduce-scatter and all-gather over the cards (NVLink inside the node); ")
        + ("copies and update pipelined over chunks and threads (--nic-overlap, not built)" if a.nic_overlap else
           "copies one after another (as built)")
        + ("; global-norm clipping on: the card's update waits for the whole reduce-scatter and the norm"
           if a.clip else "; clipping off"),
        "not counted: latency terms, the non-finite-flag and norm all-reduces (a few bytes), link contention "
        "between overlapped collectives and compute",
    ]
