"""One ring card in Verilog: the network kernel and a generated Adam kernel in one top (`onic_card`).

On a card, v++ links the two Vitis kernels with two `stream_connect` lines (the network kernel's
`m_axis_grad0` to the Adam kernel's `s_axis_grad`, its `m_axis_param` back to `s_axis_param0`).
Simulation and synthesis need that linked card as one module: `render_card` writes it from
templates/net/card.v.j2 for a spec, because the Adam kernel's m_axi ports (p, m, v and out
stripes) and its control block's address width follow the spec's memory plan. The top adds no
logic; its port names are stable (the template's header lists them) so that benches of one card
and of N cards instantiate it the same way.

`prepare_card` renders the Adam kernel's project and the card top into a folder and returns every
source in compile order (floating-point units, the kernel's static modules, the network kernel's
file list, the generated control block and top, the card top), each once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hls import layout, safe_io
from hls.errors import UserError
from hls.generate import context, environment, write_project
from hls.paths import RTL_DIR
from hls.rtl_sources import read_filelist, static_sources
from hls.sizing import size_rail, size_spec
from hls.spec import KernelSpec, SpecError
from hls.targets import Target, get_target

CARD_MODULE = "onic_card"
NET_KERNEL_LIST = RTL_DIR / "net" / "net_kernel.f"
WIRE_DTYPES = ("fp32", "bf16")  # the ring's wire and parameter dtypes (hls.net.wire)


@dataclass(frozen=True)
class CardProject:
    """What `prepare_card` wrote: the Adam kernel's project (manifest.json), the card top, all sources."""

    project: Path
    top: Path
    sources: list[Path]


@dataclass(frozen=True)
class PortChannel:
    """One m_axi port of the card top on its memory channel, as the rail sizing plans it."""

    port: str                  # m_axi_<port> of onic_card: an Adam kernel pointer, lgrad<k> or gather<k>
    channel: int               # HBM pseudo-channel (DDR channel) index
    usable_bytes_per_s: float  # the channel's usable bandwidth, reads and writes together
    host_bytes_per_s: float    # what the host's DMA moves on the channel meanwhile (ring buffers' other halves)

    def beats_per_clock(self, clock_mhz: float) -> float:
        """512-bit beats a kernel clock the channel leaves the card's ports: usable less the host's share."""
        return (self.usable_bytes_per_s - self.host_bytes_per_s) / (64 * clock_mhz * 1e6)


def card_memory_plan(spec: KernelSpec, payload_bytes: int, net_stripes: int,
                     target: Target | None = None) -> tuple[list[PortChannel], float]:
    """Every m_axi port of the card top for `spec` on the channel the rail sizing at `payload_bytes` gives it,
    and sizing's kernel clock: the Adam kernel's ports from its memory plan, the network kernel's lgrad<k>
    and gather<k> from the ring streams'. A ring stream's channel also carries the host's DMA (it fills the
    other half of lgrad's double buffer and drains gather's at the goodput, hls.ring_plan), so its share is
    the stream's traffic / 2 per stripe. Every port of a channel carries the channel's figures (the lower
    usable figure and the sum of the host's shares, should sizing have had to share a channel). Refused
    when the card is not built as planned (the Adam kernel's stripes, `net_stripes`)."""
    check_card_spec(spec)
    target = target or get_target(spec.target)
    rail = size_rail(spec, target, payload_bytes)
    if rail.network is None:  # sizing always plans the ring for placement="rail"
        raise UserError("card memory plan: sizing planned no ring streams")
    built = size_spec(spec, target).stripes
    if rail.stripes != built:
        raise UserError(f"card memory plan: at {payload_bytes}-byte payloads the rail plan stripes the Adam kernel "
                        f"{rail.stripes}, the card's kernel is built {built}")
    [cu] = rail.assignments
    ports = [(port, chans[0]) for port, chans in cu.channels.items()]
    usable: dict[int, float] = {}
    for load in [*cu.loads, *rail.network.loads]:
        usable[load.channel] = min(usable.get(load.channel, load.usable_bytes_per_s), load.usable_bytes_per_s)
    host: dict[int, float] = {}
    for stream in rail.network.streams:
        if stream.stripes != net_stripes:
            raise UserError(f"card memory plan: at {payload_bytes}-byte payloads the rail plan has {stream.stripes} "
                            f"{stream.name} stripes, the card is built with {net_stripes}")
        for k, c in enumerate(stream.channels):
            ports.append((f"{stream.name}{k}", c))
            host[c] = host.get(c, 0.0) + stream.bytes_per_s / 2 / stream.stripes
    return [PortChannel(port, c, usable[c], host.get(c, 0.0)) for port, c in ports], rail.clock_mhz


def check_card_spec(spec: KernelSpec) -> None:
    """A card's Adam kernel takes its gradients from the ring and gives its parameters back to it."""
    if spec.grad_source != "stream":
        raise SpecError(f"grad_source: {spec.grad_source!r}: a ring card's Adam kernel takes the reduced "
                        "chunk from the network kernel: use 'stream'")
    if spec.out_sink != "memory+stream":
        raise SpecError(f"out_sink: {spec.out_sink!r}: a ring card's Adam kernel sends its updated "
                        "parameters to the all-gather: use 'memory+stream'")
    if spec.grad_dtype not in WIRE_DTYPES:
        raise SpecError(f"grad_dtype: {spec.grad_dtype!r} is not a ring wire dtype ({', '.join(WIRE_DTYPES)})")
    if spec.out_dtype not in WIRE_DTYPES:
        raise SpecError(f"out_dtype: {spec.out_dtype!r} is not a ring parameter dtype ({', '.join(WIRE_DTYPES)})")


def render_card(spec: KernelSpec, target: Target | None = None, net_stripes: int = 1) -> str:
    """The card top's Verilog for `spec`'s Adam kernel (deterministic: same spec, same text), the network
    kernel's lgrad and gather buffers in `net_stripes` stripes each (ports m_axi_lgrad<k>, m_axi_gather<k>;
    tests/hls/rtl/test_card_rtl.py's fp32 card has two)."""
    check_card_spec(spec)
    if not layout.ring_stripes_ok(net_stripes):
        raise UserError(f"net_stripes: {net_stripes} is not a power of two from 1 to {layout.RING_MAX_STRIPES}")
    target = target or get_target(spec.target)
    ctx = context(spec, target, size_spec(spec, target))
    return environment().get_template("net/card.v.j2").render(**ctx, top=CARD_MODULE, net_stripes=net_stripes)


def prepare_card(spec: KernelSpec, out_dir: Path, target: Target | None = None, net_stripes: int = 1) -> CardProject:
    """Render the Adam kernel's project into `out_dir`/project and the card top beside it."""
    text = render_card(spec, target, net_stripes)
    project = Path(out_dir) / "project"
    write_project(spec, project, target)
    top = Path(out_dir) / f"{CARD_MODULE}.v"
    safe_io.atomic_write(top, text.encode())
    sources: list[Path] = []
    generated = project / "rtl"
    for path in [*static_sources(), *read_filelist(NET_KERNEL_LIST),
                 generated / f"{spec.name}_control_s_axi.v", generated / f"{spec.name}.v", top]:
        if path not in sources:
            sources.append(path)
    return CardProject(project=project, top=top, sources=sources)


__all__ = ["CARD_MODULE", "CardProject", "PortChannel", "card_memory_plan", "check_card_spec", "prepare_card",
           "render_card"]
