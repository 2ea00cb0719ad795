"""The network kernel's package for the rail placement (issue 26 point 5): register map, kernel.xml,
the rail link.cfg with its stream_connect lines to the Adam kernel and XUP VNx cmac_<i>, and a real
rail build that stops in one line because the network kernel's RTL top does not exist yet."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hls import net_regmap
from hls.errors import UserError
from hls.generate import render
from hls.net.card import COUNTER_NAMES, DROP_CAUSES
from hls.spec import KernelSpec
from hls.targets import get_target, load_catalog
from hls.vitis import build, netpkg
from optimusnic.cli import main

STANDINS = Path(__file__).resolve().parents[2] / "doubles" / "standins"
XRT_TARGETS = [k for k, t in load_catalog().items() if t.has_xrt_flow]


def _package(target: str = "u55c", grad_source: str = "stream", kernel: str = "hls") -> netpkg.NetPackage:
    return netpkg.package(KernelSpec(target=target, grad_source=grad_source), get_target(target), kernel)


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
    assert [r["name"] for r in man["readonly"]] == ["status", *man["counters"]]
    assert all(r["offset"] % 8 == 0 for r in man["readonly"][1:])  # 64-bit counters, 8-byte aligned
    for wanted in ("local_mac_lo", "local_ip", "local_port", "comm", "rank", "world", "window", "timeout",
                   "credit", "payload_bytes", "step"):
        assert wanted in names
    pointers = [a["name"] for a in man["args"] if a["kind"] == "pointer"]
    assert pointers and all(p.startswith(("lgrad", "gather")) for p in pointers)


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
    assert ("m_axis_grad0" in streams) == (grad_source == "stream")
    assert {"s_axis_mac0", "m_axis_mac0"} <= streams


def test_package_is_deterministic() -> None:
    assert _package().files() == _package().files()


@pytest.mark.parametrize("kernel,grad_port", [("hls", "grad"), ("rtl", "s_axis_grad")])
def test_rail_dry_run_prints_stream_connect_and_the_mac(kernel: str, grad_port: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert main(["build", "--target", "u55c", "--grad-source", "stream", "--kernel", kernel, "--placement", "rail",
                 "--dry-run", "-o", str(run), "--registry", str(tmp_path / "reg")]) == 0
    out = capsys.readouterr().out
    for line in ("nk=optimusnic_adamw_net:1:optimusnic_adamw_net_1", "nk=cmac_0:1:cmac_0",
                 "stream_connect=cmac_0.M_AXIS:optimusnic_adamw_net_1.s_axis_mac0",
                 "stream_connect=optimusnic_adamw_net_1.m_axis_mac0:cmac_0.S_AXIS",
                 f"stream_connect=optimusnic_adamw_net_1.m_axis_grad0:optimusnic_adamw_1.{grad_port}",
                 "sp=optimusnic_adamw_net_1.m_axi_lgrad0:", "sp=optimusnic_adamw_net_1.m_axi_gather0:",
                 "xup_vitis_network_example", "NOT BUILT", "no network bitstream is claimed",
                 f"{run / 'net' / 'optimusnic_adamw_net.xo'}", f"{run / 'net' / 'cmac_0.xo'}",
                 f"--config {run / 'net' / 'link.cfg'}"):
        assert line in out, line
    assert not run.exists() and not (tmp_path / "reg").exists()


def test_rail_dry_run_with_gradients_from_memory_connects_no_grad_stream(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "u55c", "--placement", "rail", "--dry-run", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "stream_connect=cmac_0.M_AXIS:" in out and "m_axis_grad" not in out


def test_rail_dry_run_json_carries_the_network_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--target", "u55c", "--grad-source", "stream", "--placement", "rail", "--dry-run",
                 "--json", "-o", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["network"]["built"] is False and plan["network"]["mac_kernels"] == ["cmac_0"]
    assert "stream_connect=cmac_0.M_AXIS" in plan["link_cfg"]
    assert plan["network"]["manifest"] == _package().manifest


def test_rail_on_a_card_without_xrt_is_refused() -> None:
    with pytest.raises(UserError, match="no XRT flow"):
        build.plan_build(KernelSpec(target="v80"), get_target("v80"), placement="rail")


def test_real_rail_build_stops_in_one_line_and_runs_no_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    for tool in ("vitis_hls", "vivado", "v++"):
        real = shutil.which(tool)
        if real and Path(real).parent != STANDINS:
            pytest.skip(f"a real {tool} is on PATH ({real}); this test uses only the stand-ins")
    monkeypatch.setenv("PATH", f"{STANDINS}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "standin_calls.jsonl"
    monkeypatch.setenv("OPTIMUSNIC_STANDIN_LOG", str(log))
    run, reg = tmp_path / "run", tmp_path / "reg"
    rc = main(["build", "--target", "u55c", "--grad-source", "stream", "--placement", "rail", "-o", str(run),
               "--registry", str(reg)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "optimusnic_adamw_net is not packaged yet" in err[0] and "optimusnic_adamw_net.xo" in err[0]
    assert not log.exists()  # no tool ran
    assert not reg.exists() and not (run / "link").exists()
    assert {p.name for p in (run / "net").iterdir()} == {"kernel.xml", "network.json", "link.cfg"}
    pkg = _package()
    assert (run / "net" / "link.cfg").read_text() == pkg.link_cfg
    assert json.loads((run / "net" / "network.json").read_text()) == pkg.manifest


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
