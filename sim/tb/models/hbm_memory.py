"""Card memory for the cocotb benches: HBM pseudo-channels (or DDR channels) with their bandwidth.

design.md 3b: a buffer lives in one pseudo-channel, a channel's usable bandwidth is shared by
every R and W beat of every port mapped to it, and sizing assumes exactly that. This model lets
the RTL bench see the same limit, so a cycle count measured in simulation means what it would on
the card. Everything that speaks AXI is cocotbext-axi's (AxiRamRead/AxiRamWrite and their
channel models); this module adds only three things:

- latency: each read burst's data starts a random (seeded, replayable) number of clocks after
  its address, bursts stay pipelined and in order per port; write responses come after a
  latency too, without holding up the next burst's data;
- bandwidth: one token bucket per channel, credited `beats_per_clock` each clock, capped at a
  few beats, debited by the R and W handshakes actually seen on the wires. While the bucket
  is short, the channel pauses the R sources and W sinks of all its ports;
- a factory that builds one memory port per kernel `m_axi_<port>`, all of them over one flat
  backing `Memory` (one card, one address space), grouped into channels by index.

Why the bucket drives `pause` itself instead of a pause generator: cocotbext-axi pulls a pause
generator in a coroutine woken by the same rising edge as the channel it pauses, so its effect
lands 0 or 1 clock later depending on scheduling order, and a generator set later (the bench's
random stalls) silently replaces an earlier one. Here one coroutine samples every handshake at
the falling edge, where all signals of the coming edge are settled, and sets `pause` before
the next rising edge; random stalls are pulled from their generators by the same coroutine and
OR-ed in (`MemoryPort.set_stalls`).

Why the bucket pauses below `threshold` and not below one beat: a paused R source still
completes the beat it already presents, and a W sink samples `pause` one clock before it drives
`wready`. So each R port can complete 1 beat and each W port 2 beats after the pause is set;
the threshold reserves them, the bucket never goes below zero, and over any window of W clocks
a channel moves at most `beats_per_clock * W + cap` beats (`cap` = threshold + burst slack).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cocotb
import numpy as np
from cocotb.queue import Queue
from cocotb.triggers import FallingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiReadBus, AxiWriteBus
from cocotbext.axi.axi_ram import AxiRamRead, AxiRamWrite
from cocotbext.axi.constants import AxiBurstType, AxiResp
from cocotbext.axi.memory import Memory

from hls import layout
from hls.bursts import HBM_LATENCY_NS

MODES = ("hbm", "ideal")
# The latency the kernels' outstanding bursts are sized for (hls.bursts): one figure for both.
HBM_READ_LATENCY_NS = HBM_LATENCY_NS
HBM_WRITE_LATENCY_NS = HBM_LATENCY_NS
BURST_SLACK_BEATS = 2.0
# Beats one port can still complete after its channel pauses it (see the module docstring).
R_INFLIGHT_BEATS = 1
W_INFLIGHT_BEATS = 2

Latency = int | tuple[int, int]


def ns_to_clocks(ns: float, clock_mhz: float) -> int:
    """Clocks of the kernel clock that cover `ns` (rounded up: memory is never early)."""
    return max(0, math.ceil(ns * clock_mhz / 1000.0 - 1e-9))


class _LatencyDraw:
    """A fixed latency, or one drawn per burst from [lo, hi] clocks with the port's own Random."""

    def __init__(self, latency: Latency, rng: random.Random | None) -> None:
        self.rng = rng or random.Random(0)
        self.set(latency)

    def set(self, latency: Latency) -> None:
        """A new latency (or range) from the next draw on, with the same Random."""
        if isinstance(latency, tuple):
            lo, hi = latency
            if not 0 <= lo <= hi:
                raise ValueError(f"latency range {latency}: need 0 <= lo <= hi clocks")
            self.lo, self.hi = int(lo), int(hi)
        else:
            if latency < 0:
                raise ValueError(f"latency {latency}: need >= 0 clocks")
            self.lo = self.hi = int(latency)

    def __call__(self) -> int:
        return self.lo if self.lo == self.hi else self.rng.randint(self.lo, self.hi)


class LatencyAxiRamRead(AxiRamRead):
    """cocotbext-axi's RAM read side with a pipelined read latency per burst.

    The stock model answers one burst at a time as soon as its address arrives. Card memory
    answers some clocks after the address and keeps several bursts in flight, so this subclass
    accepts addresses as they come (up to `max_outstanding`, then AR back-pressures) and starts
    each burst's data no earlier than its latency after its address, and after the previous
    burst's data (data stays in order). `latency` is a clock count or a (lo, hi) range drawn per
    burst from `rng`. Everything else, channel drivers and pause included, is cocotbext-axi's.
    """

    def __init__(self, *args: Any, latency: Latency = 0, clock_ns: float = 4.0, rng: random.Random | None = None,
                 max_outstanding: int = 0, **kwargs: Any) -> None:
        self.latency = latency
        self._draw = _LatencyDraw(latency, rng)
        self.clock_ns = clock_ns
        self._ar_queue: Queue = Queue(maxsize=max_outstanding)
        self._ar_task = None
        self.error_bursts = 0  # error injection: this many next bursts answer SLVERR on every beat
        # error injection by beat: R beats are numbered from 0 (`beats_sent`, reset by
        # `fail_beats`); those in `error_beats` answer SLVERR, the data still the memory's
        self.error_beats: set[int] = set()
        self.beats_sent = 0
        super().__init__(*args, **kwargs)

    def fail_beats(self, beats: set[int] | list[int]) -> None:
        """SLVERR on these R beats, counted from 0 from now on (the next run's beats, in order)."""
        self.error_beats = set(beats)
        self.beats_sent = 0

    async def _accept_addresses(self) -> None:
        while True:
            ar = await self.ar_channel.recv()
            await self._ar_queue.put((ar, get_sim_time("ns") + self._draw() * self.clock_ns))

    def _handle_reset(self, state: Any) -> None:
        super()._handle_reset(state)
        if state and self._ar_task is not None:
            self._ar_task.cancel()
            self._ar_task = None
            while not self._ar_queue.empty():
                self._ar_queue.get_nowait()

    async def _process_read(self) -> None:
        if self._ar_task is None:
            self._ar_task = cocotb.start_soon(self._accept_addresses())
        while True:
            ar, due = await self._ar_queue.get()
            wait = due - get_sim_time("ns")
            # whole picoseconds: a float sum of ns may not be representable at the 1 ps precision
            if round(wait * 1000) > 0:
                await Timer(round(wait * 1000), "ps")
            arid = int(getattr(ar, "arid", 0))
            addr = int(ar.araddr)
            length = int(getattr(ar, "arlen", 0)) + 1
            size = int(getattr(ar, "arsize", self.max_burst_size))
            burst = AxiBurstType(int(getattr(ar, "arburst", AxiBurstType.INCR)))
            assert burst == AxiBurstType.INCR, "the kernel only issues INCR bursts"
            num_bytes = 2**size
            assert num_bytes == self.byte_lanes, f"arsize {size}: the kernel reads full beats"
            assert 0x1000 - (addr & 0xFFF) >= num_bytes * length, f"read burst at {addr:#x} crosses 4 KiB"
            resp = AxiResp.OKAY
            if self.error_bursts > 0:
                self.error_bursts -= 1
                resp = AxiResp.SLVERR
            for i in range(length):
                r = self.r_channel._transaction_obj()
                r.rid = arid
                r.rlast = i == length - 1
                r.rresp = AxiResp.SLVERR if self.beats_sent in self.error_beats else resp
                self.beats_sent += 1
                word = ((addr + i * num_bytes) // self.byte_lanes) * self.byte_lanes
                r.rdata = int.from_bytes(self.read(word % self.size, self.byte_lanes), "little")
                await self.r_channel.send(r)


class LatencyAxiRamWrite(AxiRamWrite):
    """cocotbext-axi's RAM write side whose write response comes `latency` clocks after the last
    beat; the next burst's data is accepted meanwhile (responses queue, in order)."""

    def __init__(self, *args: Any, latency: Latency = 0, clock_ns: float = 4.0, rng: random.Random | None = None,
                 **kwargs: Any) -> None:
        self.latency = latency
        self._draw = _LatencyDraw(latency, rng)
        self.clock_ns = clock_ns
        self._b_queue: Queue = Queue()
        self._b_task = None
        self.error_bursts = 0  # error injection: this many next bursts answer SLVERR (data still written)
        super().__init__(*args, **kwargs)

    async def _send_responses(self) -> None:
        while True:
            b, due = await self._b_queue.get()
            wait = due - get_sim_time("ns")
            # whole picoseconds: a float sum of ns may not be representable at the 1 ps precision
            if round(wait * 1000) > 0:
                await Timer(round(wait * 1000), "ps")
            await self.b_channel.send(b)

    def _handle_reset(self, state: Any) -> None:
        super()._handle_reset(state)
        if state and self._b_task is not None:
            self._b_task.cancel()
            self._b_task = None
            while not self._b_queue.empty():
                self._b_queue.get_nowait()

    async def _process_write(self) -> None:
        if self._b_task is None:
            self._b_task = cocotb.start_soon(self._send_responses())
        while True:
            aw = await self.aw_channel.recv()
            awid = int(getattr(aw, "awid", 0))
            addr = int(aw.awaddr)
            length = int(getattr(aw, "awlen", 0)) + 1
            size = int(getattr(aw, "awsize", self.max_burst_size))
            burst = AxiBurstType(int(getattr(aw, "awburst", AxiBurstType.INCR)))
            assert burst == AxiBurstType.INCR, "the kernel only issues INCR bursts"
            num_bytes = 2**size
            assert num_bytes == self.byte_lanes, f"awsize {size}: the kernel writes full beats (narrow via wstrb)"
            assert 0x1000 - (addr & 0xFFF) >= num_bytes * length, f"write burst at {addr:#x} crosses 4 KiB"
            for i in range(length):
                w = await self.w_channel.recv()
                data = int(w.wdata).to_bytes(self.byte_lanes, "little")
                strb = int(getattr(w, "wstrb", self.strb_mask)) if self.wstrb_present else self.strb_mask
                assert int(w.wlast) == (i == length - 1), f"wlast wrong on beat {i} of a {length}-beat burst"
                word = ((addr + i * num_bytes) // self.byte_lanes) * self.byte_lanes % self.size
                if strb == self.strb_mask:
                    self.write(word, data)
                else:
                    for lane in range(self.byte_lanes):
                        if strb >> lane & 1:
                            self.write(word + lane, data[lane:lane + 1])
            b = self.b_channel._transaction_obj()
            b.bid = awid
            b.bresp = AxiResp.OKAY
            if self.error_bursts > 0:
                self.error_bursts -= 1
                b.bresp = AxiResp.SLVERR
            await self._b_queue.put((b, get_sim_time("ns") + self._draw() * self.clock_ns))


@dataclass(eq=False)
class MemoryPort:
    """One kernel m_axi port: its read side, its write side (either may be absent), its channel."""

    name: str
    channel: MemoryChannel = field(repr=False)  # the channel lists its ports: no recursive repr
    read_if: LatencyAxiRamRead | None
    write_if: LatencyAxiRamWrite | None
    _r_stalls: Iterator[bool] | None = None
    _w_stalls: Iterator[bool] | None = None

    def data_channels(self) -> list[Any]:
        """The R source and W sink, the two channels the bandwidth limit pauses."""
        return [c for c in (self.read_if and self.read_if.r_channel, self.write_if and self.write_if.w_channel) if c]

    def all_channels(self) -> list[Any]:
        out = []
        if self.write_if:
            out += [self.write_if.aw_channel, self.write_if.w_channel, self.write_if.b_channel]
        if self.read_if:
            out += [self.read_if.ar_channel, self.read_if.r_channel]
        return out

    def set_stalls(self, make: Callable[[], Iterator[bool]]) -> None:
        """Random pauses on every channel of this port; `make()` returns a fresh bool iterator.

        On a bandwidth-limited channel the R and W stalls go through the channel's clocked
        coroutine (OR-ed with the limit); the others are cocotbext-axi pause generators.
        """
        for ch in self.all_channels():
            if self.channel.limited and ch in self.data_channels():
                continue
            ch.set_pause_generator(make())
        if self.channel.limited:
            self._r_stalls = make() if self.read_if else None
            self._w_stalls = make() if self.write_if else None


@dataclass(eq=False)
class MemoryChannel:
    """One HBM pseudo-channel or DDR channel: a beat budget shared by all its ports' R and W beats.

    `beats_per_clock` None means no limit (ideal memory). Counters: `beats` and `clocks` since
    the last `reset_counters()`, `min_tokens` (never below zero if the reserve is right).
    """

    index: int
    beats_per_clock: float | None
    burst_slack: float = BURST_SLACK_BEATS
    ports: list[MemoryPort] = field(default_factory=list)
    tokens: float = 0.0
    beats: int = 0
    read_beats: int = 0
    write_beats: int = 0
    clocks: int = 0
    min_tokens: float = math.inf
    paused_clocks: int = 0

    @property
    def limited(self) -> bool:
        return self.beats_per_clock is not None

    @property
    def threshold(self) -> float:
        """Tokens the bucket must hold to let its ports present new beats."""
        reserve = sum(R_INFLIGHT_BEATS * bool(p.read_if) + W_INFLIGHT_BEATS * bool(p.write_if) for p in self.ports)
        return float(max(1, reserve))

    @property
    def cap(self) -> float:
        """The burst allowance: most beats the channel moves beyond its rate in any window."""
        return self.threshold + self.burst_slack

    def reset_counters(self) -> None:
        self.beats = self.read_beats = self.write_beats = self.clocks = self.paused_clocks = 0
        self.min_tokens = math.inf

    def stats(self) -> dict[str, Any]:
        return {"channel": self.index, "ports": [p.name for p in self.ports], "budget": self.beats_per_clock,
                "beats": self.beats, "read_beats": self.read_beats, "write_beats": self.write_beats,
                "clocks": self.clocks, "beats_per_clock": self.beats / self.clocks if self.clocks else 0.0,
                "burst_allowance": self.cap if self.limited else None,
                "min_tokens": None if self.min_tokens == math.inf else self.min_tokens,
                "paused_clocks": self.paused_clocks}


def _high(signal: Any) -> bool:
    return str(signal.value) == "1"  # X/Z (before reset) is not a handshake


class CardMemory:
    """All memory ports of one kernel over one flat `Memory`, grouped into channels.

    `mem` is the backing store (cocotbext-axi `Memory`: `mem.write(addr, bytes)`,
    `mem.read(addr, n)`); `ports[name]` the `MemoryPort`s; `channels[index]` the channels.
    """

    def __init__(self, clock: Any, mem: Memory, mode: str) -> None:
        self.clock = clock
        self.mem = mem
        self.mode = mode
        self.ports: dict[str, MemoryPort] = {}
        self.channels: dict[int, MemoryChannel] = {}
        self._task = None

    def start(self) -> None:
        if self._task is None and any(c.limited for c in self.channels.values()):
            for ch in self.channels.values():
                ch.tokens = ch.cap
            self._task = cocotb.start_soon(self._enforce())

    def reset_counters(self) -> None:
        for ch in self.channels.values():
            ch.reset_counters()

    def set_latency(self, read: Latency, write: Latency) -> None:
        """Read and write latency (clocks, or a (lo, hi) range drawn per burst) of every port
        from the next burst on; each port keeps its own seeded Random."""
        for port in self.ports.values():
            if port.read_if is not None:
                port.read_if._draw.set(read)
                port.read_if.latency = read
            if port.write_if is not None:
                port.write_if._draw.set(write)
                port.write_if.latency = write

    def stats(self) -> list[dict[str, Any]]:
        return [self.channels[i].stats() for i in sorted(self.channels)]

    def set_stalls(self, rng: random.Random, probability: float) -> None:
        """Random ready/valid pauses on every channel of every port (seeded from `rng`)."""
        for name in sorted(self.ports):
            self.ports[name].set_stalls(lambda: stall_generator(random.Random(rng.random()), probability))

    async def _enforce(self) -> None:
        # Signals and per-port stall iterators are looked up once: this loop runs every clock.
        plan = []
        for ch in self.channels.values():
            if not ch.limited:
                continue
            sides = []
            for p in ch.ports:
                if p.read_if:
                    bus = p.read_if.r_channel.bus
                    sides.append((p, "r", bus.rvalid, bus.rready, p.read_if.r_channel))
                if p.write_if:
                    bus = p.write_if.w_channel.bus
                    sides.append((p, "w", bus.wvalid, bus.wready, p.write_if.w_channel))
            plan.append((ch, ch.threshold, ch.cap, sides))
        falling = FallingEdge(self.clock)
        while True:
            await falling
            for ch, threshold, cap, sides in plan:
                reads = writes = 0
                for _p, kind, valid, ready, _c in sides:
                    if _high(valid) and _high(ready):
                        if kind == "r":
                            reads += 1
                        else:
                            writes += 1
                ch.read_beats += reads
                ch.write_beats += writes
                ch.beats += reads + writes
                ch.clocks += 1
                ch.tokens = min(cap, ch.tokens + ch.beats_per_clock - reads - writes)
                ch.min_tokens = min(ch.min_tokens, ch.tokens)
                blocked = ch.tokens < threshold
                ch.paused_clocks += blocked
                for p, kind, _v, _r, channel in sides:
                    stalls = p._r_stalls if kind == "r" else p._w_stalls
                    stall = next(stalls) if stalls is not None else False
                    channel.pause = blocked or stall


def stall_generator(rng: random.Random, probability: float) -> Iterator[bool]:
    """True (pause this clock) with `probability`, in short bursts so FIFOs fill and drain."""
    while True:
        if rng.random() < probability:
            for _ in range(rng.randint(1, 8)):
                yield True
        else:
            yield False


def write_striped(mem: Any, bases: Sequence[int], data: bytes) -> None:
    """A buffer into memory `mem` in len(bases) stripes, its beats dealt as hls.layout.split deals them
    (stripe k at bases[k]): how a host writes a network kernel's striped lgrad buffer."""
    for base, part in zip(bases, layout.split(np.frombuffer(data, np.uint8), len(bases)), strict=True):
        mem.write(base, part.tobytes())


def read_striped(mem: Any, bases: Sequence[int], nbytes: int) -> bytes:
    """`nbytes` of a buffer read back from its stripes at `bases` (hls.layout.join)."""
    parts = [np.frombuffer(mem.read(b, layout.stripe_bytes(nbytes, 1, len(bases), i)), np.uint8)
             for i, b in enumerate(bases)]
    return layout.join(parts, nbytes, np.uint8).tobytes()


def _has(dut: Any, prefix: str, signal: str) -> bool:
    return hasattr(dut, f"{prefix}_{signal}")


def card_memory(
    dut: Any,
    ports: Sequence[tuple[str, int]],
    *,
    clock: Any,
    reset: Any = None,
    reset_active_level: bool = False,
    mode: str = "hbm",
    beats_per_clock: float | Mapping[int, float] | None = None,
    mem: Memory | None = None,
    mem_size: int | None = None,
    clock_mhz: float = 300.0,
    sim_clock_ns: float = 4.0,
    read_latency_ns: tuple[float, float] = HBM_READ_LATENCY_NS,
    write_latency_ns: tuple[float, float] = HBM_WRITE_LATENCY_NS,
    ideal_latency: int = 0,
    burst_slack: float = BURST_SLACK_BEATS,
    max_outstanding: int = 0,
    seed: int = 1,
    prefix: str = "m_axi",
) -> CardMemory:
    """One memory port per (port name, channel index) on the bus `<prefix>_<port>` of `dut`.

    mode "hbm": each distinct channel index is one channel with `beats_per_clock` (512-bit beats
    per kernel clock, reads and writes together; the caller computes it from the target, e.g.
    U55C 14.4 GB/s x 0.9 / (64 B x 300 MHz) = 0.675), one figure for every channel or one per
    channel index (a channel read and written is usable at less); read and write latencies are drawn per burst
    from the ns ranges, converted at `clock_mhz` (the kernel clock the figures are for).
    mode "ideal": no bandwidth limit, a fixed `ideal_latency` in clocks for reads and immediate
    write responses (the bench as it was before this model).
    `sim_clock_ns` is the simulated clock period, which only turns clocks into simulator time.
    A port's bus may have only read channels (AR/R) or only write channels (AW/W/B).
    The limit runs once `start()` is called (any time; before reset no beat moves).
    """
    if mode not in MODES:
        raise ValueError(f"memory mode {mode!r}; choose one of {', '.join(MODES)}")
    budgets = (dict(beats_per_clock) if isinstance(beats_per_clock, Mapping)
               else {i: beats_per_clock for _, i in ports})
    if mode == "hbm" and any(budgets.get(i) is None or budgets[i] <= 0 for _, i in ports):
        raise ValueError("hbm memory needs beats_per_clock > 0 (512-bit beats per kernel clock per channel)")
    if mem is None:
        if mem_size is None:
            raise ValueError("give the backing memory (mem) or its size (mem_size)")
        mem = Memory(size=mem_size)
    names = [n for n, _ in ports]
    if len(set(names)) != len(names):
        raise ValueError(f"port names repeat: {names}")
    card = CardMemory(clock, mem, mode)
    master = random.Random(seed)
    if mode == "hbm":
        read_lat: Latency = (ns_to_clocks(read_latency_ns[0], clock_mhz), ns_to_clocks(read_latency_ns[1], clock_mhz))
        write_lat: Latency = (ns_to_clocks(write_latency_ns[0], clock_mhz),
                              ns_to_clocks(write_latency_ns[1], clock_mhz))
    else:
        # As the bench always had it: reads after `ideal_latency`, write responses at once.
        read_lat, write_lat = ideal_latency, 0
    common = {"reset_active_level": reset_active_level, "size": mem.size, "mem": mem.mem, "clock_ns": sim_clock_ns}
    for name, index in ports:
        channel = card.channels.get(index)
        if channel is None:
            channel = MemoryChannel(index, budgets[index] if mode == "hbm" else None, burst_slack)
            card.channels[index] = channel
        bus_prefix = f"{prefix}_{name}"
        rd = wr = None
        if _has(dut, bus_prefix, "arvalid"):
            rd = LatencyAxiRamRead(AxiReadBus.from_prefix(dut, bus_prefix), clock, reset, latency=read_lat,
                                   rng=random.Random(master.random()), max_outstanding=max_outstanding, **common)
            rd.log.setLevel(logging.WARNING)
        if _has(dut, bus_prefix, "awvalid"):
            wr = LatencyAxiRamWrite(AxiWriteBus.from_prefix(dut, bus_prefix), clock, reset, latency=write_lat,
                                    rng=random.Random(master.random()), **common)
            wr.log.setLevel(logging.WARNING)
        if rd is None and wr is None:
            raise ValueError(f"{bus_prefix}: no AXI read (arvalid) or write (awvalid) channel on the DUT")
        port = MemoryPort(name, channel, rd, wr)
        channel.ports.append(port)
        card.ports[name] = port
    return card
