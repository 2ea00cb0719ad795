"""cocotb test of onic_net_kernel: ONE RTL card on a ring of software cards, speaking the same bytes.

The RTL card (the network kernel top, at rank r) and N - 1 `hls.net.card.Card` peers (each with
`ReferenceKernel`: hls.golden's Adam update on its shard) run ring steps through a switch of this
bench (`Switch`): every frame goes to the card its destination MAC names, the RTL card's frames
come from cocotbext-eth's 100G `EthMacTx` on m_axis_mac0 (it fails on a transmit underflow), the
frames for it go into s_axis_mac0 through cocotbext-eth's 100G `EthMacRx` (preamble and
inter-frame gap timing; TUSER, the FCS flag, stays 0). The switch is lossless unless the case
asks for seeded drops and duplicates (each frame on every link).

This bench is the network kernel ALONE: its Adam side is a reference model on the streams
(`reference_adam_streams`), not RTL: a sink on m_axis_grad0 with random back-pressure (a stalled
kernel) collects the reduced chunk, then `ReferenceKernel` on the card's shard computes the
updated chunk, which a source replays on s_axis_param0. The card with the real generated Adam
kernel on these streams is test_onic_card.py (onic_card, hls.rtl.card). Card memory is
two cocotbext-axi RAM models with random latency and channel pauses (one memory), the AXI
protocol monitor on m_axi_lgrad0 and m_axi_gather0. The host is an AxiLiteMaster: the arguments
at hls/net_regmap.py's offsets, ap_start, the interrupt (GIE, IER done), CTRL, ISR, STATUS and
the counters.

Checked per case against a lossless ring of N reference cards run in Python beforehand: the
reduced chunk on m_axis_grad0 (bit for bit = hls.net.ring.reduce_scatter(...)[r], TLAST on the
last beat only); the gathered buffer in card memory (every other owner's chunk, bytes past a
chunk and the own chunk's place untouched: the Adam kernel writes that itself); every peer's
`gathered`; STATUS 0; the counters: frames/bytes in and out equal what the switch carried for
the RTL card, ACK/NAKs sent equal the replies it sent, the flows' payload bytes out equal the
reference card r's, and in a lossless case no retransmission, timeout, NAK or drop.

Environment: ONIC_SEED, ONIC_CASES ("N:r" comma separated, or "all:N1/N2" every rank), WIRE_BF16,
PARAM_BF16, ONIC_DROP, ONIC_DUP (per-frame probabilities), ONIC_SEGMENT and ONIC_SIZE (test_two_phase: round-major
order, chunk elements), ONIC_GRAD_STALL (the reference model
refusing its gradient beat).
"""

from __future__ import annotations

import logging
import os
import random
from typing import Any

import cocotb
import numpy as np
from axi_monitor import AxiMonitor
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiReadBus, AxiStreamBus, AxiWriteBus
from cocotbext.eth import EthMacRx, EthMacTx
from handshake_monitor import AxiLiteMonitor, StreamMonitor, watch
from hbm_memory import LatencyAxiRamRead, LatencyAxiRamWrite
from ring_streams import Sink, Source

from hls import net_regmap
from hls.golden import Hyper, to_bf16_bits
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel
from pynq_driver.net.net_kernel import RegisterMap, RingArgs, step_arguments

MEM_BYTES = 1 << 20
BEAT = 64
AXIS = ["tdata", "tkeep", "tlast"]
WINDOW = 8        # every card's window and advertised slots (the RTL card's receive slots: RX_SLOT_LOG2 = 3)
RTO = 3000        # clocks, peers and RTL card alike
POLL = 4          # the switch runs every POLL clocks
HOLD_LIMIT = 40_000  # clocks a `hold_sum` case holds card memory at most
CURRENT_ADDR = 0xE0000  # a two-phase case's current parameters (read by phase 3 of a skip)

NET = RegisterMap.for_stripes(1, 1)  # the network kernel's map (pynq_driver.net.net_kernel): one stripe each
ARGS = {name: offset for name, (_, offset) in NET.args.items()}
READONLY = dict(NET.readonly)
CTRL, GIE, IER, ISR = net_regmap.CTRL, net_regmap.GIE, net_regmap.IER, net_regmap.ISR


class _Clocked:
    """The DUT seen by ring_streams' Source/Sink, which clock on `dut.clk`."""

    def __init__(self, dut: Any) -> None:
        self._dut = dut
        self.clk = dut.ap_clk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dut, name)


def local_gradient(rng: np.random.Generator, length: int, dtype: str) -> np.ndarray:
    x = (rng.standard_normal(length) * np.exp2(rng.integers(-20, 20, length))).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -3e-39, 3.4e38], np.float32)
    pick = rng.random(length) < 0.05
    x[pick] = rng.choice(specials, int(pick.sum()))
    return to_bf16_bits(x) if dtype == "bf16" else x


MAX_NORM = 1.0  # the two-phase steps' clip norm (every bench of the card)


def two_phase_gradients(rng: np.random.Generator, n: int, length: int, dtype: str, kind: str) -> list[np.ndarray]:
    """Finite local gradients (`local_gradient` mixes in infinities, which make a step skip) whose
    norm clipped to MAX_NORM triggers ("clip") or does not ("noclip"); "skip": as "clip" with one
    infinity on one rank (every card skips the update)."""
    amp = {"clip": 1.0, "noclip": 1e-4, "skip": 1.0}[kind]
    grads = [(rng.standard_normal(length) * amp).astype(np.float32) for _ in range(n)]
    if kind == "skip":
        grads[int(rng.integers(0, n))][int(rng.integers(0, length))] = np.float32(np.inf)
    return [to_bf16_bits(g) for g in grads] if dtype == "bf16" else grads


async def read_entries(write: Any, read: Any, n: int, readonly: dict[str, int] | None = None) -> list[tuple[int, bool]]:
    """Every rank's scalar entry after phase one as the host reads it through the network kernel's
    registers (`write(name, value)`, `read(offset)`; `readonly`: the map's read-only offsets, this
    bench's one-stripe map by default): (sum of squares as float64 bits, non-finite flag)."""
    ro = READONLY if readonly is None else readonly
    out = []
    for k in range(n):
        await write("entry", k)
        bits = (await read(ro["entry_sumsq"] + 4)) << 32 | await read(ro["entry_sumsq"])
        out.append((bits, bool(await read(ro["entry_flag"]) & 1)))
    return out


def entry_value(bits: int) -> float:
    """An entry's float64 sum of squares from its bits."""
    return float(np.array(bits, dtype=np.uint64).view(np.float64))


def endpoints(n: int) -> tuple[wire.Endpoint, ...]:
    return tuple(wire.Endpoint(mac=bytes([2, 0, 0, 0, 0x10, k]), ip=f"10.0.1.{k + 1}", port=4000 + k)
                 for k in range(n))


def make_cards(n: int, length: int, params: np.ndarray, wdt: str, pdt: str, payload: int,
               taps: dict[int, list[np.ndarray]] | None = None, segment: int = 0) -> list[Card]:
    eps = endpoints(n)
    cards = []
    for k in range(n):
        kernel = ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype=pdt,
                         ag_release=True, segment=segment,
                         payload_bytes=payload, window=WINDOW, slots=WINDOW, rto=RTO, fcs=False)
        cards.append(Card(cfg, kernel))
    return cards


def reference(n: int, length: int, params: np.ndarray, grads: list[np.ndarray], wdt: str, pdt: str,
              payload: int, step: int, segment: int = 0, **start: Any) -> dict[str, Any]:
    """A lossless ring of N reference cards: the gathered vector, every card's counters and (a
    two-phase step: `start` = start_step's keywords) the scalar entries in rank order."""
    cards = make_cards(n, length, params, wdt, pdt, payload, segment=segment)
    for k, c in enumerate(cards):
        c.start_step(step, grads[k], **start)
    by_mac = {e.mac: k for k, e in enumerate(endpoints(n))}
    now = 0.0
    while not all(c.done for c in cards):
        now += 1.0
        for c in cards:
            for frame in c.poll(now):
                cards[by_mac[frame[:6]]].receive(frame, now)
        assert now < 1e5
    gathered = cards[0].gathered
    assert gathered is not None
    for c in cards:
        assert c.error is None and c.gathered is not None and c.gathered.tobytes() == gathered.tobytes()
    entries = [cards[0]._scalars[k] for k in range(n)] if start.get("two_phase") else None
    return {"gathered": ring.pad(gathered, n), "counters": [c.counters for c in cards], "entries": entries}


def peer_flows(cards: list[Card], r: int) -> dict[int, dict[str, tuple[int, ...]]]:
    """Each peer's flows for a hang's message: sender (base, next, total, credit), receiver expected."""
    return {k: {f.name: (fl.sender.base, fl.sender.next_seq, fl.sender.total, fl.sender.credit, fl.receiver.expected)
                for f, fl in c._flows.items()} for k, c in enumerate(cards) if k != r}


def rtl_state(dut: Any) -> dict[str, str]:
    """Internal state of the network kernel for a hang's message (where the simulator shows it)."""
    names = ("dp.d_state_reg", "dp.rs_dm_reg", "dp.ag_dm_reg", "dp.rs_fwd_left_reg", "dp.rs_fwd_mode_reg",
             "dp.rs_pp_left_reg", "dp.rs_pp_armed_reg", "dp.lg_run_reg", "dp.lg_to_gen_reg", "dp.h_hop_reg",
             "dp.h_seq_reg", "dp.rf_valid_reg", "credit_reg", "dq_count", "zero_reg", "state_reg")
    out = {}
    for name in names:
        try:
            obj = dut
            for part in name.split("."):
                obj = getattr(obj, part)
            out[name] = str(obj.value)
        except AttributeError:
            out[name] = "?"
    return out


def differing(got: bytes, want: bytes, dtype: str) -> list[int]:
    """Elements that differ, a NaN equal to any NaN: the RTL adders return the canonical quiet NaN
    where numpy keeps an operand's (or x86's negative default NaN), and a NaN gradient makes the
    owner's updated parameter NaN with whatever sign and payload (the project compares NaN as NaN)."""
    if len(got) != len(want):
        return [-1]
    if dtype == "bf16":
        a, b = np.frombuffer(got, "<u2"), np.frombuffer(want, "<u2")
        nan_a = (a & 0x7F80 == 0x7F80) & (a & 0x7F != 0)
        nan_b = (b & 0x7F80 == 0x7F80) & (b & 0x7F != 0)
    else:
        a, b = np.frombuffer(got, "<u4"), np.frombuffer(want, "<u4")
        nan_a = (a & 0x7F800000 == 0x7F800000) & (a & 0x7FFFFF != 0)
        nan_b = (b & 0x7F800000 == 0x7F800000) & (b & 0x7FFFFF != 0)
    return [int(i) for i in np.flatnonzero((a != b) & ~(nan_a & nan_b))]


def chunk_beats(size: int, dtype: str) -> int:
    return -(-size * wire.ELEMENT_BYTES[dtype] // BEAT)


def kept(item: dict[str, int]) -> bytes:
    n = bin(item["tkeep"]).count("1")
    return item["tdata"].to_bytes(BEAT, "little")[:n]


class TB:
    def __init__(self, dut: Any, rng: random.Random, grad_stall: float, macs: bool = True) -> None:
        self.dut, self.rng = dut, rng
        clocked = _Clocked(dut)
        self.grad = Sink(clocked, "m_axis_grad0_", AXIS, rng, grad_stall, valid="tvalid", ready="tready")
        self.param = Source(clocked, "s_axis_param0_", AXIS, rng, 0.2, valid="tvalid", ready="tready")
        self.host = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk, dut.ap_rst_n,
                                  reset_active_level=False)
        self.rd = LatencyAxiRamRead(AxiReadBus.from_prefix(dut, "m_axi_lgrad0"), dut.ap_clk, dut.ap_rst_n,
                                    reset_active_level=False, size=MEM_BYTES, latency=(5, 40),
                                    rng=random.Random(rng.random()), max_outstanding=8)
        self.wr = LatencyAxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi_gather0"), dut.ap_clk, dut.ap_rst_n,
                                     reset_active_level=False, size=MEM_BYTES, mem=self.rd.mem, latency=(2, 30),
                                     rng=random.Random(rng.random()))
        for channel in (self.rd.ar_channel, self.rd.r_channel, self.wr.aw_channel, self.wr.w_channel):
            channel.set_pause_generator(self._pauses(0.2))
        self.monitor = AxiMonitor(dut, ["lgrad0", "gather0"], dut.ap_clk, dut.ap_rst_n)
        # the control port and both streams to the Adam kernel (`handshakes_clean`)
        self.handshakes = [
            AxiLiteMonitor(lambda s: getattr(dut, f"s_axi_control_{s}"), "s_axi_control", dut.ap_clk, dut.ap_rst_n),
            *(StreamMonitor(lambda s, p=p: getattr(dut, f"{p}_{s}"), p, dut.ap_clk, dut.ap_rst_n)
              for p in ("m_axis_grad0", "s_axis_param0"))]
        watch(self.handshakes, dut.ap_clk)
        if macs:
            self.mac_rx = EthMacRx(AxiStreamBus.from_prefix(dut, "s_axis_mac0"), dut.ap_clk, dut.ap_rst_n,
                                   reset_active_level=False, speed=100e9)
            self.mac_tx = EthMacTx(AxiStreamBus.from_prefix(dut, "m_axis_mac0"), dut.ap_clk, dut.ap_rst_n,
                                   reset_active_level=False, speed=100e9)
            for model in (self.mac_rx, self.mac_tx):
                model.log.setLevel(logging.WARNING)
        self.cycle = 0
        cocotb.start_soon(self._count())

    async def _count(self) -> None:
        while True:
            await RisingEdge(self.dut.ap_clk)
            self.cycle += 1

    def _pauses(self, p: float):  # noqa: ANN202 - a generator for cocotbext-axi
        rng = random.Random(self.rng.random())
        while True:
            yield rng.random() < p

    def held_pauses(self, held: list[bool], p: float):  # noqa: ANN202 - a generator for cocotbext-axi
        """Paused while held[0], then like `_pauses(p)`."""
        rng = random.Random(self.rng.random())
        while True:
            yield held[0] or rng.random() < p

    async def write(self, name: str, value: int) -> None:
        await self.write_values({name: value})

    async def write_values(self, values: dict[str, int]) -> None:
        """The driver's register writes (pynq_driver.net.net_kernel: a pointer's low word, then its high
        word), each awaited on the AXI4-Lite master; raw values, so a test can write what the kernel refuses."""
        for offset, word in NET.writes(values):
            await self.host.write_dword(offset, word)

    async def read(self, offset: int) -> int:
        return await self.host.read_dword(offset)

    async def counters(self) -> dict[str, int]:
        out = {}
        for name in net_regmap.counter_names():
            lo = await self.read(READONLY[name])
            hi = await self.read(READONLY[name] + 4)
            out[name] = hi << 32 | lo
        return out


async def reference_adam_streams(tb: TB, kernel: ReferenceKernel, beats: int, scale: float,
                          got: dict[str, Any]) -> None:
    """The Adam side of the network kernel's own bench (no RTL): the reduced chunk in,
    ReferenceKernel's updated chunk out."""
    while len(tb.grad.items) < beats:
        await RisingEdge(tb.dut.ap_clk)
    items = list(tb.grad.items[:beats])
    got["grad_items"] = items
    reduced = np.frombuffer(b"".join(kept(b) for b in items), np.dtype("<u2" if kernel.wire_dtype == "bf16" else "<f4"))
    got["reduced"] = reduced
    out = np.asarray(kernel(reduced.copy(), scale))
    got["own_out"] = out
    data = out.tobytes()
    param_beats = []
    for k in range(0, len(data), BEAT):
        part = data[k:k + BEAT].ljust(BEAT, b"\0")
        param_beats.append({"tdata": int.from_bytes(part, "little"), "tkeep": (1 << 64) - 1,
                            "tlast": int(k + BEAT >= len(data))})
    await tb.param.send(param_beats)


async def no_adam_streams(tb: TB, kernel: ReferenceKernel, got: dict[str, Any]) -> None:
    """A skipped step's Adam side: not started. Records the current parameters (what the card must
    gather as its own chunk) and that nothing came on the gradient stream."""
    got["skipped"] = True
    got["own_out"] = np.asarray(kernel(np.zeros(0, np.float32), None))


async def run_case(tb: TB, n: int, r: int, wdt: str, pdt: str, seed: int, step: int, drop: float,
                   dup: float, two_phase: str = "", hold_sum: bool = False, size: int | None = None,
                   segment: int = 0) -> dict[str, int]:
    """two_phase: "" a one-phase step; "clip" / "noclip" / "skip": a two-phase step of
    `two_phase_gradients` of that kind. hold_sum: card memory takes no write (gather0's AW and W
    paused) until the card has answered a scalar frame with credit 0, then as usual: the owner's sum
    of phase one cannot leave the receive buffer meanwhile, so the predecessor's reduce-scatter
    fills it. segment: round-major order with that many packets per round (every card; 0 hop-major).
    Returns what the case saw (`scalar_zero_credit`: such replies)."""
    dut, rng = tb.dut, tb.rng
    nrng = np.random.default_rng(seed)
    size = int(rng.choice([48, 80, 112])) if size is None else size
    payload = int(rng.choice([64, 128, 192]))
    length = n * size - int(nrng.integers(0, 16))
    assert ring.chunk_elems(length, n) == size
    params = (nrng.standard_normal(length) * 0.1).astype(np.float32)
    if two_phase:
        grads = two_phase_gradients(nrng, n, length, wdt, two_phase)
    else:
        grads = [local_gradient(nrng, length, wdt) for _ in range(n)]
    start_kw: dict[str, Any] = {"two_phase": True, "max_norm": MAX_NORM} if two_phase else {}
    ref = reference(n, length, params, grads, wdt, pdt, payload, step, segment, **start_kw)
    want_reduced = ring.reduce_scatter(grads, wdt)[r]
    wb, pb = chunk_beats(size, wdt), chunk_beats(size, pdt)
    tag = (f"N={n} r={r} S={size} P={payload} B={segment} {wdt}/{pdt} drop={drop} dup={dup} "
           f"two_phase={two_phase or '-'}")
    sum_addr = 0xC0000 + BEAT * rng.randrange(0, 40)
    if two_phase:
        tb.rd.write(sum_addr, bytes([0x5A]) * (wb + 1) * BEAT)
        # the card's current parameters (its Adam kernel's last output) where a skip's phase 3 reads
        # them: junk past the chunk in its last beat, and the beat after
        current = ring.output_params(ring.pad(params, n)[r * size:(r + 1) * size], pdt).tobytes()
        tb.rd.write(CURRENT_ADDR, current + bytes([0x3C]) * ((pb + 1) * BEAT - len(current)))

    # card memory: the local gradient (chunk c from a beat, junk in the pad bytes), the gather buffer filled
    lgrad_addr = 0x20000 - BEAT * rng.randrange(0, 40)
    gather_addr = 0x60000 + BEAT * rng.randrange(0, 40)
    local = ring.pad(grads[r], n)
    for c in range(n):
        region = bytearray(rng.randrange(256) for _ in range(wb * BEAT))
        data = local[c * size:(c + 1) * size].tobytes()
        region[:len(data)] = data
        tb.rd.write(lgrad_addr + c * wb * BEAT, bytes(region))
    fill = bytes([0xA5]) * (n * pb * BEAT)
    tb.rd.write(gather_addr, fill)

    # the peers and the reference model on the RTL card's Adam streams
    cards = make_cards(n, length, params, wdt, pdt, payload, segment=segment)
    eps = endpoints(n)
    by_mac = {e.mac: k for k, e in enumerate(eps)}
    own_kernel = ReferenceKernel(ring.Shard.from_params(params, r, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
    tb.grad.items.clear()
    got: dict[str, Any] = {}
    scale = ring.step_grad_scale(None, n, grad_scale=1.0)
    assert scale is not None
    # a two-phase step: the Adam side starts once the host knows the scale (after phase one)
    kernel_task = None if two_phase else cocotb.start_soon(reference_adam_streams(tb, own_kernel, wb, scale, got))

    # the host: arguments, interrupt on done, ap_start
    before = await tb.counters()
    # the host's arguments as the driver computes and checks them (pynq_driver.net.net_kernel)
    await tb.write_values(step_arguments(RingArgs(
        local=eps[r], succ=eps[(r + 1) % n], pred=eps[(r - 1) % n], rank=r, world=n, length=length,
        payload_bytes=payload, step=step, window=WINDOW, timeout_clocks=RTO, credit=WINDOW, lgrad=[lgrad_addr],
        gather=[gather_addr], phase=1 if two_phase else 0, sum0=sum_addr, segment=segment), NET))
    held = [hold_sum]
    if hold_sum:
        for channel in (tb.wr.aw_channel, tb.wr.w_channel):
            channel.set_pause_generator(tb.held_pauses(held, 0.2))
    sc_zero = [0]
    await tb.write("ctrl", 1)
    # the peers begin once the RTL card's step has (sizing: ~120 clocks): a frame arriving before
    # would be dropped as another step's and only come back after a timeout (counted dropped_step)
    await ClockCycles(dut.ap_clk, 300)
    for k, card in enumerate(cards):
        if k != r:
            card.start_step(step, grads[k], **start_kw)

    # the switch
    carried = {"to_rtl": [], "from_rtl": []}
    lost = [0]

    def faults(frame: bytes) -> list[bytes]:
        if drop and rng.random() < drop:
            lost[0] += 1
            return []
        return [frame, frame] if dup and rng.random() < dup else [frame]

    trace = int(os.environ.get("ONIC_TRACE", "0"))

    def route(frame: bytes, now: int) -> None:
        if trace and len(carried["from_rtl"]) + len(carried["to_rtl"]) < trace:
            p = wire.parse_frame(frame)
            src = by_mac.get(frame[6:12])
            h = p.header if not isinstance(p, wire.Drop) else p
            dut._log.info("%d: %s -> %s %s", now, src, by_mac.get(frame[:6]), h)
        for f in faults(frame):
            deliver(f, now)

    def deliver(f: bytes, now: int) -> None:
        dst = by_mac[f[:6]]
        if gate[0] < 2 and (f[42] & 0x0F) == wire.Opcode.SCALAR and (dst != r or gate[0] == 0):
            deferred.append(f)
        elif dst == r:
            carried["to_rtl"].append(f)
            tb.mac_rx.send_nowait(f)
        else:
            cards[dst].receive(f, now)

    def open_gate(level: int, now: int) -> None:
        gate[0] = level
        waiting = list(deferred)
        deferred.clear()
        for f in waiting:
            deliver(f, now)

    # hold_sum: the switch keeps every scalar frame until the card's receive buffer has stayed full
    # (RS ACKs with credit 0 for 1,500 clocks); then the predecessor's to the card, one of which takes
    # its last free slot (a reply with credit 0); only after that reply the other cards' entries, so
    # the predecessor's sender has an entry to forward and no credit
    deferred: list[bytes] = []
    gate = [0 if hold_sum else 2]  # scalar frames held: 0 all, 1 all but those to the RTL card, 2 none
    rs_zero_at: int | None = None  # since when the card's RS replies say credit 0
    rtl_done = False
    limit = 400_000
    start = tb.cycle
    while True:
        await ClockCycles(dut.ap_clk, POLL)
        now = tb.cycle
        while not tb.mac_tx.empty():
            frame = bytes(tb.mac_tx.recv_nowait().data)
            carried["from_rtl"].append(frame)
            if hold_sum:
                p = wire.parse_frame(frame)
                if not isinstance(p, wire.Drop) and p.header.opcode is wire.Opcode.ACK:
                    if p.header.flow is wire.Flow.SCALAR and p.header.offset == 0:
                        sc_zero[0] += 1
                        held[0] = False
                    elif p.header.flow is wire.Flow.RS:
                        rs_zero_at = (rs_zero_at or now) if p.header.offset == 0 else None
            route(frame, now)
            if sc_zero[0] and gate[0] == 1:
                open_gate(2, now)  # after the zero-credit reply: the entries the predecessor forwards
        if gate[0] == 0 and rs_zero_at is not None and now - rs_zero_at > 1500:
            open_gate(1, now)  # the receive buffer has stayed full: the predecessor's scalar frames
        if gate[0] < 2 and now - start > HOLD_LIMIT:
            open_gate(2, now)  # the case failed to set up what it tests (asserted by the caller)
        if held[0] and now - start > HOLD_LIMIT:
            held[0] = False  # the case failed to set up what it tests (asserted below): go on
        for k, card in enumerate(cards):
            if k != r:
                for frame in card.poll(float(now)):
                    route(frame, now)
                assert card.error is None, f"{tag}: peer {k}: {card.error}"
        if not rtl_done and int(dut.interrupt.value):
            ctrl = await tb.read(CTRL)
            assert ctrl & 0x2, f"{tag}: interrupt without ap_done (CTRL {ctrl:#x})"
            await tb.write("isr", 1)
            if two_phase and kernel_task is None:
                scale = await phase_one_done(tb, n, r, tag, ref, sum_addr, want_reduced, wdt)
                got["scale"] = scale
                if scale is None:
                    # a skip: no Adam kernel; phase 3 gathers the current parameters from card memory
                    kernel_task = cocotb.start_soon(no_adam_streams(tb, own_kernel, got))
                    await tb.write("sum0_lo", CURRENT_ADDR & 0xFFFFFFFF)
                    await tb.write("sum0_hi", CURRENT_ADDR >> 32)
                    await tb.write("phase", 3)
                else:
                    kernel_task = cocotb.start_soon(reference_adam_streams(tb, own_kernel, wb, scale, got))
                    await tb.write("phase", 2)
                await tb.write("ctrl", 1)
            else:
                rtl_done = True
        if rtl_done and all(c.done for k, c in enumerate(cards) if k != r):
            break
        assert now - start < limit, f"{tag}: not done in {limit} clocks (RTL done {rtl_done}, peers done " \
                                    f"{[c.done for k, c in enumerate(cards) if k != r]}, " \
                                    f"{len(carried['from_rtl'])} frames out, {len(carried['to_rtl'])} in; " \
                                    f"peer flows {peer_flows(cards, r)}; RTL {rtl_state(dut)})"
    clocks = tb.cycle - start
    if hold_sum:
        for channel in (tb.wr.aw_channel, tb.wr.w_channel):
            channel.set_pause_generator(tb._pauses(0.2))
    await ClockCycles(dut.ap_clk, 50)
    # frames the card sent after every card was done (a credit refresh whose slot freed at the end)
    # are counted in frames_out: carried, not routed
    while not tb.mac_tx.empty():
        carried["from_rtl"].append(bytes(tb.mac_tx.recv_nowait().data))
    assert kernel_task is not None
    await kernel_task
    assert int(await tb.read(CTRL)) & 0x4, f"{tag}: not idle after done"
    status = await tb.read(READONLY["status"])
    assert status == 0, f"{tag}: STATUS {status:#x}"
    assert not tb.grad.errors, tb.grad.errors

    # the reduced chunk the RTL card handed its kernel (none in a skipped step)
    if got.get("skipped"):
        assert not tb.grad.items, f"{tag}: {len(tb.grad.items)} gradient beats in a skipped step"
    else:
        items = got["grad_items"]
        assert len(tb.grad.items) == wb, f"{tag}: {len(tb.grad.items)} gradient beats, expected {wb}"
        assert not differing(got["reduced"].tobytes(), want_reduced.tobytes(), wdt), f"{tag}: reduced chunk differs"
        assert [b["tlast"] for b in items] == [0] * (wb - 1) + [1], f"{tag}: gradient TLAST"

    # gathered parameters: card memory and every peer
    want = ref["gathered"]
    pbytes = size * wire.ELEMENT_BYTES[pdt]
    assert not differing(got["own_out"].tobytes(), want[r * size:(r + 1) * size].tobytes(), pdt), \
        f"{tag}: own update differs"
    for c in range(n):
        region = tb.rd.read(gather_addr + c * pb * BEAT, pb * BEAT)
        if c == r:
            assert region == fill[:pb * BEAT], f"{tag}: the own chunk's place was written"
            continue
        bad = differing(region[:pbytes], want[c * size:(c + 1) * size].tobytes(), pdt)
        assert not bad, f"{tag}: gathered chunk {c} differs in elements {bad[:8]}"
        assert region[pbytes:] == fill[:pb * BEAT - pbytes], f"{tag}: bytes past chunk {c} written"
    for k, card in enumerate(cards):
        if k != r:
            assert card.gathered is not None
            assert not differing(ring.pad(card.gathered, n).tobytes(), want.tobytes(), pdt), \
                f"{tag}: peer {k} gathered differs"

    # counters (this case's increments)
    after = await tb.counters()
    delta = {k: after[k] - before[k] for k in after}
    model = ref["counters"][r]
    ops = [wire.parse_frame(f) for f in carried["from_rtl"]]
    bad = [(p, f[:64].hex()) for p, f in zip(ops, carried["from_rtl"], strict=True) if isinstance(p, wire.Drop)]
    assert not bad, f"{tag}: frames the RTL card sent that a receiver drops: {bad[:3]}"
    replies = [p for p in ops if not isinstance(p, wire.Drop) and p.header.opcode in (wire.Opcode.ACK, wire.Opcode.NAK)]
    inbound = [wire.parse_frame(f) for f in carried["to_rtl"]]
    acks_in = sum(1 for p in inbound if not isinstance(p, wire.Drop) and p.header.opcode is wire.Opcode.ACK)
    exact = {
        "frames_in": len(carried["to_rtl"]), "bytes_in": sum(map(len, carried["to_rtl"])),
        "frames_out": len(carried["from_rtl"]), "bytes_out": sum(map(len, carried["from_rtl"])),
        "acks_sent": sum(1 for p in replies if p.header.opcode is wire.Opcode.ACK),
        "naks_sent": sum(1 for p in replies if p.header.opcode is wire.Opcode.NAK),
    }
    if not two_phase:
        exact["scalar_payload_bytes_out"] = 0
    elif not drop and not dup:
        exact["scalar_payload_bytes_out"] = model["scalar_payload_bytes_out"]
    if not drop and not dup:
        exact |= {name: model[name] for name in ("rs_payload_bytes_out", "ag_payload_bytes_out",
                                                 "retransmitted_frames", "timeouts", "naks_received")}
        exact |= {f"dropped_{c}": 0 for c in net_regmap.DROP_CAUSES if c != "stale_reply"}
        exact["acks_received"] = acks_in - delta["dropped_stale_reply"]
    else:
        exact |= {f"dropped_{d.value}": 0 for d in wire.Drop}
        assert delta["rs_payload_bytes_out"] >= model["rs_payload_bytes_out"]
    for name, value in exact.items():
        assert delta[name] == value, f"{tag}: counter {name} {delta[name]} != {value}"
    assert not tb.monitor.errors, tb.monitor.errors
    tb.monitor.check_idle()
    assert not tb.monitor.errors, tb.monitor.errors
    for m in tb.handshakes:
        assert not m.errors, m.errors
    dut._log.info("%s: done in %d clocks; %d frames out, %d in, %d lost; RTL counters %s", tag, clocks,
                  len(carried["from_rtl"]), len(carried["to_rtl"]), lost[0],
                  {k: v for k, v in delta.items() if v})
    return {"clocks": clocks, "scalar_zero_credit": sc_zero[0]}


async def phase_one_done(tb: TB, n: int, r: int, tag: str, ref: dict[str, Any], sum_addr: int,
                         want_reduced: np.ndarray, wdt: str) -> float | None:
    """The host between the phases: STATUS, the sum in card memory, no gradient beat to the Adam
    kernel yet, every rank's entry against the reference; returns the scale (None: skip)."""
    status = await tb.read(READONLY["status"])
    assert status == 0, f"{tag}: STATUS {status:#x} after phase one"
    assert not tb.grad.items, f"{tag}: {len(tb.grad.items)} gradient beats during phase one"
    data = want_reduced.tobytes()
    region = tb.rd.read(sum_addr, len(data) + BEAT)
    assert not differing(region[:len(data)], data, wdt), f"{tag}: the sum in card memory differs"
    entries = []
    for k, (bits, flag) in enumerate(await read_entries(tb.write, tb.read, n)):
        sumsq = entry_value(bits)
        entries.append((sumsq, flag))
        want_sumsq, want_flag = ref["entries"][k]
        assert flag == want_flag, f"{tag}: rank {k} flag {flag} != {want_flag}"
        same = (np.isnan(sumsq) and np.isnan(want_sumsq)) or \
            np.array(sumsq).view(np.uint64) == np.array(want_sumsq, dtype=np.float64).view(np.uint64)
        assert same, f"{tag}: rank {k} sum of squares {sumsq!r} != {want_sumsq!r}"
    return ring.step_grad_scale(entries, n, grad_scale=1.0, max_norm=MAX_NORM)


def cases(spec: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for part in spec.split(","):
        if part.startswith("all:"):
            out += [(n, r) for n in map(int, part[4:].split("/")) for r in range(n)]
        else:
            n, r = map(int, part.split(":"))
            out.append((n, r))
    return out


async def reset(dut: Any) -> None:
    cocotb.start_soon(Clock(dut.ap_clk, 4, unit="ns").start())
    dut.ap_rst_n.value = 0
    await ClockCycles(dut.ap_clk, 6)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 4)


def dtypes() -> tuple[str, str]:
    wdt = "bf16" if int(os.environ.get("WIRE_BF16", "0")) else "fp32"
    pdt = "bf16" if int(os.environ.get("PARAM_BF16", "0")) else "fp32"
    return wdt, pdt


@cocotb.test()
async def test_ring(dut: Any) -> None:
    """The RTL card at each ring position of the cases, one step each, one simulation."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    wdt, pdt = dtypes()
    tb = TB(dut, rng, float(os.environ.get("ONIC_GRAD_STALL", "0.3")))
    await reset(dut)
    drop, dup = float(os.environ.get("ONIC_DROP", "0")), float(os.environ.get("ONIC_DUP", "0"))
    for k, (n, r) in enumerate(cases(os.environ.get("ONIC_CASES", "2:0,3:1"))):
        await run_case(tb, n, r, wdt, pdt, seed * 1000 + k, 100 + k, drop, dup)


@cocotb.test()
async def test_two_phase(dut: Any) -> None:
    """Two-phase steps (clip triggering, clip not triggering, a non-finite gradient: skip) with the
    RTL card at each ring position of the cases, one simulation."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    wdt, pdt = dtypes()
    tb = TB(dut, rng, float(os.environ.get("ONIC_GRAD_STALL", "0.3")))
    await reset(dut)
    drop, dup = float(os.environ.get("ONIC_DROP", "0")), float(os.environ.get("ONIC_DUP", "0"))
    kinds = ("clip", "noclip", "skip")
    # round-major order (ONIC_SEGMENT packets per round) wants chunks of several rounds (ONIC_SIZE)
    segment, size = int(os.environ.get("ONIC_SEGMENT", "0")), int(os.environ.get("ONIC_SIZE", "0")) or None
    for k, (n, r) in enumerate(cases(os.environ.get("ONIC_CASES", "2:0,3:1"))):
        kind = kinds[k % 3]
        await run_case(tb, n, r, wdt, pdt, seed * 1000 + k, 200 + k, drop, dup, two_phase=kind, size=size,
                       segment=segment)


@cocotb.test()
async def test_scalar_refresh(dut: Any) -> None:
    """The scalar flow's credit refresh: two-phase steps (N = 3, rank 1 and 2; 1440-element chunks: more beats than the
    card's write FIFO and receive buffer hold) with
    card memory refusing writes until the card has answered a scalar frame of its predecessor with
    credit 0 (`run_case(hold_sum=True)`). The predecessor then has its forwarded entry still to send
    and nothing in flight: only the card's refresh of that flow, once its receive buffer drains,
    lets it go on (before the refresh existed, such a step never finished)."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    wdt, pdt = dtypes()
    tb = TB(dut, rng, float(os.environ.get("ONIC_GRAD_STALL", "0.3")))
    await reset(dut)
    for k, (n, r) in enumerate(cases(os.environ.get("ONIC_CASES", "3:1,3:2"))):
        seen = await run_case(tb, n, r, wdt, pdt, seed * 1000 + k, 300 + k, 0.0, 0.0, two_phase="clip",
                              hold_sum=True, size=1440)
        assert seen["scalar_zero_credit"], f"N={n} r={r}: no scalar frame was answered with credit 0"


@cocotb.test()
async def test_registers(dut: Any) -> None:
    """Every argument at its hls/net_regmap.py offset reads back what was written; the read-only
    words ignore writes; a bad configuration ends the step at once with STATUS config_error (also a
    one-phase step of more than one round: `segment` below the packets per hop)."""
    rng = random.Random(5)
    tb = TB(dut, rng, 0.0)
    await reset(dut)
    values = {name: rng.getrandbits(32) for name in ARGS}
    for name, value in values.items():
        await tb.host.write_dword(ARGS[name], value)
    for name, off in ARGS.items():
        assert await tb.read(off) == values[name], f"{name} at {off:#x}"
    for name in ("lgrad0", "gather0"):
        await tb.host.write_dword(ARGS[name] + 4, 0x1234_5678)
        assert await tb.read(ARGS[name] + 4) == 0x1234_5678, f"{name} high word"
    for name, off in READONLY.items():
        await tb.host.write_dword(off, 0xFFFF_FFFF)
        assert await tb.read(off) == 0, f"{name} at {off:#x} is not a zero read-only word after reset"
    assert await tb.read(CTRL) & 0x4, "not idle after reset"
    bits = net_regmap.STATUS_BITS
    for name, value in (("world", 1), ("rank", 0), ("length", 100), ("payload_bytes", 64), ("window", 8),
                        ("credit", 8)):
        await tb.host.write_dword(ARGS[name], value)
    for bad in (("world", 1), ("world", 256), ("rank", 3), ("payload_bytes", 96), ("payload_bytes", 64 * 64),
                ("length", 0), ("window", 0), ("segment", 1)):
        # 34 elements a chunk: 2 packets of 128 bytes per hop (segment 1: two rounds)
        good = {"world": 3, "rank": 1, "payload_bytes": 128, "length": 100, "window": 8, "phase": 0, "segment": 0}
        for name, value in good.items():
            await tb.host.write_dword(ARGS[name], value)
        await tb.host.write_dword(ARGS[bad[0]], bad[1])
        await tb.write("ctrl", 1)
        for _ in range(50):
            ctrl = await tb.read(CTRL)
            if ctrl & 0x2:
                break
        else:
            raise AssertionError(f"{bad}: no ap_done")
        status = await tb.read(READONLY["status"])
        assert status == 1 << bits["config_error"], f"{bad}: STATUS {status:#x}"
        assert int(dut.m_axis_mac0_tvalid.value) == 0


async def program(tb: TB, n: int, r: int, length: int, payload: int, step: int, lgrad_addr: int,
                  gather_addr: int, timeout: int) -> None:
    """The host's arguments for rank r as the driver computes and checks them (pynq_driver.net.net_kernel), the
    done interrupt enabled."""
    eps = endpoints(n)
    await tb.write_values(step_arguments(RingArgs(
        local=eps[r], succ=eps[(r + 1) % n], pred=eps[(r - 1) % n], rank=r, world=n, length=length,
        payload_bytes=payload, step=step, window=WINDOW, timeout_clocks=timeout, credit=WINDOW, lgrad=[lgrad_addr],
        gather=[gather_addr]), NET))


@cocotb.test()
async def test_ring_switch(dut: Any) -> None:
    """ONE case (the first of ONIC_CASES) through the seeded faulty switch of sim/tb/models
    (eth_switch.EthSwitch: drop, duplicate, reorder, bit flips on every egress link, latency, line
    rate), the peers as soft_peer.SoftPeer, the RTL card's MAC port through eth_port's adapters
    (FCS added / checked and stripped, TUSER on a damaged frame, transmit underflow checked).
    Bit-exact results as test_ring; the switch's counters reconcile; the RTL card's frame counters
    equal what its switch port carried, its dropped_fcs the damaged frames delivered to it. With
    ONIC_FLIP_BEHIND_FCS=1 the flips pass the FCS (AMD's XUP VNx CMAC integration passes no
    frame-check flag to the kernel): each damaged frame is dropped by the parser's checks, the UDP
    checksum above all, or was damaged where nothing reads (the source MAC)."""
    from eth_port import RxAdapter, TxAdapter
    from eth_switch import EthSwitch, PortFaults, SwitchConfig
    from soft_peer import SoftPeer

    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    wdt, pdt = dtypes()
    n, r = cases(os.environ.get("ONIC_CASES", "3:1"))[0]
    env = {k: float(os.environ.get(f"ONIC_{k.upper()}", "0")) for k in ("drop", "dup", "reorder", "bitflip")}
    tb = TB(dut, rng, float(os.environ.get("ONIC_GRAD_STALL", "0.3")), macs=False)
    await reset(dut)
    rto_s = 20e-6
    clock_s = 4e-9
    eps = endpoints(n)
    behind = os.environ.get("ONIC_FLIP_BEHIND_FCS", "0") == "1"
    faults = PortFaults(drop=env["drop"], duplicate=env["dup"], reorder=env["reorder"], bitflip=env["bitflip"],
                        flip_behind_fcs=behind, seed=seed)
    switch = EthSwitch(SwitchConfig(ports=n, table={e.mac: k for k, e in enumerate(eps)}, flood=False,
                                    faults=faults))
    switch.start()
    tx = TxAdapter(dut, "m_axis_mac0", dut.ap_clk, switch, r)
    RxAdapter(dut, "s_axis_mac0", dut.ap_clk, switch, r)

    nrng = np.random.default_rng(seed)
    size = int(rng.choice([48, 80, 112]))
    payload = int(rng.choice([64, 128, 192]))
    length = n * size - int(nrng.integers(0, 16))
    params = (nrng.standard_normal(length) * 0.1).astype(np.float32)
    grads = [local_gradient(nrng, length, wdt) for _ in range(n)]
    step = 7
    ref = reference(n, length, params, grads, wdt, pdt, payload, step)
    want_reduced = ring.reduce_scatter(grads, wdt)[r]
    wb, pb = chunk_beats(size, wdt), chunk_beats(size, pdt)
    tag = f"switch N={n} r={r} S={size} P={payload} {wdt}/{pdt} faults {env}"
    lgrad_addr, gather_addr = 0x20000, 0x60000
    local = ring.pad(grads[r], n)
    for c in range(n):
        tb.rd.write(lgrad_addr + c * wb * BEAT, local[c * size:(c + 1) * size].tobytes().ljust(wb * BEAT, b"\x5a"))
    fill = bytes([0xA5]) * (n * pb * BEAT)
    tb.rd.write(gather_addr, fill)

    peers = {}
    for k in range(n):
        if k == r:
            continue
        kernel = ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype=pdt,
                         ag_release=True,
                         payload_bytes=payload, window=WINDOW, slots=WINDOW, rto=rto_s, fcs=True)
        peers[k] = SoftPeer(Card(cfg, kernel), switch, k)
        peers[k].start()
    own_kernel = ReferenceKernel(ring.Shard.from_params(params, r, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
    got: dict[str, Any] = {}
    scale = ring.step_grad_scale(None, n, grad_scale=1.0)
    assert scale is not None
    kernel_task = cocotb.start_soon(reference_adam_streams(tb, own_kernel, wb, scale, got))
    await program(tb, n, r, length, payload, step, lgrad_addr, gather_addr, round(rto_s / clock_s))
    await tb.write("ctrl", 1)
    await ClockCycles(dut.ap_clk, 300)
    for k, peer in peers.items():
        peer.start_step(step, grads[k])

    rtl_done = False
    start = tb.cycle
    limit = 2_000_000
    while not (rtl_done and all(p.done for p in peers.values())):
        await ClockCycles(dut.ap_clk, 16)
        for k, peer in peers.items():
            assert peer.error is None, f"{tag}: peer {k}: {peer.error}"
        if not rtl_done and int(dut.interrupt.value):
            assert await tb.read(CTRL) & 0x2, f"{tag}: interrupt without ap_done"
            await tb.write("isr", 1)
            rtl_done = True
        assert tb.cycle - start < limit, f"{tag}: not done in {limit} clocks (RTL {rtl_done}, peers " \
                                         f"{ {k: p.done for k, p in peers.items()} }, switch {switch.core.counters()})"
    clocks = tb.cycle - start
    for _ in range(200):  # the last frames (ACKs) drain
        await ClockCycles(dut.ap_clk, 50)
        if switch.idle:
            break
    await kernel_task
    assert not tx.errors, tx.errors
    assert await tb.read(READONLY["status"]) == 0, f"{tag}: STATUS"
    assert not differing(got["reduced"].tobytes(), want_reduced.tobytes(), wdt), f"{tag}: reduced chunk differs"
    want = ref["gathered"]
    pbytes = size * wire.ELEMENT_BYTES[pdt]
    for c in range(n):
        region = tb.rd.read(gather_addr + c * pb * BEAT, pb * BEAT)
        if c == r:
            assert region == fill[:pb * BEAT], f"{tag}: the own chunk's place was written"
            continue
        bad = differing(region[:pbytes], want[c * size:(c + 1) * size].tobytes(), pdt)
        assert not bad, f"{tag}: gathered chunk {c} differs in elements {bad[:8]}"
        assert region[pbytes:] == fill[:pb * BEAT - pbytes], f"{tag}: bytes past chunk {c} written"
    for k, peer in peers.items():
        assert not differing(ring.pad(peer.gathered, n).tobytes(), want.tobytes(), pdt), \
            f"{tag}: peer {k} gathered differs"
    total = switch.core.reconcile()
    port = switch.core.ports[r].as_dict()
    mine = await tb.counters()
    assert mine["frames_out"] == port["frames_in"], (mine["frames_out"], port)
    assert mine["bytes_out"] + 4 * mine["frames_out"] == port["bytes_in"], (mine["bytes_out"], port)
    assert mine["frames_in"] == port["frames_out"], (mine["frames_in"], port)
    assert mine["bytes_in"] + 4 * mine["frames_in"] == port["bytes_out"], (mine["bytes_in"], port)
    if behind:
        codec_drops = sum(mine[f"dropped_{d.value}"] for d in wire.Drop)
        assert mine["dropped_fcs"] == 0 and codec_drops <= port["bitflipped"], (mine, port)
        if port["bitflipped"] >= 3:
            assert mine["dropped_udp_checksum"] >= 1, (mine, port)
    else:
        assert mine["dropped_fcs"] == port["bitflipped"], (mine["dropped_fcs"], port)
    assert not tb.monitor.errors, tb.monitor.errors
    for m in tb.handshakes:
        assert not m.errors, m.errors
    dut._log.info("%s: done in %d clocks; switch %s; RTL counters %s", tag, clocks,
                  {k: v for k, v in total.items() if v}, {k: v for k, v in mine.items() if v})
