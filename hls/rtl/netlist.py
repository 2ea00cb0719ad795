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

Also measured: the longest carry chain in bits on a path between sequential cells (CARRY4 = 4,
CARRY8 = 8), the most combinational DSP48 on one path, and the longest chain of DSP48 joined by
cascade ports (`_dsp_cascade`). A module synthesis kept as a cell (keep_hierarchy, `onic_dup_reg`) is
one register when its outputs come straight from registers. With `box_src`, the cells from that
source file (the lane stub) are a box: paths into, out of and around it are reported apart and the
nets crossing its boundary are listed with the box's share of their loads, for
`hls.rtl.timing_report.compose`.

`hls.rtl.timing_report` runs this analysis over every RTL module and the kernel top and tabulates it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

ANALYSIS_VERSION = 4
GOAL_LUT_LEVELS = 6
GOAL_MAX_FANOUT = 1000
# A 64-bit add (the AXI addresses) is the longest carry chain the design means to have; a DSP48E2
# cascade (ACOUT->ACIN, PCOUT->PCIN, ...) of two cells is one wide multiply.
GOAL_CARRY_BITS = 64
GOAL_DSP_CASCADE = 2
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


def _kept_submodules(netlist: dict[str, Any], top: str) -> tuple[set[str], dict[str, set[str]]]:
    """Modules synthesis kept as cells of the top (keep_hierarchy, e.g. onic_dup_reg): those whose every
    output comes straight from a sequential cell count as one register, and the ports that feed their
    cells' clock pins are clock ports. Library primitives (blackboxes) are not submodules."""
    registered: set[str] = set()
    clocks: dict[str, set[str]] = {}
    for name, mod in netlist["modules"].items():
        if name == top or _int(mod.get("attributes", {}).get("blackbox", 0)) or not mod.get("cells"):
            continue
        seq_out: set[int] = set()
        clock_in: set[int] = set()
        for cell in mod["cells"].values():
            if _kind(cell["type"], cell.get("parameters", {})) != "seq":
                continue
            dirs = cell.get("port_directions", {})
            for port, bits in cell["connections"].items():
                if dirs.get(port) == "output":
                    seq_out.update(b for b in bits if isinstance(b, int))
                elif port in _CLOCK_PORTS:
                    clock_in.update(b for b in bits if isinstance(b, int))
        outs = [b for p in mod["ports"].values() if p["direction"] == "output" for b in p["bits"]]
        if outs and all(b in seq_out for b in outs):
            registered.add(name)
        clocks[name] = {p for p, port in mod["ports"].items() if port["direction"] == "input"
                        and any(b in clock_in for b in port["bits"])}
    return registered, clocks


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


def _from_file(cell: dict[str, Any], filename: str) -> bool:
    """Whether `filename` is in the cell's source chain (a flattened cell lists every level it came from)."""
    src = cell.get("attributes", {}).get("src") or ""
    return any(part.rsplit("/", 1)[-1].split(":", 1)[0] == filename for part in src.split("|"))


def analyze(netlist: dict[str, Any] | Path | str, top: str | None = None, top_nets: int = TOP_NETS,
            box_src: str | None = None) -> dict[str, Any]:
    """Longest register-to-register path in LUT levels and the highest fan-out non-clock nets."""
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    top, mod = _top_module(netlist, top)
    cells = mod["cells"]
    names = list(cells)
    registered, sub_clocks = _kept_submodules(netlist, top)
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
        kind = "seq" if cell["type"] in registered else _kind(cell["type"], cell.get("parameters", {}))
        clock_ports = _CLOCK_PORTS | sub_clocks.get(cell["type"], set())
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
            if port in clock_ports or kind == "clock":
                clock_bits.update(ints)
            elif kind in ("lut", "carry", "muxf", "dsp", "other") or (kind == "lutmem" and _READ_ADDR.match(port)):
                cin.extend(ints)
            if kind in ("seq", "lutmem") and port not in clock_ports:
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
    box = [bool(box_src) and _from_file(cells[n], box_src) for n in names]
    # Arrivals per origin: paths from registers (and LUT-RAM contents) outside the box, from the box's
    # registers, and from input ports.
    origins = ("reg", "port", "box") if any(box) else ("reg", "port")
    arrivals: dict[str, list[int]] = {}
    preds: dict[str, list[int]] = {}
    for origin in origins:
        arrivals[origin], preds[origin] = _arrivals(origin, order, comb_in, driver, through, kinds, box, in_bits,
                                                    [weight.get(k, 0) for k in kinds])

    def endpoint_max(origin: str, ends: list[tuple[str, int, str]]) -> tuple[int, tuple[str, int, str] | None]:
        best, where = -1, None
        for end in ends:
            a = _bit_arrival(end[1], origin, driver, through, arrivals[origin], kinds, in_bits, box)
            if a > best:
                best, where = a, end
        return best, where

    index = {n: i for i, n in enumerate(names)}
    seq_ends = [(port, b, names[idx]) for idx, ein in enumerate(end_in) for port, b in ein if not box[idx]]
    box_ends = [(port, b, names[idx]) for idx, ein in enumerate(end_in) for port, b in ein if box[idx]]
    port_ends = [(pname, b, "") for pname, b in out_bits]
    bit_name = _bit_names(mod)

    def path(origin: str, ends: list[tuple[str, int, str]]) -> dict[str, Any] | None:
        return _path(origin, *endpoint_max(origin, ends), preds, driver, through, kinds, names, cells, bit_name,
                     in_bits, index)

    paths = {
        "reg_to_reg": path("reg", seq_ends),
        "in_to_reg": path("port", seq_ends),
        "reg_to_out": path("reg", port_ends),
        "in_to_out": path("port", port_ends),
    }
    # Carry-chain and DSP depth on their own: the most CARRY (or combinational DSP) cells on any path
    # between sequential cells, whatever its LUT levels (the LUT-level path above may hold fewer).
    depth = {}
    for kind in ("carry", "dsp"):
        cost = [(_carry_bits(cells[n]["type"]) if kind == "carry" else 1) if k == kind else 0
                for n, k in zip(names, kinds, strict=True)]
        arr, _ = _arrivals("reg", order, comb_in, driver, through, kinds, box, in_bits, cost, any_reg=True)
        depth[kind] = max([_bit_arrival(b, "reg", driver, through, arr, kinds, in_bits, box, any_reg=True)
                           for _, b, _ in seq_ends + box_ends] + [0])
    nets = _fanout(mod, cells, names, loads, clock_bits, bit_name, top_nets, driver)
    port_bits = {b for port in mod["ports"].values() for b in port["bits"] if isinstance(b, int)}
    internal = _fanout(mod, cells, names, loads, clock_bits | port_bits, bit_name, 1, driver)
    # Every large net by name, so runs at two lane counts can be matched net by net when scaling.
    by_name = {bit_name.get(b, str(b)): n for b, n in loads.items() if n >= BIG_NET and b not in clock_bits}
    rr = paths["reg_to_reg"]
    worst = nets[0] if nets else None
    result = {
        "top": top,
        "analysis_version": ANALYSIS_VERSION,
        "lut_levels": rr["lut_levels"] if rr else 0,
        "path": rr,
        "io_paths": {k: v for k, v in paths.items() if k != "reg_to_reg"},
        "carry_bits": depth["carry"],
        "dsp_on_path": depth["dsp"],
        "dsp_cascade": _dsp_cascade(cells, names, kinds, driver),
        "max_fanout": worst,
        "max_internal_fanout": internal[0] if internal else None,  # the largest net not on a port
        "fanout_top": nets,
        "large_nets": dict(sorted(by_name.items())),
        "port_loads": {p: [loads.get(b, 0) - (port["direction"] != "input") if isinstance(b, int) else 0
                           for b in port["bits"]] for p, port in mod["ports"].items()},
        "clock_nets": sorted(bit_name.get(b, str(b)) for b in clock_bits if loads.get(b, 0) > 1)[:4],
        "cells": len(names),
        "combinational_loops": loops,
        "unknown_cells": dict(unknown),
        "box_src": box_src,
    }
    if box_src:
        result["box"] = {
            "src": box_src,
            "cells": sum(box),
            "into_box": path("reg", box_ends),
            "from_box": path("box", seq_ends),
            "box_to_box": path("box", box_ends),
            "nets": _box_nets(mod, cells, names, box, loads, clock_bits, bit_name),
        }
    return result | judge(rr["lut_levels"] if rr else 0, worst["loads"] if worst else 0, result["carry_bits"],
                          result["dsp_cascade"])


def _arrivals(origin: str, order: list[int], comb_in: list[list[int]], driver: dict[int, int],
              through: list[bool], kinds: list[str], box: list[bool], in_bits: set[int], weight: list[int],
              any_reg: bool = False) -> tuple[list[int], list[int]]:
    """Arrival (the weights of the cells crossed) at every combinational cell's output for paths of `origin`."""
    arr = [-1] * len(kinds)
    pred = [-1] * len(kinds)    # the input bit a cell's longest arrival came through
    for idx in order:
        best, via = -1, -1
        for b in comb_in[idx]:
            a = _bit_arrival(b, origin, driver, through, arr, kinds, in_bits, box, any_reg)
            if a >= 0 and a + weight[idx] > best:
                best, via = a + weight[idx], b
        if origin == "reg" and kinds[idx] == "lutmem" and best < weight[idx]:
            best, via = weight[idx], -1  # its contents: a path starting at the read
        arr[idx], pred[idx] = best, via
    return arr, pred


def _carry_bits(cell_type: str) -> int:
    """Bits of carry a carry cell propagates: CARRY8 8, CARRY4 4, MUXCY/XORCY 1."""
    return {"CARRY8": 8, "CARRY4": 4}.get(cell_type, 1)


_CASCADE_OUT = {"ACOUT": "ACIN", "BCOUT": "BCIN", "PCOUT": "PCIN", "CARRYCASCOUT": "CARRYCASCIN",
                "MULTSIGNOUT": "MULTSIGNIN"}


def _dsp_cascade(cells: dict[str, Any], names: list[str], kinds: list[str], driver: dict[int, int]) -> int:
    """The longest chain of DSP48 cells joined by their dedicated cascade ports (ACOUT->ACIN,
    BCOUT->BCIN, PCOUT->PCIN, ...), in cells; registered or not, a cascade is one column of DSPs."""
    nxt: dict[int, set[int]] = defaultdict(set)
    dsps = [i for i, n in enumerate(names) if _DSP.match(cells[n]["type"])]
    for i in dsps:
        conns = cells[names[i]]["connections"]
        for pin in _CASCADE_OUT.values():
            for b in conns.get(pin, []):
                d = driver.get(b) if isinstance(b, int) else None
                if d is not None and d != i and _DSP.match(cells[names[d]]["type"]):
                    nxt[d].add(i)
    memo: dict[int, int] = {}

    def chain(i: int, seen: frozenset[int]) -> int:
        if i in memo:
            return memo[i]
        memo[i] = 1 + max((chain(j, seen | {i}) for j in nxt[i] if j not in seen), default=0)
        return memo[i]

    return max((chain(i, frozenset()) for i in dsps), default=0)


def _box_nets(mod: dict[str, Any], cells: dict[str, Any], names: list[str], box: list[bool],
              loads: dict[int, int], clock_bits: set[int], bit_name: dict[int, str]) -> list[dict[str, Any]]:
    """Every non-clock net that crosses the box's boundary: its loads in this netlist, how many of them
    are box pins, whether a box cell drives it, and the box port bits it connects (from the netnames
    `<instance>.<port>` of the flattened box instances). hls.rtl.timing_report swaps the box's loads for
    the real lane's (composition)."""
    box_load: dict[int, int] = defaultdict(int)
    box_drive: set[int] = set()
    for idx, name in enumerate(names):
        if not box[idx]:
            continue
        cell = cells[name]
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            for b in bits:
                if not isinstance(b, int):
                    continue
                if dirs.get(port, "input") == "output":
                    box_drive.add(b)
                elif port not in _CLOCK_PORTS:
                    box_load[b] += 1
    crossing = (set(box_load) | box_drive) - clock_bits
    ports: dict[int, dict[str, int]] = {b: defaultdict(int) for b in crossing}
    for net_name, net in mod["netnames"].items():
        inst, _, port = net_name.rpartition(".")
        if not inst.endswith("lane_inst"):
            continue
        for k, b in enumerate(net["bits"]):
            if b in crossing:
                ports[b][f"{port}[{k + int(net.get('offset', 0))}]"] += 1
    return [{"net": bit_name.get(b, str(b)), "loads": loads.get(b, 0), "box_loads": box_load.get(b, 0),
             "box_driven": b in box_drive, "ports": dict(ports[b])} for b in sorted(crossing)]


def judge(lut_levels: int, max_fanout: int, carry_bits: int = 0, dsp_cascade: int = 0) -> dict[str, Any]:
    """Against the timing goal: <= 6 LUT levels between registers, no non-clock net above 1,000 loads, no
    carry chain longer than 64 bits and no DSP cascade longer than GOAL_DSP_CASCADE cells on one path."""
    return {"goal": f"<= {GOAL_LUT_LEVELS} LUT levels between registers, no non-clock net above "
                    f"{GOAL_MAX_FANOUT:,} loads, carry chains <= {GOAL_CARRY_BITS} bits, DSP cascades <= "
                    f"{GOAL_DSP_CASCADE} cells",
            "lut_levels_met": lut_levels <= GOAL_LUT_LEVELS,
            "fanout_met": max_fanout <= GOAL_MAX_FANOUT,
            "carry_met": carry_bits <= GOAL_CARRY_BITS,
            "dsp_met": dsp_cascade <= GOAL_DSP_CASCADE,
            "met": lut_levels <= GOAL_LUT_LEVELS and max_fanout <= GOAL_MAX_FANOUT
            and carry_bits <= GOAL_CARRY_BITS and dsp_cascade <= GOAL_DSP_CASCADE}


def _bit_arrival(b: int, origin: str, driver: dict[int, int], through: list[bool], arr: list[int],
                 kinds: list[str], in_bits: set[int], box: list[bool] | None = None, any_reg: bool = False) -> int:
    """Arrival at bit `b` for paths of `origin` (-1: no such path reaches it). Origin `reg` starts at
    sequential cells outside the box (any sequential cell with `any_reg`), `box` at the box's."""
    d = driver.get(b)
    if d is None:
        return 0 if (origin == "port" and b in in_bits) else -1
    if through[d]:
        return arr[d]
    if kinds[d] == "seq":
        inside = bool(box) and box[d]
        if origin == "reg" and (any_reg or not inside):
            return 0
        if origin == "box" and inside:
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
          cells: dict[str, Any], bit_name: dict[int, str], in_bits: set[int],
          index: dict[str, int] | None = None) -> dict[str, Any] | None:
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
        stop = _cell_ref(index[end_cell] if index else names.index(end_cell), names, cells, bit_name, driver, kinds) | {
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
