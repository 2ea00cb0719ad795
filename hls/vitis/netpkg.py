"""Packaging of the network kernel for the rail placement (design.md section 8.4; issue 26 point 5).

`optimusnic build --placement rail` links three kinds of kernels: the Adam kernel (the generated
project), the network kernel `<name>_net` that runs the ring protocol (`hls.net.card`), and the MAC,
AMD's open XUP VNx CMAC kernel `cmac_<i>` (github.com/Xilinx/xup_vitis_network_example, Ethernet/,
streams M_AXIS = received frames, S_AXIS = frames to transmit, as its config_files/*.ini connect them).

The network kernel is the RTL top `sim/rtl/net/onic_net_kernel.v` as it is (its files in
`net_kernel.f`), packaged as the Adam RTL kernel is: a thin generated wrapper `<name>_net.v` that
names the module after the kernel and fixes its parameters (wire and parameter dtype, buffer sizes
from sizing's payload and window, STRIPES from sizing's lgrad and gather stripes) and gives each
stripe its own m_axi port (`m_axi_lgrad<k>`, `m_axi_gather<k>`: the top packs stripe k's signals at
[k x W +: W] of its `m_axi_lgrad0_*` / `m_axi_gather0_*` ports), `kernel.xml` with every port of the
wrapper, `package_xo.tcl` in the lines of AMD's rtl_kernels examples (`vivado -mode batch` ->
`<name>_net.xo`), and the rail link.cfg with the `stream_connect` lines and one `sp=` line per stripe
port on the bank sizing plans for it. The package describes what the RTL has: sizing's lgrad and
gather stripes (a power of two), one ring port, one gradient and one parameter stream. What the RTL cannot run (the
two-phase step, gradients from memory, no parameter stream, other dtypes, more ring ports) makes the
link incomplete: the dry run shows everything with the reason, a real build stops in one line
before any tool runs (`NetPackage.missing`). Nothing here claims a built network bitstream.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hls import generate, layout, net_regmap, sizing
from hls.errors import UserError
from hls.net import ring_bound
from hls.paths import RTL_DIR
from hls.ports import AXIS_PORTS, GRAD_STREAM, PARAM_STREAM
from hls.rtl_sources import read_filelist
from hls.spec import DTYPE_BYTES, KernelSpec
from hls.targets import Target

PLACEMENTS = sizing.PLACEMENTS
MAC_KERNEL = "cmac"  # XUP VNx: Ethernet/ packages cmac_0.xo / cmac_1.xo (one per QSFP28 interface)
MAC_SOURCE = "github.com/Xilinx/xup_vitis_network_example (Ethernet/: make INTERFACE=<i> -> cmac_<i>.xo)"

NET_RTL = RTL_DIR / "net"
NET_TOP = "onic_net_kernel"
NET_TOP_FILE = NET_RTL / f"{NET_TOP}.v"
NET_LIST = NET_RTL / "net_kernel.f"
# What the RTL top has (sim/rtl/net/README.md "Network kernel"): STRIPES lgrad and gather stripes (a power of
# two up to layout.RING_MAX_STRIPES, as sizing plans them), one ring port.
RTL_RING_PORTS = 1
RTL_GRAD_STREAMS = 1
WIRE_DTYPES = ("fp32", "bf16")  # WIRE_BF16 / PARAM_BF16: 0 fp32, 1 bf16
# Receive slots (credit) of the packaged top: RX_SLOT_LOG2 of onic_net_kernel's defaults.
RX_SLOT_LOG2 = ring_bound.PACKAGED_RX_SLOT_LOG2

_PORT = re.compile(r"^\s*(input|output)\s+wire\s*(?:\[(?:(\d+)|STRIPES(?:\*(\d+))?-1):0\])?\s*(\w+)\s*,?\s*"
                   r"(?://.*)?$")
_STRIPED = re.compile(r"^(m_axi_(?:lgrad|gather))0_(\w+)$")


@dataclass(frozen=True)
class RtlPort:
    name: str
    direction: str  # "input" / "output"
    width: int
    top: str = ""  # the top's port this one is (a stripe of); "" : the same name
    stripe: int = 0  # which stripe of `top` (its bits [stripe x width +: width])


def rtl_ports(path: Path = NET_TOP_FILE, stripes: int = 1) -> list[RtlPort]:
    """The ANSI port list of a Verilog top (one `input|output wire [N:0] name` per line, as the
    network RTL writes them), with STRIPES = `stripes`: a packed per-stripe port `m_axi_<s>0_<sig>`
    ([STRIPES*W-1:0]) is one port per stripe, `m_axi_<s><k>_<sig>` of W bits, as the packaged wrapper
    names them (with one stripe the top's own names); refused when the header has a line this reader
    does not follow."""
    text = Path(path).read_text()
    head = re.search(r"\)\s*\(\s*\n(.*?)\n\s*\);", text, re.S)
    if head is None:
        raise UserError(f"{path}: no ANSI port list found")
    ports = []
    for line in head.group(1).splitlines():
        code = re.sub(r"/\*.*?\*/", "", line).strip()
        if not code or code.startswith("//"):
            continue
        m = _PORT.match(code)
        if m is None:
            raise UserError(f"{path}: port line not understood: {code!r}")
        direction, fixed, each, name = m.group(1), m.group(2), m.group(3), m.group(4)
        if fixed is not None or "STRIPES" not in code:
            ports.append(RtlPort(name, direction, int(fixed) + 1 if fixed else 1))
            continue
        striped = _STRIPED.match(name)
        if striped is None:
            raise UserError(f"{path}: a STRIPES-wide port that is no lgrad/gather stripe: {code!r}")
        for k in range(stripes):
            ports.append(RtlPort(f"{striped.group(1)}{k}_{striped.group(2)}", direction, int(each or 1), top=name,
                                 stripe=k))
    return ports


def rtl_connections(ports: list[RtlPort]) -> list[tuple[str, str]]:
    """(top port, the wrapper's expression for it): a packed port is the concatenation of its stripes'
    ports, the highest stripe first."""
    out: dict[str, list[RtlPort]] = {}
    for p in ports:
        out.setdefault(p.top or p.name, []).append(p)
    return [(top, parts[0].name if len(parts) == 1 and not parts[0].top else
             "{" + ", ".join(q.name for q in sorted(parts, key=lambda q: -q.stripe)) + "}")
            for top, parts in out.items()]


def bus_interfaces(ports: list[RtlPort]) -> dict[str, list[RtlPort]]:
    """The ports grouped by interface as Vivado's packager infers them (`<busif>_<signal>`);
    ap_clk, ap_rst_n and interrupt stand alone."""
    groups: dict[str, list[RtlPort]] = {}
    for p in ports:
        busif = p.name.rsplit("_", 1)[0] if p.name.startswith(("s_axi_", "m_axi_", "s_axis_", "m_axis_")) else p.name
        groups.setdefault(busif, []).append(p)
    return groups


def ring_stripes(network: Any) -> int:
    """The lgrad and gather stripes sizing plans (one count for both: the RTL's STRIPES)."""
    counts = {s.stripes for s in network.streams}
    if len(counts) != 1 or not layout.ring_stripes_ok(next(iter(counts))):
        raise UserError(f"rail placement: lgrad and gather stripes {sorted(counts)}: the network RTL takes one "
                        f"power of two from 1 to {layout.RING_MAX_STRIPES} for both")
    return counts.pop()


def rtl_generics(spec: KernelSpec, network: Any) -> dict[str, int]:
    """onic_net_kernel's parameters for `spec` and sizing's ring plan (payload bytes, window, stripes)."""
    frame_beats = math.ceil(network.payload_bytes / 64)
    return {
        "STRIPES": ring_stripes(network),
        "WIRE_BF16": int(spec.grad_dtype == "bf16"),
        "PARAM_BF16": int(spec.out_dtype == "bf16"),
        # 2 x the slots + 1 frames: two flows of a peer at once, each granted the slots (onic_net_kernel)
        "RX_PAYLOAD_DEPTH_LOG2": ((2 * 2 ** RX_SLOT_LOG2 + 1) * frame_beats - 1).bit_length(),
        "RX_SLOT_LOG2": RX_SLOT_LOG2,
        "RX_FRAME_BEATS": frame_beats,
        "TX_SLOTS_LOG2": ring_bound.packaged_slots_log2(network.window_packets)[0],
        "TX_BEATS_LOG2": (frame_beats - 1).bit_length(),
        "TX_URAM": 1,  # every XRT card of the catalog is UltraScale+ with UltraRAM
    }


def link_missing(spec: KernelSpec, network: Any, grad_streams: int) -> str | None:
    """Why the rail link would not run a ring step with the RTL as it is, or None when it would."""
    name = net_regmap.kernel_name(spec.name)
    if spec.grad_dtype not in WIRE_DTYPES:
        return (f"rail placement: {name} carries fp32 or bf16 gradients on the wire; --grad-dtype {spec.grad_dtype} "
                "has no network RTL")
    if spec.out_dtype not in WIRE_DTYPES:
        return f"rail placement: {name} gathers fp32 or bf16 parameters; --out-dtype {spec.out_dtype} is neither"
    if spec.grad_source != "stream":
        return (f"rail placement: {name} feeds the Adam kernel's gradient stream (--grad-source stream) in every "
                "step: the reduced chunk as it arrives, or in a two-phase step the owner's sum read back from card "
                "memory; an Adam kernel reading its gradients from memory has no network RTL")
    if not spec.param_stream:
        return (f"rail placement: the all-gather starts from the Adam kernel's parameter stream, which {spec.name} "
                f"does not have: build it with --out-sink memory+stream (else {name}.s_axis_param0 is unconnected "
                "and no step ends)")
    if grad_streams != RTL_GRAD_STREAMS:
        return (f"rail placement: {name} feeds {RTL_GRAD_STREAMS} Adam compute unit; {spec.name} has {grad_streams}")
    if network.ring_ports != RTL_RING_PORTS:
        return f"rail placement: {name} has {RTL_RING_PORTS} ring port; sizing planned {network.ring_ports}"
    return None


@dataclass
class NetPackage:
    kernel: str
    manifest: dict[str, Any]  # the network manifest section (hls.net_regmap.to_manifest), the RTL's map
    kernel_xml: str
    wrapper_v: str  # <kernel>.v: the packaged top, onic_net_kernel with its parameters fixed
    package_tcl: str  # package_xo.tcl: vivado -mode batch -> <kernel>.xo
    link_cfg: str  # the Adam kernel's link.cfg with the network kernel, the MACs and the stream_connect lines
    mac_kernels: list[str]
    generics: dict[str, int]
    missing: str | None  # why a real build cannot link a working ring (None: the link is complete)
    notes: list[str]
    # packets per flow at which a ring of these kernels deadlocks (transmit + receive slots of the generics, in
    # hop-major order: hls.net.ring_bound) and the largest chunk under it at the package's payload and dtypes
    chunk_packets_bound: int = 0
    max_chunk_elems: int = 0

    def files(self) -> dict[str, str]:
        """The package's files, relative to the run folder's net/ (deterministic text)."""
        return {"kernel.xml": self.kernel_xml, "network.json": json.dumps(self.manifest, indent=2, sort_keys=True)
                + "\n", "link.cfg": self.link_cfg, f"{self.kernel}.v": self.wrapper_v,
                "package_xo.tcl": self.package_tcl}

    def sources(self) -> list[Path]:
        """The static Verilog the package reads (net_kernel.f's files, in order)."""
        return read_filelist(NET_LIST)


def package(spec: KernelSpec, target: Target, kernel: str) -> NetPackage:
    """Size the rail placement for `spec` and render the network kernel's package and the rail link.cfg."""
    if not target.has_xrt_flow:
        raise UserError(f"{target.name}: the rail placement links with v++ and XUP VNx; {target.name} has no XRT flow")
    rail = sizing.size_rail(spec, target)
    network = rail.network
    if network is None:  # sizing always plans the ring for placement="rail"
        raise UserError("rail placement: sizing planned no ring streams")
    side = sizing.size_spec(spec, target)  # the Adam kernel as the project builds it
    grad_streams = len(side.assignments) if spec.grad_source == "stream" else 0
    # The RTL reads lgrad and writes gather through sizing's stripes: the map, the ports and the sp= lines
    # are those of every stripe, each on the channel sizing planned for it.
    rtl_plan = network
    generics = rtl_generics(spec, network)
    manifest = net_regmap.to_manifest(spec.name, rtl_plan, RTL_GRAD_STREAMS, param_streams=1,
                                      rx_slots=2 ** generics["RX_SLOT_LOG2"])
    name = str(manifest["kernel"])
    ports = rtl_ports(stripes=generics["STRIPES"])
    env = generate.environment()
    ctx = generate.context(spec, target, side)
    net_ctx = {"kernel": name, "top": NET_TOP, "ports": ports, "busifs": bus_interfaces(ports),
               "connections": rtl_connections(ports), "generics": generics, "list": f"net/{NET_LIST.name}"}
    kernel_xml = env.get_template("net/kernel.xml.j2").render(**ctx, net=manifest, rtl=net_ctx)
    wrapper_v = env.get_template("net/wrapper.v.j2").render(**ctx, rtl=net_ctx)
    package_tcl = env.get_template("net/package_xo.tcl.j2").render(**ctx, net=manifest, rtl=net_ctx)
    pointers = [a["name"] for a in manifest["args"] if a["kind"] == "pointer"]
    banks = [b for stream in rtl_plan.streams for b in stream.banks]
    sp = [{"port": f"m_axi_{p}", "bank": b} for p, b in zip(pointers, banks, strict=True) if b is not None]
    missing = link_missing(spec, network, grad_streams)
    link_ctx = {"kernel": name, "ring_ports": RTL_RING_PORTS, "sp": sp,
                "adam_grad_port": GRAD_STREAM if kernel == "hls" else AXIS_PORTS[GRAD_STREAM],
                "adam_param_port": PARAM_STREAM if kernel == "hls" else AXIS_PORTS[PARAM_STREAM],
                "complete": missing is None}
    link_cfg = env.get_template("hls/link.cfg.j2").render(**ctx, network=link_ctx)
    macs = [f"{MAC_KERNEL}_{i}" for i in range(RTL_RING_PORTS)]
    notes = []
    if generics["STRIPES"] > 1:
        notes.append(
            f"rail placement: {name} reads lgrad and writes gather through {generics['STRIPES']} stripes each "
            f"(m_axi_lgrad0..{generics['STRIPES'] - 1}, m_axi_gather0..{generics['STRIPES'] - 1}: hls/layout.py's "
            "rule over each whole buffer, the host writes lgrad with layout.split and reads gather with "
            "layout.join); a two-phase step's sum (sum0) goes through m_axi_lgrad0 and m_axi_gather0 only")
    limit = ring_bound.params_bound(generics)
    max_chunk = ring_bound.max_chunk_elems_of_width(limit, network.payload_bytes,
                                                    max(DTYPE_BYTES[spec.grad_dtype], DTYPE_BYTES[spec.out_dtype]))
    notes.append(f"rail placement: in hop-major order a ring of {name} cards deadlocks once a chunk (L / N "
                 f"elements) has {limit} packets per flow or more (2^{generics['TX_SLOTS_LOG2']} transmit + "
                 f"2^{generics['RX_SLOT_LOG2']} receive slots), {ring_bound.DEFECT}: chunks up to {max_chunk:,} "
                 f"elements at {network.payload_bytes}-byte payloads; a larger chunk runs in round-major order "
                 f"(the network kernel's `segment` at most {ring_bound.segment_for(limit)}, two-phase steps)")
    notes.append("rail placement: XUP VNx's cmac_<i>.M_AXIS has no TUSER (its receive FIFO drops the CMAC's "
                 f"frame-check flag), so {name}.s_axis_mac0_tuser is tied to 0 by the link: a frame with a failed "
                 "FCS is filtered by its headers and IPv4 checksum only")
    return NetPackage(kernel=name, manifest=manifest, kernel_xml=kernel_xml, wrapper_v=wrapper_v,
                      package_tcl=package_tcl, link_cfg=link_cfg, mac_kernels=macs, generics=generics,
                      missing=missing, notes=notes, chunk_packets_bound=limit, max_chunk_elems=max_chunk)
