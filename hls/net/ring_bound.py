"""The chunk bound of a ring of RTL cards (sim/rtl/net/README.md "Known defect"), by packet order.

In hop-major order (the network kernel's `segment` 0: a whole chunk per hop) a ring of RTL cards
deadlocks once a chunk has P >= T + R packets in a flow: T the flow's transmit (retransmit) slots,
2**TX_SLOTS_LOG2 (one set per flow), R the card's receive slots, 2**RX_SLOT_LOG2. Every sender then
holds unsent packets of its own chunk with credit 0 while every receiver's slots hold the
predecessor's chunk, waiting for transmit slots to forward it (tests/hls/net/test_ring_order_buffers.py
finds exactly this bound in a packet-level model). The reduce-scatter (P at the wire dtype) and the
all-gather (P at the parameter dtype) meet it alike. In round-major order with a segment of B < P
packets (design.md 8.2; two-phase steps) the ring cannot deadlock when 2 B < T + R, whatever P:
`segment_for` gives the largest such B. A ring of one RTL card and software peers meets neither
(the peers consume at once).

A one-phase step on a ring of cards with streaming Adam kernels (`onic_card`) has a tighter bound
of its own, in either order: the network kernel takes the Adam kernel's updated parameters only
once its reduce-scatter flow is all acknowledged (the AG release), so until then each owner's
update stalls after the few beats its FIFOs absorb, and each card's successor must accept the
whole of the card's last hop, the successor's own chunk, into its R receive slots. When a chunk
has more RS packets than that, every card waits on its successor at once (measured: N = 3 cards
with R = 32 slots ran 34-packet chunks of 1408 bytes and hung at 40; sim/rtl/net/README.md "Known
defect"). The two-phase step writes the owner's sum to card memory and does not meet it, so a
chunk over `one_phase_packets` runs as the two phases (the host ignores the entries: the
one-phase result), as the N-card bench, the rtlsim backend and sizing do.

Every path that runs N RTL cards checks a chunk before it starts (one line, `ChunkOverBound`)
instead of hanging: the N-card bench (sim/tb/net/test_onic_ring_cards.py `Ring`), the rtlsim
backend (`pynq_driver.net.rtlsim`, which picks round-major order for a chunk over the hop-major
bound), `optimusnic bench rtlnet` (hop-major steps); sizing and the rail build's dry run report the
bound of the packaged kernel and the segment that runs any chunk. Pure Python, no simulator: the
sizing imports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from hls.errors import UserError
from hls.net import wire

DEFECT = 'the ring deadlock of hop-major order on RTL cards (sim/rtl/net/README.md "Known defect")'
# The packaged network kernel's receive slots (hls.vitis.netpkg): onic_net_kernel's default RX_SLOT_LOG2.
PACKAGED_RX_SLOT_LOG2 = 5
FLOWS = (("rs", "reduce-scatter"), ("ag", "all-gather"))


class ChunkOverBound(UserError):
    """A ring of RTL cards would deadlock on this chunk in this order: refused, not run."""


def bound(tx_slots_log2: int, rx_slot_log2: int) -> int:
    """T + R: the packets per flow at which a ring of RTL cards deadlocks (a chunk must have fewer)."""
    return 2 ** int(tx_slots_log2) + 2 ** int(rx_slot_log2)


def params_bound(params: Mapping[str, object]) -> int:
    """`bound` of a build's network-kernel parameters (TX_SLOTS_LOG2, RX_SLOT_LOG2)."""
    return bound(int(params["TX_SLOTS_LOG2"]), int(params["RX_SLOT_LOG2"]))  # type: ignore[call-overload]


def segment_for(limit: int) -> int:
    """The largest segment B (packets per round) with 2 B < T + R = `limit`: round-major order with it
    cannot deadlock, whatever the chunk."""
    return max(1, (int(limit) - 1) // 2)


def packaged_slots_log2(window_packets: int) -> tuple[int, int]:
    """(TX_SLOTS_LOG2, RX_SLOT_LOG2) of the packaged network kernel for sizing's window (hls.vitis.netpkg)."""
    return (int(window_packets) - 1).bit_length(), PACKAGED_RX_SLOT_LOG2


def one_phase_packets(rx_slot_log2: int) -> int:
    """The most RS packets per hop a one-phase step on a ring of `onic_card`s takes: the receive slots R
    (the Adam kernels' FIFOs absorb a little more; not counted)."""
    return 2 ** int(rx_slot_log2)


def one_phase_fits(chunk_elems: int, payload_bytes: int, wire_dtype: str, rx_slot_log2: int) -> bool:
    """Whether a ring of `onic_card`s can run this chunk as a one-phase step (else: as the two phases)."""
    return flow_packets(chunk_elems, payload_bytes, wire_dtype, wire_dtype)["rs"] <= one_phase_packets(rx_slot_log2)


def one_phase_max_elems(payload_bytes: int, wire_dtype: str, rx_slot_log2: int) -> int:
    """The largest chunk (a multiple of 16 elements) a one-phase step on a ring of `onic_card`s takes: at most
    `one_phase_packets` RS packets, that is fewer than one more."""
    return max_chunk_elems_of_width(one_phase_packets(rx_slot_log2) + 1, payload_bytes,
                                    wire.ELEMENT_BYTES[wire_dtype])


def one_phase_refusal(chunk_elems: int, payload_bytes: int, wire_dtype: str, rx_slot_log2: int,
                      what: str = "ring of RTL cards") -> str | None:
    """The one-line reason a ring of `onic_card`s cannot run this chunk as a one-phase step (it runs only as
    the two phases), or None if it can."""
    rs = flow_packets(chunk_elems, payload_bytes, wire_dtype, wire_dtype)["rs"]
    if rs <= one_phase_packets(rx_slot_log2):  # one_phase_fits
        return None
    return (f"{what}: a one-phase step of {rs} RS packets per hop is over the one-phase bound of "
            f"{one_phase_packets(rx_slot_log2)} (the receive slots): it runs only as the two phases "
            f"(at most {one_phase_max_elems(payload_bytes, wire_dtype, rx_slot_log2)} elements at "
            f"{payload_bytes} bytes)")


def flow_packets(chunk_elems: int, payload_bytes: int, wire_dtype: str, param_dtype: str) -> dict[str, int]:
    """Packets per hop of each flow: the reduce-scatter at the wire dtype, the all-gather at the parameter dtype."""
    return {"rs": math.ceil(chunk_elems * wire.ELEMENT_BYTES[wire_dtype] / payload_bytes),
            "ag": math.ceil(chunk_elems * wire.ELEMENT_BYTES[param_dtype] / payload_bytes)}


def max_chunk_elems_of_width(limit: int, payload_bytes: int, widest_bytes: int) -> int:
    """The largest chunk (a multiple of 16 elements, design.md 8.1) with fewer than `limit` packets in a flow
    of `widest_bytes`-byte elements (the wider of the two flows decides)."""
    return (limit - 1) * payload_bytes // widest_bytes // 16 * 16


def max_chunk_elems(limit: int, payload_bytes: int, wire_dtype: str, param_dtype: str) -> int:
    """`max_chunk_elems_of_width` for the ring's wire and parameter dtypes."""
    widest = max(wire.ELEMENT_BYTES[wire_dtype], wire.ELEMENT_BYTES[param_dtype])
    return max_chunk_elems_of_width(limit, payload_bytes, widest)


def refusal(chunk_elems: int, payload_bytes: int, wire_dtype: str, param_dtype: str, limit: int,
            what: str = "ring of RTL cards", segment: int = 0) -> str | None:
    """The one-line reason a ring of RTL cards with T + R = `limit` cannot run this chunk in the order of
    `segment` (0: hop-major), or None if it can. A flow with no more packets per hop than the segment is
    one round: hop-major."""
    packets = flow_packets(chunk_elems, payload_bytes, wire_dtype, param_dtype)
    rounds = [k for k, _ in FLOWS if 0 < segment < packets[k]]
    if rounds and 2 * segment >= limit:
        return (f"{what}: segment {segment}: round-major order cannot deadlock only when 2 x segment is below "
                f"the bound of {limit} (transmit slots + receive slots of the build): at most "
                f"{segment_for(limit)}")
    over = [f"{packets[k]} {name} packets ({dt})" for (k, name), dt in zip(FLOWS, (wire_dtype, param_dtype),
                                                                          strict=True)
            if k not in rounds and packets[k] >= limit]
    if not over:
        return None
    return (f"{what}: a chunk of {chunk_elems} elements in {payload_bytes}-byte packets is "
            f"{' and '.join(over)} per hop, at or over the bound of {limit} (transmit slots + receive slots "
            f"of the build): it would deadlock, {DEFECT}; at most "
            f"{max_chunk_elems(limit, payload_bytes, wire_dtype, param_dtype)} elements per chunk at this payload "
            f"in hop-major order, any chunk in round-major order with a segment of at most {segment_for(limit)} "
            "(two-phase steps)")


def check_chunk(chunk_elems: int, payload_bytes: int, wire_dtype: str, param_dtype: str, limit: int,
                what: str = "ring of RTL cards", segment: int = 0) -> None:
    """Raise `ChunkOverBound` (one line) when the chunk would deadlock in the order of `segment`."""
    reason = refusal(chunk_elems, payload_bytes, wire_dtype, param_dtype, limit, what, segment)
    if reason is not None:
        raise ChunkOverBound(reason)


__all__ = ["DEFECT", "FLOWS", "PACKAGED_RX_SLOT_LOG2", "ChunkOverBound", "bound", "check_chunk", "flow_packets",
           "max_chunk_elems", "max_chunk_elems_of_width", "one_phase_fits", "one_phase_max_elems", "one_phase_packets",
           "one_phase_refusal", "packaged_slots_log2",
           "params_bound", "refusal", "segment_for"]
