"""The network kernel's AXI4-Lite register map (the rail placement, design.md section 8), computed once.

The network kernel runs the ring protocol of `hls.net.card` between the card's MAC (XUP VNx `cmac_<i>`)
and the Adam kernel. Same layout rules as the Adam kernel's map (`hls.regmap`): `ap_ctrl_hs` control
words at 0x00-0x0C, then the arguments from 0x10 in declaration order (a 64-bit pointer takes 12
bytes, a 32-bit scalar 8), then the read-only words: the sticky STATUS and one 64-bit counter (low
word, high word) for every counter of `hls.net.card` (COUNTER_NAMES, then dropped_<cause> for each
cause of DROP_CAUSES). The pointers are the ring engine's memory streams as sizing plans them
(`hls.ring_plan`: lgrad and gather stripes). kernel.xml and the network manifest section are
rendered from this map only, so they cannot drift apart.

The RTL top `sim/rtl/net/onic_net_kernel.v` implements this map (its control block
`onic_net_control_s_axi.v`, checked against it register by register in tests/hls/rtl/test_net_kernel.py)
for its STRIPES lgrad and gather stripes (the offsets derived from the parameter, checked for 1, 2 and 8);
`hls.vitis.netpkg` packages it with the map of sizing's stripes (`<name>_net.xo`).
Nothing here claims a network bitstream. Addresses are numbers in network order (MAC 02:00:00:00:00:05:
mac_hi 0x0200, mac_lo 0x00000005; IPv4 10.0.0.1: 0x0A000001). The counters are 32-bit saturating
values in 64-bit words (high word 0).
"""

from __future__ import annotations

from hls.net.card import COUNTER_NAMES, DROP_CAUSES
from hls.regmap import ARGS_BASE, CTRL, GIE, IER, ISR, POINTER_STRIDE, SCALAR_STRIDE, Arg
from hls.ring_plan import NetworkPlan

KERNEL_SUFFIX = "_net"  # the network kernel is <spec name>_net
COUNTER_STRIDE = 8  # a 64-bit counter: low word, then high word

# Sticky STATUS bits of the network kernel: cleared at ap_start, read by the driver after a step.
STATUS_BITS = {
    "read_response": 0,  # an RRESP of SLVERR/DECERR on an lgrad or gather port
    "write_response": 1,  # a BRESP of SLVERR/DECERR on an lgrad or gather port
    "protocol_error": 2,  # a peer sent an impossible frame (hls.net.card: card.error)
    "timeout_exhausted": 3,  # retransmissions did not get an ACK within the kernel's retry budget
    "config_error": 4,  # ap_start with arguments the kernel cannot run (world, rank, length, payload_bytes, ...)
}

# The scalar arguments after the pointers, in declaration order, with what the host writes there.
SCALARS = (
    ("local_mac_lo", "local MAC address, low 32 bits"),
    ("local_mac_hi", "local MAC address, high 16 bits (bits 15:0)"),
    ("local_ip", "local IPv4 address"),
    ("local_port", "local UDP port (bits 15:0)"),
    ("succ_mac_lo", "successor's MAC address, low 32 bits"),
    ("succ_mac_hi", "successor's MAC address, high 16 bits (bits 15:0)"),
    ("succ_ip", "successor's IPv4 address"),
    ("succ_port", "successor's UDP port (bits 15:0)"),
    ("pred_mac_lo", "predecessor's MAC address, low 32 bits (ACK/NAKs go to it)"),
    ("pred_mac_hi", "predecessor's MAC address, high 16 bits (bits 15:0)"),
    ("pred_ip", "predecessor's IPv4 address"),
    ("comm", "communicator id (bits 15:0): frames of another communicator are dropped"),
    ("rank", "this card's rank, 0 .. world - 1"),
    ("world", "number of cards on the ring"),
    ("length", "L: elements of the flat parameter vector"),
    ("window", "go-back-N window: packets past the last ACK"),
    ("timeout", "retransmission timeout in kernel clock cycles"),
    ("credit", "the successor's receive slots: each sender's first credit"),
    ("payload_bytes", "payload bytes per data frame"),
    ("step", "the step number of the next ring step"),
    ("phase", "0: a one-phase step; two-phase step: 1 phase one (the owner's sum to sum0, the scalar "
              "exchange), 2 phase two (the sum to the Adam kernel, the all-gather; no other argument read), "
              "3 phase two of a skipped step (no Adam kernel: the all-gather's hop 0 is read from sum0)"),
    ("sum0_lo", "scratch address of the owner's reduced chunk in a two-phase step, low 32 bits "
                "(64-byte aligned, written through gather0 and read through lgrad0); for phase 3 the "
                "card's current parameters (the Adam kernel's output chunk)"),
    ("sum0_hi", "scratch address of the owner's reduced chunk (phase 3: current parameters), high 32 bits"),
    ("entry", "the rank whose scalar entry entry_sumsq / entry_flag show (after phase one)"),
    ("segment", "B: packets per round of each flow in round-major order (design.md 8.2), 0 .. 65535, the same "
                "on every card of the ring; 0 or at least a flow's packets per hop: hop-major order. More than "
                "one round needs the two-phase step (phase 0 with it is a config_error)"),
)

# Read-only words after the counters: the scalar entry of rank `entry` (sum of squares as float64
# bits, the non-finite flag in bit 0), valid once phase one is done.
ENTRY_REGS = ("entry_sumsq", "entry_flag")

_STREAMS = {"lgrad": "local gradient (host DMA in, reduce-scatter source)",
            "gather": "gathered parameters (all-gather destination, host DMA out)"}


def counter_names() -> list[str]:
    """Every counter of `hls.net.card` in register order: COUNTER_NAMES, then dropped_<cause>."""
    return [*COUNTER_NAMES, *(f"dropped_{c}" for c in DROP_CAUSES)]


def kernel_name(spec_name: str) -> str:
    return spec_name + KERNEL_SUFFIX


def register_map(network: NetworkPlan) -> list[Arg]:
    """The network kernel's arguments with their offsets: lgrad/gather stripes from sizing, then SCALARS."""
    args: list[Arg] = []
    offset = ARGS_BASE
    for stream in network.streams:
        for k in range(stream.stripes):
            where = f"stripe {k} of {stream.stripes}" if stream.stripes > 1 else "whole array"
            args.append(Arg(f"{stream.name}{k}", "pointer", offset, POINTER_STRIDE, "inout",
                            f"{_STREAMS.get(stream.name, stream.what)}, {where}"))
            offset += POINTER_STRIDE
    for name, text in SCALARS:
        args.append(Arg(name, "scalar", offset, SCALAR_STRIDE, "in", text))
        offset += SCALAR_STRIDE
    return args


def readonly_map(args: list[Arg]) -> list[dict[str, object]]:
    """STATUS, then the 64-bit counters, then ENTRY_REGS, right after the arguments."""
    offset = max(a.offset + a.size for a in args if a.offset is not None)
    regs: list[dict[str, object]] = [{"name": "status", "offset": offset, "size": 4}]
    offset += 8  # STATUS and one reserved word, so the 64-bit counters are 8-byte aligned
    offset += -offset % COUNTER_STRIDE
    for name in [*counter_names(), *ENTRY_REGS]:
        regs.append({"name": name, "offset": offset, "size": COUNTER_STRIDE})
        offset += COUNTER_STRIDE
    return regs


def address_range(args: list[Arg]) -> int:
    """Size of the AXI4-Lite space, a power of two, at least 0x1000."""
    end = max(int(r["offset"]) + int(r["size"]) for r in readonly_map(args))  # type: ignore[call-overload]
    size = 0x1000
    while size < end:
        size *= 2
    return size


def to_manifest(spec_name: str, network: NetworkPlan, grad_streams: int, param_streams: int = 0,
                rx_slots: int | None = None) -> dict[str, object]:
    """The network manifest section: kernel name, its register map and its stream ports; `rx_slots` the
    build's receive slots (2^RX_SLOT_LOG2), the most `credit` a card of this build may be given."""
    args = register_map(network)
    return {
        "kernel": kernel_name(spec_name),
        "protocol": "ap_ctrl_hs",
        "control": {"CTRL": CTRL, "GIE": GIE, "IER": IER, "ISR": ISR},
        "address_bits": (address_range(args) - 1).bit_length(),
        "args": [a.to_dict() for a in args],
        "readonly": readonly_map(args),
        "status_bits": dict(STATUS_BITS),
        "counters": counter_names(),
        "ring_ports": network.ring_ports,
        "payload_bytes": network.payload_bytes,
        "window_packets": network.window_packets,
        **({} if rx_slots is None else {"rx_slots": rx_slots}),
        "streams": stream_ports(network.ring_ports, grad_streams, param_streams),
    }


def stream_ports(ring_ports: int, grad_streams: int, param_streams: int = 0) -> list[dict[str, str]]:
    """The AXI4-Stream ports: one grad stream per Adam CU (none when the Adam kernel reads its gradients
    from memory: the two-phase step), one parameter stream from the Adam kernel per CU (the all-gather's
    source), one receive and one transmit per ring port."""
    ports = [{"name": f"m_axis_grad{c}", "mode": "write_only", "to": "adam"} for c in range(grad_streams)]
    ports += [{"name": f"s_axis_param{c}", "mode": "read_only", "to": "adam"} for c in range(param_streams)]
    for i in range(ring_ports):
        ports.append({"name": f"s_axis_mac{i}", "mode": "read_only", "to": f"cmac_{i}"})
        ports.append({"name": f"m_axis_mac{i}", "mode": "write_only", "to": f"cmac_{i}"})
    return ports
