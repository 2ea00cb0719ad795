"""A passive AXI4 protocol monitor for the kernel's m_axi ports (every kernel test attaches one).

Checks, per port, every clock on the rising edge: VALID held and payload stable until READY
(AR, AW, W; R and B are the memory model's), no burst crossing 4 KiB, AxLEN within MAX_BURST,
AxSIZE a full beat and INCR bursts, W beats per burst equal AWLEN + 1 with WLAST on the last,
W bursts (counted to WLAST, which AXI4 lets come before their AW) matching the AWLENs in
order, every R/B for a burst that was asked for with its ID (RID/BID), outstanding bursts
bounded, nothing valid while ap_rst_n is low, and nothing in flight at ap_done (`check_idle`).
Violations are kept in `errors` (the test asserts it is empty); the monitor never drives a signal.

With `interconnect_reset` False (the memory side is not reset with the kernel) the bursts in
flight outlive a reset: they are marked stale, their R beats and B responses are still expected
(matched by ID, in order per ID) and counted in `stale_r_beats` / `stale_b`, and `check_idle`
only asks the bursts issued since the last reset to be complete.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import cocotb
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time

MAX_BURST = 64
MAX_OUTSTANDING = 256


def _v(sig: Any) -> int:
    try:
        return int(sig.value)
    except ValueError:  # X or Z
        return -1


class _Port:
    def __init__(self, dut: Any, name: str) -> None:
        self.name = name
        p = f"m_axi_{name}_"
        self.has_ar = hasattr(dut, p + "arvalid")
        self.has_aw = hasattr(dut, p + "awvalid")
        g = lambda s: getattr(dut, p + s)  # noqa: E731
        if self.has_ar:
            self.ar = [g(s) for s in ("araddr", "arlen", "arsize", "arburst", "arid")]
            self.arvalid, self.arready = g("arvalid"), g("arready")
            self.rvalid, self.rready, self.rlast, self.rid = g("rvalid"), g("rready"), g("rlast"), g("rid")
        if self.has_aw:
            self.aw = [g(s) for s in ("awaddr", "awlen", "awsize", "awburst", "awid")]
            self.awvalid, self.awready = g("awvalid"), g("awready")
            self.w = [g(s) for s in ("wdata", "wstrb", "wlast")]
            self.wvalid, self.wready = g("wvalid"), g("wready")
            self.bvalid, self.bready, self.bid = g("bvalid"), g("bready"), g("bid")
        self.reset()

    def reset(self) -> None:
        """Forget the handshakes in progress and every burst in flight."""
        self.hold_reset()
        # [ID, beats, stale]: a burst issued before the last reset of the kernel alone is stale
        self.r_bursts: deque[list[Any]] = deque()  # read bursts, beats still to come
        self.aw_lens: deque[list[Any]] = deque()  # AWLEN + 1 of bursts whose W beats are not all seen
        self.w_lens: deque[int] = deque()  # beats of W bursts (to WLAST) not yet matched to an AW
        self.w_beats = 0  # beats of the W burst in progress
        self.b_wait: list[list[Any]] = []  # [ID, stale] of bursts with address and data done, no response yet

    def mark_stale(self) -> None:
        """A reset of the kernel alone: every burst in flight now answers a run that is gone."""
        for burst in (*self.r_bursts, *self.aw_lens, *self.b_wait):
            burst[-1] = True

    def hold_reset(self) -> None:
        """A reset of the master: VALIDs drop, a payload waiting for READY was never handed over."""
        self.ar_hold: list[int] | None = None
        self.aw_hold: list[int] | None = None
        self.w_hold: list[int] | None = None


class AxiMonitor:
    def __init__(self, dut: Any, ports: list[str], clock: Any, reset_n: Any, *,
                 interconnect_reset: bool = True) -> None:
        self.ports = [_Port(dut, name) for name in ports]
        self.clock = clock
        self.reset_n = reset_n
        self.interconnect_reset = interconnect_reset
        self.stale_r_beats = 0
        self.stale_b = 0
        self.errors: list[str] = []
        self.bursts = 0
        # ports with more than one burst over the monitor's life (any runs): see burst_counts
        self.multi_burst_ports: set[str] = set()
        self._per_port_bursts: dict[str, int] = {}
        cocotb.start_soon(self._run())

    def burst_counts(self) -> dict[str, int]:
        """Bursts seen so far per port and channel ("p0_wrAW", "grad0AR"): diff two of these
        to count one run's bursts (multi_burst_ports counts over the monitor's whole life)."""
        return dict(self._per_port_bursts)

    def flush(self) -> None:
        """Forget everything in flight (a reset: the memory model flushes too)."""
        for port in self.ports:
            port.reset()

    def _fail(self, port: _Port, text: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"m_axi_{port.name}: {text}")

    def _burst(self, port: _Port, addr: int, length: int, size: int, burst: int, kind: str) -> None:
        self.bursts += 1
        count = self._per_port_bursts.get(port.name + kind, 0) + 1
        self._per_port_bursts[port.name + kind] = count
        if count > 1:
            self.multi_burst_ports.add(port.name)
        if length > MAX_BURST:
            self._fail(port, f"{kind}LEN {length - 1} above {MAX_BURST - 1}")
        if size != 6 or burst != 1:
            self._fail(port, f"{kind}SIZE {size} / {kind}BURST {burst}: full-beat INCR bursts only")
        if (addr & 0xFFF) + length * 64 > 0x1000:
            self._fail(port, f"{kind} burst at {addr:#x} of {length} beats crosses 4 KiB")
        if addr % 64:
            self._fail(port, f"{kind}ADDR {addr:#x} not 64-byte aligned")

    async def _run(self) -> None:
        while True:
            await RisingEdge(self.clock)
            if get_sim_time() == 0:  # the clock's edge at time 0: no net has settled yet (X in Icarus)
                continue
            if _v(self.reset_n) != 1:
                for port in self.ports:
                    if self.interconnect_reset:
                        port.reset()  # the memory model flushes on reset too
                    else:
                        port.hold_reset()
                        port.mark_stale()
                    valids = []
                    if port.has_ar:
                        valids += [("ARVALID", port.arvalid)]
                    if port.has_aw:
                        valids += [("AWVALID", port.awvalid), ("WVALID", port.wvalid)]
                    for name, sig in valids:
                        if _v(sig) != 0:
                            self._fail(port, f"{name} {_v(sig)} while ap_rst_n is low")
                continue
            for port in self.ports:
                if port.has_ar:
                    self._read_side(port)
                if port.has_aw:
                    self._write_side(port)

    def _stable(self, port: _Port, hold: list[int] | None, now: list[int], valid: int, ready: int,
                chan: str) -> list[int] | None:
        if hold is not None:
            if valid != 1:
                self._fail(port, f"{chan}VALID dropped before {chan}READY")
            elif now != hold:
                self._fail(port, f"{chan} payload changed while {chan}VALID waited for {chan}READY")
        return now if valid == 1 and ready != 1 else None

    def _address(self, port: _Port, chan: str, hold: Any, signals: Any, valid: Any,
                 ready: Any) -> tuple[Any, tuple[int, int] | None]:
        """One clock of an AR or AW channel: its stability and bounds; (ID, beats) of a burst it hands over."""
        if valid != 1 and hold is None:
            return None, None
        now = [_v(s) for s in signals]
        hold = self._stable(port, hold, now, valid, ready, chan)
        if valid == 1 and ready == 1:
            addr, alen, size, burst, ident = now
            self._burst(port, addr, alen + 1, size, burst, chan)
            return hold, (ident, alen + 1)
        return hold, None

    def _read_side(self, port: _Port) -> None:
        port.ar_hold, beats = self._address(port, "AR", port.ar_hold, port.ar, _v(port.arvalid), _v(port.arready))
        if beats is not None:
            port.r_bursts.append([*beats, False])
            if len(port.r_bursts) > MAX_OUTSTANDING:
                self._fail(port, f"{len(port.r_bursts)} read bursts outstanding")
        if _v(port.rvalid) == 1 and _v(port.rready) == 1:
            rid = _v(port.rid)
            burst = next((b for b in port.r_bursts if b[0] == rid), None)
            if burst is None:
                self._fail(port, f"R beat with RID {rid} and no read burst of that ID outstanding")
                return
            self.stale_r_beats += burst[2]
            burst[1] -= 1
            if (burst[1] == 0) != (_v(port.rlast) == 1):
                self._fail(port, "RLAST disagrees with ARLEN")
            if burst[1] == 0:
                port.r_bursts.remove(burst)

    def _write_side(self, port: _Port) -> None:
        port.aw_hold, beats = self._address(port, "AW", port.aw_hold, port.aw, _v(port.awvalid), _v(port.awready))
        if beats is not None:
            port.aw_lens.append([*beats, False])
            if len(port.aw_lens) + len(port.b_wait) > MAX_OUTSTANDING:
                self._fail(port, f"{len(port.aw_lens) + len(port.b_wait)} write bursts outstanding")
        wvalid, wready = _v(port.wvalid), _v(port.wready)
        if wvalid == 1 or port.w_hold is not None:
            now = [_v(s) for s in port.w]
            port.w_hold = self._stable(port, port.w_hold, now, wvalid, wready, "W")
            if wvalid == 1 and wready == 1:
                port.w_beats += 1
                if now[2] == 1:
                    port.w_lens.append(port.w_beats)
                    port.w_beats = 0
                elif port.w_beats >= MAX_BURST:
                    self._fail(port, f"{port.w_beats} W beats without WLAST")
        while port.aw_lens and port.w_lens:
            (ident, want, stale), got = port.aw_lens.popleft(), port.w_lens.popleft()
            if want != got:
                self._fail(port, f"WLAST after {got} beats of a burst with AWLEN {want - 1}")
            port.b_wait.append([ident, stale])
        if _v(port.bvalid) == 1 and _v(port.bready) == 1:
            bid = _v(port.bid)
            waiting = next((b for b in port.b_wait if b[0] == bid), None)
            if waiting is None:
                self._fail(port, f"B response with BID {bid} and no write burst of that ID outstanding")
            else:
                port.b_wait.remove(waiting)
                self.stale_b += waiting[1]

    def check_idle(self) -> None:
        """After ap_done: every burst asked for has all its beats and its response."""
        for port in self.ports:
            left = []
            r_bursts = [b for b in port.r_bursts if not b[2]]
            if r_bursts:
                left.append(f"{len(r_bursts)} read bursts short of beats")
            if port.aw_lens or port.w_lens or port.w_beats:
                left.append(f"AW {len(port.aw_lens)} / W {len(port.w_lens)} bursts unmatched, {port.w_beats} W beats "
                            "past the last WLAST")
            b_wait = sum(not stale for _ident, stale in port.b_wait)
            if b_wait:
                left.append(f"{b_wait} write responses outstanding")
            if left:
                self._fail(port, "at ap_done: " + "; ".join(left))
