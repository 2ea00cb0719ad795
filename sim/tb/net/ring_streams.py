"""Valid/ready drivers and sinks for the ring datapath benches (one item per handshake).

`Source` drives a channel's fields (signals `<prefix><name>`) item by item with random idle
clocks between items (valid low, the fields junk); `Sink` records every handshake's fields with
random ready drops and fails the test if an offered item changes or is withdrawn before it is
taken (AXI4-Stream: TVALID, once high, stays high with its data until TREADY). Both sample on
the rising edge as cocotbext-axi does.
"""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import RisingEdge


class Source:
    def __init__(self, dut: Any, prefix: str, fields: list[str], rng: random.Random, idle: float,
                 valid: str = "valid", ready: str = "ready") -> None:
        self.dut, self.rng, self.idle = dut, rng, idle
        self.fields = {f: getattr(dut, prefix + f) for f in fields}
        self.valid = getattr(dut, prefix + valid)
        self.ready = getattr(dut, prefix + ready)
        self.valid.value = 0
        self.sent = 0

    def _junk(self) -> None:
        for sig in self.fields.values():
            sig.value = self.rng.getrandbits(len(sig))

    async def send(self, items: list[dict[str, int]]) -> None:
        clk = self.dut.clk
        for item in items:
            while self.rng.random() < self.idle:
                self.valid.value = 0
                self._junk()
                await RisingEdge(clk)
            for name, value in item.items():
                self.fields[name].value = value
            self.valid.value = 1
            while True:
                await RisingEdge(clk)
                if int(self.ready.value):
                    break
            self.sent += 1
        self.valid.value = 0

    def start(self, items: list[dict[str, int]]) -> Any:
        return cocotb.start_soon(self.send(items))


class Sink:
    def __init__(self, dut: Any, prefix: str, fields: list[str], rng: random.Random, stall: float,
                 valid: str = "valid", ready: str = "ready") -> None:
        self.dut, self.rng, self.stall = dut, rng, stall
        self.fields = {f: getattr(dut, prefix + f) for f in fields}
        self.valid = getattr(dut, prefix + valid)
        self.ready = getattr(dut, prefix + ready)
        self.name = prefix
        self.items: list[dict[str, int]] = []
        self.errors: list[str] = []
        self.ready.value = 0
        cocotb.start_soon(self._run())

    async def _run(self) -> None:
        clk = self.dut.clk
        offered: dict[str, int] | None = None
        while True:
            ready = self.rng.random() >= self.stall
            self.ready.value = int(ready)
            await RisingEdge(clk)
            try:
                valid = int(self.valid.value)
            except ValueError:  # X before the reset
                valid = 0
            now = {n: int(s.value) for n, s in self.fields.items()} if valid else None
            if offered is not None and now != offered and len(self.errors) < 10:
                self.errors.append(f"{self.name}: item {len(self.items)} withdrawn or changed before it was taken")
            if valid and ready:
                assert now is not None
                self.items.append(now)
                offered = None
            else:
                offered = now
