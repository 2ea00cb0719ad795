"""`optimusnic plan`: memory per GPU and step time for DDP, ZeRO-1/2/3, ZeRO-Offload and OptimusNIC."""

from __future__ import annotations

import argparse
from pathlib import Path

from hls import plan as planner
from hls import safe_io
from hls.commands.common import (
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
from hls.errors import UserError
from hls.targets import get_target


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="compare DDP, ZeRO-1/2/3, ZeRO-Offload and OptimusNIC for a training step")
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
    p.add_argument("--mfu", type=float_in(0, 1, lo_open=True), default=planner.DEFAULT_MFU,
                   help="model FLOPs utilisation (default 0.4)")
    p.add_argument("--link-efficiency", type=float_in(0, 1, lo_open=True), default=planner.DEFAULT_LINK_EFFICIENCY,
                   help="fraction of peak link bandwidth collectives reach (default 0.85)")
    p.add_argument("--cpu-adam-rate", type=parse_count, default=int(planner.DEFAULT_CPU_ADAM_PARAMS_PER_S),
                   help="CPU Adam parameters per second per socket (default 1e9)")
    p.add_argument("--rtl-efficiency", type=float_in(0, 1, lo_open=True), default=None,
                   help=f"kernel efficiency (default: 'efficiency' in {planner.RTL_BENCH_JSON}, else 0.95)")
    p.add_argument("--nic-grads", choices=planner.NIC_GRADS, default="full",
                   help="OptimusNIC gradient buffer on the GPU: full bf16 or ZeRO-2-style sharded (default full)")
    p.add_argument("--nic-ports", type=int_in(1, 16), default=1, help="card network ports used (default 1)")
    p.add_argument("--plot", type=path_arg, default=None, metavar="PNG", help="write a chart comparing the schemes")
    add_json(p)
    add_targets_file(p)
    p.set_defaults(func=run)


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
    )
    result = planner.plan(params=model.params if model else args.params, gpus=args.gpus, gpu=gpu, target=target,
                          cluster=cluster, nodes=args.nodes, model=model, assumptions=assumptions)
    if args.plot:
        write_chart(result, args.plot)
    if args.json:
        data = result.to_dict()
        data["plot"] = str(args.plot) if args.plot else None
        emit_json(data)
    else:
        print(format_plan(result))
        if args.plot:
            print(f"\nchart: {args.plot}")
    return 0


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _s(x: float) -> str:
    return f"{x:.2f}"


def format_plan(p: planner.Plan) -> str:
    lines = [
        f"{p.model_name} ({human_count(p.params)} params) on {p.gpus} x {p.gpu_name} "
        f"({p.nodes} node(s) x {p.gpus_per_node}, {p.cluster_name}), OptimusNIC card {p.nic.target_name}",
        f"{p.tokens_per_step} tokens per step; GPU memory {p.gpu_memory_bytes / 1e9:.0f} GB",
        "",
        "memory per GPU (GB) and step time (s):",
    ]
    rows = []
    for s in p.schemes:
        m = s.memory
        rows.append([
            s.name, _gb(m["params"]), _gb(m["grads"]), _gb(m["optimizer"]), _gb(m["activations"]), _gb(m["total"]),
            "yes" if s.fits else "NO", _s(s.compute_s), _s(s.comm_s), _s(s.comm_exposed_s),
            _s(s.optimizer_s), _s(s.optimizer_exposed_s + s.transfer_exposed_s), _s(s.step_s),
        ])
    lines.append(table(rows, ["scheme", "params", "grads", "optim", "activ", "total", "fits", "compute",
                              "comm", "comm shown", "optim", "optim shown", "step"]))
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
        f"NIC side ({n.target_name}, one per GPU):",
        f"  shard {human_count(n.shard_params)} params -> {n.shard_state_bytes / 1e9:.1f} GB fp32 state; "
        f"card holds {human_count(n.max_params_per_card)} -> {'fits' if n.fits else 'does NOT fit'} "
        f"(cards needed for the whole model: {n.cards_needed})",
        f"  line rate {n.line_rate_gbps:g} Gb/s of bf16 gradients = {gps(n.line_rate_params_per_s)}",
        f"  memory-bound {gps(n.memory_params_per_s)}; kernel {n.lanes} lanes x {n.compute_units} CU x "
        f"{n.clock_mhz:g} MHz x {n.rtl_efficiency:.2f} = {gps(n.kernel_params_per_s * n.rtl_efficiency)}",
        f"  achieved {gps(n.achieved_params_per_s)} ({n.bottleneck}-bound), "
        f"{'keeps up with' if n.keeps_up else 'falls behind'} line rate; update of the shard {n.update_time_s:.3f} s",
        "",
        "assumptions:",
    ]
    lines += [f"  - {a}" for a in p.assumptions]
    best = p.fastest
    lines += ["", f"fastest scheme that fits: {best.name} at {best.step_s:.2f} s per step"
              f" ({p.tokens_per_step / best.step_s:,.0f} tokens/s)"]
    return "\n".join(lines)


def write_chart(p: planner.Plan, path: Path) -> None:
    """Stacked bars: memory per GPU (with the GPU's capacity) and step time, one bar per scheme."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UserError(f"--plot needs matplotlib ({exc}); pip install matplotlib") from exc
    names = [s.name for s in p.schemes]
    x = range(len(names))
    fig, (ax_m, ax_t) = plt.subplots(1, 2, figsize=(13, 5.2))
    bottom = [0.0] * len(names)
    for part, color in (("params", "#4c72b0"), ("grads", "#55a868"), ("optimizer", "#c44e52"),
                        ("activations", "#8172b2")):
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
    for attr, label, color in (("compute_s", "compute", "#4c72b0"), ("comm_exposed_s", "comm (exposed)", "#dd8452"),
                               ("optimizer_exposed_s", "optimizer (exposed)", "#c44e52"),
                               ("transfer_exposed_s", "PCIe copies (exposed)", "#937860")):
        vals = [getattr(s, attr) for s in p.schemes]
        ax_t.bar(x, vals, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, s in enumerate(p.schemes):
        if not s.fits:
            ax_t.text(i, bottom[i], "does not fit", ha="center", va="bottom", fontsize=7, color="#c44e52")
    ax_t.set_ylim(0, max(bottom) * 1.1)
    ax_t.set_ylabel("seconds per step")
    ax_t.set_title("Step time")
    ax_t.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2)
    for ax in (ax_m, ax_t):
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    fig.suptitle(f"{p.model_name} on {p.gpus} x {p.gpu_name}, OptimusNIC on {p.nic.target_name}", fontsize=11)
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
    except OSError as exc:
        raise UserError(f"cannot write the chart to {path}: {exc.strerror}") from exc
    finally:
        plt.close(fig)
