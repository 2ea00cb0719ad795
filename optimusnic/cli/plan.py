"""`optimusnic plan`: memory per GPU and step time of DDP, ZeRO-1/2/3, HSDP, ZeRO++, ZeRO-Offload and OptimusNIC."""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, NoReturn

from hls import safe_io
from hls.errors import UserError
from hls.targets import get_target
from optimusnic import planner
from optimusnic.cli.common import (
    add_json,
    add_targets_file,
    emit_json,
    float_in,
    human_count,
    int_in,
    parse_count,
    path_arg,
    table,
)


def _one_line_error(parser: argparse.ArgumentParser) -> Any:
    # argparse prints the usage block before its message; the toolkit promises one line on stderr.
    def error(message: str) -> NoReturn:
        print(f"optimusnic plan: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    return error


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="compare DDP, ZeRO-1/2/3, HSDP, ZeRO++, ZeRO-Offload and OptimusNIC for a "
                                    "training step")
    p.error = _one_line_error(p)  # type: ignore[method-assign]
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help=f"model preset ({', '.join(planner.models())})")
    what.add_argument("--params", type=parse_count, help="parameter count instead of a preset, e.g. 7e9 or 7B")
    p.add_argument("--gpus", type=int_in(1, 10**6), required=True, help="data-parallel GPUs in total")
    p.add_argument("--gpu", required=True, help="GPU preset, e.g. h100, h200, a100, a100-40gb")
    p.add_argument("--nic", required=True, help="OptimusNIC card: a catalog target, e.g. u55c")
    p.add_argument("--nodes", type=int_in(1, 10**5), default=None,
                   help="nodes the GPUs sit in (default: fill the cluster's)")
    p.add_argument("--cluster", default=None, help="cluster preset (default: the GPU's, e.g. dgx-h100)")
    p.add_argument("--micro-batch", type=int_in(1, 10**4), default=1,
                   help="sequences per GPU per micro-batch (default 1)")
    p.add_argument("--seq", type=int_in(1, 10**7), default=8192, help="sequence length in tokens (default 8192)")
    p.add_argument("--grad-accum", type=int_in(1, 10**5), default=1,
                   help="micro-batches per optimizer step (default 1)")
    p.add_argument("--recompute", choices=planner.RECOMPUTE, default="full",
                   help="activation recomputation (default full)")
    p.add_argument("--grad-buffer", choices=tuple(planner.GRAD_BUFFERS), default="bf16",
                   help="gradient buffer: bf16, or fp32 as Megatron's main_grad (default bf16)")
    p.add_argument("--mfu", type=float_in(0, 1, lo_open=True), default=planner.DEFAULT_MFU,
                   help="model FLOPs utilisation, on model FLOPs (default 0.4)")
    p.add_argument("--link-efficiency", default=str(planner.DEFAULT_LINK_EFFICIENCY),
                   help="fraction of peak link bandwidth collectives reach, or a scale table nodes:eff,... "
                        "e.g. 1:0.9,8:0.85,64:0.75 (default 0.85)")
    p.add_argument("--rail-gbps", type=float_in(0, 1e6, lo_open=True), default=None,
                   help="per-GPU network of the baselines in Gb/s (default: the cluster preset's)")
    p.add_argument("--overlap-reduce", action=argparse.BooleanOptionalAction, default=True,
                   help="gradient reductions hide under backward (default yes; same for every scheme)")
    p.add_argument("--overlap-gather", action=argparse.BooleanOptionalAction, default=True,
                   help="parameter all-gathers hide under forward/backward (default yes; same for every scheme)")
    p.add_argument("--clip", action=argparse.BooleanOptionalAction, default=True,
                   help="global-norm gradient clipping: the card's update waits for the norm (default yes)")
    p.add_argument("--cpu-adam-rate", type=parse_count, default=int(planner.DEFAULT_CPU_ADAM_PARAMS_PER_S),
                   help="ZeRO-Offload CPU Adam parameters per second per socket (default 0.7e9 from DeepSpeed PR #735; "
                        "see the printed source)")
    p.add_argument("--rtl-efficiency", type=float_in(0, 1, lo_open=True), default=None,
                   help=f"kernel efficiency (default: 'efficiency' in {planner.RTL_BENCH_JSON}, else 0.95)")
    p.add_argument("--nic-placement", choices=planner.PLACEMENTS, default="sidecar",
                   help="sidecar: a PCIe device beside the GPU, as the driver builds it; rail: the card is the "
                        "GPU's network rail (default sidecar)")
    p.add_argument("--nic-grad-path", choices=planner.GRAD_PATHS, default="staged",
                   help="gradients staged in card memory (as built) or streamed into the kernel (rail, --no-clip)")
    p.add_argument("--nic-overlap", action="store_true",
                   help="the driver pipelines its PCIe copies and the card update over chunks (not built yet)")
    p.add_argument("--nic-grads", choices=planner.NIC_GRADS, default="full",
                   help="OptimusNIC gradient buffer on the GPU: full or ZeRO-2-style sharded (default full)")
    p.add_argument("--nic-ports", type=int_in(1, 16), default=1, help="card network ports used (default 1)")
    p.add_argument("--cards-per-node", type=int_in(1, 64), default=None,
                   help="OptimusNIC cards per node (default one per GPU)")
    p.add_argument("--pcie-slots", type=int_in(0, 64), default=None,
                   help="PCIe slots per node free for cards (default: the cluster preset's)")
    p.add_argument("--card-pcie-gbs", type=float_in(0, 1e4, lo_open=True), default=None,
                   help="card PCIe usable GB/s per direction (default: from the catalog's link x 0.825)")
    p.add_argument("--view", choices=planner.VIEWS, default="iso-hardware",
                   help="which view the main table shows (both are always computed)")
    p.add_argument("--freed-threshold-gb", type=float_in(0, 1e6), default=None,
                   help="freed memory that matters, GB per GPU (default: one more sequence of activations)")
    p.add_argument("--sweep", choices=planner.SWEEPS, default=None,
                   help="sweep GPU count, tokens per micro-batch or card line rate (Gb/s per port)")
    p.add_argument("--sweep-values", default=None, help="comma-separated values for --sweep (defaults per sweep)")
    p.add_argument("--sweep-out", type=path_arg, default=Path("plan-sweep"), metavar="PREFIX",
                   help="sweep output: PREFIX.csv and PREFIX.png (default plan-sweep)")
    p.add_argument("--plot", type=path_arg, default=None, metavar="PNG", help="write a chart comparing the schemes")
    add_json(p)
    add_targets_file(p)
    p.set_defaults(func=run)


def _sweep_values(text: str | None) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--sweep-values {text!r}: give numbers separated by commas") from None
    if not values:
        raise UserError("--sweep-values is empty")
    return values


def check_plot_path(path: Path) -> None:
    """--plot is checked before any planning: a format matplotlib writes, a file we can write."""
    try:
        import matplotlib
        from matplotlib.backend_bases import FigureCanvasBase

        matplotlib.use("Agg")
        formats = sorted(FigureCanvasBase.get_supported_filetypes())
    except ImportError as exc:
        raise UserError(f"--plot needs matplotlib ({exc}); pip install matplotlib") from exc
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in formats:
        raise UserError(f"--plot {path}: {'.' + suffix if suffix else 'no'} file type; name the chart with one of "
                        f"{', '.join('.' + f for f in formats)} (e.g. plan.png)")
    safe_io.check_writable_file(path, "--plot")


def run(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_plot_path(args.plot)
    model = planner.get_model(args.model) if args.model else None
    gpu = planner.get_gpu(args.gpu)
    cluster = planner.get_cluster(args.cluster) if args.cluster else None
    target = get_target(args.nic, args.targets_file)
    if args.rtl_efficiency is None:
        eff, eff_source = planner.read_rtl_efficiency()
    else:
        eff, eff_source = args.rtl_efficiency, "given with --rtl-efficiency"
    assumptions = planner.Assumptions(
        micro_batch=args.micro_batch, seq=args.seq, grad_accum=args.grad_accum, recompute=args.recompute,
        mfu=args.mfu, link_efficiency=args.link_efficiency, cpu_adam_params_per_s=float(args.cpu_adam_rate),
        rtl_efficiency=eff, rtl_efficiency_source=eff_source, nic_grads=args.nic_grads, nic_ports=args.nic_ports,
        nic_placement=args.nic_placement, nic_grad_path=args.nic_grad_path, nic_overlap=args.nic_overlap,
        clip=args.clip, overlap_reduce=args.overlap_reduce, overlap_gather=args.overlap_gather,
        grad_buffer=args.grad_buffer, cards_per_node=args.cards_per_node, pcie_slots=args.pcie_slots,
        card_pcie_bytes_per_s=args.card_pcie_gbs * 1e9 if args.card_pcie_gbs is not None else None,
        rail_gbps=args.rail_gbps, view=args.view,
        freed_threshold_bytes=args.freed_threshold_gb * 1e9 if args.freed_threshold_gb is not None else None,
    )
    params = model.params if model else args.params
    result = planner.plan(params=params, gpus=args.gpus, gpu=gpu, target=target, cluster=cluster, nodes=args.nodes,
                          model=model, assumptions=assumptions)
    rows = None
    if args.sweep:
        rows = planner.sweep(args.sweep, _sweep_values(args.sweep_values), params=params, gpus=args.gpus, gpu=gpu,
                             target=target, cluster=cluster, model=model, assumptions=assumptions)
        write_sweep_csv(rows, args.sweep_out.with_suffix(".csv"))
        write_sweep_chart(rows, args.sweep, result, args.sweep_out.with_suffix(".png"))
    if args.plot:
        write_chart(result, args.plot)
    if args.json:
        data = result.to_dict()
        data["plot"] = str(args.plot) if args.plot else None
        if rows is not None:
            data["sweep"] = {"what": args.sweep, "csv": str(args.sweep_out.with_suffix(".csv")),
                             "png": str(args.sweep_out.with_suffix(".png")), "rows": [asdict(r) for r in rows]}
        emit_json(data)
    else:
        print(format_plan(result))
        if args.plot:
            print(f"\nchart: {args.plot}")
        if rows is not None:
            print(f"\nsweep over {args.sweep}: {args.sweep_out.with_suffix('.csv')} "
                  f"({len(rows)} rows), {args.sweep_out.with_suffix('.png')}")
    return 0


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _s(x: float) -> str:
    return f"{x:.2f}"


def _opt(x: Any, fmt: str = "{}") -> str:
    return "never" if x is None else fmt.format(x)


def format_plan(p: planner.Plan) -> str:
    lines = [
        f"{p.model_name} ({human_count(p.params)} params) on {p.gpus} x {p.gpu_name} "
        f"({p.nodes} node(s) x {p.gpus_per_node}, {p.cluster_name}), OptimusNIC card {p.nic.target_name} "
        f"({p.nic.placement}, gradients {p.nic.grad_path})",
        f"{p.tokens_per_step} tokens per step; GPU memory {p.gpu_memory_bytes / 1e9:.0f} GB; MFU {p.mfu:.0%} "
        f"(model FLOPs {p.model_flops_per_step:.3g}), HFU {p.hfu:.0%} (hardware FLOPs {p.hardware_flops_per_step:.3g})",
        "",
        f"memory per GPU (GB) and step time (s), {p.view}:",
    ]
    rows = []
    for s in p.schemes:
        m = s.memory
        rows.append([
            s.name, _gb(m["params"]), _gb(m["grads"]), _gb(m["optimizer"]), _gb(m["activations"]), _gb(m["logits"]),
            _gb(m["total"]), "yes" if s.fits else "NO", _s(s.compute_s), _s(s.comm_s), _s(s.comm_exposed_s),
            _s(s.optimizer_s), _s(s.optimizer_exposed_s), _s(s.transfer_exposed_s), _s(s.step_s),
        ])
    lines.append(table(rows, ["scheme", "params", "grads", "optim", "activ", "logits", "total", "fits", "compute",
                              "comm", "comm shown", "optim", "optim shown", "pcie shown", "step"]))
    lines += ["", "step time (s) in both views (iso-hardware: baselines on the cluster's NICs; iso-network: "
                  "baselines on the cards' links):"]
    fits = {s.key: s.fits for s in p.schemes}
    lines.append(table([[s.name, _s(p.views["iso-hardware"][s.key]), _s(p.views["iso-network"][s.key]),
                         "yes" if fits[s.key] else "NO"] for s in p.schemes],
                       ["scheme", "iso-hardware", "iso-network", "fits"]))
    misfits = [s for s in p.schemes if not s.fits]
    if misfits:
        lines.append("")
        lines += [f"  {s.name} does not fit: {s.why_not}" for s in misfits]
    for s in p.schemes:
        if s.host_bytes_per_node:
            lines.append(f"  {s.name}: host memory per node {s.host_bytes_per_node / 1e12:.2f} TB "
                         f"(fp32 state + grad copy of {p.gpus_per_node} ranks)")
    n = p.nic
    gps = lambda x: f"{x / 1e9:.2f} G params/s"  # noqa: E731
    lines += [
        "",
        f"NIC side ({n.target_name}, {n.cards_per_node} per node, {n.placement}, sizing grad_source={n.grad_source}):",
        f"  each card holds {human_count(n.card_params)} params -> {n.card_state_bytes / 1e9:.1f} GB fp32 state; "
        f"a card holds {human_count(n.max_params_per_card)} -> {'fits' if n.fits else 'does NOT fit'}",
        f"  card link: min({n.line_rate_gbps:g} Gb/s ports, PCIe {n.card_pcie_bytes_per_s / 1e9:.1f} GB/s) = "
        f"{n.card_link_bytes_per_s / 1e9:.2f} GB/s after efficiency",
        f"  update {gps(n.achieved_params_per_s)} (x RTL efficiency {n.rtl_efficiency:.2f}): "
        f"{n.update_time_s:.3f} s per step; {'keeps up with' if n.keeps_up else 'falls behind'} gradients "
        f"arriving over the card link",
        f"  cards per GPU needed {n.cards_per_gpu_needed}, per node {n.cards_per_node_needed}; "
        f"PCIe slots for cards per node {n.pcie_slots}",
        f"  sizing fields used: {', '.join(n.sizing_fields)}",
    ]
    q = p.questions
    if q:
        names = {s.key: s.name for s in p.schemes}
        fewest = q["fewest_gpus"]
        lines += ["", f"questions (at micro-batch and seq as given; {p.nodes} node(s) for the per-N answers):"]
        qrows = []
        for key, name in names.items():
            f = fewest[key]
            qrows.append([name, _opt(f["gpus"]) + (f" ({f['cards']} cards)" if "cards" in f else ""),
                          str(q["max_micro_batch"][key]), str(q["max_seq"][key]),
                          _opt(q["hide_tokens_per_micro_batch"]["iso-hardware"][key], "{:,.0f}"),
                          _opt(q["hide_tokens_per_micro_batch"]["iso-network"][key], "{:,.0f}")])
        lines.append(table(qrows, ["scheme", "fewest GPUs", f"max micro-batch on {p.gpus}", f"max seq on {p.gpus}",
                                   "tokens/micro-batch hiding collectives (iso-hw)", "(iso-net)"]))
        lines.append("  (collectives only; an optimizer step or card chain that shows is in the step time above)")
        fr = q["freed"]
        rng = (f"N = {fr['gpus_min']}..{fr['gpus_max']}" if fr["gpus_max"] is not None else
               f"no N (the cards hold the state from N = {fr['gpus_min']}, where it frees only "
               f"{12 * p.params / fr['gpus_min'] / 1e9:.1f} GB per GPU)")
        lines += [
            f"  OptimusNIC frees 12 x P / N = {fr['freed_bytes_per_gpu'] / 1e9:.1f} GB per GPU here; it matters "
            f"(>= {fr['threshold_bytes'] / 1e9:.1f} GB, {fr['threshold_basis']}) and fits on the cards "
            f"({fr['card_state_capacity_bytes_per_gpu'] / 1e9:.1f} GB of state per GPU) for {rng}",
        ]
    if p.warnings:
        lines += ["", "warnings:"] + [f"  ! {w}" for w in p.warnings]
    lines += ["", "assumptions:"]
    lines += [f"  - {a}" for a in p.assumptions]
    best = p.fastest
    if best is not None:
        lines += ["", f"fastest scheme that fits ({p.view}): {best.name} at {best.step_s:.2f} s per step"
                  f" ({p.tokens_per_step / best.step_s:,.0f} tokens/s)"]
    return "\n".join(lines)


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
        fig.savefig(path, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise UserError(f"cannot write the chart to {path}: {exc.strerror}") from exc
    finally:
        plt.close(fig)


def write_sweep_csv(rows: list[planner.SweepRow], path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow([fl.name for fl in fields(planner.SweepRow)])
            for r in rows:
                w.writerow(list(asdict(r).values()))
    except OSError as exc:
        raise UserError(f"cannot write the sweep to {path}: {exc.strerror}") from exc


def write_sweep_chart(rows: list[planner.SweepRow], what: str, p: planner.Plan, path: Path) -> None:
    """Left: freed GB per GPU vs N with the card-capacity line; right: step time per scheme vs the swept value."""
    plt = _pyplot()
    fig, (ax_f, ax_t) = plt.subplots(1, 2, figsize=(13, 5))
    cap = p.nic.max_params_per_card * p.nic.cards_per_node / p.gpus_per_node * planner.STATE_BYTES / 1e9
    if what == "gpus":
        ns = sorted({r.gpus for r in rows})
    else:
        ns = [k for k in planner.gpu_counts(p.gpus_per_node, 4096) if k >= p.gpus_per_node][:10]
    ax_f.plot(ns, [planner.STATE_BYTES * p.params / k / 1e9 for k in ns], marker="o", label="freed: 12 x P / N")
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
    for key in planner.SCHEMES:
        pts = [(r.value, r.step_s_iso_hardware, r.step_s_iso_network) for r in rows if r.scheme == key and r.fits]
        if not pts:
            continue
        line = ax_t.plot([x for x, _, _ in pts], [h for _, h, _ in pts], marker="o", label=planner.SCHEME_NAMES[key])
        ax_t.plot([x for x, _, _ in pts], [v for _, _, v in pts], linestyle=":", color=line[0].get_color())
    ax_t.set_xscale("log", base=2)
    ax_t.set_xlabel(xlabel[what])
    ax_t.set_ylabel("seconds per step (solid iso-hardware, dotted iso-network)")
    ax_t.set_title("Step time of the schemes that fit")
    ax_t.legend(fontsize=7)
    fig.suptitle(f"{p.model_name} on {p.gpu_name}, OptimusNIC {p.nic.target_name} ({p.nic.placement})", fontsize=11)
    fig.tight_layout()
    _save(fig, plt, path)


def write_chart(p: planner.Plan, path: Path) -> None:
    """Stacked bars: memory per GPU (with the GPU's capacity) and step time, one bar per scheme."""
    plt = _pyplot()
    names = [s.name for s in p.schemes]
    x = range(len(names))
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(14, 5.2))
    bottom = [0.0] * len(names)
    for part, color in (("params", "#4c72b0"), ("grads", "#55a868"), ("optimizer", "#c44e52"),
                        ("activations", "#8172b2"), ("logits", "#937860")):
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
