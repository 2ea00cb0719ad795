"""cocotb test of onic_net_ring_dp: one card's ring datapath against the packet-level reference.

For each case (N, rank r, chunk size S, payload P, segment B) a lossless ring of N `hls.net.card.Card`s (with
`ReferenceKernel`: hls.golden's update on each owner's shard; round-major order with B packets per
round, 0: hop-major) runs one step in Python. Card r's
accepted data frames are what onic_net_rx would deliver: their headers and payload beats (TKEEP
on the last, junk past it) go into s_hdr_* / s_pay_*, each flow in its order, all RS before the
AG ones (the predecessor's AG frames follow its acknowledged RS frames: the `ag_release` rule),
with random idle clocks. Card memory (cocotbext-axi RAM models with random latency, the AXI
monitor on both ports) holds rank r's local gradient, chunk c at grad_addr + c x beats(S) x 64,
the pad bytes of each chunk's last beat junk. The Adam kernel is a stand-in (no RTL here): its
gradient input m_grad_* is a sink, its parameter output s_param_* replays what card r's
reference kernel returned. Every output back-pressures at random.

Checked per case: every RS and AG descriptor equals the header card r sent (seq order, first
transmissions), every payload beat's kept bytes, TKEEP and TLAST equal its payload; m_grad_* is
the reduced chunk hls.net.ring.reduce_scatter gives (bit for bit, TLAST on the last beat only);
the gathered buffer holds every other owner's chunk at its address, bytes past each chunk and
the own chunk's place untouched; rs_done, ag_done, no error bits; the AXI monitor saw no
violation. Cases run one after another in one simulation (start restarts the datapath).

Striped buffers (ONIC_STRIPES = K, the DUT the per-stripe wrapper tests/hls/rtl/test_net_ring_dp.py
generates, ports m_axi_grad<k>_* / m_axi_gather<k>_*): hls/layout.py's rule over the WHOLE lgrad and
gather buffers (chunk c from beat c x beats(S)). One AXI RAM model per port, all on one memory, each
stripe on its own region: the host's view, lgrad written with layout.split and gather read back with
layout.join, and the beat after each gather stripe's last checked untouched.

Environment: ONIC_SEED, ONIC_CASES (see `cases`: hop-major and round-major cases), WIRE_BF16, PARAM_BF16,
ONIC_IDLE, ONIC_STALL, ONIC_STRIPES (unset: the unwrapped DUT, one stripe).
"""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
import numpy as np
from axi_monitor import AxiMonitor
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiReadBus, AxiWriteBus
from hbm_memory import LatencyAxiRamRead, LatencyAxiRamWrite
from ring_streams import Sink, Source

from hls import layout
from hls.golden import Hyper, to_bf16_bits
from hls.net import ring, wire
from hls.net.card import Card, CardConfig, ReferenceKernel

MEM_BYTES = 1 << 20
BEAT = 64
HDR_FIELDS = ["opcode", "flags", "hop", "chunk", "seq", "offset", "length"]
DESC_FIELDS = ["dtype", "flags", "hop", "chunk", "seq", "offset", "len"]
AXIS = ["tdata", "tkeep", "tlast"]


class _NotReset:
    """ap_rst_n for the AXI monitor: this DUT's reset is active high."""

    def __init__(self, rst: Any) -> None:
        self.rst = rst

    @property
    def value(self) -> int:
        try:
            return 1 - int(self.rst.value)
        except ValueError:
            return 0


def beats_of(payload: bytes, rng: random.Random) -> list[dict[str, int]]:
    """A payload as 64-byte beats: TKEEP on the last, junk past the payload, TLAST on the last."""
    out = []
    for k in range(0, len(payload), BEAT):
        part = payload[k:k + BEAT]
        keep = (1 << len(part)) - 1
        data = part + bytes(rng.randrange(256) for _ in range(BEAT - len(part)))
        out.append({"tdata": int.from_bytes(data, "little"), "tkeep": keep, "tlast": int(k + BEAT >= len(payload))})
    return out


def kept(item: dict[str, int]) -> bytes:
    n = bin(item["tkeep"]).count("1")
    return item["tdata"].to_bytes(BEAT, "little")[:n]


def canonical_nan(data: bytes, dtype: str) -> bytes:
    """`data` with every NaN element the canonical quiet NaN (design.md 5: NaN compares equal to any
    NaN; the adders emit 0x7FC00000 where numpy keeps an operand's sign, as for inf + -inf on x86)."""
    if dtype == "bf16":
        bits = np.frombuffer(data, np.uint16).copy()
        bits[((bits & 0x7F80) == 0x7F80) & ((bits & 0x7F) != 0)] = 0x7FC0
    else:
        bits = np.frombuffer(data, np.uint32).copy()
        bits[((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x7FFFFF) != 0)] = 0x7FC00000
    return bits.tobytes()


def local_gradient(rng: np.random.Generator, length: int, dtype: str) -> np.ndarray:
    x = (rng.standard_normal(length) * np.exp2(rng.integers(-20, 20, length))).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3.4e38], np.float32)
    pick = rng.random(length) < 0.05
    x[pick] = rng.choice(specials, int(pick.sum()))
    return to_bf16_bits(x) if dtype == "bf16" else x


def reference_step(n: int, r: int, size: int, payload: int, wdt: str, pdt: str,
                   rng: np.random.Generator, segment: int = 0) -> dict[str, Any]:
    """A lossless ring of N reference cards; what card r receives, sends, reduces and gathers."""
    length = n * size - int(rng.integers(0, 16))  # zero padding in the last chunk
    assert ring.chunk_elems(length, n) == size
    eps = tuple(wire.Endpoint(mac=bytes([2, 0, 0, 0, 0, k]), ip=f"10.0.0.{k + 1}", port=4000 + k)
                for k in range(n))
    params = (rng.standard_normal(length) * 0.1).astype(np.float32)
    grads = [local_gradient(rng, length, wdt) for _ in range(n)]
    reduced_in: dict[int, np.ndarray] = {}
    out_of: dict[int, np.ndarray] = {}
    cards = []
    for k in range(n):
        kernel = ReferenceKernel(ring.Shard.from_params(params, k, n), Hyper(), wire_dtype=wdt, param_dtype=pdt)

        def update(chunk: np.ndarray, scale: float | None, kernel: ReferenceKernel = kernel, k: int = k) -> np.ndarray:
            reduced_in[k] = chunk.copy()
            out_of[k] = kernel(chunk, scale)
            return out_of[k]

        cfg = CardConfig(rank=k, world=n, length=length, endpoints=eps, wire_dtype=wdt, param_dtype=pdt,
                         payload_bytes=payload, window=1 << 16, slots=1 << 16, rto=1e9, segment=segment)
        cards.append(Card(cfg, update))
    for k, card in enumerate(cards):
        card.start_step(5, grads[k])
    by_mac = {e.mac: k for k, e in enumerate(eps)}
    received: list[wire.Frame] = []
    sent: dict[tuple[int, int], wire.Frame] = {}
    now = 0.0
    while not all(c.done for c in cards):
        now += 1.0
        for k, card in enumerate(cards):
            for frame in card.poll(now):
                dst = by_mac[frame[:6]]
                parsed = wire.parse_frame(frame, with_fcs=True)
                assert not isinstance(parsed, wire.Drop)
                if k == r and parsed.header.opcode in (wire.Opcode.RS, wire.Opcode.AG):
                    sent.setdefault((int(parsed.header.opcode), parsed.header.seq), parsed)
                if dst == r and parsed.header.opcode in (wire.Opcode.RS, wire.Opcode.AG):
                    received.append(parsed)
                cards[dst].receive(frame, now)
        assert now < 1e5, "the reference ring did not finish"
    for c in cards:
        assert c.error is None
    want_reduced = ring.reduce_scatter(grads, wdt)[r]
    assert reduced_in[r].tobytes() == want_reduced.tobytes()
    gathered = ring.pad(cards[r].gathered, n)
    return {"grad": ring.pad(grads[r], n), "received": received, "sent": sent, "reduced": want_reduced,
            "own_out": out_of[r], "gathered": gathered, "length": length}


def chunk_beats(size: int, dtype: str) -> int:
    return -(-size * wire.ELEMENT_BYTES[dtype] // BEAT)


class TB:
    def __init__(self, dut: Any, rng: random.Random, idle: float, stall: float, stripes: int | None) -> None:
        self.dut, self.rng = dut, rng
        self.hdr = Source(dut, "s_hdr_", HDR_FIELDS, rng, idle)
        self.pay = Source(dut, "s_pay_", AXIS, rng, idle, valid="tvalid", ready="tready")
        self.param = Source(dut, "s_param_", AXIS, rng, idle, valid="tvalid", ready="tready")
        self.sinks = {
            "rs_desc": Sink(dut, "m_rs_desc_", DESC_FIELDS, rng, stall),
            "rs_axis": Sink(dut, "m_rs_axis_", AXIS, rng, stall, valid="tvalid", ready="tready"),
            "ag_desc": Sink(dut, "m_ag_desc_", DESC_FIELDS, rng, stall),
            "ag_axis": Sink(dut, "m_ag_axis_", AXIS, rng, stall, valid="tvalid", ready="tready"),
            "grad": Sink(dut, "m_grad_", AXIS, rng, stall, valid="tvalid", ready="tready"),
        }
        # stripes: None is the unwrapped DUT (ports m_axi_grad_* / m_axi_gather_*, one stripe)
        self.stripes = stripes or 1
        suffix = [""] if stripes is None else [str(k) for k in range(stripes)]
        self.rds, self.wrs = [], []
        mem = None
        for k in suffix:
            rd = LatencyAxiRamRead(AxiReadBus.from_prefix(dut, f"m_axi_grad{k}"), dut.clk, dut.rst, size=MEM_BYTES,
                                   mem=mem, latency=(5, 40), rng=random.Random(rng.random()), max_outstanding=8)
            mem = rd.mem
            wr = LatencyAxiRamWrite(AxiWriteBus.from_prefix(dut, f"m_axi_gather{k}"), dut.clk, dut.rst,
                                    size=MEM_BYTES, mem=mem, latency=(2, 30), rng=random.Random(rng.random()))
            # memory back-pressure: AR and AW refused, R beats late, W refused, at random
            for channel in (rd.ar_channel, rd.r_channel, wr.aw_channel, wr.w_channel):
                channel.set_pause_generator(self._pauses(0.2))
            self.rds.append(rd)
            self.wrs.append(wr)
        self.rd = self.rds[0]
        self.monitor = AxiMonitor(dut, [f"{a}{k}" for a in ("grad", "gather") for k in suffix], dut.clk,
                                  _NotReset(dut.rst))

    def _pauses(self, p: float):  # noqa: ANN202 - a generator for cocotbext-axi
        rng = random.Random(self.rng.random())
        while True:
            yield rng.random() < p


def flow_rounds(size: int, payload: int, dtype: str, segment: int) -> dict[str, int]:
    """What the network kernel top derives for a flow: packets per hop P, B (P when 0 or >= P), B in beats
    and elements."""
    packets = -(-size * wire.ELEMENT_BYTES[dtype] // payload)
    seg = segment if 0 < segment < packets else packets
    beats = seg * (payload // BEAT)
    return {"packets": packets, "seg": seg, "seg_beats": beats, "seg_elems": beats * BEAT // wire.ELEMENT_BYTES[dtype]}


async def run_case(tb: TB, n: int, r: int, size: int, payload: int, wdt: str, pdt: str, seed: int,
                   segment: int = 0) -> None:
    dut, rng = tb.dut, tb.rng
    ref = reference_step(n, r, size, payload, wdt, pdt, np.random.default_rng(seed), segment)
    wb, pb = chunk_beats(size, wdt), chunk_beats(size, pdt)
    kk = tb.stripes
    # stripe k of each buffer on its own 32 KiB region (bursts cross a 4 KiB page); 8 stripes at most
    grad_addrs = [0x20000 + k * 0x8000 - BEAT * rng.randrange(0, 40) for k in range(kk)]
    gather_addrs = [0x80000 + k * 0x8000 + BEAT * rng.randrange(0, 40) for k in range(kk)]
    # card memory: the local gradient, each chunk from a beat, junk in the pad bytes, split over the stripes
    wbytes = wire.ELEMENT_BYTES[wdt]
    whole = bytearray()
    for c in range(n):
        region = bytearray(rng.randrange(256) for _ in range(wb * BEAT))
        data = ref["grad"][c * size:(c + 1) * size].tobytes()
        region[:len(data)] = data
        whole += region
    for addr, part in zip(grad_addrs, layout.split(np.frombuffer(bytes(whole), np.uint8), kk), strict=True):
        tb.rd.write(addr, part.tobytes())
    fill = bytes([0xA5]) * ((n * pb + 1) * BEAT)
    for k, addr in enumerate(gather_addrs):  # each stripe and the beat after it
        tb.rd.write(addr, fill[:(layout.stripe_beats(n * pb, kk, k) + 1) * BEAT])

    dut.cfg_rank.value = r
    dut.cfg_world.value = n
    dut.cfg_chunk_elems.value = size
    dut.cfg_pkt_beats.value = payload // BEAT
    dut.cfg_grad_addr.value = sum(a << (64 * k) for k, a in enumerate(grad_addrs))
    dut.cfg_gather_addr.value = sum(a << (64 * k) for k, a in enumerate(gather_addrs))
    for flow, dtype in (("rs", wdt), ("ag", pdt)):
        for key, value in flow_rounds(size, payload, dtype, segment).items():
            getattr(dut, f"cfg_{flow}_{key}").value = value
    dut.ag_release.value = 0
    await RisingEdge(dut.clk)
    for s in tb.sinks.values():
        s.items.clear()
    dut.start.value = 1
    await RisingEdge(dut.clk)
    dut.start.value = 0

    rs = [f for f in ref["received"] if f.header.opcode is wire.Opcode.RS]
    ag = [f for f in ref["received"] if f.header.opcode is wire.Opcode.AG]
    hdrs, pays = [], []
    for f in rs + ag:
        h = f.header
        hdrs.append({"opcode": int(h.opcode), "flags": h.flags, "hop": h.hop, "chunk": h.chunk, "seq": h.seq,
                     "offset": h.offset, "length": h.length})
        pays += beats_of(f.payload, rng)
    param_beats = beats_of(ref["own_out"].tobytes(), rng)
    for k, beat in enumerate(param_beats):
        beat["tkeep"] = (1 << 64) - 1
        beat["tlast"] = int(k == len(param_beats) - 1)
    t_hdr, t_pay, t_param = tb.hdr.start(hdrs), tb.pay.start(pays), tb.param.start(param_beats)

    sent = ref["sent"]
    want = {op: [sent[key] for key in sorted(sent) if key[0] == op] for op in (1, 2)}
    want_beats = {op: sum(-(-f.header.length // BEAT) for f in want[op]) for op in (1, 2)}

    async def release() -> None:
        while (len(tb.sinks["rs_desc"].items) < len(want[1])
               or len(tb.sinks["rs_axis"].items) < want_beats[1]):
            await RisingEdge(dut.clk)
        await ClockCycles(dut.clk, rng.randrange(1, 60))
        dut.ag_release.value = 1

    cocotb.start_soon(release())
    limit = 40 * (len(pays) + len(param_beats) + (n + 2) * (wb + pb)) + 4000
    finished = False
    for _ in range(limit):
        await RisingEdge(dut.clk)
        finished = bool(int(dut.rs_done.value) and int(dut.ag_done.value)
                        and len(tb.sinks["rs_desc"].items) >= len(want[1])
                        and len(tb.sinks["ag_desc"].items) >= len(want[2])
                        and len(tb.sinks["ag_axis"].items) >= want_beats[2])
        if finished:
            break
    await ClockCycles(dut.clk, 20)
    tag = f"N={n} r={r} S={size} P={payload} B={segment} {wdt}/{pdt} K={kk}"
    assert finished, f"{tag}: not done in {limit} clocks (rs_done {dut.rs_done.value}, ag_done " \
                            f"{dut.ag_done.value}, sinks {[len(s.items) for s in tb.sinks.values()]}, " \
                            f"sent hdr {tb.hdr.sent}/{len(hdrs)} pay {tb.pay.sent}/{len(pays)})"
    await t_hdr
    await t_pay
    await t_param
    assert int(dut.errors.value) == 0, f"{tag}: errors {int(dut.errors.value):#x}"
    for s in tb.sinks.values():
        assert not s.errors, s.errors

    # descriptors and payload per flow, in sequence order
    for op, name in ((1, "rs"), (2, "ag")):
        descs, beats = tb.sinks[f"{name}_desc"].items, tb.sinks[f"{name}_axis"].items
        assert len(descs) == len(want[op]), f"{tag} {name}: {len(descs)} descriptors, expected {len(want[op])}"
        assert len(beats) == want_beats[op], f"{tag} {name}: {len(beats)} beats, expected {want_beats[op]}"
        k = 0
        for d, f in zip(descs, want[op], strict=True):
            h = f.header
            exp = {"dtype": wire.DTYPE_CODE[h.dtype], "flags": h.flags, "hop": h.hop, "chunk": h.chunk,
                   "seq": h.seq, "offset": h.offset, "len": h.length}
            assert d == exp, f"{tag} {name} seq {h.seq}: descriptor {d} != {exp}"
            nb = -(-h.length // BEAT)
            pkt = beats[k:k + nb]
            k += nb
            got = b"".join(kept(b) for b in pkt)
            if len(got) == len(f.payload) and op == 1:  # partial sums: NaN as any NaN
                got, f_payload = canonical_nan(got, wdt), canonical_nan(f.payload, wdt)
            else:
                f_payload = f.payload
            if got != f_payload:
                diff = next(i for i in range(len(got)) if got[i] != f_payload[i]) if len(got) == len(f.payload) \
                    else -1
                raise AssertionError(f"{tag} {name} seq {h.seq} (hop {h.hop}, chunk {h.chunk}): payload differs "
                                     f"from byte {diff} ({len(got)} of {len(f.payload)} bytes)")
            assert [b["tlast"] for b in pkt] == [0] * (nb - 1) + [1], f"{tag} {name} seq {h.seq}: TLAST"

    # the Adam kernel's gradient stream
    g = tb.sinks["grad"].items
    assert len(g) == wb, f"{tag}: {len(g)} gradient beats, expected {wb}"
    got_red = canonical_nan(b"".join(kept(b) for b in g), wdt)
    want_red = canonical_nan(ref["reduced"].tobytes(), wdt)
    if got_red != want_red:
        bad = [k for k in range(wb) if got_red[k * BEAT:(k + 1) * BEAT] != want_red[k * BEAT:(k + 1) * BEAT]]
        first = next(i for i in range(len(want_red)) if got_red[i] != want_red[i]) // wbytes
        raise AssertionError(f"{tag}: reduced chunk differs in beats {bad} of {wb}; element {first}: "
                             f"{got_red[first * wbytes:(first + 1) * wbytes].hex()} != "
                             f"{want_red[first * wbytes:(first + 1) * wbytes].hex()}")
    assert [b["tlast"] for b in g] == [0] * (wb - 1) + [1], f"{tag}: gradient TLAST"

    # gathered chunks in card memory
    pbytes = size * wire.ELEMENT_BYTES[pdt]
    parts = [np.frombuffer(tb.rd.read(a, layout.stripe_beats(n * pb, kk, k) * BEAT), np.uint8)
             for k, a in enumerate(gather_addrs)]
    gathered = layout.join(parts, n * pb * BEAT, np.uint8).tobytes()
    for k, a in enumerate(gather_addrs):
        after = tb.rd.read(a + layout.stripe_beats(n * pb, kk, k) * BEAT, BEAT)
        assert after == fill[:BEAT], f"{tag}: the beat after gather stripe {k} was written"
    for c in range(n):
        region = gathered[c * pb * BEAT:(c + 1) * pb * BEAT]
        if c == r:
            assert region == fill[:pb * BEAT], f"{tag}: the own chunk's place was written"
            continue
        want_chunk = ref["gathered"][c * size:(c + 1) * size].tobytes()
        assert region[:pbytes] == want_chunk, f"{tag}: gathered chunk {c} differs"
        assert region[pbytes:] == fill[:pb * BEAT - pbytes], f"{tag}: bytes past chunk {c} written"
    assert not tb.monitor.errors, tb.monitor.errors
    tb.monitor.check_idle()
    assert not tb.monitor.errors, tb.monitor.errors
    dut._log.info("%s: %d RS + %d AG packets sent, %d gradient beats, memory ok", tag, len(want[1]), len(want[2]),
                  wb)
    assert wbytes in (2, 4)


def cases(spec: str, rng: random.Random) -> list[tuple[int, int, int, int, int]]:
    """Comma-separated: "N:r:S:P[:B]" one case, "all:N1/N2/..." every rank of each N (S, P drawn; B 0),
    "rounds:N1/N2/..." every rank of each N in round-major order (S, P, B drawn: more than one round)."""
    out: list[tuple[int, int, int, int, int]] = []
    for part in spec.split(","):
        if part.startswith("all:"):
            for n in map(int, part[4:].split("/")):
                out += [(n, r, rng.choice([48, 80, 112]), rng.choice([64, 128, 192]), 0) for r in range(n)]
        elif part.startswith("rounds:"):
            for n in map(int, part[7:].split("/")):
                out += [(n, r, rng.choice([80, 112, 208]), rng.choice([64, 128]), rng.choice([1, 2, 3]))
                        for r in range(n)]
        else:
            n, r, size, payload, *seg = map(int, part.split(":"))
            out.append((n, r, size, payload, seg[0] if seg else 0))
    return out


@cocotb.test()
async def test_ring_dp(dut: Any) -> None:
    seed = int(os.environ.get("ONIC_SEED", "1"))
    rng = random.Random(seed)
    wdt = "bf16" if int(os.environ.get("WIRE_BF16", "0")) else "fp32"
    pdt = "bf16" if int(os.environ.get("PARAM_BF16", "0")) else "fp32"
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    dut.rst.value = 1
    dut.start.value = 0
    dut.ag_release.value = 0
    stripes = int(os.environ["ONIC_STRIPES"]) if os.environ.get("ONIC_STRIPES") else None
    tb = TB(dut, rng, float(os.environ.get("ONIC_IDLE", "0.3")), float(os.environ.get("ONIC_STALL", "0.3")), stripes)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    for k, (n, r, size, payload, segment) in enumerate(cases(os.environ.get("ONIC_CASES", "all:2/3/4"), rng)):
        await run_case(tb, n, r, size, payload, wdt, pdt, seed * 1000 + k, segment)
