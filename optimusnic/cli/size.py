"""`optimusnic size`: will the optimizer state fit on the card, and will the card keep up?"""

from __future__ import annotations

import argparse

from hls import sizing
from hls.rtl.synth import fit_note
from hls.sizing import SizingReport, size
from hls.spec import GRAD_DTYPES, GRAD_SOURCES, MAX_COMPUTE_UNITS, MAX_LANES, OUT_DTYPES, KernelSpec
from hls.targets import Target, get_target
from optimusnic.cli.common import (
    CLOCK,
    COMPUTE_UNITS,
    LANES,
    add_json,
    add_plan_options,
    add_targets_file,
    emit_json,
    human_bytes,
    human_count,
    int_in,
    parse_count,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("size", help="size a kernel for a target: capacity, bandwidth, line rate, verdict")
    p.add_argument("--target", required=True, help="catalog target key, e.g. u55c")
    p.add_argument("--params", required=True, type=parse_count, help="model parameters, e.g. 7e9 or 7B")
    p.add_argument("--cards", type=int_in(1, 1 << 20), default=1, help="cards the optimizer state is sharded over")
    p.add_argument("--grad-dtype", choices=GRAD_DTYPES, default="fp32")
    p.add_argument("--out-dtype", choices=OUT_DTYPES, default="fp32")
    p.add_argument("--grad-source", choices=GRAD_SOURCES, default="memory")
    p.add_argument("--lanes", type=LANES, default=None, help="fixed lanes (default: what line rate needs)")
    p.add_argument("--compute-units", type=COMPUTE_UNITS, default=None, help="fixed compute units (default: as needed)")
    p.add_argument("--clock", type=CLOCK, default=None, help="kernel clock in MHz, 50 to 700 (default: the target's)")
    add_plan_options(p)
    add_network_options(p)
    add_json(p)
    add_targets_file(p)
    p.set_defaults(func=run)


def payload_bytes_arg(text: str) -> int:
    """argparse type for --payload-bytes: whole 64-byte beats, 64 to 8896 (a 9000-byte jumbo MTU)."""
    value = int_in(sizing.PAYLOAD_MIN, sizing.PAYLOAD_MAX)(text)
    if value % 64:
        raise argparse.ArgumentTypeError(f"{text!r} must be a multiple of 64 (whole 512-bit beats)")
    return value


payload_bytes_arg.__name__ = "payload size"


def add_network_options(p: argparse.ArgumentParser) -> None:
    """Where the card sits and, on the rail, its network (design.md section 8)."""
    p.add_argument("--placement", choices=sizing.PLACEMENTS, default="sidecar",
                   help="sidecar: a PCIe device beside the GPU; rail: the card runs the ring (reduce-scatter, "
                        "update, all-gather) at its ports' payload goodput (default sidecar)")
    p.add_argument("--payload-bytes", type=payload_bytes_arg, default=sizing.PAYLOAD_BYTES,
                   help=f"rail: frame payload in bytes, a multiple of 64 from {sizing.PAYLOAD_MIN} to "
                        f"{sizing.PAYLOAD_MAX} (8192 for jumbo frames; default {sizing.PAYLOAD_BYTES}, "
                        "a 1500-byte MTU)")
    p.add_argument("--ring-ports", type=int_in(1, 16), default=1,
                   help="rail: network ports the ring uses, one ring on each (1/k of the vector each); at most the "
                        "card's ports (default 1)")
    p.add_argument("--window-packets", type=int_in(1, sizing.MAX_WINDOW_PACKETS), default=sizing.WINDOW_PACKETS,
                   help=f"rail: go-back-N window per flow, in packets (default {sizing.WINDOW_PACKETS})")


def run(args: argparse.Namespace) -> int:
    target = get_target(args.target, args.targets_file)
    report = size(
        target,
        args.params,
        grad_dtype=args.grad_dtype,
        out_dtype=args.out_dtype,
        grad_source=args.grad_source,
        cards=args.cards,
        lanes=args.lanes,
        compute_units=args.compute_units,
        clock_mhz=args.clock,
        stripes=args.stripes,
        rate=args.rate * 1e9 if args.rate is not None else None,
        placement=args.placement,
        payload_bytes=args.payload_bytes,
        ring_ports=args.ring_ports,
        window_packets=args.window_packets,
    )
    report.notes += yosys_notes(report, target)
    if args.json:
        emit_json(report.to_dict())
    else:
        print(format_report(report))
    return 0


def yosys_notes(r: SizingReport, target: Target, optimizer: str = "adamw") -> list[str]:
    """A warning from cached yosys figures (`optimusnic synth`) when this width cannot fit; never runs yosys.

    The verb adds it: sizing (and so a project's manifest) never reads the build/synth/ cache."""
    if not (1 <= r.compute_units <= MAX_COMPUTE_UNITS and 1 <= r.lanes <= MAX_LANES):
        return []
    spec = KernelSpec(target=target.key, optimizer=optimizer, grad_dtype=r.grad_dtype, out_dtype=r.out_dtype,
                      grad_source=r.grad_source, lanes=r.lanes, compute_units=r.compute_units)
    note = fit_note(spec, target)
    return [note] if note else []


def format_report(r: SizingReport) -> str:
    gps = lambda x: f"{x / 1e9:.2f} G params/s"  # noqa: E731
    line = "line rate" if r.network is None else "ring goodput"
    demand = line if r.demand_params_per_s == r.line_rate_params_per_s else "requested rate"
    st = r.stripes
    lines = [
        f"{r.target_name} ({r.target}): {human_count(r.params)} parameters over {r.cards} card(s), "
        f"shard {human_count(r.shard_params)}",
        f"  gradients {r.grad_dtype} from {r.grad_source}, output {r.out_dtype}",
        f"  bytes/param resident        {r.state_bytes_per_param} (fp32 p + m + v)"
        f" -> shard state {human_bytes(r.shard_state_bytes)} = {r.shard_state_bytes / 1e9:.1f} GB",
        f"  bytes/param moved per step  {r.moved_bytes_per_param}",
        f"  {line:<27} {r.line_rate_gbps:g} Gb/s -> {gps(r.line_rate_params_per_s)}"
        f" ({r.elements_per_clock_needed:.2f} elements/clock at {r.clock_mhz:g} MHz)",
        f"  sized for                   {gps(r.demand_params_per_s)} ({demand})",
        f"  memory plan per CU          {st.state} stripe(s) each of p, m, v; {st.grad} of grad; {st.out} of out;"
        f" {r.channels_used} channel(s) in all",
        f"  one channel                 {r.channel_usable_bytes_per_s / 1e9:.2f} GB/s usable read-only or write-only "
        f"({r.memory_efficiency:.0%} of peak), {r.channel_mixed_usable_bytes_per_s / 1e9:.2f} GB/s reading and "
        f"writing ({r.memory_mixed_efficiency:.0%}); shared by the ports on it",
        f"  memory allows               {gps(r.memory_params_per_s)}",
        f"  kernel computes             {gps(r.kernel_params_per_s)} "
        f"({r.lanes} lanes x {r.compute_units} CU x {r.clock_mhz:g} MHz)",
        f"  achieved                    {gps(r.achieved_params_per_s)} "
        f"= {r.elements_per_clock_predicted:.2f} elements/clock per CU; binding: {r.binding}",
        f"  max params per card         {human_count(r.max_params_per_card)} with this plan",
        f"  optimizer step on the shard {r.step_time_s * 1e3:.1f} ms",
    ]
    lines += format_resources(r)
    cu_rate = gps(min(r.achieved_params_per_s, r.demand_params_per_s) / r.compute_units)
    for a in r.assignments:
        lines.append(f"  CU {a.cu} (SLR {a.slr}):" if a.slr is not None else f"  CU {a.cu}:")
        for c in a.loads:
            where = c.bank or f"channel {c.channel}"
            ports = ", ".join(p for s in a.stripes if s.channel == c.channel for p in s.ports)
            lines.append(f"    {where:<8} {', '.join(c.stripes):<12} ports {ports:<22} "
                         f"{c.utilization:6.1%} of usable at {cu_rate}")
    if r.network is not None:
        lines += format_network(r)
    lines += [f"  note: {n}" for n in r.notes]
    lines.append(f"verdict: {r.verdict}")
    if r.alternatives:
        lines.append("what would:" if not r.keeps_up else "what would fit:")
        lines += [f"  - {a}" for a in r.alternatives]
    if not r.keeps_up:
        lines.append(f"no plan on one {r.target_name} with these options reaches {demand}")
    return "\n".join(lines)


def format_resources(r: SizingReport) -> list[str]:
    """Ports, outstanding bursts, per-CU cost and per-SLR use against the budgets (hls.resources)."""
    res, b = r.resources, r.bursts
    if res is None or b is None:
        return []
    avail = f" of {res.memory_ports_available}" if res.memory_ports_available else ""
    lines = [
        f"  memory ports                {res.memory_ports}{avail} kernel m_axi ports; {b.outstanding} bursts x "
        f"{b.burst_beats} beats outstanding each (covers {b.latency_ns:g} ns = {b.latency_clocks} clocks)",
    ]
    for kind in ("hls", "rtl"):
        c = res.per_cu[kind]
        lines.append(f"  per CU, {kind.upper()} kernel         {c['dsp']:,.0f} DSP, {c['lut']:,.0f} LUT, "
                     f"{c['ff']:,.0f} FF, {c['bram36']:,.1f} BRAM36")
    for u in res.slrs:
        where = "device" if u.slr is None else f"SLR{u.slr}"
        use = ", ".join(f"{k} {u.utilization[k]:.0%}" for k in ("dsp", "lut", "ff", "bram36") if u.budget[k])
        cus = ", ".join(str(c) for c in u.cus) or "none"
        lines.append(f"  {where:<27} CU {cus}: {use} of usable")
    lines.append(f"  SLR crossings               {res.crossings} (port x SLR boundary between a CU and its memory)")
    lines.append(f"  closest to its budget       {res.binding}")
    return lines


def format_network(r: SizingReport) -> list[str]:
    """The rail lines: goodput, the ring's memory streams, window buffers (design.md section 8)."""
    n = r.network
    assert n is not None
    gps = lambda x: f"{x / 1e9:.2f} G params/s"  # noqa: E731
    lines = [
        f"  rail: ring ports            {n.ring_ports} of {n.card_ports}: {n.port_assumption}",
        f"  rail: payload goodput       {n.ring_ports} x {n.line_rate_gbps:g} Gb/s x {n.payload_bytes}/"
        f"({n.payload_bytes}+{n.frame_overhead_bytes}) = {n.goodput_bytes_per_s / 1e9:.2f} GB/s per direction"
        f" -> {gps(n.goodput_params_per_s)} {r.grad_dtype} (raw line rate {gps(n.line_params_per_s)})",
    ]
    for st in n.streams:
        where = ", ".join(b or f"channel {c}" for b, c in zip(st.banks, st.channels, strict=True))
        lines.append(f"  rail: {st.name:<6} {st.stripes} stripe(s) on {where}: {st.bytes_per_s / 1e9:.2f} GB/s "
                     f"in {st.phase} ({st.what})")
    for c in n.loads:
        lines.append(f"    {c.bank or f'channel {c.channel}':<8} {', '.join(c.stripes):<12} "
                     f"{c.load_bytes_per_elem * r.demand_params_per_s / c.usable_bytes_per_s:6.1%} of usable "
                     f"at the goodput")
    lines += [
        f"  rail: card memory traffic   {n.update_bytes_per_s / 1e9:.2f} GB/s in the update hop "
        f"(the kernel alone, fed from the stream: {n.sidecar_update_bytes_per_s / 1e9:.2f} GB/s); "
        f"memory allows {gps(n.memory_params_per_s)}",
        f"  rail: window buffers        {len(n.window_buffers)} x {n.window_packets} packets x "
        f"{n.payload_bytes} B = {human_bytes(n.window_bytes)} (RS and AG, retransmit and receive, per ring port): "
        + (f"{n.uram} URAM of {n.uram_usable} usable" if n.uram else f"{n.bram36} BRAM36 of {n.bram36_usable} usable")
        + ("" if n.onchip_fits else " -- does NOT fit"),
        f"  rail: RTL chunk bound       {n.rtl_packets_bound} packets per flow in hop-major order (the packaged "
        f"network kernel's transmit + receive slots: a ring deadlocks at or over it): chunks up to "
        f"{n.rtl_max_chunk_elems:,} elements; any chunk in round-major order, segment <= {n.rtl_segment} "
        f"(two-phase steps); one-phase steps up to {n.rtl_one_phase_max_elems:,} elements"
        + ("" if n.rtl_chunk_packets is None else
           f"; this ring's chunk {n.rtl_chunk_elems:,} elements = {n.rtl_chunk_packets['rs']:,} RS / "
           f"{n.rtl_chunk_packets['ag']:,} AG packets" + (" -- needs round-major order" if n.rtl_chunk_deadlocks
                                                          else "" if n.rtl_chunk_one_phase
                                                          else " -- runs as two-phase steps")),
    ]
    return lines
