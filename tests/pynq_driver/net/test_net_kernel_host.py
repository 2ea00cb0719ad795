"""The network kernel's host side (pynq_driver.net.net_kernel): a step's arguments checked and laid out
on the register map of hls.net_regmap, and the synchronous driver over a register port.

The cocotb benches program the simulated RTL with the same `step_arguments` / `RegisterMap.writes`
(tests/hls/rtl/test_net_kernel.py, test_card_rtl.py, test_net_ring_cards.py run them). Here the port is
`RegisterFileDouble`, a stand-in for a card's AXI4-Lite register file (no card on this machine).
"""

from __future__ import annotations

import dataclasses
import struct
from types import SimpleNamespace

import pytest

from hls import net_regmap
from hls.net import wire
from pynq_driver.errors import KernelTimeout
from pynq_driver.net.net_kernel import (
    NetConfigError,
    NetKernel,
    RegisterMap,
    RingArgs,
    entry_value,
    mac_words,
    status_causes,
    step_arguments,
)


class RegisterFileDouble:
    """Test double of a card's network-kernel register file: 32-bit words by offset, every write logged;
    CTRL reads ap_done after `done_after` reads once started."""

    def __init__(self, done_after: int | None = 0) -> None:
        self.words: dict[int, int] = {}
        self.log: list[tuple[int, int]] = []
        self.done_after, self.polls = done_after, 0

    def write(self, offset: int, value: int) -> None:
        assert 0 <= value <= 0xFFFFFFFF and offset % 4 == 0
        self.log.append((offset, value))
        self.words[offset] = value

    def read(self, offset: int) -> int:
        if offset == net_regmap.CTRL:
            self.polls += 1
            started = self.words.get(net_regmap.CTRL, 0) & 1
            return 0x2 if started and self.done_after is not None and self.polls > self.done_after else 0x1
        return self.words.get(offset, 0)


def plan(stripes: int) -> SimpleNamespace:
    """What the register map reads of a sizing plan (hls.ring_plan.NetworkPlan), `stripes` per stream."""
    return SimpleNamespace(streams=[SimpleNamespace(name=n, stripes=stripes, what="") for n in ("lgrad", "gather")],
                           ring_ports=1, payload_bytes=1408, window_packets=32)


def ring_args(**over: object) -> RingArgs:
    eps = [wire.Endpoint(mac=bytes([2, 0, 0, 0, 0x20, k]), ip=f"10.0.2.{k + 1}", port=4000 + k) for k in range(3)]
    base = RingArgs(local=eps[1], succ=eps[2], pred=eps[0], rank=1, world=3, length=1000, payload_bytes=1408, step=7,
                    window=8, timeout_clocks=1000, credit=8, lgrad=[0x10000], gather=[0x100000], sum0=0x200040)
    return dataclasses.replace(base, **over)  # type: ignore[arg-type]


def test_arguments_and_their_words() -> None:
    regs = RegisterMap.for_stripes()
    values = step_arguments(ring_args(), regs)
    assert values["local_mac_lo"] == 0x00002001 and values["local_mac_hi"] == 0x0200
    assert mac_words(bytes([2, 0, 0, 0, 0, 5])) == (5, 0x0200)
    assert values["succ_ip"] == 0x0A000203 and values["succ_port"] == 4002 and values["local_port"] == 4001
    assert values["pred_ip"] == 0x0A000201 and values["rank"] == 1 and values["world"] == 3
    assert values["sum0_lo"] == 0x200040 and values["sum0_hi"] == 0 and values["gie"] == values["ier"] == 1
    # every argument of the map is written, in the map's order, then GIE and IER
    assert [k for k in values if k not in ("gie", "ier")] == list(regs.args)
    words = regs.writes(values)
    offsets = {a.name: a.offset for a in net_regmap.register_map(plan(1))}  # type: ignore[arg-type]
    assert words[0] == (offsets["lgrad0"], 0x10000) and words[1] == (offsets["lgrad0"] + 4, 0)
    assert (offsets["step"], 7) in words and words[-2:] == [(net_regmap.GIE, 1), (net_regmap.IER, 1)]
    high = regs.writes({"gather0": 0x1_2345_6780})
    assert high == [(offsets["gather0"], 0x2345_6780), (offsets["gather0"] + 4, 1)]


def test_striped_map() -> None:
    regs = RegisterMap.for_stripes(lgrad=2, gather=4)
    assert regs.stripes("lgrad") == 2 and regs.stripes("gather") == 4
    values = step_arguments(ring_args(lgrad=[0x10000, 0x20000], gather=[0x100000 * k for k in range(1, 5)]), regs)
    assert [k for k in values if k.startswith(("lgrad", "gather"))] == ["lgrad0", "lgrad1", "gather0", "gather1",
                                                                         "gather2", "gather3"]
    with pytest.raises(NetConfigError, match="1 addresses for the kernel's 2 lgrad stripes"):
        step_arguments(ring_args(), regs)


@pytest.mark.parametrize(("over", "match"), [
    ({"world": 1}, "world 1"), ({"world": 256}, "world 256"), ({"rank": 3}, "rank 3"), ({"rank": -1}, "rank -1"),
    ({"length": 0}, "length 0"), ({"length": 0xF000_0001}, "length"), ({"payload_bytes": 100}, "payload_bytes 100"),
    ({"payload_bytes": 0}, "payload_bytes 0"), ({"window": 0}, "window 0"), ({"credit": 0}, "credit 0"),
    ({"timeout_clocks": 0}, "timeout_clocks 0"), ({"phase": 4}, "phase 4"), ({"segment": 70000}, "segment 70000"),
    ({"comm": 0x10000}, "comm"), ({"step": -1}, "step -1"), ({"lgrad": [0x10010]}, "lgrad0"),
    ({"gather": [-64]}, "gather0"), ({"sum0": 0x33}, "sum0"), ({"rank": True}, "rank True"),
    ({"length": 10.0}, "length 10.0"),
])
def test_bad_arguments_refused_before_any_write(over: dict[str, object], match: str) -> None:
    port = RegisterFileDouble()
    kernel = NetKernel(port, RegisterMap.for_stripes())
    with pytest.raises(NetConfigError, match=match) as err:
        kernel.program(ring_args(**over))
    assert "\n" not in str(err.value) and port.log == []


def test_program_start_wait_and_read_back() -> None:
    regs = RegisterMap.for_stripes()
    port = RegisterFileDouble(done_after=3)
    kernel = NetKernel(port, regs, poll_s=0.0)
    kernel.program(ring_args())
    assert port.log == regs.writes(step_arguments(ring_args(), regs))
    kernel.start()
    kernel.wait(timeout_s=5.0)
    assert port.polls == 4
    port.words[regs.readonly["status"]] = 1 << net_regmap.STATUS_BITS["timeout_exhausted"] | 1 << 9
    assert status_causes(kernel.status()) == ["timeout_exhausted", "bit9"]
    first = net_regmap.counter_names()[0]
    port.words[regs.readonly[first]], port.words[regs.readonly[first] + 4] = 5, 1
    assert kernel.counters()[first] == (1 << 32) + 5 and len(kernel.counters()) == len(net_regmap.counter_names())
    bits = struct.unpack("<Q", struct.pack("<d", 2.5))[0]
    sumsq = regs.readonly["entry_sumsq"]
    port.words[sumsq], port.words[sumsq + 4] = bits & 0xFFFFFFFF, bits >> 32
    port.words[regs.readonly["entry_flag"]] = 1
    assert kernel.entries(2) == [(2.5, True), (2.5, True)]
    assert (regs.args["entry"][1], 1) in port.log  # the entry selected before each read
    assert entry_value(bits) == 2.5


def test_wait_times_out_with_what_is_stuck() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    port = RegisterFileDouble(done_after=None)
    kernel = NetKernel(port, RegisterMap.for_stripes(), clock=clock, poll_s=0.0)
    kernel.start()
    with pytest.raises(KernelTimeout, match=r"no ap_done within 3\.0 s .*running.*ring_bound"):
        kernel.wait(timeout_s=3.0)


def test_manifest_map_is_the_plan_map() -> None:
    plan_map = RegisterMap.for_stripes(lgrad=2, gather=2)
    section = net_regmap.to_manifest("k", plan(2), grad_streams=1, param_streams=1)  # type: ignore[arg-type]
    assert RegisterMap.from_manifest(section) == plan_map


def test_credit_above_the_builds_receive_slots_is_refused() -> None:
    """The packaged kernel's manifest names its receive slots; a credit above them (a larger first credit than
    the successor's buffer holds, design.md 8.3) is refused before any write, the slots themselves accepted."""
    from hls.spec import KernelSpec
    from hls.targets import get_target
    from hls.vitis import netpkg

    spec = KernelSpec(target="u55c", grad_source="stream", out_sink="memory+stream")
    pkg = netpkg.package(spec, get_target("u55c"), "hls")
    slots = pkg.manifest["rx_slots"]
    assert slots == 2 ** pkg.generics["RX_SLOT_LOG2"]
    regs = RegisterMap.from_manifest(pkg.manifest)
    assert regs.rx_slots == slots
    k = regs.stripes("lgrad")
    args = ring_args(lgrad=[0x10000 * (i + 1) for i in range(k)], gather=[0x100000 * (i + 1) for i in range(k)])
    port = RegisterFileDouble()
    kernel = NetKernel(port, regs)
    with pytest.raises(NetConfigError, match=f"credit {slots + 1} is more than the {slots} receive slots") as err:
        kernel.program(dataclasses.replace(args, credit=slots + 1))
    assert port.log == [] and "\n" not in str(err.value)
    kernel.program(dataclasses.replace(args, credit=slots, window=slots))
    assert (regs.args["credit"][1], slots) in port.log
