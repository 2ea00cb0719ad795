"""Packaging of the network kernel for the rail placement (design.md section 8; issue 26 point 5).

`optimusnic build --placement rail` links three kinds of kernels: the Adam kernel (the generated
project), the network kernel `<name>_net` that runs the ring protocol (`hls.net.card`), and the MAC,
AMD's open XUP VNx CMAC kernel `cmac_<i>` (github.com/Xilinx/xup_vitis_network_example, Ethernet/,
streams M_AXIS = received frames, S_AXIS = frames to transmit, as its config_files/*.ini connect them).

This module renders what packaging needs and can be decided without RTL: the network register map
(`hls.net_regmap`) as a manifest section, the network kernel's kernel.xml, and the rail link.cfg with
its `stream_connect` lines. The network kernel's RTL top (sim/rtl/net/onic_net_kernel.v) is
simulated but not packaged (no `<name>_net.xo`; the Adam kernel's parameter stream output it reads
is not built yet), so a real rail build stops before any tool runs (`MISSING`); nothing here claims
a network bitstream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hls import generate, net_regmap, sizing
from hls.errors import UserError
from hls.spec import KernelSpec
from hls.targets import Target

PLACEMENTS = sizing.PLACEMENTS
MAC_KERNEL = "cmac"  # XUP VNx: Ethernet/ packages cmac_0.xo / cmac_1.xo (one per QSFP28 interface)
MAC_SOURCE = "github.com/Xilinx/xup_vitis_network_example (Ethernet/: make INTERFACE=<i> -> cmac_<i>.xo)"


def missing(spec: KernelSpec) -> str:
    """The one-line reason a real rail build stops."""
    name = net_regmap.kernel_name(spec.name)
    return (f"rail placement: the network kernel {name} is not packaged yet (its RTL top sim/rtl/net/"
            f"onic_net_kernel.v is simulated only), so there is no {name}.xo to link with {spec.name} and XUP VNx "
            "cmac_<i>; "
            "`optimusnic build --placement rail --dry-run` shows the link it would run")


@dataclass
class NetPackage:
    kernel: str
    manifest: dict[str, Any]  # the network manifest section (hls.net_regmap.to_manifest)
    kernel_xml: str
    link_cfg: str  # the Adam kernel's link.cfg with the network kernel, the MACs and the stream_connect lines
    mac_kernels: list[str]

    def files(self) -> dict[str, str]:
        """The package's files, relative to the run folder's net/ (deterministic text)."""
        return {"kernel.xml": self.kernel_xml, "network.json": json.dumps(self.manifest, indent=2, sort_keys=True)
                + "\n", "link.cfg": self.link_cfg}


def package(spec: KernelSpec, target: Target, kernel: str) -> NetPackage:
    """Size the rail placement for `spec` and render the network kernel's manifest, kernel.xml and link.cfg."""
    if not target.has_xrt_flow:
        raise UserError(f"{target.name}: the rail placement links with v++ and XUP VNx; {target.name} has no XRT flow")
    rail = sizing.size(
        target, None, grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype, grad_source=spec.grad_source,
        lanes=spec.lanes, compute_units=spec.compute_units, clock_mhz=spec.clock_mhz, optimizer=spec.optimizer,
        stripes=spec.stripes, rate=spec.rate_gps * 1e9 if spec.rate_gps is not None else None, placement="rail",
    )
    network = rail.network
    if network is None:  # sizing always plans the ring for placement="rail"
        raise UserError("rail placement: sizing planned no ring streams")
    side = sizing.size_spec(spec, target)  # the Adam kernel as the project builds it
    grad_streams = len(side.assignments) if spec.grad_source == "stream" else 0
    manifest = net_regmap.to_manifest(spec.name, network, grad_streams)
    env = generate.environment()
    ctx = generate.context(spec, target, side)
    kernel_xml = env.get_template("net/kernel.xml.j2").render(**ctx, net=manifest)
    pointers = [a["name"] for a in manifest["args"] if a["kind"] == "pointer"]
    banks = [b for stream in network.streams for b in stream.banks]
    sp = [{"port": f"m_axi_{p}", "bank": b} for p, b in zip(pointers, banks, strict=True) if b is not None]
    link_ctx = {"kernel": manifest["kernel"], "ring_ports": network.ring_ports, "sp": sp,
                "adam_grad_port": "grad" if kernel == "hls" else "s_axis_grad"}
    link_cfg = env.get_template("hls/link.cfg.j2").render(**ctx, network=link_ctx)
    macs = [f"{MAC_KERNEL}_{i}" for i in range(network.ring_ports)]
    return NetPackage(kernel=str(manifest["kernel"]), manifest=manifest, kernel_xml=kernel_xml, link_cfg=link_cfg,
                      mac_kernels=macs)
