"""Charts of a plan and of a sweep (matplotlib, imported only when a chart is asked for)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hls import safe_io
from hls.errors import UserError
from optimusnic.planner.costs import STATE_BYTES
from optimusnic.planner.planning import Plan
from optimusnic.planner.questions import gpu_counts
from optimusnic.planner.schemes import SCHEME_NAMES, SCHEMES
from optimusnic.planner.sweeps import SweepRow


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError(f"charts need matplotlib ({exc}); pip install matplotlib") from exc
    return plt


def _save(fig: Any, plt: Any, path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with safe_io.atomic_open(path) as f:
            fig.savefig(f, format=Path(path).suffix[1:] or "png", dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise UserError(f"cannot write the chart to {path}: {exc.strerror}") from exc
    finally:
        plt.close(fig)


def write_sweep_chart(rows: list[SweepRow], what: str, p: Plan, path: Path) -> None:
    """Left: freed GB per GPU vs N with the card-capacity line; right: step time per scheme vs the swept value."""
    plt = _pyplot()
    fig, (ax_f, ax_t) = plt.subplots(1, 2, figsize=(13, 5))
    cap = p.nic.max_params_per_card * p.nic.cards_per_node / p.gpus_per_node * STATE_BYTES / 1e9
    if what == "gpus":
        ns = sorted({r.gpus for r in rows})
    else:
        ns = [k for k in gpu_counts(p.gpus_per_node, 4096) if k >= p.gpus_per_node][:10]
    fb = p.questions["freed"]["freed_bytes_per_param"] if p.questions else STATE_BYTES
    ax_f.plot(ns, [fb * p.params / k / 1e9 for k in ns], marker="o", label=f"freed: {fb} x P / N")
    ax_f.axhline(cap, color="k", linestyle="--", linewidth=1, label=f"{p.nic.target_name} state capacity per GPU")
    if p.questions:
        fr = p.questions["freed"]
        ax_f.axhline(fr["threshold_bytes"] / 1e9, color="#c44e52", linestyle=":", linewidth=1,
                     label=f"matters: {fr['threshold_basis']}")
    ax_f.set_xscale("log", base=2)
    ax_f.set_yscale("log")
    ax_f.set_xlabel("GPUs (N)")
    ax_f.set_ylabel("GB per GPU")
    ax_f.set_title("Optimizer state moved off each GPU")
    ax_f.legend(fontsize=8)
    xlabel = {"gpus": "GPUs (N)", "tokens": "tokens per micro-batch", "line-rate": "card line rate (Gb/s per port)"}
    for key in SCHEMES:
        pts = [(r.value, r.step_s_iso_hardware, r.step_s_iso_network) for r in rows if r.scheme == key and r.fits]
        if not pts:
            continue
        line = ax_t.plot([x for x, _, _ in pts], [h for _, h, _ in pts], marker="o", label=SCHEME_NAMES[key])
        ax_t.plot([x for x, _, _ in pts], [v for _, _, v in pts], linestyle=":", color=line[0].get_color())
    ax_t.set_xscale("log", base=2)
    ax_t.set_ylim(bottom=0)  # from zero: a truncated axis would exaggerate the differences
    ax_t.set_xlabel(xlabel[what])
    ax_t.set_ylabel("seconds per step (axis from 0)")
    nothing = sorted({r.value for r in rows if r.scheme == "none"})
    for k, v in enumerate(nothing):  # every point is on the chart: where nothing fits, a marked line
        ax_t.axvline(v, color="#999999", linestyle="--", linewidth=1, label=None if k else "nothing fits (CSV note)")
    ax_t.set_title("Step time of the schemes that fit (solid iso-hardware, dotted iso-network)", fontsize=10)
    ax_t.legend(fontsize=7)
    fig.suptitle(f"{p.model_name} on {p.gpu_name}, OptimusNIC {p.nic.target_name} ({p.nic.placement})", fontsize=11)
    fig.tight_layout()
    _save(fig, plt, path)


def write_chart(p: Plan, path: Path) -> None:
    """Stacked bars: memory per GPU (with the GPU's capacity) and step time, one bar per scheme."""
    plt = _pyplot()
    names = [s.name for s in p.schemes]
    x = range(len(names))
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(14, 5.2))
    bottom = [0.0] * len(names)
    for part, color in (("params", "#4c72b0"), ("grads", "#55a868"), ("optimizer", "#c44e52"),
                        ("buffers", "#64b5cd"), ("activations", "#8172b2"), ("logits", "#937860")):
        vals = [s.memory[part] / 1e9 for s in p.schemes]
        ax_m.bar(x, vals, bottom=bottom, label=part, color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax_m.axhline(p.gpu_memory_bytes / 1e9, color="k", linestyle="--", linewidth=1,
                 label=f"{p.gpu_name} {p.gpu_memory_bytes / 1e9:.0f} GB")
    # A linear axis keeps the stack honest; bars far above the GPU's capacity are cut and labelled.
    top = max(2.0 * p.gpu_memory_bytes / 1e9, *(s.memory["total"] / 1e9 * 1.15 for s in p.schemes if s.fits))
    ax_m.set_ylim(0, top)
    for i, s in enumerate(p.schemes):
        total = s.memory["total"] / 1e9
        ax_m.text(i, min(total, top * 0.97), f"{total:.0f} GB", ha="center", va="bottom" if total < top else "top",
                  fontsize=7)
    ax_m.set_ylabel("GB per GPU")
    ax_m.set_title("Memory per GPU")
    ax_m.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=3)
    bottom = [0.0] * len(names)
    for attr, label, color in (("compute_s", "compute", "#4c72b0"), ("comm_exposed_s", "comm (shown)", "#dd8452"),
                               ("optimizer_exposed_s", "optimizer (shown)", "#c44e52"),
                               ("transfer_exposed_s", "PCIe copies (shown)", "#937860")):
        vals = [getattr(s, attr) for s in p.schemes]
        ax_t.bar(x, vals, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, s in enumerate(p.schemes):
        if not s.fits:
            ax_t.text(i, bottom[i], "does not fit", ha="center", va="bottom", fontsize=7, color="#c44e52")
    ax_t.set_ylim(0, max(bottom) * 1.1)
    ax_t.set_ylabel("seconds per step")
    ax_t.set_title(f"Step time ({p.view})")
    ax_t.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2)
    for ax in (ax_m, ax_t):
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    fig.suptitle(f"{p.model_name} on {p.gpus} x {p.gpu_name}, OptimusNIC on {p.nic.target_name}", fontsize=11)
    fig.tight_layout()
    _save(fig, plt, path)
