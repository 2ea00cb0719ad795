"""cocotb test of onic_net_twophase: the two-phase step's card-memory side against a lossless ring
of hls.net.card.Card in a two-phase step (fp32 or bf16 wire, clipping on, a non-finite gradient in
some cases).

Phase one: card r's reduced chunk (`ring.reduce_scatter(...)[r]`) enters s_sum_* with random idle
clocks and junk past TKEEP, its received scalar frames s_hdr/s_pay; card memory is a cocotbext-axi
RAM model with random latency and channel pauses (junk around the chunk), the AXI monitor on
m_axi_sum0. Checked at phase1_done: the chunk's bytes in memory and nothing around them written,
the scalar frames' descriptors and payload bytes card r sent, every rank's entry. Phase two: the
chunk read back on m_grad_* (random back-pressure) byte for byte, TKEEP on the last beat, TLAST
on it only; phase2_done; no error; the AXI ports idle.

Environment: ONIC_SEED, ONIC_WORLDS (comma-separated N), ONIC_WIRE (fp32 | bf16).
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
import numpy as np
from axi_monitor import AxiMonitor
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiReadBus, AxiWriteBus
from hbm_memory import LatencyAxiRamRead, LatencyAxiRamWrite
from ring_streams import Sink, Source
from test_onic_net_scalar import BEAT, beats_of, f64_bits, reference

MEM_BYTES = 1 << 16


class _NotReset:
    """ap_rst_n for the AXI monitor: this DUT's reset is active high."""

    def __init__(self, rst: Any) -> None:
        self.rst = rst

    @property
    def value(self) -> int:
        try:
            return 1 - int(self.rst.value)
        except ValueError:
            return 0


def pauses(rng: random.Random, p: float):  # noqa: ANN201 - a generator for cocotbext-axi
    while True:
        yield rng.random() < p


async def pulse(dut: Any, name: str) -> None:
    getattr(dut, name).value = 1
    await RisingEdge(dut.clk)
    getattr(dut, name).value = 0


async def wait_for(dut: Any, name: str, limit: int, what: str) -> None:
    for _ in range(limit):
        await RisingEdge(dut.clk)
        if int(getattr(dut, name).value):
            return
    raise AssertionError(f"{what}: {name} never rose")


@cocotb.test()
async def test_twophase(dut: Any) -> None:
    seed = int(os.environ.get("ONIC_SEED", "1"))
    worlds = [int(x) for x in os.environ.get("ONIC_WORLDS", "2,3").split(",")]
    wdt = os.environ.get("ONIC_WIRE", "fp32")
    rng = np.random.default_rng(seed)
    rnd = random.Random(seed)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    for name in ("start1", "start2", "rd_rank", "cfg_rank", "cfg_sum_addr", "cfg_chunk_beats", "cfg_last_bytes"):
        getattr(dut, name).value = 0
    dut.cfg_world.value = 2
    dut.rst.value = 1
    rd = LatencyAxiRamRead(AxiReadBus.from_prefix(dut, "m_axi_sum0"), dut.clk, dut.rst, size=MEM_BYTES,
                           latency=(5, 40), rng=random.Random(rnd.random()), max_outstanding=8)
    wr = LatencyAxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi_sum0"), dut.clk, dut.rst, size=MEM_BYTES,
                            mem=rd.mem, latency=(2, 30), rng=random.Random(rnd.random()))
    for channel in (rd.ar_channel, rd.r_channel, wr.aw_channel, wr.w_channel):
        channel.set_pause_generator(pauses(random.Random(rnd.random()), 0.2))
    monitor = AxiMonitor(dut, ["sum0"], dut.clk, _NotReset(dut.rst))
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    cases = 0
    for n in worlds:
        for r in range(n):
            size = 16 * int(rng.integers(1, 12))
            ref = reference(n, r, rng, wdt, size)
            tag = f"{wdt} N={n} r={r} S={size}"
            chunk = ref["reduced"].astype("<f4" if wdt == "fp32" else "<u2").tobytes()
            beats = -(-len(chunk) // BEAT)
            base = BEAT * int(rng.integers(1, 64))
            junk = bytes(rnd.randrange(256) for _ in range(beats * BEAT + 2 * BEAT))
            rd.write(base - BEAT, junk)
            dut.cfg_rank.value = r
            dut.cfg_world.value = n
            dut.cfg_sum_addr.value = base
            dut.cfg_chunk_beats.value = beats
            dut.cfg_last_bytes.value = len(chunk) - (beats - 1) * BEAT
            await pulse(dut, "start1")
            idle = rnd.choice([0.0, 0.3])
            src = Source(dut, "s_sum_", ["tdata", "tkeep", "tlast"], rnd, idle, valid="tvalid", ready="tready")
            items = [{"tdata": b["tdata"], "tlast": b["tlast"],
                      "tkeep": (1 << min(BEAT, len(chunk) - k * BEAT)) - 1}
                     for k, b in enumerate(beats_of(chunk, rnd))]
            hdr = Source(dut, "s_hdr_", ["hop", "len"], rnd, idle)
            pay = Source(dut, "s_pay_", ["tdata", "tlast"], rnd, idle, valid="tvalid", ready="tready")
            desc = Sink(dut, "m_desc_", ["hop", "seq", "len"], rnd, 0.3)
            axis = Sink(dut, "m_axis_", ["tdata", "tkeep", "tlast"], rnd, 0.3, valid="tvalid", ready="tready")
            tasks = [src.start(items), hdr.start([{"hop": f.header.hop, "len": f.header.length}
                                                  for f in ref["received"]]),
                     pay.start([b for f in ref["received"] for b in beats_of(f.payload, rnd)])]
            for t in tasks:
                await t
            await wait_for(dut, "phase1_done", 5000, tag)
            got = rd.read(base - BEAT, beats * BEAT + 2 * BEAT)
            want = junk[:BEAT] + chunk + junk[BEAT + len(chunk):]
            assert got == want, f"{tag}: card memory around the chunk differs"
            sent = b""
            for item in axis.items:
                keep = bin(item["tkeep"]).count("1")
                sent += item["tdata"].to_bytes(BEAT, "little")[:keep]
            assert [(d["hop"], d["seq"], d["len"]) for d in desc.items] == [
                (f.header.hop, f.header.seq, f.header.length) for f in ref["sent"]], f"{tag}: descriptors"
            assert sent == b"".join(f.payload for f in ref["sent"]), f"{tag}: scalar payloads"
            for rank, (sumsq, flag) in ref["table"].items():
                dut.rd_rank.value = rank
                await ClockCycles(dut.clk, 2)
                assert int(dut.rd_sumsq.value) == f64_bits(sumsq), f"{tag}: rank {rank} sumsq"
                assert bool(int(dut.rd_flag.value)) == bool(flag), f"{tag}: rank {rank} flag"
            # phase two: the chunk back as the Adam kernel's gradient stream
            grad = Sink(dut, "m_grad_", ["tdata", "tkeep", "tlast"], rnd, 0.4, valid="tvalid", ready="tready")
            await pulse(dut, "start2")
            await wait_for(dut, "phase2_done", 5000, tag)
            back = b""
            for k, item in enumerate(grad.items):
                keep = bin(item["tkeep"]).count("1")
                assert item["tkeep"] == (1 << keep) - 1 and (keep == BEAT or k == beats - 1), f"{tag}: TKEEP"
                assert item["tlast"] == int(k == beats - 1), f"{tag}: TLAST at beat {k}"
                back += item["tdata"].to_bytes(BEAT, "little")[:keep]
            assert back == chunk, f"{tag}: phase two's stream differs from the reduced chunk"
            assert int(dut.errors.value) == 0, f"{tag}: errors {int(dut.errors.value):#x}"
            for s in (desc, axis, grad):
                assert not s.errors, s.errors
            grad.stall = 1.0
            desc.stall = axis.stall = 1.0
            await ClockCycles(dut.clk, 20)
            monitor.check_idle()
            assert not monitor.errors, monitor.errors[:5]
            cases += 1
    dut._log.info("%d cases (%s, N in %s): memory, scalar frames, table and phase two bit-exact", cases, wdt, worlds)
