"""The ring protocol's transmit RTL (sim/rtl/net/onic_net_tx_*.v, README.md "Transmit") against hls.net.

- onic_net_tx_header: the 64-byte first beat byte for byte as hls.net.wire.build_frame builds it.
- onic_net_tx_retx: the sequence numbers sent for seeded ACK/NAK/timeout sequences equal what
  hls.net.reliability.Sender sends, replayed frames are bit-identical, in flight never exceeds
  min(window, credit), and the counters match.
- onic_net_tx_arb: packet-level arbitration (no interleaving), store-and-forward (TVALID never
  drops mid-frame under random back-pressure), minimum frame padding.
- onic_net_tx: end to end through cocotbext-eth's EthMacTx at 100 Gb/s with a lossy peer.
- yosys synth_xilinx (UltraScale+): at most 6 LUT levels between registers, no non-clock net above
  1,000 loads, the retransmit buffer and the frame FIFO in block RAM.
Verilator always; Icarus marked `icarus`: by default the retransmit buffer's UltraRAM branch, every
other case (the whole transmit path too, since session 14) with --full. Longer sweeps (more seeds) are
marked slow.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import netlist as timing
from hls.rtl import simulators, synth, timing_report
from hls.rtl_sources import read_filelist

NET_RTL = RTL_DIR / "net"
NET_TB = TB_DIR / "net"
SOURCES = read_filelist(NET_RTL / "net_tx.f")
# each unit's bench builds only its own files, so an edit to one module rebuilds one model
UNIT_FILES = {"onic_net_tx_header": ("onic_net_tx_header.v",),
              "onic_net_tx_retx": ("onic_fifo.v", "onic_net_csum_beat.v", "onic_net_tx_retx.v"),
              "onic_net_tx_arb": ("onic_fifo.v", "onic_net_tx_arb.v")}


def sources(module: str) -> list[Path]:
    names = UNIT_FILES.get(module)
    return SOURCES if names is None else [f for f in SOURCES if f.name in names]


def run(module: str, simulator: str, params: dict[str, int], env: dict[str, str], tag: str) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    xml = simulators.run_cocotb(
        sources=sources(module), toplevel=module, test_module=f"test_{module}", test_dir=NET_TB,
        build_dir=BUILD_DIR / "sim" / "net" / f"{module}-{tag}-{simulator}", simulator=simulator,
        parameters=params, extra_env=env,
    )
    ran, failed = simulators.check_results(xml)
    assert ran >= 1 and failed == 0, f"{module} ({tag}, {simulator}): see {xml}"


SIMS = ["verilator", pytest.param("icarus", marks=pytest.mark.icarus)]
# Icarus runs these units by default inside onic_net_tx (test_top) and the network kernel and card tops;
# alone (their own benches) under --full, since session 11 (make test's budget)
SIMS_UNIT = ["verilator", pytest.param("icarus", marks=(pytest.mark.icarus, pytest.mark.slow))]


@pytest.mark.parametrize("simulator", SIMS_UNIT)
def test_header(simulator: str) -> None:
    run("onic_net_tx_header", simulator, {}, {"ONIC_SEED": "11", "ONIC_HEADERS": "400"}, "default")


RETX_CASES = {
    # tag: (parameters, environment)
    "p1408": ({"SLOTS_LOG2": 3, "BEATS_LOG2": 5},
              {"ONIC_PAYLOAD": "1408", "ONIC_PACKETS": "40", "ONIC_EVENTS": "150", "ONIC_WINDOW": "6",
               "ONIC_CREDIT": "5"}),
    "p8192": ({"SLOTS_LOG2": 2, "BEATS_LOG2": 8, "URAM": 1},  # the UltraRAM branch
              {"ONIC_PAYLOAD": "8192", "ONIC_PACKETS": "12", "ONIC_EVENTS": "50", "ONIC_WINDOW": "4",
               "ONIC_CREDIT": "8"}),
}


def cases(names: list[str], icarus_slow: tuple[str, ...] = ()) -> list[object]:
    """Every case on Icarus (those in `icarus_slow` marked slow); the first on Verilator by default, the
    others on Verilator marked slow (a Verilator build of these 512-bit designs takes ~30 s of the 2
    shared cores)."""
    out: list[object] = []
    for k, name in enumerate(names):
        out.append(pytest.param(name, "verilator", marks=() if k == 0 else pytest.mark.slow, id=f"{name}-verilator"))
        marks = (pytest.mark.icarus, pytest.mark.slow) if name in icarus_slow else pytest.mark.icarus
        out.append(pytest.param(name, "icarus", marks=marks, id=f"{name}-icarus"))
    return out


@pytest.mark.parametrize(("case", "simulator"), cases(["p1408", "p8192"], icarus_slow=("p1408",)))
def test_retx(case: str, simulator: str) -> None:
    params, env = RETX_CASES[case]
    env = {**env, "ONIC_SEED": "5", "SLOTS_LOG2": str(params["SLOTS_LOG2"])}
    run("onic_net_tx_retx", simulator, params, env, case)


@pytest.mark.parametrize("simulator", SIMS_UNIT)
def test_arb(simulator: str) -> None:
    """A 256-beat FIFO (two jumbo frames) so the FIFO fills and empties often; an ACK/NAK waits
    behind at most one data frame. Its receives are time-limited: a stall fails, it cannot hang."""
    params = {"FIFO_LOG2": 8, "MAX_FRAME_BEATS": 129}
    run("onic_net_tx_arb", simulator, params, {"ONIC_SEED": "9", "ONIC_FRAMES": "24", "ONIC_MAX_BEATS": "129"},
        "f8")


TOP_CASES = {
    # tag: (parameters, environment)
    "p1408": ({"SLOTS_LOG2": 3, "BEATS_LOG2": 5, "FIFO_LOG2": 7},
              {"ONIC_PAYLOAD": "1408", "ONIC_PACKETS": "30", "ONIC_LOSS": "0.08"}),
    "p8192": ({"SLOTS_LOG2": 3, "BEATS_LOG2": 8, "FIFO_LOG2": 9, "URAM": 0},
              {"ONIC_PAYLOAD": "8192", "ONIC_PACKETS": "10", "ONIC_LOSS": "0.1"}),
}


# both on Icarus under --full (make test budget, since session 14); test_retx[p8192-icarus] runs Icarus by default
@pytest.mark.parametrize(("case", "simulator"), cases(["p1408", "p8192"], icarus_slow=("p1408", "p8192")))
def test_top(case: str, simulator: str) -> None:
    """onic_net_tx end to end: EthMacTx at 100 Gb/s, a lossy peer, frames equal build_frame."""
    params, env = TOP_CASES[case]
    run("onic_net_tx", simulator, params, {**env, "ONIC_SEED": "3"}, case)


@pytest.mark.parametrize("simulator", SIMS_UNIT)
def test_top_scalar(simulator: str) -> None:
    """The AG sender carries the two-phase scalar flow (8 reference cards' rank 5 frames, lossy), then
    `start_ag` restarts it for the AG packets."""
    params, env = TOP_CASES["p1408"]
    env = {**env, "ONIC_SEED": "7", "ONIC_PACKETS": "12", "ONIC_SCALAR": "1"}
    run("onic_net_tx", simulator, params, env, "p1408")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [41, 42, 43, 44])
def test_top_scalar_seeds(seed: int) -> None:
    params, env = TOP_CASES["p1408"]
    env = {**env, "ONIC_SEED": str(seed), "ONIC_PACKETS": "30", "ONIC_LOSS": "0.15", "ONIC_SCALAR": "1"}
    run("onic_net_tx", "verilator", params, env, "p1408")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [21, 22, 23, 24])
@pytest.mark.parametrize("case", sorted(RETX_CASES))
def test_retx_seeds(case: str, seed: int) -> None:
    params, env = RETX_CASES[case]
    env = {**env, "ONIC_SEED": str(seed), "SLOTS_LOG2": str(params["SLOTS_LOG2"]),
           "ONIC_EVENTS": str(4 * int(env["ONIC_EVENTS"]))}
    run("onic_net_tx_retx", "verilator", params, env, case)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [31, 32, 33, 34])
@pytest.mark.parametrize("case", sorted(TOP_CASES))
def test_top_seeds(case: str, seed: int) -> None:
    params, env = TOP_CASES[case]
    env = {**env, "ONIC_SEED": str(seed), "ONIC_PACKETS": str(3 * int(env["ONIC_PACKETS"])), "ONIC_LOSS": "0.15"}
    run("onic_net_tx", "verilator", params, env, case)


@pytest.mark.parametrize(("module", "params"), [
    ("onic_net_tx_header", {}),
    ("onic_net_tx_retx", {"SLOTS_LOG2": 7, "BEATS_LOG2": 5}),   # 128 packets of 1408 B: a 4096-beat buffer
    # UltraRAM inference: --full (the network kernel's synthesis, --full too, has its 16 URAM)
    pytest.param("onic_net_tx_retx", {"SLOTS_LOG2": 7, "BEATS_LOG2": 5, "URAM": 1}, marks=pytest.mark.slow),
    ("onic_net_tx_arb", {"FIFO_LOG2": 9}),
], ids=["header", "retx128x32", "retx128x32-uram", "arb512"])
def test_unit_timing_shape(module: str, params: dict[str, int]) -> None:
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed (make deps-yosys)")
    run_ = synth.synth_module(sources(module), module, params)  # cached in build/synth by the sources' hashes
    report = timing_report.row(run_)
    assert report["lut_levels"] <= timing.GOAL_LUT_LEVELS, report
    assert report["max_fanout"] <= timing.GOAL_MAX_FANOUT, report
    if params.get("URAM"):
        assert run_["cells"].get("URAM288") == 8, f"not in UltraRAM: {run_['cells']}"
    elif module != "onic_net_tx_header":
        assert any(c.startswith("RAMB") for c in run_["cells"]), f"not in block RAM: {run_['cells']}"


@pytest.mark.slow
def test_top_timing_shape() -> None:
    """onic_net_tx at its defaults (128 x 32-beat retransmit buffers in UltraRAM, a 512-beat frame FIFO)."""
    if not shutil.which("yosys"):
        pytest.skip("yosys not installed (make deps-yosys)")
    run_ = synth.synth_module(SOURCES, "onic_net_tx", {})
    report = timing_report.row(run_)
    assert report["lut_levels"] <= timing.GOAL_LUT_LEVELS, report
    assert report["max_fanout"] <= timing.GOAL_MAX_FANOUT, report
    assert run_["cells"].get("URAM288") == 16, run_["cells"]
