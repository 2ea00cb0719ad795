"""The timing report: LUT levels and fan-out (hls.rtl.netlist) of every RTL unit and of the kernel.

`report()` runs the netlist analysis over every module of the RTL file lists synthesized alone and
over the generated kernel top synthesized at a few lane counts (1 and 4 by default), scaling the
other rows of 1, 4 and 16 lanes from them (`scale_row`, marked `scaled`). `optimusnic synth
--timing` prints it (`table_rows`); `make bench` writes it to bench/results.md (`markdown`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from hls import rtl_sources
from hls.rtl import synth
from hls.rtl.netlist import GOAL_MAX_FANOUT, judge
from hls.rtl_sources import CORE_MODULE, LANE_MODULE, lane_params

KERNEL_LANES = (1, 4, 16)
FULL_LANES = (1, 4)  # synthesized by default; 16 is scaled (yosys at 16 lanes takes hours on 2 shared cores)
# Parameters a unit is synthesized with when its defaults would make it the whole kernel (applied
# only when the module declares the parameter, so the list survives RTL rewrites).
UNIT_PARAMS: dict[str, dict[str, int]] = {CORE_MODULE: {"LANES": 1}}
_MODULE = re.compile(r"^\s*module\s+(\w+)", re.M)


def unit_modules(sources: list[Path]) -> list[tuple[str, Path]]:
    """(module, file) for every module in the RTL file lists, in file-list order."""
    found = []
    for src in sources:
        for name in _MODULE.findall(src.read_text()):
            found.append((name, src))
    return found


def _unit_params(module: str, src: Path, spec: Any) -> dict[str, int]:
    # STALL = 0: an fp unit as onic_adam_lane instantiates it (free-running, its ce port unused)
    wanted = {"STALL": 0} | UNIT_PARAMS.get(module, {})
    if module == LANE_MODULE:
        wanted |= lane_params(spec)
    text = src.read_text()
    return {k: v for k, v in wanted.items() if re.search(rf"\bparameter\b[^;,)]*\b{k}\b", text)}


def row(run: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """One table row from a synth_module result (its `timing` analysis)."""
    t = run["timing"]
    path = t["path"] or {}
    worst = t["max_fanout"] or {"net": None, "loads": 0, "pins": {}}
    return {
        "unit": run["unit"],
        "top": run["top"],
        "params": run["params"],
        "lut_levels": t["lut_levels"],
        "carry": path.get("carry", 0),
        "muxf": path.get("muxf", 0),
        "dsp": path.get("dsp", 0),
        "path_start": _where(path.get("start")),
        "path_end": _where(path.get("end")),
        "max_fanout_net": _net_label(worst),
        "max_fanout": worst["loads"],
        "max_fanout_pins": worst["pins"],
        "io_lut_levels": {k: (v["lut_levels"] if v else None) for k, v in t["io_paths"].items()},
        "nets_over_goal": _over_goal(t.get("large_nets", {})),
        "scaled": False,
        "seconds": run["seconds"],
        "cached": run["cached"],
    } | judge(t["lut_levels"], worst["loads"]) | extra


def _over_goal(nets: dict[str, int]) -> dict[str, int]:
    """Every non-clock net above the fan-out goal, largest first."""
    return dict(sorted(((n, k) for n, k in nets.items() if k > GOAL_MAX_FANOUT), key=lambda t: (-t[1], t[0])))


def _net_label(net: dict[str, Any]) -> str | None:
    """A yosys-made name says nothing: show what drives it instead."""
    if net["net"] and net["net"].startswith("$") and net.get("driver"):
        return f"output of {net['driver']}"
    return net["net"]


def _where(ref: dict[str, Any] | None) -> str | None:
    if not ref:
        return None
    if "cell" not in ref:
        return f"port {ref['port']}"
    net = ref["net"]
    if net and net.startswith("$") and ref.get("src"):
        net = f"at {ref['src'].split('.')[0]}"  # yosys-made name: the source line says more
    return f"{ref['type']} {net}" + (f" ({ref['pin']})" if "pin" in ref else "")


def scale_row(small: dict[str, Any], big: dict[str, Any], small_t: dict[str, Any], big_t: dict[str, Any],
              lanes: int) -> dict[str, Any]:
    """The kernel at `lanes` from synthesized runs at a small and a big lane count.

    Fan-out: each large net found by name in both runs grows linearly with lanes (a net shared by
    every lane gains the same loads per lane); a net found only in the big run belongs to one lane
    and keeps its loads. A net yosys named differently in the two runs (`$abc$...`) is not matched
    and keeps its loads: an under-estimate if it is shared. LUT levels: the same depth if it did not
    grow from small to big, else it grows by the same step per the same lane ratio (depth that grows
    with lanes is a reduction tree: logarithmic in lanes).
    """
    ls, lb = small["lanes"], big["lanes"]
    grown = {}
    for net, n in big_t["large_nets"].items():
        if net in small_t["large_nets"]:
            grown[net] = max(0, round(n + (n - small_t["large_nets"][net]) * (lanes - lb) / (lb - ls)))
        else:
            grown[net] = n
    net, loads = max(grown.items(), key=lambda t: (t[1], t[0])) if grown else (None, 0)
    step = big["lut_levels"] - small["lut_levels"]
    levels = big["lut_levels"] + max(0, math.ceil(step * math.log(lanes / lb) / math.log(lb / ls)))
    return big | {
        "unit": f"kernel, {lanes} lanes (scaled)",
        "lanes": lanes,
        "lut_levels": levels,
        "max_fanout_net": net,
        "max_fanout": loads,
        "max_fanout_pins": {},
        "nets_over_goal": _over_goal(grown),
        "scaled": True,
        "method": f"scaled from the {ls}- and {lb}-lane runs: nets named in both grow linearly with lanes, "
                  f"LUT levels {'as the larger run' if step <= 0 else f'grow by {step} per {lb // ls}x lanes'}",
        "seconds": 0,
        "cached": True,
    } | judge(levels, loads)


def report(spec: Any, target: Any, *, full_lanes: tuple[int, ...] = FULL_LANES, units: bool = True,
           kernel: bool = True, use_cache: bool = True, cache_dir: Path | None = None,
           log: Any = None) -> dict[str, Any]:
    """Timing rows for every RTL unit alone and the kernel top at 1, 4 and 16 lanes.

    The kernel is synthesized at `full_lanes` (at least two counts); the other rows of 1, 4, 16 are
    scaled from the smallest and largest of them (scale_row) and marked so.
    """
    full = tuple(sorted(set(full_lanes)))
    if len(full) < 2 and any(n not in full for n in KERNEL_LANES):
        raise ValueError("scaling needs the kernel synthesized at two lane counts at least")
    cache = Path(cache_dir or synth.SYNTH_DIR)
    say = log or (lambda _msg: None)
    sources = rtl_sources.static_sources()
    unit_rows = []
    if units:
        mods = unit_modules(sources)
        for i, (module, src) in enumerate(mods, 1):
            params = _unit_params(module, src, spec)
            say(f"[synth] unit {i}/{len(mods)}: {module} {params or ''}".rstrip())
            run = synth.synth_module(sources, module, params, cache_dir=cache, use_cache=use_cache)
            unit_rows.append(row(run))
            say(f"[synth]   {_progress(unit_rows[-1])}")
    runs: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
    for lanes in full if kernel else ():
        say(f"[synth] kernel top, {lanes} lane(s) (yosys takes minutes; cached afterwards)")
        run = synth.synth_top(spec.with_(lanes=lanes, compute_units=1), target, cache_dir=cache, use_cache=use_cache)
        runs[lanes] = (row(run, unit=f"kernel, {lanes} lane{'s' if lanes > 1 else ''}", lanes=lanes), run["timing"])
        say(f"[synth]   {_progress(runs[lanes][0])}")
    kernel_rows = []
    for lanes in sorted(set(KERNEL_LANES) | set(full)) if kernel else ():
        if lanes in runs:
            kernel_rows.append(runs[lanes][0])
            continue
        (small, small_t), (big, big_t) = runs[full[0]], runs[full[-1]]
        say(f"[synth] kernel, {lanes} lanes: scaled from the {full[0]}- and {full[-1]}-lane runs")
        kernel_rows.append(scale_row(small, big, small_t, big_t, lanes))
    rows = unit_rows + kernel_rows
    return {
        "spec": spec.to_dict(),
        "yosys": synth.yosys_version(),
        "command": "synth_xilinx -family xcup -flatten -noiopad; write_json (hls.rtl.netlist over the netlist)",
        "goal": judge(0, 0)["goal"],
        "full_lanes": list(full),
        "units": unit_rows,
        "kernel": kernel_rows,
        "met": all(r["met"] for r in rows),
        "kernel_met": all(r["met"] for r in kernel_rows) if kernel_rows else None,
        "caveat": "LUT levels and loads from yosys before placement; Vivado maps, replicates and retimes "
                  "differently, so these say where timing is at risk, not the achieved clock",
    }


def _progress(r: dict[str, Any]) -> str:
    took = "cached" if r["cached"] else f"yosys {r['seconds']} s"
    return f"{r['lut_levels']} LUT levels, max fan-out {r['max_fanout']:,} ({r['max_fanout_net']}), {took}"


def table_rows(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the timing table (text and markdown share them)."""
    header = ["unit", "LUT levels", "carry/muxf/DSP", "longest path (start -> end)", "I/O levels",
              "max fan-out net", "loads", "nets > 1,000", "goal"]
    rows = []
    for r in rep["units"] + rep["kernel"]:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        name = r["unit"] if r["unit"] != r["top"] or not params else f"{r['unit']} ({params})"
        rows.append([
            name,
            str(r["lut_levels"]),
            f"{r['carry']}/{r['muxf']}/{r['dsp']}",
            f"{r['path_start']} -> {r['path_end']}" if r["path_start"] else "-",
            "/".join("-" if r["io_lut_levels"].get(k) is None else str(r["io_lut_levels"][k])
                     for k in ("in_to_reg", "reg_to_out", "in_to_out")) if r.get("io_lut_levels") else "-",
            r["max_fanout_net"] or "-",
            f"{r['max_fanout']:,}" + (" (scaled)" if r["scaled"] else ""),
            str(len(r.get("nets_over_goal", {}))),
            ("met" if r["met"] else "NOT met" + _why(r)),
        ])
    return header, rows


def _why(r: dict[str, Any]) -> str:
    parts = []
    if not r["lut_levels_met"]:
        parts.append("levels")
    if not r["fanout_met"]:
        parts.append("fan-out")
    return f" ({', '.join(parts)})"


def markdown(rep: dict[str, Any]) -> list[str]:
    """The timing table as markdown lines (bench/results.md)."""
    header, rows = table_rows(rep)
    esc = [[c.replace("|", "\\|").replace("$", "\\$") for c in r] for r in rows]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(r) + " |" for r in esc]]
