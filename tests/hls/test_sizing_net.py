"""Sizing learns the network: payload goodput, the ring's memory streams, window buffers, ports (design.md 8)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hls import sizing
from hls.sizing import SizingError, net_goodput_bytes_per_s, size
from hls.targets import get_target
from optimusnic.cli import main


def test_goodput_formula() -> None:
    # 88 bytes per frame beside the payload: 8 + 14 + 20 + 8 + 22 + 4 + 12
    assert sizing.FRAME_OVERHEAD_BYTES == 88
    # fp32 at 100 Gb/s, P = 1408: 12.5e9 x 1408 / 1496 = 11.76 GB/s = 2.94 G elements/s, not 3.125
    g = net_goodput_bytes_per_s(100, 1408)
    assert g == pytest.approx(12.5e9 * 1408 / 1496)
    assert g / 4 == pytest.approx(2.941e9, rel=1e-3)
    # bf16 on the wire: twice the elements
    assert g / 2 == pytest.approx(5.882e9, rel=1e-3)
    # jumbo frames: 8192 B payload, 12.5e9 x 8192 / 8280 = 12.37 GB/s
    assert net_goodput_bytes_per_s(100, 8192) == pytest.approx(12.367e9, rel=1e-4)
    assert net_goodput_bytes_per_s(100, 8192) / 4 == pytest.approx(3.092e9, rel=1e-3)


@pytest.mark.parametrize("payload", [64, 1408, 8192, 8896])
def test_payload_bounds_accept(payload: int) -> None:
    assert sizing.check_payload_bytes(payload) == payload


@pytest.mark.parametrize("payload", [0, 32, 1000, 1500, 8960, 65536, True, 1408.0, "1408"])
def test_payload_bounds_reject(payload: object) -> None:
    with pytest.raises(SizingError, match="payload_bytes"):
        sizing.check_payload_bytes(payload)


def test_rail_demand_is_the_goodput() -> None:
    u55c = get_target("u55c")
    r = size(u55c, 7_000_000_000, cards=8, placement="rail", grad_source="stream")
    assert r.demand_params_per_s == pytest.approx(12.5e9 * 1408 / 1496 / 4)
    assert r.network is not None and r.network.line_params_per_s == pytest.approx(3.125e9)
    assert r.network.goodput_params_per_s == pytest.approx(r.demand_params_per_s)
    assert "payload goodput" in r.verdict
    bf16 = size(u55c, 7_000_000_000, cards=8, placement="rail", grad_source="stream", grad_dtype="bf16")
    assert bf16.demand_params_per_s == pytest.approx(2 * r.demand_params_per_s)
    jumbo = size(u55c, 7_000_000_000, cards=8, placement="rail", grad_source="stream", payload_bytes=8192)
    assert jumbo.demand_params_per_s == pytest.approx(12.5e9 * 8192 / 8280 / 4)


def test_sidecar_is_unchanged_and_has_no_network() -> None:
    u55c = get_target("u55c")
    a = size(u55c, 7_000_000_000, cards=8, grad_source="stream")
    b = size(u55c, 7_000_000_000, cards=8, grad_source="stream", placement="sidecar", payload_bytes=8192)
    assert a.network is None and "network" not in a.to_dict()
    assert a.to_dict() == b.to_dict()
    assert a.demand_params_per_s == pytest.approx(3.125e9)  # the sidecar keeps the line rate


def test_rail_memory_plan_has_the_ring_streams() -> None:
    u55c = get_target("u55c")
    side = size(u55c, 7_000_000_000, cards=16, grad_source="stream", rate=12.5e9 * 1408 / 1496 / 4)
    # 20 cards: the rail plan's 3 state stripes (below) hold 0.40 G parameters per card, not 7e9 / 16
    rail = size(u55c, 7_000_000_000, cards=20, grad_source="stream", placement="rail")
    n = rail.network
    assert n is not None
    streams = {s.name: s for s in n.streams}
    assert set(streams) == {"lgrad", "gather"}
    goodput = n.goodput_bytes_per_s
    for s in streams.values():
        # the ring's access and the host's DMA, each at the goodput
        assert s.bytes_per_s == pytest.approx(2 * goodput)
        # 23.5 GB/s over 11.5 GB/s usable channels (read and written): 3, to a power of two (layout.run_stripes)
        assert s.stripes == 4
    # HBM: ring channels of their own, beside the kernel's
    kernel = {c.channel for a in rail.assignments for c in a.loads}
    ring = {c for s in n.streams for c in s.channels}
    assert not kernel & ring and {c.channel for c in n.loads} == ring
    # the kernel's plan (the ring's channels are listed apart): 3 state stripes x 3 + out, the sidecar's 4 x 3 + out
    assert side.channels_used == 13 and rail.channels_used == 10
    # the update hop moves lgrad beside p, m, v and out: more bandwidth than the same kernel in a sidecar
    assert n.update_bytes_per_s == pytest.approx(n.sidecar_update_bytes_per_s + 2 * goodput)
    assert n.sidecar_update_bytes_per_s == pytest.approx(side.demand_params_per_s * (24 + 4))
    assert n.update_bytes_per_s > n.sidecar_update_bytes_per_s
    assert rail.keeps_up and rail.fits
    # the ring's 2 x 4 stripes are m_axi ports on HBM too: 6 x 4 + out + 8 = 33 would exceed the 32, so
    # sizing gives way to 3 state stripes: 6 x 3 + out + 8 = 27
    assert rail.stripes.state == 3 and rail.resources is not None and rail.resources.memory_ports == 27


def test_rail_on_ddr_shares_the_kernel_channels() -> None:
    u250 = get_target("u250")
    side = size(u250, 1_000_000_000, grad_source="stream", rate=12.5e9 * 1408 / 1496 / 4)
    rail = size(u250, 1_000_000_000, grad_source="stream", placement="rail")
    assert rail.network is not None and all(s.shares_kernel_channel for s in rail.network.streams)
    assert any("share the kernel's channels" in n for n in rail.notes)
    # lgrad adds to the kernel's channels at the update hop: the card updates slower than the sidecar kernel
    assert rail.memory_params_per_s < side.memory_params_per_s
    loads = {c.channel: c for c in rail.assignments[0].loads}
    assert any(s.startswith("lgrad") for c in loads.values() for s in c.stripes)


def test_window_buffers_on_chip() -> None:
    u55c = get_target("u55c")
    r = size(u55c, None, placement="rail", grad_source="stream")
    n = r.network
    assert n is not None and n.window_packets == sizing.WINDOW_PACKETS == 128
    # RS and AG, each a retransmit and a receive buffer: 4 x 128 x 1408 B = 704 KiB
    assert [(b.flow, b.kind) for b in n.window_buffers] == [
        ("RS", "retransmit"), ("RS", "receive"), ("AG", "retransmit"), ("AG", "receive")]
    assert n.window_bytes == 4 * 128 * 1408
    # 180,224 B per buffer, 512 bits wide: one group of 8 URAM (256 KiB) each
    assert n.uram == 32 and n.bram36 == 0 and n.onchip_fits and n.uram_usable == int(960 * 0.8)
    two = size(u55c, None, placement="rail", grad_source="stream", ring_ports=2, window_packets=1024)
    # 1024 x 1408 = 1,441,792 B: 6 groups of 8 URAM per buffer, 8 buffers on two ring ports
    assert two.network is not None and two.network.uram == 8 * 8 * 6 and two.network.onchip_fits
    huge = size(u55c, None, placement="rail", grad_source="stream", window_packets=65536, payload_bytes=8192)
    assert huge.network is not None and not huge.network.onchip_fits
    assert any("window buffers need" in x for x in huge.notes)
    # a target without URAM: BRAM36, 8 x 512 x 8 B = 32 KiB per group: 6 groups x 8 per buffer
    no_uram = dataclasses.replace(u55c, resources={**u55c.resources, "uram": 0})
    b = size(no_uram, None, placement="rail", grad_source="stream")
    assert b.network is not None and b.network.uram == 0 and b.network.bram36 == 4 * 8 * 6


def test_one_port_u50_two_port_u55c() -> None:
    u50, u55c = get_target("u50"), get_target("u55c")
    assert u50.network_ports == 1 and u55c.network_ports == 2
    with pytest.raises(SizingError, match="ring_ports"):
        size(u50, None, placement="rail", ring_ports=2)
    one = size(u50, None, placement="rail", grad_source="stream")
    assert one.network is not None and "one port" in one.network.port_assumption
    single = size(u55c, None, placement="rail", grad_source="stream")
    double = size(u55c, None, placement="rail", grad_source="stream", ring_ports=2)
    assert single.network is not None and double.network is not None
    assert "switchless" in single.network.port_assumption and "2 rings" in double.network.port_assumption
    assert double.demand_params_per_s == pytest.approx(2 * single.demand_params_per_s)
    assert double.network.goodput_bytes_per_s == pytest.approx(2 * net_goodput_bytes_per_s(100, 1408))
    assert len(double.network.window_buffers) == 8
    # twice the demand: a wider kernel (2 CUs of 16 lanes) and more stripes for each ring stream
    assert double.compute_units * double.lanes > single.compute_units * single.lanes
    # (5, to a power of two: 8)
    assert all(s.stripes == 8 for s in double.network.streams)
    # ... which leave 32 - 16 = 16 HBM AXI ports, 8 per CU: one state stripe each, 2 x 11.5 / 8 GB/s
    assert single.keeps_up and not double.keeps_up and double.stripes.state == 1
    assert double.achieved_params_per_s == pytest.approx(2 * 14.375e9 * 0.8 / 8)


@pytest.mark.parametrize("bad", [{"placement": "wire"}, {"ring_ports": 0}, {"window_packets": 0},
                                 {"payload_bytes": 100}])
def test_rail_inputs_checked(bad: dict[str, object]) -> None:
    with pytest.raises(SizingError):
        size(get_target("u55c"), None, **{"placement": "rail", **bad})  # type: ignore[arg-type]


def test_size_cli_rail(capsys) -> None:
    rc = main(["size", "--target", "u55c", "--params", "7B", "--cards", "8", "--grad-source", "stream",
               "--placement", "rail"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "ring goodput                100 Gb/s -> 2.94 G params/s" in out
    assert "1408/(1408+88) = 11.76 GB/s per direction" in out
    assert "rail: lgrad" in out and "rail: gather" in out and "32 URAM of 768 usable" in out
    rc = main(["size", "--target", "u55c", "--params", "7B", "--cards", "8", "--grad-source", "stream",
               "--placement", "rail", "--payload-bytes", "8192", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["network"]["payload_bytes"] == 8192
    assert data["demand_params_per_s"] == pytest.approx(12.5e9 * 8192 / 8280 / 4)
    rc = main(["size", "--target", "u55c", "--params", "7B", "--json"])
    assert "network" not in json.loads(capsys.readouterr().out)
    for bad in (["--payload-bytes", "1000"], ["--payload-bytes", "8960"], ["--ring-ports", "2", "--target", "u50"]):
        assert main(["size", "--target", "u55c", "--params", "7B", "--placement", "rail", *bad]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and ("payload" in err or "ring_ports" in err)


def test_rtl_chunk_bound_of_the_packaged_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    """The rail plan reports the packaged network kernel's deadlock bound (hls.net.ring_bound: 2^7 transmit +
    32 receive slots = 160 packets per flow at the default window) in hop-major order, the round-major segment
    that runs any chunk (79: 2 x 79 < 160) and, with the parameters, whether this ring's chunk reaches the
    bound: then the note says hop-major order would deadlock and names the segment."""
    u55c = get_target("u55c")
    alone = size(u55c, None, placement="rail", grad_source="stream")
    n = alone.network
    assert n is not None and n.rtl_packets_bound == 160 and n.rtl_chunk_packets is None
    assert n.rtl_max_chunk_elems == 159 * 1408 // 4 // 16 * 16 == 55968 and n.rtl_chunk_deadlocks is None
    assert n.rtl_segment == 79 and n.rtl_one_phase_max_elems == 32 * 1408 // 4 // 16 * 16 == 11264
    assert n.rtl_chunk_one_phase is None
    small = size(u55c, 3 * 40000, cards=3, placement="rail", grad_source="stream", out_dtype="bf16")
    s = small.network
    assert s is not None and s.rtl_chunk_elems == 40000 and s.rtl_chunk_packets == {"rs": 114, "ag": 57}
    assert s.rtl_chunk_deadlocks is False and not any("deadlock" in x for x in small.notes)
    # 114 RS packets per hop: over the one-phase bound of 32 (the receive slots), so two-phase steps
    assert s.rtl_chunk_one_phase is False and any("over the one-phase bound (11,264 elements" in x
                                                  for x in small.notes)
    tiny = size(u55c, 3 * 11264, cards=3, placement="rail", grad_source="stream").network
    assert tiny is not None and tiny.rtl_chunk_one_phase is True
    big = size(u55c, int(7e9), cards=8, placement="rail", grad_source="stream", ring_ports=2, window_packets=8)
    b = big.network
    assert b is not None and b.rtl_packets_bound == 8 + 32 and b.rtl_chunk_elems == 437_500_000
    assert b.rtl_chunk_deadlocks is True and b.rtl_segment == 19
    assert any("RTL cards would deadlock" in x and "Known defect" in x and "segment of at most 19" in x
               for x in big.notes)
    assert main(["size", "--target", "u55c", "--params", "7e9", "--cards", "8", "--placement", "rail", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["network"]
    assert d["rtl_packets_bound"] == 160 and d["rtl_chunk_deadlocks"] is True and d["rtl_segment"] == 79
    assert d["rtl_chunk_packets"] == {"rs": 2485796, "ag": 2485796}
    assert main(["size", "--target", "u55c", "--params", "7e9", "--cards", "8", "--placement", "rail"]) == 0
    out = capsys.readouterr().out
    assert "rail: RTL chunk bound       160 packets per flow" in out and "segment <= 79" in out
    assert "needs round-major order" in out
