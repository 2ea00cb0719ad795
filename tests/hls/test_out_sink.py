"""out_sink "memory+stream": the kernel also sends its updated parameters on an AXI4-Stream
(`param`, the RTL kernel's m_axis_param). The spec option, its validation, the register map and
manifest, every generated file that declares the port, and the places that must refuse it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hls import validate
from hls.errors import UserError
from hls.generate import render, write_project
from hls.manifest import load_manifest
from hls.spec import KernelSpec, SpecError
from optimusnic.cli import main

RING = KernelSpec(grad_source="stream", grad_dtype="bf16", out_dtype="bf16", lanes=4, out_sink="memory+stream")


def test_spec_values_are_checked() -> None:
    assert KernelSpec().out_sink == "memory" and not KernelSpec().param_stream
    assert RING.param_stream
    with pytest.raises(SpecError, match="out_sink: 'stream' is not allowed; choose one of memory, memory\\+stream"):
        KernelSpec(out_sink="stream")
    with pytest.raises(SpecError, match="out_sink: 'memory\\+stream' needs compute_units 1 \\(got 2\\)"):
        KernelSpec(out_sink="memory+stream", compute_units=2)
    KernelSpec(out_sink="memory", compute_units=2)  # memory only: any number of compute units


def test_spec_dict_keeps_old_manifests() -> None:
    """At its default the field is left out of the spec dict, so manifests (and build folders keyed by
    the spec) of kernels without the stream are what they were; the stream kernel's records it."""
    assert "out_sink" not in KernelSpec().to_dict()
    assert RING.to_dict()["out_sink"] == "memory+stream"
    assert KernelSpec.from_dict(RING.to_dict()) == RING
    assert KernelSpec.from_dict(KernelSpec().to_dict()) == KernelSpec()
    where = validate.Where("manifest.json")
    validate.spec_dict(RING.to_dict(), where)
    with pytest.raises(UserError, match="out_sink"):
        validate.spec_dict({**RING.to_dict(), "out_sink": "stream"}, where)


def test_register_map_and_manifest(tmp_path: Path) -> None:
    manifest = write_project(RING, tmp_path / "p")
    args = manifest["register_map"]["args"]
    streams = [(a["name"], a["direction"]) for a in args if a["kind"] == "stream"]
    assert streams == [("grad", "in"), ("param", "out")]
    # no register: the pointers and scalars keep the offsets the kernel without the stream has
    _, plain = render(RING.with_(out_sink="memory"))
    assert [a for a in args if a["kind"] != "stream"] == [a for a in plain["register_map"]["args"]
                                                          if a["kind"] != "stream"]
    assert load_manifest(tmp_path / "p")["spec"]["out_sink"] == "memory+stream"
    # an edited out_sink is a project that does not match its files
    data = json.loads((tmp_path / "p" / "manifest.json").read_text())
    data["spec"]["out_sink"] = "memory"
    (tmp_path / "p" / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="regenerate"):
        load_manifest(tmp_path / "p")


def test_generated_files_declare_the_stream() -> None:
    files, _ = render(RING)
    top = files[f"rtl/{RING.name}.v"].decode()
    for sig in ("output wire [511:0]  m_axis_param_tdata", "output wire [63:0]   m_axis_param_tkeep",
                "output wire          m_axis_param_tvalid", "input  wire          m_axis_param_tready",
                "output wire          m_axis_param_tlast", "onic_axis_wr #("):
        assert sig in top
    xml = files["rtl/kernel.xml"].decode()
    assert '<port name="m_axis_param" mode="write_only" dataWidth="512" portType="stream"/>' in xml
    assert 'arg name="param" addressQualifier="4" id="1" port="m_axis_param"' in xml
    assert "ipx::associate_bus_interfaces -busif m_axis_param -clock ap_clk $core" in \
        files["rtl/package_xo.tcl"].decode()
    cpp = files[f"hls/{RING.name}.cpp"].decode()
    assert "#pragma HLS INTERFACE axis port=param" in cpp and "store_param(param_s, param, n);" in cpp
    assert f"hls::stream<{RING.name}_impl::param_axis>& param," in files[f"hls/{RING.name}.h"].decode()
    assert "stream_connect=optimusnic_adamw_1.param:<network_kernel>.<port>" in files["hls/link.cfg"].decode()
    plain, _ = render(RING.with_(out_sink="memory"))
    assert "m_axis_param" not in plain[f"rtl/{RING.name}.v"].decode()
    assert "param" not in plain["rtl/kernel.xml"].decode()


def test_versal_export_is_refused() -> None:
    with pytest.raises(SpecError, match="V80 uses the Versal IP export: use out_sink 'memory'"):
        render(KernelSpec(target="v80", out_sink="memory+stream"))


def test_host_driver_refuses_the_stream_kernel() -> None:
    from pynq_driver.backends import open_device

    with pytest.raises(UserError, match="the host driver needs out_sink=memory"):
        open_device("golden", spec=KernelSpec(out_sink="memory+stream"))


def test_generate_cli_takes_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", "--target", "u55c", "--out-sink", "memory+stream", "-o", str(tmp_path / "g")]) == 0
    assert load_manifest(tmp_path / "g")["spec"]["out_sink"] == "memory+stream"
    capsys.readouterr()
    assert main(["generate", "--target", "u55c", "--out-sink", "memory+stream", "--compute-units", "2",
                 "-o", str(tmp_path / "h")]) != 0
    assert "needs compute_units 1" in capsys.readouterr().err


# --- the build: the parameter stream must be connected ---------------------------------------

def _dry(tmp_path: Path, *extra: str) -> list[str]:
    return ["build", "--target", "u55c", "-o", str(tmp_path / "run"), "--dry-run", *extra]


def test_build_dry_run_shows_the_connection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_dry(tmp_path, "--out-sink", "memory+stream", "--grad-source", "stream", "--stream-connect",
                     "net_1.grad_out", "--param-connect", "net_1.s_axis_param")) == 0
    out = capsys.readouterr().out
    assert "out_sink memory+stream" in out.splitlines()[0]
    assert "      stream_connect=optimusnic_adamw_1.param:net_1.s_axis_param" in out.splitlines()
    assert "      stream_connect=net_1.grad_out:optimusnic_adamw_1.grad" in out.splitlines()
    assert main(_dry(tmp_path, "--out-sink", "memory+stream", "--param-connect", "net_1.s_axis_param", "--json")) == 0
    cfg = json.loads(capsys.readouterr().out)["link_cfg"]
    assert "stream_connect=optimusnic_adamw_1.param:net_1.s_axis_param" in cfg.splitlines()


@pytest.mark.parametrize(("extra", "message"), [
    (["--out-sink", "memory+stream"], "nothing takes optimusnic_adamw_1.param: pass --param-connect <kernel>.<port>"),
    (["--param-connect", "net_1.s_axis_param"], "--param-connect: optimusnic_adamw writes its parameters to memory"),
    (["--out-sink", "memory+stream", "--param-connect", "net_1"], "expected <kernel>.<port>"),
    (["--out-sink", "memory+stream", "--placement", "rail", "--param-connect", "net_1.s_axis_param"],
     "the rail placement connects the parameter stream to the network kernel itself"),
    (["--out-sink", "memory+stream", "--target", "v80"], "Versal IP export"),
])
def test_build_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    assert main(_dry(tmp_path, *extra)) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
