"""The timing report: LUT levels, carry and DSP depth and fan-out (hls.rtl.netlist) of every RTL unit and
of the real kernel at its full width.

`report()` runs the netlist analysis over every module of the RTL file lists synthesized alone, then,
per target and dtype, synthesizes the generated kernel top at its lanes (16 by default) with every
lane replaced by `rtl_sources.LANE_STUB` (one register per input bit) and the lane alone at full
detail, and composes the two (`compose`): nothing is scaled from smaller builds. `optimusnic synth
--timing` prints it (`table_rows`); `make bench` writes it to bench/results.md (`markdown`). With `net`
(`--matrix`, `make bench`) also the network kernel top `onic_net_kernel` (sim/rtl/net) whole, at the buffer
sizes a rail build packages (`NET_UNITS`), with its resources (`net_table_rows`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from hls import rtl_sources
from hls.paths import RTL_DIR
from hls.rtl import synth
from hls.rtl.netlist import GOAL_MAX_FANOUT, judge
from hls.rtl_sources import CORE_MODULE, LANE_MODULE, lane_params

# The default targets and dtypes the kernel's timing evidence covers (`--matrix`, `make bench`):
# fp32 everywhere, bf16 gradients and parameters, fp16 gradients with fp32 parameters.
MATRIX_TARGETS = ("u55c", "u50", "u280")
MATRIX_DTYPES = (("fp32", "fp32"), ("bf16", "bf16"), ("fp16", "fp32"))
# Parameters a unit is synthesized with when its defaults would make it the whole kernel (applied
# only when the module declares the parameter, so the list survives RTL rewrites).
UNIT_PARAMS: dict[str, dict[str, int]] = {CORE_MODULE: {"LANES": 1}}
_MODULE = re.compile(r"^\s*module\s+(\w+)", re.M)
# The network kernel top synthesized whole (label, file list, top, parameters): its defaults are the buffers a
# rail build packages for the default plan (hls.vitis.netpkg.rtl_generics: 1408-byte payloads, a 128-packet
# window: 32 receive slots of 22 beats in 2,048 beats of block RAM (two flows' credits), 128 retransmit
# slots of 32 beats in UltraRAM per flow), fp32 wire and parameters; and the same with a bf16 wire and bf16
# parameters. The parameters are set as the top's defaults in a copy of its source (synth.with_defaults):
# yosys 0.23 aborts on `hierarchy -chparam` of this top (an internal assertion).
NET_LIST = RTL_DIR / "net" / "net_kernel.f"
NET_UNITS: tuple[tuple[str, Path, str, dict[str, int]], ...] = (
    ("onic_net_kernel (fp32, deployable buffers)", NET_LIST, "onic_net_kernel", {}),
    ("onic_net_kernel (bf16, deployable buffers)", NET_LIST, "onic_net_kernel", {"WIRE_BF16": 1, "PARAM_BF16": 1}),
    # the U55C rail build's lgrad and gather stripes (sizing: 4 each at one ring port)
    ("onic_net_kernel (fp32, deployable buffers, 4 stripes)", NET_LIST, "onic_net_kernel", {"STRIPES": 4}),
)


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
        "carry_bits": t.get("carry_bits", 0),
        "dsp_on_path": t.get("dsp_on_path", 0),
        "dsp_cascade": t.get("dsp_cascade", 0),
        "seconds": run["seconds"],
        "cached": run["cached"],
    } | judge(t["lut_levels"], worst["loads"], t.get("carry_bits", 0), t.get("dsp_cascade", 0)) | extra


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


def compose(kernel: dict[str, Any], lane: dict[str, Any], spec: Any, target_key: str) -> dict[str, Any]:
    """One kernel row from the kernel top synthesized with stubbed lanes and the lane synthesized alone.

    LUT levels: the longest of the kernel's own register-to-register paths, the lane's, and every path
    that crosses a lane's boundary, counted as the kernel's logic up to the lane's input (into the
    stub's registers) plus the lane's longest input-to-register path, or the lane's longest
    register-to-output path plus the kernel's logic after the lane's output (from the stub's
    registers): a bound (the longest halves need not be on one path), never an under-count.
    Fan-out: each net that reaches a lane port has its stub loads (one register pin per input bit)
    replaced by the real lane's loads on that port bit, once per lane it reaches; nets inside a lane
    are the lane's own; the rest are the kernel's. Carry bits and DSP depth: the larger of the two
    runs (the lane's inputs and outputs are registered on the kernel side, so no chain crosses it).
    """
    kt, lt = kernel["timing"], lane["timing"]
    box = kt["box"]
    lane_loads = {p: v for p, v in lt["port_loads"].items() if p != "clk"}

    def levels(path: dict[str, Any] | None) -> int | None:
        return path["lut_levels"] if path else None

    parts = {"kernel": kt["lut_levels"], "into_lane": levels(box["into_box"]),
             "lane_in": levels(lt["io_paths"]["in_to_reg"]), "lane": lt["lut_levels"],
             "lane_out": levels(lt["io_paths"]["reg_to_out"]), "from_lane": levels(box["from_box"]),
             "lane_through": levels(lt["io_paths"]["in_to_out"]), "lane_to_lane": levels(box["box_to_box"])}
    p = {k: v for k, v in parts.items()}

    def add(*keys: str) -> int:
        vals = [p[k] for k in keys]
        return -1 if any(v is None for v in vals) else sum(vals)

    crossing = [add("into_lane", "lane_in"), add("lane_out", "from_lane"),
                add("lane_out", "lane_to_lane", "lane_in"), add("into_lane", "lane_through", "from_lane")]
    lut_levels = max([p["kernel"], p["lane"], *crossing])
    nets: dict[str, int] = {}
    for net in box["nets"]:
        extra = 0
        for pin, count in net["ports"].items():
            port, _, bit = pin.rstrip("]").partition("[")
            if port in lane_loads:
                extra += count * lane_loads[port][int(bit)]
        nets[net["net"]] = net["loads"] - net["box_loads"] + extra
    crossing_names = set(nets)
    for name, n in kt["large_nets"].items():
        if name not in crossing_names:
            nets[name] = n
    internal = lt.get("max_internal_fanout")
    if internal:
        nets[f"(each lane) {_net_label(internal)}"] = internal["loads"]
    worst_net, worst = max(nets.items(), key=lambda t: (t[1], t[0])) if nets else (None, 0)
    named = {n["net"]: n for n in kt["fanout_top"]}
    if worst_net in named:  # a yosys-made name says nothing: show what drives it
        worst_net = _net_label(named[worst_net])
    carry = max(kt["carry_bits"], lt["carry_bits"])
    dsp_cascade = max(kt["dsp_cascade"], lt["dsp_cascade"])
    dsp_path = max(kt["dsp_on_path"], lt["dsp_on_path"])
    kpath = kt["path"] or {}
    s = spec
    return {
        "unit": f"{target_key} {s.grad_dtype}->{s.out_dtype}, {s.lanes} lanes",
        "top": kernel["top"],
        "target": target_key,
        "grad_dtype": s.grad_dtype,
        "out_dtype": s.out_dtype,
        "lanes": s.lanes,
        "params": {},
        "lut_levels": lut_levels,
        "levels_parts": parts,
        "carry": kpath.get("carry", 0),
        "muxf": kpath.get("muxf", 0),
        "dsp": kpath.get("dsp", 0),
        "carry_bits": carry,
        "dsp_on_path": dsp_path,
        "dsp_cascade": dsp_cascade,
        "path_start": _where(kpath.get("start")),
        "path_end": _where(kpath.get("end")),
        "max_fanout_net": worst_net,
        "max_fanout": worst,
        "max_fanout_pins": {},
        "io_lut_levels": None,
        "nets_over_goal": _over_goal(nets),
        "runs": [{"unit": r["unit"], "seconds": r["seconds"], "cached": r["cached"], "key": r["key"]}
                 for r in (kernel, lane)],
        "seconds": round(kernel["seconds"] + lane["seconds"], 1),
        "cached": kernel["cached"] and lane["cached"],
        "method": "kernel top with every lane stubbed (one register per input bit) composed with the lane "
                  "alone: levels across a lane's ports add the kernel's and the lane's sides; a net at a lane "
                  "port carries the real lane's loads on that port",
    } | judge(lut_levels, worst, carry, dsp_cascade)


def kernel_row(spec: Any, target: Any, *, use_cache: bool = True, cache_dir: Path | None = None,
               log: Any = None, cached_only: bool = False) -> dict[str, Any]:
    """The kernel of `spec` (its lanes, one CU) on `target`: stubbed-lane top and lane alone, composed
    (`cached_only`: synth.NotCached instead of starting yosys)."""
    cache = Path(cache_dir or synth.SYNTH_DIR)
    say = log or (lambda _msg: None)
    spec = spec.with_(compute_units=1)
    say(f"[synth] lane alone, {spec.optimizer} {spec.grad_dtype}->{spec.out_dtype} (full detail)")
    lane = synth.synth_lane(spec, cache_dir=cache, use_cache=use_cache, cached_only=cached_only)
    say(f"[synth]   {'cached' if lane['cached'] else 'yosys ' + str(lane['seconds']) + ' s'}")
    say(f"[synth] {target.key} kernel top, {spec.lanes} lanes stubbed (yosys takes minutes; cached afterwards)")
    top = synth.synth_top(spec, target, cache_dir=cache, use_cache=use_cache, lane_stub=True,
                          cached_only=cached_only)
    r = compose(top, lane, spec, target.key)
    say(f"[synth]   {_progress(r)}")
    return r


def net_rows(*, use_cache: bool = True, cache_dir: Path | None = None, log: Any = None,
             units: tuple[tuple[str, Path, str, dict[str, int]], ...] | None = None,
             cached_only: bool = False) -> list[dict[str, Any]]:
    """One row per network kernel top of `units` (NET_UNITS), synthesized whole, with its resources (minutes
    each; cached). `cached_only`: raise synth.NotCached rather than start a run."""
    units = NET_UNITS if units is None else units
    cache = Path(cache_dir or synth.SYNTH_DIR)
    say = log or (lambda _msg: None)
    rows = []
    for label, flist, top, params in units:
        say(f"[synth] network kernel {label} (yosys takes a quarter of an hour; cached afterwards)")
        run = synth.synth_module(rtl_sources.read_filelist(flist), top, label=label, cache_dir=cache,
                                 use_cache=use_cache, cached_only=cached_only, top_defaults=params)
        r = row(run) | {"resources": run["resources"]}
        say(f"[synth]   {_progress(r)}")
        rows.append(r)
    return rows


def report(spec: Any, target: Any, *, units: bool = True, kernel: bool = True, matrix: bool = False,
           use_cache: bool = True, cache_dir: Path | None = None, log: Any = None,
           targets: Any = None, net: bool = False, cached_only: bool = False) -> dict[str, Any]:
    """Timing rows for every RTL unit alone and the kernel at `spec.lanes` lanes on `target`; with `matrix`
    the kernel on every target of MATRIX_TARGETS in every dtype pair of MATRIX_DTYPES (`spec`'s
    optimizer, source and lanes), `targets` resolving a key to a Target; with `net` the network kernel
    tops of NET_UNITS. `cached_only`: no yosys run starts; a row whose runs are not cached is left out
    and named in `not_run`."""
    cache = Path(cache_dir or synth.SYNTH_DIR)
    say = log or (lambda _msg: None)
    load_start = os.getloadavg()[0]
    sources = rtl_sources.static_sources()
    unit_rows = []
    not_run: list[str] = []
    if units:
        mods = unit_modules(sources)
        for i, (module, src) in enumerate(mods, 1):
            params = _unit_params(module, src, spec)
            say(f"[synth] unit {i}/{len(mods)}: {module} {params or ''}".rstrip())
            try:
                if module == LANE_MODULE:  # the same run as the kernel rows' lane alone (one cache entry)
                    run = synth.synth_lane(spec, cache_dir=cache, use_cache=use_cache,
                                           cached_only=cached_only) | {"unit": module}
                else:
                    run = synth.synth_module(sources, module, params, cache_dir=cache, use_cache=use_cache,
                                             cached_only=cached_only)
            except synth.NotCached:
                not_run.append(module)
                say("[synth]   not cached: no row")
                continue
            unit_rows.append(row(run))
            say(f"[synth]   {_progress(unit_rows[-1])}")
    configs = [(target, spec)]
    if matrix:
        configs = [(targets(t), spec.with_(target=t, grad_dtype=g, out_dtype=o))
                   for t in MATRIX_TARGETS for g, o in MATRIX_DTYPES]
    kernel_rows = []
    for t, s in (configs if kernel else ()):
        try:
            kernel_rows.append(kernel_row(s, t, use_cache=use_cache, cache_dir=cache, log=log,
                                          cached_only=cached_only))
        except synth.NotCached:
            not_run.append(f"{t.key} {s.grad_dtype}->{s.out_dtype}")
            say("[synth]   not cached: no row")
    net_kernel_rows = []
    if net:
        try:
            net_kernel_rows = net_rows(use_cache=use_cache, cache_dir=cache, log=log, cached_only=cached_only)
        except synth.NotCached:
            not_run.append("network kernel")
            say("[synth]   not cached: no row")
    rows = unit_rows + kernel_rows + net_kernel_rows
    return {
        "spec": spec.to_dict(),
        "yosys": synth.yosys_version(),
        "command": "synth_xilinx -family xcup -flatten -noiopad; write_json (hls.rtl.netlist over the netlist)",
        "goal": judge(0, 0)["goal"],
        "lanes": spec.lanes,
        "matrix": matrix,
        "load_average": f"{load_start:.1f} (1 min) at the start, {os.getloadavg()[0]:.1f} at the end",
        "units": unit_rows,
        "kernel": kernel_rows,
        "net": net_kernel_rows,
        "not_run": not_run,
        "met": all(r["met"] for r in rows),
        "kernel_met": all(r["met"] for r in kernel_rows) if kernel_rows else None,
        "caveat": "LUT levels and loads from yosys before placement; Vivado maps, replicates and retimes "
                  "differently, so these say where timing is at risk, not the achieved clock",
    }


def _progress(r: dict[str, Any]) -> str:
    took = "cached" if r["cached"] else f"yosys {r['seconds']} s"
    return f"{r['lut_levels']} LUT levels, max fan-out {r['max_fanout']:,} ({r['max_fanout_net']}), {took}"


def table_rows(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the per-module timing table (text and markdown share them)."""
    header = ["unit", "LUT levels", "carry bits/DSP cascade", "longest path (start -> end)", "I/O levels",
              "max fan-out net", "loads", "nets > 1,000", "goal"]
    rows = []
    for r in rep["units"]:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        name = r["unit"] if r["unit"] != r["top"] or not params else f"{r['unit']} ({params})"
        rows.append([
            name,
            str(r["lut_levels"]),
            f"{r.get('carry_bits', 0)}/{r.get('dsp_cascade', 0)}",
            f"{r['path_start']} -> {r['path_end']}" if r["path_start"] else "-",
            "/".join("-" if r["io_lut_levels"].get(k) is None else str(r["io_lut_levels"][k])
                     for k in ("in_to_reg", "reg_to_out", "in_to_out")) if r.get("io_lut_levels") else "-",
            r["max_fanout_net"] or "-",
            f"{r['max_fanout']:,}",
            str(len(r.get("nets_over_goal", {}))),
            _verdict(r),
        ])
    return header, rows


def kernel_table_rows(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the kernel table: one row per target and dtype, composed (see `compose`)."""
    header = ["target", "grad -> param", "lanes", "LUT levels", "kernel / into lane + lane in / lane / "
              "lane out + from lane", "carry bits", "DSP cascade (on a path)", "max fan-out net", "loads",
              "nets > 1,000", "yosys s (kernel + lane)", "goal"]
    rows = []
    for r in rep["kernel"]:
        p = r["levels_parts"]
        took = " + ".join(f"{run['seconds']:g}" + (" (cached)" if run["cached"] else "") for run in r["runs"])
        rows.append([
            r["target"], f"{r['grad_dtype']} -> {r['out_dtype']}", str(r["lanes"]), str(r["lut_levels"]),
            f"{p['kernel']} / {_sum_text(p, 'into_lane', 'lane_in')} / {p['lane']} / "
            f"{_sum_text(p, 'lane_out', 'from_lane')}",
            str(r["carry_bits"]), f"{r['dsp_cascade']} ({r['dsp_on_path']})", r["max_fanout_net"] or "-",
            f"{r['max_fanout']:,}", str(len(r["nets_over_goal"])), took, _verdict(r),
        ])
    return header, rows


def net_table_rows(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the network kernel table: timing shape and resources of each top synthesized whole."""
    header = ["network kernel", "LUT levels", "carry bits/DSP cascade", "longest path (start -> end)",
              "max fan-out net", "loads", "LUT", "FF", "BRAM36", "URAM", "DSP", "LUT as memory", "yosys s", "goal"]
    rows = []
    for r in rep.get("net", []):
        res = r["resources"]
        rows.append([
            r["unit"], str(r["lut_levels"]), f"{r.get('carry_bits', 0)}/{r.get('dsp_cascade', 0)}",
            f"{r['path_start']} -> {r['path_end']}" if r["path_start"] else "-", r["max_fanout_net"] or "-",
            f"{r['max_fanout']:,}", f"{res['lut']:,}", f"{res['ff']:,}", f"{res['bram36']:g}", f"{res['uram']:g}",
            f"{res['dsp']:g}", f"{res['lut_as_memory']:,}",
            f"{r['seconds']:g}" + (" (cached)" if r["cached"] else ""), _verdict(r),
        ])
    return header, rows


def _sum_text(parts: dict[str, int | None], *keys: str) -> str:
    vals = [parts[k] for k in keys]
    return "-" if any(v is None for v in vals) else "+".join(map(str, vals))


def _verdict(r: dict[str, Any]) -> str:
    if r["met"]:
        return "met"
    parts = [name for key, name in (("lut_levels_met", "levels"), ("fanout_met", "fan-out"),
                                    ("carry_met", "carry"), ("dsp_met", "DSP")) if not r.get(key, True)]
    return f"NOT met ({', '.join(parts)})"


def markdown(rep: dict[str, Any]) -> list[str]:
    """The timing tables (modules, then the kernel per target and dtype) as markdown lines."""
    out: list[str] = []
    for header, rows in (table_rows(rep), kernel_table_rows(rep), net_table_rows(rep)):
        if not rows:
            continue
        esc = [[c.replace("|", "\\|").replace("$", "\\$") for c in r] for r in rows]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *["| " + " | ".join(r) + " |" for r in esc], ""]
    return out[:-1]
