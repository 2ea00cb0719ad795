"""Timing evidence from the yosys netlist: LUT levels between registers and the highest fan-out net.

No open tool here places and routes for UltraScale+, so we measure what decides timing before
placement: the number of LUTs a signal passes through between two sequential elements, and the
largest number of loads on one net (a net with thousands of loads becomes a replication or
routing problem at 300 MHz). Both are read from the netlist `synth_xilinx -family xcup` wrote as
JSON (`write_json`), not from yosys `ltp`, because `ltp` counts every cell (carry and mux
primitives as full levels), stops at nothing but flip-flops and does not say where a path starts.

The netlist is a graph of cells. Sequential cells (FD*, LD*, RAMB*, URAM*, FIFO*, DSP48 with any
pipeline register) end a path at their inputs and start one at their outputs. LUT1-6 and INV are
one LUT level each. CARRY4/8, MUXF7/8/9 and a DSP48 without M or P register are crossed but
counted apart (`carry`, `muxf`, `dsp`): they are fast dedicated paths, not LUT levels. LUT-RAM
and SRL cells are LUTs read combinationally: their read-address inputs cross them as one LUT
level, their data, enable and write inputs end a path, and their stored contents start one at
one level (the read itself). Paths are followed per cell, not per bit: a CARRY8 chain is one
path through all its cells.

The analysis keeps register-to-register paths apart from those that start at an input port or
end at an output port: a unit synthesized alone has ports its neighbours register (or not), so
those are reported as `io` and not judged.

`report()` runs the analysis over every module of the RTL file lists synthesized alone and over
the generated kernel top synthesized at a few lane counts (1 and 4 by default), scaling the other
rows of 1, 4 and 16 lanes from them (`scale_row`, marked `scaled`). `optimusnic synth --timing`
prints it; `make bench` writes it to bench/results.md.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

ANALYSIS_VERSION = 3
GOAL_LUT_LEVELS = 6
GOAL_MAX_FANOUT = 1000
TOP_NETS = 5
BIG_NET = 100  # nets with at least this many loads are kept by name in the result

_LUT = re.compile(r"^(LUT[1-6](_2)?|INV|ROM\d+X1)$")
_CARRY = re.compile(r"^(CARRY[48]|MUXCY|XORCY)$")
_MUXF = re.compile(r"^MUXF[5-9]$")
_LUTMEM = re.compile(r"^(SRL\w*|RAM\d+X\d+\w*|RAM\d+M\d*|RAM32X16DR8)$")
_SEQ = re.compile(r"^(FD\w*|LD\w*|RAMB\w*|URAM\w*|FIFO\w*|IDDR\w*|ODDR\w*)$")
_DSP = re.compile(r"^DSP48\w*$")
_CLOCK_BUF = re.compile(r"^BUF(G|H|R|IO|MR)\w*$")
_READ_ADDR = re.compile(r"^(A\d*|DPRA\d*|ADDR[A-H])$")
_CLOCK_PORTS = {"C", "CLK", "WCLK", "CLKARDCLK", "CLKBWRCLK", "CLKA", "CLKB", "RDCLK", "WRCLK", "G"}
# Scale of the second field of an arrival: luts * _K + (carry, muxf, dsp cells) keeps LUT levels first.
_K = 1 << 20


def _kind(cell_type: str, params: dict[str, Any]) -> str:
    """lut, carry, muxf, dsp (combinational DSP), lutmem, seq, clock or other."""
    if _LUT.match(cell_type):
        return "lut"
    if _CARRY.match(cell_type):
        return "carry"
    if _MUXF.match(cell_type):
        return "muxf"
    if _LUTMEM.match(cell_type):
        return "lutmem"
    if _DSP.match(cell_type):
        registered = any(_int(params.get(p, 1)) != 0 for p in ("MREG", "PREG"))
        return "seq" if registered else "dsp"
    if _SEQ.match(cell_type):
        return "seq"
    if _CLOCK_BUF.match(cell_type):
        return "clock"
    if cell_type in ("GND", "VCC"):
        return "const"
    return "other"


def _int(v: Any) -> int:
    if isinstance(v, int):
        return v
    try:
        return int(str(v), 2)
    except ValueError:
        return 1


def _top_module(netlist: dict[str, Any], top: str | None) -> tuple[str, dict[str, Any]]:
    mods = netlist["modules"]
    if top is not None:
        return top, mods[top]
    tops = [n for n, m in mods.items() if _int(m.get("attributes", {}).get("top", 0))]
    if len(tops) != 1:
        raise ValueError(f"netlist has {len(tops)} top modules; name one")
    return tops[0], mods[tops[0]]


def _bit_names(module: dict[str, Any]) -> dict[int, str]:
    """The most readable name of each bit: a user-visible netname before a yosys-made one, then shortest."""
    best: dict[int, tuple[int, int, str]] = {}
    for name, net in module["netnames"].items():
        bits = net["bits"]
        hidden = int(net.get("hide_name", 0))
        offset = int(net.get("offset", 0))
        for i, b in enumerate(bits):
            if not isinstance(b, int):
                continue
            label = f"{name}[{i + offset}]" if len(bits) > 1 else name
            rank = (hidden, len(label), label)
            if b not in best or rank < best[b]:
                best[b] = rank
    return {b: r[2] for b, r in best.items()}


def _src(cell: dict[str, Any]) -> str | None:
    src = cell.get("attributes", {}).get("src")
    if not src:
        return None
    # A mapped cell carries the user source first, then yosys techmap files: keep the user's.
    first = [s for s in src.split("|") if "/share/yosys/" not in s]
    return first[0].rsplit("/", 1)[-1] if first else None


def analyze(netlist: dict[str, Any] | Path | str, top: str | None = None, top_nets: int = TOP_NETS) -> dict[str, Any]:
    """Longest register-to-register path in LUT levels and the highest fan-out non-clock nets."""
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    top, mod = _top_module(netlist, top)
    cells = mod["cells"]
    names = list(cells)
    kinds: list[str] = []
    # Per cell: bits into ports that cross it combinationally, bits into ports that end a path, outputs.
    comb_in: list[list[int]] = []
    end_in: list[list[tuple[str, int]]] = []
    driver: dict[int, int] = {}          # bit -> cell index driving it
    loads: dict[int, int] = defaultdict(int)
    clock_bits: set[int] = set()
    unknown: dict[str, int] = defaultdict(int)
    for idx, name in enumerate(names):
        cell = cells[name]
        kind = _kind(cell["type"], cell.get("parameters", {}))
        if kind == "other":
            unknown[cell["type"]] += 1
        kinds.append(kind)
        dirs = cell.get("port_directions", {})
        cin: list[int] = []
        ein: list[tuple[str, int]] = []
        for port, bits in cell["connections"].items():
            direction = dirs.get(port, "input")
            ints = [b for b in bits if isinstance(b, int)]
            if direction == "output":
                for b in ints:
                    driver[b] = idx
                if kind == "clock":
                    clock_bits.update(ints)
                continue
            for b in ints:
                loads[b] += 1
            if port in _CLOCK_PORTS or kind == "clock":
                clock_bits.update(ints)
            elif kind in ("lut", "carry", "muxf", "dsp", "other") or (kind == "lutmem" and _READ_ADDR.match(port)):
                cin.extend(ints)
            if kind in ("seq", "lutmem") and port not in _CLOCK_PORTS:
                ein.extend((port, b) for b in ints)
        comb_in.append(cin)
        end_in.append(ein)
    in_bits: set[int] = set()
    out_bits: list[tuple[str, int]] = []
    for pname, port in mod["ports"].items():
        for b in port["bits"]:
            if not isinstance(b, int):
                continue
            if port["direction"] == "input":
                in_bits.add(b)
            else:
                out_bits.append((pname, b))
                loads[b] += 1

    weight = {"lut": _K, "lutmem": _K, "carry": 1, "muxf": 1, "dsp": 1, "other": 0}
    through = [k in weight for k in kinds]
    order, loops = _topo_order(comb_in, driver, through)
    # Two arrivals per cell: paths from registers (and LUT-RAM contents) and paths from input ports.
    arrivals: dict[str, list[int]] = {}
    preds: dict[str, list[int]] = {}
    for origin in ("reg", "port"):
        arr = [-1] * len(names)
        pred = [-1] * len(names)    # the input bit a cell's longest arrival came through
        for idx in order:
            best, via = -1, -1
            for b in comb_in[idx]:
                a = _bit_arrival(b, origin, driver, through, arr, kinds, in_bits)
                if a >= 0 and a + weight[kinds[idx]] > best:
                    best, via = a + weight[kinds[idx]], b
            if origin == "reg" and kinds[idx] == "lutmem" and best < _K:
                best, via = _K, -1  # its contents: a path starting at the read
            arr[idx], pred[idx] = best, via
        arrivals[origin], preds[origin] = arr, pred

    def endpoint_max(origin: str, ends: list[tuple[str, int, str]]) -> tuple[int, tuple[str, int, str] | None]:
        best, where = -1, None
        for end in ends:
            a = _bit_arrival(end[1], origin, driver, through, arrivals[origin], kinds, in_bits)
            if a > best:
                best, where = a, end
        return best, where

    seq_ends = [(port, b, names[idx]) for idx, ein in enumerate(end_in) for port, b in ein]
    port_ends = [(pname, b, "") for pname, b in out_bits]
    bit_name = _bit_names(mod)
    reg_reg, reg_end = endpoint_max("reg", seq_ends)
    paths = {
        "reg_to_reg": _path("reg", reg_reg, reg_end, preds, driver, through, kinds, names, cells, bit_name, in_bits),
        "in_to_reg": _path("port", *endpoint_max("port", seq_ends), preds, driver, through, kinds, names, cells,
                           bit_name, in_bits),
        "reg_to_out": _path("reg", *endpoint_max("reg", port_ends), preds, driver, through, kinds, names, cells,
                            bit_name, in_bits),
        "in_to_out": _path("port", *endpoint_max("port", port_ends), preds, driver, through, kinds, names, cells,
                           bit_name, in_bits),
    }
    nets = _fanout(mod, cells, names, loads, clock_bits, bit_name, top_nets, driver)
    # Every large net by name, so runs at two lane counts can be matched net by net when scaling.
    by_name = {bit_name.get(b, str(b)): n for b, n in loads.items() if n >= BIG_NET and b not in clock_bits}
    rr = paths["reg_to_reg"]
    worst = nets[0] if nets else None
    return {
        "top": top,
        "analysis_version": ANALYSIS_VERSION,
        "lut_levels": rr["lut_levels"] if rr else 0,
        "path": rr,
        "io_paths": {k: v for k, v in paths.items() if k != "reg_to_reg"},
        "max_fanout": worst,
        "fanout_top": nets,
        "large_nets": dict(sorted(by_name.items())),
        "clock_nets": sorted(bit_name.get(b, str(b)) for b in clock_bits if loads.get(b, 0) > 1)[:4],
        "cells": len(names),
        "combinational_loops": loops,
        "unknown_cells": dict(unknown),
    } | judge(rr["lut_levels"] if rr else 0, worst["loads"] if worst else 0)


def judge(lut_levels: int, max_fanout: int) -> dict[str, Any]:
    """Against the issue-13 goal: <= 6 LUT levels between registers, no non-clock net above 1,000 loads."""
    return {"goal": f"<= {GOAL_LUT_LEVELS} LUT levels between registers, no non-clock net above "
                    f"{GOAL_MAX_FANOUT:,} loads",
            "lut_levels_met": lut_levels <= GOAL_LUT_LEVELS,
            "fanout_met": max_fanout <= GOAL_MAX_FANOUT,
            "met": lut_levels <= GOAL_LUT_LEVELS and max_fanout <= GOAL_MAX_FANOUT}


def _bit_arrival(b: int, origin: str, driver: dict[int, int], through: list[bool], arr: list[int],
                 kinds: list[str], in_bits: set[int]) -> int:
    """Arrival at bit `b` for paths of `origin` (-1: no such path reaches it)."""
    d = driver.get(b)
    if d is None:
        return 0 if (origin == "port" and b in in_bits) else -1
    if through[d]:
        return arr[d]
    if origin == "reg" and kinds[d] == "seq":
        return 0
    return -1


def _topo_order(comb_in: list[list[int]], driver: dict[int, int], through: list[bool]) -> tuple[list[int], int]:
    """Combinational cells in dependency order; cells on a combinational loop are appended last (counted)."""
    n = len(comb_in)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for idx in range(n):
        if not through[idx]:
            continue
        for d in {driver[b] for b in comb_in[idx] if b in driver}:
            if through[d]:
                succ[d].append(idx)
                indeg[idx] += 1
    ready = [i for i in range(n) if through[i] and indeg[i] == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    stuck = [i for i in range(n) if through[i] and indeg[i] > 0]
    return order + stuck, len(stuck)


def _path(origin: str, arrival: int, end: tuple[str, int, str] | None, preds: dict[str, list[int]],
          driver: dict[int, int], through: list[bool], kinds: list[str], names: list[str],
          cells: dict[str, Any], bit_name: dict[int, str], in_bits: set[int]) -> dict[str, Any] | None:
    """The cells of the longest path ending at `end`, start first."""
    if end is None or arrival < 0:
        return None
    port, bit, end_cell = end
    hops = []
    b = bit
    seen = set()
    while True:
        d = driver.get(b)
        if d is None or not through[d] or d in seen:
            break
        seen.add(d)
        hops.append(d)
        nb = preds[origin][d]
        if nb < 0:
            break
        b = nb
    hops.reverse()
    d = driver.get(b)
    if hops and kinds[hops[0]] == "lutmem" and preds[origin][hops[0]] < 0:
        start = _cell_ref(hops[0], names, cells, bit_name, driver, kinds, contents=True)
    elif d is not None and not through[d]:
        start = _cell_ref(d, names, cells, bit_name, driver, kinds) | {"net": bit_name.get(b, str(b))}
    else:
        start = {"port": bit_name.get(b, str(b))}
    count = defaultdict(int)
    for h in hops:
        count[kinds[h]] += 1
    if end_cell:
        stop = _cell_ref(names.index(end_cell), names, cells, bit_name, driver, kinds) | {
            "pin": port, "pin_net": bit_name.get(bit, str(bit))}
    else:
        stop = {"port": port, "net": bit_name.get(bit, str(bit))}
    return {
        "lut_levels": arrival // _K,
        "carry": count["carry"],
        "muxf": count["muxf"],
        "dsp": count["dsp"],
        "lutmem": count["lutmem"],
        "start": start,
        "end": stop,
        "through": [_cell_ref(h, names, cells, bit_name, driver, kinds) for h in hops],
    }


def _cell_ref(idx: int, names: list[str], cells: dict[str, Any], bit_name: dict[int, str],
              driver: dict[int, int], kinds: list[str], contents: bool = False) -> dict[str, Any]:
    cell = cells[names[idx]]
    dirs = cell.get("port_directions", {})
    outs = [b for p, bits in cell["connections"].items() if dirs.get(p) == "output" for b in bits
            if isinstance(b, int)]
    ref = {"cell": names[idx], "type": cell["type"], "net": bit_name.get(outs[0], str(outs[0])) if outs else None}
    if contents:
        ref["note"] = "LUT-RAM/SRL contents (the read counts as one LUT level)"
    src = _src(cell)
    if src:
        ref["src"] = src
    return ref


def _fanout(mod: dict[str, Any], cells: dict[str, Any], names: list[str], loads: dict[int, int],
            clock_bits: set[int], bit_name: dict[int, str], top_nets: int,
            driver: dict[int, int]) -> list[dict[str, Any]]:
    """The `top_nets` bits with most loads, clocks left out, with the pins they drive by name."""
    ranked = sorted(((n, b) for b, n in loads.items() if b not in clock_bits), key=lambda t: (-t[0], t[1]))[:top_nets]
    wanted = {b for _, b in ranked}
    pins: dict[int, dict[str, int]] = {b: defaultdict(int) for b in wanted}
    for name in names:
        cell = cells[name]
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port, "input") == "output":
                continue
            for b in bits:
                if b in wanted:
                    pins[b][f"{cell['type']}.{port}"] += 1
    return [{"net": bit_name.get(b, str(b)), "loads": n, "driver": _driver_text(b, driver, cells, names, bit_name),
             "pins": dict(sorted(pins[b].items(), key=lambda t: -t[1])[:6])} for n, b in ranked]


def _driver_text(b: int, driver: dict[int, int], cells: dict[str, Any], names: list[str],
                 bit_name: dict[int, str]) -> str:
    """What drives a net, with the named nets feeding it: how to find a net yosys named `$abc$...`."""
    if b not in driver:
        return "input port"
    cell = cells[names[driver[b]]]
    dirs = cell.get("port_directions", {})
    ins = [bit_name.get(x, str(x)) for p, bits in cell["connections"].items()
           if dirs.get(p, "input") != "output" and p not in _CLOCK_PORTS for x in bits if isinstance(x, int)]
    shown = sorted({n for n in ins if not n.startswith("$")})[:4]
    return f"{cell['type']}({', '.join(shown) if shown else '...'})"


# --- the report: every unit alone, the kernel at 1, 4 and 16 lanes ---------------------------------

KERNEL_LANES = (1, 4, 16)
FULL_LANES = (1, 4)  # synthesized by default; 16 is scaled (yosys at 16 lanes takes hours on 2 shared cores)
# Parameters a unit is synthesized with when its defaults would make it the whole kernel (applied
# only when the module declares the parameter, so the list survives RTL rewrites).
UNIT_PARAMS: dict[str, dict[str, int]] = {"onic_adam_core": {"LANES": 1}}
_MODULE = re.compile(r"^\s*module\s+(\w+)", re.M)


def unit_modules(sources: list[Path]) -> list[tuple[str, Path]]:
    """(module, file) for every module in the RTL file lists, in file-list order."""
    found = []
    for src in sources:
        for name in _MODULE.findall(src.read_text()):
            found.append((name, src))
    return found


def _unit_params(module: str, src: Path, spec: Any) -> dict[str, int]:
    from hls.rtl.synth import LANE_MODULE, lane_params

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
    from hls.rtl import synth

    full = tuple(sorted(set(full_lanes)))
    if len(full) < 2 and any(n not in full for n in KERNEL_LANES):
        raise ValueError("scaling needs the kernel synthesized at two lane counts at least")
    cache = Path(cache_dir or synth.SYNTH_DIR)
    say = log or (lambda _msg: None)
    sources = synth.static_sources()
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
