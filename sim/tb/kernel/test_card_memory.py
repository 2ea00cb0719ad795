"""cocotb tests of the card-memory model (hbm_memory.py) on a pass-through top (hbm_memory_top.v).

Two cocotbext-axi AxiMasters (ports a, b) saturate the model; a monitor independent of the
model counts the R and W handshakes on the master side every clock. Each test checks the data
it read or wrote, the long-run beats per clock against the channel budget, and that no window
of WINDOW clocks moves more than budget x WINDOW + the burst allowance. Measured figures go to
the JSON file named by HBM_RESULT (one entry per test) for the pytest wrapper to report.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster
from hbm_memory import CardMemory, card_memory

CLOCK_NS = 4
RATE = 0.675  # U55C: 14.4 GB/s x 0.9 / (64 B x 300 MHz)
WINDOW = 200
BEAT = 64
TOLERANCE = 0.02


class TB:
    def __init__(self, dut: Any, ports: list[tuple[str, int]], *, mode: str = "hbm", seed: int = 1,
                 mem_size: int = 1 << 22) -> None:
        self.dut = dut
        cocotb.start_soon(Clock(dut.ap_clk, CLOCK_NS, unit="ns").start())
        dut.ap_rst_n.value = 0
        self.card: CardMemory = card_memory(dut, ports, clock=dut.ap_clk, reset=dut.ap_rst_n, mode=mode,
                                            beats_per_clock=RATE if mode == "hbm" else None, mem_size=mem_size,
                                            sim_clock_ns=CLOCK_NS, seed=seed)
        self.masters = {x: AxiMaster(AxiBus.from_prefix(dut, f"s_axi_{x}"), dut.ap_clk, dut.ap_rst_n,
                                     reset_active_level=False) for x in "ab"}
        for m in self.masters.values():
            m.write_if.log.setLevel("WARNING")
            m.read_if.log.setLevel("WARNING")
        self.trace: list[tuple[int, int, int, int]] = []  # per clock: a R, a W, b R, b W handshakes

    async def reset(self) -> None:
        await ClockCycles(self.dut.ap_clk, 4)
        self.dut.ap_rst_n.value = 1
        await ClockCycles(self.dut.ap_clk, 2)
        self.card.start()
        cocotb.start_soon(self._monitor())

    async def _monitor(self) -> None:
        sig = {(x, k): (getattr(self.dut, f"s_axi_{x}_{k}valid"), getattr(self.dut, f"s_axi_{x}_{k}ready"))
               for x in "ab" for k in "rw"}
        order = [("a", "r"), ("a", "w"), ("b", "r"), ("b", "w")]
        while True:
            await FallingEdge(self.dut.ap_clk)
            row = []
            for key in order:
                v, r = sig[key]
                row.append(int(str(v.value) == "1" and str(r.value) == "1"))
            self.trace.append(tuple(row))

    def measure(self, columns: list[int]) -> dict[str, Any]:
        """Beats per clock of `columns` (indices into a trace row) from their first beat to their last,
        and the largest count in any WINDOW-clock window."""
        counts = [sum(row[c] for c in columns) for row in self.trace]
        busy = [i for i, n in enumerate(counts) if n]
        assert busy, "no beats moved"
        first, last = busy[0], busy[-1]
        beats = sum(counts)
        window = sum(counts[:WINDOW])
        worst = window
        for i in range(WINDOW, len(counts)):
            window += counts[i] - counts[i - WINDOW]
            worst = max(worst, window)
        return {"beats": beats, "clocks": last - first + 1, "beats_per_clock": beats / (last - first + 1),
                "worst_window_beats": worst}


def record(name: str, figures: dict[str, Any]) -> None:
    path = os.environ.get("HBM_RESULT")
    if not path:
        return
    data = json.loads(open(path).read()) if os.path.exists(path) else {}
    data[name] = figures
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def check_rate(tb: TB, figures: dict[str, Any], budget: float, allowance: float, what: str) -> None:
    rate = figures["beats_per_clock"]
    assert abs(rate - budget) <= TOLERANCE * budget, f"{what}: {rate:.4f} beats/clock, budget {budget}"
    limit = budget * WINDOW + allowance
    assert figures["worst_window_beats"] <= limit, (
        f"{what}: {figures['worst_window_beats']} beats in {WINDOW} clocks, limit {limit:.1f}")
    for st in tb.card.stats():
        assert st["min_tokens"] is None or st["min_tokens"] >= -1e-9, f"channel {st['channel']} overdrawn: {st}"


def pattern(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


async def read_check(tb: TB, port: str, addr: int, nbytes: int, seed: int) -> None:
    data = pattern(nbytes, seed)
    tb.card.mem.write(addr, data)
    got = await tb.masters[port].read(addr, nbytes)
    assert got.data == data, f"port {port}: read data differs from memory"


async def write_check(tb: TB, port: str, addr: int, nbytes: int, seed: int) -> None:
    data = pattern(nbytes, seed)
    await tb.masters[port].write(addr, data)
    assert tb.card.mem.read(addr, nbytes) == data, f"port {port}: memory differs from written data"


BEATS = int(os.environ.get("HBM_BEATS", "3072"))


@cocotb.test()
async def test_one_read_port(dut: Any) -> None:
    tb = TB(dut, [("a", 0)])
    await tb.reset()
    await read_check(tb, "a", 0, BEATS * BEAT, 1)
    fig = tb.measure([0])
    record("one_read_port", {**fig, "budget": RATE})
    check_rate(tb, fig, RATE, tb.card.channels[0].cap, "1 read port")


@cocotb.test()
async def test_two_read_ports_one_channel(dut: Any) -> None:
    tb = TB(dut, [("a", 0), ("b", 0)])
    await tb.reset()
    half = BEATS // 2 * BEAT
    ta = cocotb.start_soon(read_check(tb, "a", 0, half, 2))
    tb_ = cocotb.start_soon(read_check(tb, "b", 1 << 21, half, 3))
    await ta
    await tb_
    both = tb.measure([0, 2])
    a, b = tb.measure([0]), tb.measure([2])
    record("two_read_ports_one_channel", {**both, "budget": RATE, "a_beats_per_clock": a["beats_per_clock"],
                                          "b_beats_per_clock": b["beats_per_clock"]})
    check_rate(tb, both, RATE, tb.card.channels[0].cap, "2 read ports, 1 channel")
    assert min(a["beats_per_clock"], b["beats_per_clock"]) > 0.4 * RATE, "one port starved the other"


@cocotb.test()
async def test_read_and_write_one_channel(dut: Any) -> None:
    tb = TB(dut, [("a", 0), ("b", 0)])
    await tb.reset()
    half = BEATS // 2 * BEAT
    tr = cocotb.start_soon(read_check(tb, "a", 0, half, 4))
    tw = cocotb.start_soon(write_check(tb, "b", 1 << 21, half, 5))
    await tr
    await tw
    both = tb.measure([0, 3])
    stats = tb.card.stats()[0]
    record("read_and_write_one_channel", {**both, "budget": RATE, "read_beats": stats["read_beats"],
                                          "write_beats": stats["write_beats"]})
    check_rate(tb, both, RATE, tb.card.channels[0].cap, "1 read + 1 write port, 1 channel")
    assert stats["read_beats"] == stats["write_beats"] == BEATS // 2


@cocotb.test()
async def test_two_channels(dut: Any) -> None:
    tb = TB(dut, [("a", 0), ("b", 1)])
    await tb.reset()
    ta = cocotb.start_soon(read_check(tb, "a", 0, BEATS * BEAT // 2, 6))
    tw = cocotb.start_soon(write_check(tb, "b", 1 << 21, BEATS * BEAT // 2, 7))
    await ta
    await tw
    a, b = tb.measure([0]), tb.measure([3])
    record("two_channels", {"a": a, "b": b, "budget": RATE})
    check_rate(tb, a, RATE, tb.card.channels[0].cap, "channel 0 (read port a)")
    check_rate(tb, b, RATE, tb.card.channels[1].cap, "channel 1 (write port b)")


@cocotb.test()
async def test_stalls_and_latency(dut: Any) -> None:
    """Random stalls on every channel never push a channel over its budget; each read's first
    data and each write's response come 100-250 ns (30-75 clocks at 300 MHz) late, drawn per burst."""
    tb = TB(dut, [("a", 0), ("b", 0)])
    await tb.reset()
    waits = []
    for i in range(12):
        start = len(tb.trace)
        await read_check(tb, "a", i * 4096, BEAT, 10 + i)
        waits.append(len(tb.trace) - start)
    # a few clocks of master and channel hand-offs on top of the memory's 30-75
    assert all(30 <= w <= 75 + 6 for w in waits), f"read data not 100-250 ns late: {waits}"
    assert len(set(waits)) > 3, f"latency not drawn per burst: {waits}"
    write_waits = []
    for i in range(6):
        start = len(tb.trace)
        await write_check(tb, "b", (1 << 21) + i * 4096, BEAT, 30 + i)
        write_waits.append(len(tb.trace) - start)
    assert all(30 <= w <= 75 + 8 for w in write_waits), f"write response not 100-250 ns late: {write_waits}"
    assert len(set(write_waits)) > 2, f"write latency not drawn per burst: {write_waits}"
    tb.card.set_stalls(random.Random(5), 0.2)
    ta = cocotb.start_soon(read_check(tb, "a", 0, 512 * BEAT, 8))
    tw = cocotb.start_soon(write_check(tb, "b", 1 << 21, 512 * BEAT, 9))
    await ta
    await tw
    fig = tb.measure([0, 3])
    record("stalls_and_latency", {**fig, "budget": RATE, "single_read_clocks": waits,
                                  "single_write_clocks": write_waits})
    assert fig["worst_window_beats"] <= RATE * WINDOW + tb.card.channels[0].cap
    assert tb.card.stats()[0]["min_tokens"] >= -1e-9


@cocotb.test()
async def test_ideal(dut: Any) -> None:
    """Ideal mode: no limit, so one read port runs at about a beat per clock."""
    tb = TB(dut, [("a", 0), ("b", 1)], mode="ideal")
    await tb.reset()
    await read_check(tb, "a", 0, 1024 * BEAT, 11)
    fig = tb.measure([0])
    record("ideal_one_read_port", fig)
    assert fig["beats_per_clock"] > 0.9, fig
    await RisingEdge(dut.ap_clk)
