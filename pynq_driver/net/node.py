"""One software card on the wire: the ring protocol's card model (`hls.net.card.Card`), the owner's
Adam kernel on a software card (`golden` or `csim`: `ShardKernel`) and a UDP socket as its
Ethernet port (`UdpTransport`, optionally behind a seeded `FaultLayer`).

A `RingNode` is one rank's card. A thread runs its event loop for the node's whole life: it
receives datagrams (each one frame's exact bytes) and hands them to the card, polls the card for
frames to send (data to the successor, ACK/NAKs to the predecessor: the frame's destination MAC
says which socket) and keeps answering between steps, so a peer that missed this card's last ACK
still finishes. Every wait is bounded:

- `peer_timeout_s`: a peer the card awaits something from (data from the predecessor, ACKs from
  the successor) that sends nothing for that long fails the step with `PeerTimeout`, one line
  naming the peer's rank and what was awaited;
- `step(..., timeout_s=)`: the whole step (default: none beyond the peer timeout).

Per step the host gives the rank's flat local gradient (L elements of the wire dtype: float32 or
uint16 bf16 patterns, or a contiguous CPU torch tensor of float32 / bfloat16, viewed without this
package importing torch) and gets the flat updated parameters back (L elements of the kernel's
out dtype; `out=` also fills a caller's array or tensor), the same bits on every rank and equal
to `hls.net.ring.ring_step`. The owner's shard
state (p, m, v, step: S elements) is `state_dict()` / `load_state_dict()`.

Across processes each rank opens its own node with `RingNode.join(..., store=...)`: the ring
peers' socket addresses come through a torch.distributed store (duck-typed, see `rendezvous`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hls.errors import UserError
from hls.golden import Hyper
from hls.net import card as card_model
from hls.net import ring, wire
from hls.spec import KernelSpec
from pynq_driver.backends import open_device
from pynq_driver.device import Device
from pynq_driver.host import host_array
from pynq_driver.net.errors import PeerTimeout, RingError
from pynq_driver.net.faults import FaultLayer, Faults
from pynq_driver.net.kernel import ShardKernel
from pynq_driver.net.rendezvous import exchange_addresses
from pynq_driver.net.transport import Address, UdpTransport

log = logging.getLogger(__name__)

RING_BACKENDS = ("golden", "csim")
DEFAULT_RTO_S = 0.02
DEFAULT_PEER_TIMEOUT_S = 30.0
_IDLE_TICK_S = 0.02
_JOIN_S = 5.0


def check_backend(backend: str) -> None:
    """Only the software cards join a ring today; the alveo backend needs the network bitstream."""
    if backend == "alveo":
        from pynq_driver.backends.alveo import require_network_bitstream

        require_network_bitstream()
    if backend not in RING_BACKENDS:
        hint = " (RTL cards run as a whole ring in one simulation: NetCluster('rtlsim', ...))" \
            if backend == "rtlsim" else ""
        raise UserError(f"backend {backend!r} cannot join a ring: software cards on the wire are "
                        f"{' and '.join(RING_BACKENDS)}{hint}")


def ring_spec(spec: KernelSpec | None, wire_dtype: str | None) -> KernelSpec:
    """The owner's kernel spec: the gradient stream into the kernel is the wire dtype (design.md 8.1)."""
    spec = KernelSpec() if spec is None else spec
    if not isinstance(spec, KernelSpec):
        raise UserError(f"spec: expected hls.spec.KernelSpec, got {type(spec).__name__}")
    wire_dtype = spec.grad_dtype if wire_dtype is None else wire_dtype
    if wire_dtype not in wire.WIRE_DTYPES:
        raise UserError(f"wire_dtype: {wire_dtype!r}; choose one of {', '.join(wire.WIRE_DTYPES)}")
    return spec if spec.grad_dtype == wire_dtype else replace(spec, grad_dtype=wire_dtype)


class RingNode:
    """Rank `rank`'s card in a ring of `world`; see the module docstring.

    `params`: the full flat fp32 parameter vector (L elements; the node keeps its chunk, zero-padded,
    as the owner's masters) or a dict from `state_dict()` to resume. `peers[r]`: rank r's socket
    address; `transport`: this rank's bound socket (its address is `peers[rank]`).
    """

    def __init__(self, backend: str, spec: KernelSpec | None, *, rank: int, world: int, params: np.ndarray,
                 transport: UdpTransport, peers: Sequence[Address], wire_dtype: str | None = None,
                 payload_bytes: int = wire.DEFAULT_PAYLOAD_BYTES, window: int = 64, slots: int = 64,
                 rto_s: float = DEFAULT_RTO_S, peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S, comm: int = 0,
                 faults: Faults | None = None, device: Device | None = None, **device_options: Any) -> None:
        check_backend(backend)
        self.spec = ring_spec(spec, wire_dtype)
        self.wire_dtype = self.spec.grad_dtype
        self.param_dtype = self.spec.out_dtype
        if not isinstance(params, np.ndarray) or params.dtype != np.float32 or params.ndim != 1 or not params.size:
            raise UserError(f"params: expected the full flat float32 parameter vector, got "
                            f"{getattr(params, 'dtype', type(params).__name__)} {getattr(params, 'shape', '')}")
        if len(peers) != world:
            raise UserError(f"peers: {len(peers)} addresses for a ring of {world}")
        if not isinstance(peer_timeout_s, (int, float)) or not peer_timeout_s > 0:
            raise UserError(f"peer_timeout_s: {peer_timeout_s!r} must be a positive number of seconds")
        self.rank, self.world, self.length = rank, world, int(params.size)
        self.backend = backend
        self.peer_timeout_s = float(peer_timeout_s)
        endpoints = tuple(wire.endpoint_for_rank(r) for r in range(world))
        try:
            self.config = card_model.CardConfig(
                rank=rank, world=world, length=self.length, endpoints=endpoints, comm=comm,
                wire_dtype=self.wire_dtype, param_dtype=self.param_dtype, payload_bytes=payload_bytes,
                window=window, slots=slots, rto=rto_s)
        except (ValueError, wire.WireError) as exc:
            raise UserError(f"ring of {world}, rank {rank}: {exc}") from exc
        self.chunk_elems = self.config.chunk_elems
        self.lo = rank * self.chunk_elems  # the owner's chunk [lo, lo + S) of the padded vector
        self.transport = transport
        self.peers = [tuple(p) for p in peers]
        self._where = {endpoints[r].mac: self.peers[r] for r in range(world)}
        self._rank_of = {endpoints[r].mac: r for r in range(world)}
        self.faults = FaultLayer(faults.for_rank(rank), self._send_raw) if faults is not None else None
        own_dev = device is None
        self.dev = open_device(backend, self.spec, **device_options) if own_dev else device
        try:
            shard_params = ring.pad(params, world)[self.lo:self.lo + self.chunk_elems].copy()
            self.kernel = ShardKernel(self.dev, shard_params)
        except BaseException:
            if own_dev:
                self.dev.close()
            raise
        self._own_dev = own_dev
        self.card = card_model.Card(self.config, self.kernel)  # checks nothing CardConfig did not
        self.steps = 0  # steps started on the wire (the wire's step number is steps, from 1)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stop = threading.Event()
        self._pending: tuple[np.ndarray, Hyper, dict[str, Any]] | None = None
        self._active = False
        self._result: np.ndarray | None = None
        self._error: BaseException | None = None
        self._started_at = 0.0
        self._heard: dict[int, float] = {}
        self.closed = False
        self._thread = threading.Thread(target=self._loop, name=f"ring-card-{rank}", daemon=True)
        self._thread.start()

    # ---- joining a ring across processes ---------------------------------------------------------
    @classmethod
    def join(cls, backend: str, spec: KernelSpec | None, *, store: Any, rank: int, world: int, params: np.ndarray,
             host: str = "127.0.0.1", port: int = 0, comm: int = 0, rendezvous_timeout_s: float = 60.0,
             **kw: Any) -> RingNode:
        """Open this rank's card and socket and learn the peers' addresses through `store` (a
        torch.distributed Store: the one torchrun's rendezvous made, duck-typed)."""
        check_backend(backend)
        transport = UdpTransport(host, port)
        try:
            peers = exchange_addresses(store, rank, world, transport.address, comm=comm,
                                       timeout_s=rendezvous_timeout_s)
            return cls(backend, spec, rank=rank, world=world, params=params, transport=transport, peers=peers,
                       comm=comm, **kw)
        except BaseException:
            transport.close()
            raise

    # ---- the host side ---------------------------------------------------------------------------
    def start(self, local_grad: Any, hyper: Hyper, *, two_phase: bool = False,
              max_norm: float | None = None) -> None:
        """Begin a step with this rank's flat local gradient (L elements of the wire dtype: float32, or
        uint16 bf16 patterns); `hyper.grad_scale` is the host's unscale factor (the kernel gets it / N)."""
        self._check_usable()
        if self._active or self._pending is not None:
            raise RingError(f"rank {self.rank}: step {self.steps} is still running; wait() for it first")
        if not isinstance(hyper, Hyper):
            raise UserError(f"hyper: expected hls.golden.Hyper, got {type(hyper).__name__}")
        if max_norm is not None and not two_phase:
            raise UserError("max_norm needs the two-phase step (two_phase=True)")
        # numpy, or a contiguous CPU torch tensor viewed without importing torch (bf16: its bits)
        grad = host_array(local_grad, self.wire_dtype, self.length, f"local_grad (wire dtype {self.wire_dtype})",
                          err=UserError).copy()
        with self._lock:
            self._result = None
            self._done.clear()
            self._pending = (grad, hyper, {"two_phase": bool(two_phase), "max_norm": max_norm})
        self.transport.wake()

    def wait(self, timeout_s: float | None = None, out: Any = None) -> np.ndarray:
        """The step's gathered parameters (L elements of the out dtype: float32 or uint16 bf16 patterns),
        also copied into `out` when given (a numpy array or contiguous CPU torch tensor of L elements).

        Raises `PeerTimeout` when a peer stops answering (after `peer_timeout_s`), `RingError` when
        `timeout_s` passes first or the protocol broke."""
        dst = None if out is None else host_array(out, self.param_dtype, self.length, "out", writable=True,
                                                  err=UserError)
        if self._pending is None and not self._active and self._result is None and self._error is None:
            raise RingError(f"rank {self.rank}: no step started")
        limit = self.peer_timeout_s * 4 + 60.0 if timeout_s is None else float(timeout_s)
        if not self._done.wait(limit):
            raise RingError(f"rank {self.rank}: step {self.steps} did not finish within {limit:g} s "
                            f"(counters: {self._brief_counters()})")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        if dst is not None:
            dst[...] = self._result
        return self._result

    def step(self, local_grad: Any, hyper: Hyper, *, two_phase: bool = False, max_norm: float | None = None,
             timeout_s: float | None = None, out: Any = None) -> np.ndarray:
        """One optimizer step on the ring: `start` then `wait`."""
        self.start(local_grad, hyper, two_phase=two_phase, max_norm=max_norm)
        return self.wait(timeout_s, out)

    @property
    def last_step_skipped(self) -> bool:
        """Whether the last finished step skipped the update (the two-phase step saw inf/NaN on some
        rank; every card skipped it and the parameters came back unchanged)."""
        return self.kernel.last_grad_scale is None and self.kernel.updates + self.kernel.skipped > 0

    @property
    def owned(self) -> tuple[int, int]:
        """The elements [lo, hi) of the flat parameter vector this rank's card owns (hi <= L; the
        shard's S elements beyond L - lo are padding)."""
        return min(self.lo, self.length), min(self.lo + self.chunk_elems, self.length)

    @property
    def counters(self) -> dict[str, int]:
        """The card's counters (design.md 8.3), the fault layer's (`fault_*`) and the socket's (`udp_*`)."""
        with self._lock:
            out = dict(self.card.counters)
        if self.faults is not None:
            out.update({f"fault_{k}": v for k, v in vars(self.faults.counters).items()})
        out.update(udp_sent=self.transport.sent_datagrams, udp_received=self.transport.received_datagrams,
                   udp_send_errors=self.transport.send_errors)
        return out

    def _brief_counters(self) -> str:
        c = self.counters
        keys = ("frames_in", "frames_out", "retransmitted_frames", "timeouts", "dropped_fcs")
        return ", ".join(f"{k}={c.get(k, 0)}" for k in keys)

    # ---- the owner's shard: checkpoints ---------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The owner's shard: step, params (fp32 masters), exp_avg, exp_avg_sq (S elements each, the
        chunk [lo, lo + S) of the zero-padded flat vector), spec, and where it sits in the ring."""
        self._check_idle("state_dict")
        with self._lock:
            sd = self.kernel.state_dict()
        sd.update(rank=self.rank, world=self.world, length=self.length, lo=self.lo, chunk_elems=self.chunk_elems)
        return sd

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore the owner's shard from `state_dict()` (the same rank, world and length)."""
        self._check_idle("load_state_dict")
        for key, mine in (("rank", self.rank), ("world", self.world), ("length", self.length)):
            if key in sd and int(sd[key]) != mine:
                raise UserError(f"state_dict: saved for {key} {sd[key]}, this node has {key} {mine}")
        with self._lock:
            self.kernel.load_state_dict(sd)

    # ---- life cycle ------------------------------------------------------------------------------
    def _check_usable(self) -> None:
        if self.closed:
            raise RingError(f"rank {self.rank}: the ring node is closed")
        if self._error is not None:
            raise RingError(f"rank {self.rank}: an earlier step failed ({self._error}); open a new node "
                            "(and load a checkpoint)")
        if not self._thread.is_alive():
            raise RingError(f"rank {self.rank}: the card's event loop stopped; open a new node")

    def _check_idle(self, what: str) -> None:
        if self._active or self._pending is not None:
            raise RingError(f"rank {self.rank}: {what} during step {self.steps}; wait() for it first")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        self._thread.join(_JOIN_S)
        self.transport.close()
        self.kernel.close()
        if self._own_dev:
            self.dev.close()

    def __enter__(self) -> RingNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the event loop (its own thread) ---------------------------------------------------------
    def _send_raw(self, frame: bytes, address: Any) -> None:
        self.transport.send(frame, address)

    def _send(self, frames: list[bytes], now: float) -> None:
        for frame in frames:
            address = self._where.get(frame[:6])  # the Ethernet destination MAC: which peer's port
            if address is None:
                raise RingError(f"rank {self.rank}: the card sent a frame to an unknown MAC {frame[:6].hex(':')}")
            if self.faults is not None:
                self.faults.send(frame, address, now)
            else:
                self.transport.send(frame, address)

    def _begin(self, now: float) -> None:
        assert self._pending is not None
        grad, hyper, kw = self._pending
        self.steps += 1
        wire_step = self.steps % (1 << 32)
        self.kernel.hyper = hyper
        self.card.start_step(wire_step, grad, grad_scale=float(hyper.grad_scale), **kw)
        self._pending = None
        self._active = True
        self._started_at = now

    def _loop(self) -> None:
        tick = min(_IDLE_TICK_S, self.config.rto / 4)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                with self._lock:
                    if self._pending is not None and not self._active:
                        self._begin(now)
                    if self.faults is not None:
                        self.faults.flush(now)
                    self._send(self.card.poll(now), now)
                wait = tick if self._active else _IDLE_TICK_S
                if self.faults is not None and (due := self.faults.next_due()) is not None:
                    wait = min(wait, max(0.0, due - now))
                frames = self.transport.recv(wait)
                now = time.monotonic()
                with self._lock:
                    for frame in frames:
                        src = self._rank_of.get(frame[6:12])  # the Ethernet source MAC: who is alive
                        if src is not None:
                            self._heard[src] = now
                        self.card.receive(frame, now)
                    if self.card.error is not None:
                        raise RingError(f"rank {self.rank}: step {self.steps}: {self.card.error}")
                    self._send(self.card.poll(now), now)
                    if self._active and self.card.done:
                        self._result = self.card.gathered
                        self._active = False
                        self._done.set()
                    elif self._active:
                        self._check_peers(now)
        except BaseException as exc:  # the waiting host raises it
            self._error = exc
            self._active = False
            self._done.set()

    def _awaiting(self) -> list[tuple[int, str]]:
        """(peer rank, what) for everything the card still waits on in this step."""
        pred, succ = self.config.predecessor, self.config.successor
        step = self.steps
        try:  # the card model's per-phase go-back-N state, for a precise message
            out = []
            for fl in self.card._flows.values():
                name = {"RS": "reduce-scatter", "AG": "all-gather", "SCALAR": "scalar"}.get(fl.flow.name,
                                                                                             fl.flow.name)
                rx, tx = fl.receiver, fl.sender
                if rx.expected < tx.total:
                    out.append((pred, f"its {name} data of step {step} (packet {rx.expected} of {tx.total})"))
                if tx.base < tx.total and tx.base < len(tx.sizes):
                    out.append((succ, f"ACKs of rank {self.rank}'s {name} data of step {step} "
                                      f"({tx.base} of {tx.total} acknowledged)"))
            return out
        except (AttributeError, TypeError):  # another card model: what its public state says
            if self.card.gathered is None:
                return [(pred, f"its data of step {step}")]
            return [(succ, f"ACKs of rank {self.rank}'s data of step {step}")]

    def _check_peers(self, now: float) -> None:
        worst: tuple[float, int, str] | None = None
        for peer, what in self._awaiting():
            silent = now - max(self._heard.get(peer, 0.0), self._started_at)
            if worst is None or silent > worst[0]:
                worst = (silent, peer, what)
        if worst is not None and worst[0] > self.peer_timeout_s:
            silent, peer, what = worst
            raise PeerTimeout(f"rank {self.rank}: ring peer rank {peer} sent nothing for {silent:.1f} s "
                              f"while rank {self.rank} awaited {what}; rank {peer} died or stopped answering",
                              rank=self.rank, peer=peer, awaited=what, timeout_s=self.peer_timeout_s)


__all__ = ["DEFAULT_PEER_TIMEOUT_S", "DEFAULT_RTO_S", "RING_BACKENDS", "RingNode", "check_backend", "ring_spec"]
