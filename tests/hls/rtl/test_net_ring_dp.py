"""The card's ring datapath (sim/rtl/net/onic_net_reduce.v .. onic_net_ring_dp.v, README.md
"Ring datapath") against hls.net.ring, in cocotb benches (sim/tb/net/).

- onic_net_reduce: every lane of every beat against hls.net.ring.add_partial (fp32 and bf16
  wires; class values, ties, subnormals, NaN/inf/-0), random idle and back-pressure; one beat
  per clock when nothing stalls.
- onic_net_ring_dp: one card of a ring of N = 2, 3, 4 at every rank r, fp32 and bf16 wires,
  small chunks of a few short packets, hop-major and round-major order (design.md 8.2);
  received RS and AG packets with random gaps, random back-pressure on every output, card
  memory behind cocotbext-axi RAM models with latency and the AXI protocol monitor: every RS
  and AG descriptor and payload beat sent, the Adam kernel's gradient stream and the gathered
  chunks in memory against the reference.
- onic_net_ring_dp with its buffers in STRIPES stripes (hls/layout.py's rule over the whole
  lgrad and gather buffers): a wrapper generated here gives each stripe's packed AXI signals
  their own port, each stripe on its own region of the bench's one memory; the host side of the
  bench writes lgrad with layout.split and reads gather with layout.join. Two stripes
  (round-major runs that start on odd beats, hop-major chunks of odd beat counts) and four, both
  with --full (two stripes run by default in the card, tests/hls/rtl/test_card_rtl.py).
- yosys synth_xilinx (UltraScale+): <= 6 LUT levels, no non-clock net above 1,000 loads (slow).
Verilator always; Icarus marked `icarus`; wider sweeps, the fp32 adder lanes (fp32_add as
test_fp_units checks it) and the bf16 datapath on Verilator marked slow.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import netlist as timing
from hls.rtl import simulators, synth, timing_report
from hls.rtl_sources import read_filelist

NET_RTL = RTL_DIR / "net"
NET_TB = TB_DIR / "net"
SOURCES = read_filelist(NET_RTL / "net_ring.f")


def run(module: str, simulator: str, params: dict[str, int], env: dict[str, str], tag: str, expect: int = 1,
        sources: list[Path] | None = None, test_module: str | None = None) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    xml = simulators.run_cocotb(
        sources=sources or SOURCES, toplevel=module, test_module=test_module or f"test_{module}", test_dir=NET_TB,
        build_dir=BUILD_DIR / "sim" / "net" / f"{module}-{tag}-{simulator}", simulator=simulator,
        parameters=params, extra_env=env,
    )
    ran, failed = simulators.check_results(xml)
    assert ran == expect and failed == 0, f"{module} ({tag}, {simulator}): see {xml}"


WIRES = {"fp32": 0, "bf16": 1}


@pytest.mark.parametrize(("wire", "simulator"), [
    # the bf16 lanes are the new composition (widen, add, round); the fp32 lanes are fp32_add as
    # test_fp_units checks it: on Verilator (a ~30 s build of the 512-bit design) only with --full
    pytest.param("bf16", "verilator", id="bf16-verilator"),
    pytest.param("fp32", "verilator", marks=pytest.mark.slow, id="fp32-verilator"),
    pytest.param("bf16", "icarus", marks=pytest.mark.icarus, id="bf16-icarus"),
    pytest.param("fp32", "icarus", marks=(pytest.mark.icarus, pytest.mark.slow), id="fp32-icarus"),
])
def test_reduce(wire: str, simulator: str) -> None:
    beats = "400" if simulator == "verilator" else "120"
    run("onic_net_reduce", simulator, {"WIRE_BF16": WIRES[wire]},
        {"ONIC_SEED": "7", "ONIC_BEATS": beats, "ONIC_WIRE": wire}, wire, expect=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [31, 32])
@pytest.mark.parametrize("wire", sorted(WIRES))
def test_reduce_sweep(wire: str, seed: int) -> None:
    run("onic_net_reduce", "verilator", {"WIRE_BF16": WIRES[wire]},
        {"ONIC_SEED": str(seed), "ONIC_BEATS": "5000", "ONIC_WIRE": wire}, wire, expect=2)


DTYPES = {"fp32": (0, 0), "bf16": (1, 1), "bf16-fp32": (1, 0)}  # wire / parameter dtype


def ring_dp(dtypes: str, simulator: str, cases: str, seed: int,
            extra: dict[str, str] | None = None, tag: str = "") -> None:
    wire_bf16, param_bf16 = DTYPES[dtypes]
    params = {"WIRE_BF16": wire_bf16, "PARAM_BF16": param_bf16, "RD_FIFO_LOG2": 5, "WR_FIFO_LOG2": 5,
              "MAX_BURST": 8}
    env = {"ONIC_SEED": str(seed), "ONIC_CASES": cases, "WIRE_BF16": str(wire_bf16), "PARAM_BF16": str(param_bf16),
           **(extra or {})}
    run("onic_net_ring_dp", simulator, params, env, dtypes + tag)


_PORT = re.compile(r"^\s*(input|output)\s+wire\s*(\[[^\]]*\])?\s*(\w+)\s*,?\s*(?://.*)?$")
_STRIPED = re.compile(r"^\[STRIPES(?:\*(\w+))?-1:0\]$")


def striped_wrapper(module: str, stripes: int, prefixes: tuple[str, ...]) -> str:
    """Verilog of `<module>_striped`: `module` with STRIPES = `stripes` and each of its packed per-stripe
    AXI ports (`<prefix>_<sig>`, [STRIPES*W-1:0]) as one port per stripe, `<prefix><k>_<sig>`, so that a
    bench attaches one AXI model per stripe. The other ports and the parameters pass through."""
    text = (NET_RTL / f"{module}.v").read_text()
    params = re.findall(r"^\s*parameter integer (\w+) = (\d+)", text.split(") (", 1)[0], re.M)
    head = re.search(r"\)\s*\(\s*\n(.*?)\n\s*\);", text, re.S)
    assert head is not None
    ports, body, conns = [], [], []
    for line in head.group(1).splitlines():
        code = re.sub(r"/\*.*?\*/", "", line).strip()
        if not code or code.startswith("//"):
            continue
        m = _PORT.match(code)
        assert m, code
        direction, width, name = m.group(1), m.group(2) or "", m.group(3)
        prefix = next((p for p in prefixes if name.startswith(p + "_")), None)
        if prefix is None:
            ports.append(f"    {direction} wire {width} {name}")
            conns.append(f"        .{name}({name})")
            continue
        w = _STRIPED.match(width)
        assert w, f"{name}: {width}"
        each = w.group(1) or "1"
        sig = name[len(prefix) + 1:]
        body.append(f"    wire [STRIPES*{each}-1:0] {name};")
        conns.append(f"        .{name}({name})")
        for k in range(stripes):
            port = f"{prefix}{k}_{sig}"
            ports.append(f"    {direction} wire [{each}-1:0] {port}")
            if direction == "input":
                body.append(f"    assign {name}[{k}*{each} +: {each}] = {port};")
            else:
                body.append(f"    assign {port} = {name}[{k}*{each} +: {each}];")
    decl = [f"    parameter integer {n} = {v}" for n, v in params if n != "STRIPES"]
    return "\n".join([
        "// generated by tests/hls/rtl/test_net_ring_dp.py: one port per stripe", "`resetall",
        "`timescale 1ns / 1ps", "`default_nettype none", f"module {module}_striped #(", ",\n".join(decl), ") (",
        ",\n".join(ports), ");", f"    localparam integer STRIPES = {stripes};", *body,
        f"    {module} #(", ",\n".join(f"        .{n}({n})" for n, _ in params), "    ) dut_inst (",
        ",\n".join(conns), "    );", "endmodule", "`resetall", ""])


def ring_dp_striped(stripes: int, dtypes: str, simulator: str, cases: str, seed: int,
                    extra: dict[str, str] | None = None) -> None:
    """onic_net_ring_dp with STRIPES = `stripes` behind its generated per-stripe wrapper."""
    wire_bf16, param_bf16 = DTYPES[dtypes]
    tag = f"{dtypes}-k{stripes}"
    build = BUILD_DIR / "sim" / "net" / f"onic_net_ring_dp_striped-{tag}-{simulator}"
    build.mkdir(parents=True, exist_ok=True)
    wrapper = build / "onic_net_ring_dp_striped.v"
    text = striped_wrapper("onic_net_ring_dp", stripes, ("m_axi_grad", "m_axi_gather"))
    if not wrapper.exists() or wrapper.read_text() != text:
        wrapper.write_text(text)
    params = {"WIRE_BF16": wire_bf16, "PARAM_BF16": param_bf16, "RD_FIFO_LOG2": 5, "WR_FIFO_LOG2": 5,
              "MAX_BURST": 8}
    env = {"ONIC_SEED": str(seed), "ONIC_CASES": cases, "WIRE_BF16": str(wire_bf16), "PARAM_BF16": str(param_bf16),
           "ONIC_STRIPES": str(stripes), **(extra or {})}
    run("onic_net_ring_dp_striped", simulator, params, env, tag, sources=[*SOURCES, wrapper],
        test_module="test_onic_net_ring_dp")


# 43 s (fresh-clone CI, session 14): make test budget. By default two stripes run in the card
# (tests/hls/rtl/test_card_rtl.py: fp32, lgrad and gather in 2 stripes each)
@pytest.mark.slow
def test_ring_dp_two_stripes() -> None:
    """Two stripes: every rank of N = 3 in hop-major order (chunks of odd beat counts start on odd beats)
    and in round-major order (segments of 1 to 3 one-beat packets: runs start on any beat), bf16 wire
    and parameters (partial last beats on either stripe). Six steps in one simulation (Verilator)."""
    ring_dp_striped(2, "bf16", "verilator", "3:0:80:64:1,3:1:112:64:3,3:2:208:64:2,3:1:80:128,2:0:112:64,2:1:48:192", 5)


@pytest.mark.slow
@pytest.mark.parametrize("stripes", [2, 4, 8])
@pytest.mark.parametrize("dtypes", ["fp32", "bf16-fp32"])
def test_ring_dp_stripes_sweep(stripes: int, dtypes: str) -> None:
    """2, 4 and 8 stripes: N = 2, 3, 4 at every rank in both orders."""
    ring_dp_striped(stripes, dtypes, "verilator", "all:2/3/4,rounds:2/3/4", 50 + stripes)


@pytest.mark.parametrize("dtypes", [
    # both --full (make test budget); by default the ring datapath runs inside the card and network
    # kernel tests on Verilator, and bf16 here on Icarus (test_ring_dp_icarus; CI installs Icarus)
    pytest.param("fp32", marks=pytest.mark.slow, id="fp32"),
    pytest.param("bf16", marks=pytest.mark.slow, id="bf16"),
])
def test_ring_dp(dtypes: str) -> None:
    """N = 2, 3, 4 at every rank, hop-major and round-major order (segments of 1 to 3 packets):
    eighteen steps in one simulation (Verilator)."""
    ring_dp(dtypes, "verilator", "all:2/3/4,rounds:2/3/4", 3)


@pytest.mark.icarus
def test_ring_dp_icarus() -> None:
    """The bf16 wire and parameters (partial last beats) at every rank of N = 3, and N = 2, rank 1;
    round-major order at every rank of N = 3."""
    ring_dp("bf16", "icarus", "all:3,2:1:48:64,rounds:3", 4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [41, 42])
@pytest.mark.parametrize("dtypes", sorted(DTYPES))
def test_ring_dp_sweep(dtypes: str, seed: int) -> None:
    """N = 2 .. 6 at every rank in both orders, more seeds, the mixed bf16 wire / fp32 parameters."""
    ring_dp(dtypes, "verilator", "all:2/3/4/5/6,rounds:2/3/4/5/6", seed)


@pytest.mark.slow
@pytest.mark.parametrize("simulator", ["verilator", pytest.param("icarus", marks=pytest.mark.icarus)])
def test_ring_dp_starved(simulator: str) -> None:
    """Inputs idle 60 % of clocks, every output refusing 85 %: nothing lost, nothing reordered."""
    ring_dp("fp32", simulator, "all:3,4:2:112:64,rounds:3,4:1:208:64:2", 9, {"ONIC_IDLE": "0.6", "ONIC_STALL": "0.85"})


def _shape(module: str, params: dict[str, int]) -> dict[str, object]:
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed (make deps-yosys)")
    run_ = synth.synth_module(SOURCES, module, params)  # cached in build/synth by the sources' hashes
    report = timing_report.row(run_)
    assert report["lut_levels"] <= timing.GOAL_LUT_LEVELS, report
    assert report["max_fanout"] <= timing.GOAL_MAX_FANOUT, report
    return run_


# 30 s (the small blocks) to 10 min (32 adders) of yosys each: with --full
@pytest.mark.slow
@pytest.mark.parametrize(("module", "params"), [
    ("onic_net_chunk_walk", {}),
    ("onic_net_packetize", {}),
    ("onic_net_grad_reader", {"FIFO_LOG2": 8}),
    ("onic_net_grad_reader", {"FIFO_LOG2": 8, "STRIPES": 4}),
    ("onic_net_stripe_run", {"STRIPES": 8}),
    ("onic_net_reduce", {"WIRE_BF16": 0}),
    ("onic_net_reduce", {"WIRE_BF16": 1}),
], ids=["chunk_walk", "packetize", "grad_reader", "grad_reader-k4", "stripe_run-k8", "reduce-fp32", "reduce-bf16"])
def test_unit_timing_shape(module: str, params: dict[str, int]) -> None:
    run_ = _shape(module, params)
    if module == "onic_net_grad_reader" and params.get("STRIPES", 1) == 1:
        assert any(c.startswith("RAMB") for c in run_["cells"]), f"prefetch FIFO not in block RAM: {run_['cells']}"
    elif module == "onic_net_grad_reader":  # 4 stripes: a 64-beat FIFO each, distributed RAM
        assert any(c.startswith("RAM64M") for c in run_["cells"]), f"prefetch FIFOs in flip-flops: {run_['cells']}"


@pytest.mark.slow
@pytest.mark.parametrize("dtypes", ["fp32", "bf16"])
def test_ring_dp_timing_shape(dtypes: str) -> None:
    """onic_net_ring_dp at its defaults (a 256-beat prefetch FIFO, a 128-beat write FIFO)."""
    wire_bf16, param_bf16 = DTYPES[dtypes]
    _shape("onic_net_ring_dp", {"WIRE_BF16": wire_bf16, "PARAM_BF16": param_bf16})
