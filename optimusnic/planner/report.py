"""A plan as text (the table `optimusnic plan` prints) and a sweep as CSV."""

from __future__ import annotations

import csv
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from hls import safe_io
from hls.errors import UserError
from optimusnic.planner.planning import Plan
from optimusnic.planner.sweeps import SweepRow
from optimusnic.text import human_count, table


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _s(x: float) -> str:
    return f"{x:.2f}"


def _opt(x: Any, fmt: str = "{}") -> str:
    return "never" if x is None else fmt.format(x)


def _figure(value: float, unit: str) -> str:
    if unit == "B/s":
        return f"{value / 1e9:.2f} GB/s"
    if unit == "params/s":
        return f"{value / 1e9:.2f} G params/s"
    if unit == "fraction":
        return f"{value:g}"
    return f"{value:g} {unit}"


def names_of(p: Plan) -> dict[str, str]:
    return {s.key: s.name for s in p.schemes}


def _fewest(f: dict[str, Any]) -> str:
    if f["gpus"] is None:
        return f"> {f['limit']:,}"
    return f"{f['gpus']:,} ({f['nodes']} node(s)" + (f", {f['cards']} cards)" if "cards" in f else ")")


def format_plan(p: Plan) -> str:
    lines = [
        f"{p.model_name} ({human_count(p.params)} params) on {p.gpus} x {p.gpu_name} "
        f"({p.nodes} node(s) x {p.gpus_per_node}, {p.cluster_name}), OptimusNIC card {p.nic.target_name} "
        f"({p.nic.placement}, gradients {p.nic.grad_path})",
        f"{p.tokens_per_step} tokens per step; GPU memory {p.gpu_memory_bytes / 1e9:.0f} GB; MFU {p.mfu:.0%} "
        f"(model FLOPs {p.model_flops_per_step:.3g}), HFU {p.hfu:.0%} (hardware FLOPs {p.hardware_flops_per_step:.3g})",
        "",
        f"memory per GPU (GB = 1e9 bytes) and step time (s), {p.view}:",
    ]
    rows = []
    for s in p.schemes:
        m = s.memory
        rows.append([
            s.name, _gb(m["params"]), _gb(m["grads"]), _gb(m["optimizer"]), _gb(m["buffers"]), _gb(m["activations"]),
            _gb(m["logits"]),
            _gb(m["total"]), "yes" if s.fits else "NO", _s(s.compute_s), _s(s.comm_s), _s(s.comm_exposed_s),
            _s(s.optimizer_s), _s(s.optimizer_exposed_s), _s(s.transfer_exposed_s), _s(s.step_s),
        ])
    lines.append(table(rows, ["scheme", "params", "grads", "optim", "buffers", "activ", "logits", "total", "fits",
                              "compute",
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
    if p.chain:
        lines += ["", "card chain per step, leg by leg as the driver runs it (one host thread; the kernel overlaps "
                      "it):"]
        for key, legs in p.chain.items():
            lines.append(f"  {names_of(p)[key]}: " + "; ".join(f"{name} {sec:.3f} s" for name, sec in legs)
                         + f"; legs {sum(sec for _, sec in legs):.3f} s vs update {n.update_time_s:.3f} s")
    wire = (f"{n.line_rate_gbps:g} Gb/s ports" if n.rail is None else
            f"{n.sizing.network.goodput_bytes_per_s / 1e9:.2f} GB/s payload goodput of {n.line_rate_gbps:g} Gb/s")
    lines += [
        "",
        f"NIC side ({n.target_name}, {n.cards_per_node} per node, {n.placement}, sizing grad_source={n.grad_source}):",
        f"  each card holds {human_count(n.card_params)} params -> {n.card_state_bytes / 1e9:.1f} GB "
        f"({n.card_state_bytes / 2**30:.1f} GiB, as `optimusnic size` prints it) fp32 state; "
        f"a card holds {human_count(n.max_params_per_card)} -> {'fits' if n.fits else 'does NOT fit'}",
        f"  card plan: {n.plan_kind} ({n.compute_units} CU x {n.stripes} state stripes)"
        + (f"; sizing's line-rate plan holds {human_count(int(n.line_rate_plan['max_params_per_card']))} at "
           f"{gps(n.line_rate_plan['params_per_s'])}" if n.line_rate_plan else "")
        + (f"; capacity-first plan (1 CU x {n.capacity_plan['state_stripes']} stripes) holds "
           f"{human_count(int(n.capacity_plan['max_params_per_card']))} at {gps(n.capacity_plan['params_per_s'])}"
           if n.capacity_plan and n.plan_kind != "capacity-first" else ""),
        f"  card PCIe: host -> card {n.card_pcie_bytes_per_s / 1e9:.1f} GB/s, card -> host "
        f"{n.card_c2h_bytes_per_s / 1e9:.1f} GB/s; card link: min({wire}, PCIe host -> card) = "
        f"{n.card_link_bytes_per_s / 1e9:.2f} GB/s" + (" after efficiency" if n.rail is None else ""),
        f"  update {gps(n.achieved_params_per_s)} (x RTL efficiency {n.rtl_efficiency:.2f}): "
        f"{n.update_time_s:.3f} s per step; {'keeps up with' if n.keeps_up else 'falls behind'} gradients "
        f"arriving over the card link",
        f"  cards per GPU needed {n.cards_per_gpu_needed}, per node {n.cards_per_node_needed}; "
        f"PCIe slots for cards per node {n.pcie_slots}",
        f"  sizing fields used: {', '.join(n.sizing_fields)}",
    ]
    if n.rail is not None:
        lines += ["  rail figures (measured = by the software-card simulation):"]
        lines += [f"    {f.name}: {_figure(f.value, f.unit)} -- {f.status}; {f.source}" for f in n.rail]
    q = p.questions
    if q:
        names = {s.key: s.name for s in p.schemes}
        fewest = q["fewest_gpus"]
        lines += ["", f"questions (at micro-batch and seq as given; {p.nodes} node(s) for the per-N answers):"]
        qrows = []
        for key, name in names.items():
            f = fewest[key]
            qrows.append([name, _fewest(f),
                          str(q["max_micro_batch"][key]), str(q["max_seq"][key]),
                          _opt(q["hide_tokens_per_micro_batch"]["iso-hardware"][key], "{:,.0f}"),
                          _opt(q["hide_tokens_per_micro_batch"]["iso-network"][key], "{:,.0f}")])
        lines.append(table(qrows, ["scheme", "fewest GPUs (whole nodes, cards in PCIe slots)",
                                   f"max micro-batch on {p.gpus}", f"max seq on {p.gpus}",
                                   "tokens/micro-batch hiding collectives (iso-hw)", "(iso-net)"]))
        lines.append("  (collectives only; an optimizer step or card chain that shows is in the step time above)")
        fr = q["freed"]
        rng = (f"N = {fr['gpus_min']}..{fr['gpus_max']}" if fr["gpus_max"] is not None else
               f"no N (the cards hold the state from N = {fr['gpus_min']}, where it frees only "
               f"{fr['freed_bytes_per_param'] * p.params / fr['gpus_min'] / 1e9:.1f} GB per GPU)")
        lines += [
            f"  OptimusNIC (FSDP2 + NicAdamW, param dtype {p.param_dtype}) frees {fr['freed_bytes_per_param']} x P / N"
            " = "
            f"{fr['freed_bytes_per_gpu'] / 1e9:.1f} GB per GPU here; it matters "
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


def write_sweep_csv(rows: list[SweepRow], path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with safe_io.atomic_open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow([fl.name for fl in fields(SweepRow)])
            for r in rows:
                w.writerow(list(asdict(r).values()))
    except OSError as exc:
        raise UserError(f"cannot write the sweep to {path}: {exc.strerror}") from exc
