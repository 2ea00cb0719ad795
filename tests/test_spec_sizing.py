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


def test_size_u55c_7b_fp32_hand_computed() -> None:
    r = size(get_target("u55c"), 7_000_000_000)
    # p, m, v each get 10 of the 32 pseudo-channels (512 MiB each): 10 * 512 MiB / 4 B per value
    assert r.max_params_per_card == 10 * 512 * 2**20 // 4 == 1_342_177_280
    assert r.state_bytes_per_param == 12 and r.moved_bytes_per_param == 4 + 24 + 4
    assert r.line_rate_params_per_s == 100e9 / 8 / 4
    # the gradient's single pseudo-channel bounds memory: 14.375 GB/s * 0.9 / 4 B
    assert r.memory_params_per_s == pytest.approx(14.375e9 * 0.9 / 4)
    assert r.kernel_params_per_s == 16 * 300e6 and (r.lanes, r.compute_units) == (16, 1)
    assert not r.fits and r.cards_needed == 6 and r.keeps_up
    banks = r.assignments[0].banks
    assert banks == {"p": "HBM[0:9]", "m": "HBM[10:19]", "v": "HBM[20:29]", "grad": "HBM[30]", "out": "HBM[31]"}


def test_size_u250_ddr_hand_computed() -> None:
    r = size(get_target("u250"), 1_000_000_000, lanes=16, compute_units=1)
    assert r.assignments[0].banks == {"p": "DDR[0]", "m": "DDR[1]", "v": "DDR[2]", "grad": "DDR[3]", "out": "DDR[0]"}
    # DDR[0] carries p (8 B) and out (4 B) per parameter: 19.2 GB/s * 0.8 / 12 B
    assert r.memory_params_per_s == pytest.approx(19.2e9 * 0.8 / 12)
    assert r.max_params_per_card == 16 * 2**30 // 4
    assert r.fits and not r.keeps_up and r.bottleneck == "memory"


def test_size_bf16_needs_two_cus_and_sharding() -> None:
    r = size(get_target("u55c"), 70_000_000_000, grad_dtype="bf16", cards=64)
    assert r.line_rate_params_per_s == 100e9 / 8 / 2
    assert (r.lanes_needed, r.compute_units_needed) == (16, 2)
    assert r.shard_params == 70_000_000_000 // 64
    # 2 CUs x 16 pseudo-channels: p, m, v get 4 each per CU, gradient 2 and output 2
    assert r.assignments[1].banks == {"p": "HBM[16:19]", "m": "HBM[20:23]", "v": "HBM[24:27]",
                                      "grad": "HBM[28:29]", "out": "HBM[30:31]"}
    assert r.max_params_per_card == 2 * 4 * 512 * 2**20 // 4 and not r.fits and r.cards_needed == 66


@pytest.mark.parametrize("kw", [dict(params=0), dict(params=10, cards=0), dict(params=10, lanes=5)])
def test_size_rejects_impossible(kw: dict) -> None:
    with pytest.raises((SizingError, SpecError)):
        size(get_target("u55c"), **kw)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hls.cli", *args], capture_output=True, text=True, timeout=120)


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
    assert r["cards_needed"] == 6


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
