"""Port adapters between an RTL card's 512-bit MAC streams and an `eth_switch.EthSwitch` port, as
AMD's CMAC presents them to the card (frames on the switch carry their FCS; the card's streams
do not).

- `RxAdapter` drives the card's receive stream (`<prefix>_tdata` 512, `_tkeep` 64, `_tvalid`,
  `_tlast`, `_tuser` 1; no tready: the MAC never waits). For each frame the switch delivers it
  checks and strips the FCS and sends the beats back to back, TKEEP on the last beat, TUSER = 1 on
  the last beat when the FCS failed: the CMAC's `rx_axis_tuser` (it delivers a damaged frame with
  the flag rather than dropping it). Frames under 64 bytes with FCS are discarded (`runts`), as the
  CMAC's minimum length check does. More than `overrun_bytes` waiting (a kernel clock too slow for
  the line rate: the real MAC would lose frames) is recorded in `errors`. Built on cocotbext-axi's
  `AxiStreamSource`.
- `TxAdapter` takes the card's transmit stream (`_tdata`, `_tkeep`, `_tvalid`, `_tready` driven
  here, `_tlast`), a beat whenever TVALID and TREADY are high at a rising edge, pads a frame under
  60 bytes with zeros (as the CMAC does), appends the FCS and
  serializes the frame at the line rate onto the switch (the switch has it when its last bit is
  in). TREADY falls while more than `fifo_bytes` wait for the line (the MAC's back-pressure).
  Checked every clock (`errors`, counted in `counters`): a TVALID gap inside a frame (the CMAC's
  transmit underflow: the frame goes out with a corrupted FCS, as the MAC aborts it), TKEEP not
  all ones before the last beat or not contiguous from byte 0 on it, and X/Z on TVALID. With
  `strict`, the first error fails the test at once.

Why not cocotbext-eth (0.1.28): its `EthMacRx` keeps TUSER bit 0 for PTP and never raises the
FCS-failed flag, and sends the frame's FCS on the stream; its `EthMacTx` paces every beat with
`Timer`s and reports an underflow with a bare `assert` only when its queue runs dry at that pace
(a TVALID gap shorter than the pacing slack is missed), and it expects the FCS on the stream.
So the receive side uses cocotbext-axi's `AxiStreamSource` (it supports a bus without tready
and per-beat TUSER) and the transmit side is a per-clock monitor written here. Re-examined for
the N-card ring: with thin glue (FCS, TUSER through EthMacRx's PTP timestamp, an RTL underflow
checker) cocotbext-eth's `EthMac` does serve the card: `eth_mac_port.MacPort`, used there; these
adapters remain for the one-card benches and the loopback tests.
"""

from __future__ import annotations

import struct
import zlib
from collections import deque
from typing import Any

import cocotb
from cocotb.triggers import RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource
from eth_switch import EthSwitch, last_bit_ps, wire_ps

BEAT_BYTES = 64
FULL_KEEP = (1 << BEAT_BYTES) - 1
MIN_FRAME = 60  # without FCS: the MAC pads shorter frames on transmit and drops them on receive


def fcs(frame: bytes) -> bytes:
    """The Ethernet FCS of `frame` (without FCS), as it follows the frame on the wire (`hls.net.wire.fcs`)."""
    return struct.pack("<I", zlib.crc32(frame) & 0xFFFFFFFF)


def fcs_ok(frame: bytes) -> bool:
    """True when `frame` (FCS included) passes its frame check."""
    return len(frame) > 4 and fcs(frame[:-4]) == frame[-4:]


class RxAdapter:
    """Switch port `port` -> the card's MAC receive stream `prefix`; see the module docstring."""

    def __init__(self, dut: Any, prefix: str, clock: Any, switch: EthSwitch, port: int, reset: Any = None,
                 overrun_bytes: int = 64 * 1024) -> None:
        self.overrun_bytes = overrun_bytes
        self.errors: list[str] = []
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, prefix), clock, reset)
        if hasattr(self.source.bus, "tready"):
            raise ValueError(f"{prefix}: the MAC receive stream has no tready (the MAC never waits)")
        if len(self.source.bus.tdata) != 8 * BEAT_BYTES or len(self.source.bus.tuser) != 1:
            raise ValueError(f"{prefix}: expected tdata 512 and tuser 1 bits")
        self.source.log.setLevel("WARNING")
        self.counters = {"frames": 0, "bytes": 0, "fcs_failed": 0, "runts": 0, "max_queued_bytes": 0}
        switch.attach(port, self.deliver)

    def deliver(self, frame: bytes) -> None:
        """One frame off the wire (FCS included): its beats, FCS stripped, TUSER on the last if it failed."""
        if len(frame) < MIN_FRAME + 4:  # undersize: the MAC discards it (counted, never delivered)
            self.counters["runts"] += 1
            return
        bad = not fcs_ok(frame)
        data = frame[:-4]
        self.counters["frames"] += 1
        self.counters["bytes"] += len(data)
        self.counters["fcs_failed"] += bad
        self.source.send_nowait(AxiStreamFrame(data, tuser=[0] * (len(data) - 1) + [int(bad)]))
        queued = self.source.queue_occupancy_bytes
        self.counters["max_queued_bytes"] = max(self.counters["max_queued_bytes"], queued)
        if queued > self.overrun_bytes:  # the clock x 64 bytes is below the line rate: a CMAC would lose frames
            self.errors.append(f"{get_sim_time('ns'):.1f} ns: {queued} bytes wait for the receive stream")

    @property
    def idle(self) -> bool:
        return self.source.idle()


class TxError(AssertionError):
    pass


class TxAdapter:
    """The card's MAC transmit stream `prefix` -> switch port `port`; see the module docstring."""

    def __init__(self, dut: Any, prefix: str, clock: Any, switch: EthSwitch, port: int, *,
                 line_rate: float | None = None, fifo_bytes: int = 4096, strict: bool = True) -> None:
        g = lambda s: getattr(dut, f"{prefix}_{s}")  # noqa: E731
        self.tdata, self.tkeep, self.tvalid, self.tready, self.tlast = (
            g(s) for s in ("tdata", "tkeep", "tvalid", "tready", "tlast"))
        if len(self.tdata) != 8 * BEAT_BYTES or len(self.tkeep) != BEAT_BYTES:
            raise ValueError(f"{prefix}: expected tdata 512 and tkeep 64 bits")
        if fifo_bytes < BEAT_BYTES:
            raise ValueError(f"fifo_bytes: {fifo_bytes} must be >= {BEAT_BYTES}")
        self.clock = clock
        self.switch = switch
        self.port = port
        self.line_rate = switch.config.line_rate if line_rate is None else line_rate
        self.fifo_bytes = fifo_bytes
        self.strict = strict
        self.errors: list[str] = []
        self.counters = {"frames": 0, "bytes": 0, "beats": 0, "underflows": 0, "keep_errors": 0,
                         "backpressure_clocks": 0}
        self.frames: list[bytes] = []  # every frame sent, FCS included, for the bench to inspect
        self._line: deque[bytes] = deque()
        self._backlog = 0
        self._free_ps = 0
        self._wake = None
        self.tready.value = 0
        cocotb.start_soon(self._monitor())
        cocotb.start_soon(self._serialize())

    def _error(self, message: str) -> None:
        text = f"{get_sim_time('ns'):.1f} ns: {message}"
        self.errors.append(text)
        if self.strict:
            raise TxError(f"MAC TX port {self.port}: {text}")

    async def _monitor(self) -> None:
        beats: list[bytes] = []
        underflow = False
        ready = 0
        while True:
            await RisingEdge(self.clock)
            valid = self.tvalid.value
            if not valid.is_resolvable:
                self._error(f"TVALID is {valid}")
                valid = 0
            valid = int(valid)
            if ready and beats and not valid:
                if not underflow:
                    self.counters["underflows"] += 1
                    self._error(f"TVALID low inside a frame after {len(beats)} beats (MAC underflow)")
                underflow = True
            if valid and ready:
                keep = int(self.tkeep.value)
                last = int(self.tlast.value)
                raw = int(self.tdata.value).to_bytes(BEAT_BYTES, "little")
                n = keep.bit_length()
                if (not last and keep != FULL_KEEP) or keep != (1 << n) - 1 or n == 0:
                    self.counters["keep_errors"] += 1
                    self._error(f"TKEEP {keep:#x} on {'the last' if last else 'a'} beat")
                beats.append(raw[:n])
                self.counters["beats"] += 1
                if last:
                    self._send(b"".join(beats), underflow)
                    beats, underflow = [], False
            ready = int(self._backlog <= self.fifo_bytes)
            self.counters["backpressure_clocks"] += not ready
            self.tready.value = ready

    def _send(self, frame: bytes, aborted: bool) -> None:
        frame = frame.ljust(MIN_FRAME, b"\0")
        check = fcs(frame)
        if aborted:  # the MAC aborts the frame on the line: the receiver's frame check fails
            check = bytes(b ^ 0xFF for b in check)
        self.counters["frames"] += 1
        self.counters["bytes"] += len(frame)
        wire = frame + check
        self.frames.append(wire)
        self._line.append(wire)
        self._backlog += len(wire)
        if self._wake is not None:
            self._wake.set()

    async def _serialize(self) -> None:
        from cocotb.triggers import Event

        self._wake = Event()
        while True:
            if not self._line:
                self._wake.clear()
                await self._wake.wait()
                continue
            frame = self._line.popleft()
            now = int(get_sim_time("ps"))
            start = max(now, self._free_ps)
            self._free_ps = start + wire_ps(len(frame), self.line_rate)
            await Timer(start + last_bit_ps(len(frame), self.line_rate) - now, "ps")
            self._backlog -= len(frame)
            self.switch.send(self.port, frame)
            gap = self._free_ps - int(get_sim_time("ps"))
            if gap > 0:
                await Timer(gap, "ps")

    @property
    def idle(self) -> bool:
        return not self._line and self._backlog == 0


__all__ = ["RxAdapter", "TxAdapter", "TxError", "fcs", "fcs_ok"]
