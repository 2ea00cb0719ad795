"""Ring peers' addresses through the rendezvous torchrun already provides: a torch.distributed
store (`TCPStore`, `FileStore`, `dist.distributed_c10d._get_default_store()`, ...).

The store is duck-typed (`set(key, value)`, `get(key) -> bytes`, `wait(keys, timeout)` with a
`datetime.timedelta`), so this package never imports torch. Each rank publishes the UDP address
of its card's socket under `<prefix>/<comm>/<generation>/<rank>` and reads every rank's; a rank
that never publishes is named in a `RendezvousTimeout` after `timeout_s`. The generation counts
the rank's joins of ring `comm` through the store (`store.add`), so a ring opened again in the
same job reads the new addresses, not the old ones.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

from hls.errors import UserError
from pynq_driver.net.errors import RendezvousTimeout
from pynq_driver.net.transport import Address

DEFAULT_PREFIX = "optimusnic/net"


def address_key(rank: int, comm: int = 0, prefix: str = DEFAULT_PREFIX, generation: int = 1) -> str:
    return f"{prefix}/{comm}/{generation}/{rank}"


def _generation(store: Any, rank: int, comm: int, prefix: str) -> int:
    """How many times this rank joined ring `comm` through this store (1, 2, ...): every rank joins
    as often as the others, so a ring opened again (after a failure, a checkpoint load) never reads
    the addresses of the one before. Stores without `add` have one generation."""
    add = getattr(store, "add", None)
    return int(add(f"{prefix}/{comm}/joins/{rank}", 1)) if callable(add) else 1


def exchange_addresses(store: Any, rank: int, world: int, address: Address, *, comm: int = 0,
                       prefix: str = DEFAULT_PREFIX, timeout_s: float = 60.0) -> list[Address]:
    """Publish `address` for `rank` and return every rank's address (index = rank)."""
    for method in ("set", "get", "wait"):
        if not callable(getattr(store, method, None)):
            raise UserError(f"store: {type(store).__name__} has no {method}(); pass a torch.distributed Store "
                            "(e.g. the TCPStore torchrun's rendezvous created)")
    if not 0 <= rank < world:
        raise UserError(f"rank {rank} out of 0 .. {world - 1}")
    host, port = address
    generation = _generation(store, rank, comm, prefix)
    store.set(address_key(rank, comm, prefix, generation), json.dumps([host, int(port)]))
    deadline = time.monotonic() + timeout_s
    out: list[Address] = []
    for peer in range(world):
        key = address_key(peer, comm, prefix, generation)
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("deadline passed")
            store.wait([key], datetime.timedelta(seconds=left))
            raw = store.get(key)
        except Exception as exc:  # torch raises DistStoreError (a RuntimeError) on a timeout
            raise RendezvousTimeout(f"rank {rank}: rank {peer} did not publish its card's address "
                                    f"({key!r}) within {timeout_s:g} s: {type(exc).__name__}: {exc}") from exc
        text = raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
        try:
            peer_host, peer_port = json.loads(text)
            out.append((str(peer_host), int(peer_port)))
        except (ValueError, TypeError) as exc:
            raise RendezvousTimeout(f"rank {rank}: rank {peer}'s address {text!r} in the store is not "
                                    "[host, port]") from exc
    return out


__all__ = ["DEFAULT_PREFIX", "address_key", "exchange_addresses"]
