"""`hls.rtl.card.card_memory_plan`: the card top's m_axi ports on the channels the rail sizing plans, as
bench rtlnet's HBM rows (`card-hbm`) put them on the HBM model."""

from __future__ import annotations

import re

import pytest

from hls.errors import UserError
from hls.memory_plan import channel_usable
from hls.rtl.card import card_memory_plan, render_card
from hls.sizing import size_rail
from hls.spec import KernelSpec
from hls.targets import get_target

PLANNED = KernelSpec(optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="stream", lanes=16,
                     stripes=None, out_sink="memory+stream", name="onic_card_planned16")


def card_ports(spec: KernelSpec, net_stripes: int) -> set[str]:
    text = render_card(spec, net_stripes=net_stripes)
    return set(re.findall(r"^\s*output\s+wire\s+m_axi_(\w+?)_(?:arvalid|awvalid),", text, re.M))


@pytest.mark.parametrize("payload", [1408, 8192])
def test_every_port_of_the_card_on_its_planned_channel(payload: int) -> None:
    plan, clock_mhz = card_memory_plan(PLANNED, payload, 4)
    assert clock_mhz == 300.0
    assert {x.port for x in plan} == card_ports(PLANNED, 4) and len(plan) == len(card_ports(PLANNED, 4))
    target = get_target("u55c")
    rail = size_rail(PLANNED, target, payload)
    goodput = 100e9 / 8 * payload / (payload + 88)
    by_port = {x.port: x for x in plan}
    for stream in ("lgrad", "gather"):
        ring = [by_port[f"{stream}{k}"] for k in range(4)]
        # four channels of their own, none of the Adam kernel's; the host's DMA takes the goodput over them
        assert len({x.channel for x in ring}) == 4
        assert all(x.host_bytes_per_s == pytest.approx(goodput / 4, rel=1e-12) for x in ring)
        assert all(x.usable_bytes_per_s == channel_usable(target, mixed=True) for x in ring)
    adam = [x for x in plan if not x.port.startswith(("lgrad", "gather"))]
    assert {x.channel for x in adam}.isdisjoint({x.channel for x in plan if x not in adam})
    assert all(x.host_bytes_per_s == 0 for x in adam)
    # a state stripe's read and write ports share its channel; the channels are the rail plan's
    assert by_port["p1_rd"].channel == by_port["p1_wr"].channel == rail.assignments[0].channels["p1_rd"][0]
    assert by_port["out0"].usable_bytes_per_s == channel_usable(target)  # write-only: not the mixed figure
    assert by_port["lgrad0"].beats_per_clock(clock_mhz) == pytest.approx(
        (channel_usable(target, mixed=True) - goodput / 4) / (64 * 300e6))


def test_a_card_not_built_as_planned_is_refused() -> None:
    with pytest.raises(UserError, match="rail plan has 4 lgrad stripes, the card is built with 2"):
        card_memory_plan(PLANNED, 1408, 2)
    # at 192-byte payloads the demand is lower: the rail plan stripes the state twice, the kernel has 3
    with pytest.raises(UserError, match="stripes the Adam kernel"):
        card_memory_plan(PLANNED, 192, 2)


def test_a_channel_shared_with_the_ring_has_one_budget() -> None:
    """On a DDR card (U250: 4 channels) sizing puts the ring's stripes on the kernel's channels: every port of
    a channel then carries the channel's figures, so the memory model has one budget per channel."""
    spec = KernelSpec(target="u250", optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="stream",
                      lanes=16, stripes=None, out_sink="memory+stream", name="onic_card_ddr16")
    rail = size_rail(spec, get_target("u250"), 1408)
    assert all(s.shares_kernel_channel for s in rail.network.streams)
    k = rail.network.streams[0].stripes
    plan, clock_mhz = card_memory_plan(spec, 1408, k)
    assert {x.port for x in plan} == card_ports(spec, k)
    goodput = 100e9 / 8 * 1408 / (1408 + 88)
    for channel in {x.channel for x in plan}:
        on = [x for x in plan if x.channel == channel]
        assert len({(x.usable_bytes_per_s, x.host_bytes_per_s) for x in on}) == 1, on
        assert on[0].host_bytes_per_s == pytest.approx(goodput / k)  # one stripe of lgrad or gather each here
