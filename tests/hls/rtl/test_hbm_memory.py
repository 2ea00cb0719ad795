"""The card-memory model of the RTL bench (sim/tb/kernel/hbm_memory.py) on Verilator.

Runs sim/tb/kernel/test_card_memory.py on a pass-through top: per-channel bandwidth (1 read
port, 2 read ports on one channel, a read and a write port on one channel, 2 channels),
random stalls, per-burst read latency, and the ideal mode. Prints the measured beats/clock.
"""

from __future__ import annotations

import json
import random
import sys

import pytest

from hls.paths import BUILD_DIR, TB_DIR, TB_MODELS_DIR
from hls.rtl import simulators

KERNEL_TB = TB_DIR / "kernel"
sys.path.insert(0, str(TB_MODELS_DIR))

hbm_memory = pytest.importorskip("hbm_memory", reason="cocotb and cocotbext-axi are not installed")


def test_latency_range_in_kernel_clocks_and_replayable() -> None:
    assert hbm_memory.ns_to_clocks(100, 300) == 30 and hbm_memory.ns_to_clocks(250, 300) == 75
    assert hbm_memory.ns_to_clocks(100, 250) == 25 and hbm_memory.ns_to_clocks(1, 300) == 1
    draws = []
    for _ in range(2):
        draw = hbm_memory._LatencyDraw((30, 75), random.Random(7))
        draws.append([draw() for _ in range(50)])
    assert draws[0] == draws[1] and min(draws[0]) >= 30 and max(draws[0]) <= 75 and len(set(draws[0])) > 10
    assert {hbm_memory._LatencyDraw(64, None)() for _ in range(5)} == {64}


def test_card_memory_bandwidth_and_latency() -> None:
    if not simulators.available("verilator"):
        pytest.skip("Verilator not installed: `make deps`")
    build_dir = BUILD_DIR / "sim" / "hbm_memory"
    result = build_dir / "figures.json"
    build_dir.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    xml = simulators.run_cocotb(
        sources=[TB_MODELS_DIR / "hbm_memory_top.v"],
        toplevel="hbm_memory_top",
        test_module="test_card_memory",
        test_dir=KERNEL_TB,
        build_dir=build_dir,
        extra_env={"HBM_RESULT": str(result)},
        seed=1,
        log_file=build_dir / "sim.log",
    )
    ran, failed = simulators.check_results(xml)
    figures = json.loads(result.read_text()) if result.exists() else {}
    print(json.dumps(figures, indent=1))
    assert ran == 6 and failed == 0, f"{failed} of {ran} card-memory tests failed; see {build_dir / 'sim.log'}"
