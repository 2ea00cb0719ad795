"""Errors of the cards on the wire: a ring step that could not complete names the rank, the peer and what
was awaited; a network-kernel argument refused names the value."""

from __future__ import annotations

from hls.errors import UserError
from pynq_driver.errors import DeviceError


class NetConfigError(UserError):
    """A network-kernel argument the kernel would refuse (its STATUS config_error) or its registers cannot
    hold (`pynq_driver.net.net_kernel.step_arguments`): nothing is written."""


class RingError(DeviceError):
    """The ring could not complete a step: a peer died, stopped answering or broke the protocol."""


class PeerTimeout(RingError):
    """A ring peer stopped answering: nothing from `peer` for `timeout_s` while `awaited` was due."""

    def __init__(self, message: str, *, rank: int, peer: int, awaited: str, timeout_s: float) -> None:
        super().__init__(message)
        self.rank = rank
        self.peer = peer
        self.awaited = awaited
        self.timeout_s = timeout_s


class RendezvousTimeout(RingError):
    """The ring's peers did not publish their addresses in the store within the timeout."""


__all__ = ["NetConfigError", "PeerTimeout", "RendezvousTimeout", "RingError"]
