"""`NetCluster`: N software cards on the wire in one process, for tests and demos.

Each card is a `RingNode` with its own UDP socket on 127.0.0.1 and its own event-loop thread, so
the frames travel over real sockets exactly as between processes; only the rendezvous is
skipped (the cluster knows every socket's address). Across processes use `RingNode.join` with
the store torchrun's rendezvous made.
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
from pynq_driver.net.node import RingNode, check_backend
from pynq_driver.net.transport import UdpTransport


class NetCluster:
    """`world` cards of `backend` ("golden" or "csim") running the ring over localhost UDP.

    `params`: the initial full flat fp32 parameter vector (every rank's model is whole; each card
    keeps its chunk). Keyword options go to every `RingNode` (wire_dtype, payload_bytes, window,
    slots, rto_s, peer_timeout_s, comm, faults: each card draws its own seeded faults).
    """

    def __init__(self, backend: str, spec: KernelSpec | None, world: int, params: np.ndarray | int, *,
                 faults: Faults | None = None, host: str = "127.0.0.1", **node_options: Any) -> None:
        check_backend(backend)
        try:
            ring.validate_world(world)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        if isinstance(params, (int, np.integer)) and not isinstance(params, bool):
            params = np.zeros(int(params), np.float32)
        self.world = world
        self.nodes: list[RingNode] = []
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

    def step(self, local_grads: Sequence[np.ndarray], hyper: Hyper, *, two_phase: bool = False,
             max_norm: float | None = None, timeout_s: float | None = None) -> list[np.ndarray]:
        """One step of every card at once; each rank's gathered parameters (the same bits on every rank)."""
        if len(local_grads) != self.world:
            raise UserError(f"local_grads: {len(local_grads)} gradients for {self.world} ranks")
        for node, grad in zip(self.nodes, local_grads, strict=True):
            node.start(grad, hyper, two_phase=two_phase, max_norm=max_norm)
        return [node.wait(timeout_s) for node in self.nodes]

    def counters(self) -> list[dict[str, int]]:
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
        return [node.state_dict() for node in self.nodes]

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> NetCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["NetCluster"]
