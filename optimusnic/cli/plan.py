"""`optimusnic plan`: memory per GPU and step time of DDP, ZeRO-1/2/3, HSDP, ZeRO++, ZeRO-Offload and OptimusNIC."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from hls import safe_io, sizing
from hls.errors import UserError
from hls.targets import get_target
from optimusnic import planner
from optimusnic.cli.common import add_json, add_targets_file, float_in, int_in, parse_count, path_arg
from optimusnic.cli.size import payload_bytes_arg
from optimusnic.text import emit_json


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
    # "--params -7e9": argparse takes anything starting with "-" that is not a plain number for an option
    # ("expected one argument"); let every number through to its own check, which names the flag.
    p._negative_number_matcher = re.compile(r"^-\d|^-\.\d")
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
    p.add_argument("--hfu", type=float_in(0, 1, lo_open=True), default=planner.DEFAULT_HFU,
                   help="hardware FLOPs utilisation: recomputed FLOPs count, so --recompute changes step time "
                        "(default 0.4: Llama 3 paper, 405B without activation checkpointing)")
    p.add_argument("--mfu", type=float_in(0, 1, lo_open=True), default=None,
                   help="model FLOPs utilisation instead of --hfu: step time from model FLOPs (default: from --hfu)")
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
    p.add_argument("--ring-loss", type=float_in(0, 0.99), default=None,
                   help=f"rail: fraction of the payload goodput lost to ACK/NAK frames and retransmissions "
                        f"(default: 'loss_beyond_framing' in {planner.NET_BENCH_JSON}, written by `make bench`, "
                        f"else 0)")
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
    p.add_argument("--payload-bytes", type=payload_bytes_arg, default=sizing.PAYLOAD_BYTES,
                   help=f"rail: frame payload of the cards' ring, a multiple of 64 from {sizing.PAYLOAD_MIN} to "
                        f"{sizing.PAYLOAD_MAX} (default {sizing.PAYLOAD_BYTES}; 8192 for jumbo frames)")
    p.add_argument("--cards-per-node", type=int_in(1, 64), default=None,
                   help="OptimusNIC cards per node (default one per GPU)")
    p.add_argument("--pcie-slots", type=int_in(0, 64), default=None,
                   help="PCIe slots per node free for cards (default: the cluster preset's)")
    p.add_argument("--card-pcie-gbs", type=float_in(0, 1e4, lo_open=True), default=None,
                   help="card PCIe usable GB/s, both directions (default: per direction, see the next two)")
    p.add_argument("--card-h2c-gbs", type=float_in(0, 1e4, lo_open=True), default=None,
                   help="card PCIe host -> card GB/s (default: catalog link raw x 0.571, 9.0 GB/s on Gen3 x16: "
                        "AMD xbutil validate 8.5-9.6)")
    p.add_argument("--card-c2h-gbs", type=float_in(0, 1e4, lo_open=True), default=None,
                   help="card PCIe card -> host GB/s (default: catalog link raw x 0.774, 12.2 GB/s on Gen3 x16: "
                        "AMD xbutil validate)")
    p.add_argument("--detect-changes", action=argparse.BooleanOptionalAction, default=True,
                   help="the driver's exact change detection: masters read back and parameters compared every "
                        "step (default yes, as the driver)")
    p.add_argument("--compute-units", type=int_in(1, 64), default=None,
                   help="card compute units, passed to sizing (default: its line-rate plan, or the capacity-first "
                        "plan when that does not hold the shard)")
    p.add_argument("--stripes", type=int_in(1, 64), default=None,
                   help="state stripes per compute unit, passed to sizing (default: sizing's choice)")
    p.add_argument("--param-dtype", choices=planner.PARAM_DTYPES, default="fp32",
                   help="FSDP2's sharded parameters for OptimusNIC+Z3: fp32 as under MixedPrecisionPolicy("
                        "param_dtype=bf16) on an fp32 model (the README's recipe), or bf16 (default fp32)")
    p.add_argument("--attention", choices=planner.ATTENTIONS, default="flash",
                   help="flash: FlashAttention/SDPA, no s x s scores stored; eager: the scores are stored "
                        "(default flash)")
    p.add_argument("--view", choices=planner.VIEWS, default="iso-hardware",
                   help="which view the main table shows (both are always computed)")
    p.add_argument("--freed-threshold-gb", type=float_in(0, 1e6, lo_open=True), default=None,
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


def _gbs(value: float | None) -> float | None:
    return value * 1e9 if value is not None else None


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
    if args.ring_loss is None:
        ring_loss, ring_loss_source = planner.read_ring_loss()
    else:
        ring_loss, ring_loss_source = args.ring_loss, "given with --ring-loss"
    assumptions = planner.Assumptions(
        micro_batch=args.micro_batch, seq=args.seq, grad_accum=args.grad_accum, recompute=args.recompute,
        hfu=args.hfu, mfu=args.mfu, link_efficiency=args.link_efficiency,
        cpu_adam_params_per_s=float(args.cpu_adam_rate),
        rtl_efficiency=eff, rtl_efficiency_source=eff_source, ring_loss=ring_loss,
        ring_loss_source=ring_loss_source, nic_grads=args.nic_grads, nic_ports=args.nic_ports,
        nic_placement=args.nic_placement, nic_grad_path=args.nic_grad_path, nic_overlap=args.nic_overlap,
        nic_payload_bytes=args.payload_bytes,
        clip=args.clip, overlap_reduce=args.overlap_reduce, overlap_gather=args.overlap_gather,
        grad_buffer=args.grad_buffer, cards_per_node=args.cards_per_node, pcie_slots=args.pcie_slots,
        card_pcie_bytes_per_s=_gbs(args.card_pcie_gbs), card_h2c_bytes_per_s=_gbs(args.card_h2c_gbs),
        card_c2h_bytes_per_s=_gbs(args.card_c2h_gbs), detect_changes=args.detect_changes,
        compute_units=args.compute_units, stripes=args.stripes, param_dtype=args.param_dtype, attention=args.attention,
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
        planner.write_sweep_csv(rows, args.sweep_out.with_suffix(".csv"))
        planner.write_sweep_chart(rows, args.sweep, result, args.sweep_out.with_suffix(".png"))
    if args.plot:
        planner.write_chart(result, args.plot)
    if args.json:
        data = result.to_dict()
        data["plot"] = str(args.plot) if args.plot else None
        if rows is not None:
            data["sweep"] = {"what": args.sweep, "csv": str(args.sweep_out.with_suffix(".csv")),
                             "png": str(args.sweep_out.with_suffix(".png")), "rows": [asdict(r) for r in rows]}
        emit_json(data)
    else:
        print(planner.format_plan(result))
        if args.plot:
            print(f"\nchart: {args.plot}")
        if rows is not None:
            print(f"\nsweep over {args.sweep}: {args.sweep_out.with_suffix('.csv')} "
                  f"({len(rows)} rows), {args.sweep_out.with_suffix('.png')}")
    return 0
