"""Vendor report parsing: what the HLS and link steps say about timing and resources.

Formats read (as the AMD tools write them; small samples live in tests/fixtures/):
- Vitis HLS `csynth.xml` (`<proj>/<solution>/syn/report/csynth.xml`): `UserAssignments`
  (Part, TopModelName, TargetClockPeriod), `PerformanceEstimates/SummaryOfTimingAnalysis/
  EstimatedClockPeriod`, `SummaryOfOverallLatency`, `AreaEstimates/Resources` and
  `AvailableResources` (BRAM_18K, DSP, FF, LUT, URAM; older releases write DSP48E).
- Vivado `report_timing_summary` text, as v++ copies it to
  `<report_dir>/link/imp/impl_1_*timing_summary*routed*.rpt`: the "Design Timing Summary"
  table (WNS TNS ... header, dashes, values), the sentence "All user specified timing
  constraints are met." (or "Timing constraints are not met."), the "Clock Summary" table
  (Clock, Waveform(ns), Period(ns), Frequency(MHz)) and the "Intra Clock Table" (WNS per clock).
- v++ `impl_1_kernel_util_routed.rpt`: a `+---+` table of rows Platform / User Budget /
  Used Resources / Unused Resources / <kernel> / <kernel>_1 with `N [ P%]` cells under
  LUT, LUTAsMem, REG, BRAM, URAM, DSP.

Every parser returns plain dicts (JSON-ready) and never guesses: a value not found is None.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from hls.errors import UserError

_HLS_RESOURCES = {"LUT": "lut", "FF": "ff", "DSP": "dsp", "DSP48E": "dsp", "BRAM_18K": "bram18", "URAM": "uram"}


def _num(text: str | None) -> int | float | None:
    if text is None:
        return None
    t = text.strip().lstrip("~")
    if t in ("", "-", "NA", "N/A", "undef"):
        return None
    try:
        value = float(t)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() else value


def parse_csynth_xml(path: Path) -> dict[str, Any]:
    """The top-level Vitis HLS synthesis estimate: clock, latency, resources."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise UserError(f"{path}: cannot read the Vitis HLS report ({exc})") from exc

    def res(tag: str) -> dict[str, Any]:
        node = root.find(f"AreaEstimates/{tag}")
        out: dict[str, Any] = {}
        if node is not None:
            for child in node:
                key = _HLS_RESOURCES.get(child.tag)
                if key:
                    out[key] = _num(child.text)
        return out

    target = _num(root.findtext("UserAssignments/TargetClockPeriod"))
    estimated = _num(root.findtext("PerformanceEstimates/SummaryOfTimingAnalysis/EstimatedClockPeriod"))
    lat = "PerformanceEstimates/SummaryOfOverallLatency/"
    return {
        "report": str(path),
        "tool_version": root.findtext("ReportVersion/Version"),
        "part": root.findtext("UserAssignments/Part"),
        "top": root.findtext("UserAssignments/TopModelName"),
        "target_clock_ns": target,
        "estimated_clock_ns": estimated,
        "estimated_mhz": round(1000.0 / estimated, 3) if estimated else None,
        "timing_met": (estimated <= target) if (estimated and target) else None,
        "latency_best_cycles": _num(root.findtext(lat + "Best-caseLatency")),
        "latency_worst_cycles": _num(root.findtext(lat + "Worst-caseLatency")),
        "interval_min_cycles": _num(root.findtext(lat + "Interval-min")),
        "interval_max_cycles": _num(root.findtext(lat + "Interval-max")),
        "resources": res("Resources"),
        "available": res("AvailableResources"),
    }


def _table_after(lines: list[str], header_start: str) -> tuple[list[str], list[str]] | None:
    """Header words and the first value row of a Vivado whitespace table whose header starts so."""
    for i, line in enumerate(lines):
        if line.strip().startswith(header_start):
            header = re.split(r"\s{2,}", line.strip())
            for row in lines[i + 1:]:
                s = row.strip()
                if not s or set(s) <= {"-", " "}:
                    continue
                return header, s.split()
    return None


def _rows_after(lines: list[str], title: str, first_col: str) -> list[list[str]]:
    """All value rows of the table headed `first_col ...` that follows a section titled `title`."""
    rows: list[list[str]] = []
    for i, line in enumerate(lines):
        if line.strip() == title or line.strip().startswith(f"| {title}"):
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(first_col):
                j += 1
            j += 1
            while j < len(lines):
                s = lines[j].strip()
                j += 1
                if not s or set(s) <= {"-", " "}:
                    if rows and not s:
                        break
                    continue
                rows.append(s.split())
            return rows
    return rows


def parse_timing_summary(text: str, kernel_clock_mhz: float | None = None) -> dict[str, Any]:
    """Design WNS/TNS/WHS, met or not, the clocks, and the achieved kernel clock.

    The kernel clock is the one whose constrained frequency is the requested kernel clock
    (platform clock names differ between shells); its achievable frequency is
    1000 / (period - WNS) when WNS is negative, otherwise the requested frequency.
    """
    lines = text.splitlines()
    design = _table_after(lines, "WNS(ns)")
    summary: dict[str, Any] = {"wns_ns": None, "tns_ns": None, "tns_failing_endpoints": None,
                               "whs_ns": None, "ths_ns": None}
    if design:
        header, values = design
        pos = {h: i for i, h in enumerate(header)}
        columns = (("wns_ns", "WNS(ns)"), ("tns_ns", "TNS(ns)"), ("tns_failing_endpoints", "TNS Failing Endpoints"),
                   ("whs_ns", "WHS(ns)"), ("ths_ns", "THS(ns)"))
        for key, col in columns:
            if col in pos and pos[col] < len(values):
                summary[key] = _num(values[pos[col]])
    if "All user specified timing constraints are met." in text:
        met: bool | None = True
    elif "Timing constraints are not met." in text:
        met = False
    else:
        met = None if summary["wns_ns"] is None else (summary["wns_ns"] >= 0 and (summary["whs_ns"] or 0) >= 0)

    clocks = []
    for row in _rows_after(lines, "Clock Summary", "Clock"):
        # Clock  {rise fall}  Period  Frequency ; generated clocks are indented the same way.
        m = re.match(r"(\S+)\s+\{[^}]*\}\s+([\d.]+)\s+([\d.]+)", " ".join(row))
        if m:
            clocks.append({"name": m.group(1), "period_ns": float(m.group(2)), "mhz": float(m.group(3))})
    intra = {}
    for row in _rows_after(lines, "Intra Clock Table", "Clock"):
        if len(row) >= 2 and _num(row[1]) is not None:
            intra[row[0]] = _num(row[1])
    for c in clocks:
        c["wns_ns"] = intra.get(c["name"])

    kernel = None
    if kernel_clock_mhz:
        candidates = [c for c in clocks if abs(c["mhz"] - kernel_clock_mhz) < 0.5 and c["wns_ns"] is not None]
        if candidates:
            kernel = min(candidates, key=lambda c: c["wns_ns"])
    achieved = None
    if kernel is not None:
        wns = kernel["wns_ns"]
        achieved = kernel["mhz"] if wns >= 0 else round(1000.0 / (kernel["period_ns"] - wns), 3)
    elif kernel_clock_mhz and summary["wns_ns"] is not None:
        # No per-clock figure: bound it by the design WNS at the requested period.
        wns = summary["wns_ns"]
        period = 1000.0 / kernel_clock_mhz
        achieved = kernel_clock_mhz if wns >= 0 else round(1000.0 / (period - wns), 3)
    return summary | {"timing_met": met, "clocks": clocks, "kernel_clock": kernel,
                      "requested_mhz": kernel_clock_mhz, "achieved_mhz": achieved}


_CELL = re.compile(r"^\s*(\d+)\s*(?:\[\s*([\d.]+)%\])?\s*$")


def parse_kernel_util(text: str) -> dict[str, Any]:
    """Rows of v++'s kernel utilization table: {row name: {LUT, LUTAsMem, REG, BRAM, URAM, DSP}}."""
    header: list[str] | None = None
    rows: dict[str, dict[str, int]] = {}
    order: list[str] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "Name":
            header = cells[1:]
            continue
        if header is None or len(cells) != len(header) + 1:
            continue
        values = {}
        for col, cell in zip(header, cells[1:], strict=True):
            m = _CELL.match(cell)
            if m:
                values[col.lower()] = int(m.group(1))
        name = cells[0]
        rows[name] = values
        order.append(name)
    kernels = {n: rows[n] for n in order if n not in ("Platform", "User Budget", "Used Resources", "Unused Resources")}
    return {"platform": rows.get("Platform"), "user_budget": rows.get("User Budget"),
            "used": rows.get("Used Resources"), "kernels": kernels}


def _first(folder: Path, patterns: tuple[str, ...]) -> Path | None:
    for pattern in patterns:
        found = sorted(folder.rglob(pattern))
        if found:
            return found[0]
    return None


TIMING_PATTERNS = ("impl_1_hw_bb_locked_timing_summary_routed.rpt", "impl_1_*timing_summary*routed*.rpt",
                   "*timing_summary_routed.rpt", "impl_1_*timing_summary*.rpt")
KERNEL_UTIL_PATTERNS = ("impl_1_kernel_util_routed.rpt", "*kernel_util*.rpt")


def summarize_link(search_dir: Path, kernel: str, kernel_clock_mhz: float) -> dict[str, Any]:
    """Timing and kernel resources from a v++ link run's report folder (None where absent)."""
    search_dir = Path(search_dir)
    out: dict[str, Any] = {"timing": None, "resources": None, "reports": {}}
    timing = _first(search_dir, TIMING_PATTERNS)
    if timing:
        out["timing"] = parse_timing_summary(timing.read_text(errors="replace"), kernel_clock_mhz)
        out["reports"]["timing"] = str(timing)
    util = _first(search_dir, KERNEL_UTIL_PATTERNS)
    if util:
        table = parse_kernel_util(util.read_text(errors="replace"))
        out["resources"] = {"kernel": table["kernels"].get(kernel), "used": table["used"],
                            "user_budget": table["user_budget"], "platform": table["platform"]}
        out["reports"]["kernel_util"] = str(util)
    return out


def find_csynth_xml(hls_dir: Path, top: str) -> Path | None:
    """The top function's csynth.xml under a Vitis HLS project (csynth.xml or <top>_csynth.xml)."""
    hls_dir = Path(hls_dir)
    for pattern in ("**/syn/report/csynth.xml", f"**/syn/report/{top}_csynth.xml"):
        found = sorted(hls_dir.glob(pattern))
        if found:
            return found[0]
    return None
