"""`optimusnic targets`: the target catalog."""

from __future__ import annotations

import argparse

from hls.targets import load_catalog
from optimusnic.cli.common import add_json, add_targets_file, emit_json, human_bytes, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("targets", help="list the target catalog (cards, memory, network, sources)")
    add_json(p)
    add_targets_file(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.targets_file)
    if args.json:
        emit_json({key: t.raw | {"key": key, "memory_efficiency": t.memory_efficiency,
                                 "mixed_efficiency": t.efficiency_mixed} for key, t in catalog.items()})
        return 0
    rows = []
    for key, t in catalog.items():
        m = t.memory
        rows.append([
            key, t.name, t.part, f"{m.kind} {human_bytes(m.capacity_bytes)}",
            f"{m.peak_bandwidth_bytes_per_s / 1e9:.0f} GB/s x{m.channels}",
            f"{t.network_ports}x{t.line_rate_gbps:g}G", f"{t.kernel_clock_mhz:g} MHz",
            t.platform or f"({t.flow} flow)",
        ])
    print(table(rows, ["target", "card", "part", "memory", "bandwidth", "network", "clock", "platform"]))
    print("\nEvery figure has its source in `optimusnic targets --json` (sources, unconfirmed).")
    return 0
