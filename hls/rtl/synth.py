"""Open-source resource estimates: the generated RTL kernel through Debian's yosys.

`yosys synth_xilinx -family xcup -flatten -noiopad` maps the Verilog to UltraScale+ primitives
(LUT1-6, FDRE/FDSE/..., CARRY, DSP48E2, RAMB36E2/RAMB18E2, URAM288); the cell counts become
LUT, FF, DSP, BRAM36 and URAM figures comparable with a target's usable resources. These are
pre-placement estimates from another synthesizer: Vivado's numbers differ (it packs, retimes
and optimizes across hierarchy differently), so treat them as a guide for "does it fit".

A 16-lane kernel is 16 copies of one update lane plus shared infrastructure (AXI masters,
FIFOs, control), so by default we synthesize the lane once and the kernel top at one lane,
take infrastructure = top(1 lane) - lane, and scale: per CU = infrastructure + lanes x lane.
`mode="full"` synthesizes the requested kernel top as it is (slow at 16 lanes).
Results are cached in build/synth/ by a key over the spec's resource-relevant fields, the
sha256 of every source file, the yosys version and this script. Each run also writes the mapped
netlist as JSON, from which `hls.rtl.netlist` reads LUT levels between registers and fan-out
(`hls.rtl.timing_report` tabulates them). The sources, module names and lane parameters are
`hls.rtl_sources`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import time
from pathlib import Path
from typing import Any

from hls import proc, rtl_sources, safe_io
from hls.errors import ToolMissing, UserError
from hls.paths import BUILD_DIR
from hls.rtl import netlist as timing
from hls.rtl_sources import LANE_MODULE, lane_params
from hls.spec import MAX_LANES, KernelSpec
from hls.targets import Target

SYNTH_DIR = BUILD_DIR / "synth"
SCRIPT_VERSION = 2
RESOURCES = ("lut", "ff", "dsp", "bram36", "uram")

# Primitive -> (resource, amount). LUT-RAM and SRL cells are LUTs used as memory, as Vivado counts
# them under "CLB LUTs"; a RAMB18 is half a BRAM36 tile.
_CELL_COST: dict[str, tuple[str, float]] = {
    **{f"LUT{i}": ("lut", 1) for i in range(1, 7)},
    "LUT6_2": ("lut", 1),
    "SRL16E": ("lut", 1), "SRLC16E": ("lut", 1), "SRLC32E": ("lut", 1),
    "RAM32X1S": ("lut", 1), "RAM64X1S": ("lut", 1), "RAM128X1S": ("lut", 2), "RAM256X1S": ("lut", 4),
    "RAM512X1S": ("lut", 8), "RAM32X1D": ("lut", 2), "RAM64X1D": ("lut", 2), "RAM128X1D": ("lut", 4),
    "RAM256X1D": ("lut", 8), "RAM32M": ("lut", 4), "RAM64M": ("lut", 4), "RAM32M16": ("lut", 8),
    "RAM64M8": ("lut", 8),
    "FDRE": ("ff", 1), "FDSE": ("ff", 1), "FDCE": ("ff", 1), "FDPE": ("ff", 1), "LDCE": ("ff", 1),
    "LDPE": ("ff", 1),
    "DSP48E2": ("dsp", 1), "DSP48E1": ("dsp", 1),
    "RAMB36E2": ("bram36", 1), "RAMB18E2": ("bram36", 0.5), "RAMB36E1": ("bram36", 1), "RAMB18E1": ("bram36", 0.5),
    "URAM288": ("uram", 1), "URAM288_BASE": ("uram", 1),
}
_LUT_MEMORY = {"SRL16E", "SRLC16E", "SRLC32E"} | {c for c in _CELL_COST if c.startswith(("RAM32", "RAM64", "RAM128",
                                                                                        "RAM256", "RAM512"))}
_IGNORED = {"BUFG", "IBUF", "OBUF", "IOBUF", "INV", "MUXF7", "MUXF8", "MUXF9", "CARRY4", "CARRY8", "GND", "VCC"}


class NotCached(UserError):
    """`cached_only` asked for a run that is not in the cache (nothing was started)."""


def yosys_bin() -> str:
    path = shutil.which("yosys")
    if path is None:
        raise ToolMissing("yosys not found on PATH: run `make deps-yosys` (installs Debian's yosys)")
    return path


def yosys_version() -> str:
    out = proc.run([yosys_bin(), "-V"], "yosys -V", timeout=proc.VERSION_TIMEOUT_S, capture_output=True,
                   text=True).stdout.strip()
    return out or "unknown"


def cell_resources(cells: dict[str, int]) -> dict[str, Any]:
    """LUT/FF/DSP/BRAM36/URAM from yosys cell counts; unknown primitives are listed, not dropped."""
    out: dict[str, Any] = {r: 0 for r in RESOURCES}
    out["lut_as_memory"] = 0
    out["carry"] = 0
    unknown = {}
    for cell, count in sorted(cells.items()):
        if cell in _CELL_COST:
            res, amount = _CELL_COST[cell]
            out[res] += amount * count
            if cell in _LUT_MEMORY:
                out["lut_as_memory"] += amount * count
        elif cell.startswith("CARRY"):
            out["carry"] += count
        elif cell not in _IGNORED:
            unknown[cell] = count
    out = {k: (int(v) if float(v).is_integer() else v) for k, v in out.items()}
    out["unmapped_cells"] = unknown
    return out


def _stat_cells(stat: dict[str, Any]) -> dict[str, int]:
    if "design" in stat and "num_cells_by_type" in stat["design"]:
        return dict(stat["design"]["num_cells_by_type"])
    cells: dict[str, int] = {}
    for mod in stat.get("modules", {}).values():
        for cell, n in mod.get("num_cells_by_type", {}).items():
            cells[cell] = cells.get(cell, 0) + n
    return cells


def _key(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _file_hashes(files: list[Path]) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def synth_module(
    sources: list[Path],
    top: str,
    params: dict[str, int] | None = None,
    *,
    label: str | None = None,
    cache_dir: Path = SYNTH_DIR,
    use_cache: bool = True,
    defines: tuple[str, ...] = (),
    box_src: str | None = None,
    cached_only: bool = False,
    top_defaults: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Synthesize `top` from `sources` for UltraScale+; returns cell counts and resources (cached).

    `defines` are Verilog macros set for every source (`read_verilog -D`), e.g. ONIC_LANE_STUB.
    `top_defaults`: parameters of `top` set by a copy of its source with those defaults (`with_defaults`)
    rather than `hierarchy -chparam`, which yosys 0.23 aborts on for the network kernel's top (an
    internal assertion, `modules_.count(module->name) == 0`)."""
    params = dict(params or {})
    top_defaults = dict(top_defaults or {})
    defines = tuple(sorted(defines))
    for d in defines:
        if not d.isidentifier():
            raise UserError(f"Verilog define {d!r} is not an identifier")
    version = yosys_version()
    key = _key({"top": top, "params": params, "sources": _file_hashes(sources), "yosys": version,
                "script": SCRIPT_VERSION} | ({"defines": list(defines)} if defines else {})
               | ({"top_defaults": top_defaults} if top_defaults else {}))
    cache = Path(cache_dir) / "units" / f"{top}-{key}.json"
    work = Path(cache_dir) / "work" / f"{top}-{key}"
    if top_defaults:
        sources = with_defaults(sources, top, top_defaults, work / "src")
    if use_cache and cache.is_file():
        result = json.loads(cache.read_text())
        if (result.get("timing", {}).get("analysis_version") == timing.ANALYSIS_VERSION
                and result["timing"].get("box_src") == box_src):
            return result | {"cached": True}
        if (work / "netlist.json").is_file():  # only the analysis changed: no new yosys run
            result["timing"] = timing.analyze(work / "netlist.json", top, box_src=box_src)
            safe_io.atomic_write(cache, json.dumps(result, indent=2, sort_keys=True) + "\n")
            return result | {"cached": True}
    if cached_only:
        raise NotCached(f"{top}: no cached yosys run for these sources and parameters")
    work.mkdir(parents=True, exist_ok=True)
    chparam = " ".join(f"-chparam {k} {v}" for k, v in params.items())
    script = "\n".join([
        # The primitive library first, so sources may instantiate LUT6, FDRE, ... (hierarchy -check).
        "read_verilog -lib +/xilinx/cells_sim.v",
        "read_verilog -defer " + "".join(f"-D{d} " for d in defines) + " ".join(str(s) for s in sources),
        f"hierarchy -check -top {top} {chparam}".rstrip(),
        "synth_xilinx -family xcup -flatten -noiopad",
        "tee -q -o stat.json stat -json",
        "tee -q -o stat.txt stat",
        "write_json -compat-int netlist.json",
    ]) + "\n"
    safe_io.atomic_write(work / "synth.ys", script)
    start = time.monotonic()
    for old in ("stat.json", "stat.txt", "netlist.json", "yosys.log"):  # an earlier run's outputs must not count
        (work / old).unlink(missing_ok=True)
    run = proc.run([yosys_bin(), "-q", "-l", "yosys.log", "-s", "synth.ys"], f"yosys on {top}", cwd=work,
                   capture_output=True, text=True)
    seconds = round(time.monotonic() - start, 1)
    if run.returncode != 0 or not (work / "stat.json").is_file():
        errors = [ln for ln in (run.stderr + run.stdout).splitlines() if "ERROR" in ln] or run.stderr.splitlines()
        raise UserError(f"yosys failed on {top} ({errors[-1] if errors else 'no message'}); see {work / 'yosys.log'}")
    text = (work / "stat.json").read_text()
    stat = json.loads(text[text.index("{"):])
    cells = _stat_cells(stat)
    result = {
        "unit": label or top,
        "top": top,
        "params": params | top_defaults,
        "defines": list(defines),
        "cells": cells,
        "resources": cell_resources(cells),
        "timing": timing.analyze(work / "netlist.json", top, box_src=box_src),
        "yosys": version,
        "command": "synth_xilinx -family xcup -flatten -noiopad",
        "seconds": seconds,
        "sources": [str(s) for s in sources],
        "key": key,
    }
    cache.parent.mkdir(parents=True, exist_ok=True)
    safe_io.atomic_write(cache, json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result | {"cached": False}


def with_defaults(sources: list[Path], top: str, defaults: dict[str, int], folder: Path) -> list[Path]:
    """`sources` with the file defining module `top` replaced by a copy in `folder` whose parameter
    declarations `parameter integer NAME = ...` carry `defaults` (every name must be declared)."""
    text_of = {s: s.read_text() for s in sources}
    src = next((s for s in sources if re.search(rf"^\s*module\s+{top}\b", text_of[s], re.M)), None)
    if src is None:
        raise UserError(f"no source defines module {top}")
    text = text_of[src]
    for name, value in defaults.items():
        text, n = re.subn(rf"(\bparameter\s+integer\s+{name}\s*=\s*)[^,\s)]+", rf"\g<1>{int(value)}", text, count=1)
        if n != 1:
            raise UserError(f"module {top}: no parameter integer {name} to set")
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / src.name
    safe_io.atomic_write(copy, text)
    return [copy if s == src else s for s in sources]


def synth_lane(spec: KernelSpec, **kw: Any) -> dict[str, Any]:
    sources = [f for f in rtl_sources.static_sources() if f.stem == LANE_MODULE or f.parent.name == "fp"]
    return synth_module(sources, LANE_MODULE, lane_params(spec), label="lane", **kw)


def synth_top(spec: KernelSpec, target: Target, cache_dir: Path = SYNTH_DIR, *, lane_stub: bool = False,
              **kw: Any) -> dict[str, Any]:
    """The generated RTL kernel top for `spec` (all lanes), rendered from the templates.

    `lane_stub`: every lane replaced by `rtl_sources.LANE_STUB` (one register per input bit), so the
    rest of the kernel synthesizes at 16 lanes in minutes; its cells are marked as the lane's box in
    the timing analysis (`hls.rtl.netlist.analyze`, `box_src`), to be composed with the lane alone."""
    from hls.generate import render

    files, _ = render(spec, target)
    rtl = {path: data for path, data in files.items() if path.startswith("rtl/") and path.endswith(".v")}
    if f"rtl/{spec.name}.v" not in rtl:
        raise UserError(f"the templates do not render rtl/{spec.name}.v yet; cannot synthesize the kernel top")
    digest = hashlib.sha256(b"".join(rtl[p] for p in sorted(rtl))).hexdigest()[:16]
    gen_dir = Path(cache_dir) / "generated" / digest
    gen_dir.mkdir(parents=True, exist_ok=True)
    generated = []
    for path, data in sorted(rtl.items()):
        dest = gen_dir / Path(path).name
        safe_io.atomic_write(dest, data)
        generated.append(dest)
    sources = rtl_sources.static_sources()
    if lane_stub:
        # Only the lane instantiates FP units: leaving them out of the stubbed run keeps its cache key
        # (and its minutes of yosys) independent of the lane's insides, which the lane-alone run covers.
        sources = [f for f in sources if f.stem != LANE_MODULE and f.parent != rtl_sources.FP_RTL]
        sources.append(rtl_sources.LANE_STUB)
        kw |= {"defines": (rtl_sources.LANE_STUB_DEFINE,), "box_src": rtl_sources.LANE_STUB.name}
    label = f"kernel top, {spec.lanes} lane(s)" + (", lanes stubbed" if lane_stub else "")
    return synth_module([*sources, *generated], spec.name, label=label, cache_dir=cache_dir, **kw)


def _sub(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    return {r: max(0, a[r] - b[r]) for r in RESOURCES}


def _scale(base: dict[str, Any], lane: dict[str, Any], lanes: int, cus: int = 1) -> dict[str, float]:
    return {r: _tidy((base[r] + lanes * lane[r]) * cus) for r in RESOURCES}


def _tidy(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 1)


def estimate(spec: KernelSpec, target: Target, *, mode: str = "scaled", cache_dir: Path = SYNTH_DIR,
             use_cache: bool = True) -> dict[str, Any]:
    """Per lane, infrastructure, per CU and total for `spec`, against the target's usable resources."""
    if mode not in ("scaled", "full"):
        raise UserError(f"mode {mode!r}; choose scaled or full")
    lane = synth_lane(spec, cache_dir=cache_dir, use_cache=use_cache)
    top1 = synth_top(spec.with_(lanes=1, compute_units=1), target, cache_dir=cache_dir, use_cache=use_cache)
    lane_r = {r: lane["resources"][r] for r in RESOURCES}
    infra = _sub(top1["resources"], lane_r)
    runs = [lane, top1]
    if mode == "full" and spec.lanes > 1:
        top = synth_top(spec.with_(compute_units=1), target, cache_dir=cache_dir, use_cache=use_cache)
        runs.append(top)
        per_cu = {r: top["resources"][r] for r in RESOURCES}
    elif mode == "full":
        per_cu = {r: top1["resources"][r] for r in RESOURCES}
    else:
        per_cu = _scale(infra, lane_r, spec.lanes)
    return {
        "spec": spec.to_dict(),
        "mode": mode,
        "method": ("per CU = (top at 1 lane - lane) + lanes x lane" if mode == "scaled"
                   else "per CU = the kernel top synthesized at the requested lanes"),
        "lane": lane_r,
        "infrastructure": infra,
        "runs": [{k: r[k] for k in ("unit", "top", "params", "seconds", "cached", "key", "resources")}
                 | {"lut_levels": r["timing"]["lut_levels"], "max_fanout": r["timing"]["max_fanout"]} for r in runs],
        "yosys": lane["yosys"],
        "caveat": "yosys synth_xilinx estimate before placement; Vivado figures differ",
    } | judge(infra, lane_r, {r: _tidy(v) for r, v in per_cu.items()}, spec.compute_units, target)


def judge(infra: dict[str, Any], lane: dict[str, Any], per_cu: dict[str, Any], cus: int,
          target: Target) -> dict[str, Any]:
    """Totals against the target's usable resources: fit, utilization, largest lane count and CU count."""
    total = {r: _tidy(per_cu[r] * cus) for r in RESOURCES}
    usable = {r: target.usable(r) for r in RESOURCES}
    max_lanes = 0
    lanes = 1
    while lanes <= MAX_LANES:
        need = _scale(infra, lane, lanes, cus)
        if all(usable[r] is None or need[r] <= usable[r] for r in RESOURCES):
            max_lanes = lanes
        lanes *= 2
    return {
        "target": target.key,
        "part": target.part,
        "per_cu": per_cu,
        "total": total,
        "usable": usable,
        "device": {r: target.resources.get(r) for r in RESOURCES},
        "usable_fraction": target.usable_fraction,
        "utilization_pct": {r: (round(100.0 * total[r] / usable[r], 2) if usable[r] else None) for r in RESOURCES},
        "limiting_resource": max((r for r in RESOURCES if usable[r]), key=lambda r: total[r] / usable[r]),
        "fits": all(usable[r] is None or total[r] <= usable[r] for r in RESOURCES),
        "max_lanes_that_fit": max_lanes,
        "max_compute_units_that_fit": min((math.floor(usable[r] / per_cu[r]) for r in RESOURCES
                                           if usable[r] and per_cu[r]), default=None),
        "notes": family_notes(target),
    }


def family_notes(target: Target) -> list[str]:
    if "ultrascale_plus" in target.family:
        return []
    return [f"{target.name} is {target.family or 'not UltraScale+'}: yosys has no mapping for it, so these are "
            "UltraScale+ figures (DSP48E2, RAMB36E2) used as a proxy; its DSP58s and memories differ"]


def spec_key(spec: KernelSpec) -> str:
    """Cache key of an estimate: what changes a lane and the infrastructure (optimizer, dtypes, gradient
    source). Lanes and CUs are left out: the lane and infrastructure figures scale to any width."""
    fields = {k: v for k, v in spec.to_dict().items()
              if k not in ("name", "target", "clock_mhz", "lanes", "compute_units")}
    return _key({"spec": fields, "script": SCRIPT_VERSION})


def cached_estimate(spec: KernelSpec, target: Target, cache_dir: Path | None = None) -> dict[str, Any] | None:
    """The cached figures scaled to `spec`'s lanes and CUs and judged against `target` (None if none)."""
    path = Path(cache_dir or SYNTH_DIR) / f"{spec_key(spec)}.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        per_cu = {r: _tidy(v) for r, v in _scale(data["infrastructure"], data["lane"], spec.lanes).items()}
        method = "per CU = infrastructure + lanes x lane, from saved yosys figures (no new run)"
        return data | {"spec": spec.to_dict(), "mode": "scaled", "method": method} | judge(
            data["infrastructure"], data["lane"], per_cu, spec.compute_units, target)
    except (ValueError, KeyError, TypeError):
        return None


def save_estimate(result: dict[str, Any], cache_dir: Path | None = None) -> Path:
    spec = KernelSpec.from_dict(dict(result["spec"]))
    path = Path(cache_dir or SYNTH_DIR) / f"{spec_key(spec)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_io.atomic_write(path, json.dumps(result, indent=2, sort_keys=True) + "\n")
    return path


def fit_note(spec: KernelSpec, target: Target, cache_dir: Path | None = None) -> str | None:
    """A sizing note when cached yosys figures say the configuration cannot fit (never runs yosys)."""
    est = cached_estimate(spec, target, cache_dir)
    if est is None or est["fits"]:
        return None
    over = [f"{r} {est['total'][r]:g} > {est['usable'][r]}" for r in RESOURCES
            if est["usable"][r] is not None and est["total"][r] > est["usable"][r]]
    return (f"yosys estimate: {spec.lanes} lanes x {spec.compute_units} CU does not fit {target.name} "
            f"({', '.join(over)} usable); see `optimusnic synth --target {target.key}`")

