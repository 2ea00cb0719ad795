"""`optimusnic bench rtlnet`: the card's network RTL (`onic_net_kernel`) at line rate, in cocotb on Verilator.

Every figure comes from ring steps of ONE RTL card (rank `RANK`) beside N - 1 software peers
(`sim/tb/models/soft_peer.py`: `hls.net.card.Card`, the same bytes) through the seeded switch of
`sim/tb/models/eth_switch.py` (100 Gb/s links, 500 ns latency), the card's MAC streams on the
`eth_port` adapters (the transmit side serialized at 100 Gb/s, the receive side delivering each
frame's beats back to back, no TREADY), the kernel clock at 300 MHz (3334 ps: 299.94 MHz), 512
bits a beat. The cocotb bench is `sim/tb/net/bench_onic_net_kernel.py`: one simulation per step,
each checked bit for bit (the reduced chunk, the gathered buffer in card memory, every peer's
gathered parameters) against a lossless reference ring; a mismatch makes the report say so and
the command exit 1. The Adam kernel beside the card is a reference STAND-IN on the card's streams
(test_onic_net_kernel's `reference_adam_streams`), not the generated Adam RTL: the update turnaround
includes no real kernel latency.

Figures (simulated time; only the simulation speed depends on the machine):
- line-rate fraction per port at payload 1408 and 8192 bytes (N = 4, fp32): the RTL card's
  transmit line, rebuilt from the clock of each frame's last beat at m_axis_mac0 with the
  adapter's rule (a frame starts when its last beat is in and the line is free): payload bytes of
  the RS (AG) data frames, first transmissions, over the line time from the first RS (AG) frame's
  start to the last one's end, against the framing cap P / (P + 88); ACK frames on the same
  line are inside those spans. The receive side alike, from each frame's arrival on the line,
  with the card's `dropped_overflow` (a frame refused for lack of buffer).
- step time for N = 2, 3, 4 (payload 1408, fp32): the host's ap_start write to the last card
  done (the RTL card's interrupt, each peer's `done`), against the wire model `wire_model_s`.
- per-hop latency: the first beat of an RS partial at s_axis_mac0 to the first beat of the
  partial the card forwards (hop + 1, same chunk and offset) at m_axis_mac0; the AG forwarding
  alike; with the card's line idle (N = 4 steps of one-packet chunks) and while streaming (the
  line-rate steps: mostly queueing behind the card's own frames); update turnaround: the last
  beat of the card's own chunk's last RS packet in to the first beat of its first AG frame out
  (stand-in kernel, and the AG release after the RS flow is acknowledged).
- goodput and retransmitted bytes at drop rates 0, 1e-3, 1e-2 (the switch's seeded drops on
  every egress link; N = 3): the RTL card's first-time payload bytes over the step time, and its
  retransmitted payload bytes (counter `retransmitted_bytes`), the peers' retransmitted frame bytes.
- simulation speed: kernel clocks simulated per wall second for each N (the whole bench: RTL,
  switch, peers, monitors).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hls.net import wire
from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import simulators
from hls.rtl_sources import read_filelist

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
# 32 receive slots of up to 128 payload beats in a RAM of exactly 32 x 128 beats (onic_net_rx.v's rule),
# 32 retransmit slots of 256 beats per flow.
BENCH_PARAMS = {"RX_PAYLOAD_DEPTH_LOG2": 12, "RX_SLOT_LOG2": 5, "RX_FRAME_BEATS": 128, "TX_SLOTS_LOG2": 5,
                "TX_BEATS_LOG2": 8, "TX_URAM": 0, "TX_FIFO_LOG2": 9, "RD_FIFO_LOG2": 8, "WR_FIFO_LOG2": 7,
                "MAX_BURST": 64}
OPCODES = {1: "rs", 2: "ag", 3: "ack", 4: "nak"}
Log = Callable[[str], None] | None


class BenchFailed(RuntimeError):
    """The simulation itself failed (not a figure: a build error, a hang, an exception in the bench)."""


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


def simulate(case: dict[str, Any], params: dict[str, int] | None = None, build: str | None = None) -> dict[str, Any]:
    """One ring step of `case` in cocotb (sim/tb/net/bench_onic_net_kernel.py); its raw record."""
    if not simulators.available("verilator"):
        from hls.errors import ToolMissing

        raise ToolMissing("bench rtlnet: verilator is not installed (make deps)")
    params = dict(params or BENCH_PARAMS)
    bdir = build_dir(params, build)
    bdir.mkdir(parents=True, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix="rtlnet-", suffix=".json", dir=bdir)
    os.close(fd)
    tag = f"n{case['n']}-p{case['payload']}-s{case['size']}-d{case.get('drop', 0)}-seed{case.get('seed', 1)}"
    log_file = bdir.parent / f"onic_net_kernel-bench-{tag}.log"
    old = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"  # as tests/hls/rtl/test_net_kernel.py builds it
    try:
        t0 = time.perf_counter()
        xml = simulators.run_cocotb(
            sources=read_filelist(RTL_DIR / "net" / "net_kernel.f"), toplevel="onic_net_kernel",
            test_module="bench_onic_net_kernel", test_dir=TB_DIR / "net", build_dir=bdir, simulator="verilator",
            parameters={"WIRE_BF16": int(case.get("wire_dtype") == "bf16"),
                        "PARAM_BF16": int(case.get("param_dtype") == "bf16"), **params},
            extra_env={"ONIC_BENCH": json.dumps(case), "ONIC_BENCH_OUT": out}, testcase="bench_ring",
            log_file=log_file)
        run_s = time.perf_counter() - t0
        ran, failed = simulators.check_results(xml)
        text = Path(out).read_text()
        if ran != 1 or failed or not text:
            raise BenchFailed(f"bench rtlnet: the simulation of {tag} failed; see {log_file}")
        raw = json.loads(text)
    finally:
        if old is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = old
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
    own_last = [f[0] + (64 + f[7] + 63) // 64 - 1 for f in fin
                if f[1] == 1 and f[4] == r and f[3] == n - 2 and f[2] & 1 and (first_ag is None or f[0] < first_ag)]
    turnaround = first_ag - max(own_last) if first_ag is not None and own_last else None
    c = raw.get("counters") or {}
    unique_out = sum(x["payload_bytes"] for x in (line["tx_rs"], line["tx_ag"]) if x)
    model = wire_model_s(n, size, payload, wdt, pdt, latency_s=case.get("latency_s", LATENCY_S))
    step_s = step_clocks * clock_s
    peers = raw.get("peer_counters") or {}
    return {
        "n": n, "rank": r, "payload": payload, "size": size, "length": raw["length"], "wire_dtype": wdt,
        "param_dtype": pdt, "drop": case.get("drop", 0.0), "seed": case.get("seed"),
        "exact": raw["exact"], "mismatch": raw.get("mismatch"), "error": raw.get("error"), "status": raw.get("status"),
        "step_clocks": step_clocks, "step_s": step_s, "model": model, "step_over_model": step_s / model["step_s"],
        "line": line, "framing_cap": framing_cap(payload),
        # the card's ACK frames per data frame it received (coalesced: K frames a cumulative ACK)
        "acks_out": sum(1 for f in fout if f[1] == 3), "data_in": sum(1 for f in fin if f[1] in (1, 2)),
        "hop_clocks_rs": _median(rs_hops), "hop_clocks_rs_min": min(rs_hops) if rs_hops else None,
        "hop_clocks_ag": _median(ag_hops), "hop_samples": len(rs_hops) + len(ag_hops),
        "turnaround_clocks": turnaround,
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
    }


def measure_case(n: int, payload: int, packets: int, drop: float = 0.0, seed: int = 1, log: Log = None,
                 params: dict[str, int] | None = None, window: int = WINDOW,
                 build: str | None = None, rto_s: float | None = None) -> dict[str, Any]:
    case = {"n": n, "rank": min(RANK, n - 1), "payload": payload, "size": chunk_size(payload, packets),
            "drop": drop, "seed": seed, "window": window, "rto_s": rto_s or rto_for(payload, window),
            "latency_s": LATENCY_S}
    _log(log, f"[bench rtlnet] N={n} P={payload} S={case['size']} drop={drop:g} seed={seed} ...")
    row = figures(simulate(case, params, build))
    _log(log, f"[bench rtlnet]   {row['step_clocks']:,} clocks = {row['step_s'] * 1e6:.2f} us "
              f"({row['step_over_model']:.3f}x the wire model), exact {row['exact']}, "
              f"{row['sim_clocks_per_s']:,.0f} clocks/s, {row['run_s']:.0f} s")
    return row


# ---- the whole bench ---------------------------------------------------------------------------------------
def collect(worlds: tuple[int, ...] = WORLDS, payloads: tuple[int, ...] = PAYLOADS,
            drops: tuple[float, ...] = DROP_RATES, repeats: int = 3, packets: int = PACKETS_PER_CHUNK,
            step_packets: int = STEP_PACKETS_PER_CHUNK, line_world: int = LINE_WORLD, drop_world: int = DROP_WORLD,
            log: Log = None, params: dict[str, int] | None = None, window: int = WINDOW,
            build: str | None = None) -> dict[str, Any]:
    """Every figure in one run; repeated cases (seeds 1..repeats) report medians. `params` (the card's
    buffers), `window` and `build` (a Verilator model's folder to share) are for a small CI run."""
    t0 = time.perf_counter()
    kw = {"log": log, "params": params, "window": window, "build": build}
    step_payload = min(wire.DEFAULT_PAYLOAD_BYTES, max(payloads))
    line_rows = [measure_case(line_world, p, packets, seed=1, **kw) for p in payloads]
    # one packet per chunk: a partial arrives when the card's line is idle (its own frame of the hop
    # before has gone), so first beat in to first beat out is the card's own forwarding latency
    hop_rows = [measure_case(line_world, p, 1, seed=1, **kw) for p in payloads]
    step_rows = [measure_case(n, step_payload, step_packets, seed=s, **kw)
                 for n in worlds for s in range(1, repeats + 1)]
    drop_rows = [measure_case(drop_world, step_payload, packets, drop=d, seed=s, **kw)
                 for d in drops for s in range(1, repeats + 1)]
    rows = line_rows + hop_rows + step_rows + drop_rows
    report: dict[str, Any] = {
        "clock_mhz": 1e6 / rows[0]["clock_ps"],
        "line_rate_gbps": LINE_RATE / 1e9, "latency_ns": LATENCY_S * 1e9, "window": window,
        "rto_us": sorted({r["rto_us"] for r in rows}),
        "rank": RANK, "line_world": line_world, "step_payload": step_payload, "drop_world": drop_world,
        "params": dict(params or BENCH_PARAMS), "repeats": repeats, "goal_of_cap": GOAL_OF_CAP,
        "adam": "reference stand-in on the card's streams (not the Adam RTL kernel)",
        "line": [_line_summary(r) for r in line_rows],
        "steps": _by(step_rows, "n", lambda rs: _step_summary(rs)),
        "drops": _by(drop_rows, "drop", lambda rs: _drop_summary(rs)),
        "latency": _latency_summary(hop_rows, line_rows),
        "speed": _by(step_rows, "n", lambda rs: {"clocks_per_s": _median([r["sim_clocks_per_s"] for r in rs])}),
        "exact": all(r["exact"] for r in rows),
        "mismatches": [f"N={r['n']} P={r['payload']} drop={r['drop']} seed={r['seed']}: "
                       f"{r['error'] or r['mismatch'] or 'STATUS ' + str(r['status'])}"
                       for r in rows if not r["exact"]],
        "rows": rows,
        "load_average": os.getloadavg(),
        "wall_s": time.perf_counter() - t0,
    }
    report["meets_goal"] = bool(report["line"]) and all(x["meets_goal"] for x in report["line"])
    return report


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
    return {"size": rs[0]["size"], "payload": rs[0]["payload"], "runs": len(rs),
            "step_us": _median([r["step_s"] * 1e6 for r in rs]),
            "model_us": _median([r["model"]["step_s"] * 1e6 for r in rs]),
            "over_model": _median([r["step_over_model"] for r in rs]),
            "step_clocks": _median([r["step_clocks"] for r in rs]), "exact": all(r["exact"] for r in rs)}


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
    lines = [
        HEADING,
        "",
        f"`{rep.get('command', 'optimusnic bench rtlnet')}`: ONE RTL card (`onic_net_kernel`, rank {rep['rank']}) "
        "beside N - 1 software peers (`hls.net.card.Card`, the same bytes) through the seeded switch of "
        f"sim/tb/models ({rep['line_rate_gbps']:g} Gb/s links, {rep['latency_ns']:g} ns latency), cocotb on "
        f"Verilator, kernel clock {rep['clock_mhz']:.2f} MHz, 512-bit MAC streams on the `eth_port` adapters; window "
        f"{rep['window']} packets per flow, RTO {' / '.join(f'{x:.3g}' for x in rep['rto_us'])} us "
        "(`rto_for`: three windows of full frames, at least 20 us); the card's buffers for 8 KiB payloads "
        f"(receive: {2 ** p['RX_SLOT_LOG2']} slots of up to {p['RX_FRAME_BEATS']} beats; retransmit: "
        f"{2 ** p['TX_SLOTS_LOG2']} slots of {2 ** p['TX_BEATS_LOG2']} beats per flow). fp32 wire and parameters. "
        f"The Adam kernel beside the card is a {rep['adam']}. Every step checked bit for bit (the reduced chunk, the "
        "gathered buffer in card memory, every peer's gathered parameters) against a lossless reference ring: "
        + ("all exact." if rep["exact"] else "MISMATCHES: " + "; ".join(rep["mismatches"]) + "."),
        "Times are simulated (exact, independent of the machine); only the simulation speed depends on the load "
        f"(load average {', '.join(f'{x:.1f}' for x in rep['load_average'])} at the end, 2 shared cores). "
        f"Repeated cases: seeds 1..{rep['repeats']}, medians.",
        "",
        f"Payload line-rate fraction per port (N = {rep['line_world']}, one step each): payload bytes of the RS "
        "(AG) data frames, first transmissions, over the line time from the first such frame's start to the last "
        "one's end "
        "(the RTL card's own ACK frames on the same line included: one per data frame received, ACK coalescing "
        "off, `ACK_EVERY` = 1); transmit: the card's "
        "m_axis_mac0 serialized at 100 Gb/s; receive: the frames arriving at its s_axis_mac0 from its "
        "predecessor. Goal: the transmit "
        f"fraction at {rep['goal_of_cap']:.0%} of the framing cap P / (P + 88) or more.",
        "",
        "| payload | S elements | framing cap | transmit RS / AG / both | receive RS / AG / both | ACK share of the "
        "RS line | ACK frames sent / data frames received | transmit without the ACK time | dropped for lack of "
        "buffer | TX underflows | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in rep["line"]:
        lines.append(f"| {x['payload']} | {x['size']:,} | {x['cap']:.1%} | {_pct(x['tx_rs'])} / {_pct(x['tx_ag'])} / "
                     f"{_pct(x['tx'])} | {_pct(x['rx_rs'])} / {_pct(x['rx_ag'])} / {_pct(x['rx'])} | "
                     f"{_pct(x['ack_share'])} | {x.get('acks_out', '-')} / {x.get('data_in', '-')} | "
                     f"{_pct(x['tx_without_acks'])} | {x['dropped_overflow']} | "
                     f"{x['tx_underflows']} | "
                     f"{'met' if x['meets_goal'] else 'NOT met'} |")
    lines += [
        "",
        f"Step time (payload {rep['step_payload']}): the host's ap_start write to the last card done, against "
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
        f"Latency inside the card (clocks of {ns:.3f} ns), lossless, N = {rep['line_world']}: per hop, the first "
        "beat of an RS partial in at s_axis_mac0 to the first beat of the partial the card forwards (hop + 1, same "
        "chunk and offset) at m_axis_mac0, AG forwarding alike; update turnaround, the last beat of the card's "
        "own chunk's last RS packet in to the first beat of its first AG frame out (the stand-in kernel adds no "
        "Adam latency; the AG release, the card's RS flow acknowledged by its successor, is a round trip over "
        "the switch). Idle line: one-packet chunks, so a partial never waits for the card's line. Streaming: "
        "the line-rate steps above, median (min) over every forwarded packet; a partial waits behind the "
        "frames ahead of it on the card's line (its own chunk at hop 0), so this is mostly queueing.",
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
        f"Goodput under loss (N = {rep['drop_world']}, payload {rep['step_payload']}): the switch drops each "
        "frame on every egress link with the given probability (seeded); goodput is the RTL card's first-time "
        "payload bytes over the step time; "
        "retransmitted: its payload bytes sent again (counter `retransmitted_bytes`), and the peers' frame bytes.",
        "",
        "| drop rate | frames dropped (all runs) | step | goodput per port | retransmitted by the RTL card | "
        "by the peers | RTL timeouts |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in rep["drops"]:
        lines.append(f"| {x['drop']:g} | {x['switch_dropped']} | {x['step_us']:.2f} us | {x['goodput_gbps']:.1f} Gb/s "
                     f"| {x['retransmitted_payload_bytes']:,.0f} B of {x['payload_bytes_out']:,.0f} | "
                     f"{x['peer_retransmitted_bytes']:,.0f} B | {x['timeouts']:g} |")
    lines += [
        "",
        "| simulation speed | " + " | ".join(f"N = {x['n']}" for x in rep["speed"]) + " |",
        "|---|" + "---|" * len(rep["speed"]),
        "| kernel clocks per wall second (one RTL card, N - 1 software peers) | "
        + " | ".join(_num(x["clocks_per_s"]) for x in rep["speed"]) + " |",
        "",
        f"Goal (transmit line-rate fraction within 2 % of the framing cap at every payload): "
        f"{'met' if rep['meets_goal'] else 'NOT met'}. Wall time of this section: {rep['wall_s']:.0f} s.",
        "",
    ]
    return lines


def format_report(rep: dict[str, Any]) -> str:
    return "\n".join(markdown(rep))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure what `optimusnic bench rtlnet` asks for and print it (the report module's `rtlnet_run`
    then replaces this section of bench/results.md)."""
    worlds = tuple(getattr(args, "worlds", None) or WORLDS)
    repeats = max(1, min(getattr(args, "repeats", 3) or 3, 9))
    rep = collect(worlds=worlds, repeats=repeats, log=lambda s: print(s, file=sys.stderr, flush=True))
    rep["command"] = ("optimusnic bench rtlnet"
                      + (f" --worlds {','.join(map(str, worlds))}" if worlds != WORLDS else "")
                      + f" --repeats {repeats}")
    if getattr(args, "json", False):
        json.dump(rep, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(format_report(rep))
    return rep
