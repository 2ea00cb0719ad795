"""The ring protocol's transmit RTL (sim/rtl/net/onic_net_tx_*.v, README_tx.md) against hls.net.

- onic_net_tx_header: the 64-byte first beat byte for byte as hls.net.wire.build_frame builds it.
- onic_net_tx_retx: the sequence numbers sent for seeded ACK/NAK/timeout sequences equal what
  hls.net.reliability.Sender sends, replayed frames are bit-identical, in flight never exceeds
  min(window, credit), and the counters match.
- onic_net_tx_arb: packet-level arbitration (no interleaving), store-and-forward (TVALID never
  drops mid-frame under random back-pressure), minimum frame padding.
Verilator always; Icarus marked `icarus`. Longer sweeps are marked slow.
"""

from __future__ import annotations

import pytest

from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl import simulators
from hls.rtl_sources import read_filelist

NET_RTL = RTL_DIR / "net"
NET_TB = TB_DIR / "net"
SOURCES = read_filelist(NET_RTL / "net_tx.f")


def run(module: str, simulator: str, params: dict[str, int], env: dict[str, str], tag: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed")
    if simulator == "verilator":
        monkeypatch.setenv("MAKEFLAGS", "CFG_CXXFLAGS_PCH_I=-include")
    xml = simulators.run_cocotb(
        sources=SOURCES, toplevel=module, test_module=f"test_{module}", test_dir=NET_TB,
        build_dir=BUILD_DIR / "sim" / "net" / f"{module}-{tag}-{simulator}", simulator=simulator,
        parameters=params, extra_env=env,
    )
    ran, failed = simulators.check_results(xml)
    assert ran >= 1 and failed == 0, f"{module} ({tag}, {simulator}): see {xml}"


SIMS = ["verilator", pytest.param("icarus", marks=pytest.mark.icarus)]


@pytest.mark.parametrize("simulator", SIMS)
def test_header(simulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run("onic_net_tx_header", simulator, {}, {"ONIC_SEED": "11", "ONIC_HEADERS": "400"}, "default", monkeypatch)


RETX_CASES = {
    # tag: (parameters, environment)
    "p1408": ({"SLOTS_LOG2": 3, "BEATS_LOG2": 5},
              {"ONIC_PAYLOAD": "1408", "ONIC_PACKETS": "40", "ONIC_EVENTS": "150", "ONIC_WINDOW": "6",
               "ONIC_CREDIT": "5"}),
    "p8192": ({"SLOTS_LOG2": 2, "BEATS_LOG2": 8},
              {"ONIC_PAYLOAD": "8192", "ONIC_PACKETS": "12", "ONIC_EVENTS": "50", "ONIC_WINDOW": "4",
               "ONIC_CREDIT": "8"}),
}


@pytest.mark.parametrize("simulator", SIMS)
@pytest.mark.parametrize("case", sorted(RETX_CASES))
def test_retx(case: str, simulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    params, env = RETX_CASES[case]
    env = {**env, "ONIC_SEED": "5", "SLOTS_LOG2": str(params["SLOTS_LOG2"])}
    run("onic_net_tx_retx", simulator, params, env, case, monkeypatch)


@pytest.mark.parametrize("simulator", SIMS)
def test_arb(simulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256-beat FIFO (two jumbo frames) so the FIFO fills and empties often."""
    params = {"FIFO_LOG2": 8, "MAX_FRAME_BEATS": 129}
    run("onic_net_tx_arb", simulator, params, {"ONIC_SEED": "9", "ONIC_FRAMES": "40", "ONIC_MAX_BEATS": "129"},
        "f8", monkeypatch)


TOP_CASES = {
    # tag: (parameters, environment)
    "p1408": ({"SLOTS_LOG2": 3, "BEATS_LOG2": 5, "FIFO_LOG2": 7},
              {"ONIC_PAYLOAD": "1408", "ONIC_PACKETS": "30", "ONIC_LOSS": "0.08"}),
    "p8192": ({"SLOTS_LOG2": 3, "BEATS_LOG2": 8, "FIFO_LOG2": 9},
              {"ONIC_PAYLOAD": "8192", "ONIC_PACKETS": "10", "ONIC_LOSS": "0.1"}),
}


@pytest.mark.parametrize("simulator", SIMS)
@pytest.mark.parametrize("case", sorted(TOP_CASES))
def test_top(case: str, simulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """onic_net_tx end to end: EthMacTx at 100 Gb/s, a lossy peer, frames equal build_frame."""
    params, env = TOP_CASES[case]
    run("onic_net_tx", simulator, params, {**env, "ONIC_SEED": "3"}, case, monkeypatch)
