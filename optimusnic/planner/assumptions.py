"""What a plan assumes: the defaults (each printed with its source and overridable) and their checks."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hls.paths import BUILD_DIR
from hls.sizing import PAYLOAD_BYTES, SizingError, check_payload_bytes
from hls.targets import Target
from optimusnic.planner.costs import GRAD_BUFFERS, RECOMPUTE
from optimusnic.planner.errors import PlanError

RTL_BENCH_JSON = BUILD_DIR / "bench" / "rtl.json"
# The ring's protocol efficiency on software cards, written by `make bench` (optimusnic bench net).
NET_BENCH_JSON = BUILD_DIR / "bench" / "net.json"
RING_LOSS_UNMEASURED = "assumed until measured by `make bench`"

NIC_GRADS = ("full", "sharded")
PLACEMENTS = ("sidecar", "rail")
GRAD_PATHS = ("staged", "stream")
VIEWS = ("iso-hardware", "iso-network")
PARAM_DTYPES = ("fp32", "bf16")
ATTENTIONS = ("flash", "eager")

# Defaults for the assumptions; each is printed with the plan and can be overridden.
# Compute runs at a hardware FLOPs utilisation (HFU: model FLOPs plus the recomputed forward, over
# peak), so the recompute mode changes step time; `mfu` (on model FLOPs) overrides it when given.
DEFAULT_HFU = 0.40
HFU_SOURCE = ("Llama 3 paper (Grattafiori et al. 2024, arXiv:2407.21783), Table 4: 38-43% BF16 MFU training 405B "
              "on 8K-16K H100s at 8K sequences; that run used no activation checkpointing, so its HFU is its MFU")
HFU_SOURCE_RECOMPUTE = "none"
DEFAULT_LINK_EFFICIENCY = 0.85
DEFAULT_GPU_ADAM_EFFICIENCY = 0.80
DEFAULT_CPU_ADAM_PARAMS_PER_S = 0.7e9  # per socket
CPU_ADAM_SOURCE = (
    "DeepSpeed PR #735 (deepspeedai/DeepSpeed, 2021-02): DeepSpeedCPUAdam takes 8.2 s for an 11.6B-parameter "
    "GPT-2 (1.41e9 params/s per host; taken as two sockets, 0.7e9 each; socket count not stated); PR #378: "
    "5.1-6.5x faster than torch's CPU Adam for 1-10B parameters")
DEFAULT_RTL_EFFICIENCY = 0.95


@dataclass
class Assumptions:
    micro_batch: int = 1
    seq: int = 8192
    grad_accum: int = 1
    recompute: str = "full"
    hfu: float = DEFAULT_HFU  # hardware FLOPs utilisation (recomputed FLOPs count)
    mfu: float | None = None  # model FLOPs utilisation; when given, it sets step time instead of hfu
    link_efficiency: str | float = DEFAULT_LINK_EFFICIENCY
    gpu_adam_efficiency: float = DEFAULT_GPU_ADAM_EFFICIENCY
    cpu_adam_params_per_s: float = DEFAULT_CPU_ADAM_PARAMS_PER_S
    rtl_efficiency: float = DEFAULT_RTL_EFFICIENCY
    rtl_efficiency_source: str = "assumed"
    ring_loss: float = 0.0  # rail: payload lost beyond framing (ACK/NAK frames, retransmissions)
    ring_loss_source: str = RING_LOSS_UNMEASURED
    nic_grads: str = "full"
    nic_ports: int = 1
    nic_placement: str = "sidecar"
    nic_grad_path: str = "staged"
    nic_payload_bytes: int = PAYLOAD_BYTES  # rail: frame payload of the cards' ring (design.md 8.2)
    nic_overlap: bool = False  # the driver as built copies, updates and copies back one after another
    clip: bool = True  # global-norm gradient clipping (Llama 3 clips at 1.0)
    overlap_reduce: bool = True
    overlap_gather: bool = True
    grad_buffer: str = "bf16"
    cards_per_node: int | None = None  # default: one card per GPU
    pcie_slots: int | None = None  # default: the cluster preset's card_slots
    card_pcie_bytes_per_s: float | None = None  # both directions; default: per direction below
    card_h2c_bytes_per_s: float | None = None  # default: catalog pcie raw x CARD_H2C_FRACTION (AMD's xbutil figure)
    card_c2h_bytes_per_s: float | None = None  # default: catalog pcie raw x CARD_C2H_FRACTION
    detect_changes: bool = True  # the driver's default: masters read back and compared every step
    compute_units: int | None = None  # pass through to hls.sizing (default: its line-rate plan)
    stripes: int | None = None  # state stripes per CU, pass through to hls.sizing
    param_dtype: str = "fp32"  # FSDP2's sharded parameters (MixedPrecisionPolicy(param_dtype=bf16) keeps fp32)
    attention: str = "flash"  # flash: no s x s scores stored (FlashAttention/SDPA); eager: they are
    rail_gbps: float | None = None  # per-GPU network for the baselines; default: the cluster's
    view: str = "iso-hardware"
    freed_threshold_bytes: float | None = None  # default: one micro-batch of activations + logits


def read_rtl_efficiency(path: Path = RTL_BENCH_JSON) -> tuple[float, str]:
    """The RTL benchmark's measured efficiency (elements per clock / lanes) and where it came from."""
    try:
        value = json.loads(path.read_text()).get("efficiency")
    except (OSError, ValueError, AttributeError):
        return DEFAULT_RTL_EFFICIENCY, f"assumed (no RTL benchmark result at {path}; run `optimusnic bench`)"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        return DEFAULT_RTL_EFFICIENCY, f"assumed ({path} has no usable 'efficiency' in (0, 1])"
    return float(value), f"measured by the RTL benchmark ({path})"


def read_ring_loss(path: Path = NET_BENCH_JSON) -> tuple[float, str]:
    """The ring's loss beyond framing as the software-card benchmark measured it, and where it came from.

    It is a protocol figure (ACK/NAK frames and retransmissions per payload byte), which carries over
    to a card; the software cards' absolute speed does not, and is not used."""
    try:
        data = json.loads(path.read_text())
        value = data.get("loss_beyond_framing")
    except (OSError, ValueError, AttributeError):
        return 0.0, RING_LOSS_UNMEASURED
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        return 0.0, f"{RING_LOSS_UNMEASURED} ({path} has no usable 'loss_beyond_framing' in [0, 1))"
    return float(value), f"measured on software cards by `optimusnic bench net` ({path}, {data.get('date', '?')})"


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{name}: {value!r} must be a positive whole number")
    return value


def _fraction(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and 0 < value <= 1):
        raise PlanError(f"{name}: {value!r} must be in (0, 1]")
    return float(value)


# Flags that give a byte figure in GB (the Assumptions field holds bytes): errors name the flag.
_FLAGS = {"card_pcie_bytes_per_s": "--card-pcie-gbs", "card_h2c_bytes_per_s": "--card-h2c-gbs",
          "card_c2h_bytes_per_s": "--card-c2h-gbs", "freed_threshold_bytes": "--freed-threshold-gb",
          "rail_gbps": "--rail-gbps"}


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise PlanError(f"{_FLAGS.get(name, name)}: {value!r} must be a positive number")


def validate(a: Assumptions, target: Target) -> None:
    for name in ("micro_batch", "seq", "grad_accum"):
        positive_int(name.replace("_", "-"), getattr(a, name))
    for name in ("hfu", "gpu_adam_efficiency", "rtl_efficiency"):
        _fraction(name.replace("_", "-"), getattr(a, name))
    if a.mfu is not None:
        _fraction("mfu", a.mfu)
    if not a.cpu_adam_params_per_s > 0:
        raise PlanError(f"cpu-adam-rate: {a.cpu_adam_params_per_s!r} must be positive")
    choices = (("recompute", RECOMPUTE), ("nic_grads", NIC_GRADS), ("nic_placement", PLACEMENTS),
               ("nic_grad_path", GRAD_PATHS), ("grad_buffer", tuple(GRAD_BUFFERS)), ("view", VIEWS),
               ("param_dtype", PARAM_DTYPES), ("attention", ATTENTIONS))
    for name, allowed in choices:
        if getattr(a, name) not in allowed:
            raise PlanError(f"{name.replace('_', '-')} {getattr(a, name)!r}; choose one of {', '.join(allowed)}")
    if not 1 <= a.nic_ports <= target.network_ports:
        raise PlanError(f"nic-ports: {a.nic_ports} must be 1..{target.network_ports} ({target.name} ports)")
    try:
        check_payload_bytes(a.nic_payload_bytes)
    except SizingError as exc:
        raise PlanError(str(exc).replace("payload_bytes", "payload-bytes", 1)) from None
    if a.nic_grad_path == "stream" and a.nic_placement != "rail":
        raise PlanError("nic-grad-path stream needs --nic-placement rail: a sidecar card gets gradients over PCIe "
                        "into its memory")
    if a.nic_grad_path == "stream" and a.grad_accum > 1:
        raise PlanError("grad-accum: the stream path has no gradient buffer to accumulate micro-batches into; "
                        "use --grad-accum 1 or --nic-grad-path staged")
    for name in ("compute_units", "stripes"):
        if getattr(a, name) is not None:
            positive_int(name.replace("_", "-"), getattr(a, name))
    if a.nic_grad_path == "stream" and a.clip:
        raise PlanError("nic-grad-path stream needs --no-clip: with global-norm clipping the update of the first "
                        "element waits for the norm of the whole gradient, so it cannot run on the stream")
    for name in ("card_pcie_bytes_per_s", "card_h2c_bytes_per_s", "card_c2h_bytes_per_s", "rail_gbps",
                 "freed_threshold_bytes"):
        _positive(name, getattr(a, name))
    for name in ("cards_per_node", "pcie_slots"):
        if getattr(a, name) is not None and not (isinstance(getattr(a, name), int) and getattr(a, name) >= 0):
            raise PlanError(f"{name.replace('_', '-')}: {getattr(a, name)!r} must be a whole number")
    if a.cards_per_node == 0:
        raise PlanError("cards-per-node: 0; OptimusNIC needs at least one card per node")
