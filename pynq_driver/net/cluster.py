"""`NetCluster`: N software cards on the wire in one process, for tests and demos.

Each card is a `RingNode` with its own UDP socket on 127.0.0.1 and its own event-loop thread, so
the frames travel over real sockets exactly as between processes; only the rendezvous is
skipped (the cluster knows every socket's address). Across processes use `RingNode.join` with
the store torchrun's rendezvous made.

Backend "rtlsim": the N cards are RTL in one cocotb/Verilator simulation
(`pynq_driver.net.rtlsim.RtlSimRing`: `onic_card`s, each the network kernel and the generated Adam
RTL kernel, on cocotbext-eth MAC models and the bench's seeded switch), with the same `step` /
`counters` / `state_dicts` and the same results as "golden", two-phase steps included (a skipped
step gathers the unchanged parameters without the Adam kernels, see `RtlSimRing.step`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hls.errors import UserError
from hls.golden import Hyper
from hls.net import ring
from hls.spec import KernelSpec
from pynq_driver.net.faults import Faults
from pynq_driver.net.node import RingNode, check_backend, ring_spec
from pynq_driver.net.transport import UdpTransport


class NetCluster:
    """`world` cards of `backend` ("golden" or "csim") running the ring over localhost UDP, or
    ("rtlsim") as RTL in one simulation.

    `params`: the initial full flat fp32 parameter vector (every rank's model is whole; each card
    keeps its chunk). Keyword options go to every `RingNode` (wire_dtype, payload_bytes, window,
    slots, rto_s, peer_timeout_s, comm, faults: each card draws its own seeded faults). rtlsim
    takes wire_dtype, payload_bytes, window (slots, if given, equal to it), rto_s, comm, faults (on
    the simulated switch's egress links, same seeded draws; no delay fault), and RtlSimRing's
    seed, grad_stall, buffer_bytes, timeout_s, start_timeout_s, stripes (the network kernels'
    lgrad and gather stripes).
    """

    RTLSIM_OPTIONS = ("payload_bytes", "window", "rto_s", "comm", "seed", "grad_stall", "buffer_bytes",
                      "timeout_s", "start_timeout_s", "simulator", "stripes")

    def __init__(self, backend: str, spec: KernelSpec | None, world: int, params: np.ndarray | int, *,
                 faults: Faults | None = None, host: str = "127.0.0.1", **node_options: Any) -> None:
        if backend != "rtlsim":
            check_backend(backend)
        try:
            ring.validate_world(world)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        if isinstance(params, (int, np.integer)) and not isinstance(params, bool):
            params = np.zeros(int(params), np.float32)
        self.world = world
        self.nodes: list[RingNode] = []
        self.sim: Any = None
        if backend == "rtlsim":
            self._open_rtlsim(spec, params, faults, node_options)
            return
        transports = [UdpTransport(host) for _ in range(world)]
        try:
            peers = [t.address for t in transports]
            for rank in range(world):
                self.nodes.append(RingNode(backend, spec, rank=rank, world=world, params=params,
                                           transport=transports[rank], peers=peers, faults=faults, **node_options))
        except BaseException:
            self.close()
            for t in transports[len(self.nodes):]:
                t.close()
            raise
        self.wire_dtype = self.nodes[0].wire_dtype
        self.param_dtype = self.nodes[0].param_dtype
        self.length = self.nodes[0].length

    def _open_rtlsim(self, spec: KernelSpec | None, params: Any, faults: Faults | None,
                     options: dict[str, Any]) -> None:
        from pynq_driver.net.rtlsim import RtlSimRing

        if not isinstance(params, np.ndarray) or params.dtype != np.float32 or params.ndim != 1 or not params.size:
            raise UserError(f"params: expected the full flat float32 parameter vector, got "
                            f"{getattr(params, 'dtype', type(params).__name__)} {getattr(params, 'shape', '')}")
        options = dict(options)
        rspec = ring_spec(spec, options.pop("wire_dtype", None))
        slots = options.pop("slots", None)
        if slots is not None and slots != options.get("window", slots):
            raise UserError(f"slots: {slots!r}: an RTL card advertises its window's worth of receive slots "
                            f"(window {options.get('window')}); leave slots out")
        if slots is not None:
            options.setdefault("window", slots)
        options.pop("peer_timeout_s", None)  # one simulation: no peer can fall silent on its own
        unknown = sorted(set(options) - set(self.RTLSIM_OPTIONS))
        if unknown:
            raise UserError(f"rtlsim: unknown option(s) {', '.join(unknown)}; it takes wire_dtype, slots, "
                            f"peer_timeout_s, {', '.join(self.RTLSIM_OPTIONS)}")
        self.sim = RtlSimRing(rspec, self.world, params, faults=faults, **options)
        self.wire_dtype, self.param_dtype, self.length = self.sim.wire_dtype, self.sim.param_dtype, self.sim.length

    def step(self, local_grads: Sequence[np.ndarray], hyper: Hyper, *, two_phase: bool = False,
             max_norm: float | None = None, timeout_s: float | None = None) -> list[np.ndarray]:
        """One step of every card at once; each rank's gathered parameters (the same bits on every rank)."""
        if len(local_grads) != self.world:
            raise UserError(f"local_grads: {len(local_grads)} gradients for {self.world} ranks")
        if self.sim is not None:
            return self.sim.step(list(local_grads), hyper, timeout_s, two_phase=two_phase, max_norm=max_norm)
        for node, grad in zip(self.nodes, local_grads, strict=True):
            node.start(grad, hyper, two_phase=two_phase, max_norm=max_norm)
        return [node.wait(timeout_s) for node in self.nodes]

    def counters(self) -> list[dict[str, int]]:
        if self.sim is not None:
            return self.sim.counters()
        return [node.counters for node in self.nodes]

    def totals(self) -> dict[str, int]:
        """Every counter summed over the cards."""
        out: dict[str, int] = {}
        for c in self.counters():
            for k, v in c.items():
                out[k] = out.get(k, 0) + v
        return out

    def state_dicts(self) -> list[dict[str, Any]]:
        """Each owner's shard (p, m, v, step), rank order."""
        if self.sim is not None:
            return self.sim.state_dicts()
        return [node.state_dict() for node in self.nodes]

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()
        for node in self.nodes:
            node.close()

    def __enter__(self) -> NetCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["NetCluster"]
