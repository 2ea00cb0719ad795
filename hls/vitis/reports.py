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

- Vitis HLS burst inference: 214-115 "burst ... has been inferred on bundle" lines and 214-2xx
  failures in vitis_hls.log, the "M_AXI Burst Information" tables of csynth.rpt (see
  `burst_report` below for the message ids and the documents they come from).

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


# --- AXI burst inference (Vitis HLS synthesis log and csynth.rpt) --------------------------------
#
# What Vitis HLS says about m_axi bursts, as UG1399 ("Optimizing Burst Transfers", "Examples of
# Recommended Coding Styles") and UG1448 (Vitis HLS Messaging, "Burst Inference Failure N") document
# it, and as 2022.x-2024.x logs print it:
# - inferred, in vitis_hls.log (2022.1+):
#     INFO: [HLS 214-115] Multiple burst reads of length 256 and bit width 512 has been inferred on
#     bundle 'gmem'. These burst requests might be further partitioned ... (kernel.cpp:19:20)
#   2023.2 adds the loop ("... of length 16 and bit width 32 in loop 'VADD_LOOP' has been inferred
#   on bundle 'gmem'."); lengths may be "variable length"; 2020.2 wrote "Burst read of variable
#   length and bit width 32 has been inferred on port 'gmem'".
# - missed, summarised in the log (2023.x) as "[HLS 200-1603] Design has inferred MAXI bursts and
#   missed bursts, see Vitis HLS GUI synthesis summary report ..."; the details are in
#   syn/report/csynth.rpt, section "M_AXI Burst Information": tables "* Inferred Burst Summary"
#   (HW Interface | Loop | Direction | Length | Width | Location) and "* Inferred Bursts and
#   Widening Missed" (HW Interface | Variable | Loop | Problem | Resolution | Location), where
#   Resolution is the message id;
# - failures as messages (UG1448): 214-224 "Inferred burst reverted due to conflict with other on
#   <name>" / "Could not burst due to multiple potential reads to the same bundle in the same
#   region." (ports sharing a bundle), 214-225 "Bursting on <name> may be impacted by pragma",
#   214-229 (215-229 in 2021.2) "Could not analyze pattern on <name>", 214-230 "Stride is
#   incompatible", 214-231 overlapping accesses in one region (a read-modify-write: the write may
#   clobber a later read), 214-232 "Access on <name> is in the conditional branch".
# Widening notes (214-234 "Length is not divisible by 2", 214-353 "Could not widen ...") cost width,
# not bursts, and are kept apart. The parser keys on message ids and on the quoted bundle or
# variable, not on the rest of the wording, which changes between releases.

BURST_FAILURE_IDS = ("214-224", "214-225", "214-229", "215-229", "214-230", "214-231", "214-232")
WIDENING_IDS = ("214-234", "214-353")
_BURST_OK = re.compile(
    r"\[HLS 214-115\]\s+(?:Multiple\s+)?burst\s+(read|write)s?\s+of\s+(?:variable\s+length|length\s+(\d+))"
    r"\s+and\s+bit\s+width\s+(\d+)(?:\s+in\s+loop\s+'([^']*)'(?:\(\))?)?\s+has\s+been\s+inferred\s+on\s+"
    r"(?:bundle|port)\s+'([^']+)'", re.I)
_MSG = re.compile(r"^\s*(INFO|WARNING|CRITICAL WARNING|ERROR):\s*\[HLS\s+(\d{3}-\d+)\]\s*(.*)$")
_LOCATION = re.compile(r"\(([^()\s]+:\d+(?::\d+)?)\)\s*$")
_MISSED = "200-1603"


def _bundle_of(name: str, bundles: list[str]) -> str | None:
    """The bundle a bundle, HW interface (m_axi_<bundle>) or variable name stands for. A variable
    maps to `gmem_<variable>`, the bundle the generated kernels give each pointer argument."""
    for candidate in (name, name.removeprefix("m_axi_"), f"gmem_{name}"):
        if candidate in bundles:
            return candidate
    return None


def _report_tables(text: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Rows of csynth.rpt's "Inferred Burst Summary" and "Inferred Bursts and Widening Missed"."""
    tables: dict[str, list[dict[str, str]]] = {"summary": [], "missed": []}
    current, header = None, None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("* Inferred Burst Summary"):
            current, header = "summary", None
        elif s.startswith("* Inferred Bursts and Widening Missed"):
            current, header = "missed", None
        elif current and s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if header is None:
                header = cells
            else:
                tables[current].append(dict(zip(header, cells, strict=False)))
        elif current and s and not s.startswith("+"):
            current = None
    return tables["summary"], tables["missed"]


def _lengths(found: set[int | str]) -> list[int | str]:
    return sorted((x for x in found if isinstance(x, int)), key=int) + sorted(x for x in found if isinstance(x, str))


def burst_report(log_text: str, ports: list[str]) -> dict[str, Any]:
    """What a Vitis HLS synthesis log (and/or csynth.rpt text) says about bursts on each bundle.

    `ports`: the kernel's m_axi bundle names (gmem_<arg>). Returns
    {"ports": {bundle: {"read_lengths", "write_lengths" (sorted; an int or "variable"),
    "read_width", "write_width", "failures": [{"id", "message", "location"}], "widening": [...],
    "status": "ok" | "lost" | "no-evidence"}}, "unattributed": [failures naming no listed bundle],
    "missed_bursts_reported": bool (200-1603 seen)}. Nothing is inferred that the text does not say.
    """
    out: dict[str, dict[str, Any]] = {
        b: {"read_lengths": set(), "write_lengths": set(), "read_width": None, "write_width": None,
            "failures": [], "widening": []} for b in ports}
    unattributed: list[dict[str, Any]] = []
    missed = False

    def inferred(bundle_name: str, direction: str, length: str | None, width: str | None) -> None:
        bundle = _bundle_of(bundle_name, ports)
        if bundle is None:
            return
        entry = out[bundle]
        entry[f"{direction}_lengths"].add(int(length) if length and length.isdigit() else "variable")
        if width and width.isdigit():
            entry[f"{direction}_width"] = int(width)

    def failure(names: list[str], msg_id: str | None, message: str, location: str | None, widening: bool) -> None:
        item = {"id": msg_id, "message": message, "location": location}
        key = "widening" if widening else "failures"
        targets = {b for b in (_bundle_of(n, ports) for n in names) if b}
        for b in sorted(targets):
            if item not in out[b][key]:
                out[b][key].append(item)
        if not targets and key == "failures" and item not in unattributed:
            unattributed.append(item)

    for line in log_text.splitlines():
        m = _BURST_OK.search(line)
        if m:
            inferred(m.group(5), m.group(1).lower(), m.group(2), m.group(3))
            continue
        m = _MSG.match(line)
        if not m:
            continue
        msg_id, body = m.group(2), m.group(3)
        if msg_id == _MISSED:
            missed = True
        elif msg_id in BURST_FAILURE_IDS or msg_id in WIDENING_IDS or "could not burst" in body.lower():
            loc = _LOCATION.search(body)
            names = re.findall(r"'([A-Za-z_]\w*)'", body) + re.findall(r"\bon\s+([A-Za-z_]\w*)\b", body)
            failure(names, msg_id, body.strip(), loc.group(1) if loc else None, msg_id in WIDENING_IDS)

    summary, missed_rows = _report_tables(log_text)
    for row in summary:
        direction = row.get("Direction", "").lower()
        if direction in ("read", "write"):
            inferred(row.get("HW Interface", ""), direction, row.get("Length"), row.get("Width"))
    for row in missed_rows:
        msg_id = row.get("Resolution", "")
        problem = row.get("Problem", "")
        if not re.fullmatch(r"\d{3}-\d+", msg_id):
            msg_id = None  # the report left the id out; the problem text still says what happened
        widening = msg_id in WIDENING_IDS or problem.lower().startswith("could not widen")
        failure([row.get("HW Interface", ""), row.get("Variable", "")], msg_id, problem, row.get("Location") or None,
                widening)

    result: dict[str, Any] = {"ports": {}, "unattributed": unattributed, "missed_bursts_reported": missed}
    for b, e in out.items():
        has_burst = bool(e["read_lengths"] or e["write_lengths"])
        status = "lost" if e["failures"] else ("ok" if has_burst else "no-evidence")
        result["ports"][b] = {
            **e,
            "read_lengths": _lengths(e["read_lengths"]),
            "write_lengths": _lengths(e["write_lengths"]),
            "status": status,
        }
    return result


def check_bursts(log_text: str, ports: list[str]) -> None:
    """Raise UserError, in one line, if any m_axi bundle lost its bursts or shows no burst at all."""
    report = burst_report(log_text, ports)
    bad = []
    for b, e in report["ports"].items():
        if e["status"] == "lost":
            ids = sorted({f["id"] or "no id" for f in e["failures"]})
            where = e["failures"][0]["location"]
            bad.append(f"{b} ({', '.join(ids)}{' at ' + where if where else ''})")
        elif e["status"] == "no-evidence":
            bad.append(f"{b} (no burst inferred)")
    if report["unattributed"]:
        ids = sorted({f["id"] or "no id" for f in report["unattributed"]})
        bad.append(f"a port the log does not name ({', '.join(ids)})")
    elif report["missed_bursts_reported"] and not bad:
        bad.append("a port the log does not name (200-1603: see syn/report/csynth.rpt, M_AXI Burst Information)")
    if bad:
        raise UserError(
            "Vitis HLS did not infer AXI bursts on " + "; ".join(bad) + ". Without bursts a port moves one "
            "beat per request, far below the memory bandwidth sizing assumes: read each port only in its own "
            "sequential pipelined load loop and write each only in its own store loop, one bundle per port "
            "(hls.vitis.burst_check.check_hls_source finds these patterns; UG1399 'Optimizing Burst Transfers')")
