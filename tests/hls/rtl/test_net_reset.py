"""A reset of the network kernel alone (ap_rst_n) in the middle of a ring step, and the ring's restart:
sim/tb/net/test_onic_net_reset.py on Verilator (one RTL card, N - 1 `hls.net.card.Card` peers, the
MAC port adapters, card memory and the AXI monitor not reset with the kernel).

Reset points: a frame half-way into the card's MAC port, a frame half-way out of it, the owner's
chunk half-way into the (stand-in) Adam kernel, a gathered-parameter write response owed. After
each: the card idle with STATUS 0, the aborted step's frames dropped and counted, only whole frames
on the MAC's transmit side; then the step restarted under a new step number is bit-exact against
the reference, replayed frames of the aborted step and the memory's stale answers dropped.
"""

from __future__ import annotations

import pytest
from test_net_kernel import DTYPES, NET_TB, SIM_PARAMS, SOURCES

from hls.paths import BUILD_DIR
from hls.rtl import simulators


def run(dtypes: str, points: str, seed: int, tag: str = "") -> None:
    if not simulators.available("verilator"):
        pytest.skip("verilator not installed")
    wire_bf16, param_bf16 = DTYPES[dtypes]
    env = {"ONIC_SEED": str(seed), "ONIC_POINTS": points, "WIRE_BF16": str(wire_bf16), "PARAM_BF16": str(param_bf16)}
    xml = simulators.run_cocotb(
        sources=SOURCES, toplevel="onic_net_kernel", test_module="test_onic_net_reset", test_dir=NET_TB,
        build_dir=BUILD_DIR / "sim" / "net" / f"onic_net_kernel-{dtypes}-verilator", simulator="verilator",
        parameters={"WIRE_BF16": wire_bf16, "PARAM_BF16": param_bf16, **SIM_PARAMS}, extra_env=env,
        testcase="test_reset_mid_step",
        log_file=BUILD_DIR / "sim" / "net" / f"onic_net_reset-{dtypes}{tag}.log",
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 1 and failed == 0, f"onic_net_kernel reset ({dtypes}{tag}): see {xml}"


def test_reset_mid_step() -> None:
    """N = 3, rank 1: a reset at each of the four points, each followed by a restarted step."""
    run("fp32", "rx_mid,tx_mid,update,ag", 5)


@pytest.mark.slow
@pytest.mark.parametrize(("dtypes", "points", "seed"), [
    pytest.param("fp32", "rx_mid@2:0,tx_mid@2:1,update@4:3,ag@4:0,rx_mid@5:2,ag@3:2", 41, id="fp32-positions"),
    pytest.param("bf16", "rx_mid@3:0,tx_mid@3:2,update@3:1,ag@4:2", 42, id="bf16"),
])
def test_reset_mid_step_sweep(dtypes: str, points: str, seed: int) -> None:
    run(dtypes, points, seed, tag=f"-{seed}")

