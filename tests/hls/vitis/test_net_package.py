"""The network kernel's package for the rail placement: register map, kernel.xml, the generated wrapper
and package_xo.tcl of sim/rtl/net's top, the rail link.cfg with its stream_connect lines to the Adam
kernel and XUP VNx cmac_<i>, and a real rail build that stops in one line before any tool runs when the
link is incomplete or a tool or the MAC kernel is missing, or runs the stand-in tools (test doubles
for Vivado and v++, which cannot exist here) when everything is in place.

kernel.xml and the wrapper are checked against the RTL top's ports as yosys reads them; package_xo.tcl
is run by tclsh under a stand-in for Vivado's Tcl commands (a test double) and must build the
manifest's memory map, associate every bus interface of the top and read net_kernel.f's sources."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from hls import net_regmap
from hls.errors import UserError
from hls.generate import render
from hls.net.card import COUNTER_NAMES, DROP_CAUSES
from hls.paths import RTL_DIR
from hls.rtl_sources import read_filelist
from hls.spec import KernelSpec
from hls.targets import get_target, load_catalog
from hls.vitis import build, netpkg
from optimusnic.cli import main

STANDINS = Path(__file__).resolve().parents[2] / "doubles" / "standins"
XRT_TARGETS = [k for k, t in load_catalog().items() if t.has_xrt_flow]


RAIL = ["--grad-source", "stream", "--out-sink", "memory+stream", "--placement", "rail"]


def _package(target: str = "u55c", grad_source: str = "stream", kernel: str = "hls",
             out_sink: str = "memory+stream", **kw: object) -> netpkg.NetPackage:
    spec = KernelSpec(target=target, grad_source=grad_source, out_sink=out_sink, **kw)  # type: ignore[arg-type]
    return netpkg.package(spec, get_target(target), kernel)


def _registers(man: dict) -> list[tuple[str, int, int]]:
    regs = [(name, off, 4) for name, off in man["control"].items()]
    regs += [(a["name"], a["offset"], a["size"]) for a in man["args"]]
    return regs + [(r["name"], r["offset"], r["size"]) for r in man["readonly"]]


@pytest.mark.parametrize("target", XRT_TARGETS)
def test_network_register_map_has_no_overlaps_and_every_card_counter(target: str) -> None:
    man = _package(target).manifest
    regs = sorted(_registers(man), key=lambda r: r[1])
    for (a, off_a, size_a), (b, off_b, _) in zip(regs, regs[1:], strict=False):
        assert off_a + size_a <= off_b, f"{a} overlaps {b}"
    assert regs[-1][1] + regs[-1][2] <= 2 ** man["address_bits"]
    names = [name for name, _, _ in regs]
    assert len(names) == len(set(names))
    assert man["counters"] == [*COUNTER_NAMES, *(f"dropped_{c}" for c in DROP_CAUSES)]
    assert [r["name"] for r in man["readonly"]] == ["status", *man["counters"], *net_regmap.ENTRY_REGS]
    assert all(r["offset"] % 8 == 0 for r in man["readonly"][1:])  # 64-bit counters, 8-byte aligned
    for wanted in ("local_mac_lo", "local_ip", "local_port", "comm", "rank", "world", "window", "timeout",
                   "credit", "payload_bytes", "step"):
        assert wanted in names
    pointers = [a["name"] for a in man["args"] if a["kind"] == "pointer"]
    k = _package(target).generics["STRIPES"]  # sizing's lgrad and gather stripes: one m_axi port each
    assert k in (1, 2, 4, 8)
    assert pointers == [*(f"lgrad{i}" for i in range(k)), *(f"gather{i}" for i in range(k))]


@pytest.mark.parametrize("grad_source", ["stream", "memory"])
def test_kernel_xml_is_the_manifest_register_map(grad_source: str) -> None:
    pkg = _package(grad_source=grad_source)
    man = pkg.manifest
    kernel = ET.fromstring(pkg.kernel_xml).find("kernel")
    assert kernel is not None and kernel.get("name") == man["kernel"] == "optimusnic_adamw_net"
    ports = {p.get("name"): p for p in kernel.iter("port")}
    assert int(ports["s_axi_control"].get("range"), 16) == 2 ** man["address_bits"]
    xml_regs = {a.get("name"): (int(a.get("offset"), 16), int(a.get("size"), 16))
                for a in kernel.iter("arg") if a.get("addressQualifier") != "4"}
    man_regs = {a["name"]: (a["offset"], 8 if a["kind"] == "pointer" else 4) for a in man["args"]}
    man_regs |= {r["name"]: (r["offset"], r["size"]) for r in man["readonly"]}
    assert xml_regs == man_regs
    for a in man["args"]:
        if a["kind"] == "pointer":
            assert ports[f"m_axi_{a['name']}"].get("mode") == "master"
    streams = {a.get("name") for a in kernel.iter("arg") if a.get("addressQualifier") == "4"}
    assert streams == {s["name"] for s in man["streams"]} <= set(ports)
    # the package is the RTL's: every stream port, whether this spec's link connects it or not
    assert streams == {"m_axis_grad0", "s_axis_param0", "s_axis_mac0", "m_axis_mac0"}
    assert (pkg.missing is None) == (grad_source == "stream")


def test_package_is_deterministic() -> None:
    assert _package().files() == _package().files()


@pytest.mark.parametrize("kernel,grad_port", [("hls", "grad"), ("rtl", "s_axis_grad")])
def test_rail_dry_run_prints_stream_connect_and_the_mac(kernel: str, grad_port: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["build", "--target", "u55c", *RAIL, "--kernel", kernel, "--dry-run", "-o", str(run),
                 "--registry", str(tmp_path / "reg")]) == 0
    out = capsys.readouterr().out
    param_port = "param" if kernel == "hls" else "m_axis_param"
    pkg = _package(kernel=kernel)
    k = pkg.generics["STRIPES"]
    assert k == 4  # the U55C at one ring port: 3 channels' worth, to a power of two
    stripes = [f"sp=optimusnic_adamw_net_1.m_axi_{s}{i}:" for s in ("lgrad", "gather") for i in range(k)]
    lgrad, gather = stripes[0], stripes[k]
    for line in ("nk=optimusnic_adamw_net:1:optimusnic_adamw_net_1", "nk=cmac_0:1:cmac_0",
                 "stream_connect=cmac_0.M_AXIS:optimusnic_adamw_net_1.s_axis_mac0",
                 "stream_connect=optimusnic_adamw_net_1.m_axis_mac0:cmac_0.S_AXIS",
                 f"stream_connect=optimusnic_adamw_net_1.m_axis_grad0:optimusnic_adamw_1.{grad_port}",
                 f"stream_connect=optimusnic_adamw_1.{param_port}:optimusnic_adamw_net_1.s_axis_param0",
                 *stripes, "xup_vitis_network_example", "NOT BUILT", "no network bitstream is claimed",
                 "link complete", "package_net_xo: Vivado batch", f"cd {run / 'net'} && vivado -mode batch",
                 f"-tclargs {RTL_DIR} {run / 'net' / 'optimusnic_adamw_net.xo'}",
                 f"{run / 'net' / 'optimusnic_adamw_net.xo'}", f"{run / 'net' / 'cmac_0.xo'}",
                 f"--config {run / 'net' / 'link.cfg'}", "WIRE_BF16=0", "TX_SLOTS_LOG2=7",
                 *(str(f) for f in read_filelist(netpkg.NET_LIST))):
        assert line in out, line
    assert "INCOMPLETE" not in out and pkg.missing is None
    sp = [ln for ln in pkg.link_cfg.splitlines() if ln.startswith("sp=optimusnic_adamw_net_1.")]
    assert sum(ln.startswith(lgrad) for ln in sp) == 1 and sum(ln.startswith(gather) for ln in sp) == 1
    # every stripe port on its own bank, the banks sizing planned
    assert len(sp) == 2 * k and len({ln.split(":", 1)[1] for ln in sp}) == 2 * k
    assert "m_axi_lgrad0..3" in out and "layout.split" in out  # the package's note
    assert not run.exists() and not (tmp_path / "reg").exists()


@pytest.mark.parametrize("extra,reason", [
    (["--grad-source", "stream"], "--out-sink memory+stream"),
    (["--out-sink", "memory+stream"], "two-phase step"),
    (["--grad-source", "stream", "--out-sink", "memory+stream", "--grad-dtype", "fp16"], "--grad-dtype fp16"),
])
def test_rail_dry_run_of_an_incomplete_link_says_why(extra: list[str], reason: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "u55c", "--placement", "rail", *extra, "--dry-run", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE: a real build stops" in out and "# INCOMPLETE" in out and reason in out


def test_rail_dry_run_with_gradients_from_memory_connects_no_grad_stream(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "u55c", "--placement", "rail", "--dry-run", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "stream_connect=cmac_0.M_AXIS:" in out and "stream_connect=optimusnic_adamw_net_1.m_axis_grad" not in out
    assert "no stream connects optimusnic_adamw_net_1.m_axis_grad0" in out


def test_rail_dry_run_json_carries_the_network_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "u55c", *RAIL, "--dry-run", "--json", "-o", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["network"]["built"] is False and plan["network"]["mac_kernels"] == ["cmac_0"]
    assert plan["network"]["complete"] is True and plan["network"]["missing"] is None
    assert "stream_connect=cmac_0.M_AXIS" in plan["link_cfg"]
    assert plan["network"]["manifest"] == _package().manifest
    assert plan["network"]["package_xo_tcl"] == _package().package_tcl
    assert [s["name"] for s in plan["steps"]] == ["hls", "package_net_xo", "link"]
    # the deadlock bound of a ring of these kernels (2^7 transmit + 32 receive slots, in hop-major order)
    assert plan["network"]["chunk_packets_bound"] == 160 and plan["network"]["max_chunk_elems"] == 55968
    assert any("deadlocks once a chunk" in n and "Known defect" in n for n in plan["notes"])


def test_rail_dry_run_reports_the_chunk_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The package's bound follows its generics: bf16 on the wire and out doubles the elements per chunk."""
    pkg = _package()
    assert pkg.chunk_packets_bound == 2 ** pkg.generics["TX_SLOTS_LOG2"] + 2 ** pkg.generics["RX_SLOT_LOG2"] == 160
    bf16 = _package(grad_dtype="bf16", out_dtype="bf16")
    assert bf16.max_chunk_elems == 2 * pkg.max_chunk_elems
    assert main(["build", "--target", "u55c", *RAIL, "--dry-run", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "chunk bound: under 160 packets per flow, up to 55,968 elements" in out


def test_rail_on_a_card_without_xrt_is_refused() -> None:
    with pytest.raises(UserError, match="no XRT flow"):
        build.plan_build(KernelSpec(target="v80"), get_target("v80"), placement="rail")


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The stand-in tools (test doubles) first on PATH, a stand-in platform, a call log."""
    for tool in ("vitis_hls", "vitis-run", "vivado", "v++"):
        real = shutil.which(tool)
        if real and Path(real).parent != STANDINS:
            pytest.skip(f"a real {tool} is on PATH ({real}); this test uses only the stand-ins")
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "standin_calls.jsonl"
    monkeypatch.setenv("OPTIMUSNIC_STANDIN_LOG", str(log))
    name = get_target("u55c").platform
    (tmp_path / "platforms" / name).mkdir(parents=True)
    (tmp_path / "platforms" / name / f"{name}.xpfm").write_text("stand-in platform file for the tests\n")
    monkeypatch.setenv("PLATFORM_REPO_PATHS", str(tmp_path / "platforms"))
    for var in ("OPTIMUSNIC_STANDIN_FAIL", "OPTIMUSNIC_STANDIN_WNS", "OPTIMUSNIC_STANDIN_LOST_BURSTS"):
        monkeypatch.delenv(var, raising=False)
    return {"log": log, "run": tmp_path / "run", "reg": tmp_path / "reg"}


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_real_rail_build_of_an_incomplete_link_stops_in_one_line_and_runs_no_tool(
        standins: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, reg = standins["run"], standins["reg"]
    rc = main(["build", "--target", "u55c", "--grad-source", "stream", "--placement", "rail", "-o", str(run),
               "--registry", str(reg)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "all-gather starts from the Adam kernel's parameter stream" in err[0]
    assert "--out-sink memory+stream" in err[0]
    assert not standins["log"].exists()  # no tool ran
    assert not reg.exists() and not (run / "link").exists()
    pkg = _package(out_sink="memory")
    assert {p.name for p in (run / "net").iterdir()} == set(pkg.files())
    assert (run / "net" / "link.cfg").read_text() == pkg.link_cfg
    assert json.loads((run / "net" / "network.json").read_text()) == pkg.manifest


def test_real_rail_build_without_vivado_stops_with_the_missing_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    for tool in ("vitis_hls", "vitis-run", "vivado", "v++"):
        if shutil.which(tool):
            pytest.skip(f"{tool} is on PATH: this test needs a machine without the AMD tools")
    rc = main(["build", "--target", "u55c", *RAIL, "--kernel", "rtl", "-o", str(tmp_path / "run"),
               "--registry", str(tmp_path / "reg")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1, err
    assert "vivado not found on PATH" in err[0] and "--dry-run" in err[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "reg").exists()


def test_real_rail_build_without_the_mac_kernel_stops_before_any_tool(standins: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = standins["run"]
    rc = main(["build", "--target", "u55c", *RAIL, "-o", str(run), "--registry", str(standins["reg"])])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1, err
    assert f"{run / 'net' / 'cmac_0.xo'} not found" in err[0] and "xup_vitis_network_example" in err[0]
    assert not standins["log"].exists()


@pytest.mark.parametrize("kernel", ["hls", "rtl"])
def test_real_rail_build_runs_package_net_xo_and_links_four_objects(kernel: str, standins: dict[str, Path],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """With the stand-ins (test doubles: no Vivado or v++ can run here) and a stand-in cmac_0.xo, the build
    packages the network kernel from sim/rtl/net and links the Adam kernel, it and the MAC with the rail link.cfg."""
    run = standins["run"]
    (run / "net").mkdir(parents=True)
    (run / "net" / "cmac_0.xo").write_text("TEST DOUBLE: stands in for XUP VNx's cmac_0.xo\n")
    rc = main(["build", "--target", "u55c", *RAIL, "--kernel", kernel, "-o", str(run),
               "--registry", str(standins["reg"])])
    out = capsys.readouterr()
    assert rc == 0, out.err
    calls = _calls(standins["log"])
    net_call = next(c for c in calls if c["tool"] == "vivado" and c["kernel"] == "optimusnic_adamw_net")
    assert net_call["cwd"] == str(run / "net")
    assert net_call["tclargs"] == [str(RTL_DIR), str(run / "net" / "optimusnic_adamw_net.xo")]
    # the stand-in read every file net_kernel.f lists (each with its sha256) beside the wrapper
    read = {k for k, sha in net_call["inputs"].items() if sha}
    assert {str(f.relative_to(RTL_DIR)) for f in _package().sources()} <= read
    assert "optimusnic_adamw_net.v" in read and "kernel.xml" in read
    link = calls[-1]
    assert link["tool"] == "v++"
    xos = [a for a in link["argv"] if a.endswith(".xo")]
    assert [Path(x).name for x in xos] == ["optimusnic_adamw.xo", "optimusnic_adamw_net.xo", "cmac_0.xo"]
    assert link["config_text"] == _package(kernel=kernel).link_cfg
    assert (run / "net" / "optimusnic_adamw_net.v").read_text() == _package().wrapper_v


@pytest.mark.parametrize("grad_source", ["stream", "memory"])
def test_sidecar_is_unchanged(grad_source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = KernelSpec(target="u55c", grad_source=grad_source)
    files, manifest = render(spec, get_target("u55c"))
    assert "network" not in manifest and not any(f.startswith("net/") for f in files)
    link = files["hls/link.cfg"].decode()
    assert "cmac" not in link and "stream_connect=optimusnic" not in link and "_net" not in link
    # a sidecar stream kernel needs its gradient stream connected by hand (the rail placement connects it)
    feeder = ["feeder_1.out"] if grad_source == "stream" else None
    extra = ["--stream-connect", feeder[0]] if feeder else []
    assert main(["build", "--target", "u55c", "--grad-source", grad_source, "--dry-run", "-o", str(tmp_path),
                 *extra]) == 0
    out = capsys.readouterr().out
    assert "cmac" not in out and "network kernel optimusnic" not in out and "rail placement" not in out
    plan = build.plan_build(spec, get_target("u55c"), run_dir=tmp_path, stream_connect=feeder)
    assert plan.network is None and "network" not in build.plan_to_dict(plan)
    if feeder:
        assert "stream_connect=feeder_1.out:optimusnic_adamw_1.grad" in plan.link_cfg_text
        assert plan.link_cfg_text.replace("# gradient streams (optimusnic build --stream-connect)\n", "").replace(
            "stream_connect=feeder_1.out:optimusnic_adamw_1.grad\n", "") == link
    else:
        assert plan.link_cfg_text == link


def test_network_kernel_name_and_readonly_follow_the_args() -> None:
    man = _package().manifest
    end = max(a["offset"] + a["size"] for a in man["args"])
    assert man["readonly"][0]["offset"] == end
    assert net_regmap.kernel_name("x") == "x_net"


def _yosys_ports(files: list[Path], top: str, tmp_path: Path) -> dict[str, tuple[str, int]]:
    """{port: (direction, width)} of `top` as yosys reads the Verilog (no synthesis)."""
    yosys = shutil.which("yosys")
    if yosys is None:
        pytest.skip("yosys not installed (make deps-yosys)")
    out = tmp_path / f"{top}.json"
    script = "; ".join([*(f"read_verilog {f}" for f in files), "proc", f"write_json {out}"])
    run = subprocess.run([yosys, "-q", "-p", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    mod = json.loads(out.read_text())["modules"][top]
    return {name: (p["direction"], len(p["bits"])) for name, p in mod["ports"].items()}


def test_kernel_xml_and_wrapper_have_every_port_of_the_rtl_top(tmp_path: Path) -> None:
    """kernel.xml's interfaces are the RTL top's (yosys's reading of onic_net_kernel.v), grouped as Vivado's
    packager infers them: s_axi_control, m_axi_lgrad<k> (read channels only) and m_axi_gather<k> (write
    channels only) for each of sizing's stripes (the top packs stripe k at [k x W +: W] of its
    m_axi_lgrad0_* / m_axi_gather0_*), the four AXI4-Stream ports with the modes their TVALID direction
    gives; the wrapper has those ports, and the reader the package is rendered from agrees with yosys (one
    stripe: the top's own ports)."""
    pkg = _package()
    k = pkg.generics["STRIPES"]
    assert k == 4
    top = _yosys_ports([netpkg.NET_TOP_FILE], netpkg.NET_TOP, tmp_path)  # STRIPES = 1, its default
    assert {p.name: (p.direction, p.width) for p in netpkg.rtl_ports()} == top
    ports = netpkg.rtl_ports(stripes=k)
    wrapper = tmp_path / f"{pkg.kernel}.v"
    wrapper.write_text(pkg.wrapper_v)
    assert _yosys_ports([wrapper], pkg.kernel, tmp_path) == {p.name: (p.direction, p.width) for p in ports}
    # a stripe's port has the width of the top's port at one stripe (the top packs K of them side by side)
    packed = {p.top: p for p in ports if p.top}
    assert {t: (p.direction, p.width) for t, p in packed.items()} == {t: top[t] for t in packed}
    groups = netpkg.bus_interfaces(ports)
    kernel = ET.fromstring(pkg.kernel_xml).find("kernel")
    assert kernel is not None
    xml_ports = {p.get("name"): p for p in kernel.iter("port")}
    assert set(groups) == set(xml_ports) | {"ap_clk", "ap_rst_n", "interrupt"}
    assert set(xml_ports) == {"s_axi_control", *(f"m_axi_{s}{i}" for s in ("lgrad", "gather") for i in range(k)),
                              "s_axis_mac0", "m_axis_mac0", "m_axis_grad0", "s_axis_param0"}
    width = {name: {p.name[len(name) + 1:]: p for p in ports} for name, ports in groups.items()}
    assert int(xml_ports["s_axi_control"].get("range"), 16) == 2 ** width["s_axi_control"]["awaddr"].width
    def channels(busif: str) -> set[str]:
        return {s[:2] if s.startswith(("ar", "aw")) else s[0] for s in width[busif]}

    for i in range(k):
        assert channels(f"m_axi_lgrad{i}") == {"ar", "r"} and channels(f"m_axi_gather{i}") == {"aw", "w", "b"}
    for name, port in xml_ports.items():
        signals = width[name]
        if port.get("portType") == "stream":
            assert int(port.get("dataWidth")) == signals["tdata"].width == 8 * signals["tkeep"].width
            mode = "read_only" if signals["tvalid"].direction == "input" else "write_only"
            assert port.get("mode") == mode, name
        elif name.startswith("m_axi_"):
            data = signals.get("rdata") or signals["wdata"]
            assert port.get("mode") == "master" and int(port.get("dataWidth")) == data.width
            assert (signals.get("araddr") or signals["awaddr"]).width == 64
    assert "tready" not in width["s_axis_mac0"]  # the MAC's receive side cannot wait


def test_wrapper_lints_clean(tmp_path: Path) -> None:
    """The generated top (every bf16 / buffer variant renders the same port list) under verilator -Wall
    and iverilog -g2005 -Wall with net_kernel.f's sources."""
    from hls.rtl import simulators

    if not simulators.available("verilator"):
        pytest.skip("Verilator not installed")
    pkg = _package(grad_dtype="bf16", out_dtype="bf16")
    assert pkg.generics["WIRE_BF16"] == 1 and pkg.generics["PARAM_BF16"] == 1
    wrapper = tmp_path / f"{pkg.kernel}.v"
    wrapper.write_text(pkg.wrapper_v)
    files = [*map(str, pkg.sources()), str(wrapper)]
    env = {**os.environ, **simulators.simulator_env("verilator")}
    run = subprocess.run([simulators.verilator_bin(), "--lint-only", "-Wall", "--top-module", pkg.kernel, *files],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "%Warning" not in run.stdout + run.stderr, run.stdout + run.stderr
    iverilog = shutil.which("iverilog")
    if iverilog:
        run = subprocess.run([iverilog, "-g2005", "-Wall", "-o", str(tmp_path / "w.vvp"), "-s", pkg.kernel, *files],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0 and "warning" not in (run.stdout + run.stderr).lower(), run.stdout + run.stderr


@pytest.mark.parametrize("payload,window", [(1408, 128), (8192, 64)])
def test_generics_size_the_buffers_for_the_plan(payload: int, window: int) -> None:
    net = SimpleNamespace(payload_bytes=payload, window_packets=window, streams=[SimpleNamespace(stripes=2)] * 2)
    g = netpkg.rtl_generics(KernelSpec(grad_source="stream", out_sink="memory+stream"), net)
    beats = -(-payload // 64)
    assert g["RX_FRAME_BEATS"] == beats and 2 ** g["TX_BEATS_LOG2"] >= beats > 2 ** (g["TX_BEATS_LOG2"] - 1)
    assert 2 ** g["TX_SLOTS_LOG2"] >= window > 2 ** (g["TX_SLOTS_LOG2"] - 1)
    assert 2 ** g["RX_PAYLOAD_DEPTH_LOG2"] >= (2 * 2 ** g["RX_SLOT_LOG2"] + 1) * beats  # two flows' credits


# TEST DOUBLE for the Vivado commands package_xo.tcl calls: records, creates nothing.
VIVADO_TCL_STANDIN = r"""
namespace eval ipx {}
set ::order {}
proc unknown {args} { return "" }
proc obj {kind name parent} { lappend ::order [list $kind $name $parent]; return "$kind:$name" }
proc ipx::current_core {} { return core }
proc ipx::add_memory_map {args} { obj map [lindex $args end-1] [lindex $args end] }
proc ipx::add_address_block {args} { obj block [lindex $args end-1] [lindex $args end] }
proc ipx::add_register {args} { obj reg [lindex $args end-1] [lindex $args end] }
proc ipx::add_field {name reg} { obj field $name $reg }
proc ipx::add_register_parameter {args} {
    set reg [lindex $args end]
    lappend ::order [list param [lindex $args end-1] $reg]
    return "param:$reg"
}
proc ipx::associate_bus_interfaces {args} { lappend ::order [list busif [lindex $args 1] [lindex $args 3]] }
proc ipx::get_bus_interfaces {args} { return "busif:[lindex $args end]" }
proc add_files {args} { foreach f [lindex $args end] { lappend ::order [list source $f] } }
proc package_xo {args} { lappend ::order [concat package_xo $args] }
proc set_property {key value {obj ""}} { lappend ::order [list prop $obj $key $value] }
set script [lindex $argv 0]
set argv [lrange $argv 1 end]
set argc [llength $argv]
source $script
foreach rec $::order { puts $rec }
"""


def test_package_xo_tcl_builds_the_manifest_map_and_reads_the_rtl(tmp_path: Path) -> None:
    """package_xo.tcl under tclsh with Vivado's commands stood in for (a test double): the sources are
    net_kernel.f's files then the wrapper; every bus interface of the RTL top is associated with ap_clk;
    one memory map s_axi_control, one block reg0 of the decoded range, a register per word of the network
    manifest (arguments, STATUS, 64-bit counters) at its offset and size, ASSOCIATED_BUSIF on each pointer;
    package_xo names the kernel and kernel.xml."""
    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.skip("tclsh not installed (apt-get install tcl): needed to run the script under the stand-in")
    pkg = _package()
    man = pkg.manifest
    for rel, text in pkg.files().items():
        (tmp_path / rel).write_text(text)
    (tmp_path / "standin.tcl").write_text(VIVADO_TCL_STANDIN)
    xo = tmp_path / "out" / f"{pkg.kernel}.xo"
    run = subprocess.run([tclsh, str(tmp_path / "standin.tcl"), str(tmp_path / "package_xo.tcl"), str(RTL_DIR),
                          str(xo)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert run.returncode == 0, run.stderr
    recs = [[a or b for a, b in re.findall(r"\{([^{}]*)\}|(\S+)", ln)] for ln in run.stdout.splitlines()
            if ln and not ln.startswith("packaged ")]
    sources = [Path(r[1]) for r in recs if r[0] == "source"]
    assert sources == [*pkg.sources(), tmp_path / f"{pkg.kernel}.v"]
    busifs = {r[1]: r[2] for r in recs if r[0] == "busif"}
    groups = netpkg.bus_interfaces(netpkg.rtl_ports(stripes=pkg.generics["STRIPES"]))
    assert busifs == {g: "ap_clk" for g in groups if g not in ("ap_clk", "ap_rst_n", "interrupt")}
    props: dict[str, dict[str, str]] = {}
    for r in recs:
        if r[0] == "prop":
            props.setdefault(r[1], {})[r[2]] = r[3]
    objs = [r for r in recs if r[0] in ("map", "block", "reg", "param", "field")]
    assert [r for r in objs if r[0] == "map"] == [["map", "s_axi_control", "core"]]
    assert [r for r in objs if r[0] == "block"] == [["block", "reg0", "map:s_axi_control"]]
    assert int(props["block:reg0"]["range"]) == 2 ** man["address_bits"]
    want = {"CTRL": (man["control"]["CTRL"], 32), "GIER": (man["control"]["GIE"], 32),
            "IP_IER": (man["control"]["IER"], 32), "IP_ISR": (man["control"]["ISR"], 32)}
    want |= {a["name"]: (a["offset"], 64 if a["kind"] == "pointer" else 32) for a in man["args"]}
    want |= {("STATUS" if r["name"] == "status" else r["name"]): (r["offset"], 8 * r["size"]) for r in man["readonly"]}
    regs = [r[1] for r in objs if r[0] == "reg"]
    got = {n: (int(props[f"reg:{n}"]["address_offset"], 0), int(props[f"reg:{n}"]["size"])) for n in regs}
    assert len(regs) == len(set(regs)) and got == want
    params = {r[2]: props[f"param:{r[2]}"]["value"] for r in objs if r[0] == "param"}
    assert params == {f"reg:{a['name']}": f"m_axi_{a['name']}" for a in man["args"] if a["kind"] == "pointer"}
    fields = {r[1]: (int(props[f"field:{r[1]}"]["BIT_OFFSET"]), int(props[f"field:{r[1]}"]["BIT_WIDTH"]))
              for r in objs if r[0] == "field"}
    assert sum(w for _, w in fields.values()) == 32 and fields["AP_START"] == (0, 1)
    assert fields["AUTO_RESTART"] == (7, 1)
    assert props["busif:s_axi_control"]["slave_memory_map_ref"] == "s_axi_control"
    assert props["core"]["vitis_drc"] == "ctrl_protocol ap_ctrl_hs" and props["core"]["sdx_kernel_type"] == "rtl"
    pack = next(r for r in recs if r[0] == "package_xo")
    opts = dict(zip(pack[2::2], pack[3::2], strict=False))
    assert opts["-xo_path"] == str(xo) and opts["-kernel_name"] == pkg.kernel
    assert opts["-kernel_xml"] == str(tmp_path / "kernel.xml")
