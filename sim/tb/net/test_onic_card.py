"""cocotb test of onic_card (hls.rtl.card): ONE RTL card, the network kernel and the real Adam
kernel, on a ring of software cards through the seeded faulty switch of sim/tb/models.

The card top is generated for the Adam kernel's spec (grad_source stream, out_sink
memory+stream, reduced lanes and one stripe): its network kernel hands the owner's reduced chunk
to the Adam kernel's s_axis_grad, and the Adam kernel's m_axis_param is the all-gather's hop 0.
The N - 1 peers are `hls.net.card.Card`s (`CardConfig(ag_release=True)`, ReferenceKernel) as
`soft_peer.SoftPeer`s; the RTL card's MAC port goes through `eth_port`'s adapters (FCS added and
checked, TUSER on a damaged frame, transmit underflow checked) to the switch (`eth_switch`).

Card memory is one flat cocotbext-axi memory behind every m_axi port of both kernels
(`hbm_memory.card_memory`, ideal mode with random per-burst latency and random channel pauses),
the AXI protocol monitor on every port (m_axi: `axi_monitor`; both AXI4-Lite control ports and
the two streams between the kernels: `handshake_monitor`). The host programs both kernels as the driver does: the
Adam kernel's arguments (n = the chunk size S, the scalars of `golden.prepare_scalars` with
grad_scale / N, the step t, the p, m, v, out stripes), ap_start; the network kernel's ring
arguments (hls/net_regmap.py), ap_start; then waits for both interrupts and clears them.

Checked after every step against `hls.net.ring.ring_step` on the same shards (state carried
across steps): p, m and v of the owner's shard in card memory (bit for bit; a NaN equal to any
NaN, see `differing`), the Adam kernel's out buffer, the gathered buffer (every other owner's
chunk; the own chunk's place and the bytes past each chunk untouched), every peer's gathered
vector; STATUS of both kernels 0; the network counters: frames and bytes in / out equal what the
card's switch port carried, dropped_fcs the damaged frames delivered to it, acks_sent / naks_sent
the ACK/NAK frames it sent (every frame it sent parses), and in a lossless run
the flows' payload bytes equal a lossless reference ring's with no retransmission, timeout or NAK.

test_card_misprogrammed: the Adam kernel's n off the chunk size by ONIC_N_ERROR elements (N = 3,
rank 1): both kernels flag it in STATUS (see `misprogrammed`).

Two-phase steps (ONIC_TWO_PHASE: "clip" / "noclip" / "skip", cycled over the steps; clipping to
max_norm 1 triggers / does not / a non-finite gradient; an empty kind is a one-phase step): the
host starts the network kernel alone with phase 1 (the owner's sum to SUM in card memory, the
scalar exchange), reads every rank's entry at its ap_done, derives the scale with
`ring.step_grad_scale`, then writes it into the Adam kernel's grad_scale, starts the Adam
kernel and starts the network kernel with phase 2, as design.md 8.1 "Two-phase step" says. Checked
besides the one-phase checks: no gradient beat reached the Adam kernel in phase one (it is not
started), the sum in card memory and every entry against the reference, the scale against
`ring_step`'s, and the scalar payload bytes a lossless reference ring sends. A step the entries
say to skip (a non-finite gradient): the Adam kernel is not started; the host points sum0 at the
Adam kernel's out buffer (which holds its last output, the current parameters) and starts the
network kernel with phase 3, which gathers them; p, m, v and the out buffer unchanged, and every
card gathers the unchanged parameters, as in the reference ring.

Environment: ONIC_MANIFEST (the Adam kernel's manifest.json), ONIC_SEED, ONIC_CASES ("N:r" comma
separated, or "all:N1/N2": every rank), ONIC_STEPS (consecutive steps per case, m and v carried
in card memory), ONIC_DROP, ONIC_DUP, ONIC_REORDER, ONIC_BITFLIP (per frame, every egress link),
ONIC_MEM_STALL (random pause probability on every memory channel), ONIC_STALL_PORTS (ports whose
channels pause with probability 0.9: a stalled memory port), ONIC_SIZE (the chunk size S, a
multiple of 16; default: 48, 80 or 112 drawn per case).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from pathlib import Path
from typing import Any

import cocotb
import hbm_memory
import numpy as np
from axi_monitor import AxiMonitor
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster
from eth_port import RxAdapter, TxAdapter
from eth_switch import EthSwitch, PortFaults, SwitchConfig
from handshake_monitor import AxiLiteMonitor, StreamMonitor, watch
from soft_peer import SoftPeer
from test_onic_net_kernel import (
    MAX_NORM,
    WINDOW,
    cases,
    chunk_beats,
    differing,
    endpoints,
    local_gradient,
    read_entries,
    reference,
    two_phase_gradients,
)

from hls import golden, net_regmap
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel
from hls.ports import port_array
from pynq_driver.net.net_kernel import RegisterMap, RingArgs, entry_value, step_arguments

CLOCK_NS = 4
CLOCK_S = CLOCK_NS * 1e-9
BEAT = 64
MEM_BYTES = 1 << 21
RTO_S = 20e-6
CTRL, GIE, IER, ISR = 0x00, 0x04, 0x08, 0x0C
AP_START, AP_DONE, AP_IDLE = 1, 2, 4
# card memory: the network kernel's buffers and the Adam kernel's stripes, page-spaced regions
LGRAD, GATHER, P, M, V, OUT, SUM = 0x10000, 0x40000, 0x80000, 0xA0000, 0xC0000, 0xE0000, 0x100000
# the network kernel's lgrad and gather stripes (the card rendered with net_stripes = ONIC_NET_STRIPES):
# stripe k of each buffer at its base + k x the region / K (hls/layout.py's rule over the whole buffer)
NET_STRIPES = int(os.environ.get("ONIC_NET_STRIPES", "1"))
NET_REGION = 0x30000
NET = RegisterMap.for_stripes(NET_STRIPES, NET_STRIPES)  # the network kernel's map at these stripes
LGRADS = [LGRAD + k * (NET_REGION // NET_STRIPES) for k in range(NET_STRIPES)]
GATHERS = [GATHER + k * (NET_REGION // NET_STRIPES) for k in range(NET_STRIPES)]


def env_float(name: str) -> float:
    return float(os.environ.get(name, "0"))


class CardTB:
    """Clock, reset, both hosts, card memory behind every m_axi port, the AXI monitor on each."""

    def __init__(self, dut: Any, manifest: dict[str, Any], rng: random.Random,
                 memory_plan: dict[str, Any] | None = None) -> None:
        """`memory_plan` ({"clock_mhz", "ports": [{"port", "channel", "beats_per_clock"}]}, from
        `hls.rtl.card.card_memory_plan`): every port on its channel of the HBM model (bench_onic_card's
        HBM rows); None: one ideal memory with 5..40 clocks of read latency."""
        self.dut, self.rng = dut, rng
        self.manifest = manifest
        self.spec = manifest["spec"]
        self.adam_args = {a["name"]: a for a in manifest["register_map"]["args"]}
        self.adam_status = int(manifest["register_map"]["status"]["offset"])
        ports = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
        self.ports = [*ports, *(f"lgrad{k}" for k in range(NET_STRIPES)), *(f"gather{k}" for k in range(NET_STRIPES))]
        if memory_plan is None:
            self.card = hbm_memory.card_memory(
                dut, [(p, 0) for p in self.ports], clock=dut.ap_clk, reset=dut.ap_rst_n, mode="ideal",
                mem_size=MEM_BYTES, seed=rng.randrange(1 << 30), max_outstanding=8)
            self.card.set_latency((5, 40), (2, 30))
        else:
            planned = {str(x["port"]): x for x in memory_plan["ports"]}
            if sorted(planned) != sorted(self.ports):
                raise ValueError(f"memory plan ports {sorted(planned)} are not the card's {sorted(self.ports)}")
            self.card = hbm_memory.card_memory(
                dut, [(p, int(planned[p]["channel"])) for p in self.ports], clock=dut.ap_clk, reset=dut.ap_rst_n,
                mode="hbm", beats_per_clock={int(x["channel"]): float(x["beats_per_clock"]) for x in planned.values()},
                mem_size=MEM_BYTES, clock_mhz=float(memory_plan["clock_mhz"]), sim_clock_ns=CLOCK_NS,
                seed=rng.randrange(1 << 30), max_outstanding=8)
        stall = env_float("ONIC_MEM_STALL")
        if stall:
            self.card.set_stalls(random.Random(rng.random()), stall)
        for name in filter(None, os.environ.get("ONIC_STALL_PORTS", "").split(",")):
            seed = rng.random()
            self.card.ports[name].set_stalls(lambda s=seed: hbm_memory.stall_generator(random.Random(s), 0.9))
        self.mem = self.card.mem
        self.adam = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_adam"), dut.ap_clk, dut.ap_rst_n,
                                  reset_active_level=False)
        self.net = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi_net"), dut.ap_clk, dut.ap_rst_n,
                                 reset_active_level=False)
        for host in (self.adam, self.net):
            for side in (host.write_if, host.read_if):
                side.log.setLevel("WARNING")
        self.monitor = AxiMonitor(dut, self.ports, dut.ap_clk, dut.ap_rst_n)
        # both control ports and the two streams between the kernels (onic_card's wires grad_* / param_*)
        self.handshakes = [
            *(AxiLiteMonitor(lambda s, p=p: getattr(dut, f"{p}_{s}"), p, dut.ap_clk, dut.ap_rst_n)
              for p in ("s_axi_adam", "s_axi_net")),
            *(StreamMonitor(lambda s, p=p: getattr(dut, f"{p}_{s}"), f"{p} stream", dut.ap_clk, dut.ap_rst_n)
              for p in ("grad", "param"))]
        watch(self.handshakes, dut.ap_clk)
        self.cycle = 0
        # the MAC port, one for the whole simulation: each case's switch is attached to it
        self.tx: TxAdapter | None = None
        self.rx: RxAdapter | None = None

    def connect(self, switch: EthSwitch, port: int) -> None:
        """The card's MAC port on `port` of `switch` (the previous case's switch is idle by now)."""
        if self.tx is None or self.rx is None:
            self.tx = TxAdapter(self.dut, "m_axis_mac0", self.dut.ap_clk, switch, port)
            self.rx = RxAdapter(self.dut, "s_axis_mac0", self.dut.ap_clk, switch, port)
            return
        assert self.tx.idle and self.rx.idle
        self.tx.switch, self.tx.port = switch, port
        switch.attach(port, self.rx.deliver)

    async def start(self) -> None:
        cocotb.start_soon(Clock(self.dut.ap_clk, CLOCK_NS, unit="ns").start())
        cocotb.start_soon(self._count())
        # The MAC port idle through reset, as a MAC drives it (AXI4-Stream: TVALID low in reset):
        # its adapters come with the first case, after reset. Undriven, Icarus takes the z on
        # TVALID into the receive side's registers as X; one X push left the header FIFO's count X
        # for good, and with it every credit the card advertised (Verilator reads z as 0).
        self.dut.s_axis_mac0_tvalid.value = 0
        self.dut.m_axis_mac0_tready.value = 0
        self.dut.ap_rst_n.value = 0
        await ClockCycles(self.dut.ap_clk, 8)
        self.dut.ap_rst_n.value = 1
        await ClockCycles(self.dut.ap_clk, 4)
        self.card.start()

    async def _count(self) -> None:
        while True:
            await RisingEdge(self.dut.ap_clk)
            self.cycle += 1

    async def adam_write(self, name: str, value: int) -> None:
        arg = self.adam_args[name]
        await self.adam.write_dword(int(arg["offset"]), value & 0xFFFFFFFF)
        if arg["kind"] == "pointer":
            await self.adam.write_dword(int(arg["offset"]) + 4, value >> 32)

    async def net_write(self, name: str, value: int) -> None:
        await self.net_write_values({name: value})

    async def net_write_values(self, values: dict[str, int]) -> None:
        """The driver's register writes (pynq_driver.net.net_kernel), each awaited on the AXI4-Lite master."""
        for offset, word in NET.writes(values):
            await self.net.write_dword(offset, word)

    async def net_read64(self, name: str) -> int:
        return await self.net.read_dword(NET.readonly[name]) | await self.net.read_dword(NET.readonly[name] + 4) << 32

    async def net_counters(self) -> dict[str, int]:
        return {name: await self.net_read64(name) for name in net_regmap.counter_names()}


@dataclasses.dataclass
class Ring:
    """One case: the ring's shape, the shards (the reference's state), the peers and the switch."""

    n: int
    r: int
    size: int
    payload: int
    length: int
    wdt: str
    pdt: str
    optimizer: str
    shards: list[ring.Shard]
    peers: dict[int, SoftPeer]
    switch: EthSwitch
    tag: str


def stripe_regions(tb: CardTB) -> dict[str, int]:
    """The Adam kernel's pointer arguments: one stripe of each array (the reduced spec)."""
    base = {"p": P, "m": M, "v": V, "out": OUT}
    regs = {}
    for name, arg in tb.adam_args.items():
        if arg["kind"] == "pointer":
            array, index = port_array(name)
            assert index == 0, f"{name}: one stripe per array expected"
            regs[name] = base[array]
    return regs


async def setup_case(tb: CardTB, n: int, r: int, seed: int) -> Ring:
    rng = tb.rng
    nrng = np.random.default_rng(seed)
    wdt, pdt = tb.spec["grad_dtype"], tb.spec["out_dtype"]
    size = int(os.environ.get("ONIC_SIZE", "0")) or int(rng.choice([48, 80, 112]))
    payload = int(rng.choice([64, 128, 192]))
    length = n * size - int(nrng.integers(0, 16))
    params = (nrng.standard_normal(length) * 0.1).astype(np.float32)
    shards = []
    for k in range(n):
        s = ring.Shard.from_params(params, k, n)
        # moments of a step already taken; zero past the vector's end, as the host keeps the pad
        real = max(0, min(size, length - k * size))
        s.m[:real] = (nrng.standard_normal(real) * 0.01).astype(np.float32)
        s.v[:real] = (np.abs(nrng.standard_normal(real)) * 1e-4).astype(np.float32)
        shards.append(s)
    env = {k: env_float(f"ONIC_{k.upper()}") for k in ("drop", "dup", "reorder", "bitflip")}
    eps = endpoints(n)
    faults = PortFaults(drop=env["drop"], duplicate=env["dup"], reorder=env["reorder"], bitflip=env["bitflip"],
                        seed=seed)
    switch = EthSwitch(SwitchConfig(ports=n, table={e.mac: k for k, e in enumerate(eps)}, flood=False,
                                    faults=faults))
    switch.start()
    tb.connect(switch, r)
    peers = {}
    for k in range(n):
        if k == r:
            continue
        kernel = ReferenceKernel(shards[k].copy(), golden.Hyper(), optimizer=tb.spec["optimizer"], wire_dtype=wdt,
                                 param_dtype=pdt)
        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype=pdt,
                         ag_release=True, payload_bytes=payload, window=WINDOW, slots=WINDOW, rto=RTO_S, fcs=True)
        peers[k] = SoftPeer(Card(cfg, kernel), switch, k)
        peers[k].start()
    # the owner's state in card memory, once: the Adam kernel carries it from step to step
    tb.mem.write(P, shards[r].p.tobytes())
    tb.mem.write(M, shards[r].m.tobytes())
    tb.mem.write(V, shards[r].v.tobytes())
    tag = f"N={n} r={r} S={size} P={payload} {wdt}/{pdt} faults {env}"
    return Ring(n, r, size, payload, length, wdt, pdt, tb.spec["optimizer"], shards, peers, switch, tag)


async def run_step(tb: CardTB, c: Ring, step_id: int, t: int, seed: int, lossless: bool, n_error: int = 0,
                   two_phase: str = "") -> int:
    """One ring step with the RTL card at rank c.r; every check; returns the step's clocks.

    `n_error`: the host's mistake, the Adam kernel's n off by that many elements from the chunk
    size: both kernels must say so in STATUS (then nothing else is checked). `two_phase`: "" a
    one-phase step, "clip" / "noclip" a two-phase step (see the module's docstring)."""
    dut, rng = tb.dut, tb.rng
    nrng = np.random.default_rng(seed)
    n, r, size = c.n, c.r, c.size
    if two_phase:
        grads = two_phase_gradients(nrng, n, c.length, c.wdt, two_phase)
    else:
        grads = [local_gradient(nrng, c.length, c.wdt) for _ in range(n)]
    hyper = golden.Hyper(lr=float(rng.choice([1e-3, 1e-2])), weight_decay=0.01, step=t,
                         grad_scale=float(rng.choice([1.0, 0.5])))
    start_kw: dict[str, Any] = {"two_phase": True, "max_norm": MAX_NORM} if two_phase else {}
    want = ring.ring_step(c.shards, grads, hyper, wire_dtype=c.wdt, out_dtype=c.pdt, optimizer=c.optimizer,
                          **start_kw)
    scale = want.grad_scale
    if not two_phase:
        assert scale == ring.step_grad_scale(None, n, grad_scale=hyper.grad_scale)
    # a skipped step: the Adam kernel is not started, the network kernel's phase 3 gathers the
    # current parameters from its out buffer
    skip = scale is None
    assert skip == (two_phase == "skip"), f"two_phase {two_phase!r} but scale {scale!r}"
    wb, pb = chunk_beats(size, c.wdt), chunk_beats(size, c.pdt)
    pbytes = size * wire.ELEMENT_BYTES[c.pdt]
    tag = f"{c.tag} step {step_id} (t={t}{', two-phase ' + two_phase if two_phase else ''})"
    if two_phase and not skip:  # the case is what it says: the clip coefficient below 1 or not
        unclipped = ring.step_grad_scale(None, n, grad_scale=hyper.grad_scale)
        assert (scale < unclipped) == (two_phase == "clip"), f"{tag}: scale {scale!r}, unclipped {unclipped!r}"

    # card memory: the local gradient (chunk k from a beat, junk in the pad bytes), the gather
    # buffer and the Adam kernel's out buffer filled with a pattern nobody writes
    local = ring.pad(grads[r], n)
    lgrad = bytearray()
    for k in range(n):
        region = bytearray(rng.randrange(256) for _ in range(wb * BEAT))
        data = local[k * size:(k + 1) * size].tobytes()
        region[:len(data)] = data
        lgrad += region
    hbm_memory.write_striped(tb.mem, LGRADS, bytes(lgrad))
    fill = bytes([0xA5]) * (n * pb * BEAT)
    hbm_memory.write_striped(tb.mem, GATHERS, fill)
    if skip:  # the Adam kernel's last output: the current parameters (a card keeps them there)
        current = ring.output_params(c.shards[r].p, c.pdt).tobytes()
        tb.mem.write(OUT, current + bytes([0x5A]) * (pb * BEAT - len(current)))
    else:
        tb.mem.write(OUT, bytes([0x5A]) * (pb * BEAT))
    if two_phase:
        tb.mem.write(SUM, bytes([0x3C]) * ((wb + 1) * BEAT))

    # the host: the Adam kernel first (it waits on its gradient stream), then the network kernel;
    # in a two-phase step the Adam kernel starts once phase one gave the scale (`start_adam`)
    before = await tb.net_counters()

    async def start_adam(kernel_scale: float) -> None:
        regs = {"n": size + n_error, **golden.prepare_scalars(dataclasses.replace(hyper, grad_scale=kernel_scale),
                                                    c.optimizer).registers(c.optimizer), **stripe_regions(tb)}
        for name, value in regs.items():
            await tb.adam_write(name, value)
        await tb.adam.write_dword(GIE, 1)
        await tb.adam.write_dword(IER, 1)
        await tb.adam.write_dword(CTRL, AP_START)

    if not two_phase:
        await start_adam(scale)
    eps = endpoints(n)
    # the host's arguments as the driver computes and checks them (pynq_driver.net.net_kernel)
    await tb.net_write_values(step_arguments(RingArgs(
        local=eps[r], succ=eps[(r + 1) % n], pred=eps[(r - 1) % n], rank=r, world=n, length=c.length,
        payload_bytes=c.payload, step=step_id, window=WINDOW, timeout_clocks=round(RTO_S / CLOCK_S), credit=WINDOW,
        lgrad=LGRADS, gather=GATHERS, phase=1 if two_phase else 0, sum0=SUM), NET))
    port_before = c.switch.core.ports[r].as_dict()
    assert tb.tx is not None
    sent_before = len(tb.tx.frames)
    await tb.net.write_dword(CTRL, AP_START)
    # the peers begin with the RTL card's first frame on its MAC port: its step has begun (a
    # peer's frame before would be another step's to it) and that frame reaches the successor
    # only after the switch's latency, once the peer's step has begun too (otherwise the peer
    # drops it and NAKs the gap: still correct, but not the lossless reference's counters)
    for _ in range(3000):
        await RisingEdge(dut.ap_clk)
        if dut.m_axis_mac0_tvalid.value.is_resolvable and int(dut.m_axis_mac0_tvalid.value):
            break
    for k, peer in c.peers.items():
        peer.card.update.hyper = hyper  # type: ignore[attr-defined]
        peer.start_step(step_id, grads[k], grad_scale=hyper.grad_scale, **start_kw)

    start = tb.cycle
    # a two-phase step: the network kernel's first ap_done ends phase one
    done = {"adam": skip, "net": False, "phase1": not two_phase}
    if n_error:
        return await misprogrammed(tb, c, tag, n_error)
    limit = 3_000_000
    while not (done["adam"] and done["net"] and all(p.done for p in c.peers.values())):
        await ClockCycles(dut.ap_clk, 16)
        for k, peer in c.peers.items():
            assert peer.error is None, f"{tag}: peer {k}: {peer.error}"
        for name, host, irq in (("adam", tb.adam, dut.interrupt_adam), ("net", tb.net, dut.interrupt_net)):
            if not done[name] and int(irq.value):
                assert await host.read_dword(CTRL) & AP_DONE, f"{tag}: {name} interrupt without ap_done"
                await host.write_dword(ISR, 1)
                if name == "net" and not done["phase1"]:
                    assert skip or not done["adam"], f"{tag}: the Adam kernel finished before it was started"
                    got = await phase_one_scale(tb, c, tag, want, hyper.grad_scale)
                    assert got == scale, f"{tag}: the scale from the card's entries {got!r} != {scale!r}"
                    if skip:
                        await tb.net_write("sum0_lo", OUT & 0xFFFFFFFF)
                        await tb.net_write("sum0_hi", OUT >> 32)
                        await tb.net_write("phase", 3)
                    else:
                        assert scale is not None
                        await start_adam(scale)
                        await tb.net_write("phase", 2)
                    await tb.net.write_dword(CTRL, AP_START)
                    done["phase1"] = True
                    continue
                done[name] = True
        assert tb.cycle - start < limit, \
            f"{tag}: not done in {limit} clocks ({done}, peers { {k: p.done for k, p in c.peers.items()} }, " \
            f"switch {c.switch.core.counters()})"
    clocks = tb.cycle - start
    for _ in range(200):  # the last ACKs drain
        await ClockCycles(dut.ap_clk, 50)
        if c.switch.idle:
            break
    assert tb.tx is not None and not tb.tx.errors and tb.rx is not None and not tb.rx.errors, \
        (tb.tx and tb.tx.errors, tb.rx and tb.rx.errors)
    assert await tb.adam.read_dword(CTRL) & AP_IDLE and await tb.net.read_dword(CTRL) & AP_IDLE, f"{tag}: not idle"
    assert await tb.adam.read_dword(tb.adam_status) == 0, f"{tag}: Adam kernel STATUS"
    assert await tb.net.read_dword(NET.readonly["status"]) == 0, f"{tag}: network kernel STATUS"

    # the owner's state and output, the gathered buffer, every peer
    mine = want.shards[r]
    for name, arr, addr in (("p", mine.p, P), ("m", mine.m, M), ("v", mine.v, V)):
        bad = differing(tb.mem.read(addr, size * 4), arr.tobytes(), "fp32")
        assert not bad, f"{tag}: {name} differs in elements {bad[:8]}"
    gathered = ring.pad(want.gathered, n)
    own = gathered[r * size:(r + 1) * size].tobytes()
    out = tb.mem.read(OUT, pb * BEAT)
    assert not differing(out[:pbytes], own, c.pdt), f"{tag}: the Adam kernel's out buffer differs"
    assert out[pbytes:] == bytes([0x5A]) * (pb * BEAT - pbytes), f"{tag}: bytes past the out buffer written"
    gather = hbm_memory.read_striped(tb.mem, GATHERS, n * pb * BEAT)
    for k in range(n):
        region = gather[k * pb * BEAT:(k + 1) * pb * BEAT]
        if k == r:
            assert region == fill[:pb * BEAT], f"{tag}: the own chunk's place in the gather buffer was written"
            continue
        bad = differing(region[:pbytes], gathered[k * size:(k + 1) * size].tobytes(), c.pdt)
        assert not bad, f"{tag}: gathered chunk {k} differs in elements {bad[:8]}"
        assert region[pbytes:] == fill[:pb * BEAT - pbytes], f"{tag}: bytes past chunk {k} written"
    for k, peer in c.peers.items():
        assert not differing(ring.pad(peer.gathered, n).tobytes(), gathered.tobytes(), c.pdt), \
            f"{tag}: peer {k} gathered differs"
    c.shards = want.shards

    # counters: this step's increments against the switch port and a lossless reference ring
    after = await tb.net_counters()
    delta = {k: after[k] - before[k] for k in after}
    port = {k: v - port_before[k] for k, v in c.switch.core.ports[r].as_dict().items() if isinstance(v, int)}
    exact = {"frames_out": port["frames_in"], "frames_in": port["frames_out"],
             "bytes_out": port["bytes_in"] - 4 * port["frames_in"],
             "bytes_in": port["bytes_out"] - 4 * port["frames_out"],
             "dropped_fcs": port["bitflipped"]}
    if not two_phase:
        exact["scalar_payload_bytes_out"] = 0
    # every frame the card sent parses (FCS included), and its ACK/NAK frames are the counted ones
    sent = [wire.parse_frame(f, with_fcs=True) for f in tb.tx.frames[sent_before:]]
    assert not any(isinstance(p, wire.Drop) for p in sent), f"{tag}: the card sent a frame that does not parse"
    opcodes = [p.header.opcode for p in sent if not isinstance(p, wire.Drop)]
    exact |= {"acks_sent": opcodes.count(wire.Opcode.ACK), "naks_sent": opcodes.count(wire.Opcode.NAK)}
    model = reference(n, c.length, np.zeros(c.length, np.float32), grads, c.wdt, c.pdt, c.payload,
                      step_id, **start_kw)["counters"][r]
    flows = ("rs_payload_bytes_out", "ag_payload_bytes_out", *(("scalar_payload_bytes_out",) if two_phase else ()))
    if lossless:
        exact |= {name: model[name] for name in (*flows, "retransmitted_frames", "timeouts", "naks_received")}
    else:
        for name in flows:
            assert delta[name] >= model[name], f"{tag}: {name} {delta[name]} < {model[name]}"
    for name, value in exact.items():
        assert delta[name] == value, f"{tag}: counter {name} {delta[name]} != {value} (RTL counters " \
                                     f"{ {k: v for k, v in delta.items() if v} }, switch port {port})"
    assert not tb.monitor.errors, tb.monitor.errors
    tb.monitor.check_idle()
    assert not tb.monitor.errors, tb.monitor.errors
    for m in tb.handshakes:
        assert not m.errors, m.errors
        assert m.transfers, f"{tag}: the handshake monitor of {m.name} saw no transfer"
    dut._log.info("%s: done in %d clocks; RTL counters %s", tag, clocks, {k: v for k, v in delta.items() if v})
    return clocks


async def phase_one_scale(tb: CardTB, c: Ring, tag: str, want: ring.StepResult, grad_scale: float) -> float | None:
    """The host between the phases: STATUS 0, the owner's sum in card memory (and the beat after
    it untouched), every rank's entry against the reference's chunk scalars; the scale from the
    entries the card holds, as the driver derives it."""
    n, r = c.n, c.r
    status = await tb.net.read_dword(NET.readonly["status"])
    assert status == 0, f"{tag}: network kernel STATUS {status:#x} after phase one"
    data = want.reduced[r].tobytes()
    wb = chunk_beats(c.size, c.wdt)
    region = tb.mem.read(SUM, (wb + 1) * BEAT)
    assert not differing(region[:len(data)], data, c.wdt), f"{tag}: the sum in card memory differs"
    assert region[wb * BEAT:] == bytes([0x3C]) * BEAT, f"{tag}: the beat after the sum was written"
    entries = []
    for k, (bits, flag) in enumerate(await read_entries(tb.net_write, tb.net.read_dword, n, dict(NET.readonly))):
        want_sumsq, want_flag = ring.chunk_scalars(want.reduced[k], c.wdt)
        want_bits = int(np.array(want_sumsq, dtype=np.float64).view(np.uint64))
        assert flag == want_flag, f"{tag}: rank {k} flag {flag} != {want_flag}"
        assert bits == want_bits, f"{tag}: rank {k} sum of squares {bits:#x} != {want_bits:#x}"
        entries.append((entry_value(bits), flag))
    return ring.step_grad_scale(entries, n, grad_scale=grad_scale, max_norm=MAX_NORM)


async def misprogrammed(tb: CardTB, c: Ring, tag: str, n_error: int) -> int:
    """The Adam kernel's n does not match the chunk the network kernel streams: the network
    kernel's parameter-length check flags it (protocol_error), and the Adam kernel never reports a
    clean run: n short, it flags stream_long and finishes; n long, it flags stream_short at the
    early TLAST but does not finish, as the network kernel takes only the chunk's beats of its
    parameter stream (its ap_done waits for the stream's TLAST): the host's wait times out.
    Nothing is silent."""
    dut = tb.dut
    start = tb.cycle
    net_status, adam_done, since = 0, False, None
    while tb.cycle - start < 100_000:
        await ClockCycles(dut.ap_clk, 64)
        adam_done = adam_done or bool(int(dut.interrupt_adam.value))
        if not net_status:
            net_status = await tb.net.read_dword(NET.readonly["status"])
            since = tb.cycle if net_status else None
        if net_status and (adam_done or tb.cycle - (since or 0) > 20_000):
            break
    protocol = 1 << net_regmap.STATUS_BITS["protocol_error"]
    assert net_status == protocol, f"{tag}: network kernel STATUS {net_status:#x}, expected protocol_error"
    bits = tb.manifest["register_map"]["status"]["bits"]
    status = await tb.adam.read_dword(tb.adam_status)
    if n_error < 0:
        assert adam_done, f"{tag}: the Adam kernel did not finish"
        assert status & 1 << int(bits["stream_long"]), f"{tag}: Adam kernel STATUS {status:#x}, expected stream_long"
    else:  # STATUS is live while the kernel runs: stream_short is up at the early TLAST
        assert status & 1 << int(bits["stream_short"]), f"{tag}: Adam kernel STATUS {status:#x}, expected stream_short"
    dut._log.info("%s: n off by %d: network STATUS %#x (protocol_error); Adam kernel done: %s, STATUS %#x", tag,
                  n_error, net_status, adam_done, status)
    return tb.cycle - start


@cocotb.test()
async def test_card_misprogrammed(dut: Any) -> None:
    """The host writes the Adam kernel's n one beat off the chunk size (ONIC_N_ERROR elements):
    flagged, never a clean step (see `misprogrammed`). The ring does not finish; the host resets."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    manifest = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text())
    tb = CardTB(dut, manifest, rng)
    await tb.start()
    n_error = int(os.environ.get("ONIC_N_ERROR", "16"))
    c = await setup_case(tb, 3, 1, seed)
    await run_step(tb, c, 101, 1, seed, True, n_error=n_error)


@cocotb.test()
async def test_card_ring(dut: Any) -> None:
    """The RTL card at each ring position of the cases, ONIC_STEPS steps each, one simulation."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    manifest = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text())
    tb = CardTB(dut, manifest, rng)
    await tb.start()
    steps = int(os.environ.get("ONIC_STEPS", "1"))
    lossless = not any(env_float(f"ONIC_{k}") for k in ("DROP", "DUP", "REORDER", "BITFLIP"))
    kinds = os.environ.get("ONIC_TWO_PHASE", "").split(",")
    assert all(k in ("", "clip", "noclip", "skip") for k in kinds), f"ONIC_TWO_PHASE={kinds}: clip, noclip or skip"
    step_id = 100
    for k, (n, r) in enumerate(cases(os.environ.get("ONIC_CASES", "2:0"))):
        c = await setup_case(tb, n, r, seed * 1000 + k)
        for t in range(1, steps + 1):
            step_id += 1
            await run_step(tb, c, step_id, t, seed * 7919 + step_id, lossless,
                           two_phase=kinds[(step_id - 101) % len(kinds)])
        c.switch.core.reconcile()
