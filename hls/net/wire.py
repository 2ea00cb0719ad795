"""The frame codec of the ring protocol: design.md section 8.2, byte for byte.

A frame is Ethernet II + IPv4 (20 bytes, no options, DF, TTL 64, protocol 17, checksum computed)
+ UDP (destination port 0x4F4E, checksum computed, RFC 768) + our 22-byte header, so the payload
starts at byte 64, the second 512-bit beat. The UDP checksum is the payload's only end-to-end
check: the FCS is stripped at each MAC, and AMD's CMAC integration for Vitis (XUP VNx) passes no
frame-check flag to the kernel, so a frame damaged past a MAC's check reaches the parser. Header
fields are big-endian; the payload is little-endian elements, as in card memory. With `fcs=True`
the Ethernet FCS (CRC-32, as the MAC computes it) follows the payload, little-endian.

`build_frame(src, dst, header, payload)` returns the bytes; `parse_frame(frame, local=...)` returns
a `Frame`, or a `Drop` naming why the frame is not ours or is damaged, so a card counts drops by
cause. Written with `struct` only (scapy is GPL and is never imported).
"""

from __future__ import annotations

import enum
import ipaddress
import math
import struct
import zlib
from dataclasses import dataclass

VERSION = 1
UDP_PORT = 0x4F4E  # 20302: the destination port of every ring frame
ETHERTYPE_IPV4 = 0x0800
IP_PROTO_UDP = 17
IP_TTL = 64
IP_FLAG_DF = 0x4000

ETH_BYTES = 14
IPV4_BYTES = 20
UDP_BYTES = 8
RING_HEADER_BYTES = 22
HEADER_BYTES = ETH_BYTES + IPV4_BYTES + UDP_BYTES + RING_HEADER_BYTES  # 64: one 512-bit beat
FCS_BYTES = 4
# Per frame on the wire beyond the payload: 64 header bytes, 4 FCS, 8 preamble, 12 inter-frame gap.
WIRE_OVERHEAD_BYTES = HEADER_BYTES + FCS_BYTES + 8 + 12

DEFAULT_PAYLOAD_BYTES = 1408  # 22 beats: a 1458-byte IP packet fits a 1500-byte MTU
JUMBO_PAYLOAD_BYTES = 8192
MAX_FRAME_MTU = 9000  # jumbo MTU: the largest payload_bytes is bounded by it
# Payload bounds: whole 64-byte beats (the payload starts on a beat), at least one; at most the largest
# multiple of 64 whose IP packet (P + IPv4 + UDP + our header) fits the jumbo MTU: 8896 (8192 fits).
PAYLOAD_MIN = 64
PAYLOAD_MAX = (MAX_FRAME_MTU - IPV4_BYTES - UDP_BYTES - RING_HEADER_BYTES) // 64 * 64

WIRE_DTYPES = ("fp32", "bf16")
DTYPE_CODE = {"fp32": 0, "bf16": 1}
_CODE_DTYPE = {code: name for name, code in DTYPE_CODE.items()}
ELEMENT_BYTES = {"fp32": 4, "bf16": 2}

FLAG_LAST = 0x01  # the chunk's last packet
_FLOW_SHIFT = 1
_FLOW_MASK = 0x3 << _FLOW_SHIFT

_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
# version|opcode, dtype|flags, comm, src rank, hop, chunk, step, seq, offset (credit), payload length
_RING = struct.Struct("!BBHBBHIIIH")
assert _RING.size == RING_HEADER_BYTES


class Opcode(enum.IntEnum):
    RS = 1  # reduce-scatter data: a partial sum
    AG = 2  # all-gather data: updated parameters
    ACK = 3
    NAK = 4
    SCALAR = 5  # the two-phase step's scalar exchange


class Flow(enum.IntEnum):
    """The flow an ACK/NAK answers (flags bits 1-2); each has its own window and credit."""

    RS = 1
    AG = 2
    SCALAR = 3


_OPCODES = frozenset(int(op) for op in Opcode)
DATA_OPCODE_FLOW = {Opcode.RS: Flow.RS, Opcode.AG: Flow.AG, Opcode.SCALAR: Flow.SCALAR}
FLOW_OPCODE = {flow: op for op, flow in DATA_OPCODE_FLOW.items()}


class Drop(enum.Enum):
    """Why a frame was not accepted by the codec; the value is the counter's suffix."""

    TRUNCATED = "truncated"  # shorter than its headers or than its length fields say
    FCS = "fcs"
    MAC = "mac"  # destination MAC is not this card
    ETHERTYPE = "ethertype"
    IP_HEADER = "ip_header"  # not IPv4 with IHL 5
    IP_CHECKSUM = "ip_checksum"
    IP_ADDRESS = "ip_address"  # destination IP is not this card
    PROTOCOL = "protocol"
    PORT = "port"
    VERSION = "version"
    OPCODE = "opcode"
    DTYPE = "dtype"
    UDP_CHECKSUM = "udp_checksum"  # the codec's last check: the datagram's bytes are damaged


class WireError(ValueError):
    """A value cannot be encoded (out of its field's range) or a parameter is invalid."""


def validate_payload_bytes(payload_bytes: int) -> int:
    """A packet's payload size: whole 64-byte beats, PAYLOAD_MIN .. PAYLOAD_MAX."""
    if isinstance(payload_bytes, bool) or not isinstance(payload_bytes, int):
        raise WireError(f"payload_bytes: {payload_bytes!r} must be an integer")
    if payload_bytes % 64 or not PAYLOAD_MIN <= payload_bytes <= PAYLOAD_MAX:
        raise WireError(f"payload_bytes: {payload_bytes} must be a multiple of 64 from {PAYLOAD_MIN} to {PAYLOAD_MAX} "
                        f"(the largest whose IP packet fits a {MAX_FRAME_MTU}-byte jumbo MTU)")
    return payload_bytes


def validate_wire_dtype(dtype: str) -> str:
    if dtype not in WIRE_DTYPES:
        raise WireError(f"wire dtype: {dtype!r}; choose one of {', '.join(WIRE_DTYPES)}")
    return dtype


def goodput(line_rate_bps: float, payload_bytes: int = DEFAULT_PAYLOAD_BYTES) -> float:
    """Payload bits per second at `line_rate_bps`: line x P / (P + 88) (design.md 8.2).

    Divide by 8 x element bytes for elements per second (100 Gb/s, 1408 B, fp32: 2.94e9).
    """
    validate_payload_bytes(payload_bytes)
    return float(line_rate_bps) * payload_bytes / (payload_bytes + WIRE_OVERHEAD_BYTES)


@dataclass(frozen=True)
class Endpoint:
    """A card's addresses: MAC (6 bytes), IPv4 address and its UDP source port."""

    mac: bytes
    ip: str
    port: int

    def __post_init__(self) -> None:
        if not isinstance(self.mac, bytes) or len(self.mac) != 6:
            raise WireError(f"mac: {self.mac!r} must be 6 bytes")
        ipaddress.IPv4Address(self.ip)  # raises on a bad address
        if not 0 <= self.port <= 0xFFFF:
            raise WireError(f"port: {self.port} out of 0 .. 65535")

    @property
    def ip_bytes(self) -> bytes:
        return ipaddress.IPv4Address(self.ip).packed


def endpoint_for_rank(rank: int, *, base_port: int = UDP_PORT) -> Endpoint:
    """Locally administered addresses for a test or emulated ring: 02:4f:4e:00:00:rr, 10.78.0.(r+1)."""
    if not 0 <= rank <= 253:
        raise WireError(f"rank: {rank} out of 0 .. 253")
    return Endpoint(mac=bytes([0x02, 0x4F, 0x4E, 0, 0, rank]), ip=f"10.78.0.{rank + 1}", port=base_port)


@dataclass(frozen=True)
class Header:
    """Our 22-byte header (bytes 42-63). For ACK/NAK `seq` is the next sequence number expected
    and `offset` the credit in packets; `flags` bits 1-2 then carry the flow answered."""

    opcode: Opcode
    dtype: str = "fp32"
    flags: int = 0
    comm: int = 0
    src: int = 0
    hop: int = 0
    chunk: int = 0
    step: int = 0
    seq: int = 0
    offset: int = 0
    length: int = 0

    @property
    def last(self) -> bool:
        return bool(self.flags & FLAG_LAST)

    @property
    def flow(self) -> Flow | None:
        """The flow this frame belongs to (data) or answers (ACK/NAK); None if the bits are 0."""
        if self.opcode in DATA_OPCODE_FLOW:
            return DATA_OPCODE_FLOW[Opcode(self.opcode)]
        bits = (self.flags & _FLOW_MASK) >> _FLOW_SHIFT
        return Flow(bits) if bits else None

    def pack(self) -> bytes:
        fields = (("flags", self.flags, 0x3F), ("comm", self.comm, 0xFFFF), ("src", self.src, 0xFF),
                  ("hop", self.hop, 0xFF), ("chunk", self.chunk, 0xFFFF), ("step", self.step, 0xFFFFFFFF),
                  ("seq", self.seq, 0xFFFFFFFF), ("offset", self.offset, 0xFFFFFFFF),
                  ("length", self.length, 0xFFFF))
        for name, value, top in fields:
            if not 0 <= value <= top:
                raise WireError(f"header {name}: {value} out of 0 .. {top}")
        try:
            Opcode(self.opcode)
        except ValueError:
            raise WireError(f"header opcode: {self.opcode!r}") from None
        return _RING.pack((VERSION << 4) | int(self.opcode), (DTYPE_CODE[validate_wire_dtype(self.dtype)] << 6)
                          | self.flags, self.comm, self.src, self.hop, self.chunk, self.step, self.seq,
                          self.offset, self.length)


def ack_flags(flow: Flow) -> int:
    """The flags byte's low bits of an ACK/NAK answering `flow`."""
    return int(flow) << _FLOW_SHIFT


@dataclass(frozen=True)
class Frame:
    """A parsed frame of ours: the addresses it came with, our header and the payload bytes."""

    src_mac: bytes
    dst_mac: bytes
    src_ip: str
    dst_ip: str
    src_port: int
    dst_port: int
    header: Header
    payload: bytes


def ipv4_checksum(header: bytes) -> int:
    """The Internet checksum (RFC 1071) of an IPv4 header whose checksum field is zero."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ones_sum(data: bytes) -> int:
    """The 16-bit one's-complement sum of big-endian words (RFC 1071), as 1 .. 0xFFFF (0 only for no
    non-zero byte). Two to the 16 is 1 modulo 0xFFFF, so the whole buffer read as one big-endian
    integer is congruent to its word sum: one C-level pass instead of a word loop."""
    if len(data) % 2:
        data += b"\0"
    total = int.from_bytes(data, "big") % 0xFFFF
    return total or (0xFFFF if any(data) else 0)


def _pseudo_header(src_ip: bytes, dst_ip: bytes, udp_len: int) -> bytes:
    return src_ip + dst_ip + struct.pack("!BBH", 0, IP_PROTO_UDP, udp_len)


def udp_checksum(src_ip: bytes, dst_ip: bytes, datagram: bytes) -> int:
    """RFC 768's checksum of a UDP datagram whose checksum field is zero: the complement of the
    one's-complement sum over the pseudo-header (addresses, protocol, UDP length) and the datagram;
    a computed 0 is sent as 0xFFFF (0 means "no checksum", which ring frames never send)."""
    return (~_ones_sum(_pseudo_header(src_ip, dst_ip, len(datagram)) + datagram) & 0xFFFF) or 0xFFFF


def fcs(frame: bytes) -> bytes:
    """The Ethernet FCS as it appears on the wire: CRC-32 of the frame, little-endian."""
    return struct.pack("<I", zlib.crc32(frame) & 0xFFFFFFFF)


def flip_bit(frame: bytes, bit: int, *, behind_fcs: bool = False) -> bytes:
    """`frame` (FCS included) with bit `bit` inverted; with `behind_fcs` the bit is taken modulo the
    bytes before the FCS and the FCS is recomputed, so no frame check sees the damage (the fault
    models' flip behind the FCS: a switch's buffer memory, a MAC's receive FIFO past its check)."""
    raw = bytearray(frame)
    if behind_fcs:
        bit %= 8 * (len(raw) - FCS_BYTES)
    raw[bit // 8] ^= 1 << (bit % 8)
    if behind_fcs:
        raw[-FCS_BYTES:] = fcs(bytes(raw[:-FCS_BYTES]))
    return bytes(raw)


def build_frame(src: Endpoint, dst: Endpoint, header: Header, payload: bytes = b"", *, with_fcs: bool = False) -> bytes:
    """One frame from `src` to `dst`; `header.length` must equal len(payload)."""
    if header.length != len(payload):
        raise WireError(f"header length {header.length} != payload of {len(payload)} bytes")
    udp_len = UDP_BYTES + RING_HEADER_BYTES + len(payload)
    ip_len = IPV4_BYTES + udp_len
    if ip_len > 0xFFFF:
        raise WireError(f"payload of {len(payload)} bytes does not fit an IPv4 packet")
    ip = _IPV4.pack(0x45, 0, ip_len, 0, IP_FLAG_DF, IP_TTL, IP_PROTO_UDP, 0, src.ip_bytes, dst.ip_bytes)
    ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
    datagram = b"".join((_UDP.pack(src.port, UDP_PORT, udp_len, 0), header.pack(), payload))
    checksum = udp_checksum(src.ip_bytes, dst.ip_bytes, datagram)
    frame = b"".join((_ETH.pack(dst.mac, src.mac, ETHERTYPE_IPV4), ip, datagram[:6], struct.pack("!H", checksum),
                      datagram[8:]))
    return frame + fcs(frame) if with_fcs else frame


def parse_frame(frame: bytes, *, local: Endpoint | None = None, with_fcs: bool = False) -> Frame | Drop:
    """Our frame, or the reason it is dropped. With `local`, frames for another MAC/IP are dropped.

    The checks run in the order a MAC and a parser pipeline meet them: FCS, Ethernet, IPv4, UDP,
    our version, opcode and dtype, then the lengths; last the UDP checksum, the one check that
    needs the frame's last byte. It is always verified: a zero field (RFC 768's "none") is not
    exempt, since every ring frame carries one.
    """
    frame = bytes(frame)
    if with_fcs:
        if len(frame) < FCS_BYTES:
            return Drop.TRUNCATED
        frame, trailer = frame[:-FCS_BYTES], frame[-FCS_BYTES:]
        if fcs(frame) != trailer:
            return Drop.FCS
    if len(frame) < ETH_BYTES:
        return Drop.TRUNCATED
    dst_mac, src_mac, ethertype = _ETH.unpack_from(frame, 0)
    if local is not None and dst_mac != local.mac:
        return Drop.MAC
    if ethertype != ETHERTYPE_IPV4:
        return Drop.ETHERTYPE
    if len(frame) < ETH_BYTES + IPV4_BYTES:
        return Drop.TRUNCATED
    ip_raw = frame[ETH_BYTES : ETH_BYTES + IPV4_BYTES]
    ver_ihl, _, ip_len, _, _, _, proto, _, src_ip, dst_ip = _IPV4.unpack(ip_raw)
    if ver_ihl != 0x45:
        return Drop.IP_HEADER
    if ipv4_checksum(ip_raw) != 0:  # summing a header with its checksum gives 0xFFFF, complemented 0
        return Drop.IP_CHECKSUM
    if local is not None and dst_ip != local.ip_bytes:
        return Drop.IP_ADDRESS
    if proto != IP_PROTO_UDP:
        return Drop.PROTOCOL
    if ip_len < IPV4_BYTES + UDP_BYTES + RING_HEADER_BYTES or len(frame) < ETH_BYTES + ip_len:
        return Drop.TRUNCATED
    frame = frame[: ETH_BYTES + ip_len]  # drop Ethernet padding, if any
    src_port, dst_port, udp_len, _ = _UDP.unpack_from(frame, ETH_BYTES + IPV4_BYTES)
    if dst_port != UDP_PORT:
        return Drop.PORT
    if udp_len != ip_len - IPV4_BYTES:
        return Drop.TRUNCATED
    ring_fields = _RING.unpack_from(frame, HEADER_BYTES - RING_HEADER_BYTES)
    vo, df, comm, src, hop, chunk, step, seq, offset, length = ring_fields
    if vo >> 4 != VERSION:
        return Drop.VERSION
    if (vo & 0xF) not in _OPCODES:
        return Drop.OPCODE
    if (df >> 6) not in _CODE_DTYPE:
        return Drop.DTYPE
    payload = frame[HEADER_BYTES:]
    if length != len(payload):
        return Drop.TRUNCATED
    # a datagram with its checksum sums to 0xFFFF (one's complement: the complement of the rest)
    if _ones_sum(_pseudo_header(src_ip, dst_ip, udp_len) + frame[ETH_BYTES + IPV4_BYTES:]) != 0xFFFF:
        return Drop.UDP_CHECKSUM
    header = Header(Opcode(vo & 0xF), _CODE_DTYPE[df >> 6], df & 0x3F, comm, src, hop, chunk, step, seq, offset, length)
    return Frame(src_mac, dst_mac, str(ipaddress.IPv4Address(src_ip)), str(ipaddress.IPv4Address(dst_ip)),
                 src_port, dst_port, header, payload)


def packets_per_chunk(chunk_elems: int, dtype: str, payload_bytes: int = DEFAULT_PAYLOAD_BYTES) -> int:
    """How many packets carry one chunk of `chunk_elems` elements of `dtype`."""
    return math.ceil(chunk_elems * ELEMENT_BYTES[validate_wire_dtype(dtype)] / validate_payload_bytes(payload_bytes))


def validate_segment(segment: int) -> int:
    """A flow's packets per round (8.2): 0 is the whole chunk (hop-major order), else 1 .. 65535."""
    if isinstance(segment, bool) or not isinstance(segment, int) or not 0 <= segment <= 0xFFFF:
        raise ValueError(f"segment: {segment!r} is not a packet count in 0 .. 65535 (0: the whole chunk)")
    return segment


def seq_of(hop: int, index: int, per_hop: int, hops: int, segment: int = 0) -> int:
    """The sequence number of packet `index` of hop `hop` in a flow of `hops` hops of `per_hop`
    packets, numbered round-major (8.2): round r holds packets r·B .. r·B + B - 1 of every hop,
    hop by hop, B = `segment` (0: the whole chunk, one round: seq = hop x per_hop + index)."""
    b = segment or per_hop
    if not (0 <= hop < hops and 0 <= index < per_hop):
        raise ValueError(f"packet {index} of hop {hop}: out of {per_hop} packets x {hops} hops")
    r, j = divmod(index, b)
    return r * b * hops + hop * min(b, per_hop - r * b) + j


def hop_index_of(seq: int, per_hop: int, hops: int, segment: int = 0) -> tuple[int, int]:
    """(hop, packet index) of sequence number `seq`: the inverse of `seq_of`."""
    b = segment or per_hop
    if not 0 <= seq < per_hop * hops:
        raise ValueError(f"seq {seq}: out of the flow's {per_hop * hops} packets")
    r = seq // (b * hops)  # rounds before the last are full: b packets x hops
    hop, j = divmod(seq - r * b * hops, min(b, per_hop - r * b))
    return hop, r * b + j
