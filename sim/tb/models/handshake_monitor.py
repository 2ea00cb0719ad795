"""Passive protocol monitors for a card's AXI4-Lite control ports and its AXI4-Stream ports (the
m_axi ports have `axi_monitor.AxiMonitor`).

`AxiLiteMonitor` watches one AXI4-Lite slave port (a kernel's s_axi_control, both sides of it):
every VALID held until its READY with its payload stable (AW, W, AR from the host; R, B from the
kernel), R only for an accepted read and B only for an accepted write (its AW and its W), at
most one response per request, RRESP / BRESP OKAY (a kernel's control port has no error to
report), nothing valid from the kernel while ap_rst_n is low. `StreamMonitor` watches one
AXI4-Stream port: TVALID held until TREADY with TDATA, TKEEP and TLAST stable, TKEEP non-zero and
contiguous from byte 0 (the kernels' streams pack their bytes low), no TVALID while ap_rst_n is
low. Both keep violations in `errors` (the bench asserts it empty) and count transfers (so a
bench can tell a watched port from an idle one); neither drives a signal.

Signals are reached through `sig(name)`, so the port may be a top port (`c1_s_axi_net_awvalid`) or
a wire inside a card (`card1.grad_tvalid` of onic_card's internal stream). A simulator clock in
Python is the cost of a monitor: `watch` samples a group of them from one coroutine, and an idle
port (nothing valid, nothing waiting) costs its VALID reads only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cocotb
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time

MAX_ERRORS = 20
Sig = Callable[[str], Any]


def _v(sig: Any) -> int:
    try:
        return int(sig.value)
    except ValueError:  # X or Z
        return -1


def watch(monitors: list[Any], clock: Any) -> None:
    """Sample every monitor of the group at each rising edge of `clock` (a monitor samples only so)."""
    async def run() -> None:
        while True:
            await RisingEdge(clock)
            if get_sim_time() == 0:  # the clock's edge at time 0: no net has settled yet
                continue
            for m in monitors:
                m.sample()
    cocotb.start_soon(run())


class _Checker:
    def __init__(self, name: str, clock: Any, reset_n: Any) -> None:
        self.name, self.clock, self.reset_n = name, clock, reset_n
        self.errors: list[str] = []
        self.transfers = 0

    def sample(self) -> None:
        raise NotImplementedError

    def _fail(self, text: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{self.name}: {text} (at {get_sim_time('ns'):.0f} ns)")

    def _held(self, chan: str, held: tuple[int, ...] | None, valid: int, ready: int,
              payload: tuple[int, ...]) -> tuple[int, ...] | None:
        """The payload a channel waiting on READY must keep (None: nothing waiting after this clock)."""
        if held is not None:
            if valid != 1:
                self._fail(f"{chan}VALID dropped before {chan}READY")
            elif payload != held:
                self._fail(f"{chan} payload changed while waiting for {chan}READY")
        return payload if valid == 1 and ready != 1 else None


class AxiLiteMonitor(_Checker):
    """One AXI4-Lite slave port; `sig("awvalid")` gives the port's AWVALID, and so on."""

    CHANNELS = {"AW": ("awaddr",), "W": ("wdata", "wstrb"), "AR": ("araddr",), "R": ("rdata", "rresp"),
                "B": ("bresp",)}

    def __init__(self, sig: Sig, name: str, clock: Any, reset_n: Any) -> None:
        super().__init__(name, clock, reset_n)
        self.s = {c: (sig(f"{c.lower()}valid"), sig(f"{c.lower()}ready"), [sig(p) for p in payload])
                  for c, payload in self.CHANNELS.items()}
        self.held: dict[str, tuple[int, ...] | None] = dict.fromkeys(self.CHANNELS)
        self.reads = self.aws = self.ws = 0  # accepted requests not yet answered (a write: its AW and its W)

    def sample(self) -> None:
        valids = {c: _v(v) for c, (v, _, _) in self.s.items()}
        in_reset = _v(self.reset_n) != 1
        if in_reset:
            for c in ("R", "B"):
                if valids[c] == 1:
                    self._fail(f"{c}VALID while ap_rst_n is low")
            self.held = dict.fromkeys(self.CHANNELS)
            self.reads = self.aws = self.ws = 0
            return
        if all(x != 1 for x in valids.values()) and all(h is None for h in self.held.values()):
            return  # idle: nothing to check
        now = {c: (valids[c], _v(r), tuple(_v(p) for p in pay)) for c, (_, r, pay) in self.s.items()}
        for c, (valid, ready, payload) in now.items():
            self.held[c] = self._held(c, self.held[c], valid, ready, payload)
        fire = {c: now[c][0] == 1 and now[c][1] == 1 for c in now}
        # a response may come in the clock its request is accepted (the kernel's registers are
        # behind the handshake, so never before it): count requests first
        self.reads += fire["AR"]
        self.aws += fire["AW"]
        self.ws += fire["W"]
        if now["R"][0] == 1 and self.reads == 0:
            self._fail("RVALID without an accepted read")
        if now["B"][0] == 1 and (self.aws == 0 or self.ws == 0):
            self._fail("BVALID without an accepted write (AW and W)")
        if fire["R"]:
            self.reads = max(self.reads - 1, 0)
            self.transfers += 1
            if now["R"][2][1] != 0:
                self._fail(f"RRESP {now['R'][2][1]} (not OKAY)")
        if fire["B"]:
            self.aws, self.ws = max(self.aws - 1, 0), max(self.ws - 1, 0)
            self.transfers += 1
            if now["B"][2][0] != 0:
                self._fail(f"BRESP {now['B'][2][0]} (not OKAY)")


class StreamMonitor(_Checker):
    """One AXI4-Stream port; `sig("tvalid")` gives its TVALID, and so on (TDATA, TKEEP, TLAST, TREADY)."""

    def __init__(self, sig: Sig, name: str, clock: Any, reset_n: Any, *, keep_bytes: int = 64) -> None:
        super().__init__(name, clock, reset_n)
        self.valid, self.ready = sig("tvalid"), sig("tready")
        self.payload = [sig("tdata"), sig("tkeep"), sig("tlast")]
        self.keep_bytes = keep_bytes
        self.held: tuple[int, ...] | None = None

    def sample(self) -> None:
        valid = _v(self.valid)
        if valid != 1 and self.held is None:
            return  # idle (a reset changes nothing then)
        if _v(self.reset_n) != 1:
            if valid == 1:
                self._fail("TVALID while ap_rst_n is low")
            self.held = None
            return
        ready = _v(self.ready)
        payload = tuple(_v(p) for p in self.payload)
        self.held = self._held("T", self.held, valid, ready, payload)
        if valid == 1:
            keep = payload[1]
            if keep <= 0 or keep & (keep + 1):
                self._fail(f"TKEEP {keep:#x} is not contiguous from byte 0" if keep > 0 else "TKEEP 0 or X")
            elif not payload[2] and keep != (1 << self.keep_bytes) - 1:
                self._fail(f"TKEEP {keep:#x} not full before TLAST")
            if ready == 1:
                self.transfers += 1
