"""The network kernel's host side (design.md section 8): a step's arguments, its register writes, and
its STATUS, counters and scalar entries read back, over any register port.

The register map is the network kernel's (`hls.net_regmap`: the manifest's `network` section carries
it); this module is the one place that turns a ring configuration into the values of its arguments and
its read-only words back into STATUS causes, counters and entries. The cocotb benches of the network
kernel, of `onic_card` and of N cards program the simulated RTL with `step_arguments` and
`RegisterMap.writes` (their AXI4-Lite master awaits each word), and `NetKernel` runs the same words
through a synchronous port: pynq's `DefaultIP` (`read(offset)`, `write(offset, value)`) of the
`<name>_net` compute unit on a card. A card on the wire also needs the network bitstream, which
cannot be built here (the alveo backend's `join_ring` says so): `NetKernel` itself needs only a port.

Arguments are checked as the kernel checks them at ap_start (its STATUS `config_error`: world 2..255,
rank below world, length 1 .. 0xF0000000, payload_bytes a multiple of 64 from 64, window and credit
at least 1), credit at most the build's receive slots when the map knows them (the manifest's
`rx_slots`: the kernel itself cannot tell), and as the register file can hold them (ports and
communicator 16 bits, pointers 64-byte aligned and one per stripe of the map), before anything is
written: a bad value is a `NetConfigError` naming it, and the card's registers are left as they were.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, Protocol

from hls.net import wire
from hls.net_regmap import STATUS_BITS, counter_names, readonly_map, register_map
from hls.regmap import CTRL, CTRL_DONE, CTRL_IDLE, CTRL_START, GIE, IER, ISR
from hls.ring_plan import NetworkPlan
from pynq_driver.errors import KernelTimeout
from pynq_driver.net.errors import NetConfigError

CONTROL = {"ctrl": CTRL, "gie": GIE, "ier": IER, "isr": ISR}
MAX_LENGTH = 0xF000_0000  # the kernel's own bound on L (its chunk arithmetic)
PHASES = {0: "a one-phase step", 1: "phase one of a two-phase step", 2: "phase two of a two-phase step",
          3: "phase two of a skipped step"}


class RegisterPort(Protocol):
    """A compute unit's AXI4-Lite space, one 32-bit word at a time (pynq's DefaultIP has these)."""

    def read(self, offset: int) -> int: ...

    def write(self, offset: int, value: int) -> None: ...


@dataclasses.dataclass(frozen=True)
class RegisterMap:
    """Offsets of the network kernel's arguments (pointer or scalar) and read-only words."""

    args: Mapping[str, tuple[str, int]]  # name -> (kind "pointer" | "scalar", offset)
    readonly: Mapping[str, int]          # status, every counter, entry_sumsq, entry_flag -> offset
    # The build's receive slots (2^RX_SLOT_LOG2; the manifest's `rx_slots`), None when not known. A ring's
    # cards run one build, so they are also the successor's: `credit` may not exceed them.
    rx_slots: int | None = None

    @classmethod
    def from_manifest(cls, network: Mapping[str, Any]) -> RegisterMap:
        """The manifest's `network` section (`hls.net_regmap.to_manifest`)."""
        slots = network.get("rx_slots")
        return cls(args={str(a["name"]): (str(a["kind"]), int(a["offset"])) for a in network["args"]},
                   readonly={str(r["name"]): int(r["offset"]) for r in network["readonly"]},
                   rx_slots=None if slots is None else int(slots))

    @classmethod
    def from_plan(cls, plan: NetworkPlan, rx_slots: int | None = None) -> RegisterMap:
        """The map of a sizing plan's network kernel (the benches' builds), of a build with `rx_slots`."""
        args = register_map(plan)
        return cls(args={a.name: (a.kind, int(a.offset)) for a in args if a.offset is not None},
                   readonly={str(r["name"]): int(r["offset"]) for r in readonly_map(args)},  # type: ignore[call-overload]
                   rx_slots=rx_slots)

    @classmethod
    def for_stripes(cls, lgrad: int = 1, gather: int = 1, rx_slots: int | None = None) -> RegisterMap:
        """The map of a network kernel with these stripe counts (what `from_plan` reads of a plan)."""
        plan = SimpleNamespace(streams=[SimpleNamespace(name="lgrad", stripes=lgrad, what=""),
                                        SimpleNamespace(name="gather", stripes=gather, what="")])
        return cls.from_plan(plan, rx_slots)  # type: ignore[arg-type]

    def stripes(self, stream: str) -> int:
        """Pointers of a memory stream (`lgrad`, `gather`) in this map."""
        return sum(1 for name, (kind, _) in self.args.items()
                   if kind == "pointer" and name.rstrip("0123456789") == stream)

    def writes(self, values: Mapping[str, int]) -> list[tuple[int, int]]:
        """The 32-bit register writes (offset, word) of these argument / control values, in order: a pointer
        is its low word, then its high word; a scalar or control word one write."""
        out: list[tuple[int, int]] = []
        for name, value in values.items():
            if name in CONTROL:
                out.append((CONTROL[name], value & 0xFFFFFFFF))
                continue
            kind, offset = self.args[name]
            out.append((offset, value & 0xFFFFFFFF))
            if kind == "pointer":
                out.append((offset + 4, (value >> 32) & 0xFFFFFFFF))
        return out


@dataclasses.dataclass(frozen=True)
class RingArgs:
    """One card's view of one ring step: who it is, its neighbours, the step's shape and buffers."""

    local: wire.Endpoint
    succ: wire.Endpoint
    pred: wire.Endpoint
    rank: int
    world: int
    length: int               # L: elements of the flat parameter vector
    payload_bytes: int
    step: int
    window: int
    timeout_clocks: int       # the retransmission timeout in kernel clocks
    credit: int               # the successor's receive slots (2^RX_SLOT_LOG2): each sender's first credit
    lgrad: Sequence[int]      # one 64-byte aligned address per lgrad stripe
    gather: Sequence[int]     # one per gather stripe
    comm: int = 0
    phase: int = 0
    sum0: int = 0             # two-phase steps: the owner's sum (phase 3: its current parameters)
    segment: int = 0          # round-major order: packets per round (0: hop-major)


def mac_words(mac: bytes) -> tuple[int, int]:
    """A MAC address as the kernel's two registers (low 32 bits, high 16 bits), network order."""
    value = int.from_bytes(mac, "big")
    return value & 0xFFFFFFFF, value >> 32


def _check(args: RingArgs, regs: RegisterMap) -> None:
    def fail(what: str) -> None:
        raise NetConfigError(f"network kernel arguments: {what}")

    for name in ("rank", "world", "length", "payload_bytes", "step", "window", "timeout_clocks", "credit", "comm",
                 "phase", "sum0", "segment"):
        value = getattr(args, name)
        if isinstance(value, bool) or not isinstance(value, int):
            fail(f"{name} {value!r} must be an integer")
    if not 2 <= args.world <= 255:
        fail(f"world {args.world}: a ring has 2 .. 255 cards")
    if not 0 <= args.rank < args.world:
        fail(f"rank {args.rank} must be 0 .. world - 1 = {args.world - 1}")
    if not 1 <= args.length <= MAX_LENGTH:
        fail(f"length {args.length} must be 1 .. {MAX_LENGTH:#x} elements")
    if args.payload_bytes < 64 or args.payload_bytes % 64:
        fail(f"payload_bytes {args.payload_bytes} must be a multiple of 64 bytes, at least 64")
    if args.window < 1 or args.credit < 1:
        fail(f"window {args.window} and credit {args.credit} must be at least 1")
    if args.timeout_clocks < 1:
        fail(f"timeout_clocks {args.timeout_clocks} must be at least 1")
    if args.phase not in PHASES:
        fail(f"phase {args.phase} must be one of " + ", ".join(f"{k} ({v})" for k, v in PHASES.items()))
    if not 0 <= args.segment <= 0xFFFF:
        fail(f"segment {args.segment} must be 0 .. 65535 packets")
    if not 0 <= args.comm <= 0xFFFF:
        fail(f"comm {args.comm} must be 0 .. 65535")
    if not 0 <= args.step <= 0xFFFFFFFF:
        fail(f"step {args.step} must be 0 .. 2^32 - 1")
    if args.timeout_clocks > 0xFFFFFFFF or args.window > 0xFFFFFFFF or args.credit > 0xFFFFFFFF:
        fail("window, credit and timeout_clocks must fit 32 bits")
    if regs.rx_slots is not None and args.credit > regs.rx_slots:
        fail(f"credit {args.credit} is more than the {regs.rx_slots} receive slots of this network kernel build "
             "(the successor's too: a ring runs one build); a larger first credit lets a predecessor's frames "
             "overflow the receive buffer (design.md 8.3)")
    for stream in ("lgrad", "gather"):
        addrs = list(getattr(args, stream))
        want = regs.stripes(stream)
        if len(addrs) != want:
            fail(f"{stream}: {len(addrs)} addresses for the kernel's {want} {stream} stripes")
        for k, a in enumerate(addrs):
            if isinstance(a, bool) or not isinstance(a, int) or a < 0 or a % 64 or a >= 1 << 64:
                fail(f"{stream}{k} {a!r} must be a 64-byte aligned 64-bit address")
    if args.sum0 < 0 or args.sum0 % 64 or args.sum0 >= 1 << 64:
        fail(f"sum0 {args.sum0!r} must be a 64-byte aligned 64-bit address")


def step_arguments(args: RingArgs, regs: RegisterMap, *, interrupt: bool = True) -> dict[str, int]:
    """Every argument's value for this step (checked first: `NetConfigError`), then GIE / IER (the done
    interrupt) when `interrupt`."""
    _check(args, regs)
    lo, hi = mac_words(args.local.mac)
    slo, shi = mac_words(args.succ.mac)
    plo, phi = mac_words(args.pred.mac)
    computed: dict[str, int] = {}
    computed.update({f"lgrad{k}": a for k, a in enumerate(args.lgrad)})
    computed.update({f"gather{k}": a for k, a in enumerate(args.gather)})
    computed.update({
        "local_mac_lo": lo, "local_mac_hi": hi, "local_ip": int.from_bytes(args.local.ip_bytes, "big"),
        "local_port": args.local.port, "succ_mac_lo": slo, "succ_mac_hi": shi,
        "succ_ip": int.from_bytes(args.succ.ip_bytes, "big"), "succ_port": args.succ.port,
        "pred_mac_lo": plo, "pred_mac_hi": phi, "pred_ip": int.from_bytes(args.pred.ip_bytes, "big"),
        "comm": args.comm, "rank": args.rank, "world": args.world, "length": args.length, "window": args.window,
        "timeout": args.timeout_clocks, "credit": args.credit, "payload_bytes": args.payload_bytes,
        "step": args.step, "phase": args.phase,
        "sum0_lo": args.sum0 & 0xFFFFFFFF, "sum0_hi": args.sum0 >> 32, "segment": args.segment,
        "entry": 0,
    })
    unknown = sorted(set(regs.args) - set(computed))
    if unknown:  # a map of another kernel version: refuse rather than leave an argument unwritten
        raise NetConfigError(f"network kernel arguments: no value for the map's {', '.join(unknown)}")
    values = {name: computed[name] for name in regs.args}  # the map's order
    if interrupt:
        values.update({"gie": 1, "ier": 1})
    return values


def status_causes(status: int) -> list[str]:
    """The STATUS bits set, by name (`hls.net_regmap.STATUS_BITS`), plus `bit<k>` for an unknown one."""
    known = {bit: name for name, bit in STATUS_BITS.items()}
    return [known.get(b, f"bit{b}") for b in range(32) if status >> b & 1]


def entry_value(bits: int) -> float:
    """A scalar entry's sum of squares from its 64 bits (IEEE-754 binary64)."""
    return struct.unpack("<d", struct.pack("<Q", bits & (1 << 64) - 1))[0]


class NetKernel:
    """The network kernel of one card through a synchronous register port.

    `program(args)` writes a step's arguments, `start()` raises ap_start, `wait(timeout_s)` polls CTRL
    for ap_done, then `status()`, `counters()` and `entries(world)` read what the step left.
    """

    def __init__(self, port: RegisterPort, regs: RegisterMap, *, clock: Callable[[], float] = time.monotonic,
                 poll_s: float = 1e-4) -> None:
        self.port, self.regs = port, regs
        self._clock, self._poll_s = clock, poll_s

    def write_values(self, values: Mapping[str, int]) -> None:
        for offset, word in self.regs.writes(values):
            self.port.write(offset, word)

    def program(self, args: RingArgs) -> None:
        """Check, then write every argument of the step (nothing is written when a value is refused)."""
        self.write_values(step_arguments(args, self.regs))

    def start(self) -> None:
        self.port.write(CTRL, CTRL_START)

    def wait(self, timeout_s: float) -> None:
        """Until ap_done (read once: CTRL's done bit clears on read), or `KernelTimeout` naming what is stuck."""
        deadline = self._clock() + timeout_s
        while True:
            ctrl = self.port.read(CTRL)
            if ctrl & CTRL_DONE:
                return
            if self._clock() >= deadline:
                raise KernelTimeout(
                    f"network kernel: no ap_done within {timeout_s} s (CTRL {ctrl:#x}, "
                    f"{'idle' if ctrl & CTRL_IDLE else 'running'}; STATUS {status_causes(self.status()) or 'clear'}): "
                    "a peer not running the same step, a link down, or a ring over its deadlock bound "
                    "(hls.net.ring_bound)")
            time.sleep(self._poll_s)

    def read64(self, offset: int) -> int:
        return self.port.read(offset + 4) << 32 | self.port.read(offset)

    def status(self) -> int:
        return self.port.read(self.regs.readonly["status"])

    def counters(self) -> dict[str, int]:
        return {name: self.read64(self.regs.readonly[name]) for name in counter_names()}

    def entries(self, world: int) -> list[tuple[float, bool]]:
        """Every rank's scalar entry after phase one: (sum of squares, non-finite flag)."""
        out = []
        for k in range(world):
            self.write_values({"entry": k})
            bits = self.read64(self.regs.readonly["entry_sumsq"])
            out.append((entry_value(bits), bool(self.port.read(self.regs.readonly["entry_flag"]) & 1)))
        return out


__all__ = ["CONTROL", "NetConfigError", "NetKernel", "RegisterMap", "RegisterPort", "RingArgs", "entry_value",
           "mac_words", "status_causes", "step_arguments"]
