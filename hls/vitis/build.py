"""The bitstream build flow: generated project -> .xo -> v++ link -> bitstreams/<target>/.

One run folder per build (FINN-style), so a build can be inspected and reproduced from its
own outputs:
    <run>/project/   the generated project (optimusnic generate), unless --project is given
    <run>/logs/      one log per step (the tool's stdout and stderr)
    <run>/link/      v++ output: <name>.xclbin, _x/ (temp), reports/, logs/
    <run>/report/    summary.json: the parsed vendor reports
The result is copied into the registry (hls/registry.py): bitstreams/<target>/<name>.xclbin
with <name>.manifest.json.

Steps for the XRT targets:
    hls:  vitis_hls -f run_hls.tcl          (csynth, export_design -format xo)  -> hls/<name>.xo
          or, where vitis_hls is gone (Vitis 2024.2+), vitis-run --mode hls --tcl run_hls.tcl
    rtl:  vivado -mode batch -source package_xo.tcl (package_xo from kernel.xml) -> rtl/<name>.xo
    link: v++ -l -t hw --platform <xpfm> --config hls/link.cfg -o <name>.xclbin <name>.xo
V80 (flow "versal") has no XRT platform and no v++ link: the build renders the Vivado
IP-catalog export and says what to run with AMD's V80 flow.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hls import generate, proc, registry, safe_io, validate
from hls.errors import OptimusError, ToolMissing, UserError
from hls.manifest import GENERATED_FILE_MAX, load_manifest
from hls.paths import BITSTREAMS_DIR, RTL_DIR
from hls.ports import PARAM_STREAM
from hls.rtl_sources import FP_UNITS_LIST, KERNEL_LIST
from hls.spec import KernelSpec
from hls.targets import Target
from hls.vitis import netpkg, reports

KERNELS = ("hls", "rtl")
STEP_TIMEOUT_S = 48 * 3600.0  # one Vitis step (v++ --link of a 16-CU kernel takes hours; a hung tool ends here)
PLATFORM_DIRS = (Path("/opt/xilinx/platforms"),)

# The Vitis HLS command, preferred first: vitis_hls (up to Vitis 2024.1; later releases deprecate
# it) and vitis-run (2023.2+, the only one from 2024.2). Both run the same run_hls.tcl.
HLS_TOOLS = ("vitis_hls", "vitis-run")

# What to do when a tool is missing; one line each.
TOOL_HINTS = {
    "vitis_hls": "install AMD Vitis (2022.1 or later) and `source <Vitis>/settings64.sh`",
    "vitis-run": "install AMD Vitis (2022.1 or later) and `source <Vitis>/settings64.sh`",
    "vivado": "install AMD Vivado (with Vitis, 2022.1 or later) and `source <Vivado>/settings64.sh`",
    "v++": "install AMD Vitis (2022.1 or later) and `source <Vitis>/settings64.sh`",
}


class BuildFailed(OptimusError, RuntimeError):
    """A vendor tool failed or did not write what the next step needs; the message names the log."""


@dataclass
class Step:
    """One tool invocation: what it runs, where, what it reads and must write, where it logs."""

    name: str
    title: str
    argv: list[str]
    cwd: Path
    inputs: list[Path]
    outputs: list[Path]
    log: Path

    @property
    def tool(self) -> str:
        return self.argv[0]

    def shell(self) -> str:
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join(self.argv)} > {shlex.quote(str(self.log))} 2>&1"


@dataclass
class BuildPlan:
    spec: KernelSpec
    target: Target
    kernel: str
    platform: str | None  # the platform name or .xpfm path given to v++
    platform_path: Path | None  # the installed .xpfm, when found
    project_dir: Path
    run_dir: Path
    generate_project: bool  # the build renders the project itself
    project_files: list[str]
    steps: list[Step]
    xclbin: Path | None
    registry_xclbin: Path | None
    registry_manifest: Path | None
    link_cfg_text: str | None
    notes: list[str] = field(default_factory=list)
    # The user's project (--project): its manifest-listed files, verified, are copied into
    # project_dir (the run folder's project/) and built there, never in place.
    source_dir: Path | None = None
    # placement="rail": the network kernel's package (hls/vitis/netpkg.py: sim/rtl/net packaged as <name>_net.xo)
    network: netpkg.NetPackage | None = None

    @property
    def tools(self) -> list[str]:
        seen: list[str] = []
        for s in self.steps:
            if s.tool not in seen:
                seen.append(s.tool)
        return seen


def hls_tool() -> str | None:
    """The Vitis HLS command on PATH: vitis_hls if present, else vitis-run; None when neither is."""
    return next((tool for tool in HLS_TOOLS if shutil.which(tool)), None)


def hls_argv(tool: str) -> list[str]:
    """The command running run_hls.tcl's csynth and export with `tool` (one of HLS_TOOLS).

    vitis-run takes the script alone (it has no -tclargs); run_hls.tcl then runs its default
    steps, csynth and export, which are the build's.
    """
    if tool == "vitis-run":
        return ["vitis-run", "--mode", "hls", "--tcl", "run_hls.tcl"]
    return ["vitis_hls", "-f", "run_hls.tcl", "-tclargs", "csynth", "export"]


def hls_tool_line(tool: str | None) -> str:
    """The dry run's and the build's line saying which HLS command runs, and why."""
    if tool is None:
        return (f"HLS tool: NOT FOUND: neither vitis_hls nor vitis-run on PATH ({TOOL_HINTS['vitis_hls']}; "
                "the plan shows vitis_hls)")
    why = "found first" if tool == HLS_TOOLS[0] else "vitis_hls is not on PATH (Vitis 2024.2+ has only vitis-run)"
    return f"HLS tool: {tool} ({shutil.which(tool)}; {why})"


def find_platform(platform: str) -> Path | None:
    """The installed .xpfm for a platform name (or the path itself if one is given).

    v++ looks in $PLATFORM_REPO_PATHS and /opt/xilinx/platforms for <name>/<name>.xpfm;
    we look in the same places so a missing platform is caught before an hour of synthesis.
    """
    p = Path(platform)
    if p.suffix == ".xpfm":
        return p if p.is_file() else None
    dirs = [Path(d) for d in os.environ.get("PLATFORM_REPO_PATHS", "").split(":") if d]
    for base in [*dirs, *PLATFORM_DIRS]:
        for candidate in (base / platform / f"{platform}.xpfm", base / f"{platform}.xpfm"):
            if candidate.is_file():
                return candidate
    return None


def check_platform(platform: str) -> None:
    """A platform is a name (letters, digits, '_': it is joined to search folders) or a .xpfm path."""
    if platform.endswith(".xpfm"):
        if "\0" in platform or "\n" in platform:
            raise UserError(f"--platform {platform!r}: not a usable path")
        return
    validate.PLATFORM.check(platform, validate.Where("--platform"))


def default_run_dir(spec: KernelSpec, kernel: str) -> Path:
    from hls.paths import BUILD_DIR

    return BUILD_DIR / "runs" / f"{spec.target}-{spec.name}-{kernel}"


def plan_build(
    spec: KernelSpec,
    target: Target,
    *,
    kernel: str = "hls",
    run_dir: Path | None = None,
    project_dir: Path | None = None,
    platform: str | None = None,
    bitstreams_dir: Path = BITSTREAMS_DIR,
    placement: str = "sidecar",
    stream_connect: list[str] | None = None,
    param_connect: str | None = None,
) -> BuildPlan:
    """Every command and file of a build, decided before anything runs (the --dry-run output).

    `stream_connect`: for a stream-source kernel, the `<kernel>.<port>` feeding each compute unit's
    gradient stream (one per CU), written as `stream_connect` lines into the run's link.cfg.
    `param_connect`: for a kernel with the parameter stream (out_sink memory+stream), the
    `<kernel>.<port>` it feeds, written as a `stream_connect` line the same way.
    """
    if kernel not in KERNELS:
        raise UserError(f"--kernel {kernel!r}; choose one of {', '.join(KERNELS)}")
    if placement not in netpkg.PLACEMENTS:
        raise UserError(f"--placement {placement!r}; choose one of {', '.join(netpkg.PLACEMENTS)}")
    network = netpkg.package(spec, target, kernel) if placement == "rail" else None
    run_dir = Path(run_dir or default_run_dir(spec, kernel)).resolve()
    generate_project = project_dir is None
    # Tools run on a copy of the verified bytes in the run folder, never in the user's project: a
    # file planted there (a header found before the toolkit's) is never compiled.
    project = run_dir / "project"
    source = Path(project_dir).resolve() if project_dir else None
    if source is not None and source == project:
        raise UserError(f"--project {source}: is the run folder's own copy; give the project `optimusnic generate` "
                        "wrote, or another --run-dir")
    if generate_project:
        files, _ = generate.render(spec, target)
        project_files = ["manifest.json", *sorted(files)]
    else:
        manifest = load_manifest(source)
        project_files = ["manifest.json", *sorted(manifest.get("files", {}))]
    name = spec.name
    logs = run_dir / "logs"
    hls_cmd = hls_tool() or HLS_TOOLS[0]  # with neither installed the plan shows vitis_hls; check_tools stops a run
    link_cfg = project / "hls" / "link.cfg"
    link_cfg_text = None
    if generate_project:
        data = files.get("hls/link.cfg")
        link_cfg_text = data.decode() if data is not None else None
    elif source is not None and (source / "hls" / "link.cfg").is_file():
        link_cfg_text = (source / "hls" / "link.cfg").read_text()

    if placement == "rail" and param_connect:
        raise UserError("--param-connect: the rail placement connects the parameter stream to the network kernel "
                        "itself; leave --param-connect out")
    if placement == "rail" and stream_connect:
        raise UserError("--stream-connect: the rail placement connects the gradient stream to the network kernel "
                        "itself; leave --stream-connect out")
    if target.has_xrt_flow and link_cfg_text is not None and placement != "rail":  # rail: the network link.cfg
        connected = connect_streams(spec, link_cfg_text, stream_connect)
        connected = connect_param_stream(spec, connected, param_connect)
        if connected != link_cfg_text:
            link_cfg_text = connected
            link_cfg = run_dir / "link" / "link.cfg"  # the project's link.cfg plus the connections
    elif stream_connect:
        raise UserError("--stream-connect: only for a stream-source kernel on a card with a v++ link step")
    elif param_connect:
        raise UserError("--param-connect: only for a kernel with the parameter stream (--out-sink memory+stream) "
                        "on a card with a v++ link step")

    if not target.has_xrt_flow:
        if kernel != "hls":
            raise UserError(f"{target.name}: the Vivado IP-catalog export packages the HLS kernel; use --kernel hls "
                            "(the RTL kernel is in the project's rtl/ folder for manual integration)")
        hls_dir, versal_dir = project / "hls", project / "versal"
        steps = [
            Step(name="hls", title="Vitis HLS: C synthesis and export of the kernel as a Vivado IP-catalog zip",
                 argv=hls_argv(hls_cmd), cwd=hls_dir,
                 inputs=[hls_dir / f"{name}.cpp", hls_dir / "run_hls.tcl"], outputs=[hls_dir / f"{name}_ip.zip"],
                 log=logs / f"1-{hls_cmd}.log"),
            Step(name="export_ip", title="Vivado batch: add the IP to the catalog of a project for the part and "
                 "instantiate it in a block design", argv=["vivado", "-mode", "batch", "-notrace", "-source",
                 "export_ip.tcl", "-log", str(logs / "vivado.log"), "-journal", str(logs / "vivado.jou")],
                 cwd=versal_dir, inputs=[hls_dir / f"{name}_ip.zip", versal_dir / "export_ip.tcl"],
                 outputs=[versal_dir / f"{name}_bd"], log=logs / "2-export_ip.log"),
        ]
        return BuildPlan(
            spec=spec, target=target, kernel=kernel, platform=None, platform_path=None, project_dir=project,
            run_dir=run_dir, generate_project=generate_project, project_files=project_files, steps=steps,
            xclbin=None, registry_xclbin=None, registry_manifest=None, link_cfg_text=None,
            notes=versal_notes(target, project, project_files), source_dir=source,
        )

    platform = platform or target.platform
    if not platform:
        raise UserError(f"{target.name} has no XRT platform in the catalog; pass --platform NAME or PATH.xpfm")
    check_platform(platform)
    platform_path = find_platform(platform)
    steps: list[Step] = []
    if kernel == "hls":
        hls_dir = project / "hls"
        xo = hls_dir / f"{name}.xo"
        steps.append(Step(
            name="hls", title="Vitis HLS: C synthesis and export of the kernel as a Vitis .xo",
            argv=hls_argv(hls_cmd),
            cwd=hls_dir, inputs=[hls_dir / f"{name}.cpp", hls_dir / "run_hls.tcl"], outputs=[xo],
            log=logs / f"1-{hls_cmd}.log",
        ))
    else:
        rtl_dir = project / "rtl"
        xo = rtl_dir / f"{name}.xo"
        # package_xo.tcl takes the static RTL folder (sim/rtl: kernel.f, fp_units.f) and the .xo path.
        steps.append(Step(
            name="package_xo", title="Vivado batch: package the RTL kernel (kernel.xml + Verilog) as a Vitis .xo",
            argv=["vivado", "-mode", "batch", "-notrace", "-source", "package_xo.tcl",
                  "-log", str(logs / "vivado.log"), "-journal", str(logs / "vivado.jou"),
                  "-tclargs", str(RTL_DIR), str(xo)],
            cwd=rtl_dir, inputs=[rtl_dir / f"{name}.v", rtl_dir / "kernel.xml", rtl_dir / "package_xo.tcl",
                                 KERNEL_LIST, FP_UNITS_LIST],
            outputs=[xo], log=logs / "1-package_xo.log",
        ))
    link_dir = run_dir / "link"
    xclbin = link_dir / f"{name}.xclbin"
    xos = [xo]
    if network is not None:
        # The rail link: the network kernel's .xo, packaged here from sim/rtl/net, and XUP VNx's cmac_<i>.xo (built
        # with AMD's repository, copied into net/), beside the Adam kernel's.
        net_dir = run_dir / "net"
        link_cfg = net_dir / "link.cfg"
        link_cfg_text = network.link_cfg
        net_xo = net_dir / f"{network.kernel}.xo"
        steps.append(Step(
            name="package_net_xo", title="Vivado batch: package the network kernel (kernel.xml + sim/rtl/net Verilog) "
            "as a Vitis .xo",
            argv=["vivado", "-mode", "batch", "-notrace", "-source", "package_xo.tcl",
                  "-log", str(logs / "vivado_net.log"), "-journal", str(logs / "vivado_net.jou"),
                  "-tclargs", str(RTL_DIR), str(net_xo)],
            cwd=net_dir, inputs=[net_dir / f"{network.kernel}.v", net_dir / "kernel.xml", net_dir / "package_xo.tcl",
                                 netpkg.NET_LIST, *network.sources()],
            outputs=[net_xo], log=logs / "net-package_xo.log",
        ))
        xos += [net_xo, *(net_dir / f"{mac}.xo" for mac in network.mac_kernels)]
    steps.append(Step(
        name="link", title="v++ link: place and route the kernel into the platform shell (hours)",
        argv=["v++", "-l", "-t", "hw", "--platform", str(platform_path or platform), "--config", str(link_cfg),
              "--save-temps", "--temp_dir", str(link_dir / "_x"), "--report_dir", str(link_dir / "reports"),
              "--log_dir", str(link_dir / "logs"), "-o", str(xclbin), *map(str, xos)],
        cwd=link_dir, inputs=[*xos, link_cfg], outputs=[xclbin], log=logs / "2-v++_link.log",
    ))
    reg_xclbin, reg_manifest = registry.entry_paths(target.key, name, bitstreams_dir)
    notes = []
    if target.unconfirmed:
        notes.append(f"catalog facts for {target.name} marked unconfirmed: see `optimusnic targets --json`")
    if network is not None:
        if network.missing:
            notes.append(f"{network.missing}; a real build stops before any tool runs")
        notes += [
            f"rail placement: NOT BUILT: no network bitstream is claimed; {network.kernel}.xo is packaged by the "
            "package_net_xo step from the simulated RTL, never run with Vivado/v++ by this toolkit",
            f"rail placement: MAC kernel(s) {', '.join(network.mac_kernels)} from {netpkg.MAC_SOURCE}, "
            f"expected in {run_dir / 'net'} (a real build stops before any tool runs without them)",
            *network.notes,
        ]
    return BuildPlan(
        spec=spec, target=target, kernel=kernel, platform=platform, platform_path=platform_path, project_dir=project,
        run_dir=run_dir, generate_project=generate_project, project_files=project_files, steps=steps, xclbin=xclbin,
        registry_xclbin=reg_xclbin, registry_manifest=reg_manifest, link_cfg_text=link_cfg_text, notes=notes,
        source_dir=source, network=network,
    )


STREAM_SOURCE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


def connect_streams(spec: KernelSpec, text: str, sources: list[str] | None) -> str:
    """link.cfg `text` with each compute unit's gradient stream connected: already (a `stream_connect`
    line ending at `<name>_<cu>.grad`) or to `sources[cu]`. A stream-source kernel with nothing
    connected would link with its input tied off, so that is refused here."""
    sources = list(sources or [])
    if spec.grad_source != "stream":
        if sources:
            raise UserError(f"--stream-connect: {spec.name} reads its gradients from memory (--grad-source memory); "
                            "it has no stream to connect")
        return text
    name, cus = spec.name, spec.compute_units
    sinks = [f"{name}_{cu + 1}.grad" for cu in range(cus)]
    active = [ln.replace(" ", "") for ln in text.splitlines() if ln.strip().startswith("stream_connect")]
    open_sinks = [sink for sink in sinks if not any(ln.endswith(":" + sink) for ln in active)]
    if not sources:
        if open_sinks:
            raise UserError(f"{name} takes its gradients on an AXI4-Stream and nothing is connected to "
                            f"{', '.join(open_sinks)}: pass --stream-connect <kernel>.<port> (the network kernel's "
                            "output), once per compute unit")
        return text
    if len(sources) != len(open_sinks):
        raise UserError(f"--stream-connect: {len(sources)} given, {len(open_sinks)} gradient stream(s) to connect "
                        f"({', '.join(open_sinks) or 'none'}): give one <kernel>.<port> per compute unit")
    for src in sources:
        if not STREAM_SOURCE.fullmatch(src):
            raise UserError(f"--stream-connect {src!r}: expected <kernel>.<port>, e.g. network_1.grad_out")
    lines = text.rstrip("\n").splitlines()
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("nk=")), len(lines))
    added = [f"stream_connect={src}:{sink}" for src, sink in zip(sources, open_sinks, strict=True)]
    note = "# gradient streams (optimusnic build --stream-connect)"
    return "\n".join([*lines[:at], note, *added, *lines[at:]]) + "\n"


def connect_param_stream(spec: KernelSpec, text: str, sink: str | None) -> str:
    """link.cfg `text` with the parameter stream connected: already (a `stream_connect` line from
    `<name>_1.param`) or to `sink`. An unconnected output would stall the kernel on its first beat
    (it waits for TREADY), so that is refused here."""
    if not spec.param_stream:
        if sink:
            raise UserError(f"--param-connect: {spec.name} writes its parameters to memory only (--out-sink memory); "
                            "it has no stream to connect")
        return text
    source = f"{spec.name}_1.{PARAM_STREAM}"
    active = [ln.replace(" ", "") for ln in text.splitlines() if ln.strip().startswith("stream_connect")]
    connected = any(ln.startswith(f"stream_connect={source}:") for ln in active)
    if sink is None:
        if not connected:
            raise UserError(f"{spec.name} also sends its updated parameters on an AXI4-Stream and nothing takes "
                            f"{source}: pass --param-connect <kernel>.<port> (the network kernel's all-gather input); "
                            "unconnected, the kernel would stall on its first beat")
        return text
    if connected:
        raise UserError(f"--param-connect: {source} is already connected in the project's link.cfg")
    if not STREAM_SOURCE.fullmatch(sink):
        raise UserError(f"--param-connect {sink!r}: expected <kernel>.<port>, e.g. network_1.s_axis_param")
    lines = text.rstrip("\n").splitlines()
    at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("nk=")), len(lines))
    note = "# parameter stream (optimusnic build --param-connect)"
    return "\n".join([*lines[:at], note, f"stream_connect={source}:{sink}", *lines[at:]]) + "\n"


def versal_notes(target: Target, project: Path, files: list[str]) -> list[str]:
    versal = [f for f in files if f.startswith("versal/")]
    lines = [
        f"{target.name} uses AMD's Versal flow, not XRT/v++: the toolkit exports the HLS kernel as Vivado "
        "IP (steps above: hls/<name>_ip.zip, then a Vivado project with the IP in its catalog and a block "
        "design in versal/<name>_bd/). It does not build, load or run a V80 image.",
        "Vivado IP-catalog export files: "
        + (", ".join(str(project / f) for f in versal) if versal else "(no versal/ files rendered)"),
        "What you must then run with AMD's V80 flow (AVED / SLASH):",
        "  1. in the V80 base design, connect the kernel's m_axi ports to the NoC / HBM channels listed in "
        "versal/NOTE.md (from sizing), its s_axilite port to the host control path, ap_clk/ap_rst_n to the "
        "user clock and reset",
        "  2. build the device image (PDI / vrtbin) with AMD's Vivado + slashkit flow and load it with VRT / v80-smi",
        "  3. program the kernel through the register map in manifest.json (ap_ctrl_hs at 0x00); the toolkit's "
        "driver has no VRT backend, so nothing here runs on a V80 card",
    ]
    return lines


def plan_to_dict(plan: BuildPlan) -> dict[str, Any]:
    """The dry run as data: steps with argv, cwd, inputs, outputs and log; registry paths; tool status."""
    return {
        "spec": plan.spec.to_dict(),
        "target": plan.target.key,
        "kernel": plan.kernel,
        "platform": plan.platform,
        "platform_path": str(plan.platform_path) if plan.platform_path else None,
        "run_dir": str(plan.run_dir),
        "project_dir": str(plan.project_dir),
        "generate_project": plan.generate_project,
        "project_files": plan.project_files,
        "steps": [{"name": s.name, "title": s.title, "argv": s.argv, "cwd": str(s.cwd), "log": str(s.log),
                   "inputs": [str(p) for p in s.inputs], "outputs": [str(p) for p in s.outputs]} for s in plan.steps],
        "xclbin": str(plan.xclbin) if plan.xclbin else None,
        "registry": {"xclbin": str(plan.registry_xclbin) if plan.registry_xclbin else None,
                     "manifest": str(plan.registry_manifest) if plan.registry_manifest else None},
        "link_cfg": plan.link_cfg_text,
        "tools": {tool: shutil.which(tool) for tool in plan.tools},
        "notes": plan.notes,
        **({"network": {"kernel": plan.network.kernel, "mac_kernels": plan.network.mac_kernels, "built": False,
                        "complete": plan.network.missing is None, "missing": plan.network.missing,
                        "manifest": plan.network.manifest, "generics": plan.network.generics,
                        "chunk_packets_bound": plan.network.chunk_packets_bound,
                        "max_chunk_elems": plan.network.max_chunk_elems,
                        "kernel_xml": plan.network.kernel_xml, "package_xo_tcl": plan.network.package_tcl,
                        "files": sorted(plan.network.files())}} if plan.network is not None else {}),
    }


def format_plan(plan: BuildPlan, *, check: bool = True) -> str:
    """The dry-run text: every command and file, in order."""
    s, t = plan.spec, plan.target
    lines = [
        f"optimusnic build (dry run): {t.name} ({t.key}), {plan.kernel.upper()} kernel {s.name}: "
        f"{s.optimizer}, {s.lanes} lanes x {s.compute_units} CU, grad {s.grad_dtype}/{s.grad_source}, "
        f"out {s.out_dtype}, clock {s.clock_mhz or t.kernel_clock_mhz:g} MHz",
        f"run folder: {plan.run_dir}",
    ]
    if s.param_stream:
        lines[0] += f", out_sink {s.out_sink}"
    n = 0
    if plan.generate_project:
        lines.append(f"[{n}] generate the project (optimusnic generate) into {plan.project_dir}:")
    else:
        lines.append(f"[{n}] use the generated project {plan.source_dir}: its manifest-listed files, verified, "
                     f"copied into {plan.project_dir}:")
    lines += [f"      {plan.project_dir / f}" for f in plan.project_files]
    for step in plan.steps:
        n += 1
        lines.append(f"[{n}] {step.name}: {step.title}")
        lines.append(f"      $ {step.shell()}")
        lines.append(f"      reads:  {', '.join(str(p) for p in step.inputs)}")
        lines.append(f"      writes: {', '.join(str(p) for p in step.outputs)}")
    if plan.xclbin is None:
        if check:
            lines.append("tools (checked before a real run):")
            lines += [f"      {tool_status(tool)}" for tool in plan.tools]
        lines += ["", *plan.notes]
        return "\n".join(lines)
    n += 1
    lines.append(f"[{n}] report: parse the vendor reports into {plan.run_dir / 'report' / 'summary.json'}")
    lines.append(f"      {plan.run_dir / 'link' / 'reports'}/**/impl_1_*timing_summary*routed*.rpt (timing met, "
                 "achieved kernel clock)")
    lines.append(f"      {plan.run_dir / 'link' / 'reports'}/**/impl_1_kernel_util_routed.rpt (kernel resources)")
    if plan.kernel == "hls":
        lines.append(f"      {plan.project_dir / 'hls'}/**/syn/report/csynth.xml (HLS estimate)")
        lines.append(f"      after step 1: {plan.project_dir / 'hls' / 'vitis_hls.log'} must show AXI bursts "
                     "inferred on every m_axi bundle (HLS 214-115), or the build stops")
    n += 1
    lines.append(f"[{n}] register: copy {plan.xclbin} -> {plan.registry_xclbin}")
    lines.append(f"      write {plan.registry_manifest} (spec, sizing, register map, banks, xclbin sha256, "
                 "report summary)")
    if plan.network is not None:
        net, regs = plan.network, plan.network.manifest
        state = "link complete" if net.missing is None else "INCOMPLETE: a real build stops"
        lines.append(f"network kernel {net.kernel} (rail placement; {state}; NOT BUILT: no bitstream claimed):")
        lines.append(f"      {plan.run_dir / 'net'}/: " + ", ".join(net.files())
                     + f" (written by a real build; package_net_xo packages sim/rtl/net/{netpkg.NET_TOP}.v)")
        lines.append("      parameters: " + ", ".join(f"{k}={v}" for k, v in net.generics.items()))
        lines.append(f"      chunk bound: under {net.chunk_packets_bound} packets per flow, up to "
                     f"{net.max_chunk_elems:,} elements in hop-major order (a ring of these cards deadlocks at "
                     "or over it); any chunk in round-major order (`segment`, two-phase steps)")
        lines.append("      registers: " + ", ".join(f"{a['name']}@0x{a['offset']:03X}" for a in regs["args"]))
        ro = regs["readonly"]
        lines.append(f"      read-only: status@0x{ro[0]['offset']:03X}, {len(ro) - 1} 64-bit counters "
                     f"0x{ro[1]['offset']:03X}-0x{ro[-1]['offset'] + 7:03X} ({', '.join(r['name'] for r in ro[1:])})")
        lines.append("      streams: " + ", ".join(f"{s['name']} ({s['to']})" for s in regs["streams"]))
        lines.append(f"      MAC: {', '.join(net.mac_kernels)} from {netpkg.MAC_SOURCE}")
    if plan.network is not None and plan.link_cfg_text is not None:
        lines.append(f"link config ({plan.run_dir / 'net' / 'link.cfg'}):")
        lines += [f"      {ln}" for ln in plan.link_cfg_text.rstrip().splitlines()]
    elif plan.link_cfg_text is not None:
        lines.append(f"link config ({connected_link_cfg(plan) or plan.project_dir / 'hls' / 'link.cfg'}):")
        lines += [f"      {ln}" for ln in plan.link_cfg_text.rstrip().splitlines()]
    else:
        lines.append("link config: hls/link.cfg is not rendered by the templates yet")
    if check:
        lines.append("tools (checked before a real run):")
        lines += [f"      {tool_status(tool)}" for tool in plan.tools]
        lines.append(f"      platform {plan.platform}: "
                     f"{plan.platform_path or 'NOT INSTALLED (' + platform_hint(plan) + ')'}")
    lines += [f"note: {x}" for x in plan.notes]
    return "\n".join(lines)


def tool_status(tool: str) -> str:
    """One line of the dry run's tool check: where `tool` is, or what to install."""
    if tool in HLS_TOOLS:
        return hls_tool_line(hls_tool())
    return f"{tool}: {shutil.which(tool) or 'NOT FOUND (' + TOOL_HINTS.get(tool, 'install it') + ')'}"


def platform_hint(plan: BuildPlan) -> str:
    where = ", ".join([*[d for d in os.environ.get("PLATFORM_REPO_PATHS", "").split(":") if d],
                       *map(str, PLATFORM_DIRS)])
    return (f"looked for <name>/<name>.xpfm in {where}; install the {plan.target.name} development platform "
            "from AMD or pass --platform PATH.xpfm")


def check_tools(plan: BuildPlan) -> None:
    """Stop with one line naming the first missing tool, then a missing platform."""
    for tool in plan.tools:
        if tool in HLS_TOOLS and hls_tool() is None:
            raise ToolMissing(f"neither vitis_hls nor vitis-run found on PATH: {TOOL_HINTS[tool]} "
                              "(`optimusnic build --dry-run` shows the flow without it)")
        if shutil.which(tool) is None:
            raise ToolMissing(f"{tool} not found on PATH: {TOOL_HINTS.get(tool, 'install it')} "
                              "(`optimusnic build --dry-run` shows the flow without it)")
    if plan.xclbin is not None and plan.platform_path is None:
        raise ToolMissing(f"platform {plan.platform} is not installed: {platform_hint(plan)}")


def _tail(path: Path, n: int = 1) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def run_step(step: Step) -> None:
    missing = [p for p in step.inputs if not p.exists()]
    if missing:
        raise BuildFailed(f"{step.name}: missing input {missing[0]} (is the project fully generated?)")
    step.cwd.mkdir(parents=True, exist_ok=True)
    step.log.parent.mkdir(parents=True, exist_ok=True)
    # An earlier build's outputs and log go first: a tool that exits 0 without writing must not leave
    # the old bitstream to be registered under the new spec (and the log is a new file, not a link).
    for old in (*step.outputs, step.log):
        if old.is_symlink() or old.is_file():
            old.unlink()
        elif old.is_dir():
            shutil.rmtree(old)
    with open(step.log, "x") as log:
        log.write(f"# {step.shell()}\n")
        log.flush()
        result = proc.run(step.argv, f"{step.name}: {step.tool}", timeout=proc.timeout_s(STEP_TIMEOUT_S),
                          cwd=step.cwd, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise BuildFailed(f"{step.name}: {step.tool} exited with status {result.returncode}; see {step.log}"
                          f" (last line: {_tail(step.log) or 'empty'})")
    for out in step.outputs:
        if not out.exists():
            raise BuildFailed(f"{step.name}: {step.tool} finished but did not write {out}; see {step.log}")


def hls_bundles(manifest: dict[str, Any]) -> list[str]:
    """The m_axi bundles of the HLS kernel: one `gmem_<arg>` per pointer argument of the register
    map (the templates' convention), so the check follows the ports when they are renamed."""
    return [f"gmem_{a['name']}" for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]


def check_hls_bursts(step: Step, manifest: dict[str, Any]) -> dict[str, Any]:
    """After csynth: stop the build if Vitis HLS lost the AXI bursts of a port (hls/vitis/reports.py).

    An hour of v++ link is wasted on a kernel whose ports move one beat per request; the
    synthesis log says so in seconds. Reads the tool's own vitis_hls.log (else the step's
    captured output) and the csynth.rpt burst tables next to it; returns the burst report.
    """
    tool_log = step.cwd / "vitis_hls.log"
    log = tool_log if tool_log.is_file() else step.log
    texts = [log.read_text(errors="replace")]
    texts += [r.read_text(errors="replace") for r in sorted(step.cwd.glob("**/syn/report/*csynth.rpt"))]
    text, bundles = "\n".join(texts), hls_bundles(manifest)
    try:
        reports.check_bursts(text, bundles)
    except UserError as exc:
        raise BuildFailed(f"{step.name}: {exc}; see {log}") from exc
    return {"log": str(log), **reports.burst_report(text, bundles)}


def summarize(plan: BuildPlan) -> dict[str, Any]:
    """Parse what the tools wrote into the summary the registry keeps."""
    spec = plan.spec
    clock = float(spec.clock_mhz or plan.target.kernel_clock_mhz)
    link = reports.summarize_link(plan.run_dir / "link", spec.name, clock)
    summary: dict[str, Any] = {
        "kernel": plan.kernel,
        "requested_mhz": clock,
        "timing_met": link["timing"]["timing_met"] if link["timing"] else None,
        "achieved_mhz": link["timing"]["achieved_mhz"] if link["timing"] else None,
        "wns_ns": link["timing"]["wns_ns"] if link["timing"] else None,
        "resources": link["resources"]["kernel"] if link["resources"] else None,
        "link": link,
        "hls": None,
    }
    if plan.kernel == "hls":
        csynth = reports.find_csynth_xml(plan.project_dir / "hls", spec.name)
        if csynth:
            summary["hls"] = reports.parse_csynth_xml(csynth)
    missing = [k for k in ("timing", "resources") if link[k] is None]
    summary["missing_reports"] = missing
    return summary


def connected_link_cfg(plan: BuildPlan) -> Path | None:
    """The run's own link.cfg (the project's plus --stream-connect lines), or None when v++ uses the project's."""
    cfg = plan.run_dir / "link" / "link.cfg"
    return cfg if any(cfg in step.inputs for step in plan.steps) else None


def copy_verified_project(source: Path, dest: Path) -> None:
    """`dest` := the manifest-listed files of project `source` and its manifest, nothing else: each
    file read once and checked against the sha256 of the (verified) manifest before it is written."""
    manifest = load_manifest(source)
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.is_dir():
        shutil.rmtree(dest)  # an earlier run's copy and every tool output in it
    for rel, want in sorted(manifest["files"].items()):
        data = safe_io.read_bytes(safe_io.inside(source, rel, "project file"), GENERATED_FILE_MAX, "project file")
        if hashlib.sha256(data).hexdigest() != want:
            raise UserError(f"{source / rel}: changed since the project was verified (sha256 differs from its "
                            "manifest); regenerate the project (optimusnic generate)")
        out = safe_io.inside(dest, rel, "project file")
        out.parent.mkdir(parents=True, exist_ok=True)
        safe_io.atomic_write(out, data)
    safe_io.atomic_write(dest / generate.MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def write_net_package(plan: BuildPlan) -> None:
    """The rail package's files into the run folder's net/."""
    assert plan.network is not None
    safe_io.check_writable_dir(plan.run_dir, "run folder")
    for rel, text in plan.network.files().items():
        out = safe_io.inside(plan.run_dir / "net", rel, "network package file")
        out.parent.mkdir(parents=True, exist_ok=True)
        safe_io.atomic_write(out, text)


def run_build(plan: BuildPlan, *, bitstreams_dir: Path = BITSTREAMS_DIR, echo: Any = print) -> dict[str, Any] | None:
    """Run the plan: generate, check tools, run each step with its log, parse reports, register.

    Returns the registry entry, or None for the Versal flow (IP export only, nothing to register).
    A rail build whose link is incomplete (`NetPackage.missing`) writes its package and stops here, before any
    tool runs; a complete one needs XUP VNx's cmac_<i>.xo in the run's net/ before any tool runs.
    """
    if plan.network is not None and plan.network.missing:
        write_net_package(plan)
        raise BuildFailed(plan.network.missing)
    check_tools(plan)
    if plan.network is not None:
        macs = [plan.run_dir / "net" / f"{mac}.xo" for mac in plan.network.mac_kernels]
        absent = [m for m in macs if not m.is_file()]
        if absent:
            raise BuildFailed(f"rail placement: {absent[0]} not found: build the MAC kernel from {netpkg.MAC_SOURCE} "
                              f"and copy it there")
    safe_io.check_writable_dir(plan.run_dir, "run folder")
    if plan.xclbin is not None:
        safe_io.check_writable_dir(bitstreams_dir, "--registry")
        registry.entry_paths(plan.target.key, plan.spec.name, bitstreams_dir)  # inside the registry, checked now
    if plan.generate_project:
        echo(f"[0] generate: {plan.project_dir}")
        generate.write_project(plan.spec, plan.project_dir, plan.target)
    elif plan.source_dir is not None:
        echo(f"[0] copy the verified project {plan.source_dir} into {plan.project_dir}")
        copy_verified_project(plan.source_dir, plan.project_dir)
    if plan.network is not None:
        echo(f"[0] network kernel package: {plan.run_dir / 'net'}")
        write_net_package(plan)
    connected_cfg = connected_link_cfg(plan)
    if connected_cfg is not None and plan.link_cfg_text is not None:
        echo(f"[0] link config with the gradient stream connections: {connected_cfg}")
        connected_cfg.parent.mkdir(parents=True, exist_ok=True)
        safe_io.atomic_write(connected_cfg, plan.link_cfg_text)
    manifest = load_manifest(plan.project_dir)
    bursts = None
    for i, step in enumerate(plan.steps, 1):
        if step.name == "hls":
            echo(hls_tool_line(step.tool))
            # The burst check reads the tool's own vitis_hls.log when it writes one; an earlier run's must not stand in.
            (step.cwd / "vitis_hls.log").unlink(missing_ok=True)
        echo(f"[{i}] {step.name}: {shlex.join(step.argv)}  (log: {step.log})")
        run_step(step)
        if step.name == "hls":
            bursts = check_hls_bursts(step, manifest)
    if plan.xclbin is None:
        echo("\n".join(plan.notes))
        return None
    summary = summarize(plan)
    summary["hls_bursts"] = bursts
    report_dir = plan.run_dir / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    safe_io.atomic_write(report_dir / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    build_info = {
        "kernel": plan.kernel,
        "platform": plan.platform,
        "platform_path": str(plan.platform_path) if plan.platform_path else None,
        "run_dir": str(plan.run_dir),
        "commands": [{"step": s.name, "cwd": str(s.cwd), "argv": s.argv, "log": str(s.log)} for s in plan.steps],
        "tools": {tool: shutil.which(tool) for tool in plan.tools},
    }
    extra = [p for p in (plan.xclbin.with_name(plan.xclbin.name + ".info"),) if p.is_file()]
    extra += [Path(p) for p in summary["link"]["reports"].values()]
    if summary["hls"]:
        extra.append(Path(summary["hls"]["report"]))
    entry = registry.register(plan.xclbin, manifest, build_info, summary, root=bitstreams_dir, extra_files=extra)
    echo(f"registered {entry['paths']['xclbin']} ({entry['xclbin']['sha256'][:12]}...)")
    return entry
