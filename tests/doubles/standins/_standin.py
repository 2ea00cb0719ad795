"""Shared by the stand-in tools (TEST DOUBLES for vitis_hls, vitis-run, vivado and v++).

The AMD tools cannot exist on this machine. These scripts take their place on PATH in
tests/hls/vitis/test_build_flow.py only: each records its arguments, working directory and the sha256
of its inputs (one JSON line per call in $OPTIMUSNIC_STANDIN_LOG), checks the inputs a real
run would need, and writes files with the names and layouts the real tool writes. Nothing
they write is a bitstream: the ".xclbin" is a text file that says so and lacks the AXLF magic,
which the registry reports as "not-axlf".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import zipfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

BANNER = "OPTIMUSNIC TEST STAND-IN (test double, not an AMD tool): "


def sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def record(tool: str, inputs: dict[str, str], **extra: object) -> None:
    log = os.environ.get("OPTIMUSNIC_STANDIN_LOG")
    entry = {"tool": tool, "argv": sys.argv[1:], "cwd": os.getcwd(),
             "inputs": {name: sha(Path(p)) for name, p in inputs.items()}, **extra}
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(entry) + "\n")
    print(BANNER + f"{tool} {' '.join(sys.argv[1:])}")


def fail_if_asked(tool: str) -> None:
    if os.environ.get("OPTIMUSNIC_STANDIN_FAIL") == tool:
        print(f"ERROR: [{tool} stand-in] failing on request (OPTIMUSNIC_STANDIN_FAIL)", file=sys.stderr)
        sys.exit(1)


def die(tool: str, message: str) -> None:
    print(f"ERROR: [{tool} stand-in] {message}", file=sys.stderr)
    sys.exit(1)


def tcl_vars(text: str) -> dict[str, str]:
    """Plain `set name value` lines of a Tcl script (enough to follow the generated scripts)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^\s*set\s+(\w+)\s+([^\s\[\]{}]+)\s*$", text, re.M):
        out[m.group(1)] = m.group(2)
    return out


def tcl_subst(value: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)


def write_xo(path: Path, kernel: str, tool: str) -> None:
    """A .xo is a zip archive; this one holds only a note saying it is a stand-in's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("STANDIN.txt", BANNER + f"{tool} output for kernel {kernel}; not a Vitis object\n")


def write_hls_log(path: Path, source: str, top: str) -> None:
    """A vitis_hls.log with the burst messages of a csynth of `source` (see the vitis_hls stand-in)."""
    lost = {b for b in os.environ.get("OPTIMUSNIC_STANDIN_LOST_BURSTS", "").split(",") if b}
    lines = [f"INFO: [HLS 200-10] {BANNER}vitis_hls csynth_design of {top}"]
    for m in re.finditer(r"#pragma\s+HLS\s+INTERFACE\s+m_axi\s+port=(\w+)\s+bundle=(\w+)", source):
        port, bundle = m.groups()
        if bundle in lost:
            lines.append(f"WARNING: [HLS 214-231] Access on '{port}' is clobbered by a write to '{port}' in the "
                         f"same region ({top}.cpp:1:1)")
            continue
        for kind in ("read", "write"):
            lines.append(f"INFO: [HLS 214-115] Multiple burst {kind}s of variable length and bit width 512 has been "
                         f"inferred on bundle '{bundle}'. ({top}.cpp:1:1)")
    if lost:
        lines.append("INFO: [HLS 200-1603] Design has inferred MAXI bursts and missed bursts, see Vitis HLS GUI "
                     "synthesis summary report for detailed information.")
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))



def hls_run(tool: str, script: Path, tclargs: list[str]) -> None:
    """What `vitis_hls -f` and `vitis-run --tcl` do with run_hls.tcl: csynth writes csynth.xml and
    vitis_hls.log (write_hls_log), export writes the .xo (or the IP-catalog zip)."""
    text = script.read_text()
    variables = tcl_vars(text)

    def tcl(pattern: str, default: str) -> str:
        m = re.search(pattern, text, re.M)
        return tcl_subst(m.group(1), variables) if m else default

    top = tcl(r"^\s*set_top\s+(\S+)", "kernel")
    project = tcl(r"^\s*open_project\s+(?:-reset\s+)?(\S+)", "proj")
    solution = tcl(r"^\s*open_solution\s+(?:-reset\s+)?(?:-flow_target\s+\S+\s+)?(\S+)", "solution1")
    sources = {p.name: str(p) for p in sorted(Path.cwd().glob("*.cpp"))}
    if f"{top}.cpp" not in sources:
        die(tool, f"top source {top}.cpp not found in {Path.cwd()}")
    record(tool, {"script": str(script), **sources}, script_text=text, top=top, tclargs=tclargs)
    fail_if_asked(tool)
    steps = tclargs or ["csynth", "export"]
    if any(step in steps for step in ("csynth", "cosim", "export")):
        report = Path(project) / solution / "syn" / "report" / "csynth.xml"
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text((FIXTURES / "csynth.xml").read_text().replace("optimusnic_adamw", top))
        print(f"INFO: [stand-in] wrote {report}")
        write_hls_log(Path("vitis_hls.log"), Path(sources[f"{top}.cpp"]).read_text(), top)
    if "export" in steps:
        m = re.search(r"^\s*export_design\s+-format\s+(\S+)\s+-output\s+(\S+)", text, re.M)
        if not m:
            die(tool, "no export_design line in the script")
        fmt, out = m.group(1), Path(tcl_subst(m.group(2), variables))
        if fmt == "xo":
            write_xo(out, top, tool)
        else:
            with zipfile.ZipFile(out, "w") as z:
                z.writestr("STANDIN.txt", BANNER + f"{tool} {fmt} export of {top}; not Vivado IP\n")
        print(f"INFO: [stand-in] wrote {out}")
