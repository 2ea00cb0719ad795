"""Kernel spec validation, the target catalog, and sizing on hand-computed cases."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hls.sizing import SizingError, size
from hls.spec import KernelSpec, SpecError
from hls.targets import CatalogError, get_target, load_catalog

XRT_TARGETS = ("u200", "u250", "u280", "u50", "u55c")


@pytest.mark.parametrize(
    "name", ["a;b", "../x", "has space", "quo'te", 'dq"', "naïve", "int", "class", "module", "", "9lives", "__x",
             "x" * 65, "a-b", "a.b"]
)
def test_bad_kernel_names_rejected(name: str) -> None:
    with pytest.raises(SpecError, match="name"):
        KernelSpec(name=name)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("optimizer", "sgd", "adam, adamw"),
        ("grad_dtype", "fp8", "fp32, bf16, fp16"),
        ("out_dtype", "fp16", "fp32, bf16"),
        ("lanes", 3, "power of two"),
        ("lanes", 32, "exceeds 16"),
        ("lanes", 0, "power of two"),
        ("compute_units", 0, "compute_units"),
        ("grad_source", "pcie", "memory, stream"),
        ("clock_mhz", 5000, "clock_mhz"),
        ("target", "u55c;rm", "target"),
    ],
)
def test_bad_spec_values_name_field_and_choices(field: str, value: object, match: str) -> None:
    with pytest.raises(SpecError, match=field) as info:
        KernelSpec(**{field: value})
    assert match in str(info.value)


def test_good_spec_round_trips() -> None:
    spec = KernelSpec(optimizer="adam", grad_dtype="bf16", out_dtype="bf16", lanes=4, name="my_kernel2")
    assert KernelSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(SpecError, match="unknown spec field"):
        KernelSpec.from_dict({"lane": 4})


def test_catalog_has_six_targets_with_sources() -> None:
    catalog = load_catalog()
    assert set(catalog) == {*XRT_TARGETS, "v80"}
    for key, t in catalog.items():
        assert t.sources, key
        for fld in ("part", "memory", "network", "platform"):
            assert fld in t.sources, (key, fld)
        assert (t.platform is None) == (key == "v80")
    assert catalog["v80"].flow == "versal" and not catalog["v80"].has_xrt_flow
    assert all(catalog[k].flow == "xrt" for k in XRT_TARGETS)


def test_user_override_file(tmp_path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text('[targets.u55c]\nkernel_clock_mhz = 250\n[targets.mycard]\nname = "My card"\n'
                 'part = "xcu55c-fsvh2892-2L-e"\nflow = "xrt"\nplatform = "my_platform_1"\nkernel_clock_mhz = 300\n'
                 '[targets.mycard.memory]\nkind = "HBM2"\ncapacity_bytes = 1073741824\n'
                 'peak_bandwidth_bytes_per_s = 100000000000\nchannels = 8\nchannel_capacity_bytes = 134217728\n'
                 'channel_bandwidth_bytes_per_s = 12500000000\nbank_prefix = "HBM"\n'
                 '[targets.mycard.network]\nports = 1\nline_rate_gbps = 25\n')
    catalog = load_catalog([str(f)])
    assert catalog["u55c"].kernel_clock_mhz == 250 and catalog["u55c"].memory.channels == 32
    assert catalog["mycard"].memory.capacity_bytes == 1 << 30
    bad = tmp_path / "bad.json"
    bad.write_text('{"targets": {"x": {"name": "x"}}}')
    with pytest.raises(CatalogError, match="missing field"):
        load_catalog([str(bad)])
    with pytest.raises(CatalogError, match="cannot read"):
        load_catalog([str(tmp_path / "nope.json")])


USABLE = 14.375e9 * 0.9  # one U55C pseudo-channel: 14.375 GB/s (UG1393) x 0.9 measured efficiency (read-only)
MIXED = 14.375e9 * 0.8  # a pseudo-channel read and written (state stripes): the catalog's assumed 0.8


def test_size_u55c_1b_fp32_hand_computed() -> None:
    """One port reaches one pseudo-channel, so arrays are striped over channels."""
    r = size(get_target("u55c"), 1_000_000_000)
    assert r.line_rate_params_per_s == 100e9 / 8 / 4 == 3.125e9
    # Line rate: p moves 8 B/element -> 25 GB/s -> ceil(25 / 11.5) = 3 stripes; grad and out 12.5 GB/s
    # -> 1 each. Capacity: 4 B x 1e9 / 512 MiB = 7.45 -> 8 stripes wanted, but a read and a write port
    # per state stripe: 6 x 8 + 2 = 50 ports > the 32 HBM AXI ports; 6 x 5 + 2 = 32 is the most.
    assert (r.stripes.grad, r.stripes.state, r.stripes.out) == (1, 5, 1)
    assert r.channels_used == 3 * 5 + 2 and r.resources.memory_ports == 32
    # 5 stripes x 512 MiB / 4 B each (staging lives on the grad and out channels): the shard needs 2 cards
    assert r.max_params_per_card == 5 * 512 * 2**20 // 4 == 671_088_640
    assert not r.fits and r.cards_needed == 2 and r.alternatives == ["2 cards: the shard of each then fits"]
    # grad (4 B/element) alone on its channel binds: 12.9375 GB/s / 4 B = 3.234 G/s >= 3.125 G/s
    assert r.memory_params_per_s == pytest.approx(USABLE / 4) and r.keeps_up
    assert r.achieved_params_per_s == pytest.approx(USABLE / 4)
    assert r.elements_per_clock_predicted == pytest.approx(USABLE / 4 / 300e6)  # 10.78
    banks = r.assignments[0].banks
    assert banks["grad0"] == "HBM[0]" and banks["out0"] == "HBM[1]"
    assert banks["p0_rd"] == banks["p0_wr"] == "HBM[2]" and banks["v4_wr"] == "HBM[16]"
    assert len(set(banks.values())) == 17  # every stripe on a pseudo-channel of its own


def test_size_u55c_7b_fp32_hand_computed() -> None:
    r = size(get_target("u55c"), 7_000_000_000)
    # Capacity would want ceil(28e9 / 512 MiB) = 53 stripes; 32 channels would hold 3 x 10 + grad + out,
    # but 32 HBM AXI ports take 6 x 5 + grad + out.
    assert r.stripes.state == 5 and r.channels_used == 17
    assert r.max_params_per_card == 5 * 512 * 2**20 // 4 == 671_088_640
    assert r.state_bytes_per_param == 12 and r.moved_bytes_per_param == 4 + 24 + 4
    assert r.memory_params_per_s == pytest.approx(USABLE / 4)
    assert r.kernel_params_per_s == 16 * 300e6 and (r.lanes, r.compute_units) == (16, 1)
    assert not r.fits and r.cards_needed == 11 and r.keeps_up
    assert r.binding.startswith("capacity") and any("11 cards" in a for a in r.alternatives)


def test_size_kernel_alone_is_sized_for_line_rate() -> None:
    """Without --params (what `generate` sizes): the fewest stripes that carry the line rate."""
    r = size(get_target("u55c"), None)
    # p: 8 B/element x 3.125e9 = 25 GB/s on channels read and written (11.5 GB/s usable): 3 stripes
    assert (r.stripes.grad, r.stripes.state, r.stripes.out) == (1, 3, 1) and r.channels_used == 11
    assert r.max_params_per_card == 3 * 512 * 2**20 // 4
    loads = r.assignments[0].loads
    # grad and out (4 B/element, one direction) at 3.125e9 x 4 / 12.9375e9 = 96.6%; state 8/3 B at 72.5%
    assert [round(c.utilization, 3) for c in loads] == [0.966, 0.966] + [0.725] * 9
    assert [c.usable_bytes_per_s for c in loads] == [USABLE] * 2 + [MIXED] * 9
    assert r.keeps_up and r.elements_per_clock_predicted == pytest.approx(10.78, abs=0.01)


def test_size_rate_option_and_kernel_bound() -> None:
    # 16 lanes at 300 MHz = 4.8 G/s: asking for 4.8 needs 4 stripes of p (38.4 GB/s / 11.5), 2 of grad and out
    r = size(get_target("u55c"), None, rate=4.8e9)
    assert (r.stripes.grad, r.stripes.state, r.stripes.out) == (2, 4, 2)
    assert r.bottleneck == "kernel" and r.binding.startswith("kernel") and r.keeps_up
    # asking for more than the lanes compute: the plan stops at the kernel rate and says so
    r = size(get_target("u55c"), None, rate=6e9, lanes=16, compute_units=1)
    assert not r.keeps_up and r.achieved_params_per_s == 4.8e9
    # 2 CUs would need 3 state stripes each (3 G/s x 8 B / 11.5 GB/s): 2 x 20 ports > 32, and with 2
    # stripes they reach 5.75 G/s; so only a plan that can be built is offered
    assert r.alternatives == ["2 cards per network port: each card updates 1/2 of the stream"]
    two = size(get_target("u55c"), None, rate=6e9, lanes=16, compute_units=2)
    assert two.stripes.state == 2 and two.achieved_params_per_s == pytest.approx(2 * 2 * MIXED / 8)


def test_size_u250_ddr_hand_computed() -> None:
    r = size(get_target("u250"), 1_000_000_000, lanes=16, compute_units=1)
    # 5 arrays on 4 DDR banks: one stripe each (more stripes than channels only add ports), balanced
    assert (r.stripes.grad, r.stripes.state, r.stripes.out) == (1, 1, 1)
    banks = r.assignments[0].banks
    assert (banks["p0_rd"], banks["m0_rd"], banks["v0_rd"], banks["grad0"], banks["out0"]) == \
        ("DDR[0]", "DDR[1]", "DDR[2]", "DDR[3]", "DDR[3]")
    # every bank carries 8 B per element: 19.2 GB/s * 0.68 (U250's own read-and-write measurement) / 8 B
    assert r.memory_params_per_s == pytest.approx(19.2e9 * 0.68 / 8)
    assert r.max_params_per_card == 16 * 2**30 // 4
    assert r.fits and not r.keeps_up and r.bottleneck == "memory"
    assert any("2 cards per network port" in a for a in r.alternatives)


def test_size_bf16_needs_two_cus_and_sharding() -> None:
    r = size(get_target("u55c"), 70_000_000_000, grad_dtype="bf16", cards=64)
    assert r.line_rate_params_per_s == 100e9 / 8 / 2
    assert (r.lanes_needed, r.compute_units_needed) == (16, 2)
    assert r.shard_params == 70_000_000_000 // 64
    # per CU: 16 channels and 16 of the 32 HBM AXI ports; capacity wants ceil(4 x 546.9M / 512 MiB) = 5
    # stripes, 6 x 2 + 2 = 14 ports fit, 6 x 3 + 2 = 20 do not
    assert (r.stripes.grad, r.stripes.state, r.stripes.out) == (1, 2, 1) and r.resources.memory_ports == 28
    banks = r.assignments[1].banks
    assert banks["p0_rd"] == "HBM[16]" and banks["out0"] == "HBM[22]" and banks["grad0"] == "HBM[23]"
    assert r.max_params_per_card == 2 * 2 * 512 * 2**20 // 4 and not r.fits and r.cards_needed == 131
    # 2 state stripes read and written carry 2 x 11.5 GB/s / 8 B = 2.875 G/s per CU < 3.125: behind line rate
    assert not r.keeps_up and r.memory_params_per_s == pytest.approx(2 * 2 * MIXED / 8)


def test_stripe_and_plan_validation() -> None:
    with pytest.raises(SpecError, match="stripes"):
        KernelSpec(stripes=0)
    with pytest.raises(SpecError, match="rate_gps"):
        KernelSpec(rate_gps=float("nan"))
    with pytest.raises(SizingError, match="channels"):
        size(get_target("u55c"), None, stripes=11)  # 3 x 11 + 2 > 32
    with pytest.raises(SizingError, match=r"memory AXI ports: the plan needs 62 .* the card has 32"):
        size(get_target("u55c"), None, stripes=10)  # 3 x 10 + 2 channels fit; 6 x 10 + 2 ports do not


@pytest.mark.parametrize("kw", [dict(params=0), dict(params=10, cards=0), dict(params=10, lanes=5)])
def test_size_rejects_impossible(kw: dict) -> None:
    with pytest.raises((SizingError, SpecError)):
        size(get_target("u55c"), **kw)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optimusnic.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_targets_and_size_json() -> None:
    out = _cli("targets", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {*XRT_TARGETS, "v80"} and all(t["sources"] for t in data.values())
    out = _cli("size", "--target", "u55c", "--params", "7e9", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    for key in ("state_bytes_per_param", "moved_bytes_per_param", "max_params_per_card", "line_rate_params_per_s",
                "memory_params_per_s", "lanes_needed", "compute_units_needed", "assignments", "fits", "cards_needed",
                "verdict"):
        assert key in r
    assert r["cards_needed"] == 11
    assert r["stripes"] == {"grad": 1, "state": 5, "out": 1} and r["binding"].startswith("capacity")
    plan = r["assignments"][0]["stripes"]
    assert {s["array"] for s in plan} == {"grad", "p", "m", "v", "out"} and len(plan) == 17


def test_cli_size_prints_plan_and_says_when_nothing_keeps_up() -> None:
    out = _cli("size", "--target", "u55c", "--params", "1e9")
    assert out.returncode == 0, out.stderr
    assert "5 stripe(s) each of p, m, v" in out.stdout and "HBM[16]" in out.stdout
    assert "verdict: does NOT fit (needs 2 cards); keeps up with line rate" in out.stdout
    assert "memory ports                32 of 32 kernel m_axi ports; 4 bursts x 64 beats outstanding" in out.stdout
    assert "closest to its budget       memory AXI ports 32 of 32" in out.stdout
    out = _cli("size", "--target", "u200", "--params", "1e9")
    assert out.returncode == 0, out.stderr
    assert "no plan on one Alveo U200 with these options reaches line rate" in out.stdout
    assert "2 cards per network port" in out.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (("size", "--target", "u99", "--params", "1e9"), "unknown target 'u99'"),
        (("size", "--target", "u55c", "--params", "lots"), "not a number"),
        (("size", "--target", "u55c", "--params", "1e9", "--lanes", "3"), "power of two"),
        (("size", "--target", "u55c", "--params", "1e9", "--targets-file", "/nonexistent.json"), "cannot read"),
    ],
)
def test_cli_errors_are_one_line(args: tuple[str, ...], needle: str) -> None:
    out = _cli(*args)
    assert out.returncode == 2 and needle in out.stderr
    assert "Traceback" not in out.stderr
