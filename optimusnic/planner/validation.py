"""The planner's compute model against published training runs (the validation table of the guide).

Each run is what its source published: model, GPUs, recompute mode, sequence length and the MFU
(and, where given, tokens per second per GPU). The planner's figure is what its default hardware
FLOPs utilisation (`DEFAULT_HFU`) predicts for that run's FLOPs: MFU = HFU x model FLOPs / hardware
FLOPs, tokens/s per GPU = HFU x peak / hardware FLOPs per token. Only the compute model is compared:
the published runs use tensor, pipeline or context parallelism the planner does not model, so the
communication and memory sides are not part of the comparison. A run differs by more than
`TOLERANCE` only with the reason written next to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimusnic.planner.assumptions import DEFAULT_HFU
from optimusnic.planner.costs import model_flops, recompute_flops
from optimusnic.planner.presets import ModelPreset, get_gpu, get_model

TOLERANCE = 0.15

# GPT-3 175B as Megatron-LM trains it (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads;
# GPT-2 BPE vocabulary 51,200 after Megatron's padding); parameters 12 L h^2 + V h.
GPT3_175B = ModelPreset(key="gpt3-175b", name="GPT-3 175B", params=12 * 96 * 12288**2 + 51200 * 12288, layers=96,
                        hidden=12288, heads=96, vocab=51200, tied_embeddings=True,
                        source="Brown et al. 2020 (arXiv:2005.14165), Table 2.1")


@dataclass(frozen=True)
class PublishedRun:
    name: str
    model: str  # a preset key, or "gpt3-175b"
    gpu: str
    gpus: int
    seq: int
    recompute: str
    mfu: float  # published MFU (model FLOPs / peak)
    tokens_per_s_per_gpu: float | None
    source: str
    reason: str = ""  # why the planner's figure differs by more than TOLERANCE, when it does


RUNS = (
    PublishedRun(
        "Llama 3 405B pre-training, 16,384 H100, 8K sequences", "llama3-405b", "h100", 16384, 8192, "none", 0.41, None,
        "Grattafiori et al. 2024, 'The Llama 3 Herd of Models' (arXiv:2407.21783), Table 4: 400 TFLOPs/GPU, 41% "
        "BF16 MFU at 16,384 GPUs (43% at 8,192); TP 8, PP 16, DP 128, no activation checkpointing (the default "
        "HFU's own source)"),
    PublishedRun(
        "torchtitan Llama 3.1 8B, 8 H100, FSDP, selective AC", "llama3-8b", "h100", 8, 8192, "selective", 0.337, 5762,
        "pytorch/torchtitan docs/performance.md, Table 1 (Grand Teton, H100 96 GB HBM2e at 500 W, local batch 2, "
        "seq 8192): 5,762 tokens/s per GPU without torch.compile; the page states 33-39% MFU (5,762 x 57.9 GFLOPs "
        "per token / 989 TFLOPS = 33.7%)"),
    PublishedRun(
        "torchtitan Llama 3.1 405B, 128 H100, FSDP + TP, full AC", "llama3-405b", "h100", 128, 8192, "full", 0.290, 109,
        "pytorch/torchtitan docs/performance.md, 'Llama 3.1 performance numbers' (128 H100 94 GB, local batch 2, "
        "2D FSDP + TP, full activation checkpointing, no Float8): 109 tokens/s per GPU, 29.0% MFU"),
    PublishedRun(
        "torchtitan Llama 3 70B, 64 A100, FSDP, full AC", "llama3-70b", "a100-80gb", 64, 8192, "full", 0.517, 331,
        "pytorch/torchtitan docs/performance.md, earlier revision, 'Llama 3 performance numbers' (64 A100 80 GB, "
        "local batch 1, FSDP2, full AC): 331 tokens/s per GPU, 51.7% MFU",
        reason="an A100 run: the default HFU is an H100 figure; torchtitan's 51.7% MFU with full recompute is "
               "~69% HFU on the A100's 312 TFLOPS (give --hfu 0.69 for such a stack)"),
    PublishedRun(
        "Megatron-LM GPT-3 175B, A100, TP + PP + sequence parallel, selective recompute", "gpt3-175b", "a100-80gb",
        512, 2048, "selective", 0.514, None,
        "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models' "
        "(arXiv:2205.05198), Table 5: 175B, selective recompute + sequence parallelism, 51.4% MFU / 52.8% HFU "
        "(figures as recalled from the paper's table; not re-checked against the PDF here)",
        reason="Megatron-LM's fused kernels on 12288-wide GEMMs reach ~53% HFU on A100; the default 40% is the "
               "Llama 3 H100 run's (give --hfu 0.53 for Megatron-LM on A100)"),
)


@dataclass(frozen=True)
class Comparison:
    run: PublishedRun
    planner_mfu: float
    planner_tokens_per_s_per_gpu: float
    mfu_diff: float  # (planner - published) / published
    tokens_diff: float | None
    within: bool


def _model(key: str) -> ModelPreset:
    return GPT3_175B if key == GPT3_175B.key else get_model(key)


def compare(run: PublishedRun, hfu: float = DEFAULT_HFU) -> Comparison:
    """The planner's MFU and tokens/s per GPU for `run` at hardware FLOPs utilisation `hfu`."""
    m, gpu = _model(run.model), get_gpu(run.gpu)
    mf = model_flops(m.params, 1, m, run.seq)
    hw = mf + recompute_flops(m.params, 1, run.recompute, m, run.seq)
    mfu = hfu * mf / hw
    tps = hfu * gpu.bf16_flops / hw
    mfu_diff = (mfu - run.mfu) / run.mfu
    tok_diff = None if run.tokens_per_s_per_gpu is None else (tps - run.tokens_per_s_per_gpu) / run.tokens_per_s_per_gpu
    within = abs(mfu_diff) <= TOLERANCE and (tok_diff is None or abs(tok_diff) <= TOLERANCE)
    return Comparison(run, mfu, tps, mfu_diff, tok_diff, within)


def validation_table(hfu: float = DEFAULT_HFU) -> list[Comparison]:
    return [compare(r, hfu) for r in RUNS]
