"""cocotb test of onic_net_kernel: a reset of the network kernel alone in the middle of a ring step,
and the ring's restart (sim/rtl/net/README.md "Reset", docs/design.md 8.3).

One RTL card (rank r) and N - 1 `hls.net.card.Card` peers, as test_onic_net_kernel.py, but what is
not the kernel is not reset with it: the card's MAC port (eth_port's `RxAdapter` keeps delivering
beats through the reset, `TxAdapter` checks every clock for a TVALID gap inside a frame, a
transmit underflow), card memory (the RAM models keep answering the bursts asked for before the
reset, late: the interconnect is not reset) and the AXI protocol monitor on both m_axi ports
(`interconnect_reset=False`: bursts from before the reset are stale, their responses still
expected and counted). The Adam kernel is the stand-in of test_onic_net_kernel.py, reset with
the card (its task cancelled, its streams idle).

Per case: a step runs until its reset point, ap_rst_n goes low for 2..8 clocks, and the peers of
the aborted step keep running (their retransmissions reach the card for more than a timeout).
Then, after the reset: the card is idle, STATUS 0, its counters restarted and showing only the
aborted step's frames dropped (`dropped_step`: no step begun) and at most the frame it was
sending when the reset came, sent whole; nothing else left it. The host restarts the step as a
NEW step (step number + 1, design.md 8.3) on every card, the peers' shards restored (new Card
objects on the original parameters), the gather buffer refilled; frames of the aborted step
recorded before the reset are replayed into the card during the new step. The new step must end
as an unreset one: bit-exact reduced chunk, gathered buffer and peers' vectors against a lossless
reference ring, STATUS 0, the replayed frames counted as `dropped_step` and nothing else dropped,
the monitor clean, and the stale R beats / B responses seen on the ports (dropped by the engines'
reset epoch in the AXI IDs).

Reset points (ONIC_POINTS, comma separated, each "point" or "point@N:r"):
  rx_mid   during the reduce-scatter, a frame half-way into the card's MAC receive port
  tx_mid   during the reduce-scatter, a frame half-way out of its MAC transmit port
  update   the owner's chunk half-way into the (stand-in) Adam kernel
  ag       during the all-gather, a gathered-parameter write response owed
A reset never falls while a write burst's W beats are part-sent: AXI4's W channel has no ID
(design.md 3b; the reset point waits for a clock without one).
Environment: ONIC_SEED, ONIC_POINTS, WIRE_BF16, PARAM_BF16.
"""

from __future__ import annotations

import os
import random
from types import SimpleNamespace
from typing import Any

import cocotb
import numpy as np
import test_onic_net_kernel as kb
from axi_monitor import AxiMonitor
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiReadBus, AxiWriteBus
from eth_port import RxAdapter, TxAdapter, fcs, fcs_ok
from hbm_memory import LatencyAxiRamRead, LatencyAxiRamWrite
from ring_streams import Sink, Source

from hls import net_regmap
from hls.golden import Hyper
from hls.net import ring, wire
from hls.net.card import Card, ReferenceKernel

MEM_BYTES = 1 << 20
POLL = 4
RTO = 3000
CTRL, ISR = 0x00, 0x0C
S_RUN = 7   # onic_net_kernel's state_reg while a step runs
NORMAL, LATE = (5, 40), (1500, 2000)   # memory latency (clocks): late answers outlive the reset


class Wire:
    """The bench's lossless switch: the RTL card's port adapters on one side, the software peers
    (frames without FCS) on the other. Frames from the card are kept with their FCS."""

    def __init__(self, r: int) -> None:
        self.config = SimpleNamespace(line_rate=100e9)
        self.r = r
        self.peers: dict[int, Card] = {}
        self.by_mac: dict[bytes, int] = {}
        self.deliver: Any = None
        self.cycle = 0
        self.from_rtl: list[bytes] = []
        self.to_rtl: list[bytes] = []     # without FCS, as the peers built them
        self.bad_fcs = 0

    def attach(self, port: int, deliver: Any) -> None:
        assert port == self.r
        self.deliver = deliver

    def send(self, port: int, frame: bytes) -> None:
        """A frame the RTL card's MAC put on the wire (FCS included)."""
        self.from_rtl.append(frame)
        if not fcs_ok(frame):
            self.bad_fcs += 1   # an aborted frame: every receiving MAC drops it
            return
        dst = self.by_mac.get(frame[:6])
        if dst in self.peers:
            self.peers[dst].receive(frame[:-4], float(self.cycle))

    def route(self, frame: bytes) -> None:
        """A frame from a peer (no FCS)."""
        dst = self.by_mac[frame[:6]]
        if dst == self.r:
            self.to_rtl.append(frame)
            self.deliver(frame + fcs(frame))
        elif dst in self.peers:
            self.peers[dst].receive(frame, float(self.cycle))


class ResetTB:
    def __init__(self, dut: Any, rng: random.Random) -> None:
        self.dut, self.rng = dut, rng
        clocked = kb._Clocked(dut)
        self.grad = Sink(clocked, "m_axis_grad0_", kb.AXIS, rng, 0.3, valid="tvalid", ready="tready")
        self.param = Source(clocked, "s_axis_param0_", kb.AXIS, rng, 0.2, valid="tvalid", ready="tready")
        # the host, card memory and the MAC are not reset with the kernel: no reset on their models
        self.host = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_control"), dut.ap_clk)
        self.rd = LatencyAxiRamRead(AxiReadBus.from_prefix(dut, "m_axi_lgrad0"), dut.ap_clk, size=MEM_BYTES,
                                    latency=NORMAL, rng=random.Random(rng.random()), max_outstanding=8)
        self.wr = LatencyAxiRamWrite(AxiWriteBus.from_prefix(dut, "m_axi_gather0"), dut.ap_clk, size=MEM_BYTES,
                                     mem=self.rd.mem, latency=NORMAL, rng=random.Random(rng.random()))
        self.monitor = AxiMonitor(dut, ["lgrad0", "gather0"], dut.ap_clk, dut.ap_rst_n, interconnect_reset=False)
        self.wire = Wire(0)
        self.tx = TxAdapter(dut, "m_axis_mac0", dut.ap_clk, self.wire, 0, strict=False)  # type: ignore[arg-type]
        self.rx = RxAdapter(dut, "s_axis_mac0", dut.ap_clk, self.wire, 0)  # type: ignore[arg-type]
        self.cycle = 0
        cocotb.start_soon(self._count())

    async def _count(self) -> None:
        while True:
            await RisingEdge(self.dut.ap_clk)
            self.cycle += 1
            self.wire.cycle = self.cycle

    async def write(self, name: str, value: int) -> None:
        await self.write_values({name: value})

    async def write_values(self, values: dict[str, int]) -> None:
        """The driver's register writes (pynq_driver.net.net_kernel), each awaited on the AXI4-Lite master."""
        for offset, word in kb.NET.writes(values):
            await self.host.write_dword(offset, word)

    async def read(self, offset: int) -> int:
        return await self.host.read_dword(offset)

    async def counters(self) -> dict[str, int]:
        out = {}
        for name in net_regmap.counter_names():
            out[name] = await self.read(kb.READONLY[name]) | await self.read(kb.READONLY[name] + 4) << 32
        return out

    def latency(self, read: tuple[int, int], write: tuple[int, int]) -> None:
        self.rd._draw.set(read)
        self.wr._draw.set(write)


def w_settled(tb: ResetTB) -> bool:
    """No write burst of m_axi_gather0 part-sent (AW without all its W beats, or W beats without AW)."""
    port = next(p for p in tb.monitor.ports if p.name == "gather0")
    return not port.aw_lens and not port.w_lens and port.w_beats == 0 and port.w_hold is None \
        and not int(tb.dut.m_axi_gather0_awvalid.value) and not int(tb.dut.m_axi_gather0_wvalid.value)


def opcode(frame: bytes) -> int:
    return frame[42] & 0xF


def trigger(tb: ResetTB, point: str, state: dict[str, Any]) -> bool:
    """True at a clock (sampled after the edge) that is the reset point `point`."""
    dut = tb.dut
    mine = tb.wire.to_rtl[state["to_rtl_start"]:]
    got_rs = sum(1 for f in mine if opcode(f) == wire.Opcode.RS)
    got_ag = sum(1 for f in mine if opcode(f) == wire.Opcode.AG)
    port = {p.name: p for p in tb.monitor.ports}
    owed_r = sum(b[1] for b in port["lgrad0"].r_bursts)
    if point == "rx_mid":
        return got_rs >= 1 and int(dut.s_axis_mac0_tvalid.value) == 1 and int(dut.s_axis_mac0_tlast.value) == 0 \
            and state["rx_beat"] == 1 and owed_r > 0
    if point == "tx_mid":
        return got_rs >= 1 and state["tx_beat"] == 1 and int(dut.m_axis_mac0_tvalid.value) == 1 \
            and int(dut.m_axis_mac0_tlast.value) == 0
    if point == "update":
        return 0 < len(tb.grad.items) and not state["kernel_done"]
    if point == "ag":
        return got_ag >= 2 and bool(port["gather0"].b_wait)
    raise ValueError(f"reset point {point!r}: rx_mid, tx_mid, update or ag")


async def watch_and_reset(tb: ResetTB, point: str, state: dict[str, Any]) -> None:
    """Reset the kernel alone at the first clock that is the reset point (and has no W burst part-sent)."""
    dut = tb.dut
    skip = tb.rng.randrange(0, 3)
    while True:
        await RisingEdge(dut.ap_clk)
        await ReadOnly()
        # beats of the frame in progress on each MAC stream (0: between frames)
        if int(dut.s_axis_mac0_tvalid.value):
            state["rx_beat"] = 0 if int(dut.s_axis_mac0_tlast.value) else state["rx_beat"] + 1
        if int(dut.m_axis_mac0_tvalid.value) and int(dut.m_axis_mac0_tready.value):
            state["tx_beat"] = 0 if int(dut.m_axis_mac0_tlast.value) else state["tx_beat"] + 1
        if trigger(tb, point, state) and w_settled(tb):
            if skip == 0:
                break
            skip -= 1
    port = {p.name: p for p in tb.monitor.ports}
    state["owed_r"] = sum(b[1] for b in port["lgrad0"].r_bursts)
    state["owed_b"] = len(port["gather0"].b_wait)
    state["stale_r"], state["stale_b"] = tb.monitor.stale_r_beats, tb.monitor.stale_b
    state["mid_tx"] = state["tx_beat"] > 0
    state["mid_rx"] = state["rx_beat"] > 0
    await FallingEdge(dut.ap_clk)
    low = 2 if point in ("rx_mid", "tx_mid") else tb.rng.randrange(2, 9)
    state["reset_cycle"] = tb.cycle
    state["tx_frames_at_reset"] = tb.tx.counters["frames"]
    state["from_rtl_at_reset"] = len(tb.wire.from_rtl)
    dut.ap_rst_n.value = 0
    if state.get("kernel") is not None:   # the Adam kernel (stand-in) is reset with the card
        state["kernel"].cancel()
    await ClockCycles(dut.ap_clk, low)
    tb.param.valid.value = 0
    dut.ap_rst_n.value = 1
    state["low"] = low
    state["reset"] = True


async def step_running(tb: ResetTB) -> None:
    """Wait until the card's step has begun (the top's S_RUN: its receive side takes the step's
    frames), so that the peers, started now, neither lose their first frames to it nor the card's
    first frames to themselves (which would cost a timeout or a NAK and retransmissions)."""
    for _ in range(2000):
        await RisingEdge(tb.dut.ap_clk)
        if int(tb.dut.state_reg.value) == S_RUN:
            return
    raise AssertionError("the card's step did not begin within 2000 clocks of ap_start")


async def pump(tb: ResetTB, peers: dict[int, Card], until: Any, limit: int, tag: str,
               inject: list[bytes] | None = None) -> bool:
    """Run the peers and the switch every POLL clocks until `until()`; the RTL card's done interrupt
    acknowledged. Frames in `inject` are delivered to the card one by one, spread over the run."""
    start = tb.cycle
    rtl_done = False
    while not until(rtl_done):
        await ClockCycles(tb.dut.ap_clk, POLL)
        for k, card in peers.items():
            for frame in card.poll(float(tb.cycle)):
                tb.wire.route(frame)
            assert card.error is None, f"{tag}: peer {k}: {card.error}"
        if inject and tb.rng.random() < 0.05:
            frame = inject.pop()
            tb.wire.deliver(frame + fcs(frame))
        if not rtl_done and int(tb.dut.interrupt.value):
            assert await tb.read(CTRL) & 0x2, f"{tag}: interrupt without ap_done"
            await tb.write("isr", 1)
            rtl_done = True
        assert tb.cycle - start < limit, f"{tag}: not done in {limit} clocks (RTL done {rtl_done}, peers " \
                                         f"{ {k: c.done for k, c in peers.items()} })"
    return rtl_done


async def reset_case(tb: ResetTB, n: int, r: int, point: str, wdt: str, pdt: str, seed: int, step: int) -> None:
    dut, rng = tb.dut, tb.rng
    nrng = np.random.default_rng(seed)
    size = 112 if point in ("rx_mid", "tx_mid") else int(rng.choice([80, 112]))
    # rx_mid: 5-beat frames (the largest the bench's receive buffer takes) and the shortest reset,
    # so that the frame's tail outlives the reset and must be recognised as a tail
    # tx_mid: the same, so that the frame part-sent still has beats when the reset reaches the arbiter
    payload = 256 if point in ("rx_mid", "tx_mid") else int(rng.choice([128, 192]))
    length = n * size - int(nrng.integers(0, 16))
    params = (nrng.standard_normal(length) * 0.1).astype(np.float32)
    grads = [kb.local_gradient(nrng, length, wdt) for _ in range(n)]
    wb, pb = kb.chunk_beats(size, wdt), kb.chunk_beats(size, pdt)
    tag = f"reset at {point}: N={n} r={r} S={size} P={payload} {wdt}/{pdt}"
    eps = kb.endpoints(n)
    tb.wire.r = r
    tb.wire.by_mac = {e.mac: k for k, e in enumerate(eps)}
    lgrad_addr, gather_addr = 0x20000, 0x60000
    local = ring.pad(grads[r], n)
    for c in range(n):
        data = local[c * size:(c + 1) * size].tobytes()
        tb.rd.write(lgrad_addr + c * wb * kb.BEAT, data.ljust(wb * kb.BEAT, b"\x5a"))
    tb.rd.write(gather_addr, bytes([0xA5]) * (n * pb * kb.BEAT))
    scale = ring.step_grad_scale(None, n, grad_scale=1.0)
    assert scale is not None

    # ---- the step that the reset aborts (slow memory: its answers outlive the reset) ----
    late = {"rx_mid": (LATE, NORMAL), "tx_mid": (LATE, NORMAL), "update": (NORMAL, NORMAL), "ag": (NORMAL, LATE)}[point]
    tb.latency(*late)
    old = {k: c for k, c in enumerate(kb.make_cards(n, length, params, wdt, pdt, payload)) if k != r}
    tb.wire.peers = old
    tb.grad.items.clear()
    state: dict[str, Any] = {"rx_beat": 0, "tx_beat": 0, "kernel_done": False, "reset": False,
                             "to_rtl_start": len(tb.wire.to_rtl)}
    got_a: dict[str, Any] = {}
    own = ReferenceKernel(ring.Shard.from_params(params, r, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)

    async def kernel_a() -> None:
        await kb.reference_adam_streams(tb, own, wb, scale, got_a)  # type: ignore[arg-type]
        state["kernel_done"] = True

    state["kernel"] = cocotb.start_soon(kernel_a())
    watcher = cocotb.start_soon(watch_and_reset(tb, point, state))
    await kb.program(tb, n, r, length, payload, step, lgrad_addr, gather_addr, RTO)  # type: ignore[arg-type]
    await tb.write("ctrl", 1)
    await step_running(tb)
    for k, card in old.items():
        card.start_step(step, grads[k])
    first_out = len(tb.wire.from_rtl)
    await pump(tb, old, lambda done: state["reset"] or done, 400_000, tag)
    assert state["reset"], f"{tag}: the step ended before its reset point"
    await watcher
    aborted_in = [f for f in tb.wire.to_rtl[state["to_rtl_start"]:] if opcode(f) in (wire.Opcode.RS, wire.Opcode.AG)]
    out_at_reset = state["tx_frames_at_reset"]
    tb.grad.items.clear()
    tb.grad.errors.clear()   # the reset withdrew a gradient beat waiting for TREADY: allowed

    # ---- after the reset: idle, nothing accepted, the old peers still retransmitting ----
    to_rtl_mark = len(tb.wire.to_rtl)
    await pump(tb, old, lambda done: tb.cycle - state["reset_cycle"] >= RTO + 1500, 100_000, tag)
    ctrl = await tb.read(CTRL)
    assert ctrl & 0x4 and not ctrl & 0x1, f"{tag}: CTRL {ctrl:#x} after the reset (not idle)"
    assert await tb.read(kb.READONLY["status"]) == 0, f"{tag}: STATUS after the reset"
    after = await tb.counters()
    since = tb.wire.to_rtl[to_rtl_mark:]
    old_frames = len(since)
    if point == "rx_mid":  # the frame cut short was never acknowledged: its sender goes back to it
        assert old_frames > 0, f"{tag}: the old peers sent nothing after the reset"
    # the old peers' data frames are of no current step; their ACK/NAKs (for frames the card sent before
    # the reset) reach no sender: stale replies (at most one frame in reception at the mark uncounted)
    replies = sum(1 for f in since if opcode(f) in (wire.Opcode.ACK, wire.Opcode.NAK))
    data = old_frames - replies
    assert after["dropped_step"] >= data - 1, f"{tag}: {after['dropped_step']} data frames dropped, {data} came"
    assert after["dropped_stale_reply"] >= replies - 1, \
        f"{tag}: {after['dropped_stale_reply']} stale replies counted, {replies} came"
    # every other drop cause 0: the tail of a frame cut by the reset, taken for a first beat, would
    # show as a MAC, EtherType, truncation ... drop
    quiet = [name for name in after if name.startswith("dropped_") and name not in ("dropped_step",
                                                                                     "dropped_stale_reply")]
    for name in ("rs_payload_bytes_out", "ag_payload_bytes_out", "retransmitted_frames", "timeouts",
                 "acks_sent", "naks_sent", *quiet):
        assert after[name] == 0, f"{tag}: counter {name} = {after[name]} after the reset"
    assert after["frames_in"] == after["dropped_step"] + after["dropped_stale_reply"], \
        f"{tag}: frames after the reset not all dropped as the aborted step's: {after}"
    sent_after = tb.tx.counters["frames"] - out_at_reset
    # the frame part-sent finishes; one may also start in the two clocks the registered reset takes
    assert int(state["mid_tx"]) <= sent_after <= 1, \
        f"{tag}: {sent_after} frames left the card after the reset (a frame part-sent: {state['mid_tx']})"
    assert after["frames_out"] <= 1
    for f in tb.wire.from_rtl[state["from_rtl_at_reset"]:]:   # whole: a frame the peers' codec takes
        parsed = wire.parse_frame(f[:-4])
        assert not isinstance(parsed, wire.Drop), f"{tag}: the frame finished after the reset: {parsed}"
    assert not tb.tx.errors, f"{tag}: MAC transmit {tb.tx.errors}"
    assert tb.wire.bad_fcs == 0, f"{tag}: {tb.wire.bad_fcs} aborted frames on the wire"
    assert tb.rx.idle, f"{tag}: frames still queued for the card"
    dut._log.info("%s: reset %d clocks at clock %d (frame part-received %s, part-sent %s; %d R beats, %d B owed); "
                  "%d frames out before it; after it %d old frames came, counters %s", tag, state["low"],
                  state["reset_cycle"], state["mid_rx"], state["mid_tx"], state["owed_r"], state["owed_b"],
                  out_at_reset - first_out, old_frames, {k: v for k, v in after.items() if v})

    # ---- the restart: a new step number on every card, shards restored, gather buffer refilled ----
    tb.latency(NORMAL, NORMAL)
    new_step = step + 1
    ref = kb.reference(n, length, params, grads, wdt, pdt, payload, new_step)
    want_reduced = ring.reduce_scatter(grads, wdt)[r]
    fill = bytes([0x5A]) * (n * pb * kb.BEAT)
    tb.rd.write(gather_addr, fill)
    peers = {k: c for k, c in enumerate(kb.make_cards(n, length, params, wdt, pdt, payload)) if k != r}
    tb.wire.peers = peers
    got: dict[str, Any] = {}
    own = ReferenceKernel(ring.Shard.from_params(params, r, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)
    kernel_task = cocotb.start_soon(kb.reference_adam_streams(tb, own, wb, scale, got))  # type: ignore[arg-type]
    before = await tb.counters()
    stale_r, stale_b = state["stale_r"], state["stale_b"]
    await kb.program(tb, n, r, length, payload, new_step, lgrad_addr, gather_addr, RTO)  # type: ignore[arg-type]
    await tb.write("ctrl", 1)
    await step_running(tb)
    for k, card in peers.items():
        card.start_step(new_step, grads[k])
    replay = [rng.choice(aborted_in) for _ in range(6)] if aborted_in else []
    injected = len(replay)
    from_mark, to_mark = len(tb.wire.from_rtl), len(tb.wire.to_rtl)
    start = tb.cycle
    await pump(tb, peers, lambda done: done and all(c.done for c in peers.values()), 400_000, tag, inject=replay)
    clocks = tb.cycle - start
    while replay:  # the rest of the replay after the step: still dropped
        frame = replay.pop()
        tb.wire.deliver(frame + fcs(frame))
    await ClockCycles(dut.ap_clk, 400)
    await kernel_task
    assert int(await tb.read(CTRL)) & 0x4, f"{tag}: not idle after done"
    status = await tb.read(kb.READONLY["status"])
    assert status == 0, f"{tag}: STATUS {status:#x} after the restarted step"
    assert not tb.grad.errors, tb.grad.errors
    items = got["grad_items"]
    assert len(tb.grad.items) == wb, f"{tag}: {len(tb.grad.items)} gradient beats, expected {wb}"
    assert [b["tlast"] for b in items] == [0] * (wb - 1) + [1], f"{tag}: gradient TLAST"
    assert not kb.differing(got["reduced"].tobytes(), want_reduced.tobytes(), wdt), f"{tag}: reduced chunk differs"
    want = ref["gathered"]
    pbytes = size * wire.ELEMENT_BYTES[pdt]
    for c in range(n):
        region = tb.rd.read(gather_addr + c * pb * kb.BEAT, pb * kb.BEAT)
        if c == r:
            assert region == fill[:pb * kb.BEAT], f"{tag}: the own chunk's place was written"
            continue
        bad = kb.differing(region[:pbytes], want[c * size:(c + 1) * size].tobytes(), pdt)
        assert not bad, f"{tag}: gathered chunk {c} differs in elements {bad[:8]}"
        assert region[pbytes:] == fill[:pb * kb.BEAT - pbytes], f"{tag}: bytes past chunk {c} written"
    for k, card in peers.items():
        assert card.gathered is not None
        assert not kb.differing(ring.pad(card.gathered, n).tobytes(), want.tobytes(), pdt), \
            f"{tag}: peer {k} gathered differs"
    end = await tb.counters()
    delta = {k: end[k] - before[k] for k in end}
    frames_in = len(tb.wire.to_rtl) - to_mark + injected
    assert delta["frames_in"] == frames_in, f"{tag}: frames_in {delta['frames_in']} != {frames_in}"
    assert delta["dropped_step"] == injected, \
        f"{tag}: dropped_step {delta['dropped_step']} != {injected} replayed: {delta}"
    for name in ("dropped_previous_step", "dropped_duplicate", "dropped_gap", "dropped_overflow", "dropped_fcs",
                 "retransmitted_frames", "timeouts", "naks_sent", "naks_received"):
        assert delta[name] == 0, f"{tag}: counter {name} {delta[name]} in the restarted step: {delta}"
    model = ref["counters"][r]
    for name in ("rs_payload_bytes_out", "ag_payload_bytes_out"):
        assert delta[name] == model[name], f"{tag}: {name} {delta[name]} != {model[name]}"
    assert delta["frames_out"] == len(tb.wire.from_rtl) - from_mark
    assert not tb.tx.errors, f"{tag}: MAC transmit {tb.tx.errors}"
    assert not tb.monitor.errors, "AXI4 protocol monitor: " + "; ".join(tb.monitor.errors)
    tb.monitor.check_idle()
    assert not tb.monitor.errors, "AXI4 protocol monitor: " + "; ".join(tb.monitor.errors)
    seen_r, seen_b = tb.monitor.stale_r_beats - stale_r, tb.monitor.stale_b - stale_b
    if state["owed_r"]:
        assert seen_r > 0, f"{tag}: no stale R beat came back after the reset ({state['owed_r']} owed)"
    if state["owed_b"]:
        assert seen_b > 0, f"{tag}: no stale B response came back after the reset ({state['owed_b']} owed)"
    dut._log.info("%s: restarted step %d done in %d clocks, bit-exact; %d replayed frames of step %d dropped; "
                  "%d stale R beats and %d stale B responses dropped", tag, new_step, clocks, injected, step,
                  seen_r, seen_b)


def points(spec: str) -> list[tuple[str, int, int]]:
    out = []
    for part in spec.split(","):
        name, _, where = part.partition("@")
        n, r = map(int, where.split(":")) if where else (3, 1)
        out.append((name, n, r))
    return out


@cocotb.test()
async def test_reset_mid_step(dut: Any) -> None:
    """A reset of the kernel alone at each reset point of ONIC_POINTS, then the ring's restart (module docstring)."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    wdt = "bf16" if int(os.environ.get("WIRE_BF16", "0")) else "fp32"
    pdt = "bf16" if int(os.environ.get("PARAM_BF16", "0")) else "fp32"
    cocotb.start_soon(Clock(dut.ap_clk, 4, unit="ns").start())
    dut.ap_rst_n.value = 0
    tb = ResetTB(dut, rng)
    await ClockCycles(dut.ap_clk, 6)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, 4)
    for k, (point, n, r) in enumerate(points(os.environ.get("ONIC_POINTS", "rx_mid,tx_mid,update,ag"))):
        await reset_case(tb, n, r, point, wdt, pdt, seed * 1000 + k, 200 + 10 * k)
