"""Rendering the HLS project: every catalog target, deterministic output, link config from sizing."""

from __future__ import annotations

import re

import pytest

from hls import regmap
from hls.generate import render, write_project
from hls.sizing import size_spec
from hls.spec import KernelSpec, SpecError
from hls.targets import get_target, load_catalog

TARGETS = sorted(load_catalog())
XRT_TARGETS = [k for k in TARGETS if load_catalog()[k].has_xrt_flow]


def stripes_of(spec: KernelSpec):
    return size_spec(spec, get_target(spec.target)).stripes


HLS_FILES = ("hls/{n}.cpp", "hls/{n}.h", "hls/{n}_tb.cpp", "hls/run_hls.tcl", "hls/link.cfg", "hls/Makefile",
             "hls/README.md")


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_renders_a_project(target: str) -> None:
    spec = KernelSpec(target=target)
    files, manifest = render(spec)
    for rel in HLS_FILES:
        assert rel.format(n=spec.name) in files
    tcl = files["hls/run_hls.tcl"].decode()
    t = load_catalog()[target]
    assert f"set part    {t.part}" in tcl
    assert "set clock_mhz 300" in tcl
    if t.has_xrt_flow:
        assert f"export_design -format xo -output {spec.name}.xo" in tcl
        assert "-flow_target vitis" in tcl
        assert t.platform in files["hls/Makefile"].decode()
    else:
        assert "export_design -format ip_catalog" in tcl
        assert "versal/NOTE.md" in files and "versal/export_ip.tcl" in files
        assert "manual" in files["versal/NOTE.md"].decode().lower()
        assert "[connectivity]" not in files["hls/link.cfg"].decode()
    assert manifest["files"].keys() == files.keys()
    assert manifest["register_map"] == regmap.to_manifest(spec, stripes_of(spec))


@pytest.mark.parametrize("target", XRT_TARGETS)
@pytest.mark.parametrize("cus", [1, 2])
def test_link_cfg_follows_sizing(target: str, cus: int) -> None:
    spec = KernelSpec(target=target, compute_units=cus, name="adam_k")
    files, manifest = render(spec)
    cfg = files["hls/link.cfg"].decode()
    names = [f"adam_k_{i + 1}" for i in range(cus)]
    assert f"nk=adam_k:{cus}:{','.join(names)}" in cfg
    ports = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
    for entry in manifest["banks"]:
        inst = names[entry["cu"]]
        assert sorted(entry["banks"]) == sorted(ports)
        for port in ports:  # one sp= line per m_axi port, each on its stripe's channel
            assert f"sp={inst}.{port}:{entry['banks'][port]}\n" in cfg
        assert len(set(entry["banks"][p] for p in ports if not p.endswith("_wr"))) == len(
            [p for p in ports if not p.endswith("_wr")]) or not load_catalog()[target].memory.is_hbm
        slr_line = f"slr={inst}:SLR{entry['slr']}"
        assert (slr_line in cfg) == (load_catalog()[target].slrs > 1)
        assert f"freqHz=300000000:{inst}" in cfg
    assert "stream_connect" not in cfg


def test_stream_source_has_axis_port_and_stream_connect_stub() -> None:
    spec = KernelSpec(target="u55c", grad_source="stream", grad_dtype="bf16")
    files, manifest = render(spec)
    cfg = files["hls/link.cfg"].decode()
    assert f"# stream_connect=<network_kernel>.<port>:{spec.name}_1.grad" in cfg
    assert f"sp={spec.name}_1.grad" not in cfg
    cpp = files[f"hls/{spec.name}.cpp"].decode()
    assert "#pragma HLS INTERFACE axis port=grad" in cpp
    assert "m_axi port=grad" not in cpp
    assert "load_grad(grad, g_s, live_s, status, n);" in cpp


def test_kernel_interface_matches_register_map() -> None:
    for opt in ("adam", "adamw"):
        spec = KernelSpec(optimizer=opt, lanes=4, grad_dtype="fp16", out_dtype="bf16")
        files, _ = render(spec)
        cpp = files[f"hls/{spec.name}.cpp"].decode()
        header = files[f"hls/{spec.name}.h"].decode()
        proto = header[header.index(f'extern "C" void {spec.name}('):]
        params = re.findall(r"(\w+)(?:,|\))", proto[: proto.index(";")])
        args = regmap.register_map(spec, stripes_of(spec))
        assert params == [a.name for a in args]
        for a in args:
            assert f"s_axilite port={a.name} bundle=control offset=0x{a.offset:02X}\n" in cpp
            if a.kind == "pointer":
                assert f"m_axi port={a.name} bundle=gmem_{a.name} " in cpp
        assert "#pragma HLS INTERFACE ap_ctrl_hs port=return" in cpp
        assert "#pragma HLS DATAFLOW" in cpp
        assert "#pragma HLS PIPELINE II=4" in cpp  # 16 / lanes beats per clock in the compute loop
        assert ("decay" in proto) == (opt == "adamw") and ("l2" in proto) == (opt == "adam")


def test_renders_are_byte_identical(tmp_path) -> None:
    spec = KernelSpec(target="u280", grad_dtype="bf16", out_dtype="bf16", lanes=8, compute_units=2)
    a = write_project(spec, tmp_path / "a")
    b = write_project(spec, tmp_path / "b")
    assert a == b
    for rel in a["files"]:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()


@pytest.mark.parametrize("change", [{"lanes": 8}, {"optimizer": "adam"}, {"grad_dtype": "fp16"}, {"out_dtype": "bf16"},
                                    {"grad_source": "stream"}, {"name": "other"}, {"compute_units": 2},
                                    {"clock_mhz": 250.0}])
def test_changed_spec_changes_hashes(change: dict) -> None:
    base = KernelSpec(target="u55c")
    _, m1 = render(base)
    _, m2 = render(base.with_(**change))
    assert m1["files"] != m2["files"]
    kernel_a = f"hls/{base.name}.cpp"
    kernel_b = f"hls/{base.with_(**change).name}.cpp"
    assert m1["files"][kernel_a] != m2["files"][kernel_b] or change.get("compute_units") or change.get("clock_mhz")


@pytest.mark.parametrize("bad", ["1abc", "x;rm -rf", "kernel name", "class", "__x", "a" * 65, "é"])
def test_user_names_are_validated_before_rendering(bad: str) -> None:
    with pytest.raises(SpecError):
        KernelSpec(name=bad)
