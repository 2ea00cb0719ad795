"""Errors the driver raises on purpose; each says what went wrong and what to do."""

from __future__ import annotations

from hls.errors import OptimusError, ToolMissing, UserError

__all__ = [
    "BadGradient",
    "BitstreamMismatch",
    "DeviceClosed",
    "DeviceError",
    "KernelStatusError",
    "KernelTimeout",
    "NonFiniteGradient",
    "ShardTooLarge",
    "StateError",
    "StateFileError",
    "ToolMissing",
]


class DeviceError(OptimusError, RuntimeError):
    """The device (card or simulator) failed: it died, hung, or refused an operation."""


class KernelTimeout(DeviceError):
    """The kernel did not raise ap_done within the timeout. Card memory is still readable."""


class KernelStatusError(DeviceError):
    """The kernel reached ap_done but its STATUS register reports errors (`causes`: bit names of
    the manifest's register_map.status; `ports`: the m_axi ports whose PORT_ERR bit is set, each
    with "RRESP" or "BRESP"). The run's output and state are not to be trusted."""

    def __init__(self, message: str, status: int = 0, causes: tuple[str, ...] = (),
                 ports: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.causes = causes
        self.ports = ports


class DeviceClosed(DeviceError):
    """An operation on a device (or shard) that was already closed."""


class StateError(DeviceError):
    """The shard's state on the device is not consistent (a step stopped half-way)."""


class BadGradient(UserError):
    """A gradient (or output) array with the wrong dtype, length, layout or device."""


class NonFiniteGradient(UserError):
    """The gradient holds inf or NaN and the policy is to raise (default: skip the step)."""


class ShardTooLarge(UserError):
    """The shard's optimizer state does not fit in the card memory."""


class BitstreamMismatch(UserError):
    """The xclbin is not the one its manifest describes (hash, kernel name or register offsets)."""


class StateFileError(UserError):
    """A saved state file is truncated, corrupt, or was saved for another kernel spec."""


class CardBusy(DeviceError):
    """The card, or one of the kernel's compute units on it, is in use by another program or device."""


class CardNotResponding(DeviceError):
    """Register reads return all ones: the card fell off the PCIe bus or was reset."""
