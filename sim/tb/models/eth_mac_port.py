"""A card's 100G MAC port on a switch port, with cocotbext-eth's MAC model (`EthMac`, 0.1.28).

`MacPort(rx_bus, tx_bus, clock, reset_n, switch, port)`: cocotbext-eth's `EthMac` (its `EthMacRx`
drives the card's receive stream, its `EthMacTx` takes the card's transmit stream) at 100 Gb/s on
the 512-bit buses, joined to `eth_switch.EthSwitch` port `port` by thin glue for what AMD's CMAC
does and the model does not:

- FCS. Frames on the switch carry their FCS; the card's streams do not (the CMAC strips and checks
  it on receive and appends it on transmit). The glue strips it before `EthMacRx` and appends it
  to what `EthMacTx` collected. Both directions use an inter-frame gap of 12 + 4 bytes, so the
  model's pacing (preamble, bytes, gap) equals the line time of the frame with its FCS.
- TUSER, the CMAC's FCS-failed flag (`rx_axis_tuser` on the last beat: a damaged frame is
  delivered flagged, not dropped). `EthMacRx`'s only per-frame TUSER is its PTP timestamp
  (`tuser = ptp_time << 1` on every beat of the frame, read once per frame in order). The glue's
  `ptp_time` stand-in answers 1 for a frame whose FCS failed, 0 otherwise, so TUSER bit 1 is the
  flag; the ring simulation top (templates/net/ring_sim_top.v.j2) gives the card bit 1 on the
  last beat. The bus must have a 2-bit tuser.
- Undersize frames (under 64 bytes with FCS) are discarded on receive (`runts`), frames under 60
  bytes padded on transmit, as the CMAC does.
- The transmit underflow (TVALID low inside a frame while TREADY is high) is counted per clock
  by the RTL checker `onic_mac_tx_check` beside the stream (the top's `c<k>_mac_tx_underflows`):
  `EthMacTx` asserts only when its own queue runs dry at its pacing, so a short gap passes unseen.

Timing: the switch gets a transmitted frame when `EthMacTx` has serialized its last byte (the FCS
is in the gap time); the receiver gets a frame's first beat a preamble after the switch
delivered it (the switch delivers when its last bit is in: store and forward).
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections import deque
from typing import Any

import cocotb
from cocotbext.eth import EthMac, EthMacFrame
from eth_switch import EthSwitch

MIN_FRAME = 60  # without FCS
FCS_BYTES = 4
IFG = 12 + FCS_BYTES  # the model's gap also covers the FCS the streams do not carry


def fcs(frame: bytes) -> bytes:
    return struct.pack("<I", zlib.crc32(frame) & 0xFFFFFFFF)


class _FcsFlags:
    """EthMacRx's `ptp_time`: read once per frame, in order, as the frame starts; 1 = FCS failed."""

    def __init__(self) -> None:
        self.pending: deque[int] = deque()

    def __len__(self) -> int:
        return 1

    @property
    def value(self) -> int:
        return self.pending.popleft() if self.pending else 0


class MacPort:
    """One card's MAC port (cocotbext-eth EthMac) on switch port `port`; see the module docstring."""

    def __init__(self, rx_bus: Any, tx_bus: Any, clock: Any, reset_n: Any, switch: EthSwitch, port: int,
                 speed: float = 100e9) -> None:
        if len(rx_bus.tdata) != 512 or len(rx_bus.tuser) != 2:
            raise ValueError("MacPort: the receive bus needs tdata 512 and tuser 2 bits (bit 1: FCS failed)")
        self.flags = _FcsFlags()
        self.mac = EthMac(tx_bus=tx_bus, tx_clk=clock, tx_rst=reset_n, rx_bus=rx_bus, rx_clk=clock, rx_rst=reset_n,
                          rx_ptp_time=self.flags, reset_active_level=False, ifg=IFG, speed=speed)
        for model in (self.mac.rx, self.mac.tx):
            model.log.setLevel(logging.WARNING)
        self.switch, self.port = switch, port
        self.counters = {"frames_in": 0, "bytes_in": 0, "fcs_failed": 0, "runts": 0, "frames_out": 0,
                         "bytes_out": 0}
        self.sent: list[bytes] = []  # every frame the card sent, FCS included
        self.received: list[bytes] = []  # every frame delivered to the card (not runts), FCS included
        switch.attach(port, self.deliver)
        cocotb.start_soon(self._transmit())

    def deliver(self, frame: bytes) -> None:
        """A frame off the switch (FCS included) into the card's receive stream."""
        if len(frame) < MIN_FRAME + FCS_BYTES:
            self.counters["runts"] += 1
            return
        self.received.append(frame)
        data = frame[:-FCS_BYTES]
        bad = fcs(data) != frame[-FCS_BYTES:]
        self.counters["frames_in"] += 1
        self.counters["bytes_in"] += len(data)
        self.counters["fcs_failed"] += bad
        self.flags.pending.append(int(bad))
        self.mac.rx.send_nowait(EthMacFrame(data))

    async def _transmit(self) -> None:
        while True:
            frame = await self.mac.tx.recv()
            data = bytes(frame.data).ljust(MIN_FRAME, b"\0")
            self.counters["frames_out"] += 1
            self.counters["bytes_out"] += len(data)
            wire = data + fcs(data)
            self.sent.append(wire)
            self.switch.send(self.port, wire)

    @property
    def idle(self) -> bool:
        return self.mac.rx.idle() and self.mac.tx.empty() and not self.flags.pending


__all__ = ["FCS_BYTES", "IFG", "MacPort", "fcs"]
