"""`optimusnic bench rtlnet` (part of `make bench`): the network RTL card in cocotb on Verilator beside
software peers, its figures and the bit-exactness check of every step, at a tiny size: the card with
the Adam RTL kernel (`onic_card`, tests/hls/rtl/test_card_rtl.py's 2-lane spec and Verilator model)
and the network kernel with the stand-in (tests/hls/rtl/test_net_kernel.py's model), both with the
card's small test buffers. No timing is asserted: the figures are simulated time, checked for what
the protocol fixes (no frame lost for lack of buffer, no transmit underflow, fractions under the
framing cap, first-time payload bytes). The tiny run also measures the card under loss
(`card-drops`); the N-RTL-card rows (`ring`: a four-card build, tens of minutes) and the bf16 rows
are checked here through their pure parts (figures, tables, `merge` of a partial run, `--parts`).
"""

from __future__ import annotations

import copy
import math

import pytest

from hls.memory_plan import channel_usable
from hls.rtl import ring_top, simulators
from hls.spec import KernelSpec
from hls.targets import get_target
from optimusnic.bench import report as bench_report
from optimusnic.bench import rtlnet
from optimusnic.cli.bench import BENCHES

# tests/hls/rtl/test_net_kernel.py's parameters and model folder: 8 receive slots of up to 4 payload
# beats, 16-beat retransmit slots (a window of 8 packets of at most 192 bytes here)
SMALL = ring_top.SIM_PARAMS
SMALL_BUILD = "onic_net_kernel-fp32-verilator"
# tests/hls/rtl/test_card_rtl.py's fp32 card, in folders of its own: that test renders the card with two
# network stripes into its folder outside the build lock, so sharing it would race with a concurrent run
CARD = KernelSpec(optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="stream", lanes=2, stripes=1,
                  out_sink="memory+stream", name="onic_card_adamw")
CARD_BUILD = "onic_card-fp32-bench"
HBM_BUILD = "onic_card-fp32-bench-hbm"  # the same card at the rail plan's 2 network stripes (192-byte payloads)


def test_wire_model_and_caps() -> None:
    assert rtlnet.rto_for(1408) == rtlnet.RTO_S and rtlnet.rto_for(8192) == pytest.approx(3 * 32 * 8280 * 8 / 100e9)
    assert rtlnet.framing_cap(1408) == pytest.approx(0.9412, abs=1e-4)
    assert rtlnet.framing_cap(8192) == pytest.approx(0.9894, abs=1e-4)
    assert rtlnet.chunk_size(1408, 16) == 5632 and rtlnet.chunk_size(8192, 16) == 32768
    m = rtlnet.wire_model_s(4, 5632, 1408)
    chunk = 16 * (1408 + 88) * 8 / 100e9
    last = (1408 + 88) * 8 / 100e9 + 500e-9
    assert m["rs_s"] == pytest.approx(3 * chunk + last) and m["step_s"] == pytest.approx(2 * (3 * chunk + last))
    bf16 = rtlnet.wire_model_s(4, 5632, 1408, "bf16", "fp32")
    assert bf16["rs_s"] == pytest.approx(3 * 8 * (1408 + 88) * 8 / 100e9 + last) and bf16["ag_s"] == m["ag_s"]
    assert "rtlnet" in BENCHES


def test_line_schedule() -> None:
    """The transmit line rebuilt with the adapters' rule: back to back when frames are ready early."""
    per = (1500 + 20) * 8e12 / 100e9
    spans = rtlnet._line([[0, 1500], [0, 1500], [10 * per, 1500]])
    assert spans == [(0.0, per), (per, 2 * per), (10 * per, 11 * per)]
    frames = [[0, 1, 0, 0, 0, 0, 0, 1432], [1, 1, 0, 0, 0, 1, 358, 1432], [2, 1, 0, 0, 0, 1, 358, 1432]]
    f = rtlnet._fraction(frames, spans, 1)
    assert f is not None and f["unique"] == 2 and f["payload_bytes"] == 2 * 1432  # the resent seq 1 once
    assert f["fraction"] == pytest.approx(2 * 1432 * 8e12 / 100e9 / (11 * per))


def _ring_raw(n: int, clocks: int | None, seed: int = 1) -> dict:
    return {"case": {"n": n, "payload": 1408, "size": 5632, "seed": seed, "rto_s": 20e-6, "latency_s": 500e-9,
                     "drop": 0.0},
            "clock_ps": 3334, "wire_dtype": "fp32", "param_dtype": "fp32", "exact": clocks is not None,
            "error": None if clocks else "not done", "mismatch": None, "step_clocks": clocks, "status": [0] * n,
            "counters": [{"retransmitted_bytes": 0, "timeouts": 0}] * n, "sim_clocks": 3000, "wall_s": 2.0,
            "run_s": 30.0, "log": "x.log", "lanes": 16}


def test_ring_figures_and_their_table() -> None:
    """The N-RTL-card rows: the step against the wire model, the simulation speed, the AG packet bound."""
    row = rtlnet.ring_figures(_ring_raw(3, 3000))
    model = rtlnet.wire_model_s(3, 5632, 1408)["step_s"]
    assert row["part"] == "ring" and row["adam"] == "ring4-rtl16" and row["exact"]
    assert row["step_s"] == pytest.approx(3000 * 3334e-12) and row["step_over_model"] == pytest.approx(
        3000 * 3334e-12 / model)
    assert row["sim_clocks_per_s"] == 1500 and row["retransmitted_bytes"] == 0
    hung = rtlnet.ring_figures(_ring_raw(3, None))
    assert hung["step_s"] is None and hung["step_over_model"] is None and not hung["exact"]
    assert rtlnet._step_summary([hung])["step_us"] is None  # a step that never ended: no time, not exact
    assert rtlnet._step_summary([hung, row])["runs"] == 1
    assert rtlnet.ag_packets_bound() == 64 and rtlnet.ag_packets_bound(SMALL) == 24
    rep = {"card": {"spec": {"optimizer": "adamw", "grad_dtype": "fp32", "lanes": 16},
                    "steps": [{"n": 3, "step_us": 11.7}]},
           "ring": {"cards": 4, "steps": [rtlnet._step_summary([row]) | {"n": 3, "clocks_per_s": 1500,
                                                                         "retransmitted_bytes": 0, "ag_packets": 16}]},
           "ag_packets_bound": 64}
    md = rtlnet._ring_lines(rep, 3.334)
    assert "Chunks of 16 AG packets, within the all-gather bound " \
        "(transmit slots + receive slots = 64" in md[1]
    assert md[-1].startswith("| 3 | 5,632 | 10.00 us | ") and md[-1].endswith("| 3,000 | 1,500 | 0 B | 11.70 us |")
    assert rtlnet._ring_lines({"ring": None}, 3.334) == []


def test_rounds_cases_figures_and_table() -> None:
    """The `rounds` part: hop-major (one- and two-phase) only under the bound, round-major at every segment;
    phase one (the network alone) against the wire model's reduce-scatter; a segment at the bound refused."""
    from hls.net.ring_bound import ChunkOverBound

    cases = rtlnet.rounds_cases()
    assert [(c["packets"], c["segment"], c["two_phase"]) for c in cases] == [
        (24, 0, False), (24, 0, True), (24, 8, True),
        (48, 0, True), (48, 31, True), (48, 8, True), (128, 31, True), (128, 8, True)]
    for c in cases:  # every case runs: none at the deadlock bound of its order
        rtlnet.check_ring_case(3, 1408, c["packets"], segment=c["segment"], two_phase=c["two_phase"])
    with pytest.raises(ChunkOverBound, match="ring of 3 RTL cards"):
        rtlnet.check_ring_case(3, 1408, 128, two_phase=True)  # hop-major: 128 packets >= 64
    with pytest.raises(ChunkOverBound, match="over the one-phase bound of 32"):
        rtlnet.check_ring_case(3, 1408, 33)  # one phase: 33 RS packets > the 32 receive slots
    rtlnet.check_ring_case(3, 1408, 32)
    with pytest.raises(ChunkOverBound):
        rtlnet.check_ring_case(3, 1408, 128, segment=32)  # 2 x 32 is not under 64
    raw = _ring_raw(3, 9000)
    raw["case"] |= {"size": 16896, "segment": 8, "two_phase": True}
    raw |= {"part": "rounds", "phase_one_clocks": 3000}
    row = rtlnet.ring_figures(raw)
    rs_model = rtlnet.wire_model_s(3, 16896, 1408)["rs_s"]
    assert row["part"] == "rounds" and row["segment"] == 8 and row["two_phase"]
    assert row["phase_one_over_rs_model"] == pytest.approx(3000 * 3334e-12 / rs_model)
    assert rtlnet.part_of(row) == "rounds"
    hop = rtlnet.ring_figures(_ring_raw(3, 8000) | {"part": "rounds"})
    assert not hop["two_phase"] and hop["segment"] == 0 and hop["phase_one_clocks"] is None
    summary = rtlnet._rounds_summary([row, hop])
    assert [(x["segment"], x["two_phase"], x["packets"]) for x in summary] == [(8, True, 48), (0, False, 16)]
    assert summary[0]["phase_one_clocks"] == 3000 and summary[1]["phase_one_over_rs_model"] is None
    md = rtlnet._rounds_lines({"rounds": {"cards": 4, "n": 3, "lanes": 2, "bound": 64, "one_phase": 32,
                                          "steps": summary},
                               "step_payload": 1408}, 3.334)
    assert "fewer than 64 packets per flow, one-phase steps at most 32 RS packets" in md[1]
    assert md[-2].startswith("| 48 | 16,896 | round-major, B = 8 | 30.01 us | ") and "| 10.00 us | " in md[-2]
    assert md[-1].startswith("| 16 | 5,632 | hop-major, one-phase | 26.67 us | ") and "| - | - |" in md[-1]
    assert rtlnet._rounds_lines({"rounds": None}, 3.334) == []


def test_merge_keeps_the_parts_not_measured() -> None:
    """A run of some parts (`--parts`) replaces their figures and rows; the others stay, with their commit."""
    def row(part: str, exact: bool = True) -> dict:
        return {"part": part, "adam": "stand-in" if part == "stand-in" else "rtl16", "n": 3, "payload": 1408,
                "drop": 0.0, "seed": 1, "exact": exact, "error": None, "mismatch": "bad" if not exact else None,
                "status": 0, "rto_us": 20.0}

    old_card = row("card")
    del old_card["part"]  # rows of reports older than `part`
    previous = {"line": [{"meets_goal": False}], "steps": [], "drops": ["old drops"], "latency": [], "speed": [],
                "card": {"spec": {}, "line": [], "steps": ["old card steps"], "latency": [], "speed": [],
                         "drops": []},
                "rows": [old_card, row("stand-in", exact=False)], "exact": False, "mismatches": ["x"],
                "repeats": 3, "wall_s": 300.0}
    rep = {"card": {"drops": ["new card drops"]}, "ring": {"cards": 4, "steps": ["new ring"]}, "bf16": None,
           "rows": [row("card-drops"), row("ring")], "measured": {"card-drops": {"commit": "abc"},
                                                                 "ring": {"commit": "abc"}},
           "mismatches": [], "wall_s": 60.0, "line": [], "steps": [], "drops": [], "latency": [], "speed": []}
    out = rtlnet.merge(previous, rep, ("card-drops", "ring"))
    assert out["card"]["steps"] == ["old card steps"] and out["card"]["drops"] == ["new card drops"]
    assert out["drops"] == ["old drops"] and out["ring"]["steps"] == ["new ring"] and out["wall_s"] == 60.0
    assert [rtlnet.part_of(r) for r in out["rows"]] == ["card", "stand-in", "card-drops", "ring"]
    assert out["measured"] == {"card": {"commit": "not recorded"}, "stand-in": {"commit": "not recorded"},
                               "card-drops": {"commit": "abc"}, "ring": {"commit": "abc"}}
    assert out["exact"] is False and out["mismatches"] == ["stand-in N=3 P=1408 drop=0.0 seed=1: bad"]
    assert out["meets_goal"] is False
    again = rtlnet.merge(out, rep | {"rows": [row("stand-in")], "measured": {"stand-in": {"commit": "def"}}},
                         ("stand-in",))
    assert again["exact"] is True and again["measured"]["stand-in"] == {"commit": "def"}
    assert again["measured"]["ring"] == {"commit": "abc"}
    assert rtlnet.merge(None, rep, ("ring",)) is rep
    assert "ring: commit abc" in rtlnet._measured_text("ring", {"commit": "abc"})
    text = rtlnet._measured_text("ring", {"commit": "abc", "command": "c", "load_average": (1, 2, 3), "wall_s": 9})
    assert text == "ring: commit abc, `c`, load 1.0, 2.0, 3.0, 9 s"
    with pytest.raises(Exception, match="unknown part"):
        rtlnet.collect(parts=("nope",))


def test_ring_case_at_the_deadlock_bound_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring case whose chunk reaches transmit + receive slots packets (RS or AG) is one line, not a hang: in
    `measure_ring_case` and, for the ring part, in `collect` before any part is measured."""
    from hls.net.ring_bound import ChunkOverBound

    def ran(*args: object, **kw: object) -> None:
        raise AssertionError("a simulation started")

    monkeypatch.setattr(rtlnet, "simulate", ran)
    monkeypatch.setattr(rtlnet, "simulate_ring", ran)
    small = KernelSpec(grad_source="stream", out_sink="memory+stream", lanes=2, stripes=1)
    rtlnet.check_ring_case(3, 192, 23, SMALL, small, two_phase=True)  # 23 packets per flow: under 16 + 8
    rtlnet.check_ring_case(3, 192, 8, SMALL, small)  # one phase: 8 RS packets, the 8 receive slots
    with pytest.raises(ChunkOverBound, match=r"^bench rtlnet: ring of 3 RTL cards: a one-phase step of 9 RS"):
        rtlnet.measure_ring_case(3, 192, 9, params=SMALL, card=small)
    with pytest.raises(ChunkOverBound, match=r"^bench rtlnet: ring of 3 RTL cards: .* bound of 24") as info:
        rtlnet.measure_ring_case(3, 192, 24, params=SMALL, card=small)
    assert "\n" not in str(info.value)
    rtlnet.check_ring_case(4, 1408, rtlnet.STEP_PACKETS_PER_CHUNK)  # the bench's own ring rows: 16 of 64
    with pytest.raises(ChunkOverBound, match="ring of 2 RTL cards"):
        rtlnet.collect(worlds=(2, 3), parts=("card", "ring"), step_packets=64)


def test_cli_parts_option() -> None:
    import argparse

    from optimusnic.cli import bench as cli_bench

    parser = argparse.ArgumentParser()
    cli_bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", "rtlnet", "--parts", "ring, bf16", "--json"])
    assert args.parts == ["ring", "bf16"] and set(args.parts) <= set(rtlnet.PARTS)


@pytest.mark.skipif(not simulators.available("verilator"), reason="verilator not installed")
def test_tiny_run_reports_every_figure_bit_exact(tmp_path) -> None:  # noqa: ANN001
    rep = rtlnet.collect(worlds=(3,), payloads=(192,), drops=(1e-2,), repeats=1, packets=4, step_packets=4,
                         line_world=3, drop_world=3, params=SMALL, window=8, build=SMALL_BUILD, card=CARD,
                         card_build=CARD_BUILD, parts=("card", "stand-in", "card-drops", "card-hbm"), hbm_card=CARD,
                         hbm_build=HBM_BUILD)
    assert rep["exact"] is True and rep["mismatches"] == [], rep["mismatches"]
    assert len(rep["rows"]) == 11 and all(r["exact"] and r["status"] == 0 for r in rep["rows"])
    assert [r["adam"] for r in rep["rows"]] == ["rtl2"] * 7 + ["stand-in"] * 4
    assert [r["part"] for r in rep["rows"]][2:8] == ["card", "card-drops", *["card-hbm"] * 3, "stand-in"]
    assert [r["memory"] for r in rep["rows"]] == ["ideal"] * 4 + ["hbm"] * 3 + ["ideal"] * 4
    assert set(rep["measured"]) == {"card", "stand-in", "card-drops", "card-hbm"}
    assert rep["ring"] is None and rep["bf16"] is None
    for r in rep["rows"]:
        assert not r["adapter_errors"] and not r["axi_errors"] and r["tx_underflows"] == 0
        assert r["dropped_overflow"] == 0 and r["dropped_step"] == 0
        n, s = r["n"], r["size"]
        assert r["payload_bytes_out"] == (n - 1) * s * 2 * 4  # RS + AG, first transmissions only
        assert r["step_clocks"] > 0 and r["step_over_model"] > 1.0  # ideal cards add nothing: a lower bound
    [line] = rep["line"]
    cap = rtlnet.framing_cap(192)
    for k in ("tx", "tx_rs", "tx_ag", "rx", "rx_rs", "rx_ag", "tx_without_acks"):
        assert 0 < line[k] <= cap * (1 + 1e-9), (k, line[k])
    assert line["dropped_overflow"] == 0 and line["tx_underflows"] == 0
    [lat] = rep["latency"]  # one-packet chunks: one RS and one AG partial forwarded at N = 3
    assert lat["hop_rs_clocks"] > 0 and lat["hop_ag_clocks"] > 0 and lat["turnaround_clocks"] > 0
    assert lat["streaming_hop_rs_min_clocks"] > 0 and lat["streaming_turnaround_clocks"] > 0
    assert rep["rows"][8]["size"] == 48 and rep["rows"][8]["hop_samples"] == 2
    assert rep["rto_us"] == [20.0]
    [drop] = rep["drops"]
    assert drop["drop"] == 1e-2 and drop["exact"] and drop["goodput_gbps"] > 0
    [steps] = rep["steps"]
    assert steps["n"] == 3 and steps["model_us"] > 0 and steps["step_us"] > steps["model_us"]
    assert rep["speed"][0]["clocks_per_s"] > 0 and all(math.isfinite(x) for x in rep["load_average"])
    card = rep["card"]  # the same figures with the Adam RTL kernel in the card
    assert card["spec"]["lanes"] == 2 and card["steps"][0]["n"] == 3 and card["steps"][0]["over_model"] > 1.0
    [lat] = card["latency"]
    assert lat["turnaround_clocks"] > 0 and lat["hop_rs_clocks"] > 0
    # streaming, the kernel may send the first AG frame before the chunk's last beat is in: signed
    assert lat["streaming_turnaround_clocks"] is not None and lat["streaming_update_packet_clocks"] > 0
    [line] = card["line"]
    assert 0 < line["tx"] <= cap * (1 + 1e-9) and line["dropped_overflow"] == 0 and line["tx_underflows"] == 0
    [cdrop] = card["drops"]  # goodput under loss with the Adam RTL kernel, as the stand-in's
    assert cdrop["drop"] == 1e-2 and cdrop["exact"] and cdrop["goodput_gbps"] > 0
    # the same card on the HBM model: every port on its planned channel, every channel within its budget
    hbm = rep["card_hbm"]
    assert hbm["spec"]["net_stripes"] == 2 and hbm["spec"]["stripes"] == {"p": 1, "m": 1, "v": 1, "out": 1}
    assert hbm["steps"][0]["n"] == 3 and hbm["steps"][0]["exact"] and hbm["line"][0]["dropped_overflow"] == 0
    [use] = hbm["channels"]
    assert [use[k]["channels"] for k in ("state", "out", "lgrad", "gather")] == [3, 1, 2, 2]
    for k in ("state", "out", "lgrad", "gather"):
        assert 0 < use[k]["use"] <= 1 and use[k]["budget"] > 0, (k, use[k])
    host = 192 * 100e9 / 8 / (192 + 88) / 2  # the host DMA's share a stripe: the goodput over 2 stripes, bytes/s
    usable = channel_usable(get_target("u55c"), mixed=True)  # a U55C pseudo-channel, read and written
    assert math.isclose(use["lgrad"]["budget"], (usable - host) / (64 * 300e6), rel_tol=1e-9)
    hbm_rows = [r for r in rep["rows"] if r["memory"] == "hbm"]
    assert all(r["memory_channels"] and not r["axi_errors"] and r["tx_underflows"] == 0 for r in hbm_rows)

    md = rtlnet.markdown(rep)
    assert md[0] == rtlnet.HEADING and "all exact." in md[2]
    assert any(ln.startswith("| 192 | ") and ln.count("|") == 12 for ln in md)
    # ACK coalescing, on by default: K = 2 frames per ACK at the window of 8 (chunk ends and the hold
    # limit add some)
    assert 0 < line["acks_out"] < line["data_in"]
    assert "MISMATCHES" not in "\n".join(md)
    assert any(ln.startswith("Goodput under loss with the Adam RTL kernel") for ln in md)
    assert md[-2].startswith("Measured (per part") and "card-drops: commit " in md[-2]
    bad = copy.deepcopy(rep)
    bad["rows"][0]["exact"], bad["exact"] = False, False
    bad["mismatches"] = ["rtl2 N=3 P=192 drop=0.0 seed=1: ['gathered chunk 2']"]
    assert "MISMATCHES: rtl2 N=3 P=192 drop=0.0 seed=1: ['gathered chunk 2']." in rtlnet.markdown(bad)[2]

    # its section of results.md replaced alone, results.json's key beside the others
    (tmp_path / "results.md").write_text("# OptimusNIC benchmark results\n\n## Other\n\nkept\n")
    (tmp_path / "results.json").write_text('{"other": 1}\n')
    path = bench_report.write_rtlnet_section(rep, tmp_path)
    text = path.read_text()
    assert "## Other\n\nkept" in text and rtlnet.HEADING in text
    bench_report.write_rtlnet_section(rep, tmp_path)
    assert path.read_text().count(rtlnet.HEADING) == 1


def test_a_step_that_never_finishes_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung step (the simulation's own limit) is a BenchFailed naming the case and its log, which the
    command prints as one line, not an internal error on the missing figures. `simulate` is stood in
    for: the hang itself is the bench's (sim/tb/net/bench_onic_card.py) limit."""
    from hls.errors import OptimusError

    def hung(case: dict, *args: object) -> dict:
        return {"error": "not done in 60000 clocks (card [], peers [])", "log": "build/x.log"}

    monkeypatch.setattr(rtlnet, "simulate", hung)
    with pytest.raises(rtlnet.BenchFailed, match=r"N=3 P=1408 S=11264 drop=0.01 seed=7: not done .*x\.log"):
        rtlnet.measure_case(3, 1408, 32, drop=0.01, seed=7)
    assert issubclass(rtlnet.BenchFailed, OptimusError)
