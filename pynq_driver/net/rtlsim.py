"""`NetCluster("rtlsim", ...)`: the ring's N cards as RTL in one cocotb/Verilator simulation.

The simulation is sim/tb/net/ring_server.py: N `onic_card`s (`hls.rtl.ring_top.prepare_cards`:
each the network kernel and the generated Adam RTL kernel of the spec, reduced to 2 lanes and one
stripe per Adam array; the network kernel's lgrad and gather buffers in `stripes` stripes each, 1
by default; `hls.ring_plan` plans 4 for a U55C card), each MAC port on cocotbext-eth's MAC model, on
the bench's seeded switch, card memory (p, m, v, the out, local gradient and gather buffers) in
cocotbext-axi RAM models under the AXI protocol monitor. The host side programs both kernels per
step as the driver does (with stripes, the local gradient written with `hls.layout.split` and the
gathered buffer read with `layout.join`).

How it runs is `pynq_driver.backends.rtlsim`'s mechanism (a simulator that dies or hangs never
hangs the host): this process listens on a Unix socket and starts a child
(`python -m pynq_driver.net.rtlsim CONFIG`) in its own session; the child builds the top with
Verilator (once per spec and top size: at least 3 cards, so rings of 2 and 3 share a build) and
runs the serving cocotb test, which connects back (a build per stripe count). Each `step` is one request (every rank's
gradient in, every rank's gathered parameters out). Every receive has a timeout; a child that
exits or does not answer becomes a `RingError` naming its log, and `close()` kills the child's
process group.

Sizes are the CI simulation's (8 receive slots of up to 4 payload beats, 16-beat retransmit
slots), so `payload_bytes` is a multiple of 64 up to 256 and `window` (also the receive slots
advertised) at most 8; a real card's buffers are larger. `rto_s` defaults to 4 us: many round
trips of such a window through the simulated switch (500 ns latency), so a lost frame costs
little simulated time. A chunk of as many packets per flow as the simulation's transmit slots
plus receive slots (16 + 8 = 24: `hls.net.ring_bound`, from `ring_top.SIM_PARAMS`), in the
reduce-scatter (wire dtype) or the all-gather (parameter dtype), would meet the ring deadlock of
hop-major order (sim/rtl/net/README.md "Known defect"): such a ring runs in round-major order with
segments of 11 packets (`segment`, design.md 8.2), every step as the network kernel's two phases
(a one-phase step keeps its semantics: the hosts ignore the entries, scale grad_scale / N). So does
a one-phase step whose chunk has more RS packets than the 8 receive slots, in either order
(`ring_bound.one_phase_fits`: in one phase such a ring of onic_cards waits on itself).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from hls import layout
from hls.errors import UserError
from hls.golden import Hyper
from hls.net import ring, wire
from hls.paths import BUILD_DIR, REPO_ROOT, TB_DIR, TB_MODELS_DIR
from hls.spec import KernelSpec
from pynq_driver.backends.sim_link import SimLink
from pynq_driver.host import host_array
from pynq_driver.net.errors import RingError
from pynq_driver.net.faults import Faults

START_TIMEOUT_S = 900.0  # a Verilator build of N cards takes minutes on 2 cores
CLOCK_S = 4e-9  # the simulation's 250 MHz kernel clock
MAX_PAYLOAD_BYTES = 256  # the simulation's receive buffer: 4 payload beats a frame
MAX_WINDOW = 8  # the simulation's receive slots (RX_SLOT_LOG2 = 3)
STEP_CLOCK_LIMIT = 20_000_000


def ring_segment(chunk_elems: int, payload_bytes: int, wire_dtype: str, param_dtype: str) -> int:
    """The `segment` the simulation's ring runs a chunk with: 0 (hop-major) under the deadlock bound of its
    buffers, else the largest round-major segment they allow (`hls.net.ring_bound`)."""
    from hls.net import ring_bound
    from hls.rtl import ring_top

    limit = ring_bound.params_bound(ring_top.SIM_PARAMS)
    hop_major_ok = ring_bound.refusal(chunk_elems, payload_bytes, wire_dtype, param_dtype, limit) is None
    segment = 0 if hop_major_ok else ring_bound.segment_for(limit)
    ring_bound.check_chunk(chunk_elems, payload_bytes, wire_dtype, param_dtype, limit, "rtlsim ring", segment)
    return segment


class RtlSimRing(SimLink):
    """`world` RTL cards in one simulation; `NetCluster`'s engine for the rtlsim backend."""

    _link_error = RingError
    _link_label = "rtlsim ring"

    def __init__(self, spec: KernelSpec, world: int, params: np.ndarray, *, payload_bytes: int = 256,
                 window: int = MAX_WINDOW, rto_s: float = 4e-6, comm: int = 0, faults: Faults | None = None,
                 seed: int = 1, grad_stall: float = 0.3, buffer_bytes: int | None = None,
                 timeout_s: float = 600.0, start_timeout_s: float = START_TIMEOUT_S,
                 simulator: str = "verilator", stripes: int = 1) -> None:
        from hls.rtl import ring_top, simulators

        if simulator != "verilator":
            raise UserError(f"rtlsim ring: simulator {simulator!r}: the N-card top is built with Verilator only")
        if not simulators.available("verilator"):
            simulators.simulator_env("verilator")  # raises SimulatorMissing, one line with the fix
        if not (TB_DIR / "net" / "ring_server.py").is_file():
            raise UserError(f"{TB_DIR / 'net' / 'ring_server.py'}: the ring simulation is not in this checkout")
        if not 2 <= world <= ring_top.MAX_CARDS:
            raise UserError(f"rtlsim ring: world {world} is not within 2..{ring_top.MAX_CARDS} (one simulation)")
        if (isinstance(payload_bytes, bool) or not isinstance(payload_bytes, int) or payload_bytes % 64
                or not 64 <= payload_bytes <= MAX_PAYLOAD_BYTES):
            raise UserError(f"payload_bytes: {payload_bytes!r}: the rtlsim ring takes a multiple of 64 up to "
                            f"{MAX_PAYLOAD_BYTES} (its receive buffer)")
        if isinstance(stripes, bool) or not isinstance(stripes, int) or not layout.ring_stripes_ok(stripes):
            raise UserError(f"stripes: {stripes!r}: the network kernel's lgrad and gather stripes are a power of "
                            f"two from 1 to {layout.RING_MAX_STRIPES}")
        if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WINDOW:
            raise UserError(f"window: {window!r}: the rtlsim ring takes 1..{MAX_WINDOW} (its receive slots)")
        if not isinstance(rto_s, (int, float)) or not 0 < rto_s < 1:
            raise UserError(f"rto_s: {rto_s!r} must be a positive number of seconds below 1")
        if faults is not None and faults.delay:
            raise UserError("faults.delay: the simulated switch has no delay fault (it has drop, duplicate, "
                            "reorder and bitflip, and a fixed latency)")
        if spec.grad_dtype not in wire.WIRE_DTYPES or spec.out_dtype not in wire.WIRE_DTYPES:
            raise UserError(f"rtlsim ring: grad_dtype {spec.grad_dtype!r} / out_dtype {spec.out_dtype!r}: "
                            f"the ring's dtypes are {', '.join(wire.WIRE_DTYPES)}")
        from hls.rtl.card import check_card_spec

        check_card_spec(ring_top.card_spec(spec))  # SpecError (a UserError) for a spec no card can hold
        # packets per flow (RS at the wire dtype, AG at the parameter dtype) under the deadlock bound of
        # the build's buffers in hop-major order; a larger chunk goes round-major with the largest segment
        # the buffers allow (any chunk then runs; every step as the two phases, the one-phase semantics
        # kept by the hosts: the bench's Ring.step)
        self.segment = ring_segment(ring.chunk_elems(int(params.size), world), payload_bytes, spec.grad_dtype,
                                    spec.out_dtype)
        self.spec, self.world, self.length = spec, world, int(params.size)
        self.stripes = stripes
        self.wire_dtype, self.param_dtype = spec.grad_dtype, spec.out_dtype
        self.chunk_elems = ring.chunk_elems(self.length, world)
        self.timeout_s = float(timeout_s)
        self.steps = 0
        self.last_hyper_step = 0
        self.last_step_skipped = False
        self.clocks: list[int] = []  # simulated kernel clocks of each step
        self._counters: list[dict[str, int]] = [{} for _ in range(world)]
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        top_cards = max(3, world)
        self.log_dir = BUILD_DIR / "sim" / "net" / "driver"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"ring{world}-{os.getpid()}-{id(self):x}.log"
        self._tmp = Path(tempfile.mkdtemp(prefix="onic-ringsim-"))
        np.save(self._tmp / "params.npy", params)
        sock_path = self._tmp / "sock"
        opts = {
            "config": {"world": world, "length": self.length, "wire_dtype": self.wire_dtype,
                       "param_dtype": self.param_dtype, "payload_bytes": payload_bytes, "window": window,
                       "rto_clocks": max(1, round(rto_s / CLOCK_S)), "comm": comm,
                       "optimizer": spec.optimizer, "segment": self.segment},
            "faults": {} if faults is None else {"drop": faults.drop, "duplicate": faults.duplicate,
                                                 "reorder": faults.reorder, "bitflip": faults.bitflip,
                                                 "hold_s": faults.hold_s, "seed": faults.seed,
                                                 "flip_behind_fcs": faults.flip_behind_fcs},
            "seed": seed, "grad_stall": grad_stall, "buffer_bytes": buffer_bytes,
        }
        config = {"cards": top_cards, "spec": spec.to_dict(), "stripes": stripes, "log": str(self.log_path),
                  "env": {"ONIC_DRIVER_SOCKET": str(sock_path), "ONIC_RING": json.dumps(opts),
                          "ONIC_RING_PARAMS": str(self._tmp / "params.npy")}}
        (self._tmp / "config.json").write_text(json.dumps(config))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_path))
        listener.listen(1)
        self.log_path.unlink(missing_ok=True)
        self._log = open(self.log_path, "xb")  # noqa: SIM115 - lives as long as the child
        self._proc = subprocess.Popen([sys.executable, "-m", "pynq_driver.net.rtlsim", str(self._tmp / "config.json")],
                                      stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._sock = self._accept(listener, start_timeout_s)
            self._recv(start_timeout_s)  # hello, after reset
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()

    # ---- the cluster's interface -----------------------------------------------------------------
    def step(self, local_grads: list[Any], hyper: Hyper, timeout_s: float | None = None, *,
             two_phase: bool = False, max_norm: float | None = None) -> list[np.ndarray]:
        """One ring step on every card; each rank's gathered parameters (L elements of the out dtype).

        `two_phase` / `max_norm`: the two-phase step (design.md 8.1), each card's host deriving the
        scale from its entries between the phases. A step the entries skip (a non-finite gradient
        on some rank): the Adam kernels are not started, so the masters and the step count stay as
        they are, and each network kernel's phase 3 gathers its card's current parameters (its Adam
        kernel's last output): the golden backend's parameters and counters."""
        if not isinstance(hyper, Hyper):
            raise UserError(f"hyper: expected hls.golden.Hyper, got {type(hyper).__name__}")
        if max_norm is not None and not two_phase:
            raise UserError("max_norm needs the two-phase step (two_phase=True)")
        if max_norm is not None and (isinstance(max_norm, bool) or not isinstance(max_norm, (int, float))
                                     or not 0 < max_norm < float("inf")):
            raise UserError(f"max_norm: {max_norm!r} must be a positive finite number")
        grads = [host_array(g, self.wire_dtype, self.length, f"local_grads[{k}] (wire dtype {self.wire_dtype})",
                            err=UserError) for k, g in enumerate(local_grads)]
        self.steps += 1
        req = {"op": "step", "step": self.steps % (1 << 32), "hyper": dataclasses.asdict(hyper),
               "limit": STEP_CLOCK_LIMIT, "two_phase": bool(two_phase),
               "max_norm": None if max_norm is None else float(max_norm)}
        reply, payload = self._call(req, b"".join(np.ascontiguousarray(g).tobytes() for g in grads),
                                    self.timeout_s if timeout_s is None else float(timeout_s))
        self.clocks.append(int(reply["clocks"]))
        for mine, new in zip(self._counters, reply["counters"], strict=True):
            for k, v in new.items():
                mine[k] = mine.get(k, 0) + int(v)
        self.last_step_skipped = bool(reply.get("skipped", False))
        if not self.last_step_skipped:
            self.last_hyper_step = int(hyper.step)  # a skipped step leaves the shards' step, as ShardState
        dt = np.dtype("<u2" if self.param_dtype == "bf16" else "<f4")
        flat = np.frombuffer(payload, dt)
        # each rank's own gathered vector, as read from its card (a card that differs must show)
        return [flat[k * self.length:(k + 1) * self.length].copy() for k in range(self.world)]

    def counters(self) -> list[dict[str, int]]:
        """Each card's counter registers (design.md 8.3 names), summed over the steps."""
        return [dict(c) for c in self._counters]

    def state_dicts(self) -> list[dict[str, Any]]:
        """Each owner's shard (step, params, exp_avg, exp_avg_sq: S float32 each), rank order."""
        reply, payload = self._call({"op": "state"}, b"", self.timeout_s)
        size = int(reply["size"])
        flat = np.frombuffer(payload, "<f4")
        out = []
        for k in range(self.world):
            base = 3 * size * k
            p, m, v = (flat[base + i * size:base + (i + 1) * size].copy() for i in range(3))
            out.append({"step": self.last_hyper_step, "params": p, "exp_avg": m, "exp_avg_sq": v,
                        "spec": self.spec.to_dict(), "rank": k, "world": self.world, "length": self.length,
                        "lo": k * self.chunk_elems, "chunk_elems": self.chunk_elems})
        return out

    def close(self) -> None:
        if self._sock is not None and self._proc is not None and self._proc.poll() is None:
            try:
                self._call({"op": "close"}, b"", 5.0)
                self._proc.wait(timeout=10)
            except (RingError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def _call(self, req: dict[str, Any], payload: bytes, timeout_s: float) -> tuple[dict[str, Any], bytes]:
        return self._exchange(req, payload, 30.0, timeout_s)


def _child_main(config_path: str) -> int:
    """Child process: build (or reuse) the N-card simulation and run the serving cocotb test."""
    from hls.rtl import ring_top, simulators

    cfg = json.loads(Path(config_path).read_text())
    made = ring_top.prepare_cards(int(cfg["cards"]), KernelSpec.from_dict(cfg["spec"]),
                                  net_stripes=int(cfg.get("stripes", 1)))
    sys.path[:0] = [str(TB_DIR / "net"), str(TB_MODELS_DIR), str(REPO_ROOT)]
    xml = simulators.run_cocotb(
        sources=made.sources, toplevel=made.top, test_module="ring_server", test_dir=TB_DIR / "net",
        build_dir=made.build_dir, simulator="verilator", parameters=made.parameters,
        extra_env={**cfg["env"], "ONIC_MANIFEST": str(made.manifest)},
    )
    ran, failed = simulators.check_results(xml)
    return 0 if ran and not failed else 1


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))


__all__ = ["RtlSimRing"]
