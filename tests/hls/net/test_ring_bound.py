"""The deadlock bound of rings of RTL cards (hls.net.ring_bound, sim/rtl/net/README.md "Known defect"):
every path that runs N RTL cards refuses a chunk of T + R packets per flow or more, in one line, before
anything starts; the N-card bench's `Ring` reads T and R from the top's parameters. Fast: no simulator."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from hls.errors import UserError
from hls.net import ring_bound
from hls.paths import TB_DIR, TB_MODELS_DIR
from hls.rtl import ring_top
from optimusnic.bench import rtlnet

DTYPES = [("fp32", "fp32"), ("bf16", "bf16"), ("fp32", "bf16"), ("bf16", "fp32")]


def test_the_builds_bounds() -> None:
    """T + R of each build: the CI simulation 16 + 8, the rtlnet bench 32 + 32, the packaged kernel 2^7 + 32."""
    assert ring_bound.params_bound(ring_top.SIM_PARAMS) == 24
    assert ring_bound.params_bound(rtlnet.BENCH_PARAMS) == rtlnet.ag_packets_bound() == 64
    assert ring_bound.packaged_slots_log2(128) == (7, 5) and ring_bound.packaged_slots_log2(100) == (7, 5)
    assert ring_bound.bound(*ring_bound.packaged_slots_log2(128)) == 160


@pytest.mark.parametrize(("wire_dtype", "param_dtype"), DTYPES)
@pytest.mark.parametrize("payload", [64, 192, 1408])
def test_refused_at_the_bound_not_below(wire_dtype: str, param_dtype: str, payload: int) -> None:
    """The largest chunk under the bound runs; 16 elements more reach it in the wider flow and are refused."""
    top = ring_bound.max_chunk_elems(24, payload, wire_dtype, param_dtype)
    assert max(ring_bound.flow_packets(top, payload, wire_dtype, param_dtype).values()) < 24
    assert ring_bound.refusal(top, payload, wire_dtype, param_dtype, 24) is None
    ring_bound.check_chunk(top, payload, wire_dtype, param_dtype, 24)
    over = top + 16
    packets = ring_bound.flow_packets(over, payload, wire_dtype, param_dtype)
    assert max(packets.values()) >= 24
    with pytest.raises(ring_bound.ChunkOverBound) as info:
        ring_bound.check_chunk(over, payload, wire_dtype, param_dtype, 24, "ring of 3 RTL cards")
    text = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in text and text.startswith("ring of 3 RTL cards: ")
    assert "Known defect" in text and f"at most {top} elements" in text
    for flow, name in ring_bound.FLOWS:  # only the flows at or over the bound are named
        assert (f"{name} packets" in text) == (packets[flow] >= 24), (flow, text)


def test_the_rs_flow_counts_at_the_wire_dtype() -> None:
    """fp32 on the wire, bf16 parameters: 384 elements are 24 RS packets of 64 bytes (refused), 12 AG."""
    assert ring_bound.flow_packets(384, 64, "fp32", "bf16") == {"rs": 24, "ag": 12}
    reason = ring_bound.refusal(384, 64, "fp32", "bf16", 24)
    assert reason is not None and "24 reduce-scatter packets (fp32)" in reason and "all-gather" not in reason
    assert ring_bound.refusal(384, 64, "bf16", "bf16", 24) is None


@pytest.mark.parametrize(("size", "payload", "refused"), [
    (600, 64, True),    # test_ring_cards_fault_sweep[31], [32] as drawn: 38 packets, hung
    (400, 64, True),    # test_ring_cards_stand_in[3] as it was and test_ring_cards_ag_deadlock: 25, hung
    (600, 128, False),  # the fault sweeps now: 19
    (368, 64, False),   # test_ring_cards_stand_in[3] now: 23
    (368, 192, False),  # test_ring_cards_stand_in[2] now: 8
])
def test_the_n_card_cases(size: int, payload: int, refused: bool) -> None:
    limit = ring_bound.params_bound(ring_top.SIM_PARAMS)
    assert (ring_bound.refusal(size, payload, "fp32", "fp32", limit) is not None) == refused


class _Value:
    def __init__(self, value: int) -> None:
        self.value = value


class _Top:
    """The top's parameters as cocotb shows them (no ports: the bench must stop before it needs one)."""

    def __init__(self, **params: int) -> None:
        for name, value in params.items():
            setattr(self, name, _Value(value))


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The N-card bench module (sim/tb/net/test_onic_ring_cards.py), imported outside a simulation."""
    monkeypatch.syspath_prepend(str(TB_MODELS_DIR))
    monkeypatch.syspath_prepend(str(TB_DIR / "net"))
    import test_onic_ring_cards

    yield test_onic_ring_cards
    sys.modules.pop("test_onic_ring_cards", None)


def test_bench_ring_refuses_before_anything_runs(bench: Any) -> None:
    """`Ring` reads T and R from the top (here the CI build's 4 and 3) and refuses 400 elements of 64 bytes."""
    cfg = bench.RingConfig(world=3, length=1200, payload_bytes=64)
    params = np.zeros(cfg.length, np.float32)
    top = _Top(TX_SLOTS_LOG2=4, RX_SLOT_LOG2=3)
    with pytest.raises(ring_bound.ChunkOverBound, match=r"^ring of 3 RTL cards: .* 25 reduce-scatter packets"):
        bench.Ring(top, cfg, params)
    # larger buffers (T = 32): the same chunk is under their bound and the bench goes on (to the ports)
    with pytest.raises(ValueError, match="fewer cards"):
        bench.Ring(_Top(TX_SLOTS_LOG2=5, RX_SLOT_LOG2=3), cfg, params)
    # the opt-in of test_ring_cards_ag_deadlock (ONIC_ALLOW_DEADLOCK=1) runs it anyway
    with pytest.raises(ValueError, match="fewer cards"):
        bench.Ring(top, cfg, params, allow_deadlock=True)
    with pytest.raises(ValueError, match="TX_SLOTS_LOG2"):
        bench.Ring(_Top(RX_SLOT_LOG2=3), cfg, params)


def test_round_major_lifts_the_bound() -> None:
    """Round-major order (design.md 8.2): any chunk runs when 2 x segment < T + R; a larger segment is
    refused naming the largest that runs; a flow of no more packets than the segment is hop-major."""
    assert ring_bound.segment_for(24) == 11 and ring_bound.segment_for(160) == 79 and ring_bound.segment_for(2) == 1
    for segment in (1, 4, 11):
        assert ring_bound.refusal(100_000, 64, "fp32", "fp32", 24, segment=segment) is None
    reason = ring_bound.refusal(600, 64, "fp32", "fp32", 24, segment=12)
    assert reason is not None and "segment 12" in reason and "at most 11" in reason and "\n" not in reason
    # 600 elements of bf16 at 64 bytes: 19 packets per hop; a segment of 30 is one round, hop-major, under 24
    assert ring_bound.refusal(600, 64, "bf16", "bf16", 24, segment=30) is None
    # hop-major over the bound: the refusal names the segment that would run it
    reason = ring_bound.refusal(600, 64, "fp32", "fp32", 24)
    assert reason is not None and "segment of at most 11" in reason


def test_one_phase_bound_is_the_receive_slots() -> None:
    """A one-phase step on onic_cards takes chunks of at most R RS packets per hop (the receive slots): N = 3
    cards with R = 32 ran 34-packet chunks of 1408 bytes and hung at 40 (each card's successor must accept
    its whole last hop while its own update is held for the AG release). The AG packets do not count."""
    assert ring_bound.one_phase_packets(5) == 32 and ring_bound.one_phase_packets(3) == 8
    assert ring_bound.one_phase_fits(32 * 1408 // 4, 1408, "fp32", 5)
    assert not ring_bound.one_phase_fits(32 * 1408 // 4 + 1, 1408, "fp32", 5)
    assert ring_bound.one_phase_fits(32 * 1408 // 2, 1408, "bf16", 5)  # 32 packets of bf16
    assert not ring_bound.one_phase_fits(32 * 1408 // 2 + 16, 1408, "bf16", 5)
    assert ring_bound.one_phase_fits(8 * 64 // 4, 64, "fp32", 3) and not ring_bound.one_phase_fits(129, 64, "fp32", 3)


@pytest.mark.parametrize(("payload", "wire_dtype", "log2"), [(1408, "fp32", 5), (1408, "bf16", 5), (64, "fp32", 3),
                                                              (8192, "bf16", 3), (576, "fp32", 4)])
def test_one_phase_max_elems_is_the_largest_chunk_that_fits(payload: int, wire_dtype: str, log2: int) -> None:
    """Sizing's rtl_one_phase_max_elems and the refusal's hint: a multiple of 16 that fits, 16 more does not."""
    most = ring_bound.one_phase_max_elems(payload, wire_dtype, log2)
    assert most % 16 == 0 and most > 0
    assert ring_bound.one_phase_fits(most, payload, wire_dtype, log2)
    assert not ring_bound.one_phase_fits(most + 16, payload, wire_dtype, log2)
    assert ring_bound.one_phase_refusal(most, payload, wire_dtype, log2) is None
    why = ring_bound.one_phase_refusal(most + 16, payload, wire_dtype, log2, what="bench")
    assert why is not None and why.startswith("bench: ") and "\n" not in why
    assert f"one-phase bound of {2 ** log2}" in why and f"at most {most} elements" in why
