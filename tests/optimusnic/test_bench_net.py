"""`optimusnic bench net` (part of `make bench`): software cards on the wire against DDP + AdamW (gloo),
every step bit-exact against `ring_step`, wire bytes against the formula, goodput under drops."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hls.net import ring, wire
from optimusnic.bench import net as bench_net
from optimusnic.bench import report as bench_report
from optimusnic.cli.bench import BENCHES


def test_small_run_reports_times_wire_bytes_and_drops() -> None:
    r = bench_net.measure(sizes=(3000,), worlds=(2, 3), backends=("golden",), repeats=1, ddp=False,
                          drop_rates=(0.0, 1e-2), drop_steps=2)
    assert r["rto_s"] == bench_net._rto() and r["drop_rto_s"] == bench_net.DROP_RTO_S
    assert r["bit_exact"] is True  # every step was checked (a difference raises BenchMismatch)
    assert [(row["world"], row["elements_per_rank"]) for row in r["times"]] == [(2, 3000), (3, 3000)]
    for row in r["times"]:
        b = row["backends"]["golden"]
        assert b["step_s"] > 0 and b["steps_checked"] == 2 and b["over_ddp"] is None
        w, f = b["wire"], b["wire"]["formula"]
        n, s = row["world"], ring.chunk_elems(3000, row["world"])
        assert f["payload_bytes"] == (n - 1) * s * (4 + 4)
        assert w["payload_first"] == f["payload_bytes"] and w["payload_first_exact"]
        assert w["data_wire_first"] == f["framed_wire_bytes"] and w["data_wire_first_exact"]
        assert w["wire_bytes"] >= f["framed_wire_bytes"]
        assert 0 < w["goodput_fraction"] <= w["no_retransmission_fraction"] < f["framing_fraction"] < 1
    assert r["payload_matches_formula"] and r["framed_matches_formula"]
    assert [d["drop"] for d in r["drops"]] == [0.0, 1e-2]
    for d in r["drops"]:  # the payload formula holds under loss too: go-back-N sends every packet once first
        assert d["steps_checked"] == 2 and d["wire"]["payload_first_exact"]
    eff = r["protocol_efficiency"]
    assert eff is not None and 0 < eff["goodput_fraction"] < eff["framing_fraction"]
    assert eff["framing_fraction"] == pytest.approx(
        bench_net.formula(3, 3000)["framing_fraction"])
    text = "\n".join(bench_net.markdown(r))
    assert "DDP + AdamW (gloo)" in text and "software" in text and "NOT" not in text
    assert len(bench_net.drop_table(r)) == 2 + 2 and len(bench_net.wire_table(r)) == 2 + 2
    assert bench_report._net_section(r)[0] == "## The ring on software cards against DDP + AdamW (gloo)"
    assert bench_report._net_section(None) == []  # results.json of a run without it


def test_framed_formula_matches_the_wire_module() -> None:
    f = bench_net.formula(4, 1 << 20)
    s = ring.chunk_elems(1 << 20, 4)
    packets = 3 * 2 * wire.packets_per_chunk(s, "fp32")
    assert f["framed_wire_bytes"] == 3 * s * 8 + packets * wire.WIRE_OVERHEAD_BYTES
    assert f["framing_fraction"] == pytest.approx(f["payload_bytes"] / f["framed_wire_bytes"])


def test_a_step_that_differs_from_the_reference_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ring.ring_step

    def off_by_one_bit(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        res = real(*args, **kw)
        bad = res.gathered.copy()
        bad.view(np.uint32)[0] ^= 1
        return dataclasses.replace(res, gathered=bad)

    monkeypatch.setattr(bench_net.ring, "ring_step", off_by_one_bit)
    cc = bench_net.CheckedCluster("golden", 2, 1000)
    try:
        with pytest.raises(bench_net.BenchMismatch, match="differs from hls.net.ring.ring_step"):
            cc.step()
    finally:
        cc.close()


def test_ddp_baseline_times_steps() -> None:
    group = bench_net.DdpGroup(2, threads=1)
    try:
        group.size(4096)
        times = group.steps(2)
    finally:
        group.close()
    assert len(times) == 2 and all(t > 0 for t in times)


def test_cli_lists_the_net_bench() -> None:
    assert BENCHES["net"] == "optimusnic.bench.net"


def test_rto_reaches_the_cards_and_the_command() -> None:
    cc = bench_net.CheckedCluster("golden", 2, 1000, rto_s=0.2)
    try:
        assert all(node.config.rto == 0.2 for node in cc.cluster.nodes)
    finally:
        cc.close()
    r = {"sizes": [1000], "worlds": [2], "repeats": 1, "rto_option_ms": 200.0}
    assert bench_net.command(r).endswith("--repeats 1 --rto-ms 200")
    assert "--rto-ms" not in bench_net.command({**r, "rto_option_ms": None})
