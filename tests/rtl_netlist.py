"""Timing-shape checks on a yosys-synthesized netlist (test helper, also a script).

`synth_xilinx -family xcup -flatten -noiopad` maps the RTL to UltraScale+ primitives; `write_json`
dumps the netlist. From it:

- LUT levels: the longest chain of LUTs between timing start points (flip-flops, block RAM and
  DSP outputs, top inputs) and end points (their inputs, top outputs). Carry and wide-mux cells
  (CARRY8, MUXF7/8/9) cost no LUT level but the path runs through them; LUT-RAM and SRL reads
  cost one level from their address pins. `logic_levels` counts CARRY8 and MUXF cells too (what
  Vivado calls logic levels), so it is the stricter figure.
- fan-out: the loads (cell input pins and top output ports) of every net bit; the clock is left
  out.

Run: `python tests/rtl_netlist.py <top> <file.v|-f list.f> ...` prints both as JSON (and the
deepest path); `python tests/rtl_netlist.py --netlist net.json <top>` analyses a saved netlist.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

YOSYS = shutil.which("yosys") or "/usr/bin/yosys"

_PASS = ("CARRY8", "CARRY4", "MUXF7", "MUXF8", "MUXF9")
_ADDR_PINS = ("A", "A0", "A1", "A2", "A3", "A4", "ADDRA", "ADDRB", "ADDRC", "ADDRD", "ADDRE", "ADDRF", "ADDRG",
              "ADDRH", "DPRA", "DPRA0", "DPRA1", "DPRA2", "DPRA3", "DPRA4", "DPRA5", "ADR0", "ADR1", "ADR2", "ADR3",
              "ADR4", "ADR5")


def synth(top: str, sources: list[Path], json_out: Path, defines: dict[str, str] | None = None,
          params: dict[str, int] | None = None, timeout: float = 3600) -> None:
    """Synthesize `top` from `sources` with yosys synth_xilinx (xcup) into a JSON netlist."""
    reads = " ".join(str(s) for s in sources)
    chparam = ""
    if params:
        chparam = "chparam " + " ".join(f"-set {k} {v}" for k, v in params.items()) + f" {top}; "
    script = (f"read_verilog -sv {reads}; {chparam}synth_xilinx -family xcup -flatten -noiopad -top {top}; "
              f"write_json {json_out}")
    subprocess.run([YOSYS, "-q", "-p", script], check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL)


def analyse(netlist: Path, top: str | None = None, deep_over: int = 6) -> dict[str, Any]:
    """LUT levels, logic levels and the highest-fan-out non-clock nets of a JSON netlist."""
    data = json.loads(netlist.read_text())
    mods = data["modules"]
    name = top or next(n for n, m in mods.items() if m.get("attributes", {}).get("top"))
    mod = mods[name]
    clocks: set[int] = set()
    drivers: dict[int, tuple[str, str]] = {}       # bit -> (cell, port)
    loads: dict[int, int] = defaultdict(int)
    cells = mod["cells"]
    for cname, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            d = dirs.get(port, "input")
            for b in bits:
                if not isinstance(b, int):
                    continue
                if d == "output":
                    drivers[b] = (cname, port)
                else:
                    loads[b] += 1
                    if port in ("C", "CLK", "CLKARDCLK", "CLKBWRCLK", "WCLK"):
                        clocks.add(b)
    for port in mod["ports"].values():
        if port["direction"] == "output":
            for b in port["bits"]:
                if isinstance(b, int):
                    loads[b] += 1

    memo: dict[tuple[int, bool], int] = {}

    def depth(bit: int, luts_only: bool) -> int:
        """Levels of logic from the nearest start point to net `bit`."""
        key = (bit, luts_only)
        if key in memo:
            return memo[key]
        memo[key] = 0  # combinational loops (none expected) end here
        drv = drivers.get(bit)
        result = 0
        if drv is not None:
            cname, _ = drv
            cell = cells[cname]
            ctype = cell["type"]
            dirs = cell.get("port_directions", {})
            ins = [b for p, bits in cell["connections"].items() if dirs.get(p, "input") == "input"
                   for b in bits if isinstance(b, int)]
            if ctype.startswith("LUT") or ctype == "INV":
                result = 1 + max((depth(b, luts_only) for b in ins), default=0)
            elif ctype in _PASS:
                result = (0 if luts_only else 1) + max((depth(b, luts_only) for b in ins), default=0)
            elif ctype.startswith(("SRL", "RAM32", "RAM64", "RAM128", "RAM256", "RAM512")):
                addr = [b for p, bits in cell["connections"].items() if p in _ADDR_PINS
                        for b in bits if isinstance(b, int)]
                result = 1 + max((depth(b, luts_only) for b in addr), default=0)
            # FD*, RAMB*, DSP48E2, URAM, constants: a start point
        memo[key] = result
        return result

    sys.setrecursionlimit(100000)
    endpoints: list[int] = []
    for cell in cells.values():
        ctype = cell["type"]
        if ctype.startswith(("LUT", "INV")) or ctype in _PASS:
            continue
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port, "input") == "input":
                endpoints.extend(b for b in bits if isinstance(b, int))
    for port in mod["ports"].values():
        if port["direction"] == "output":
            endpoints.extend(b for b in port["bits"] if isinstance(b, int))
    lut_levels = max((depth(b, True) for b in endpoints), default=0)
    logic_levels = max((depth(b, False) for b in endpoints), default=0)

    def trace(bit: int) -> list[int]:
        """The deepest LUT path ending at net `bit`, start point first."""
        path = [bit]
        while True:
            drv = drivers.get(path[-1])
            if drv is None:
                break
            cell = cells[drv[0]]
            ctype = cell["type"]
            dirs = cell.get("port_directions", {})
            if ctype.startswith(("LUT", "INV")) or ctype in _PASS:
                pins = [p for p in cell["connections"] if dirs.get(p, "input") == "input"]
            elif ctype.startswith(("SRL", "RAM32", "RAM64", "RAM128", "RAM256", "RAM512")):
                pins = [p for p in cell["connections"] if p in _ADDR_PINS]
            else:
                break
            ins = [b for p in pins for b in cell["connections"][p] if isinstance(b, int)]
            if not ins:
                break
            path.append(max(ins, key=lambda b: depth(b, True)))
        return path[::-1]

    names: dict[int, str] = {}
    for nname, net in mod["netnames"].items():
        hidden = net.get("hide_name", 0)
        for i, b in enumerate(net["bits"]):
            if isinstance(b, int) and (b not in names or (not hidden and names[b].startswith("$"))):
                names[b] = nname if len(net["bits"]) == 1 else f"{nname}[{i}]"
    fanout = sorted(((n, b) for b, n in loads.items() if b not in clocks), reverse=True)[:5]
    types: dict[str, int] = defaultdict(int)
    for cell in cells.values():
        types[cell["type"]] += 1
    worst = max(endpoints, key=lambda b: depth(b, True), default=None)
    # where the paths deeper than `deep_over` LUT levels are: instance of the first and last named
    # net on each, with the deepest level seen
    deep: dict[str, int] = {}
    for b in endpoints:
        d = depth(b, True)
        if d <= deep_over:
            continue
        named = [names.get(x, "$") for x in trace(b)]
        named = [n for n in named if not n.startswith("$")] or ["?"]
        key = f"{named[0].rsplit('.', 1)[0] if '.' in named[0] else '(top)'} -> " \
              f"{named[-1].rsplit('.', 1)[0] if '.' in named[-1] else '(top)'}"
        deep[key] = max(deep.get(key, 0), d)
    return {
        "top": name,
        "worst_path": [names.get(b, str(b)) for b in trace(worst)] if worst is not None else [],
        "lut_levels": lut_levels,
        "logic_levels": logic_levels,
        "max_fanout": fanout[0][0] if fanout else 0,
        "deep_paths": dict(sorted(deep.items(), key=lambda kv: -kv[1])),
        "max_fanout_nets": [{"net": names.get(b, str(b)), "loads": n} for n, b in fanout],
        "cells": dict(sorted(types.items())),
    }


def _sources(args: list[str]) -> list[Path]:
    out: list[Path] = []
    it = iter(args)
    for a in it:
        if a == "-f":
            flist = Path(next(it))
            out.extend(flist.parent / line.strip() for line in flist.read_text().splitlines()
                       if line.strip() and not line.startswith("#"))
        else:
            out.append(Path(a))
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--netlist":  # analyse a netlist written before: --netlist net.json top
        print(json.dumps(analyse(Path(sys.argv[2]), sys.argv[3]), indent=1))
        sys.exit(0)
    top_name = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        js = Path(tmp) / "net.json"
        synth(top_name, _sources(sys.argv[2:]), js)
        if os.environ.get("RTL_NETLIST_KEEP"):  # keep the netlist for --netlist
            shutil.copy(js, os.environ["RTL_NETLIST_KEEP"])
        print(json.dumps(analyse(js, top_name), indent=1))
