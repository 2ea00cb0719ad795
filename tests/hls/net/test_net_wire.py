"""The frame codec against design.md 8.2 and an independent parser/builder (dpkt, BSD licensed)."""

from __future__ import annotations

import random
import struct
import zlib

import dpkt
import pytest

from hls.net import wire
from hls.net.wire import Drop, Endpoint, Header, Opcode


def random_header(rng: random.Random, payload_len: int) -> Header:
    opcode = rng.choice(list(Opcode))
    flags = rng.randrange(64)
    return Header(opcode, rng.choice(wire.WIRE_DTYPES), flags, rng.randrange(1 << 16), rng.randrange(256),
                  rng.randrange(256), rng.randrange(1 << 16), rng.randrange(1 << 32), rng.randrange(1 << 32),
                  rng.randrange(1 << 32), payload_len)


def random_endpoint(rng: random.Random) -> Endpoint:
    return Endpoint(bytes(rng.randrange(256) for _ in range(6)),
                    ".".join(str(rng.randrange(1, 255)) for _ in range(4)), rng.randrange(1 << 16))


def test_header_layout_is_64_bytes_and_big_endian() -> None:
    src, dst = wire.endpoint_for_rank(0), wire.endpoint_for_rank(1)
    h = Header(Opcode.RS, "bf16", wire.FLAG_LAST, 0x1234, 3, 4, 0x5678, 0x01020304, 0x0A0B0C0D, 0x11121314, 64)
    frame = wire.build_frame(src, dst, h, bytes(range(64)))
    assert len(frame) == 128 and frame[64:] == bytes(range(64))
    assert frame[42] == 0x11 and frame[43] == 0x41
    assert frame[44:64] == bytes.fromhex("1234 03 04 5678 01020304 0a0b0c0d 11121314 0040".replace(" ", ""))
    assert frame[36:38] == b"\x4f\x4e"  # port 20302
    pseudo = src.ip_bytes + dst.ip_bytes + b"\0\x11" + frame[38:40]  # RFC 768's pseudo-header
    assert frame[40:42] == struct.pack("!H", dpkt.in_cksum(pseudo + frame[34:40] + b"\0\0" + frame[42:]) or 0xFFFF)
    assert frame[20:22] == b"\x40\x00" and frame[22] == 64 and frame[23] == 17  # DF, TTL, UDP


@pytest.mark.parametrize("payload_bytes", [wire.DEFAULT_PAYLOAD_BYTES, wire.JUMBO_PAYLOAD_BYTES])
def test_dpkt_reads_our_frames(payload_bytes: int) -> None:
    rng = random.Random(1234 + payload_bytes)
    for _ in range(300):
        src, dst = random_endpoint(rng), random_endpoint(rng)
        n = rng.choice([0, 64, rng.randrange(0, payload_bytes + 1, 2), payload_bytes])
        h = random_header(rng, n)
        payload = rng.randbytes(n)
        frame = wire.build_frame(src, dst, h, payload)
        eth = dpkt.ethernet.Ethernet(frame)
        assert eth.dst == dst.mac and eth.src == src.mac and eth.type == dpkt.ethernet.ETH_TYPE_IP
        ip = eth.data
        assert isinstance(ip, dpkt.ip.IP)
        assert ip.ttl == 64 and ip.p == 17 and ip.df == 1 and ip.id == 0 and ip.hl == 5 and ip.tos == 0
        assert ip.len == 20 + 8 + 22 + n and ip.src == src.ip_bytes and ip.dst == dst.ip_bytes
        assert ip.sum == dpkt.in_cksum(bytes(frame[14:24]) + b"\0\0" + bytes(frame[26:34]))
        udp = ip.data
        assert udp.dport == 0x4F4E and udp.sport == src.port and udp.ulen == 8 + 22 + n
        checksum, udp.sum = udp.sum, 0
        pseudo = src.ip_bytes + dst.ip_bytes + struct.pack("!BBH", 0, 17, udp.ulen)
        assert checksum == (dpkt.in_cksum(pseudo + bytes(udp)) or 0xFFFF)  # RFC 768: 0 goes as 0xFFFF
        assert bytes(udp.data) == h.pack() + payload
        parsed = wire.parse_frame(frame, local=dst)
        assert isinstance(parsed, wire.Frame) and parsed.header == h and parsed.payload == payload


def test_dpkt_built_frames_parse() -> None:
    rng = random.Random(99)
    for _ in range(300):
        src, dst = random_endpoint(rng), random_endpoint(rng)
        n = rng.randrange(0, 1409)
        h = random_header(rng, n)
        payload = rng.randbytes(n)
        udp = dpkt.udp.UDP(sport=src.port, dport=0x4F4E, data=h.pack() + payload)
        udp.ulen = len(udp)
        ip = dpkt.ip.IP(src=src.ip_bytes, dst=dst.ip_bytes, p=17, ttl=64, df=1, data=udp)
        ip.len = len(ip)
        raw = bytes(dpkt.ethernet.Ethernet(src=src.mac, dst=dst.mac, type=0x0800, data=ip))
        parsed = wire.parse_frame(raw, local=dst)  # dpkt computes the UDP checksum, as we do
        assert isinstance(parsed, wire.Frame), parsed
        assert parsed.header == h and parsed.payload == payload and parsed.src_ip == src.ip
        assert raw == wire.build_frame(src, dst, h, payload)  # the same bytes as ours


def test_fcs_is_ethernet_crc32_little_endian() -> None:
    src, dst = wire.endpoint_for_rank(0), wire.endpoint_for_rank(1)
    frame = wire.build_frame(src, dst, Header(Opcode.AG, length=64), bytes(64), with_fcs=True)
    assert frame[-4:] == struct.pack("<I", zlib.crc32(frame[:-4]))
    # the CRC residue property of the Ethernet FCS: CRC-32 over frame + FCS is the constant 0x2144DF1C
    assert zlib.crc32(frame) == 0x2144DF1C
    for bit in (0, 100, 8 * len(frame) - 1):
        bad = bytearray(frame)
        bad[bit // 8] ^= 1 << (bit % 8)
        assert wire.parse_frame(bytes(bad), with_fcs=True) is Drop.FCS


def test_drop_reasons() -> None:
    src, dst, other = wire.endpoint_for_rank(0), wire.endpoint_for_rank(1), wire.endpoint_for_rank(2)
    good = wire.build_frame(src, dst, Header(Opcode.RS, length=64), bytes(64))

    def patched(at: int, value: bytes, fix_ip: bool = False) -> bytes:
        raw = bytearray(good)
        raw[at : at + len(value)] = value
        if fix_ip:
            raw[24:26] = b"\0\0"
            raw[24:26] = struct.pack("!H", wire.ipv4_checksum(bytes(raw[14:34])))
        return bytes(raw)

    assert wire.parse_frame(good, local=other) is Drop.MAC
    assert wire.parse_frame(patched(0, other.mac), local=other) is Drop.IP_ADDRESS
    assert wire.parse_frame(patched(12, b"\x86\xdd")) is Drop.ETHERTYPE
    assert wire.parse_frame(patched(23, b"\x06")) is Drop.IP_CHECKSUM
    assert wire.parse_frame(patched(23, b"\x06", fix_ip=True)) is Drop.PROTOCOL
    assert wire.parse_frame(patched(14, b"\x46", fix_ip=True)) is Drop.IP_HEADER
    assert wire.parse_frame(patched(36, b"\x00\x35")) is Drop.PORT
    assert wire.parse_frame(patched(42, b"\x21")) is Drop.VERSION
    assert wire.parse_frame(patched(42, b"\x1f")) is Drop.OPCODE
    assert wire.parse_frame(patched(43, b"\x80")) is Drop.DTYPE
    assert wire.parse_frame(good[:50]) is Drop.TRUNCATED
    assert wire.parse_frame(good[:-1]) is Drop.TRUNCATED
    assert isinstance(wire.parse_frame(good + bytes(10)), wire.Frame)  # Ethernet padding is ignored
    assert isinstance(wire.parse_frame(good + b"\xff" * 10), wire.Frame)  # ... and not summed


def test_udp_checksum_catches_what_the_fcs_no_longer_sees() -> None:
    """A frame damaged past a MAC's FCS check (the CMAC's receive CDC FIFO, a switch's buffer)
    reaches the parser with a valid FCS: every single-bit error in the UDP datagram (our header or
    the payload) is a UDP checksum drop. (A sum cannot see two 16-bit words swapped: it is no CRC.)"""
    src, dst = wire.endpoint_for_rank(0), wire.endpoint_for_rank(1)
    payload = bytes(range(256)) * 2
    good = wire.build_frame(src, dst, Header(Opcode.AG, seq=7, length=len(payload)), payload)
    for bit in range(8 * 42, 8 * len(good)):
        bad = bytearray(good)
        bad[bit // 8] ^= 1 << (bit % 8)
        if 8 * 42 <= bit < 8 * 44 or 8 * 62 <= bit < 8 * 64:
            continue  # version, opcode, dtype, length: those checks come first (test_drop_reasons)
        assert wire.parse_frame(bytes(bad), local=dst) is Drop.UDP_CHECKSUM, bit
    no_checksum = bytearray(good)
    no_checksum[40:42] = b"\0\0"  # RFC 768's "none": ring frames always carry one
    assert wire.parse_frame(bytes(no_checksum), local=dst) is Drop.UDP_CHECKSUM
    # a computed zero goes as 0xFFFF: find a payload whose sum makes it so, by fixing one word
    base = bytearray(good)
    base[64:66] = b"\0\0"
    base[40:42] = b"\0\0"
    pseudo = src.ip_bytes + dst.ip_bytes + b"\0\x11" + base[38:40]
    rest = dpkt.in_cksum(pseudo + bytes(base[34:]))  # the complement of the sum without word 32
    base[64:66] = struct.pack("!H", rest)  # now the datagram sums to 0xFFFF: its checksum is 0
    fixed = wire.build_frame(src, dst, Header(Opcode.AG, seq=7, length=len(payload)), bytes(base[64:]))
    assert fixed[40:42] == b"\xff\xff" and isinstance(wire.parse_frame(fixed, local=dst), wire.Frame)


def test_payload_bytes_and_goodput() -> None:
    assert wire.validate_payload_bytes(1408) == 1408 and wire.validate_payload_bytes(8192) == 8192
    for bad in (0, 100, 8960, 9000, 1408.0, True):
        with pytest.raises(wire.WireError):
            wire.validate_payload_bytes(bad)  # type: ignore[arg-type]
    assert wire.goodput(100e9, 1408) / 32 == pytest.approx(2.94e9, rel=1e-3)
    assert wire.goodput(100e9, 1408) == 100e9 * 1408 / 1496
    assert wire.packets_per_chunk(352, "fp32", 1408) == 1 and wire.packets_per_chunk(368, "fp32", 1408) == 2


def test_header_fields_out_of_range_raise() -> None:
    with pytest.raises(wire.WireError):
        Header(Opcode.RS, src=256).pack()
    with pytest.raises(wire.WireError):
        Header(Opcode.RS, flags=64).pack()
    with pytest.raises(wire.WireError):
        wire.build_frame(wire.endpoint_for_rank(0), wire.endpoint_for_rank(1), Header(Opcode.RS, length=3), b"")


def test_round_major_sequence_numbers_are_a_bijection() -> None:
    """seq_of / hop_index_of: every (hop, index) once, inverse of each other; B = 0 or B >= the chunk is
    hop-major; within a round every hop's packets follow the previous hop's."""
    for per_hop in range(1, 10):
        for hops in range(1, 6):
            for b in range(0, 12):
                seqs = {(h, i): wire.seq_of(h, i, per_hop, hops, b) for h in range(hops) for i in range(per_hop)}
                assert sorted(seqs.values()) == list(range(per_hop * hops))
                assert all(wire.hop_index_of(s, per_hop, hops, b) == hi for hi, s in seqs.items())
                if b == 0 or b >= per_hop:
                    assert all(s == h * per_hop + i for (h, i), s in seqs.items())
                else:
                    assert all(seqs[(h, i)] < seqs[(h + 1, i)] for h in range(hops - 1) for i in range(per_hop))
                    assert all(seqs[(hops - 1, i)] < seqs[(0, i + b)] for i in range(per_hop - b))
    assert [wire.seq_of(h, i, 5, 3, 2) for i in range(5) for h in range(3)] == [0, 2, 4, 1, 3, 5, 6, 8, 10,
                                                                                7, 9, 11, 12, 13, 14]
    for bad in ((3, 0, 5, 3), (0, 5, 5, 3)):
        with pytest.raises(ValueError):
            wire.seq_of(*bad)
    with pytest.raises(ValueError):
        wire.hop_index_of(15, 5, 3, 2)
    for bad in (-1, 1 << 16, 2.0, False):
        with pytest.raises(ValueError, match="segment"):
            wire.validate_segment(bad)
