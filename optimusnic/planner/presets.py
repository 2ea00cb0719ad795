"""The presets a plan is made of: models (their shape, hence their parameter count), GPUs and clusters.

Read from `presets/*.json` next to this module, once per process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from optimusnic.planner.errors import PlanError

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


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


def transformer_params(layers: int, hidden: int, ffn: int, heads: int, kv_heads: int, vocab: int,
                       tied_embeddings: bool = False) -> int:
    """Parameters of a Llama-style decoder: GQA attention, SwiGLU FFN, RMSNorm, untied head."""
    head_dim = hidden // heads
    attention = 2 * hidden * hidden + 2 * hidden * kv_heads * head_dim  # q, o + k, v
    mlp = 3 * hidden * ffn  # gate, up, down
    norms = 2 * hidden
    embeddings = vocab * hidden * (1 if tied_embeddings else 2)
    return layers * (attention + mlp + norms) + hidden + embeddings


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
