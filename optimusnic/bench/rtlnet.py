"""`optimusnic bench rtlnet`: the card's network RTL (`onic_net_kernel`) at line rate, in cocotb on Verilator.

Every figure comes from ring steps of ONE RTL card (rank `RANK`) beside N - 1 software peers
(`sim/tb/models/soft_peer.py`: `hls.net.card.Card`, the same bytes) through the seeded switch of
`sim/tb/models/eth_switch.py` (100 Gb/s links, 500 ns latency), the card's MAC streams on the
`eth_port` adapters (the transmit side serialized at 100 Gb/s, the receive side delivering each
frame's beats back to back, no TREADY), the kernel clock at 300 MHz (3334 ps: 299.94 MHz), 512
bits a beat. The cocotb bench is `sim/tb/net/bench_onic_net_kernel.py`: one simulation per step,
each checked bit for bit (the reduced chunk, the gathered buffer in card memory, every peer's
gathered parameters) against a lossless reference ring; a mismatch makes the report say so and
the command exit 1. Two kinds of card:
- the card (`onic_card`, hls.rtl.card: the network kernel and the generated Adam RTL kernel in one
  top, `card_spec()`: fp32 AdamW, 16 lanes, one stripe per array; 16 elements a clock keep up with
  the line's 10.4 fp32 a clock at 299.94 MHz) in `sim/tb/net/bench_onic_card.py`: step times,
  forwarding latency, update turnaround and the line-rate fraction at every payload, p, m, v,
  the out buffer and the gathered parameters bit-exact against `hls.net.ring.ring_step`;
- the network kernel alone with a reference STAND-IN for the Adam kernel on its streams
  (test_onic_net_kernel's `reference_adam_streams`, no kernel latency), rows marked stand-in: the
  line-rate fractions at every payload, goodput under loss, and the step times and latencies
  again (the difference is what the Adam kernel adds).
One command re-measures every figure and rewrites its section of bench/results.md:
`optimusnic bench rtlnet --repeats 3` (part of `make bench`).

Figures (simulated time; only the simulation speed depends on the machine):
- line-rate fraction per port at payload 1408 and 8192 bytes (N = 4, fp32): the RTL card's
  transmit line, rebuilt from the clock of each frame's last beat at m_axis_mac0 with the
  adapter's rule (a frame starts when its last beat is in and the line is free): payload bytes of
  the RS (AG) data frames, first transmissions, over the line time from the first RS (AG) frame's
  start to the last one's end, against the framing cap P / (P + 88); ACK frames on the same
  line are inside those spans. The receive side alike, from each frame's arrival on the line,
  with the card's `dropped_overflow` (a frame refused for lack of buffer).
- step time for N = 2, 3, 4 (payload 1408, fp32): the host's ap_start write (to the network
  kernel) to the last card done (the RTL card's interrupt, both interrupts for `onic_card`, each
  peer's `done`), against the wire model `wire_model_s`.
- per-hop latency: the first beat of an RS partial at s_axis_mac0 to the first beat of the
  partial the card forwards (hop + 1, same chunk and offset) at m_axis_mac0; the AG forwarding
  alike; with the card's line idle (N = 4 steps of one-packet chunks) and while streaming (the
  line-rate steps: mostly queueing behind the card's own frames); update turnaround: the last
  beat of the card's own chunk's last RS packet in to the first beat of its first AG frame out
  (the Adam kernel's latency, and the AG release after the RS flow is acknowledged).
- goodput and retransmitted bytes at drop rates 0, 1e-3, 1e-2 (the switch's seeded drops on
  every egress link; N = 3): the RTL card's first-time payload bytes over the step time, and its
  retransmitted payload bytes (counter `retransmitted_bytes`), the peers' retransmitted frame bytes.
- simulation speed: kernel clocks simulated per wall second for each N (the whole bench: RTL,
  switch, peers, monitors).
- with the card (`card-drops`): goodput and retransmitted bytes at the same drop rates, as the
  stand-in's.
- the card bandwidth-true (`card-hbm`): the card rows again (step times, latencies, line-rate fractions)
  with `hbm_card_spec()` (the Adam kernel at the stripes sizing plans: 3 per state array and 1 out for
  fp32 on a U55C) and the network kernel's lgrad and gather in the rail plan's stripes (4), every
  m_axi port on the HBM channel the rail sizing gives it (`hls.rtl.card.card_memory_plan`), each
  channel limited to its usable bandwidth less the host DMA's steady share on the ring buffers'
  channels (the goodput over the stripes), 100..250 ns a burst (sim/tb/models/hbm_memory.py); and
  per kind of channel its use over the step and the clocks it paused for lack of budget. The `card`
  rows are on ideal memory (5..40 clocks, no bandwidth limit).
- N RTL cards (`ring`): every card of the ring an onic_card (the bench card: `card_spec()`,
  BENCH_PARAMS) in one Verilator build of RING_CARDS cards (hls.rtl.ring_top), each MAC port on
  cocotbext-eth's MAC model through the same switch (sim/tb/net/bench_onic_ring_cards.py, the
  engine of test_onic_ring_cards): step time for N = 2, 3, 4 against the wire model and the
  simulation speed; chunks under the deadlock bound of the buffers (`ag_packets_bound`: packets
  per flow, RS and AG; a case at or over it is refused before anything runs, `check_ring_case`).
- bf16 (`bf16`): the stand-in with a bf16 wire and bf16 parameters: the line-rate fraction at the
  step payload and the step times.
- round-major order on N RTL cards (`rounds`, design.md 8.2): the ring build above, N = 3, one
  step (seed 1: a lossless step's clocks barely depend on the values) per chunk and order: a chunk
  within the one-phase bound (`ring_bound.one_phase_fits`: RS packets <= receive slots) in
  hop-major order one-phase and two-phase, and in round-major order; a chunk over it but under
  the hop-major bound, hop-major two-phase and round-major; a chunk over the hop-major bound,
  round-major only (segments ROUND_SEGMENTS; more than one round runs only as a two-phase step).
  Figures: the step and its phase one (the reduce-scatter, the owner's sum to card memory and the
  scalar exchange: the network alone; phase two is the owner's update, paced by the 2-lane Adam
  kernel, and the all-gather) against the wire model's reduce-scatter.
`--parts` measures some of these; the others are kept from bench/results.json (`merge`), and the
report says per part at which commit it was measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hls.errors import OptimusError
from hls.net import ring_bound, wire
from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import simulators
from hls.rtl_sources import read_filelist
from hls.spec import KernelSpec

LINE_RATE = 100e9
LATENCY_S = 500e-9
RTO_S = 20e-6
RANK = 1
WINDOW = 32  # packets per flow: the RTL card's receive slots and retransmit slots (below), the peers' too
PAYLOADS = (1408, 8192)
WORLDS = (2, 3, 4)
DROP_RATES = (0.0, 1e-3, 1e-2)
DROP_WORLD = 3
LINE_WORLD = 4
PACKETS_PER_CHUNK = 32  # per hop: long enough that filling the ring pipeline is a small part of a phase
STEP_PACKETS_PER_CHUNK = 16
GOAL_OF_CAP = 0.98  # the line-rate fraction within 2 % of the framing cap
# The card's buffers for payloads up to 8192 bytes (128 beats) and a window of 32 packets per flow:
# 32 receive slots of up to 128 payload beats in a RAM of 16,384 beats ((2 x 32 + 1) x 128 needed:
# onic_net_kernel.v's rule, two flows' credits), 32 retransmit slots of 256 beats per flow.
BENCH_PARAMS = {"RX_PAYLOAD_DEPTH_LOG2": 14, "RX_SLOT_LOG2": 5, "RX_FRAME_BEATS": 128, "TX_SLOTS_LOG2": 5,
                "TX_BEATS_LOG2": 8, "TX_URAM": 0, "TX_FIFO_LOG2": 9, "RD_FIFO_LOG2": 8, "WR_FIFO_LOG2": 7,
                "MAX_BURST": 64}
# The bench card's Adam kernel: 16 fp32 lanes take 16 elements a clock, above the line's 10.4 (100 Gb/s at
# 299.94 MHz is 41.7 bytes a clock): the kernel keeps up with the reduce-scatter's last hop.
CARD_LANES = 16
OPCODES = {1: "rs", 2: "ag", 3: "ack", 4: "nak"}
# What one run measures (`--parts`); a run of some parts keeps the others' figures from bench/results.json.
PARTS = ("card", "stand-in", "card-drops", "card-hbm", "ring", "bf16", "rounds")
# N RTL cards in one Verilator build (hls.rtl.ring_top): one top of RING_CARDS onic_cards serves the rings of
# 2 .. RING_CARDS (the others stay idle), each card the bench card (BENCH_PARAMS, `card_spec()`).
RING_CARDS = 4
# Their Adam kernels: 2 lanes, the CI ring's (hls.rtl.ring_top.card_spec): a build of four 16-lane cards is
# over two hours of C++ on the shared 2-core machine. 2 elements a clock against the line's 10.4: the owner's
# update, fed by the last RS hop, runs at the kernel's pace (the ring's credits hold the chunk back).
RING_LANES = 2
# Round-major order (`rounds`): N = ROUNDS_WORLD, chunks of ROUNDS_PACKETS packets per flow: within the one-phase
# bound of BENCH_PARAMS (32 receive slots), under the hop-major bound (64), over it; segments of ROUND_SEGMENTS
# packets (31: the largest under the bound, `ring_bound.segment_for`; 8: four times the rounds).
ROUNDS_WORLD = 3
ROUNDS_PACKETS = (24, 48, 128)
ROUND_SEGMENTS = (31, 8)
BF16_BUILD = "onic_net_kernel-bench-bf16-verilator"
Log = Callable[[str], None] | None


class BenchFailed(OptimusError, RuntimeError):
    """The simulation itself failed (not a figure: a build error, a hang, an exception in the bench): one
    clear line from the `optimusnic` command, not an internal error."""


def _log(log: Log, text: str) -> None:
    if log is not None:
        log(text)


def chunk_size(payload: int, packets: int, dtype: str = "fp32") -> int:
    """Elements per chunk S (a multiple of 16) giving `packets` full packets of `payload` bytes."""
    return payload * packets // wire.ELEMENT_BYTES[dtype] // 16 * 16


def wire_model_s(n: int, size: int, payload: int, wire_dtype: str = "fp32", param_dtype: str = "fp32",
                 line_rate: float = LINE_RATE, latency_s: float = LATENCY_S) -> dict[str, float]:
    """The ring step on ideal cards: every link busy from the step's start, the cards adding no time.

    Each phase moves N - 1 chunks over every link back to back (a chunk's frames at `line_rate`,
    88 bytes of framing each), and ends when the last frame has crossed the switch: its latency and
    its serialization again on the egress link. The all-gather starts when the reduce-scatter
    ends (the owner's update needs its whole chunk). ACK frames and the cards' own latencies are
    what the measured step adds.
    """
    def phase(dtype: str) -> float:
        nbytes = size * wire.ELEMENT_BYTES[dtype]
        packets = math.ceil(nbytes / payload)
        chunk = (nbytes + packets * wire.WIRE_OVERHEAD_BYTES) * 8 / line_rate
        last = (min(payload, nbytes) + wire.WIRE_OVERHEAD_BYTES) * 8 / line_rate
        return (n - 1) * chunk + latency_s + last

    rs, ag = phase(wire_dtype), phase(param_dtype)
    return {"rs_s": rs, "ag_s": ag, "step_s": rs + ag}


def rto_for(payload: int, window: int = WINDOW) -> float:
    """The retransmission timeout of a case: RTO_S, or three windows of full frames at the line rate if
    longer. The software peers start a frame's timer when they queue it for their line, so a window of
    32 jumbo frames (21 us at 100 Gb/s) outlasts a 20 us timeout before its first ACK can return: every
    window was resent once (go-back-N) in a lossless 8192-byte step."""
    return max(RTO_S, 3 * window * (payload + wire.WIRE_OVERHEAD_BYTES) * 8 / LINE_RATE)


def framing_cap(payload: int) -> float:
    return payload / (payload + wire.WIRE_OVERHEAD_BYTES)


# ---- running one simulated step -------------------------------------------------------------------------
def build_dir(params: dict[str, int] | None = None, name: str | None = None) -> Path:
    """The Verilator model's folder: `name` shares another bench's model built with the same parameters."""
    if name is None:
        name = "onic_net_kernel-bench-verilator" if (params or BENCH_PARAMS) == BENCH_PARAMS else \
            "onic_net_kernel-custom-verilator"
    return BUILD_DIR / "sim" / "net" / name


def card_spec(lanes: int = CARD_LANES) -> KernelSpec:
    """The Adam kernel of the bench's card: fp32 AdamW, one stripe per array, `lanes` elements a clock."""
    return KernelSpec(optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="stream", lanes=lanes,
                      stripes=1, out_sink="memory+stream", name=f"onic_card_bench{lanes}")


def hbm_card_spec(lanes: int = CARD_LANES) -> KernelSpec:
    """The card of the HBM rows: `card_spec`'s Adam kernel at the stripes sizing plans for it (fp32 on a U55C:
    3 per state array, 1 out), so that each array's traffic fits its channels."""
    return dataclasses.replace(card_spec(lanes), stripes=None, name=f"onic_card_hbm{lanes}")


def planned_net_stripes(card: KernelSpec, payloads: tuple[int, ...]) -> int:
    """The network kernel's lgrad and gather stripes the rail sizing plans for `card` at these payloads: one
    card build serves them all, so they must agree."""
    from hls.errors import UserError
    from hls.sizing import size_rail
    from hls.targets import get_target

    counts = {}
    for payload in payloads:
        network = size_rail(card, get_target(card.target), payload).network
        counts[payload] = network.streams[0].stripes if network else 0
    if len(set(counts.values())) != 1:
        raise UserError(f"bench rtlnet: the rail plan stripes lgrad and gather differently at payloads {counts}: "
                        "one card build cannot serve them; measure them in separate runs")
    return next(iter(counts.values()))


def simulate(case: dict[str, Any], params: dict[str, int] | None = None, build: str | None = None,
             card: KernelSpec | None = None, net_stripes: int = 1) -> dict[str, Any]:
    """One ring step of `case` in cocotb; its raw record. Without `card`: the network kernel alone with the
    stand-in Adam kernel (sim/tb/net/bench_onic_net_kernel.py); with `card`: the card top `onic_card` with
    that Adam RTL kernel (sim/tb/net/bench_onic_card.py), its network kernel's buffers in `net_stripes`."""
    if not simulators.available("verilator"):
        from hls.errors import ToolMissing

        raise ToolMissing("bench rtlnet: verilator is not installed (make deps)")
    params = dict(params or BENCH_PARAMS)
    bdir = build_dir(params, build)
    extra: dict[str, str] = {}
    if card is not None:
        from hls.rtl.card import CARD_MODULE, prepare_card

        # tests/hls/rtl/test_card_rtl.py's layout: `build` shares its model (same spec and parameters)
        folder = bdir.parent / (build or f"onic_card-bench-{card.name}" + (f"-s{net_stripes}" if net_stripes > 1
                                                                             else ""))
        project = prepare_card(card, folder / "card", net_stripes=net_stripes)
        bdir = folder / "verilator"
        sources, top, module, test = project.sources, CARD_MODULE, "bench_onic_card", "bench_card"
        extra["ONIC_MANIFEST"] = str(project.project / "manifest.json")
        extra["ONIC_NET_STRIPES"] = str(net_stripes)
        build_args = ["--no-public-flat-rw", "--public-depth", "1"]  # as tests/hls/rtl/test_card_rtl.py
        parameters: dict[str, int] = dict(params)
    else:
        sources, top, module, test = (read_filelist(RTL_DIR / "net" / "net_kernel.f"), "onic_net_kernel",
                                      "bench_onic_net_kernel", "bench_ring")
        build_args = []
        parameters = {"WIRE_BF16": int(case.get("wire_dtype") == "bf16"),
                      "PARAM_BF16": int(case.get("param_dtype") == "bf16"), **params}
    bdir.mkdir(parents=True, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix="rtlnet-", suffix=".json", dir=bdir)
    os.close(fd)
    tag = f"n{case['n']}-p{case['payload']}-s{case['size']}-d{case.get('drop', 0)}-seed{case.get('seed', 1)}"
    log_file = bdir.parent / f"{top}-bench-{tag}.log"
    return _run_bench(tag, out, log_file, sources=sources, toplevel=top, test_module=module,
                      build_dir=bdir, parameters=parameters, build_args=build_args,
                      extra_env={"ONIC_BENCH": json.dumps(case), "ONIC_BENCH_OUT": out, **extra}, testcase=test)


def _run_bench(what: str, out: str, log_file: Path, **run: Any) -> dict[str, Any]:
    """One cocotb bench run on Verilator (`run`: simulators.run_cocotb's arguments), its JSON record
    read from `out` (then removed), with the wall time and the log's path."""
    try:
        t0 = time.perf_counter()
        xml = simulators.run_cocotb(test_dir=TB_DIR / "net", simulator="verilator", log_file=log_file, **run)
        run_s = time.perf_counter() - t0
        ran, failed = simulators.check_results(xml)
        text = Path(out).read_text()
        if ran != 1 or failed or not text:
            raise BenchFailed(f"bench rtlnet: the simulation of {what} failed; see {log_file}")
        raw = json.loads(text)
    finally:
        Path(out).unlink(missing_ok=True)
    raw["run_s"] = run_s
    raw["log"] = str(log_file)
    return raw


# ---- figures from one step's record ---------------------------------------------------------------------
def _line(log: list[list[int]], line_rate: float = LINE_RATE) -> list[tuple[float, float]]:
    """(start, end) in ps of each frame on a line, given each frame's ready time: the adapters' rule."""
    out, free = [], 0.0
    for ready, nbytes in log:
        start = max(float(ready), free)
        free = start + (nbytes + 20) * 8e12 / line_rate
        out.append((start, free))
    return out


def _arrivals(log: list[list[int]], line_rate: float = LINE_RATE) -> list[tuple[float, float]]:
    """(start, end) in ps of each frame on the receive line from its last bit's arrival."""
    return [(t - (b + 8) * 8e12 / line_rate, t - (b + 8) * 8e12 / line_rate + (b + 20) * 8e12 / line_rate)
            for t, b in log]


def _fraction(frames: list[list[int]], spans: list[tuple[float, float]], opcode: int,
              line_rate: float = LINE_RATE) -> dict[str, Any] | None:
    """Payload bytes of the `opcode` data frames (first transmissions) over their span on the line."""
    picked = [(f, s) for f, s in zip(frames, spans, strict=True) if f[1] == opcode]
    if not picked:
        return None
    first = min(s[0] for _, s in picked)
    last = max(s[1] for _, s in picked)
    seen, payload = set(), 0
    for f, _ in picked:
        if f[5] not in seen:
            seen.add(f[5])
            payload += f[7]
    acks = sum(s[1] - s[0] for f, s in zip(frames, spans, strict=True) if f[1] in (3, 4) and first <= s[0] < last)
    span = last - first
    return {"payload_bytes": payload, "span_ps": span, "fraction": payload * 8e12 / line_rate / span,
            "ack_ps": acks, "ack_share": acks / span, "frames": len(picked), "unique": len(seen)}


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def figures(raw: dict[str, Any]) -> dict[str, Any]:
    """The figures of one simulated step (see the module docstring)."""
    case = raw["case"]
    n, r, payload, size = case["n"], case["rank"], case["payload"], case["size"]
    wdt, pdt = case.get("wire_dtype", "fp32"), case.get("param_dtype", "fp32")
    clock_s = raw["clock_ps"] * 1e-12
    ends = [raw["rtl_done_cycle"], *raw["peer_done_cycle"].values()]
    step_clocks = max(ends) - raw["start_cycle"]
    fin, fout = raw["frames_in"], raw["frames_out"]  # [clock, opcode, flags, hop, chunk, seq, offset, length]
    tx = _line(raw["tx_line"])
    rx = _arrivals(raw["rx_line"])
    if len(tx) != len(fout) or len(rx) != len(fin):
        raise BenchFailed(f"bench rtlnet: {len(fout)} frames out but {len(tx)} on the line, "
                          f"{len(fin)} in but {len(rx)} off the line ({raw['log']})")
    line = {f"tx_{k}": _fraction(fout, tx, op) for op, k in ((1, "rs"), (2, "ag"))}
    line |= {f"rx_{k}": _fraction(fin, rx, op) for op, k in ((1, "rs"), (2, "ag"))}
    both = [line["tx_rs"], line["tx_ag"]]
    if all(both):
        line["tx"] = sum(x["payload_bytes"] for x in both) * 8e12 / LINE_RATE / sum(x["span_ps"] for x in both)
        # the same without the line time of the card's own ACK frames inside the spans: the data path's share
        line["tx_without_acks"] = (sum(x["payload_bytes"] for x in both) * 8e12 / LINE_RATE
                                   / sum(x["span_ps"] - x["ack_ps"] for x in both))
    both = [line["rx_rs"], line["rx_ag"]]
    if all(both):
        line["rx"] = sum(x["payload_bytes"] for x in both) * 8e12 / LINE_RATE / sum(x["span_ps"] for x in both)

    def hops(opcode: int) -> list[int]:
        first_in: dict[tuple[int, int, int], int] = {}
        for f in fin:
            if f[1] == opcode:
                first_in.setdefault((f[3], f[4], f[6]), f[0])
        seen, out = set(), []
        for f in fout:
            key = (f[3] - 1, f[4], f[6])
            if f[1] == opcode and f[3] >= 1 and key in first_in and key not in seen:
                seen.add(key)
                out.append(f[0] - first_in[key])
        return out

    rs_hops, ag_hops = hops(1), hops(2)
    first_ag = next((f[0] for f in fout if f[1] == 2 and f[3] == 0), None)
    # the own chunk's RS packets of the last hop (first arrivals): the clock of each one's last beat, by offset
    own_in: dict[int, int] = {}
    own_end = None
    for f in fin:
        if f[1] == 1 and f[4] == r and f[3] == n - 2 and f[6] not in own_in:
            own_in[f[6]] = f[0] + (64 + f[7] + 63) // 64 - 1
            if f[2] & 1:
                own_end = own_in[f[6]]
    # signed: a streaming Adam kernel updates the first packets while the last are still on the wire,
    # so the first AG frame may leave before the chunk's last beat arrives (negative)
    turnaround = first_ag - own_end if first_ag is not None and own_end is not None else None
    ag_out: dict[int, int] = {}
    for f in fout:
        if f[1] == 2 and f[3] == 0:
            ag_out.setdefault(f[6], f[0])
    per_packet = [ag_out[o] - own_in[o] for o in own_in if o in ag_out]
    c = raw.get("counters") or {}
    unique_out = sum(x["payload_bytes"] for x in (line["tx_rs"], line["tx_ag"]) if x)
    model = wire_model_s(n, size, payload, wdt, pdt, latency_s=case.get("latency_s", LATENCY_S))
    step_s = step_clocks * clock_s
    peers = raw.get("peer_counters") or {}
    return {
        "n": n, "rank": r, "payload": payload, "size": size, "length": raw["length"], "wire_dtype": wdt,
        "param_dtype": pdt, "drop": case.get("drop", 0.0), "seed": case.get("seed"),
        "exact": raw["exact"], "mismatch": raw.get("mismatch"), "error": raw.get("error"), "status": raw.get("status"),
        "adam_status": raw.get("adam_status"),
        "step_clocks": step_clocks, "step_s": step_s, "model": model, "step_over_model": step_s / model["step_s"],
        "line": line, "framing_cap": framing_cap(payload),
        # the card's ACK frames per data frame it received (coalesced: K frames a cumulative ACK)
        "acks_out": sum(1 for f in fout if f[1] == 3), "data_in": sum(1 for f in fin if f[1] in (1, 2)),
        "hop_clocks_rs": _median(rs_hops), "hop_clocks_rs_min": min(rs_hops) if rs_hops else None,
        "hop_clocks_ag": _median(ag_hops), "hop_samples": len(rs_hops) + len(ag_hops),
        "turnaround_clocks": turnaround,
        # per own packet: its last beat in to the first beat of the AG frame of the same offset out
        "update_packet_clocks": _median(per_packet), "update_packet_max_clocks": max(per_packet, default=None),
        "goodput_bps": unique_out * 8 / step_s, "payload_bytes_out": unique_out,
        "retransmitted_payload_bytes": c.get("retransmitted_bytes"),
        "retransmitted_frames": c.get("retransmitted_frames"), "timeouts": c.get("timeouts"),
        "naks_sent": c.get("naks_sent"), "naks_received": c.get("naks_received"),
        "dropped_overflow": c.get("dropped_overflow"), "dropped_step": c.get("dropped_step"),
        "peer_retransmitted_bytes": sum(p.get("retransmitted_bytes", 0) for p in peers.values()),
        "switch_dropped": (raw.get("switch") or {}).get("dropped_fault"),
        "tx_underflows": raw["tx_adapter"].get("underflows"), "adapter_errors": raw.get("adapter_errors"),
        "axi_errors": raw.get("axi_errors"),
        "sim_clocks": raw["end_cycle"] - raw["start_cycle"], "sim_wall_s": raw["wall_s"],
        "sim_clocks_per_s": (raw["end_cycle"] - raw["start_cycle"]) / raw["wall_s"],
        "run_s": raw["run_s"], "log": raw["log"], "clock_ps": raw["clock_ps"], "rto_us": case["rto_s"] * 1e6,
        "adam_stripes": raw.get("adam_stripes"), "net_stripes": raw.get("net_stripes"),
        # the card's memory channels over the step (bench_onic_card; the HBM model's budgets), by what they hold
        "memory_channels": [{"channel": c["channel"], "kind": _channel_kind(c["ports"]), "budget": c["budget"],
                             "beats": c["beats"], "clocks": c["clocks"], "paused_clocks": c["paused_clocks"]}
                            for c in (raw.get("memory") or {}).get("channels", [])],
    }


def _channel_kind(ports: list[str]) -> str:
    """What a card memory channel holds, from its ports: "state" (p, m, v), "out", "lgrad" or "gather"."""
    name = re.sub(r"\d+(_rd|_wr)?$", "", ports[0]) if ports else ""
    return "state" if name in ("p", "m", "v") else name


def measure_case(n: int, payload: int, packets: int, drop: float = 0.0, seed: int = 1, log: Log = None,
                 params: dict[str, int] | None = None, window: int = WINDOW,
                 build: str | None = None, rto_s: float | None = None,
                 card: KernelSpec | None = None, wire_dtype: str = "fp32", param_dtype: str = "fp32",
                 part: str | None = None, memory: str = "ideal", net_stripes: int = 1) -> dict[str, Any]:
    """One step's figures; `card`: with that Adam RTL kernel in the card (`onic_card`), not the stand-in,
    its network kernel's buffers in `net_stripes`, its memory ideal or (`memory` "hbm") every port on the
    channel the rail sizing plans (`hls.rtl.card.card_memory_plan`); `wire_dtype`, `param_dtype`: the
    stand-in's (the card's are its spec's)."""
    case = {"n": n, "rank": min(RANK, n - 1), "payload": payload, "size": chunk_size(payload, packets, wire_dtype),
            "drop": drop, "seed": seed, "window": window, "rto_s": rto_s or rto_for(payload, window),
            "latency_s": LATENCY_S}
    if (wire_dtype, param_dtype) != ("fp32", "fp32"):
        case |= {"wire_dtype": wire_dtype, "param_dtype": param_dtype}
    if memory == "hbm":
        from hls.rtl.card import card_memory_plan

        if card is None:
            raise ValueError("the HBM model is the card's memory: give `card`")
        plan, clock_mhz = card_memory_plan(card, payload, net_stripes)
        case["memory_plan"] = {"clock_mhz": clock_mhz, "ports": [
            {"port": x.port, "channel": x.channel, "beats_per_clock": x.beats_per_clock(clock_mhz)} for x in plan]}
    elif memory != "ideal":
        raise ValueError(f"memory {memory!r}: 'ideal' or 'hbm'")
    what = (f"card ({card.lanes} lanes{', HBM model' if memory == 'hbm' else ''})" if card
            else f"stand-in {wire_dtype}/{param_dtype}")
    _log(log, f"[bench rtlnet] {what} N={n} P={payload} S={case['size']} drop={drop:g} seed={seed} ...")
    raw = simulate(case, params, build, card, net_stripes)
    if raw.get("error"):  # a step that never finished has no figures: say which case, and where its log is
        raise BenchFailed(f"bench rtlnet: {what} N={n} P={payload} S={case['size']} drop={drop:g} seed={seed}: "
                          f"{raw['error']}; see {raw['log']}")
    row = figures(raw)
    row["adam"] = f"rtl{card.lanes}" if card else "stand-in"
    row["part"] = part or ("card" if card else "stand-in")
    row["memory"] = memory
    _log(log, f"[bench rtlnet]   {row['step_clocks']:,} clocks = {row['step_s'] * 1e6:.2f} us "
              f"({row['step_over_model']:.3f}x the wire model), exact {row['exact']}, "
              f"{row['sim_clocks_per_s']:,.0f} clocks/s, {row['run_s']:.0f} s")
    return row


# ---- N RTL cards in one build ------------------------------------------------------------------------------
def simulate_ring(case: dict[str, Any], cards: int = RING_CARDS, params: dict[str, int] | None = None,
                  card: KernelSpec | None = None) -> dict[str, Any]:
    """One ring step of `case` on the first `case["n"]` of `cards` onic_cards in one Verilator build
    (hls.rtl.ring_top, the bench's buffers and Adam kernel: sim/tb/net/bench_onic_ring_cards.py); its raw record."""
    if not simulators.available("verilator"):
        from hls.errors import ToolMissing

        raise ToolMissing("bench rtlnet: verilator is not installed (make deps)")
    from hls.rtl import ring_top

    made = ring_top.prepare_cards(cards, card or card_spec(), params=dict(params or BENCH_PARAMS), as_given=True)
    made.build_dir.mkdir(parents=True, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix="rtlnet-ring-", suffix=".json", dir=made.build_dir)
    os.close(fd)
    tag = f"n{case['n']}-p{case['payload']}-s{case['size']}-d{case.get('drop', 0)}-seed{case.get('seed', 1)}" \
        + (f"-b{case['segment']}" if case.get("segment") else "") + ("-2p" if case.get("two_phase") else "")
    log_file = made.build_dir.parent / f"{made.top}-bench-{tag}.log"
    return _run_bench(f"the ring {tag}", out, log_file, sources=made.sources, toplevel=made.top,
                      test_module="bench_onic_ring_cards", build_dir=made.build_dir, parameters=made.parameters,
                      build_args=["--no-public-flat-rw", "--public-depth", "1"],
                      extra_env={"ONIC_BENCH": json.dumps(case), "ONIC_BENCH_OUT": out,
                                 "ONIC_MANIFEST": str(made.manifest)},
                      testcase="bench_ring_cards")


def ring_figures(raw: dict[str, Any], cards: int = RING_CARDS) -> dict[str, Any]:
    """The figures of one step of N RTL cards: the step (every card's ap_start to the last card's last
    interrupt) against the wire model, the simulation speed, the retransmissions."""
    case = raw["case"]
    n, payload, size = case["n"], case["payload"], case["size"]
    wdt, pdt = raw.get("wire_dtype", "fp32"), raw.get("param_dtype", "fp32")
    clocks = raw.get("step_clocks")
    step_s = None if clocks is None else clocks * raw["clock_ps"] * 1e-12
    model = wire_model_s(n, size, payload, wdt, pdt, latency_s=case.get("latency_s", LATENCY_S))
    counters = raw.get("counters") or []
    status = raw.get("status") or []
    segment = int(case.get("segment", 0))
    phase_one = raw.get("phase_one_clocks")
    return {
        "part": "rounds" if raw.get("part") == "rounds" else "ring", "adam": f"ring{cards}-rtl{raw.get('lanes', '')}",
        "segment": segment, "two_phase": bool(case.get("two_phase")) or segment > 0,
        "phase_one_clocks": phase_one,
        "phase_one_over_rs_model": None if phase_one is None else
        phase_one * raw["clock_ps"] * 1e-12 / model["rs_s"],
        "n": n, "rank": None, "payload": payload, "size": size, "wire_dtype": wdt, "param_dtype": pdt,
        "drop": case.get("drop", 0.0), "seed": case.get("seed"), "exact": raw["exact"],
        "mismatch": raw.get("mismatch"), "error": raw.get("error"), "status": status,
        "step_clocks": clocks, "step_s": step_s, "model": model,
        "step_over_model": None if step_s is None else step_s / model["step_s"],
        "retransmitted_bytes": sum(c.get("retransmitted_bytes", 0) for c in counters),
        "timeouts": sum(c.get("timeouts", 0) for c in counters),
        "sim_clocks": raw["sim_clocks"], "sim_wall_s": raw["wall_s"],
        "sim_clocks_per_s": raw["sim_clocks"] / raw["wall_s"] if raw["wall_s"] else None,
        "run_s": raw["run_s"], "log": raw["log"], "clock_ps": raw["clock_ps"], "rto_us": case["rto_s"] * 1e6,
    }


def measure_ring_case(n: int, payload: int, packets: int, seed: int = 1, log: Log = None,
                      params: dict[str, int] | None = None, window: int = WINDOW, cards: int = RING_CARDS,
                      card: KernelSpec | None = None, drop: float = 0.0, segment: int = 0,
                      two_phase: bool = False, part: str = "ring") -> dict[str, Any]:
    """One step of N RTL cards (all onic_cards, `card`'s Adam kernel, the bench's buffers) and its figures.
    `segment`: round-major order with that many packets per round (the step runs as two phases);
    `two_phase`: the two-phase step (no clip: the one-phase result) in either order."""
    card = card or card_spec(RING_LANES)
    check_ring_case(n, payload, packets, params, card, segment, two_phase)
    case = {"n": n, "payload": payload, "size": chunk_size(payload, packets, card.grad_dtype), "seed": seed,
            "window": window, "rto_s": rto_for(payload, window), "latency_s": LATENCY_S, "drop": drop}
    if segment or two_phase:
        case |= {"segment": segment, "two_phase": two_phase}
    order = f" round-major B={segment}" if segment else (" two-phase" if two_phase else "")
    _log(log, f"[bench rtlnet] {n} RTL cards of {cards} ({card.lanes} lanes) P={payload} S={case['size']}{order} "
              f"seed={seed} ...")
    raw = simulate_ring(case, cards, params, card)
    raw["lanes"] = card.lanes
    raw["part"] = part
    row = ring_figures(raw, cards)
    _log(log, f"[bench rtlnet]   {row['step_clocks']} clocks, "
              f"{'-' if row['step_over_model'] is None else format(row['step_over_model'], '.3f')}x the wire model, "
              f"exact {row['exact']}, {row['sim_clocks_per_s'] or 0:,.0f} clocks/s, {row['run_s']:.0f} s")
    return row


def ag_packets_bound(params: dict[str, int] | None = None) -> int:
    """The deadlock bound of a ring of RTL cards with these buffers: transmit slots + receive slots. A chunk
    with as many packets in a flow (RS or AG) or more deadlocks the ring in hop-major order, the order the
    bench's one-phase steps run (`hls.net.ring_bound`); the ring rows keep under it and `check_ring_case`
    refuses a case that does not."""
    return ring_bound.params_bound(dict(params or BENCH_PARAMS))


def one_phase_bound(params: dict[str, int] | None = None) -> int:
    """The most RS packets per hop of a one-phase step on a ring of onic_cards with these buffers (their receive
    slots: `ring_bound.one_phase_packets`)."""
    return ring_bound.one_phase_packets(dict(params or BENCH_PARAMS)["RX_SLOT_LOG2"])


def check_ring_case(n: int, payload: int, packets: int, params: dict[str, int] | None = None,
                    card: KernelSpec | None = None, segment: int = 0, two_phase: bool = False) -> None:
    """Refuse (`ring_bound.ChunkOverBound`, one line) a ring case whose chunk reaches the deadlock bound
    in the order of `segment` (0: hop-major), or a one-phase case over the one-phase bound (the bench
    would run it as the two phases: not the case it names)."""
    card = card or card_spec(RING_LANES)
    size = chunk_size(payload, packets, card.grad_dtype)
    what = f"bench rtlnet: ring of {n} RTL cards"
    ring_bound.check_chunk(size, payload, card.grad_dtype, card.out_dtype, ag_packets_bound(params), what, segment)
    if not segment and not two_phase:
        why = ring_bound.one_phase_refusal(size, payload, card.grad_dtype, dict(params or BENCH_PARAMS)["RX_SLOT_LOG2"],
                                           what)
        if why:
            raise ring_bound.ChunkOverBound(why)


def rounds_cases(packets: tuple[int, ...] = ROUNDS_PACKETS, segments: tuple[int, ...] = ROUND_SEGMENTS,
                 params: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The `rounds` part's steps: per chunk, hop-major one-phase within the one-phase bound, hop-major
    two-phase under the hop-major bound, and round-major at every segment below the chunk's packets."""
    limit = ag_packets_bound(params)
    one = one_phase_bound(params)
    out = []
    for p in packets:
        if p <= one:
            out.append({"packets": p, "segment": 0, "two_phase": False})
        if p < limit:
            out.append({"packets": p, "segment": 0, "two_phase": True})
        out += [{"packets": p, "segment": b, "two_phase": True} for b in segments if b < p]
    return out


def _commit() -> str:
    """The measured commit (`-dirty`: with uncommitted changes)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("-dirty" if dirty else "")


# ---- the whole bench ---------------------------------------------------------------------------------------
def collect(worlds: tuple[int, ...] = WORLDS, payloads: tuple[int, ...] = PAYLOADS,
            drops: tuple[float, ...] = DROP_RATES, repeats: int = 3, packets: int = PACKETS_PER_CHUNK,
            step_packets: int = STEP_PACKETS_PER_CHUNK, line_world: int = LINE_WORLD, drop_world: int = DROP_WORLD,
            log: Log = None, params: dict[str, int] | None = None, window: int = WINDOW,
            build: str | None = None, card: KernelSpec | None = None, card_build: str | None = None,
            stand_in: bool = True, parts: tuple[str, ...] = PARTS, ring_cards: int = RING_CARDS,
            ring_card: KernelSpec | None = None, bf16_build: str | None = BF16_BUILD,
            hbm_card: KernelSpec | None = None, hbm_build: str | None = None) -> dict[str, Any]:
    """Every figure in one run; repeated cases (seeds 1..repeats) report medians.

    `card` (default `card_spec()`): the card rows, the network kernel with that Adam RTL kernel
    (`onic_card`): step times, forwarding latency and update turnaround (idle line, and streaming at
    every payload, which also gives each payload's line-rate fraction). `stand_in`: the rows of the
    network kernel with the stand-in Adam kernel: line-rate fractions at every payload, goodput under
    loss, and the step times and latencies again (the difference is what the Adam kernel adds).
    `params` (the card's buffers), `window`, `build` and `card_build` (Verilator models' folders to
    share) are for a small CI run.

    `parts` (PARTS) picks what is measured: "card" (the rows above with the Adam RTL kernel), "stand-in"
    (`stand_in` False drops it too), "card-drops" (goodput under loss with the Adam RTL kernel, as the
    stand-in's), "card-hbm" (the card rows again with `hbm_card`, default `hbm_card_spec()`, its memory on
    the HBM model: every port on the channel the rail sizing plans, the network kernel's buffers in the
    planned stripes; model folder `hbm_build`), "ring" (step time and simulation speed of N RTL cards, every
    card an onic_card, one build of `ring_cards`), "bf16" (the stand-in with a bf16 wire and bf16
    parameters: line rate at the step payload and step times; model folder `bf16_build`). The report's
    `measured` says, per part, the commit, the load and the wall time."""
    unknown = set(parts) - set(PARTS)
    if unknown:
        from hls.errors import UserError

        raise UserError(f"bench rtlnet: unknown part(s) {', '.join(sorted(unknown))} (of {', '.join(PARTS)})")
    if not stand_in:
        parts = tuple(x for x in parts if x != "stand-in")
    step_payload = min(wire.DEFAULT_PAYLOAD_BYTES, max(payloads))
    if "ring" in parts:  # before any part runs (hours): a ring case at the deadlock bound would hang
        for n in worlds:
            if n <= ring_cards:
                check_ring_case(n, step_payload, step_packets, params, ring_card or card_spec(RING_LANES))
    if "rounds" in parts:
        for c in rounds_cases(params=params):
            check_ring_case(ROUNDS_WORLD, step_payload, c["packets"], params, ring_card or card_spec(RING_LANES),
                            c["segment"], c["two_phase"])
    t0 = time.perf_counter()
    card = card or card_spec()
    hbm_card = hbm_card or hbm_card_spec()
    hbm_stripes = planned_net_stripes(hbm_card, payloads) if "card-hbm" in parts else 1  # refused before any run
    kw = {"log": log, "params": params, "window": window}
    rows: list[dict[str, Any]] = []

    measured: dict[str, dict[str, Any]] = {}
    commit = _commit()

    def group(cases: list[dict[str, Any]], spec: KernelSpec | None, part: str | None = None,
              where: str | None = None) -> list[dict[str, Any]]:
        t = time.perf_counter()
        out = [measure_case(**c, **kw, build=where or (card_build if spec else build), card=spec, part=part)
               for c in cases]
        rows.extend(out)
        _measured(out[0]["part"], t)
        return out

    def _measured(part: str, t: float) -> None:
        m = measured.setdefault(part, {"commit": commit, "wall_s": 0.0})
        m["wall_s"] += time.perf_counter() - t
        m["load_average"] = os.getloadavg()

    # one packet per chunk: a partial arrives when the card's line is idle (its own frame of the hop
    # before has gone), so first beat in to first beat out is the card's own forwarding latency
    hop_cases = [{"n": line_world, "payload": p, "packets": 1, "seed": 1} for p in payloads]
    # the line-rate steps, one per payload (streaming: also the streaming latencies)
    line_cases = [{"n": line_world, "payload": p, "packets": packets, "seed": 1} for p in payloads]
    step_cases = [{"n": n, "payload": step_payload, "packets": step_packets, "seed": s}
                  for n in worlds for s in range(1, repeats + 1)]
    card_hop = card_line = card_steps = []
    if "card" in parts:
        card_hop = group(hop_cases, card)
        card_line = group(line_cases, card)
        card_steps = group(step_cases, card)
    drop_cases = [{"n": drop_world, "payload": step_payload, "packets": packets, "drop": d, "seed": s}
                  for d in drops for s in range(1, repeats + 1)]
    card_drops = group(drop_cases, card, "card-drops") if "card-drops" in parts else []
    hbm: dict[str, Any] | None = None
    if "card-hbm" in parts:
        on_hbm = {"memory": "hbm", "net_stripes": hbm_stripes}
        h_hop = group([c | on_hbm for c in hop_cases], hbm_card, "card-hbm", hbm_build)
        h_line = group([c | on_hbm for c in line_cases], hbm_card, "card-hbm", hbm_build)
        h_steps = group([c | on_hbm for c in step_cases], hbm_card, "card-hbm", hbm_build)
        hbm = {"spec": {k: getattr(hbm_card, k) for k in ("optimizer", "grad_dtype", "out_dtype", "lanes")}
               | {"stripes": h_line[0]["adam_stripes"], "net_stripes": hbm_stripes},
               "line": [_line_summary(r) for r in h_line],
               "steps": _by(h_steps, "n", lambda rs: _step_summary(rs)),
               "latency": _latency_summary(h_hop, h_line),
               "channels": [_channel_summary(r) for r in h_line],
               "speed": _by(h_steps, "n", lambda rs: {"clocks_per_s": _median([r["sim_clocks_per_s"] for r in rs])})}
    report: dict[str, Any] = {
        "line_rate_gbps": LINE_RATE / 1e9, "latency_ns": LATENCY_S * 1e9, "window": window,
        "rank": RANK, "line_world": line_world, "step_payload": step_payload, "drop_world": drop_world,
        "params": dict(params or BENCH_PARAMS), "repeats": repeats, "goal_of_cap": GOAL_OF_CAP,
        "card": {"spec": {k: getattr(card, k) for k in ("optimizer", "grad_dtype", "out_dtype", "lanes", "stripes")},
                 "line": [_line_summary(r) for r in card_line],
                 "steps": _by(card_steps, "n", lambda rs: _step_summary(rs)),
                 "latency": _latency_summary(card_hop, card_line),
                 "speed": _by(card_steps, "n",
                              lambda rs: {"clocks_per_s": _median([r["sim_clocks_per_s"] for r in rs])}),
                 "drops": _by(card_drops, "drop", lambda rs: _drop_summary(rs))},
        "adam": "reference stand-in on the card's streams (not the Adam RTL kernel)",
        "line": [], "steps": [], "drops": [], "latency": [], "speed": [], "ring": None, "bf16": None, "rounds": None,
        "card_hbm": hbm,
        "ag_packets_bound": ag_packets_bound(params),
    }
    if "ring" in parts:
        t = time.perf_counter()
        ring_rows = [measure_ring_case(n, step_payload, step_packets, s, log=log, params=params, window=window,
                                       cards=ring_cards, card=ring_card or card_spec(RING_LANES))
                     for n in worlds if n <= ring_cards for s in range(1, repeats + 1)]
        rows.extend(ring_rows)
        _measured("ring", t)
        rc = ring_card or card_spec(RING_LANES)
        report["ring"] = {"cards": ring_cards, "spec": {k: getattr(rc, k) for k in ("optimizer", "grad_dtype",
                                                                                    "out_dtype", "lanes", "stripes")},
                          "steps": _by(ring_rows, "n", lambda rs: _step_summary(rs) | {
                              "clocks_per_s": _median([r["sim_clocks_per_s"] for r in rs if r["sim_clocks_per_s"]]),
                              "retransmitted_bytes": _median([r["retransmitted_bytes"] for r in rs]),
                              "ag_packets": math.ceil(rs[0]["size"] * wire.ELEMENT_BYTES[rs[0]["param_dtype"]]
                                                      / rs[0]["payload"])})}
    if "rounds" in parts:
        t = time.perf_counter()
        rc = ring_card or card_spec(RING_LANES)
        round_rows = [measure_ring_case(ROUNDS_WORLD, step_payload, c["packets"], 1, log=log, params=params,
                                        window=window, cards=ring_cards, card=rc, segment=c["segment"],
                                        two_phase=c["two_phase"], part="rounds")
                      for c in rounds_cases(params=params)]
        rows.extend(round_rows)
        _measured("rounds", t)
        report["rounds"] = {"cards": ring_cards, "n": ROUNDS_WORLD, "lanes": rc.lanes,
                            "bound": ag_packets_bound(params),
                            "one_phase": one_phase_bound(params),
                            "steps": _rounds_summary(round_rows)}
    if "bf16" in parts:
        bf = {"wire_dtype": "bf16", "param_dtype": "bf16"}
        b_line = group([{"n": line_world, "payload": step_payload, "packets": packets, "seed": 1, **bf}], None,
                       "bf16", bf16_build)
        b_steps = group([c | bf for c in step_cases], None, "bf16", bf16_build)
        report["bf16"] = {"line": [_line_summary(r) for r in b_line],
                          "steps": _by(b_steps, "n", lambda rs: _step_summary(rs))}
    if "stand-in" in parts:
        line_rows = group(line_cases, None)
        hop_rows = group(hop_cases, None)
        step_rows = group(step_cases, None)
        drop_rows = group(drop_cases, None)
        report |= {
            "line": [_line_summary(r) for r in line_rows],
            "steps": _by(step_rows, "n", lambda rs: _step_summary(rs)),
            "drops": _by(drop_rows, "drop", lambda rs: _drop_summary(rs)),
            "latency": _latency_summary(hop_rows, line_rows),
            "speed": _by(step_rows, "n",
                         lambda rs: {"clocks_per_s": _median([r["sim_clocks_per_s"] for r in rs])}),
        }
    report |= {
        "measured": measured,
        "clock_mhz": 1e6 / rows[0]["clock_ps"],
        "rto_us": sorted({r["rto_us"] for r in rows}),
        "exact": all(r["exact"] for r in rows),
        "mismatches": _mismatches(rows),
        "rows": rows,
        "load_average": os.getloadavg(),
        "wall_s": time.perf_counter() - t0,
    }
    report["meets_goal"] = _meets_goal(report)
    return report


def _mismatches(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{r['adam']} N={r['n']} P={r['payload']} drop={r['drop']} seed={r['seed']}"
            f"{' segment=' + str(r['segment']) if r.get('segment') else ''}: "
            f"{r['error'] or r['mismatch'] or 'STATUS ' + str(r['status'])}" for r in rows if not r["exact"]]


def _meets_goal(report: dict[str, Any]) -> bool:
    line = (report["line"] + report["card"]["line"] + ((report.get("bf16") or {}).get("line") or [])
            + ((report.get("card_hbm") or {}).get("line") or []))
    return bool(line) and all(x["meets_goal"] for x in line)


def _by(rows: list[dict[str, Any]], key: str,
        fn: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> list[dict[str, Any]]:
    values = sorted({r[key] for r in rows})
    return [{key: v, **fn([r for r in rows if r[key] == v])} for v in values]


def _line_summary(r: dict[str, Any]) -> dict[str, Any]:
    ln = r["line"]
    tx = ln.get("tx")
    return {"payload": r["payload"], "n": r["n"], "size": r["size"], "cap": r["framing_cap"], "tx": tx,
            "tx_rs": (ln["tx_rs"] or {}).get("fraction"), "tx_ag": (ln["tx_ag"] or {}).get("fraction"),
            "rx": ln.get("rx"), "rx_rs": (ln["rx_rs"] or {}).get("fraction"),
            "rx_ag": (ln["rx_ag"] or {}).get("fraction"),
            "ack_share": (ln["tx_rs"] or {}).get("ack_share"), "tx_without_acks": ln.get("tx_without_acks"),
            "acks_out": r["acks_out"], "data_in": r["data_in"],
            "dropped_overflow": r["dropped_overflow"], "tx_underflows": r["tx_underflows"], "exact": r["exact"],
            "meets_goal": tx is not None and tx >= GOAL_OF_CAP * r["framing_cap"]}


def _step_summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    rs = [r for r in rs if r["step_s"] is not None] or rs[:1]  # a step that never ended: the mismatches say so
    if rs[0]["step_s"] is None:
        return {"size": rs[0]["size"], "payload": rs[0]["payload"], "runs": 0, "step_us": None, "model_us": None,
                "over_model": None, "step_clocks": None, "exact": False}
    return {"size": rs[0]["size"], "payload": rs[0]["payload"], "runs": len(rs),
            "step_us": _median([r["step_s"] * 1e6 for r in rs]),
            "model_us": _median([r["model"]["step_s"] * 1e6 for r in rs]),
            "over_model": _median([r["step_over_model"] for r in rs]),
            "step_clocks": _median([r["step_clocks"] for r in rs]), "exact": all(r["exact"] for r in rs)}


def _rounds_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (chunk, order) of the `rounds` part: the step and its phase one, medians over the seeds."""
    out = []
    for key in dict.fromkeys((r["size"], r["segment"], r["two_phase"]) for r in rows):
        rs = [r for r in rows if (r["size"], r["segment"], r["two_phase"]) == key]
        done = [r for r in rs if r["step_clocks"] is not None]
        ones = [r["phase_one_clocks"] for r in done if r["phase_one_clocks"] is not None]
        out.append(_step_summary(rs) | {
            "segment": key[1], "two_phase": key[2], "n": rs[0]["n"],
            "packets": ring_bound.flow_packets(rs[0]["size"], rs[0]["payload"], rs[0]["wire_dtype"],
                                               rs[0]["param_dtype"])["rs"],
            "phase_one_clocks": _median(ones) if ones else None,
            "phase_one_over_rs_model": _median([r["phase_one_over_rs_model"] for r in done
                                                if r["phase_one_over_rs_model"] is not None]) if ones else None,
            "rs_model_us": rs[0]["model"]["rs_s"] * 1e6,
            "clocks_per_s": _median([r["sim_clocks_per_s"] for r in done if r["sim_clocks_per_s"]]) if done else None})
    return out


def _channel_summary(r: dict[str, Any]) -> dict[str, Any]:
    """Per kind of card memory channel (state, out, lgrad, gather) in one step: the busiest channel's beats a
    clock over its budget, and the most clocks any of them was paused for lack of budget."""
    out: dict[str, Any] = {"payload": r["payload"], "n": r["n"], "size": r["size"]}
    for kind in ("state", "out", "lgrad", "gather"):
        cs = [c for c in r["memory_channels"] if c["kind"] == kind and c["budget"] and c["clocks"]]
        out[kind] = {"channels": len(cs), "budget": max((c["budget"] for c in cs), default=None),
                     "use": max((c["beats"] / c["clocks"] / c["budget"] for c in cs), default=None),
                     "paused_share": max((c["paused_clocks"] / c["clocks"] for c in cs), default=None)}
    return out


def _drop_summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"n": rs[0]["n"], "size": rs[0]["size"], "payload": rs[0]["payload"], "runs": len(rs),
            "goodput_gbps": _median([r["goodput_bps"] / 1e9 for r in rs]),
            "step_us": _median([r["step_s"] * 1e6 for r in rs]),
            "retransmitted_payload_bytes": _median([r["retransmitted_payload_bytes"] or 0 for r in rs]),
            "peer_retransmitted_bytes": _median([r["peer_retransmitted_bytes"] for r in rs]),
            "payload_bytes_out": _median([r["payload_bytes_out"] for r in rs]),
            "timeouts": _median([r["timeouts"] or 0 for r in rs]),
            "switch_dropped": sum(r["switch_dropped"] or 0 for r in rs), "exact": all(r["exact"] for r in rs)}


def _latency_summary(hop_rows: list[dict[str, Any]], line_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per payload: the card's forwarding latency with its line idle (one-packet chunks), the same while
    streaming (the line rows: a partial waits behind the frames ahead of it on the card's line), and the
    update turnaround."""
    out = []
    for h in hop_rows:
        s = next((r for r in line_rows if r["payload"] == h["payload"]), None)
        out.append({"payload": h["payload"], "n": h["n"], "hop_rs_clocks": h["hop_clocks_rs"],
                    "hop_ag_clocks": h["hop_clocks_ag"], "turnaround_clocks": h["turnaround_clocks"],
                    "streaming_hop_rs_clocks": s and s["hop_clocks_rs"],
                    "streaming_hop_rs_min_clocks": s and s["hop_clocks_rs_min"],
                    "streaming_turnaround_clocks": s and s["turnaround_clocks"],
                    "update_packet_clocks": h["update_packet_clocks"],
                    "streaming_update_packet_clocks": s and s["update_packet_clocks"],
                    "streaming_update_packet_max_clocks": s and s["update_packet_max_clocks"],
                    "streaming_size": s and s["size"]})
    return out


# ---- the report ------------------------------------------------------------------------------------------
HEADING = "## Network RTL in simulation (onic_net_kernel, one RTL card on a ring)"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _us(clocks: float | None, ns: float) -> str:
    return "-" if clocks is None else f"{clocks * ns / 1e3:.2f} us"


def _num(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(rep: dict[str, Any]) -> list[str]:
    """The section of bench/results.md."""
    ns = rep["clock_mhz"] and 1e3 / rep["clock_mhz"]
    p = rep["params"]
    card = rep["card"]
    cs = card["spec"]
    commands = {m.get("command") for m in (rep.get("measured") or {}).values()}
    command = (f"`{rep.get('command', 'optimusnic bench rtlnet')}`" if len(commands) <= 1 else
               "`optimusnic bench rtlnet`, its parts measured in separate runs (each part's command and commit "
               "at the end of this section)")
    lines = [
        HEADING,
        "",
        f"{command}: ONE RTL card (rank {rep['rank']}) "
        "beside N - 1 software peers (`hls.net.card.Card`, the same bytes) through the seeded switch of "
        f"sim/tb/models ({rep['line_rate_gbps']:g} Gb/s links, {rep['latency_ns']:g} ns latency), cocotb on "
        f"Verilator, kernel clock {rep['clock_mhz']:.2f} MHz, 512-bit MAC streams on the `eth_port` adapters; window "
        f"{rep['window']} packets per flow, RTO {' / '.join(f'{x:.3g}' for x in rep['rto_us'])} us "
        "(`rto_for`: three windows of full frames, at least 20 us); the card's buffers for 8 KiB payloads "
        f"(receive: {2 ** p['RX_SLOT_LOG2']} slots of up to {p['RX_FRAME_BEATS']} beats; retransmit: "
        f"{2 ** p['TX_SLOTS_LOG2']} slots of {2 ** p['TX_BEATS_LOG2']} beats per flow). fp32 wire and parameters. "
        f"The card is `onic_card` (the network kernel and the generated Adam RTL kernel, {cs['optimizer']} "
        f"{cs['grad_dtype']}, {cs['lanes']} lanes, {cs['stripes']} stripe per array: {cs['lanes']} elements a clock "
        f"against the line's {LINE_RATE / 8 / (rep['clock_mhz'] * 1e6) / 4:.1f} fp32 a clock), card memory "
        "IDEAL: cocotbext-axi RAM with 5..40 clocks of read latency, no bandwidth limit (bench_onic_card.py; "
        + ("the rows marked HBM model put it on the planned channels of the HBM model); " if rep.get("card_hbm")
           else "no row here has the HBM model); ")
        + "the rows marked stand-in are "
        "the network kernel alone with a reference STAND-IN for the Adam kernel on its streams "
        "(bench_onic_net_kernel.py: no kernel latency), kept for the line-rate and loss figures and to show what "
        "the Adam kernel adds. Every step checked bit for bit against a lossless reference ring (card: p, m, v and "
        "the out buffer of the owner's shard, the gathered buffer, every peer's gathered parameters, STATUS of both "
        "kernels; stand-in: the reduced chunk, the gathered buffer, the peers): "
        + ("all exact." if rep["exact"] else "MISMATCHES: " + "; ".join(rep["mismatches"]) + "."),
        "Times are simulated (exact, independent of the machine); only the simulation speed depends on the load "
        f"(load average {', '.join(f'{x:.1f}' for x in rep['load_average'])} at the end of the last run, 2 shared "
        "cores). "
        f"Repeated cases: seeds 1..{rep['repeats']}, medians.",
        "",
        f"With the Adam RTL kernel ({cs['lanes']} lanes). Step time (payload {rep['step_payload']}): the host's "
        "ap_start write to the network kernel to the last of the card's two interrupts and every peer's done, "
        "against the wire model (`optimusnic.bench.rtlnet.wire_model_s`, below); the stand-in column is the "
        "same step with the stand-in.",
        "",
        "| N | S elements | step, Adam RTL | step / model | stand-in step | stand-in / model | wire model | clocks |",
        "|---|---|---|---|---|---|---|---|",
        *[_card_step_line(x, rep["steps"]) for x in card["steps"]],
        "",
        f"Latency with the Adam RTL kernel (clocks of {ns:.3f} ns), lossless, N = {rep['line_world']}, defined as "
        "in the stand-in table below: update turnaround, the last beat of the card's own chunk's last RS packet in "
        "at s_axis_mac0 to the first beat of its first AG frame out at m_axis_mac0 (the Adam kernel's reads of "
        "p, m, v, its pipeline, the AG release (the card's RS flow acknowledged by its successor) and the AG "
        "frame's assembly: a frame leaves only when whole), negative when the first AG frame leaves before that "
        "beat arrives (the Adam kernel streams: it updates the chunk's first packets while the last are on the "
        "wire; the stand-in collects the whole chunk first); per packet: each of the own chunk's RS packets, "
        "its last beat in to the first beat of the AG frame of the same offset out. Idle line: one-packet "
        "chunks; streaming: the line-rate step of the next table.",
        "",
        "| payload | RS hop, idle line | AG hop, idle line | update turnaround, idle line (stand-in) "
        "| RS hop streaming, median (min) | update turnaround streaming (stand-in) "
        "| per packet streaming, median (max) (stand-in) |",
        "|---|---|---|---|---|---|---|",
        *[_card_latency_line(x, rep["latency"], ns) for x in card["latency"]],
        "",
        f"Payload line-rate fraction with the Adam RTL kernel (N = {rep['line_world']}, one step), as below:",
        "",
        *_line_table(card["line"]),
        *_hbm_lines(rep, ns),
        "",
        f"Stand-in rows. Payload line-rate fraction per port (N = {rep['line_world']}, one step each): payload "
        "bytes of the RS (AG) data frames, first transmissions, over the line time from the first such frame's "
        "start to the last one's end "
        "(the RTL card's own ACK frames on the same line included: ACK coalescing at the kernel's default, "
        "`ACK_EVERY` = 8 in onic_net_kernel.v); transmit: the card's m_axis_mac0 serialized "
        "at 100 Gb/s; receive: the frames arriving at its s_axis_mac0 from its predecessor. Goal: the transmit "
        f"fraction at {rep['goal_of_cap']:.0%} of the framing cap P / (P + 88) or more.",
        "",
        *_line_table(rep["line"]),
    ]
    lines += [
        "",
        f"Stand-in step time (payload {rep['step_payload']}): the host's ap_start write to the last card done, against "
        "the wire model (`optimusnic.bench.rtlnet.wire_model_s`: every link busy from the start, N - 1 chunks per "
        "phase at the line rate with 88 bytes of framing per frame, plus the switch latency and one frame's "
        "serialization per phase; the cards, ACKs and the update add nothing).",
        "",
        "| N | S elements | step | wire model | step / model | clocks |",
        "|---|---|---|---|---|---|",
    ]
    for x in rep["steps"]:
        lines.append(f"| {x['n']} | {x['size']:,} | {x['step_us']:.2f} us | {x['model_us']:.2f} us | "
                     f"{x['over_model']:.3f}x | {x['step_clocks']:,.0f} |")
    lines += [
        "",
        f"Stand-in latency inside the card (clocks of {ns:.3f} ns), lossless, N = {rep['line_world']}: per hop, "
        "the first beat of an RS partial in at s_axis_mac0 to the first beat of the partial the card forwards "
        "(hop + 1, same chunk and offset) at m_axis_mac0, AG forwarding alike; update turnaround, the last beat "
        "of the card's own chunk's last RS packet in to the first beat of its first AG frame out (the stand-in "
        "kernel adds no Adam latency; the AG release, the card's RS flow acknowledged by its successor, is a "
        "round trip over the switch). Idle line: one-packet chunks, so a partial never waits for the card's "
        "line. Streaming: the line-rate steps above, median (min) over every forwarded packet; a partial waits "
        "behind the frames ahead of it on the card's line (its own chunk at hop 0), so this is mostly queueing.",
        "",
        "| payload | RS hop, idle line | AG hop, idle line | update turnaround | RS hop streaming, median (min) "
        "| update turnaround streaming |",
        "|---|---|---|---|---|---|",
    ]
    for x in rep["latency"]:
        t = x["turnaround_clocks"]
        lines.append(f"| {x['payload']} | {_num(x['hop_rs_clocks'])} clocks = {_us(x['hop_rs_clocks'], ns)} | "
                     f"{_num(x['hop_ag_clocks'])} clocks | {_num(t)} clocks = {_us(t, ns)} | "
                     f"{_num(x['streaming_hop_rs_clocks'])} ({_num(x['streaming_hop_rs_min_clocks'])}) clocks | "
                     f"{_num(x['streaming_turnaround_clocks'])} clocks |")
    lines += [
        "",
        f"Stand-in goodput under loss (N = {rep['drop_world']}, payload {rep['step_payload']}): the switch drops each "
        "frame on every egress link with the given probability (seeded); goodput is the RTL card's first-time "
        "payload bytes over the step time; "
        "retransmitted: its payload bytes sent again (counter `retransmitted_bytes`), and the peers' frame bytes.",
        "",
        *_drop_table(rep["drops"]),
    ]
    lines += _card_drops_lines(rep)
    lines += _ring_lines(rep, ns)
    lines += _bf16_lines(rep)
    lines += _rounds_lines(rep, ns)
    lines += [
        "",
        "| simulation speed | " + " | ".join(f"N = {x['n']}" for x in rep["speed"]) + " |",
        "|---|" + "---|" * len(rep["speed"]),
        "| kernel clocks per wall second (stand-in: the network kernel, N - 1 software peers) | "
        + " | ".join(_num(x["clocks_per_s"]) for x in rep["speed"]) + " |",
        "| kernel clocks per wall second (the card with the Adam RTL kernel, N - 1 software peers) | "
        + " | ".join(_num(next((c["clocks_per_s"] for c in card["speed"] if c["n"] == x["n"]), None))
                     for x in rep["speed"]) + " |",
        *([f"| kernel clocks per wall second (N RTL cards, every card the card above, one build of "
           f"{rep['ring']['cards']}) | "
           + " | ".join(_num(next((c.get("clocks_per_s") for c in rep["ring"]["steps"] if c["n"] == x["n"]), None))
                        for x in rep["speed"]) + " |"] if (rep.get("ring") or {}).get("steps") else []),
        "",
        f"Goal (transmit line-rate fraction within 2 % of the framing cap at every payload, every row): "
        f"{'met' if rep['meets_goal'] else 'NOT met'}. Wall time of this section: {rep['wall_s']:.0f} s.",
    ]
    if rep.get("measured"):
        lines.append("Measured (per part: the commit, the command, the load average at its end and its wall time): "
                     + "; ".join(_measured_text(p, m) for p, m in sorted(rep["measured"].items())) + ".")
    lines.append("")
    return lines


def _measured_text(part: str, m: dict[str, Any]) -> str:
    if "command" not in m:
        return f"{part}: commit {m.get('commit', 'not recorded')}"
    load = ", ".join(f"{x:.1f}" for x in m.get("load_average") or ())
    return f"{part}: commit {m['commit']}, `{m['command']}`, load {load}, {m.get('wall_s', 0):.0f} s"


def _drop_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| drop rate | frames dropped (all runs) | step | goodput per port | retransmitted by the RTL card | "
             "by the peers | RTL timeouts |", "|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['drop']:g} | {x['switch_dropped']} | {x['step_us']:.2f} us | {x['goodput_gbps']:.1f} Gb/s "
                     f"| {x['retransmitted_payload_bytes']:,.0f} B of {x['payload_bytes_out']:,.0f} | "
                     f"{x['peer_retransmitted_bytes']:,.0f} B | {x['timeouts']:g} |")
    return lines


def _card_drops_lines(rep: dict[str, Any]) -> list[str]:
    rows = (rep.get("card") or {}).get("drops") or []
    if not rows:
        return []
    cs = rep["card"]["spec"]
    return ["", f"Goodput under loss with the Adam RTL kernel (`onic_card`, {cs['lanes']} lanes; N = "
            f"{rows[0]['n']}, payload {rows[0]['payload']}, S = {rows[0]['size']:,}), defined as the stand-in's "
            "above: the same seeded drops on every egress link; each step bit-exact (p, m, v, out, the gathered "
            "buffer, every peer) after its retransmissions.", "", *_drop_table(rows)]


def _hbm_lines(rep: dict[str, Any], ns: float) -> list[str]:
    """The card with its memory on the HBM model (`card-hbm`), beside the same figures on ideal memory."""
    h = rep.get("card_hbm")
    if not h:
        return []
    cs = h["spec"]
    st = cs["stripes"]
    ideal = rep.get("card") or {}
    lines = [
        "",
        f"Bandwidth-true: the card with its memory on the HBM model (`card-hbm`). The card is `onic_card` with "
        f"the Adam RTL kernel at the stripes sizing plans for it ({cs['optimizer']} {cs['grad_dtype']}, "
        f"{cs['lanes']} lanes, p/m/v {st['p']}/{st['m']}/{st['v']} stripes, out {st['out']}) and the network "
        f"kernel's lgrad and gather in {cs['net_stripes']} stripes each. Every m_axi port is on the HBM "
        "pseudo-channel the rail sizing gives it at the case's payload (`hls.rtl.card.card_memory_plan`: "
        "each stripe on a channel of its own). Each channel is limited to its usable bandwidth in sizing "
        "(reads and writes together; the lower mixed figure for a channel both read and written), with a burst "
        "allowance of a few beats and 100..250 ns per burst (sim/tb/models/hbm_memory.py). The channels of lgrad "
        "and gather also lose the host DMA's share: a steady stream at the goodput over the stripes, filling "
        "lgrad's other half and draining gather's (hls.ring_plan). The budgets left to the card's ports are in "
        "the channel table below. The ideal columns are the card rows above: the 1-stripe Adam kernel on ideal "
        "memory. Cases, seeds and checks are as above.",
        "",
        "| N | S elements | step, HBM model | step / model | step, ideal memory | wire model | clocks |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in h["steps"]:
        i = next((y for y in ideal.get("steps") or [] if y["n"] == x["n"]), None)
        lines.append(f"| {x['n']} | {x['size']:,} | {x['step_us']:.2f} us | {x['over_model']:.3f}x | "
                     f"{'-' if i is None else format(i['step_us'], '.2f') + ' us'} | {x['model_us']:.2f} us | "
                     f"{x['step_clocks']:,.0f} |")
    lines += [
        "",
        f"Latency on the HBM model (clocks of {ns:.3f} ns), defined as for the card above; ideal memory in "
        "parentheses:",
        "",
        "| payload | RS hop, idle line | AG hop, idle line | update turnaround, idle line | update turnaround "
        "streaming | per packet streaming, median (max) |",
        "|---|---|---|---|---|---|",
    ]
    for x in h["latency"]:
        i = next((y for y in ideal.get("latency") or [] if y["payload"] == x["payload"]), {})
        lines.append(f"| {x['payload']} | {_num(x['hop_rs_clocks'])} ({_num(i.get('hop_rs_clocks'))}) | "
                     f"{_num(x['hop_ag_clocks'])} ({_num(i.get('hop_ag_clocks'))}) | "
                     f"{_num(x['turnaround_clocks'])} ({_num(i.get('turnaround_clocks'))}) | "
                     f"{_num(x['streaming_turnaround_clocks'])} ({_num(i.get('streaming_turnaround_clocks'))}) | "
                     f"{_num(x['streaming_update_packet_clocks'])} "
                     f"({_num(x['streaming_update_packet_max_clocks'])}) "
                     f"({_num(i.get('streaming_update_packet_clocks'))}) |")
    lines += ["", f"Payload line-rate fraction on the HBM model (N = {rep['line_world']}, one step), as above:", "",
              *_line_table(h["line"]), "",
              "Card memory in those steps, per kind of channel: the busiest channel's beats over the step (ap_start "
              "to the last done) against its budget, and the largest share of the step's clocks a channel was "
              "paused for lack of budget. The state channels work only during the update hop, one of the N - 1 "
              "reduce-scatter hops.", "",
              "| payload | state (p, m, v) | out | lgrad | gather | paused, most |",
              "|---|---|---|---|---|---|"]
    for c in h["channels"]:
        cells = []
        for kind in ("state", "out", "lgrad", "gather"):
            k = c[kind]
            cells.append("-" if k["use"] is None else
                         f"{k['channels']} x {k['budget']:.3f} beats/clock, {k['use']:.1%} used")
        paused = max((c[k]["paused_share"] or 0.0 for k in ("state", "out", "lgrad", "gather")), default=0.0)
        lines.append(f"| {c['payload']} | " + " | ".join(cells) + f" | {paused:.2%} of the clocks |")
    return lines


def _ring_lines(rep: dict[str, Any], ns: float) -> list[str]:
    rg = rep.get("ring")
    if not rg or not rg.get("steps"):
        return []
    cs = rg.get("spec") or {}
    card_steps = {x["n"]: x for x in rep["card"].get("steps") or []}
    lines = ["", f"N RTL CARDS in one simulation: every card of the ring an `onic_card` (the network kernel and the "
             f"generated Adam RTL kernel, {cs.get('optimizer', '')} {cs.get('grad_dtype', '')}, {cs.get('lanes', '')} "
             f"lanes: {cs.get('lanes', '')} elements a clock against the line's "
             f"{LINE_RATE / 8 / (1e9 / ns) / 4:.1f}, so the owner's update paces the last RS hop (a build of four "
             "16-lane cards is hours of C++ on this machine); the buffers above), one Verilator build of "
             f"{rg['cards']} cards (hls.rtl.ring_top; a ring of N "
             "uses the first N, the others idle), each MAC port on cocotbext-eth's MAC model (`eth_mac_port.MacPort`, "
             f"100 Gb/s) through the same switch, kernel clock {1e3 / ns:.2f} MHz, card memory ideal (5..40 clocks of "
             "read latency, no pauses; sim/tb/net/bench_onic_ring_cards.py). Step: every card's ap_start (written in "
             "one clock) to the last interrupt of the last card (polled every clock; each interrupt's AXI-Lite "
             "handling adds a few clocks), against the wire model; every step checked as test_onic_ring_cards "
             "checks it (every owner's p, m, v and out buffer, every card's gathered buffer against a lossless "
             "ring of `hls.net.card.Card`s, STATUS of both kernels, counters against the switch ports, no "
             "retransmission, no transmit underflow). Chunks of "
             f"{', '.join(sorted({str(x['ag_packets']) for x in rg['steps']}))} AG packets, within the all-gather "
             f"bound (transmit slots + receive slots = "
             f"{rep.get('ag_packets_bound', '-')}: beyond it rings of RTL cards deadlock in hop-major order, "
             "the order of these one-phase steps; round-major order runs larger chunks in two-phase steps; the "
             "measured commit is below). The last column is the one-RTL-card step above "
             f"({rep['card'].get('spec', {}).get('lanes', '-')} lanes). Runs per N (seeds 1.., medians): "
             f"{', '.join(str(x.get('runs', '-')) for x in rg['steps'])}.",
             "", "| N | S elements | step, N RTL cards | step / model | wire model | clocks | simulation speed, "
             "kernel clocks per wall second | retransmitted | one RTL card + N - 1 peers |",
             "|---|---|---|---|---|---|---|---|---|"]
    for x in rg["steps"]:
        c = card_steps.get(x["n"])
        step = "-" if x["step_us"] is None else f"{x['step_us']:.2f} us"
        over = "-" if x["over_model"] is None else f"{x['over_model']:.3f}x"
        model = "-" if x["model_us"] is None else f"{x['model_us']:.2f} us"
        lines.append(f"| {x['n']} | {x['size']:,} | {step} | {over} | {model} | {_num(x['step_clocks'])} | "
                     f"{_num(x.get('clocks_per_s'))} | {_num(x.get('retransmitted_bytes'))} B | "
                     f"{'-' if c is None else format(c['step_us'], '.2f') + ' us'} |")
    return lines


def _rounds_lines(rep: dict[str, Any], ns: float) -> list[str]:
    rd = rep.get("rounds")
    if not rd or not rd.get("steps"):
        return []
    lines = ["", f"ROUND-MAJOR ORDER on N RTL cards (design.md 8.2): the ring build above ({rd['cards']} onic_cards, "
             f"{rd['lanes']}-lane Adam kernels, the same buffers: hop-major chunks must have fewer than "
             f"{rd['bound']} packets per flow, one-phase steps at most {rd.get('one_phase', '-')} RS packets, the "
             f"receive slots: `hls.net.ring_bound`), N = {rd['n']}, payload {rep['step_payload']}, seed 1. Each "
             "chunk in hop-major order, one-phase within the one-phase bound and two-phase (no clip) under the "
             "hop-major bound, and in round-major order with B packets per round (more than one round runs only "
             "as a two-phase step: the host runs both phases and ignores the entries). Phase one: every card's "
             "ap_start to the last card's phase-one done (the "
             "reduce-scatter, the owner's sum written to card memory, the scalar exchange: the network alone), "
             "against the wire model's reduce-scatter; phase two (the owner's update from card memory at "
             f"{rd['lanes']} elements a clock, the all-gather) starts on each card at its own phase-one done, so "
             "the step less phase one is not phase two's length. Every step checked as the ring rows (bit for bit, "
             "lossless counters).",
             "", "| packets per flow | S elements | order | step | step / model | phase one | phase one / RS model "
             "| RS model | clocks | simulation speed, clocks per wall second |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for x in rd["steps"]:
        order = f"round-major, B = {x['segment']}" if x["segment"] else \
            ("hop-major, two-phase" if x["two_phase"] else "hop-major, one-phase")
        one = "-" if x["phase_one_clocks"] is None else _us(x["phase_one_clocks"], ns)
        over1 = "-" if x["phase_one_over_rs_model"] is None else f"{x['phase_one_over_rs_model']:.3f}x"
        step = "-" if x["step_us"] is None else f"{x['step_us']:.2f} us"
        over = "-" if x["over_model"] is None else f"{x['over_model']:.3f}x"
        lines.append(f"| {x['packets']} | {x['size']:,} | {order} | {step} | {over} | {one} | {over1} | "
                     f"{x['rs_model_us']:.2f} us | {_num(x['step_clocks'])} | {_num(x.get('clocks_per_s'))} |")
    return lines


def _bf16_lines(rep: dict[str, Any]) -> list[str]:
    b = rep.get("bf16")
    if not b:
        return []
    lines = ["", "bf16 wire and bf16 parameters, stand-in (the network kernel built with WIRE_BF16 = PARAM_BF16 = 1, "
             "the stand-in Adam kernel in bf16; the same packets per chunk as fp32, so twice the elements), defined "
             f"as the fp32 rows. Payload line-rate fraction (N = {rep['line_world']}, one step):", "",
             *_line_table(b.get("line") or []), "", f"bf16 step time (payload {rep['step_payload']}):", "",
             "| N | S elements | step | wire model | step / model | clocks |", "|---|---|---|---|---|---|"]
    for x in b.get("steps") or []:
        lines.append(f"| {x['n']} | {x['size']:,} | {x['step_us']:.2f} us | {x['model_us']:.2f} us | "
                     f"{x['over_model']:.3f}x | {x['step_clocks']:,.0f} |")
    return lines


def _line_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| payload | S elements | framing cap | transmit RS / AG / both | receive RS / AG / both | ACK share of the "
        "RS line | ACK frames sent / data frames received | transmit without the ACK time | dropped for lack of "
        "buffer | TX underflows | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in rows:
        lines.append(f"| {x['payload']} | {x['size']:,} | {x['cap']:.1%} | {_pct(x['tx_rs'])} / {_pct(x['tx_ag'])} / "
                     f"{_pct(x['tx'])} | {_pct(x['rx_rs'])} / {_pct(x['rx_ag'])} / {_pct(x['rx'])} | "
                     f"{_pct(x['ack_share'])} | {x.get('acks_out', '-')} / {x.get('data_in', '-')} | "
                     f"{_pct(x['tx_without_acks'])} | {x['dropped_overflow']} | "
                     f"{x['tx_underflows']} | "
                     f"{'met' if x['meets_goal'] else 'NOT met'} |")
    return lines


def _card_step_line(x: dict[str, Any], stand_in: list[dict[str, Any]]) -> str:
    s = next((y for y in stand_in if y["n"] == x["n"]), None)
    return (f"| {x['n']} | {x['size']:,} | {x['step_us']:.2f} us | {x['over_model']:.3f}x | "
            f"{'-' if s is None else format(s['step_us'], '.2f') + ' us'} | "
            f"{'-' if s is None else format(s['over_model'], '.3f') + 'x'} | {x['model_us']:.2f} us | "
            f"{x['step_clocks']:,.0f} |")


def _card_latency_line(x: dict[str, Any], stand_in: list[dict[str, Any]], ns: float) -> str:
    s = next((y for y in stand_in if y["payload"] == x["payload"]), {})
    t, st = x["turnaround_clocks"], x["streaming_turnaround_clocks"]
    return (f"| {x['payload']} | {_num(x['hop_rs_clocks'])} clocks | {_num(x['hop_ag_clocks'])} clocks | "
            f"{_num(t)} clocks = {_us(t, ns)} ({_num(s.get('turnaround_clocks'))}) | "
            f"{_num(x['streaming_hop_rs_clocks'])} ({_num(x['streaming_hop_rs_min_clocks'])}) clocks | "
            f"{_num(st)} clocks{'' if st is None else ' = ' + _us(st, ns)} "
            f"({_num(s.get('streaming_turnaround_clocks'))}) | {_num(x['streaming_update_packet_clocks'])} "
            f"({_num(x['streaming_update_packet_max_clocks'])}) clocks "
            f"({_num(s.get('streaming_update_packet_clocks'))}) |")


def format_report(rep: dict[str, Any]) -> str:
    return "\n".join(markdown(rep))


# where each part's figures live in the report (`merge`)
PART_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "card": (("card", "spec"), ("card", "line"), ("card", "steps"), ("card", "latency"), ("card", "speed")),
    "stand-in": (("line",), ("steps",), ("drops",), ("latency",), ("speed",)),
    "card-drops": (("card", "drops"),), "card-hbm": (("card_hbm",),), "ring": (("ring",),), "bf16": (("bf16",),),
    "rounds": (("rounds",),)}
_RUN_KEYS = ("line_rate_gbps", "latency_ns", "window", "rank", "line_world", "step_payload", "drop_world", "params",
             "repeats", "goal_of_cap", "ag_packets_bound", "clock_mhz", "load_average", "wall_s", "command")


def part_of(row: dict[str, Any]) -> str:
    """The part a row was measured by (rows of reports before `part` existed: from their kernel)."""
    return row.get("part") or ("stand-in" if row.get("adam") == "stand-in" else "card")


def merge(previous: dict[str, Any] | None, rep: dict[str, Any], parts: tuple[str, ...]) -> dict[str, Any]:
    """`rep`'s `parts` over `previous` (an earlier report, bench/results.json's `rtlnet`): the other parts'
    figures and rows kept, with the commit they were measured at (`measured`; "not recorded" for a
    report older than that record); exactness and the goal over every kept and new row."""
    if not previous:
        return rep
    out = json.loads(json.dumps(previous, default=str))
    out.setdefault("card", {})
    for part in parts:
        for path in PART_KEYS[part]:
            src, dst = rep, out
            for k in path[:-1]:
                src, dst = src[k], dst.setdefault(k, {})
            dst[path[-1]] = src[path[-1]]
    for k in _RUN_KEYS:
        if k in rep:
            out[k] = rep[k]
    kept = {part_of(r) for r in out.get("rows", [])} - set(parts)
    out["measured"] = {p: {"commit": "not recorded"} for p in sorted(kept)} | (previous.get("measured") or {})
    out["measured"] = {p: m for p, m in out["measured"].items() if p in kept} | rep["measured"]
    out["rows"] = [r for r in out.get("rows", []) if part_of(r) not in parts] + rep["rows"]
    out["exact"] = all(r["exact"] for r in out["rows"])
    out["mismatches"] = _mismatches(out["rows"])
    out["rto_us"] = sorted({r["rto_us"] for r in out["rows"]})
    out["meets_goal"] = _meets_goal(out)
    return out


def run(args: argparse.Namespace, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Measure what `optimusnic bench rtlnet` asks for and print it (the report module's `rtlnet_run`
    then replaces this section of bench/results.md); `previous` (the last report) gives the parts not
    measured."""
    worlds = tuple(getattr(args, "worlds", None) or WORLDS)
    repeats = max(1, min(getattr(args, "repeats", 3) or 3, 9))
    parts = tuple(getattr(args, "parts", None) or PARTS)
    rep = collect(worlds=worlds, repeats=repeats, log=lambda s: print(s, file=sys.stderr, flush=True), parts=parts)
    rep["command"] = ("optimusnic bench rtlnet"
                      + (f" --worlds {','.join(map(str, worlds))}" if worlds != WORLDS else "")
                      + f" --repeats {repeats}"
                      + (f" --parts {','.join(parts)}" if set(parts) != set(PARTS) else ""))
    for m in rep["measured"].values():
        m["command"] = rep["command"]
    if set(parts) != set(PARTS):  # the other parts' figures from the last full (or partial) run
        rep = merge(previous, rep, parts)
    if getattr(args, "json", False):
        json.dump(rep, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(format_report(rep))
    return rep
