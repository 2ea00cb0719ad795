"""A software peer card on an `eth_switch.EthSwitch` port, for the cocotb ring benches.

`SoftPeer` wraps the exact card model `hls.net.card.Card` (its config needs `fcs=True`: frames on
the switch carry their FCS): it hands every frame the switch delivers to `Card.receive(frame,
now)` and transmits what `Card.poll(now)` returns, serialized at the port's line rate (a frame of B
bytes, FCS included, reaches the switch's ingress (B + 20) x 8 / rate after it starts, back to
back; ACK/NAK frames go before the data frames waiting, as the RTL card's arbiter sends them: a
peer whose sender handed over a window of data frames would otherwise hold its ACKs a window's
line time, and the predecessor's window with them). `now` is the simulation time in seconds, so
the card's retransmission timeout (`CardConfig.rto`) runs in simulated time. The card is polled
after every delivery, after every frame sent and every `poll_s` (the timeout's resolution).
`start_step`, `done`, `gathered`, `counters` and `error` pass through; `wait_done()` waits for the
step in simulated time.
"""

from __future__ import annotations

from collections import deque

import cocotb
import numpy as np
from cocotb.triggers import Event, First, Timer
from cocotb.utils import get_sim_time
from eth_switch import PS, EthSwitch, last_bit_ps, wire_ps

from hls.net import wire
from hls.net.card import Card

_OPCODE_BYTE = wire.ETH_BYTES + wire.IPV4_BYTES + wire.UDP_BYTES  # the ring header's version/opcode byte
_CONTROL = frozenset((int(wire.Opcode.ACK), int(wire.Opcode.NAK)))


class SoftPeer:
    """One software card on switch port `port`; see the module docstring."""

    def __init__(self, card: Card, switch: EthSwitch, port: int, *, line_rate: float | None = None,
                 poll_s: float = 1e-6) -> None:
        if not card.config.fcs:
            raise ValueError("SoftPeer: the card's config needs fcs=True (frames on the switch carry their FCS)")
        if not 0 < poll_s <= 1e-3:
            raise ValueError(f"poll_s: {poll_s!r} must be in (0, 1e-3] seconds")
        self.card = card
        self.switch = switch
        self.port = port
        self.line_rate = switch.config.line_rate if line_rate is None else line_rate
        self.poll_s = poll_s
        self._tx: deque[bytes] = deque()
        self._ctl: deque[bytes] = deque()  # ACK/NAK frames: sent before the data frames waiting
        self._wake = Event()
        self._free_ps = 0  # when the transmit link is free (the last frame's gap included)
        self._poll_ps = round(poll_s / PS)
        self._tasks: list = []
        switch.attach(port, self._on_frame)

    # -- the host side (pass-through) ---------------------------------------------------------------------

    def start_step(self, step: int, local_grad: np.ndarray, **kwargs: object) -> None:
        self.card.start_step(step, local_grad, **kwargs)
        self._kick()

    @property
    def done(self) -> bool:
        return self.card.done

    @property
    def gathered(self) -> np.ndarray | None:
        return self.card.gathered

    @property
    def counters(self) -> dict[str, int]:
        return self.card.counters

    @property
    def error(self) -> Exception | None:
        return self.card.error

    def start(self) -> None:
        """Start the peer's transmit loop (inside a cocotb test; the switch must be started too)."""
        if not self._tasks:
            self._tasks.append(cocotb.start_soon(self._run()))

    async def wait_done(self, timeout_s: float) -> None:
        """Until the card is done with its step; RuntimeError on a protocol error or after `timeout_s`."""
        deadline = get_sim_time("ps") + timeout_s / PS
        while not self.card.done:
            if self.card.error is not None:
                raise self.card.error
            if get_sim_time("ps") >= deadline:
                raise RuntimeError(f"peer on port {self.port}: step {self.card.step} not done after "
                                   f"{timeout_s * 1e6:.1f} us of simulated time; counters {self.card.counters}")
            await Timer(self._poll_ps, "ps")

    # -- the wire side -------------------------------------------------------------------------------------

    @staticmethod
    def _now_s() -> float:
        return get_sim_time("ps") * PS

    def _on_frame(self, frame: bytes) -> None:
        self.card.receive(frame, self._now_s())
        self._kick()

    def _kick(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            for f in self.card.poll(self._now_s()):
                (self._ctl if f[_OPCODE_BYTE] & 0xF in _CONTROL else self._tx).append(f)
            if self._ctl or self._tx:
                frame = (self._ctl or self._tx).popleft()
                now = int(get_sim_time("ps"))
                start = max(now, self._free_ps)
                self._free_ps = start + wire_ps(len(frame), self.line_rate)
                # The switch has the frame once its last bit is in; the gap after it keeps the link busy.
                await Timer(start + last_bit_ps(len(frame), self.line_rate) - now, "ps")
                self.switch.send(self.port, frame)
                gap = self._free_ps - int(get_sim_time("ps"))
                if gap > 0:
                    await Timer(gap, "ps")
                continue
            self._wake.clear()
            await First(self._wake.wait(), Timer(self._poll_ps, "ps"))


__all__ = ["SoftPeer"]
