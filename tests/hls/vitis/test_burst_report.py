"""hls/vitis/reports.py burst_report / check_bursts on Vitis HLS logs and csynth.rpt burst tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from hls.errors import UserError
from hls.vitis import reports

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BUNDLES = ["gmem_grad", "gmem_p", "gmem_m", "gmem_v", "gmem_out"]

CSYNTH_RPT = (FIXTURES / "csynth_bursts.rpt").read_text()


def test_ok_log_every_bundle_has_bursts() -> None:
    text = (FIXTURES / "vitis_hls_bursts_ok.log").read_text()
    r = reports.burst_report(text, BUNDLES)
    assert {b: e["status"] for b, e in r["ports"].items()} == dict.fromkeys(BUNDLES, "ok")
    assert r["ports"]["gmem_grad"]["read_lengths"] == ["variable"] and r["ports"]["gmem_grad"]["write_lengths"] == []
    assert r["ports"]["gmem_out"]["write_lengths"] == [512] and r["ports"]["gmem_out"]["write_width"] == 512
    assert r["ports"]["gmem_p"]["read_lengths"] == r["ports"]["gmem_p"]["write_lengths"] == ["variable"]
    # 214-234 costs width, not bursts: kept apart, not a failure
    assert [w["id"] for w in r["ports"]["gmem_grad"]["widening"]] == ["214-234"]
    assert r["unattributed"] == [] and r["missed_bursts_reported"] is False
    reports.check_bursts(text, BUNDLES)


def test_clobbered_log_names_the_state_ports() -> None:
    text = (FIXTURES / "vitis_hls_bursts_clobbered.log").read_text()
    r = reports.burst_report(text, BUNDLES)
    status = {b: e["status"] for b, e in r["ports"].items()}
    assert status == {"gmem_grad": "ok", "gmem_p": "lost", "gmem_m": "lost", "gmem_v": "lost", "gmem_out": "ok"}
    assert r["ports"]["gmem_p"]["failures"] == [{
        "id": "214-231", "location": "optimusnic_adamw.cpp:196:25",
        "message": "Access on 'p' is clobbered by a write to 'p' in the same region (optimusnic_adamw.cpp:196:25)"}]
    assert r["missed_bursts_reported"] is True
    with pytest.raises(UserError) as exc:
        reports.check_bursts(text, BUNDLES)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("Vitis HLS did not infer AXI bursts on gmem_p (214-231 at optimusnic_adamw.cpp:196:25); "
                          "gmem_m (214-231")
    assert "gmem_v (214-231" in msg and "gmem_grad" not in msg and "gmem_out" not in msg
    assert "sequential pipelined load loop" in msg and "own store loop" in msg


def test_port_without_any_burst_message_has_no_evidence() -> None:
    text = (FIXTURES / "vitis_hls_bursts_ok.log").read_text()
    r = reports.burst_report(text, [*BUNDLES, "gmem_p1_rd"])
    assert r["ports"]["gmem_p1_rd"] == {"read_lengths": [], "write_lengths": [], "read_width": None,
                                        "write_width": None, "failures": [], "widening": [], "status": "no-evidence"}
    with pytest.raises(UserError, match=r"bursts on gmem_p1_rd \(no burst inferred\)\. "):
        reports.check_bursts(text, [*BUNDLES, "gmem_p1_rd"])


def test_csynth_rpt_tables() -> None:
    bundles = ["gmem_p0", "gmem_m0", "gmem_v0", "gmem_o0"]
    r = reports.burst_report(CSYNTH_RPT, bundles)
    p = r["ports"]
    assert p["gmem_p0"]["status"] == "ok" and p["gmem_p0"]["read_lengths"] == ["variable"]
    assert [w["id"] for w in p["gmem_p0"]["widening"]] == ["214-353"]
    assert p["gmem_o0"]["write_lengths"] == [64] and p["gmem_o0"]["status"] == "ok"
    assert p["gmem_m0"]["status"] == "lost" and p["gmem_m0"]["failures"][0] == {
        "id": "214-230", "message": "Stride is incompatible", "location": "k.cpp:20:9"}
    assert p["gmem_v0"]["status"] == "lost" and p["gmem_v0"]["failures"][0]["id"] == "214-224"
    with pytest.raises(UserError, match=r"gmem_m0 \(214-230 at k\.cpp:20:9\); gmem_v0 \(214-224 at k\.cpp:25:3\)"):
        reports.check_bursts(CSYNTH_RPT, bundles)


def test_log_and_report_together_do_not_double_count() -> None:
    log = ("INFO: [HLS 214-115] Multiple burst reads of length 64 and bit width 512 in loop 'L' has been inferred "
           "on bundle 'gmem_p0'. (k.cpp:12:22)\n")
    r = reports.burst_report(log + CSYNTH_RPT, ["gmem_p0"])
    assert r["ports"]["gmem_p0"]["read_lengths"] == [64, "variable"]


def test_older_wording_and_unnamed_failures() -> None:
    # 2020.2 (UG1399 example) names the bundle "port"; a failure naming no listed bundle is kept apart.
    text = ("INFO: [HLS 214-115] Burst read of variable length and bit width 32 has been inferred on port 'gmem'\n"
            "INFO: [HLS 214-115] Burst write of variable length and bit width 32 has been inferred on port 'gmem' "
            "(./src/vadd.cpp:75:9).\n"
            "WARNING: [HLS 214-232] Access on 'tmp' is in the conditional branch (vadd.cpp:80:3)\n")
    r = reports.burst_report(text, ["gmem"])
    assert r["ports"]["gmem"]["status"] == "ok" and r["ports"]["gmem"]["write_width"] == 32
    assert [f["id"] for f in r["unattributed"]] == ["214-232"]
    with pytest.raises(UserError, match=r"a port the log does not name \(214-232\)"):
        reports.check_bursts(text, ["gmem"])


def test_missed_summary_without_details_fails_with_a_pointer_to_the_report() -> None:
    text = ("INFO: [HLS 214-115] Multiple burst reads of length 16 and bit width 512 has been inferred on bundle "
            "'gmem_a'.\nINFO: [HLS 200-1603] Design has inferred MAXI bursts and missed bursts, see Vitis HLS GUI "
            "synthesis summary report for detailed information.\n")
    with pytest.raises(UserError, match=r"200-1603: see syn/report/csynth\.rpt"):
        reports.check_bursts(text, ["gmem_a"])
