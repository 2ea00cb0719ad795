"""NetCluster's rtlsim backend: N RTL network cards in one cocotb/Verilator simulation
(pynq_driver/net/rtlsim.py, sim/tb/net/ring_server.py) give the golden backend's results bit for
bit (every rank's gathered parameters, every owner's p, m, v) over three steps (one-phase,
two-phase with a clip, two-phase skipped for an inf), through the same API; bad options fail before
a simulator starts; no Verilator is a one-line error.

Each RTL card is `onic_card` (the network kernel and the generated Adam RTL kernel, 2 lanes, one
stripe per Adam array). The default fp32 case is a ring of three (N = 2 has no card that forwards)
and runs the network kernels' lgrad and gather buffers in two stripes each (`stripes=2`: the host
splits and joins them as a card's driver does; its own three-card build); bf16 (N = 2, one stripe,
the three-card build of tests/hls/rtl/test_net_ring_cards.py) runs with --full."""

from __future__ import annotations

import numpy as np
import pytest
from ringcheck import bits, grads, hyper

from hls.errors import ToolMissing, UserError
from hls.net import ring, wire
from hls.rtl import simulators
from hls.spec import KernelSpec
from pynq_driver.net.cluster import NetCluster
from pynq_driver.net.faults import Faults

LENGTH = 301  # 101 elements a chunk at N = 3 (151 at N = 2): the last chunk padded, several packets a hop
# The default case is a ring of three: the middle card of each chunk's reduce-scatter adds and forwards,
# and the all-gather forwards a hop (N = 2 has no forwarding card)
WORLD = {"fp32": 3, "bf16": 2}


# per step: one-phase, two-phase with a clip that triggers, two-phase skipped (an inf on rank 1)
KINDS = ("", "clip", "skip")


def _steps(cluster: NetCluster, params: np.ndarray, kinds: tuple[str, ...], first: int = 1) -> tuple[
        list[list[np.ndarray]], list[dict]]:
    """Steps first, first + 1, ... of `kinds`; the gradients of step s are the s-th draws of one seeded
    generator, whichever `first` the steps start at."""
    rng = np.random.default_rng(7)
    for _ in range(1, first):
        grads(rng, cluster.world, params.size, cluster.wire_dtype)
    outs = []
    for s, kind in enumerate(kinds, start=first):
        g = grads(rng, cluster.world, params.size, cluster.wire_dtype)
        if kind == "skip":
            g[1][5] = np.float32(np.inf) if cluster.wire_dtype == "fp32" else np.uint16(0x7F80)
        two = {"two_phase": True, "max_norm": 0.5} if kind else {}
        outs.append(cluster.step(g, hyper(s), timeout_s=300, **two))
    return outs, cluster.state_dicts()


@pytest.mark.parametrize(("wire_dtype", "stripes"), [("fp32", 2), pytest.param("bf16", 1, marks=pytest.mark.slow)])
def test_rtlsim_equals_golden(wire_dtype: str, stripes: int) -> None:
    if not simulators.available("verilator"):
        pytest.skip("verilator not installed")
    params = np.random.default_rng(3).standard_normal(LENGTH).astype(np.float32)
    spec = KernelSpec(out_dtype=wire_dtype)
    world = WORLD[wire_dtype]
    with NetCluster("golden", spec, world, params, wire_dtype=wire_dtype, payload_bytes=128) as gold:
        want, want_sd = _steps(gold, params, KINDS)
        assert gold.nodes[0].last_step_skipped
    faults = Faults(drop=0.02, duplicate=0.02, reorder=0.02, bitflip=0.02, seed=4) if wire_dtype == "fp32" else None
    with NetCluster("rtlsim", spec, world, params, wire_dtype=wire_dtype, payload_bytes=128, window=8,
                    faults=faults, stripes=stripes) as sim:
        assert (sim.wire_dtype, sim.param_dtype, sim.length) == (wire_dtype, wire_dtype, LENGTH)
        assert sim.sim.stripes == stripes
        got, got_sd = _steps(sim, params, KINDS[:2])
        before_skip = sim.counters()
        more, got_sd = _steps(sim, params, KINDS[2:], first=3)
        got += more
        assert sim.sim.last_step_skipped
        with pytest.raises(UserError, match="max_norm needs the two-phase step"):
            sim.step([np.zeros(LENGTH, np.float32)] * world, hyper(4), max_norm=1.0)
        counters = sim.counters()
        clocks = sim.sim.clocks
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        for rank in range(world):
            assert g[rank].dtype == w[rank].dtype and g[rank].shape == w[rank].shape
            assert np.array_equal(bits(g[rank]), bits(w[rank])), f"step {step + 1} rank {rank}: gathered differs"
    assert np.array_equal(bits(got[2][0]), bits(got[1][0])), "the skipped step changed the parameters"
    for rank, (a, b) in enumerate(zip(got_sd, want_sd, strict=True)):
        assert a["step"] == b["step"] == 2  # the skipped third step left the shards at step 2
        for key in ("params", "exp_avg", "exp_avg_sq"):
            assert np.array_equal(bits(a[key]), bits(b[key])), f"rank {rank}: {key} differs"
    assert len(clocks) == 3 and all(c > 0 for c in clocks)
    for c in counters:
        assert c["frames_in"] > 0 and c["frames_out"] > 0 and c["rs_payload_bytes_out"] > 0
        assert c["scalar_payload_bytes_out"] > 0
    # the skipped step gathered too (phase 3), as the golden cards do: each card sent N - 1 chunks'
    # parameters in the all-gather of that step (its own and the ones it forwards), at least L less the
    # largest chunk (the golden counters are no reference: over real UDP they include timing-dependent
    # retransmissions)
    for rank, (c3, c2) in enumerate(zip(counters, before_skip, strict=True)):
        sent = c3["ag_payload_bytes_out"] - c2["ag_payload_bytes_out"]
        least = (LENGTH - ring.chunk_elems(LENGTH, world)) * wire.ELEMENT_BYTES[wire_dtype]
        assert sent >= least, f"rank {rank}: {sent} all-gather bytes in the skipped step"


@pytest.mark.slow  # 86 s (session 12's fresh-clone run): make test budget; the rtlsim fp32 test stays default
def test_rtlsim_round_major_equals_golden() -> None:
    """A chunk beyond the hop-major deadlock bound (N = 2, L = 1000: 500 elements, 32 packets of 64 bytes
    per hop, 24 deadlock): the rtlsim ring runs it round-major (segments of 11), a one-phase step as the
    two phases with the one-phase semantics, then a clipped two-phase step; gathered parameters and
    shards bit for bit with the golden cards (hop-major software cards: the order changes no bit)."""
    if not simulators.available("verilator"):
        pytest.skip("verilator not installed")
    length = 1000
    params = np.random.default_rng(5).standard_normal(length).astype(np.float32)
    spec = KernelSpec()
    with NetCluster("golden", spec, 2, params, payload_bytes=64) as gold:
        want, want_sd = _steps(gold, params, ("", "clip"))
    with NetCluster("rtlsim", spec, 2, params, payload_bytes=64, window=8) as sim:
        assert sim.sim.segment == 11
        got, got_sd = _steps(sim, params, ("", "clip"))
        counters = sim.counters()
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        for rank in range(2):
            assert np.array_equal(bits(g[rank]), bits(w[rank])), f"step {step + 1} rank {rank}: gathered differs"
    for rank, (a, b) in enumerate(zip(got_sd, want_sd, strict=True)):
        for key in ("params", "exp_avg", "exp_avg_sq"):
            assert np.array_equal(bits(a[key]), bits(b[key])), f"rank {rank}: {key} differs"
    for c in counters:  # both steps ran phase one's scalar exchange: the one-phase step too
        assert c["scalar_payload_bytes_out"] > 0 and c["rs_payload_bytes_out"] >= 2 * 500 * 4


@pytest.mark.parametrize(("options", "match"), [
    ({"payload_bytes": 1408}, "payload_bytes"),
    ({"window": 64}, "window"),
    ({"stripes": 3}, "stripes"),
    ({"stripes": 16}, "stripes"),
    ({"slots": 4, "window": 8}, "slots"),
    ({"faults": Faults(delay=0.1)}, "delay"),
    ({"peers": 3}, "unknown option"),
    ({"wire_dtype": "fp16"}, "wire_dtype"),
])
def test_rtlsim_options_validated(options: dict, match: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before any simulator starts (the Verilator check is bypassed to reach them)."""
    monkeypatch.setattr(simulators, "available", lambda name: True)
    length = options.pop("length", 100)
    spec = options.pop("spec", None)
    with pytest.raises(UserError, match=match):
        NetCluster("rtlsim", spec, 2, length, **options)


@pytest.mark.parametrize(("length", "wire_dtype", "param_dtype", "segment"), [
    (700, "fp32", "fp32", 0),     # 350 elements a chunk at N = 2: 22 packets of 64 bytes per hop, hop-major
    (768, "fp32", "fp32", 11),    # 24 packets: the hop-major bound of the simulation's 16 + 8 slots
    (768, "fp32", "bf16", 11),    # the reduce-scatter's 24 at the wire dtype decides
    (768, "bf16", "fp32", 11),    # the all-gather's 24 at the parameter dtype decides
    (768, "bf16", "bf16", 0),     # 12 packets each
    (100_000, "fp32", "fp32", 11),
])
def test_rtlsim_picks_round_major(length: int, wire_dtype: str, param_dtype: str, segment: int) -> None:
    """A chunk at or over the hop-major deadlock bound runs round-major with the largest segment the
    simulation's buffers allow (2 x 11 < 24): any chunk runs (sim/rtl/net/README.md "Known defect")."""
    from pynq_driver.net.rtlsim import ring_segment

    assert ring_segment(ring.chunk_elems(length, 2), 64, wire_dtype, param_dtype) == segment


def test_rtlsim_without_verilator(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> dict[str, str]:
        raise simulators.SimulatorMissing("Verilator not found: run `make deps`")

    monkeypatch.setattr(simulators, "available", lambda name: False)
    monkeypatch.setattr(simulators, "simulator_env", missing)
    with pytest.raises(ToolMissing, match="Verilator not found") as info:
        NetCluster("rtlsim", None, 2, 100)
    assert "\n" not in str(info.value)
