"""Host driver: open a kernel on a card or in simulation, keep a shard's optimizer state on it,
stream gradient shards through it (see pynq_driver/README.md)."""

from hls.golden import Hyper
from pynq_driver import _compat
from pynq_driver.backends import BACKENDS, open_device
from pynq_driver.device import Buffer, Device
from pynq_driver.errors import (
    BadGradient,
    BitstreamMismatch,
    CardBusy,
    CardNotResponding,
    DeviceClosed,
    DeviceError,
    KernelTimeout,
    NonFiniteGradient,
    ShardTooLarge,
    StateError,
    StateFileError,
    ToolMissing,
)
from pynq_driver.shard import DEFAULT_CHUNK_ELEMS, ShardState

_compat.install()

__all__ = [
    "BACKENDS",
    "DEFAULT_CHUNK_ELEMS",
    "BadGradient",
    "BitstreamMismatch",
    "Buffer",
    "CardBusy",
    "CardNotResponding",
    "Device",
    "DeviceClosed",
    "DeviceError",
    "Hyper",
    "KernelTimeout",
    "NonFiniteGradient",
    "ShardState",
    "ShardTooLarge",
    "StateError",
    "StateFileError",
    "ToolMissing",
    "open_device",
]
