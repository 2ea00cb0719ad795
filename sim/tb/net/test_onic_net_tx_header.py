"""cocotb test of onic_net_tx_header: the first beat byte for byte against hls.net.wire.build_frame.

Random seeded configurations (MACs, IPs, port, communicator, rank) and per-packet fields (every
opcode, both dtypes, lengths 0 .. 8192 and the 1408/8192 payloads), fed with random idle clocks
and taken with random back-pressure. Environment: ONIC_SEED, ONIC_HEADERS.
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

from hls.net import wire

CONFIGS = 4


def beat_bytes(value: int) -> bytes:
    return value.to_bytes(64, "little")


def random_endpoint(rng: random.Random) -> wire.Endpoint:
    ip = ".".join(str(rng.randrange(256)) for _ in range(4))
    return wire.Endpoint(mac=bytes(rng.randrange(256) for _ in range(6)), ip=ip, port=rng.randrange(65536))


def random_header(rng: random.Random, comm: int, rank: int) -> wire.Header:
    length = rng.choice([0, 1408, 8192, rng.randrange(1, 8193), rng.randrange(1, 1408), 65535 - 50])
    return wire.Header(opcode=rng.choice(list(wire.Opcode)), dtype=rng.choice(wire.WIRE_DTYPES),
                       flags=rng.randrange(64), comm=comm, src=rank, hop=rng.randrange(256),
                       chunk=rng.randrange(65536), step=rng.randrange(2**32), seq=rng.randrange(2**32),
                       offset=rng.randrange(2**32), length=length)


@cocotb.test()
async def test_header_bytes(dut: Any) -> None:
    rng = random.Random(int(os.environ.get("ONIC_SEED", "1")))
    count = int(os.environ.get("ONIC_HEADERS", "300"))
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    dut.s_hdr_valid.value = 0
    dut.m_hdr_ready.value = 0
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    for _ in range(CONFIGS):
        local, peer = random_endpoint(rng), random_endpoint(rng)
        comm, rank = rng.randrange(65536), rng.randrange(256)
        dut.cfg_local_mac.value = int.from_bytes(local.mac, "big")
        dut.cfg_peer_mac.value = int.from_bytes(peer.mac, "big")
        dut.cfg_local_ip.value = int.from_bytes(local.ip_bytes, "big")
        dut.cfg_peer_ip.value = int.from_bytes(peer.ip_bytes, "big")
        dut.cfg_udp_sport.value = local.port
        dut.cfg_comm.value = comm
        dut.cfg_rank.value = rank
        await ClockCycles(dut.clk, 8)  # the static checksum pipeline
        headers = [random_header(rng, comm, rank) for _ in range(count // CONFIGS)]
        expected = [wire.build_frame(local, peer, h, bytes(h.length))[:64] for h in headers]
        got: list[bytes] = []

        async def drive(headers: list[wire.Header]) -> None:
            for h in headers:
                while rng.random() < 0.3:
                    dut.s_hdr_valid.value = 0
                    await RisingEdge(dut.clk)
                dut.s_hdr_opcode.value = int(h.opcode)
                dut.s_hdr_dtype.value = wire.DTYPE_CODE[h.dtype]
                dut.s_hdr_flags.value = h.flags
                dut.s_hdr_hop.value = h.hop
                dut.s_hdr_chunk.value = h.chunk
                dut.s_hdr_step.value = h.step
                dut.s_hdr_seq.value = h.seq
                dut.s_hdr_offset.value = h.offset
                dut.s_hdr_len.value = h.length
                dut.s_hdr_valid.value = 1
                await RisingEdge(dut.clk)
                while not int(dut.s_hdr_ready.value):
                    await RisingEdge(dut.clk)
            dut.s_hdr_valid.value = 0

        driver = cocotb.start_soon(drive(headers))
        idle = 0
        while len(got) < len(expected):
            ready = int(rng.random() < 0.7)
            dut.m_hdr_ready.value = ready
            await RisingEdge(dut.clk)
            if ready and int(dut.m_hdr_valid.value):
                got.append(beat_bytes(int(dut.m_hdr_data.value)))
                idle = 0
            else:
                idle += 1
                assert idle < 200, f"stalled after {len(got)} headers"
        await driver
        dut.m_hdr_ready.value = 0
        for k, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert g == e, f"header {k} {headers[k]}:\n got {g.hex()}\nwant {e.hex()}"
        assert wire.parse_frame(expected[0] + bytes(headers[0].length), local=peer) is not None
