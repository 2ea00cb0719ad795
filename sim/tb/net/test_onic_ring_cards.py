"""cocotb bench: N RTL cards in one simulation, each MAC port on cocotbext-eth's MAC model, all on
the seeded faulty switch of sim/tb/models.

The top is `onic_ring_sim_top<M>` (hls.rtl.ring_top, templates/net/ring_sim_top.v.j2): M card
instances, every card port as `c<k>_<port>`, each card reset by `ap_rst_n & c<k>_ap_rst_n`
(`Ring.reset` drives every `c<k>_ap_rst_n` high; ring_cards_reset.py pulls one low mid-step); a
ring uses the first N <= M. The cards are
`onic_card`s (ONIC_MANIFEST: the Adam kernel's manifest; the network kernel and the generated Adam
RTL kernel) or, without ONIC_MANIFEST, network kernels alone with a STAND-IN Adam kernel per card
(a sink with random back-pressure on m_axis_grad0, `hls.net.card.ReferenceKernel` on the shard, a
source replaying the result on s_axis_param0). Per card: an AxiLiteMaster per control port (the
Adam kernel's arguments as the driver writes them, ap_start, then the network kernel's ring
arguments at hls/net_regmap.py's offsets, ap_start, both interrupts, ISR, STATUS, counters); card
memory behind every m_axi port (cocotbext-axi RAM models with random latency and pauses) with the
AXI protocol monitor on each; handshake monitors (`handshake_monitor`) on the control port(s) and
the two streams between the network kernel and the Adam kernel (or its stand-in); the MAC port as
`eth_mac_port.MacPort` (cocotbext-eth `EthMac`, FCS and TUSER glue) on switch port k.

Checked per step against a lossless ring of N `hls.net.card.Card`s with `ReferenceKernel`s run
in Python with the same inputs (state carried across steps): every owner's p, m, v (card memory,
or the stand-in's), its updated chunk (the Adam kernel's out buffer), the gathered buffer in every
card's memory (other owners' chunks; pad bytes and the own chunk's place untouched), STATUS of
both kernels 0; with the stand-in also the reduced chunk on the stream (bit for bit =
ring.reduce_scatter, TLAST on the last beat only); counters: each card's frames / bytes in and out
equal what its switch port carried (bytes without FCS), dropped_fcs equals the damaged frames
delivered to it; lossless: no retransmission, timeout, NAK or drop; the switch reconciles; no MAC
transmit underflow or TKEEP error (the top's checkers), the AXI monitors clean. A step that does
not finish within ONIC_LIMIT clocks fails with every card's control words and counters.

A ring whose chunk has as many packets per flow as the build's transmit slots plus receive slots
(2**TX_SLOTS_LOG2 + 2**RX_SLOT_LOG2, read from the top's parameters; RS at the wire dtype, AG at
the parameter dtype) is refused at the start with one line (`hls.net.ring_bound`): it would meet
the open ring deadlock of RTL cards (sim/rtl/net/README.md "Known defect") and hang, not fail.
ONIC_ALLOW_DEADLOCK=1 runs it anyway (test_ring_cards_ag_deadlock, which shows the deadlock).

`Ring` is also the engine of `pynq_driver.net`'s rtlsim backend (`ring_server.py`).

Environment: ONIC_CARDS, ONIC_MANIFEST, ONIC_SEED, ONIC_STEPS, ONIC_LIMIT, ONIC_DROP, ONIC_DUP,
ONIC_REORDER, ONIC_BITFLIP (per frame on every egress link), ONIC_CLOCKS_OUT (a JSON file: each
step's clocks and counter increments, to compare simulators), ONIC_RESET (after the steps, reset
cases "point@card" comma separated, onic_cards only: ring_cards_reset.py), ONIC_GRAD_STALL (the stand-in kernel
refusing its gradient beat; a quarter of it: card memory pauses), WIRE_BF16, PARAM_BF16 (the
stand-in's dtypes), ONIC_BUFFER (switch egress bytes, 0: unbounded), ONIC_SIZE (chunk elements),
ONIC_RTO (retransmission timeout, clocks), ONIC_PAYLOAD (payload bytes; default drawn from the
seed: 64, 128 or 192), ONIC_ALLOW_DEADLOCK (1: no refusal at the deadlock bound), ONIC_TWO_PHASE
("clip", "noclip", "skip" comma separated, cycled over the steps, "" a one-phase step: two-phase
steps whose clip to MAX_NORM triggers, does not, or which a non-finite gradient skips: phase 3
gathers the current parameters), ONIC_SEGMENT (round-major order with that many packets per round
on every card, design.md 8.2; two-phase steps only; the deadlock bound is then 2 x segment).

Two-phase steps (design.md 8.1): each card's host runs phase one, reads every rank's entry at its
network kernel's ap_done, derives the scale, starts its Adam kernel or stand-in and phase two, each
card on its own. Checked besides the above: every card read the reference's entries (bits; NaN
as any NaN), every host derived the same scale, the scalar payload bytes in a lossless run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
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
from cocotbext.axi import AxiLiteBus, AxiLiteMaster, AxiReadBus, AxiStreamBus, AxiWriteBus
from eth_mac_port import FCS_BYTES, MacPort
from eth_switch import EthSwitch, PortFaults, SwitchConfig
from handshake_monitor import AxiLiteMonitor, StreamMonitor, watch
from hbm_memory import LatencyAxiRamRead, LatencyAxiRamWrite
from ring_streams import Sink, Source
from test_onic_net_kernel import MAX_NORM, entry_value, read_entries, two_phase_gradients

from hls import golden, layout, net_regmap
from hls.golden import Hyper, to_bf16_bits
from hls.net import ring, ring_bound, wire
from hls.net.card import Card, CardConfig, ReferenceKernel
from pynq_driver.net.net_kernel import RegisterMap, RingArgs, step_arguments

MEM_BYTES = 1 << 22  # the network kernel's memory; onic_card's card memory is twice that (the Adam stripes above)
BEAT = 64
AXIS = ["tdata", "tkeep", "tlast"]
CLOCK_NS = 4
# 1 MiB regions (LGRAD: 960 KiB), so `bench rtlnet`'s round-major rows (N = 3, 45,056-element chunks) fit;
# `memory_map_problem` refuses a ring whose chunk does not (overlapping regions would corrupt each other)
LGRAD_ADDR, GATHER_ADDR, SUM_ADDR = 0x10000, 0x100000, 0x200000  # SUM: a two-phase step's owner sum
CURRENT_ADDR = 0x300000  # the stand-in's current parameters (a skip's phase 3 reads them; onic_card: OUT_ADDR)
P_ADDR, M_ADDR, V_ADDR, OUT_ADDR = 0x400000, 0x500000, 0x600000, 0x700000  # the Adam kernel's stripes
STRIPE_BYTES = 0x100000
FILL = 0xA5
AP_DONE, AP_IDLE = 0x2, 0x4

NET = RegisterMap.for_stripes(1, 1)  # the network kernel's map at one lgrad and one gather stripe
READONLY = NET.readonly  # (a card's own map, `RtlCard.net`, follows the top's stripes)
CTRL, GIE, IER, ISR = net_regmap.CTRL, net_regmap.GIE, net_regmap.IER, net_regmap.ISR


@dataclasses.dataclass
class RingConfig:
    """What every card of the ring shares (the protocol's step arguments and the bench's sizes)."""

    world: int
    length: int
    wire_dtype: str = "fp32"
    param_dtype: str = "fp32"
    payload_bytes: int = 128
    window: int = 8           # also the receive slots advertised (the simulation's RX_SLOT_LOG2 = 3)
    rto_clocks: int = 1000    # 4 us at 250 MHz: many round trips of the small CI windows (8 x <= 256 B)
    comm: int = 0
    optimizer: str = "adamw"
    segment: int = 0          # round-major order, packets per round (0: hop-major); two-phase steps only


def endpoints(n: int) -> tuple[wire.Endpoint, ...]:
    return tuple(wire.Endpoint(mac=bytes([2, 0, 0, 0, 0x20, k]), ip=f"10.0.2.{k + 1}", port=4000 + k)
                 for k in range(n))


def local_gradient(rng: np.random.Generator, length: int, dtype: str) -> np.ndarray:
    x = (rng.standard_normal(length) * np.exp2(rng.integers(-20, 20, length))).astype(np.float32)
    specials = np.array([0.0, -0.0, 1e-45, -3e-39, 3.4e38], np.float32)
    pick = rng.random(length) < 0.05
    x[pick] = rng.choice(specials, int(pick.sum()))
    return to_bf16_bits(x) if dtype == "bf16" else x


def differing(got: bytes, want: bytes, dtype: str) -> list[int]:
    """Elements that differ, a NaN equal to any NaN (the RTL adders give the canonical quiet NaN)."""
    if len(got) != len(want):
        return [-1]
    t, exp, man = ("<u2", 0x7F80, 0x7F) if dtype == "bf16" else ("<u4", 0x7F800000, 0x7FFFFF)
    a, b = np.frombuffer(got, t), np.frombuffer(want, t)
    nan_a, nan_b = (a & exp == exp) & (a & man != 0), (b & exp == exp) & (b & man != 0)
    return [int(i) for i in np.flatnonzero((a != b) & ~(nan_a & nan_b))]


class _View:
    """Card k's ports of the top under their own names (`m_axi_lgrad0_arvalid` -> `c<k>_m_axi_...`)."""

    def __init__(self, dut: Any, k: int) -> None:
        self._dut, self._prefix = dut, f"c{k}_"
        self._name = f"card{k}"
        self._log = dut._log
        self.clk = self.ap_clk = dut.ap_clk
        self.ap_rst_n = dut.ap_rst_n
        # cocotb_bus finds signals through dir() (case-insensitive match)
        self._names = [n[len(self._prefix):] for n in dir(dut) if n.startswith(self._prefix)]

    def __dir__(self) -> list[str]:
        return self._names

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._dut, self._prefix + name)
        except AttributeError:
            raise AttributeError(name) from None


class CardReset:
    """Card k's reset as its kernels see it (the top's `ap_rst_n & c<k>_ap_rst_n`), for the AXI monitor."""

    def __init__(self, dut: Any, k: int) -> None:
        self._ring, self._card = dut.ap_rst_n, getattr(dut, f"c{k}_ap_rst_n")

    @property
    def value(self) -> int:
        return int(self._ring.value) & int(self._card.value)  # X or Z: ValueError, as a signal's int()


def top_stripes(dut: Any) -> int:
    """The network kernel's lgrad and gather stripes in the top's cards (ports m_axi_lgrad<k>)."""
    k = 0
    while hasattr(dut, f"c0_m_axi_lgrad{k}_arvalid"):
        k += 1
    return k


def stripe_bases(base: int, room: int, stripes: int) -> list[int]:
    """Stripe k of a buffer region of `room` bytes at base + k x room / K (page-aligned for K <= 8)."""
    return [base + k * (room // stripes) for k in range(stripes)]


class RtlCard:
    """One RTL card of the top with its host(s), memory and MAC port. With `adam` (the Adam
    kernel's manifest) the card is `onic_card`: the generated Adam RTL kernel on the network
    kernel's streams, p, m, v and its out buffer in card memory, its own control port; without,
    the card is the network kernel alone and the Adam kernel a stand-in on its streams.
    `stripes`: the network kernel's lgrad and gather buffers, each in that many stripes of card
    memory (onic_card only: the stand-in top packs a stripe's signals and is built with one), the
    host writing lgrad with `layout.split` and reading gather with `layout.join` as the driver does."""

    def __init__(self, dut: Any, k: int, switch: EthSwitch, rng: random.Random, grad_stall: float,
                 adam: dict[str, Any] | None = None, stripes: int = 1) -> None:
        self.k, self.dut = k, dut
        if adam is None and stripes != 1:
            raise ValueError(f"{stripes} stripes: the stand-in top's network kernel has one")
        self.stripes = stripes
        self.net = RegisterMap.for_stripes(stripes, stripes)  # the network kernel's map at these stripes
        self.readonly = self.net.readonly
        self.lgrad_bases = stripe_bases(LGRAD_ADDR, GATHER_ADDR - LGRAD_ADDR, stripes)
        self.gather_bases = stripe_bases(GATHER_ADDR, SUM_ADDR - GATHER_ADDR, stripes)
        net_ports = [*(f"lgrad{j}" for j in range(stripes)), *(f"gather{j}" for j in range(stripes))]
        logging.getLogger(f"cocotb.card{k}").setLevel(logging.WARNING)
        v = self.view = _View(dut, k)
        self.adam_manifest = adam
        self.kernel: ReferenceKernel | None = None
        self.grad: Sink | None = None
        self.param: Source | None = None
        if adam is None:
            self.host = AxiLiteMaster(AxiLiteBus.from_prefix(v, "s_axi_control"), dut.ap_clk, dut.ap_rst_n,
                                      reset_active_level=False)
            self.rd = LatencyAxiRamRead(AxiReadBus.from_prefix(v, "m_axi_lgrad0"), dut.ap_clk, dut.ap_rst_n,
                                        reset_active_level=False, size=MEM_BYTES, latency=(5, 40),
                                        rng=random.Random(rng.random()), max_outstanding=8)
            self.wr = LatencyAxiRamWrite(AxiWriteBus.from_prefix(v, "m_axi_gather0"), dut.ap_clk, dut.ap_rst_n,
                                         reset_active_level=False, size=MEM_BYTES, mem=self.rd.mem, latency=(2, 30),
                                         rng=random.Random(rng.random()))
            self.mem = self.rd.mem
            prng = random.Random(rng.random())
            for channel in (self.rd.ar_channel, self.rd.r_channel, self.wr.aw_channel, self.wr.w_channel):
                channel.set_pause_generator(iter(lambda: prng.random() < 0.2, None))
            self.ports = ["lgrad0", "gather0"]
            self.grad = Sink(v, "m_axis_grad0_", AXIS, random.Random(rng.random()), grad_stall, valid="tvalid",
                             ready="tready")
            self.param = Source(v, "s_axis_param0_", AXIS, random.Random(rng.random()), 0.2, valid="tvalid",
                                ready="tready")
            self.irq = {"net": v.interrupt}
        else:
            self.host = AxiLiteMaster(AxiLiteBus.from_prefix(v, "s_axi_net"), dut.ap_clk, dut.ap_rst_n,
                                      reset_active_level=False)
            self.adam = AxiLiteMaster(AxiLiteBus.from_prefix(v, "s_axi_adam"), dut.ap_clk, dut.ap_rst_n,
                                      reset_active_level=False)
            self.adam_args = {a["name"]: a for a in adam["register_map"]["args"]}
            self.adam_status = int(adam["register_map"]["status"]["offset"])
            pointers = [a["name"] for a in adam["register_map"]["args"] if a["kind"] == "pointer"]
            self.ports = [*pointers, *net_ports]
            self.card = hbm_memory.card_memory(v, [(p, 0) for p in self.ports], clock=dut.ap_clk,
                                               reset=dut.ap_rst_n, mode="ideal", mem_size=2 * MEM_BYTES,
                                               seed=rng.randrange(1 << 30), max_outstanding=8)
            self.card.set_latency((5, 40), (2, 30))
            self.card.set_stalls(random.Random(rng.random()), grad_stall * 0.25)
            self.mem = self.card.mem
            self.irq = {"net": v.interrupt_net, "adam": v.interrupt_adam}
        # card memory (the interconnect) is not reset with the card: bursts owed at its reset are stale
        self.monitor = AxiMonitor(v, self.ports, dut.ap_clk, CardReset(dut, k), interconnect_reset=False)
        self.handshakes = self._handshake_monitors(dut, k)
        self.port = MacPort(AxiStreamBus.from_prefix(v, "s_axis_mac0"), AxiStreamBus.from_prefix(v, "m_axis_mac0"),
                            dut.ap_clk, dut.ap_rst_n, switch, k)

    def _handshake_monitors(self, dut: Any, k: int) -> list[AxiLiteMonitor | StreamMonitor]:
        """The card's control port(s) and the streams between its kernels (onic_card: the wires grad_* and
        param_* inside card k, reachable in the tests' builds; `bench rtlnet`'s build exposes only the top's
        ports, so there the control ports alone)."""
        v, reset = self.view, CardReset(dut, k)
        lite = ["s_axi_control"] if self.adam_manifest is None else ["s_axi_net", "s_axi_adam"]
        out: list[AxiLiteMonitor | StreamMonitor] = [
            AxiLiteMonitor(lambda s, p=p: getattr(v, f"{p}_{s}"), f"card {k} {p}", dut.ap_clk, reset)
            for p in lite]
        streams = {}
        if self.adam_manifest is None:
            streams = {p: (lambda s, p=p: getattr(v, f"{p}_{s}")) for p in ("m_axis_grad0", "s_axis_param0")}
        else:
            try:
                inner = getattr(dut, f"card{k}")
                inner.grad_tvalid  # noqa: B018  (only reachable with public internals)
                streams = {p: (lambda s, p=p: getattr(inner, f"{p}_{s}")) for p in ("grad", "param")}
            except AttributeError:
                pass
        out += [StreamMonitor(sig, f"card {k} {p}", dut.ap_clk, reset) for p, sig in streams.items()]
        watch(out, dut.ap_clk)  # one coroutine per card: a clock in Python is the monitors' cost
        return out

    def started(self) -> None:
        """After the reset: the card memory model of an onic_card starts serving."""
        if self.adam_manifest is not None:
            self.card.start()

    def load_shard(self, shard: ring.Shard) -> None:
        """The owner's p, m, v: into card memory (onic_card) or the stand-in's kernel."""
        if self.adam_manifest is None:
            assert self.kernel is not None
            self.kernel.shard = shard.copy()
            return
        for addr, arr in ((P_ADDR, shard.p), (M_ADDR, shard.m), (V_ADDR, shard.v)):
            self.mem.write(addr, np.asarray(arr, np.float32).tobytes())

    def shard(self, size: int) -> ring.Shard:
        if self.adam_manifest is None:
            assert self.kernel is not None
            return self.kernel.shard
        return ring.Shard(*(np.frombuffer(self.mem.read(a, size * 4), "<f4").copy() for a in (P_ADDR, M_ADDR, V_ADDR)))

    async def start_adam(self, size: int, hyper: Hyper, scale: float, optimizer: str) -> None:
        """The Adam kernel's arguments (as the driver writes them) and ap_start: it waits on its stream."""
        regs = {"n": size, **golden.prepare_scalars(dataclasses.replace(hyper, grad_scale=scale),
                                                    optimizer).registers(optimizer)}
        base = {"p": P_ADDR, "m": M_ADDR, "v": V_ADDR, "out": OUT_ADDR}
        for name, arg in self.adam_args.items():
            if arg["kind"] == "pointer":
                regs[name] = base[name.rstrip("0123456789_rdw")]
        for name, value in regs.items():
            arg = self.adam_args[name]
            await self.adam.write_dword(int(arg["offset"]), value & 0xFFFFFFFF)
            if arg["kind"] == "pointer":
                await self.adam.write_dword(int(arg["offset"]) + 4, value >> 32)
        await self.adam.write_dword(GIE, 1)
        await self.adam.write_dword(IER, 1)
        await self.adam.write_dword(CTRL, 1)

    async def write(self, name: str, value: int) -> None:
        await self.write_values({name: value})

    async def write_values(self, values: dict[str, int]) -> None:
        """The driver's register writes (pynq_driver.net.net_kernel), each awaited on the AXI4-Lite master."""
        for offset, word in self.net.writes(values):
            await self.host.write_dword(offset, word)

    async def read(self, offset: int) -> int:
        return await self.host.read_dword(offset)

    async def counters(self) -> dict[str, int]:
        out = {}
        for name in net_regmap.counter_names():
            out[name] = (await self.read(self.readonly[name] + 4)) << 32 | await self.read(self.readonly[name])
        return out

    async def status_and_counters(self) -> tuple[int, dict[str, int]]:
        """STATUS (the Adam kernel's in bits 16..) and the counters."""
        st = await self.read(self.readonly["status"])
        if self.adam_manifest is not None:
            st |= await self.adam.read_dword(self.adam_status) << 16
        return st, await self.counters()

    async def program(self, cfg: RingConfig, step: int, phase: int = 0) -> None:
        eps = endpoints(cfg.world)
        r, n = self.k, cfg.world
        # the host's arguments as the driver computes and checks them (pynq_driver.net.net_kernel)
        await self.write_values(step_arguments(RingArgs(
            local=eps[r], succ=eps[(r + 1) % n], pred=eps[(r - 1) % n], rank=r, world=n, length=cfg.length,
            payload_bytes=cfg.payload_bytes, step=step, window=cfg.window, timeout_clocks=cfg.rto_clocks,
            credit=cfg.window, lgrad=self.lgrad_bases, gather=self.gather_bases, comm=cfg.comm, phase=phase,
            sum0=SUM_ADDR, segment=cfg.segment), self.net))

    async def entries(self, n: int) -> list[tuple[float, bool]]:
        """Every rank's scalar entry (sum of squares, non-finite flag) after phase one, as the host reads them."""
        return [(entry_value(bits), flag) for bits, flag in await read_entries(self.write, self.read, n,
                                                                                 self.readonly)]

    async def stand_in(self, beats: int, scale: float, got: dict[str, Any]) -> None:
        """The Adam kernel stand-in: the reduced chunk in, ReferenceKernel's updated chunk out."""
        assert self.kernel is not None and self.grad is not None and self.param is not None
        while len(self.grad.items) < beats:
            await RisingEdge(self.dut.ap_clk)
        items = list(self.grad.items[:beats])
        got["grad_tlast"] = [b["tlast"] for b in items]
        data = b"".join(b["tdata"].to_bytes(BEAT, "little")[:bin(b["tkeep"]).count("1")] for b in items)
        reduced = np.frombuffer(data, np.dtype("<u2" if self.kernel.wire_dtype == "bf16" else "<f4"))
        got["reduced"] = reduced
        out = np.asarray(self.kernel(reduced.copy(), scale))
        got["own_out"] = out
        raw = out.tobytes()
        await self.param.send([{"tdata": int.from_bytes(raw[k:k + BEAT].ljust(BEAT, b"\0"), "little"),
                                "tkeep": (1 << BEAT) - 1, "tlast": int(k + BEAT >= len(raw))}
                               for k in range(0, len(raw), BEAT)])


@dataclasses.dataclass
class StepResult:
    gathered: list[np.ndarray]       # per card, the full gathered vector (padded to N chunks)
    reduced: list[np.ndarray]        # per card, the reduced chunk handed to its Adam kernel
    grad_tlast: list[list[int]]
    memory_ok: list[str]             # per card, what was wrong in card memory (empty: nothing)
    status: list[int]
    counters: list[dict[str, int]]   # per card, this step's increments
    clocks: int
    scale: float | None = None       # the kernels' gradient scale (None: a two-phase step skipped the update)
    entries: list[list[tuple[float, bool]]] | None = None  # two-phase: per card, every rank's entry it read
    sums: list[bytes] | None = None  # two-phase: per card, the owner's sum in card memory (S elements)
    as_two_phases: bool = False      # a one-phase step the host ran as the two phases (round-major, or large)


def memory_map_problem(cfg: RingConfig, onic_card: bool, stripes: int = 1) -> str | None:
    """Why a chunk of this ring does not fit the bench's card memory map (None: it fits); with
    `stripes`, stripe 0 (the largest) of each network-kernel buffer in its share of the region."""
    n, size = cfg.world, ring.chunk_elems(cfg.length, cfg.world)
    wbytes = -(-size * wire.ELEMENT_BYTES[cfg.wire_dtype] // BEAT) * BEAT
    pbytes = -(-size * wire.ELEMENT_BYTES[cfg.param_dtype] // BEAT) * BEAT
    need = {"local gradient": (layout.stripe_bytes(n * wbytes, 1, stripes), (GATHER_ADDR - LGRAD_ADDR) // stripes),
            "gather": (layout.stripe_bytes(n * pbytes, 1, stripes), (SUM_ADDR - GATHER_ADDR) // stripes),
            "sum": (wbytes + BEAT, CURRENT_ADDR - SUM_ADDR), "current": (pbytes + BEAT, MEM_BYTES - CURRENT_ADDR)}
    if onic_card:
        need |= {"p, m, v": (size * 4, STRIPE_BYTES), "out": (pbytes, STRIPE_BYTES)}
    over = [f"{k} {bytes_:,} bytes in {room:,}" for k, (bytes_, room) in need.items() if bytes_ > room]
    return f"a chunk of {size} elements on {n} cards does not fit the bench's card memory: {', '.join(over)}" \
        if over else None


def top_cards(dut: Any) -> int:
    """The cards of the top (the ring may use fewer)."""
    k = 0
    while hasattr(dut, f"c{k}_m_axis_mac0_tvalid"):
        k += 1
    return k


def top_bound(dut: Any) -> int:
    """The deadlock bound T + R of the top's build, from its parameters (every card gets the same)."""
    try:
        return ring_bound.bound(int(dut.TX_SLOTS_LOG2.value), int(dut.RX_SLOT_LOG2.value))
    except (AttributeError, ValueError) as exc:
        raise ValueError(f"the top has no readable TX_SLOTS_LOG2 / RX_SLOT_LOG2 parameter ({exc}): "
                         "the ring's deadlock bound is unknown") from exc


class Ring:
    """The first `cfg.world` RTL cards of the top on one switch; `step` runs one ring step on all.

    `adam`: the Adam kernel's manifest when the top's cards are `onic_card` (else the network
    kernel with the stand-in). The top may hold more cards than the ring uses: the others stay
    idle (never started, MAC ports unconnected), so one build serves rings of 2 .. its size.

    A chunk at or over the deadlock bound of the top's buffers (`bound`: transmit slots + receive
    slots, from its TX_SLOTS_LOG2 and RX_SLOT_LOG2) in hop-major order, or a round-major segment
    with 2 B at or over it, raises `ring_bound.ChunkOverBound` here, before anything runs, unless
    `allow_deadlock` (only the test that shows the deadlock). A one-phase step of onic_cards whose
    chunk has more RS packets than the receive slots (`ring_bound.one_phase_fits`) runs as the two
    phases (`step`), as would a host: in one phase the ring would wait on itself."""

    def __init__(self, dut: Any, cfg: RingConfig, params: np.ndarray, *, faults: PortFaults | None = None,
                 buffer_bytes: int | None = None, grad_stall: float = 0.3, seed: int = 1,
                 adam: dict[str, Any] | None = None, clock_ps: int = CLOCK_NS * 1000, poll: int = 16,
                 allow_deadlock: bool = False) -> None:
        # clock_ps, poll (clocks between interrupt polls): the bench's 300 MHz and exact done clocks
        self.dut, self.cfg = dut, cfg
        self.bound = top_bound(dut)
        self.stripes = top_stripes(dut)  # 0: a top without card ports, refused below (fewer cards)
        size = ring.chunk_elems(cfg.length, cfg.world)
        problem = memory_map_problem(cfg, adam is not None, max(1, self.stripes))
        if problem:
            raise ValueError(problem)
        # a one-phase step of this chunk on onic_cards runs as the two phases (ring_bound.one_phase_fits)
        self.one_phase_fits = adam is None or allow_deadlock or ring_bound.one_phase_fits(
            size, cfg.payload_bytes, cfg.wire_dtype, int(dut.RX_SLOT_LOG2.value))
        if not allow_deadlock:
            ring_bound.check_chunk(size, cfg.payload_bytes, cfg.wire_dtype, cfg.param_dtype, self.bound,
                                   f"ring of {cfg.world} RTL cards", cfg.segment)
        self.clock_ps, self.poll = clock_ps, poll
        self.done_cycle: dict[int, int] = {}  # per card: the clock its last interrupt was seen, this step
        self.phase_one_cycle: dict[int, int] = {}  # two-phase: per card, its network kernel's phase-one done
        self.start_cycle = 0  # the clock the step's ap_starts were written
        n = cfg.world
        if top_cards(dut) < n:
            raise ValueError(f"a ring of {n}: the top has fewer cards")
        if not self.stripes:
            raise ValueError("the top's card 0 has no m_axi_lgrad0 port")
        self.rng = random.Random(seed)
        eps = endpoints(n)
        self.switch = EthSwitch(SwitchConfig(ports=n, table={e.mac: k for k, e in enumerate(eps)}, flood=False,
                                             faults=faults or PortFaults(), buffer_bytes=buffer_bytes))
        self.switch.start()
        self.adam = adam
        self.cards = [RtlCard(dut, k, self.switch, self.rng, grad_stall, adam, self.stripes) for k in range(n)]
        self.shards = [ring.Shard.from_params(params, k, n) for k in range(n)]
        for k, card in enumerate(self.cards):
            card.kernel = ReferenceKernel(self.shards[k].copy(), Hyper(), optimizer=cfg.optimizer,
                                          wire_dtype=cfg.wire_dtype, param_dtype=cfg.param_dtype)
        self.cycle = 0
        cocotb.start_soon(self._count())

    async def _count(self) -> None:
        while True:
            await RisingEdge(self.dut.ap_clk)
            self.cycle += 1

    async def reset(self) -> None:
        cocotb.start_soon(Clock(self.dut.ap_clk, self.clock_ps, unit="ps").start())
        self.dut.ap_rst_n.value = 0
        # every card of the top, used or idle: an undriven reset input is z (Icarus) or 0 (Verilator)
        for k in range(top_cards(self.dut)):
            getattr(self.dut, f"c{k}_ap_rst_n").value = 1
        await ClockCycles(self.dut.ap_clk, 8)
        self.dut.ap_rst_n.value = 1
        await ClockCycles(self.dut.ap_clk, 4)
        for k, card in enumerate(self.cards):
            card.started()
            card.load_shard(self.shards[k])

    def card_shards(self) -> list[ring.Shard]:
        size = ring.chunk_elems(self.cfg.length, self.cfg.world)
        return [c.shard(size) for c in self.cards]

    async def step(self, step: int, grads: list[np.ndarray], hyper: Hyper, limit: int = 300_000, *,
                   two_phase: bool = False, max_norm: float | None = None, during: Any = None) -> StepResult:
        """One ring step on every card. `two_phase`: each card's host runs phase one, reads every
        rank's entry at its ap_done, derives the scale (`ring.step_grad_scale` with `max_norm`),
        starts its Adam kernel (or the stand-in) with it and runs phase two (design.md 8.1); each
        card on its own, as separate hosts would. A skip (a non-finite gradient on some rank: every
        host derives None from the same entries): the Adam kernel (or stand-in) is not started;
        each host points sum0 at the card's current parameters (the Adam kernel's out buffer, which
        holds its last output; written here as the card would hold it) and starts phase 3, which
        gathers them: p, m, v unchanged, every card gathers the unchanged parameters. A one-phase
        step in round-major order (`cfg.segment`) runs as the two phases, each host ignoring the
        entries (the one-phase scale, no skip): the network kernel runs more than one round only so. So
        does a one-phase step of onic_cards over the one-phase bound (`one_phase_fits`).
        `during`: a coroutine started with the step (every ap_start written) and awaited before the
        counters are read (the reset bench's replay of an aborted step's frames)."""
        cfg, dut = self.cfg, self.dut
        n, size = cfg.world, ring.chunk_elems(cfg.length, cfg.world)
        if max_norm is not None and not two_phase:
            raise ValueError("max_norm needs the two-phase step (two_phase=True)")
        one_phase_rounds = (bool(cfg.segment) or not self.one_phase_fits) and not two_phase
        two_phase = two_phase or one_phase_rounds
        wb = -(-size * wire.ELEMENT_BYTES[cfg.wire_dtype] // BEAT)
        pb = -(-size * wire.ELEMENT_BYTES[cfg.param_dtype] // BEAT)
        fill = bytes([FILL]) * (n * pb * BEAT)
        out_fill = bytes([0x5A]) * (pb * BEAT)
        scale = ring.step_grad_scale(None, n, grad_scale=float(hyper.grad_scale))
        assert scale is not None
        scales: list[float | None] = [scale] * n
        entries: list[list[tuple[float, bool]]] = [[] for _ in range(n)]
        before = await _all([c.counters() for c in self.cards])  # each host on its own bus, together
        ports_before = [self.switch.core.ports[k].as_dict() for k in range(n)]
        got: list[dict[str, Any]] = [{} for _ in range(n)]
        current: list[bytes] = [b""] * n  # two-phase: each card's current parameters (out dtype)
        cur_addr = OUT_ADDR if self.adam is not None else CURRENT_ADDR
        tasks = []
        for k, card in enumerate(self.cards):
            local = ring.pad(np.asarray(grads[k]), n)
            lgrad = b""
            for c in range(n):  # chunk c from a beat, junk in the pad bytes
                data = local[c * size:(c + 1) * size].tobytes()
                lgrad += data + bytes(self.rng.randrange(256) for _ in range(wb * BEAT - len(data)))
            hbm_memory.write_striped(card.mem, card.lgrad_bases, lgrad)
            hbm_memory.write_striped(card.mem, card.gather_bases, fill)
            if self.adam is None:
                assert card.kernel is not None and card.grad is not None
                card.kernel.hyper = hyper
                card.grad.items.clear()
                if not two_phase:
                    tasks.append(cocotb.start_soon(card.stand_in(wb, scale, got[k])))
            if two_phase:
                card.mem.write(SUM_ADDR, bytes([FILL]) * ((wb + 1) * BEAT))
                # the Adam kernel's last output, what a skip's phase 3 gathers (the stand-in's too)
                current[k] = ring.output_params(card.shard(size).p, cfg.param_dtype).tobytes()
                card.mem.write(cur_addr, current[k] + out_fill[len(current[k]):])
            elif self.adam is not None:
                card.mem.write(OUT_ADDR, out_fill)
        if self.adam is not None and not two_phase:  # the Adam kernels first: they wait on their streams
            await _all([c.start_adam(size, hyper, scale, cfg.optimizer) for c in self.cards])
        await _all([c.program(cfg, step, 1 if two_phase else 0) for c in self.cards])
        start = self.cycle
        self.done_cycle = {}
        self.start_cycle = start
        self.phase_one_cycle = {}

        async def phases(k: int, card: RtlCard) -> None:
            await self._wait_done(card, start, limit, only="net")
            self.phase_one_cycle[k] = self.cycle
            entries[k] = await card.entries(n)
            mine = scale if one_phase_rounds else \
                ring.step_grad_scale(entries[k], n, grad_scale=float(hyper.grad_scale), max_norm=max_norm)
            scales[k] = mine
            if mine is None:  # the skip: no Adam kernel; phase 3 gathers the current parameters
                await card.write("sum0_lo", cur_addr & 0xFFFFFFFF)
                await card.write("sum0_hi", cur_addr >> 32)
                await card.write("phase", 3)
            else:
                if self.adam is None:
                    tasks.append(cocotb.start_soon(card.stand_in(wb, mine, got[k])))
                else:
                    await card.start_adam(size, hyper, mine, cfg.optimizer)
                await card.write("phase", 2)
            await card.write("ctrl", 1)
            await self._wait_done(card, start, limit, only="net" if mine is None else None)

        await _all([c.write("ctrl", 1) for c in self.cards])
        beside = cocotb.start_soon(during) if during is not None else None
        if two_phase:
            await _all([phases(k, c) for k, c in enumerate(self.cards)])
        else:
            await _all([self._wait_done(c, start, limit) for c in self.cards])
        clocks = self.cycle - start
        for t in tasks:
            await t
        if beside is not None:
            await beside
        for _ in range(400):  # the last ACKs drain
            if self.switch.idle and all(c.port.idle for c in self.cards):
                break
            await ClockCycles(dut.ap_clk, 50)
        gathered, problems, status, deltas = [], [], [], []
        words = await _all([c.status_and_counters() for c in self.cards])
        pbytes = size * wire.ELEMENT_BYTES[cfg.param_dtype]
        for k, card in enumerate(self.cards):
            st, after = words[k]
            status.append(st)
            deltas.append({name: after[name] - before[k][name] for name in after})
            parts, bad = [], []
            if self.adam is not None:
                out = card.mem.read(OUT_ADDR, pb * BEAT)
                own = out[:pbytes]
                if out[pbytes:] != out_fill[pbytes:]:
                    bad.append("bytes past the Adam kernel's out buffer written")
            else:  # the stand-in's output; in a skipped step it did not run: the current parameters
                own = got[k]["own_out"].tobytes() if "own_out" in got[k] else current[k]
            if scales[k] is None and own != current[k]:
                bad.append("the own chunk gathered in a skipped step is not the current parameters")
            whole = hbm_memory.read_striped(card.mem, card.gather_bases, n * pb * BEAT)
            for c in range(n):
                region = whole[c * pb * BEAT:(c + 1) * pb * BEAT]
                if c == k:
                    if region != fill[:pb * BEAT]:
                        bad.append("own chunk's place written")
                    parts.append(own)
                    continue
                if region[pbytes:] != fill[:pb * BEAT - pbytes]:
                    bad.append(f"bytes past chunk {c} written")
                parts.append(region[:pbytes])
            gathered.append(np.frombuffer(b"".join(parts), "<u2" if cfg.param_dtype == "bf16" else "<f4").copy())
            problems.append("; ".join(bad))
        for k in range(n):
            port = self.switch.core.ports[k].as_dict()
            deltas[k]["_switch_in"] = port["frames_in"] - ports_before[k]["frames_in"]
            deltas[k]["_switch_bytes_in"] = port["bytes_in"] - ports_before[k]["bytes_in"]
            deltas[k]["_switch_out"] = port["frames_out"] - ports_before[k]["frames_out"]
            deltas[k]["_switch_bytes_out"] = port["bytes_out"] - ports_before[k]["bytes_out"]
            deltas[k]["_switch_bitflipped"] = port["bitflipped"] - ports_before[k]["bitflipped"]
        sums = [c.mem.read(SUM_ADDR, size * wire.ELEMENT_BYTES[cfg.wire_dtype]) for c in self.cards] \
            if two_phase else None
        if len(set(map(repr, scales))) != 1:  # every host derives the same scale from the same entries
            raise AssertionError(f"the cards' hosts derived different scales: {scales}")
        return StepResult(gathered=gathered, reduced=[g.get("reduced") for g in got],
                          grad_tlast=[g.get("grad_tlast") for g in got], memory_ok=problems, status=status,
                          counters=deltas, clocks=clocks, scale=scales[0],
                          entries=entries if two_phase and not one_phase_rounds else None,
                          sums=sums, as_two_phases=one_phase_rounds)

    async def _wait_done(self, card: RtlCard, start: int, limit: int, only: str | None = None) -> None:
        """Until the card's interrupts (`only`: that kernel's) were seen and cleared."""
        pending = {only: card.irq[only]} if only else dict(card.irq)
        while pending:
            await ClockCycles(self.dut.ap_clk, self.poll)
            for name, irq in list(pending.items()):
                if int(irq.value):
                    self.done_cycle[card.k] = self.cycle
                    host = card.host if name == "net" else card.adam
                    assert await host.read_dword(CTRL) & AP_DONE, f"card {card.k}: {name} interrupt without ap_done"
                    await host.write_dword(ISR, 1)
                    del pending[name]
            if card.k == 0 and (self.cycle - start) % 20000 < self.poll:
                self.dut._log.info("%d clocks into the step: switch %s", self.cycle - start,
                                   {k: v for k, v in self.switch.counters().items() if v})
            if self.cycle - start > limit:
                raise AssertionError(f"card {card.k}: {sorted(pending)} not done in {limit} clocks "
                                     f"(switch {self.switch.counters()}; cards: {await self.describe()})")

    async def describe(self) -> list[dict[str, Any]]:
        """Each card's control words, STATUS and nonzero counters (a step that does not finish)."""
        out = []
        for c in self.cards:
            d: dict[str, Any] = {"net_ctrl": await c.read(CTRL), "net_status": await c.read(c.readonly["status"])}
            if self.adam is not None:
                d |= {"adam_ctrl": await c.adam.read_dword(CTRL), "adam_status": await c.adam.read_dword(c.adam_status)}
            d |= {k: v for k, v in (await c.counters()).items() if v}
            d |= self._senders(c.k)
            out.append(d)
        return out

    def _senders(self, k: int) -> dict[str, dict[str, int]]:
        """The go-back-N senders' state (base, next, provided, credit, limit), read through the
        simulator's hierarchy (Verilator --public-flat-rw); empty where the hierarchy differs."""
        out = {}
        card = getattr(self.dut, f"card{k}")
        tx = card.net_inst.tx if self.adam is not None else card.tx
        for flow in ("rs_retx", "ag_retx"):
            try:
                retx = getattr(tx, flow)
                out[flow] = {n: int(getattr(retx, f"{n}_reg").value)
                             for n in ("base", "next", "provided", "credit", "limit", "inflight")}
            except (AttributeError, ValueError):
                pass
        return out

    def tx_errors(self) -> list[str]:
        out = []
        for k in range(self.cfg.world):
            u, e = int(getattr(self.dut, f"c{k}_mac_tx_underflows").value), \
                int(getattr(self.dut, f"c{k}_mac_tx_keep_errors").value)
            if u or e:
                out.append(f"card {k}: {u} MAC transmit underflows, {e} TKEEP errors")
        return out


async def _all(coros: list[Any]) -> list[Any]:
    """The coroutines' results, run together."""
    return [await t for t in [cocotb.start_soon(c) for c in coros]]


class ReferenceRing:
    """A lossless ring of N `Card`s with `ReferenceKernel`s (p, m, v kept across steps)."""

    def __init__(self, cfg: RingConfig, params: np.ndarray) -> None:
        n = cfg.world
        eps = endpoints(n)
        self.cfg = cfg
        self.kernels = [ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper(), optimizer=cfg.optimizer,
                                        wire_dtype=cfg.wire_dtype, param_dtype=cfg.param_dtype) for k in range(n)]
        self.cards = [Card(CardConfig(rank=k, world=n, length=cfg.length, endpoints=eps, wire_dtype=cfg.wire_dtype,
                                      param_dtype=cfg.param_dtype, payload_bytes=cfg.payload_bytes,
                                      window=cfg.window, slots=cfg.window, rto=1e9, fcs=False, comm=cfg.comm,
                                      segment=cfg.segment),
                           self.kernels[k]) for k in range(n)]
        self.by_mac = {e.mac: k for k, e in enumerate(eps)}

    def step(self, step: int, grads: list[np.ndarray], hyper: Hyper, **start: Any) -> dict[str, Any]:
        """`start`: start_step's two_phase and max_norm."""
        before = [dict(c.counters) for c in self.cards]
        for card, kernel, g in zip(self.cards, self.kernels, grads, strict=True):
            kernel.hyper = hyper
            card.start_step(step, g, grad_scale=float(hyper.grad_scale), **start)
        now = 0.0
        while not all(c.done for c in self.cards):
            now += 1.0
            for c in self.cards:
                for frame in c.poll(now):
                    self.cards[self.by_mac[frame[:6]]].receive(frame, now)
            assert now < 1e6, "reference ring did not finish"
        gathered = self.cards[0].gathered
        assert gathered is not None
        deltas = [{k: v - b.get(k, 0) for k, v in c.counters.items()} for c, b in zip(self.cards, before, strict=True)]
        entries = [self.cards[0]._scalars[k] for k in range(self.cfg.world)] if start.get("two_phase") else None
        return {"gathered": ring.pad(gathered, self.cfg.world), "counters": deltas, "entries": entries}


def check_step(dut: Any, tag: str, ring_: Ring, res: StepResult, ref: dict[str, Any], grads: list[np.ndarray],
               refring: ReferenceRing, lossless: bool, late: list[tuple[int, int]] | None = None) -> None:
    """`late`: per card, the frames and bytes (without FCS) of an aborted step handed to its MAC
    port during this step, past the switch (ring_cards_reset's replay): each counted in and dropped."""
    cfg = ring_.cfg
    n, wdt, pdt = cfg.world, cfg.wire_dtype, cfg.param_dtype
    want_reduced = ring.reduce_scatter(grads, wdt)
    size = ring.chunk_elems(cfg.length, n)
    wb = -(-size * wire.ELEMENT_BYTES[wdt] // BEAT)
    shards = ring_.card_shards()
    for k, card in enumerate(ring_.cards):
        t = f"{tag} card {k}"
        assert res.status[k] == 0, f"{t}: STATUS {res.status[k]:#x}"
        if res.reduced[k] is not None:  # the stand-in's view of the stream (a real Adam kernel: p, m, v below)
            assert card.grad is not None and not card.grad.errors, card.grad.errors
            assert not differing(res.reduced[k].tobytes(), want_reduced[k].tobytes(), wdt), f"{t}: reduced chunk"
            assert res.grad_tlast[k] == [0] * (wb - 1) + [1], f"{t}: gradient TLAST"
        assert not res.memory_ok[k], f"{t}: {res.memory_ok[k]}"
        bad = differing(res.gathered[k].tobytes(), ref["gathered"].tobytes(), pdt)
        assert not bad, f"{t}: gathered differs in elements {bad[:8]}"
        mine, theirs = shards[k], refring.kernels[k].shard
        for name in ("p", "m", "v"):
            a, b = getattr(mine, name), getattr(theirs, name)
            assert not differing(np.asarray(a).tobytes(), np.asarray(b).tobytes(), "fp32"), f"{t}: {name} differs"
        c = res.counters[k]
        late_frames, late_bytes = late[k] if late else (0, 0)
        exact = {"frames_out": c["_switch_in"], "bytes_out": c["_switch_bytes_in"] - FCS_BYTES * c["_switch_in"],
                 "frames_in": c["_switch_out"] + late_frames,
                 "bytes_in": c["_switch_bytes_out"] - FCS_BYTES * c["_switch_out"] + late_bytes,
                 "dropped_fcs": c["_switch_bitflipped"]}
        if ref["entries"] is None:
            if not res.as_two_phases:  # else the scalar exchange ran, its entries ignored
                exact["scalar_payload_bytes_out"] = 0
        else:  # the owner's sum in card memory; every rank's entry the card's host read: the reference's bits
            assert res.entries is not None and res.sums is not None
            assert not differing(res.sums[k], want_reduced[k].tobytes(), wdt), f"{t}: the sum in card memory"
            def bits(e: float) -> int | str:  # the RTL's NaN is the canonical one: any NaN equals any
                return "nan" if np.isnan(e) else np.array(e, np.float64).view(np.uint64).item()
            got_bits = [(bits(e), f) for e, f in res.entries[k]]
            want_bits = [(bits(e), f) for e, f in ref["entries"]]
            assert got_bits == want_bits, f"{t}: scalar entries {res.entries[k]} != {ref['entries']}"
        if lossless:
            model = ref["counters"][k]
            exact |= {name: model[name] for name in ("rs_payload_bytes_out", "scalar_payload_bytes_out",
                                                     "ag_payload_bytes_out")
                      if not (res.as_two_phases and name == "scalar_payload_bytes_out")}
            exact |= {"retransmitted_frames": 0, "timeouts": 0, "naks_received": 0, "naks_sent": 0}
            exact |= {f"dropped_{d}": 0 for d in net_regmap.DROP_CAUSES if d != "stale_reply"}
            exact["dropped_step"] = late_frames
        for name, value in exact.items():
            assert c[name] == value, f"{t}: counter {name} {c[name]} != {value}"
        assert not card.monitor.errors, card.monitor.errors
        for m in card.handshakes:
            assert not m.errors, m.errors
    assert not ring_.tx_errors(), ring_.tx_errors()


def env_faults(seed: int) -> tuple[PortFaults, bool]:
    e = {k: float(os.environ.get(f"ONIC_{k.upper()}", "0")) for k in ("drop", "dup", "reorder", "bitflip")}
    faults = PortFaults(drop=e["drop"], duplicate=e["dup"], reorder=e["reorder"], bitflip=e["bitflip"], seed=seed)
    return faults, not any(e.values())


@cocotb.test()
async def test_ring_cards(dut: Any) -> None:
    """ONIC_STEPS ring steps of the N RTL cards of the top through the switch, bit-exact every step."""
    seed = int(os.environ.get("ONIC_SEED", "1"))
    n = int(os.environ["ONIC_CARDS"])
    adam = json.loads(Path(os.environ["ONIC_MANIFEST"]).read_text()) if os.environ.get("ONIC_MANIFEST") else None
    if adam is not None:
        wdt, pdt, opt = adam["spec"]["grad_dtype"], adam["spec"]["out_dtype"], adam["spec"]["optimizer"]
    else:
        wdt = "bf16" if int(os.environ.get("WIRE_BF16", "0")) else "fp32"
        pdt = "bf16" if int(os.environ.get("PARAM_BF16", "0")) else "fp32"
        opt = "adamw"
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    size = int(os.environ.get("ONIC_SIZE", "0")) or int(rng.choice([48, 80, 112]))
    drawn = int(rng.choice([64, 128, 192]))
    cfg = RingConfig(world=n, length=n * size - int(nrng.integers(0, 16)), wire_dtype=wdt, param_dtype=pdt,
                     payload_bytes=int(os.environ.get("ONIC_PAYLOAD", "0")) or drawn, optimizer=opt,
                     rto_clocks=int(os.environ.get("ONIC_RTO", "1000")),
                     segment=int(os.environ.get("ONIC_SEGMENT", "0")))
    params = (nrng.standard_normal(cfg.length) * 0.1).astype(np.float32)
    faults, lossless = env_faults(seed)
    buffer = int(os.environ.get("ONIC_BUFFER", "0")) or None
    ring_ = Ring(dut, cfg, params, faults=faults, buffer_bytes=buffer,
                 grad_stall=float(os.environ.get("ONIC_GRAD_STALL", "0.3")), seed=seed, adam=adam,
                 allow_deadlock=os.environ.get("ONIC_ALLOW_DEADLOCK", "0") == "1")
    refring = ReferenceRing(cfg, params)
    await ring_.reset()
    faulted = 0
    kinds = os.environ.get("ONIC_TWO_PHASE", "").split(",")
    assert all(k in ("", "clip", "noclip", "skip") for k in kinds), f"ONIC_TWO_PHASE={kinds}"
    assert not cfg.segment or all(kinds), "ONIC_SEGMENT (round-major order) needs two-phase steps (ONIC_TWO_PHASE)"
    record: list[dict[str, Any]] = []  # ONIC_CLOCKS_OUT: per step, its clocks and counters
    for s in range(int(os.environ.get("ONIC_STEPS", "2"))):
        kind = kinds[s % len(kinds)]
        grads = two_phase_gradients(nrng, n, cfg.length, wdt, kind) if kind else \
            [local_gradient(nrng, cfg.length, wdt) for _ in range(n)]
        hyper = Hyper(lr=1e-2 * (s + 1), step=s + 1, grad_scale=1.0 + s)
        step_id = 40 + s
        start: dict[str, Any] = {"two_phase": True, "max_norm": MAX_NORM} if kind else {}
        ref = refring.step(step_id, grads, hyper, **start)
        res = await ring_.step(step_id, grads, hyper, limit=int(os.environ.get("ONIC_LIMIT", "300000")), **start)
        tag = f"N={n} step {s} S={size} P={cfg.payload_bytes} {wdt}/{pdt} {faults} {kind or 'one-phase'}"
        if kind:  # the case is what it says: clipped, not clipped, skipped
            unclipped = ring.step_grad_scale(None, n, grad_scale=hyper.grad_scale)
            assert (res.scale is None) == (kind == "skip"), f"{tag}: scale {res.scale!r}"
            assert kind == "skip" or (res.scale < unclipped) == (kind == "clip"), f"{tag}: scale {res.scale!r}"
        check_step(dut, tag, ring_, res, ref, grads, refring, lossless)
        record.append({"step": step_id, "clocks": res.clocks, "counters": res.counters})
        total = ring_.switch.core.reconcile()
        faulted = sum(total.get(k, 0) for k in ("dropped_fault", "duplicated", "reordered", "bitflipped"))
        dut._log.info("%s: %d clocks; switch %s; card counters %s", tag, res.clocks,
                      {k: v for k, v in total.items() if v},
                      [{k: v for k, v in c.items() if v and not k.startswith("_")} for c in res.counters])
    resets = os.environ.get("ONIC_RESET", "")
    if resets:  # ring_cards_reset: one card reset mid-step, the ring restarted, lossless
        from ring_cards_reset import parse_points, reset_case

        assert lossless, "ONIC_RESET runs on a lossless switch (its counters are checked exactly)"
        done = int(os.environ.get("ONIC_STEPS", "2"))
        for i, (point, k) in enumerate(parse_points(resets, n)):
            hyper = Hyper(lr=1e-2 * (done + i + 1), step=done + i + 1, grad_scale=1.0)
            clocks = await reset_case(dut, ring_, refring, point, k, 100 + 10 * i, hyper, nrng, rng,
                                      int(os.environ.get("ONIC_LIMIT", "300000")))
            record.append({"step": 100 + 10 * i + 1, "clocks": clocks, "reset": f"{point}@{k}"})
    if os.environ.get("ONIC_CLOCKS_OUT"):
        Path(os.environ["ONIC_CLOCKS_OUT"]).write_text(json.dumps(record))
    assert lossless or faulted, "no fault happened: the case tests nothing beyond the lossless one"
