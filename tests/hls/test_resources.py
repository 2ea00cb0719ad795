"""The resource budget of sizing (hls.resources) and the outstanding bursts (hls.bursts)."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from hls.bursts import BURST_BEATS, burst_plan, outstanding_bursts
from hls.generate import render
from hls.resources import cu_cost, fifo_bram36, slr_budget
from hls.sizing import SizingError, size
from hls.spec import KernelSpec
from hls.targets import get_target, kernel_costs, load_catalog


def test_fifo_bram36_follows_the_block_ram_shapes() -> None:
    # 512 bits wide: 15 RAMB18 of 512 x 36 hold up to 512 beats, 29 RAMB18 of 1K x 18 hold 1024
    assert fifo_bram36(128) == fifo_bram36(256) == fifo_bram36(512) == 7.5
    assert fifo_bram36(16 * 64) == 14.5  # the 16-outstanding adapter of before
    assert fifo_bram36(4 * 64) == 7.5


def test_outstanding_from_latency_times_bandwidth() -> None:
    # 250 ns at 300 MHz = 75 clocks: ceil(75 / 64) + 1 = 3 bursts, to a power of two
    assert outstanding_bursts(300) == 4
    assert outstanding_bursts(700) == 4  # 175 clocks: 3 + 1
    assert outstanding_bursts(300, latency_ns=0) == 2
    assert outstanding_bursts(300, latency_ns=500) == 4  # the sign-off's 150 beats in flight
    assert outstanding_bursts(300, latency_ns=2000) == 16  # 600 clocks: 10 + 1 -> 16 (the cap)
    b = burst_plan(300)
    assert (b.outstanding, b.burst_beats, b.fifo_beats, b.fifo_log2, b.latency_clocks) == (4, 64, 256, 8, 75)
    with pytest.raises(ValueError):
        outstanding_bursts(0)


def test_outstanding_identical_in_hls_rtl_and_manifest() -> None:
    spec = KernelSpec(target="u55c")
    files, manifest = render(spec, get_target("u55c"))
    n = manifest["sizing"]["bursts"]["outstanding"]
    assert n == outstanding_bursts(300) == 4
    cpp = files["hls/optimusnic_adamw.cpp"].decode()
    reads = re.findall(r"max_read_burst_length=(\d+) num_read_outstanding=(\d+)", cpp)
    writes = re.findall(r"max_write_burst_length=(\d+) num_write_outstanding=(\d+)", cpp)
    ports = manifest["sizing"]["resources"]["memory_ports"]
    assert len(reads) + len(writes) == ports == 20  # grad, out and 3 state stripes x 2
    assert set(reads) == set(writes) == {(str(BURST_BEATS), str(n))}
    rtl = files["rtl/optimusnic_adamw.v"].decode()
    engines = re.findall(r"onic_axi_rd #\(\s*\.FIFO_LOG2\((\d+)\),[^\n]*\n\s*\.MAX_BURST\((\d+)\)", rtl)
    assert len(engines) == len(reads)  # one read engine per read port
    # the read engine's FIFO is its outstanding limit: 2^FIFO_LOG2 beats = n bursts of MAX_BURST
    assert {(1 << int(k)) // int(m) for k, m in engines} == {n}


def test_over_budget_refused_naming_the_resource() -> None:
    u55c = get_target("u55c")
    with pytest.raises(SizingError, match=r"^over budget on Alveo U55C: memory AXI ports: the plan needs 38 "
                                          r"kernel m_axi ports \(1 CU x 38\), the card has 32 \(UG1393\)$"):
        size(u55c, None, stripes=6)
    with pytest.raises(SizingError, match=r"needs 128 kernel m_axi ports \(16 CU x 8\)"):
        size(u55c, None, compute_units=16)
    # a card whose SLRs hold fewer DSPs than one CU needs: refused on DSP, with the numbers
    need = size(u55c, None).resources.per_cu["budgeted"]["dsp"]
    small = dataclasses.replace(u55c, resources={**u55c.resources, "dsp": 1000})
    with pytest.raises(SizingError, match=rf"dsp for CU 0: {need:,.0f} per CU .* 266 usable per SLR"):
        size(small, None)


def test_edge_plan_exactly_at_a_budget_is_accepted() -> None:
    u55c = get_target("u55c")
    r = size(u55c, None, stripes=5)  # 6 x 5 + grad + out = 32 ports: all of them
    assert r.resources.memory_ports == r.resources.memory_ports_available == 32 and r.resources.fits
    assert r.resources.binding == "memory AXI ports 32 of 32"
    # an SLR with exactly one CU's DSPs: one CU fits, two do not (no SLR has room for the second)
    need = cu_cost(KernelSpec(target="u55c"), r.stripes, r.bursts)["budgeted"]["dsp"]
    exact = dataclasses.replace(u55c, resources={**u55c.resources, "dsp": int(need * 3 / u55c.usable_fraction) + 1},
)
    assert slr_budget(exact)["dsp"] == need
    ok = size(exact, None, stripes=5)
    assert ok.resources.slrs[0].used["dsp"] == ok.resources.slrs[0].budget["dsp"]
    lean = dataclasses.replace(u55c, resources={**u55c.resources, "dsp": int(need * 3 / u55c.usable_fraction) - 4})
    with pytest.raises(SizingError, match="dsp for CU 0"):
        size(lean, None, stripes=5)


def test_sizing_narrows_its_own_plan_to_the_budget() -> None:
    u55c = get_target("u55c")
    # capacity alone would take 8 state stripes (50 ports): sizing stops at the 5 the ports allow
    r = size(u55c, 1_000_000_000)
    assert r.stripes.state == 5 and r.resources.memory_ports == 32 and not r.fits
    # 40 G elements/s wants 9 CUs; a 16-lane RTL CU takes over half an SLR's LUTs (yosys), so 3 fit, one per
    # SLR, and nothing proposed exceeds the budgets
    fast = size(u55c, None, rate=40e9)
    assert fast.compute_units == 3 and fast.resources.cu_slr == [0, 1, 2] and not fast.keeps_up
    assert fast.resources.memory_ports <= 32
    for alt in fast.alternatives:
        assert "compute units" not in alt and "lanes" not in alt


def test_compute_units_spread_over_slrs_with_crossings_and_link_cfg() -> None:
    u55c = get_target("u55c")
    budget = slr_budget(u55c)
    # 8 lanes: 3 CUs per SLR (the RTL kernel's LUTs bind); HBM sits at SLR0, so the CUs fill it first, then
    # the nearest SLR, and each port of a CU in SLR1 crosses one boundary
    r = size(u55c, None, compute_units=4, lanes=8)
    res = r.resources
    per_cu = res.per_cu["budgeted"]
    assert min(int(budget[k] // per_cu[k]) for k in per_cu if per_cu[k]) == 3
    assert res.cu_slr == [0, 0, 0, 1] == [a.slr for a in r.assignments]
    assert [u.cus for u in res.slrs] == [[0, 1, 2], [3], []]
    assert res.crossings_per_cu == [0, 0, 0, 8] and res.crossings == 8
    # 16 lanes: one CU per SLR, SLR2's ports cross two boundaries; a fourth CU has no SLR to go to
    wide = size(u55c, None, compute_units=3, lanes=16)
    assert wide.resources.cu_slr == [0, 1, 2] and wide.resources.crossings_per_cu == [0, 8, 16]
    files, manifest = render(KernelSpec(target="u55c", compute_units=3), u55c)
    cfg = files["hls/link.cfg"].decode()
    assert [ln for ln in cfg.splitlines() if ln.startswith("slr=")] == [
        "slr=optimusnic_adamw_1:SLR0", "slr=optimusnic_adamw_2:SLR1", "slr=optimusnic_adamw_3:SLR2"]
    assert [b["slr"] for b in manifest["banks"]] == [0, 1, 2]
    per_cu_16 = wide.resources.per_cu["budgeted"]["lut"]
    assert per_cu_16 > budget["lut"] / 2
    lut = _fmt_int(per_cu_16)
    with pytest.raises(SizingError, match=rf"^over budget on Alveo U55C: lut for CU 3: {lut} per CU \(16 lanes, "
                                          rf"8 m_axi ports\) does not fit any SLR .* {_fmt_int(budget['lut'])} usable"):
        size(u55c, None, compute_units=4, lanes=16)


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def test_ddr_crossings_follow_the_banks() -> None:
    u250 = get_target("u250")
    r = size(u250, None, lanes=16, compute_units=1)
    a = r.assignments[0]
    assert a.slr == 0  # p0 on DDR[0], SLR0
    bank_slr = u250.memory.bank_slr
    assert bank_slr is not None
    assert r.resources.crossings == sum(len(s.ports) * abs(0 - bank_slr[s.channel]) for s in a.stripes) > 0


def test_catalog_figures_carry_their_sources() -> None:
    cat = load_catalog()
    for key in ("u50", "u55c", "u280"):
        t = cat[key]
        assert t.memory.axi_ports == 32 and t.memory.slr == 0 and "UG1393" in t.sources["memory.axi_ports"]
        assert t.efficiency_mixed == 0.8 and t.memory_efficiency == 0.9
    # U250: its own source's figure for a bank read and written (Bandwidth Kernel, 68%)
    assert cat["u250"].memory_efficiency == cat["u250"].efficiency_mixed == 0.68
    assert "68%" in cat["u250"].sources["memory_efficiency"]
    costs = kernel_costs()
    assert costs["hls_fp32"]["assumed"] and costs["hls_port"]["assumed"]
    assert "UG1399" in costs["m_axi_buffer"]["source"] and "yosys" in costs["rtl_lane"]["source"]
    assert all(t.sources.get("resources.per_slr") for t in cat.values())


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optimusnic.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_size_json_carries_the_figures_and_refuses_in_one_line(tmp_path) -> None:
    out = _cli("size", "--target", "u55c", "--params", "1e9", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    res = r["resources"]
    assert res["memory_ports"] == 32 and res["memory_ports_available"] == 32 and res["fits"]
    assert [u["slr"] for u in res["slrs"]] == [0, 1, 2] and res["slrs"][0]["cus"] == [0]
    assert set(res["per_cu"]) == {"hls", "rtl", "budgeted"} and res["per_cu"]["hls"]["dsp"] == 16 * (9 * 3 + 4 * 2)
    assert res["slrs"][0]["budget"]["bram36"] == int(2016 * 0.8 / 3) and res["sources"]["m_axi_buffer"]
    assert r["bursts"]["outstanding"] == 4 and r["memory_mixed_efficiency"] == 0.8
    bad = _cli("size", "--target", "u55c", "--params", "1e9", "--stripes", "8")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "optimusnic size: error: over budget on Alveo U55C: memory AXI ports: the plan needs 50 kernel m_axi ports "
        "(1 CU x 50), the card has 32 (UG1393)"]
    gen = _cli("generate", "--target", "u55c", "--stripes", "6", "-o", str(tmp_path / "out"))
    assert gen.returncode == 2 and "memory AXI ports: the plan needs 38" in gen.stderr
    assert not (tmp_path / "out").exists()
    build = _cli("build", "--target", "u55c", "--stripes", "6", "--dry-run", "-o", str(tmp_path / "b"))
    assert build.returncode == 2 and "memory AXI ports: the plan needs 38" in build.stderr
