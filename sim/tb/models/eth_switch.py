"""A seeded, faulty Ethernet switch between N ports for the cocotb ring benches (design.md 8.4).

Frames are the bytes on the wire: Ethernet header to FCS included (`hls.net.wire.build_frame(...,
with_fcs=True)`, `hls.net.card.Card` with `fcs=True`); the port adapters (`eth_port.py`) add the
FCS on transmit and check and strip it on receive, as AMD's CMAC does.

A frame's path::

    ingress(port, frame) at t  ->  + latency  ->  forward by destination MAC  ->  faults of the egress
    port (drop, duplicate, reorder, bit flip)  ->  egress buffer (tail drop past `buffer_bytes`)
    ->  serialized at the line rate  ->  delivered to the egress port's receiver when its last bit is in

- Line rate: a frame of B bytes (FCS included) occupies the egress port for (B + 20) x 8 / rate
  seconds (8 preamble + 12 inter-frame gap bytes); the sender's own serialization is the sender's
  (`soft_peer.SoftPeer`, `eth_port.TxAdapter`) before `ingress`. Times are integer picoseconds
  (exact at 100G: 80 ps a byte), so a run's timing does not depend on when it starts.
- Forwarding: a configured table (MAC -> port) and, with `learn`, source MACs learned at
  ingress. An unknown or broadcast destination is flooded to every other port (counted
  `flooded`: the extra copies) or, with `flood=False`, dropped (`dropped_no_route`).
- Faults (`PortFaults`, per egress port or one for all) mirror `pynq_driver.net.faults.Faults`
  where they overlap, so figures compare: one `random.Random(seed x 1009 + port)` per egress port
  (as `Faults.for_rank` per sending rank), and per frame the same draws in the same order, so a
  frame sequence meets the same faults as through `FaultLayer` with that seed (reorder depth 1,
  no delay fault, holds not expiring). A drop is a frame lost on the
  link; a flip inverts one bit anywhere (headers, payload or FCS), so the receiver's FCS check
  fails (CRC-32 catches every single-bit error); with `flip_behind_fcs` the bit is one before the
  FCS and the FCS is recomputed (damage in a switch's buffer memory, or past the receiving MAC's
  check), so the frame reaches the card's parser and only the UDP checksum can catch it (as
  `Faults.flip_behind_fcs`); a duplicate is queued twice (both copies flipped
  if the frame is); a reordered frame is held back until `reorder_depth` later frames to the same
  port have been queued, or `hold_s` passes (one held frame per port at a time).
- Counters per port (`PortCounters`) and in total (`counters()`); they reconcile once the switch
  is idle: frames_in + duplicated + flooded = frames_out + every drop cause (`reconcile()`).
  The same seed and the same ingress sequence give the same faults, counters and log.

`SwitchCore` is the engine in explicit time (no simulator: `ingress`, `next_time`, `advance`);
`EthSwitch` runs it in a cocotb simulation on `Timer`s, needing no clock, and calls each port's
receiver (`attach`) with the delivered frame.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields

from hls.net.wire import flip_bit

PREAMBLE_IFG_BYTES = 20  # 8 preamble + SFD, 12 inter-frame gap
LINE_RATE_100G = 100e9
BROADCAST = b"\xff" * 6
PS = 1e-12

DROP_CAUSES = ("fault", "buffer", "no_route", "runt")

log = logging.getLogger("eth_switch")


def wire_ps(frame_bytes: int, line_rate: float = LINE_RATE_100G) -> int:
    """The time (ps) a frame of `frame_bytes` (FCS included) occupies a link at `line_rate` b/s: exact
    at 100, 50, 25 and 10 Gb/s (a byte is 80 ps at 100G); integers keep a run's timing independent
    of when it starts."""
    return round((frame_bytes + PREAMBLE_IFG_BYTES) * 8e12 / line_rate)


def last_bit_ps(frame_bytes: int, line_rate: float = LINE_RATE_100G) -> int:
    """From a frame's first preamble bit to its last bit (the receiver has it; the 12-byte gap follows)."""
    return round((frame_bytes + 8) * 8e12 / line_rate)


def wire_clocks(frame_bytes: int, clock_hz: float, line_rate: float = LINE_RATE_100G) -> float:
    """The same in clocks of a kernel clock of `clock_hz` (a 1518-byte frame at 100G and 250 MHz: 30.8)."""
    return wire_ps(frame_bytes, line_rate) * PS * clock_hz


def _probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: {value!r} must be a probability in [0, 1)")
    return float(value)


@dataclass(frozen=True)
class PortFaults:
    """Per-frame probabilities of each fault on one egress link, the reorder depth and hold, the seed."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    bitflip: float = 0.0
    reorder_depth: int = 1  # a reordered frame goes out behind this many later frames
    hold_s: float = 2e-6  # ... or after this long, whichever comes first
    flip_behind_fcs: bool = False  # the FCS recomputed over a flipped frame: no frame check sees it
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "reorder", "bitflip"):
            _probability(f"faults.{name}", getattr(self, name))
        if isinstance(self.reorder_depth, bool) or not isinstance(self.reorder_depth, int) or self.reorder_depth < 1:
            raise ValueError(f"faults.reorder_depth: {self.reorder_depth!r} must be an integer >= 1")
        if isinstance(self.hold_s, bool) or not isinstance(self.hold_s, (int, float)) or not 0.0 < self.hold_s <= 1.0:
            raise ValueError(f"faults.hold_s: {self.hold_s!r} must be in (0, 1] seconds")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"faults.seed: {self.seed!r} must be an integer")
        if not isinstance(self.flip_behind_fcs, bool):
            raise ValueError(f"faults.flip_behind_fcs: {self.flip_behind_fcs!r} must be true or false")

    @property
    def any(self) -> bool:
        return any((self.drop, self.duplicate, self.reorder, self.bitflip))

    def for_port(self, port: int) -> PortFaults:
        """The same faults with the port's own seed (as `Faults.for_rank`): independent, repeatable."""
        return PortFaults(**{**{f.name: getattr(self, f.name) for f in fields(self)}, "seed": self.seed * 1009 + port})


@dataclass
class PortCounters:
    """One port's counters: ingress (`frames_in`), egress (`frames_out` delivered), faults and drops
    of frames forwarded to it (dropped_<cause>; `runt` and `no_route` count at the ingress port)."""

    frames_in: int = 0
    bytes_in: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    duplicated: int = 0
    reordered: int = 0
    bitflipped: int = 0  # damaged frames delivered (a flipped frame tail-dropped is not counted)
    flooded: int = 0
    dropped_fault: int = 0
    dropped_buffer: int = 0
    dropped_no_route: int = 0
    dropped_runt: int = 0
    max_buffer_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SwitchConfig:
    """The switch: line rate (b/s, every port), fixed latency (ingress to egress queue, s), egress
    buffer per port (bytes queued or on the wire; None: unbounded), forwarding (`table` MAC -> port,
    `learn` source MACs, `flood` unknown destinations), faults (one `PortFaults` for every port, each
    with its own seed, or a mapping port -> faults), and `frame_log` (keep every event in `log`)."""

    ports: int
    line_rate: float = LINE_RATE_100G
    latency_s: float = 500e-9
    buffer_bytes: int | None = None
    table: Mapping[bytes, int] = field(default_factory=dict)
    learn: bool = True
    flood: bool = True
    faults: PortFaults | Mapping[int, PortFaults] = field(default_factory=PortFaults)
    frame_log: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.ports, bool) or not isinstance(self.ports, int) or not 2 <= self.ports <= 256:
            raise ValueError(f"ports: {self.ports!r} must be an integer in 2 .. 256")
        if not isinstance(self.line_rate, (int, float)) or not 1e6 <= self.line_rate <= 1e13:
            raise ValueError(f"line_rate: {self.line_rate!r} b/s out of 1e6 .. 1e13")
        if not isinstance(self.latency_s, (int, float)) or not 0.0 <= self.latency_s <= 1.0:
            raise ValueError(f"latency_s: {self.latency_s!r} must be 0 .. 1 seconds")
        if self.buffer_bytes is not None and (isinstance(self.buffer_bytes, bool)
                                              or not isinstance(self.buffer_bytes, int) or self.buffer_bytes < 64):
            raise ValueError(f"buffer_bytes: {self.buffer_bytes!r} must be None or an integer >= 64")
        for mac, port in self.table.items():
            if not isinstance(mac, bytes) or len(mac) != 6:
                raise ValueError(f"table: {mac!r} is not a 6-byte MAC address")
            self._check_port(port, "table")
        if isinstance(self.faults, Mapping):
            for port, f in self.faults.items():
                self._check_port(port, "faults")
                if not isinstance(f, PortFaults):
                    raise TypeError(f"faults[{port}]: expected PortFaults, got {type(f).__name__}")
        elif not isinstance(self.faults, PortFaults):
            raise TypeError(f"faults: expected PortFaults or a mapping port -> PortFaults, got {type(self.faults)}")

    def _check_port(self, port: object, what: str) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < self.ports:
            raise ValueError(f"{what}: port {port!r} out of 0 .. {self.ports - 1}")

    def port_faults(self, port: int) -> PortFaults:
        if isinstance(self.faults, Mapping):
            return self.faults.get(port, PortFaults())
        return self.faults.for_port(port)


@dataclass
class _Egress:
    faults: PortFaults
    rng: random.Random
    queue: deque[tuple[bytes, bool]] = field(default_factory=deque)  # (frame, damaged by a flip)
    queued_bytes: int = 0  # waiting and on the wire
    busy: bool = False
    free_ps: int = 0  # when the last frame's last bit and its gap left
    held: tuple[bytes, bool] | None = None  # a reordered frame
    held_behind: int = 0  # frames still to overtake it
    held_token: int = 0


@dataclass(frozen=True)
class Delivery:
    port: int
    frame: bytes
    time_ps: int


class SwitchCore:
    """The switch's engine in explicit integer-picosecond time; see the module docstring."""

    def __init__(self, config: SwitchConfig) -> None:
        self.config = config
        self.table: dict[bytes, int] = dict(config.table)
        self.ports = [PortCounters() for _ in range(config.ports)]
        self._egress = []
        for p in range(config.ports):
            f = config.port_faults(p)
            self._egress.append(_Egress(f, random.Random(f.seed)))
        # (time, order, kind, port, frame, token: a hold's number or 1 for a flipped frame on the wire)
        self._events: list[tuple[int, int, str, int, bytes, int]] = []
        self._order = 0
        self._latency_ps = round(config.latency_s / PS)
        self.log: list[tuple[int, str, int, int, str]] = []  # (time ps, event, port, bytes, detail)
        self._now = 0

    # -- inputs -----------------------------------------------------------------------------------------

    def ingress(self, port: int, frame: bytes, now_ps: int) -> None:
        """Frame `frame` (FCS included) has fully arrived at ingress port `port` at `now_ps`."""
        self.config._check_port(port, "ingress")
        if now_ps < self._now:
            raise ValueError(f"ingress at {now_ps} ps, before the switch's time {self._now} ps")
        c = self.ports[port]
        c.frames_in += 1
        c.bytes_in += len(frame)
        self._log(now_ps, "in", port, frame, "")
        self._push(now_ps + self._latency_ps, "forward", port, bytes(frame))

    def next_time(self) -> int | None:
        """The time (ps) of the next event, None when idle."""
        return self._events[0][0] if self._events else None

    def advance(self, now_ps: int) -> list[Delivery]:
        """Run every event due at or before `now_ps`; the frames delivered, in order."""
        out: list[Delivery] = []
        while self._events and self._events[0][0] <= now_ps:
            t, _, kind, port, frame, token = heapq.heappop(self._events)
            self._now = t
            if kind == "forward":
                self._forward(t, port, frame)
            elif kind == "done":
                self._done(t, port, frame, bool(token), out)
            elif kind == "release":
                e = self._egress[port]
                if e.held is not None and e.held_token == token:
                    self._release_held(t, port)
        self._now = max(self._now, now_ps)
        return out

    # -- counters ---------------------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Every port's counters added up (max_buffer_bytes: the largest of any port)."""
        total = PortCounters().as_dict()
        for c in self.ports:
            for name, value in c.as_dict().items():
                total[name] = max(total[name], value) if name == "max_buffer_bytes" else total[name] + value
        return total

    @property
    def idle(self) -> bool:
        return not self._events and all(e.held is None and not e.busy for e in self._egress)

    def reconcile(self) -> dict[str, int]:
        """The counters if they add up: frames_in + duplicated + flooded = frames_out + drops by cause
        (only meaningful when `idle`); else AssertionError."""
        t = self.counters()
        made = t["frames_in"] + t["duplicated"] + t["flooded"]
        gone = t["frames_out"] + sum(t[f"dropped_{c}"] for c in DROP_CAUSES)
        in_flight = sum(len(e.queue) + e.busy + (e.held is not None) for e in self._egress)
        in_flight += sum(1 for ev in self._events if ev[2] == "forward")
        if made != gone + in_flight:
            raise AssertionError(f"switch counters do not reconcile: in {t['frames_in']} + duplicated "
                                 f"{t['duplicated']} + flooded {t['flooded']} != out {t['frames_out']} + drops "
                                 f"{ {c: t[f'dropped_{c}'] for c in DROP_CAUSES} } + in flight {in_flight}")
        return t

    # -- internals --------------------------------------------------------------------------------------

    def _push(self, t: int, kind: str, port: int, frame: bytes, token: int = 0) -> None:
        self._order += 1
        heapq.heappush(self._events, (t, self._order, kind, port, frame, token))

    def _log(self, t: int, event: str, port: int, frame: bytes, detail: str) -> None:
        if self.config.frame_log:
            self.log.append((t, event, port, len(frame), detail))
            log.debug("%d ps %s port %d %d bytes %s", t, event, port, len(frame), detail)

    def _forward(self, t: int, port: int, frame: bytes) -> None:
        c = self.ports[port]
        if len(frame) < 14:
            c.dropped_runt += 1
            self._log(t, "drop", port, frame, "runt")
            return
        dst, src = frame[0:6], frame[6:12]
        if self.config.learn and not src[0] & 1:
            self.table[src] = port
        out = self.table.get(dst) if not dst[0] & 1 else None
        if out is None:
            if not self.config.flood:
                c.dropped_no_route += 1
                self._log(t, "drop", port, frame, "no_route")
                return
            targets = [p for p in range(self.config.ports) if p != port]
            c.flooded += len(targets) - 1
        elif out == port:  # a real switch filters a frame back to its own segment
            c.dropped_no_route += 1
            self._log(t, "drop", port, frame, "same port")
            return
        else:
            targets = [out]
        for p in targets:
            self._fault(t, p, frame)

    def _fault(self, t: int, port: int, frame: bytes) -> None:
        e, c = self._egress[port], self.ports[port]
        f = e.faults
        if not f.any:
            self._enqueue(t, port, frame, False)
            return
        # Every decision drawn each time, exactly as pynq_driver.net.faults.FaultLayer draws them (its
        # delay draws included, unused here): the same seed and frames get the same drops, flips,
        # duplicates and reorders, and one fault's probability never shifts another's stream.
        r_drop, r_dup, r_reorder, r_flip, _ = (e.rng.random() for _ in range(5))
        bit = e.rng.randrange(8 * len(frame))
        e.rng.random()  # FaultLayer's delay time: one uniform draw
        if r_drop < f.drop:
            c.dropped_fault += 1
            self._log(t, "drop", port, frame, "fault")
            return
        flipped = r_flip < f.bitflip
        if flipped:
            frame = flip_bit(frame, bit, behind_fcs=f.flip_behind_fcs)
            self._log(t, "flip", port, frame, f"bit {bit}" + (" behind the FCS" if f.flip_behind_fcs else ""))
        copies = 2 if r_dup < f.duplicate else 1
        c.duplicated += copies - 1
        for _ in range(copies):
            if r_reorder < f.reorder and e.held is None:
                c.reordered += 1
                e.held, e.held_behind = (frame, flipped), f.reorder_depth
                e.held_token += 1
                self._push(t + round(f.hold_s / PS), "release", port, b"", e.held_token)
                self._log(t, "hold", port, frame, f"behind {f.reorder_depth}")
            else:
                self._enqueue(t, port, frame, flipped)
                if e.held is not None:
                    e.held_behind -= 1
                    if e.held_behind == 0:
                        self._release_held(t, port)

    def _release_held(self, t: int, port: int) -> None:
        e = self._egress[port]
        assert e.held is not None
        (frame, flipped), e.held = e.held, None
        self._enqueue(t, port, frame, flipped)

    def _enqueue(self, t: int, port: int, frame: bytes, flipped: bool) -> None:
        e, c = self._egress[port], self.ports[port]
        limit = self.config.buffer_bytes
        if limit is not None and e.queued_bytes + len(frame) > limit:
            c.dropped_buffer += 1
            self._log(t, "drop", port, frame, f"buffer {e.queued_bytes} bytes queued")
            return
        e.queue.append((frame, flipped))
        e.queued_bytes += len(frame)
        c.max_buffer_bytes = max(c.max_buffer_bytes, e.queued_bytes)
        self._log(t, "queue", port, frame, f"{e.queued_bytes} bytes queued")
        if not e.busy:
            self._start(t, port)

    def _start(self, t: int, port: int) -> None:
        e = self._egress[port]
        frame, flipped = e.queue.popleft()
        e.busy = True
        start = max(t, e.free_ps)
        e.free_ps = start + wire_ps(len(frame), self.config.line_rate)
        # The last bit is in before the inter-frame gap ends: deliver then, keep the port busy to free_ps.
        self._push(start + last_bit_ps(len(frame), self.config.line_rate), "done", port, frame, int(flipped))

    def _done(self, t: int, port: int, frame: bytes, flipped: bool, out: list[Delivery]) -> None:
        e, c = self._egress[port], self.ports[port]
        e.busy = False
        c.bitflipped += flipped
        e.queued_bytes -= len(frame)
        c.frames_out += 1
        c.bytes_out += len(frame)
        self._log(t, "out", port, frame, "")
        out.append(Delivery(port, frame, t))
        if e.queue:
            self._start(t, port)


Receiver = Callable[[bytes], None]


class EthSwitch:
    """`SwitchCore` in a cocotb simulation: `send(port, frame)` at the current sim time; each port's
    receiver (`attach`) is called with every frame delivered to it. Runs on `Timer`s (no clock):
    call `start()` once inside a cocotb test."""

    def __init__(self, config: SwitchConfig) -> None:
        self.core = SwitchCore(config)
        self.config = config
        self._receivers: dict[int, Receiver] = {}
        self._task = None
        self._wake = None

    def attach(self, port: int, receiver: Receiver) -> None:
        self.config._check_port(port, "attach")
        if port in self._receivers:
            raise ValueError(f"port {port} already has a receiver")
        self._receivers[port] = receiver

    def start(self) -> None:
        import cocotb
        from cocotb.triggers import Event

        if self._task is None:
            self._wake = Event()
            self._task = cocotb.start_soon(self._run())

    def send(self, port: int, frame: bytes) -> None:
        from cocotb.utils import get_sim_time

        if self._task is None:
            raise RuntimeError("EthSwitch.start() first (inside a cocotb test)")
        self.core.ingress(port, frame, int(get_sim_time("ps")))
        self._wake.set()

    @property
    def idle(self) -> bool:
        return self.core.idle

    def counters(self) -> dict[str, int]:
        return self.core.counters()

    async def _run(self) -> None:
        from cocotb.triggers import First, Timer
        from cocotb.utils import get_sim_time

        while True:
            now = int(get_sim_time("ps"))
            for d in self.core.advance(now):
                receiver = self._receivers.get(d.port)
                if receiver is not None:
                    receiver(d.frame)
            self._wake.clear()
            due = self.core.next_time()
            if due is None:
                await self._wake.wait()
            elif due <= now:  # a receiver sent a frame and the latency is 0: forward it now
                continue
            else:
                await First(Timer(due - now, "ps"), self._wake.wait())


__all__ = ["BROADCAST", "DROP_CAUSES", "LINE_RATE_100G", "Delivery", "EthSwitch", "PortCounters", "PortFaults",
           "SwitchConfig", "SwitchCore", "last_bit_ps", "wire_clocks", "wire_ps"]
