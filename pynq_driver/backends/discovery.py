"""Finding the cards: PYNQ and XRT imported (or what is missing, said once), the Alveo cards XRT
sees, and which of them a process uses (its launcher's local rank, or `device_index`).
"""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
from typing import Any

import numpy as np

from hls.errors import UserError

PYNQ_VERSION = "3.0.1"
# Environment variables launchers set to a process's rank on its host (torchrun, Open MPI, MPICH, Slurm).
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def import_pynq() -> tuple[Any, str | None]:
    """(pynq, None), or (None, what is missing) when PYNQ or what it needs cannot be imported."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pynq
    except ModuleNotFoundError as exc:
        return None, _missing_module(exc)
    except OSError as exc:  # XILINX_XRT is set, but its libxrt_core.so does not load
        where = os.environ.get("XILINX_XRT", "")
        return None, (f"XRT (XILINX_XRT={where} has no usable lib/libxrt_core.so: {exc}; install XRT 2.13-2.16 "
                      "and `source /opt/xilinx/xrt/setup.sh`)")
    try:
        import pynq.lib  # noqa: F401 - Overlay() imports it; PYNQ 3.0.1 needs pycparser < 3 for it
    except ModuleNotFoundError as exc:
        return None, _missing_module(exc)
    if getattr(pynq, "__version__", "") != PYNQ_VERSION:
        return None, f"PYNQ {PYNQ_VERSION} (found {pynq.__version__}; the last release that supports Alveo)"
    return pynq, None


def _missing_module(exc: ModuleNotFoundError) -> str:
    name = exc.name or str(exc)
    if name == "pynq":
        return f"PYNQ {PYNQ_VERSION} (pip install 'optimusnic[card]')"
    if name.startswith("pycparser"):
        return ("pycparser < 3 (PYNQ 3.0.1's pynq.lib imports pycparser.plyparser, gone in pycparser 3; "
                "pip install 'optimusnic[card]')")
    if name.startswith("pkg_resources"):
        return "setuptools < 82 (PYNQ's pynqutils imports pkg_resources; pip install 'optimusnic[card]')"
    return f"{name}, which PYNQ needs (pip install 'optimusnic[card]')"


def cards(pynq: Any) -> list[Any]:
    """The Alveo cards XRT sees, as PYNQ's device objects (probed once per process)."""
    from pynq.pl_server.xrt_device import XrtDevice

    if threading.current_thread() is not threading.main_thread():
        # PYNQ's XrtDevice() calls asyncio.get_event_loop(), which fails in a thread without one.
        try:
            asyncio.get_event_loop()
        except RuntimeError:
            asyncio.set_event_loop(asyncio.new_event_loop())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [d for d in pynq.Device.devices if isinstance(d, XrtDevice)]


def card_problems(pynq: Any) -> list[str]:
    """What is missing for a card once PYNQ imports: XRT, then a card it sees (empty: nothing)."""
    from pynq._3rdparty import xrt

    if not xrt.XRT_SUPPORTED:
        return ["XRT (XILINX_XRT is not set; install XRT 2.13-2.16 and `source /opt/xilinx/xrt/setup.sh`)"]
    if not cards(pynq):
        return ["an Alveo card (XRT sees none; check `xbutil examine`)"]
    return []


def missing_runtime() -> list[str]:
    """What stands between this host and a card: PYNQ and its dependencies, XRT, then a card."""
    pynq, problem = import_pynq()
    return [problem] if problem else card_problems(pynq)


def local_rank() -> int | None:
    """This process's rank on its host, from the launcher's environment (torchrun, MPI, Slurm), or None."""
    for var in LOCAL_RANK_VARS:
        value = (os.environ.get(var) or "").strip()
        if not value:
            continue
        # ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses.
        if not (value.isascii() and value.isdigit()) or len(value) > 6:
            raise UserError(f"{var}={value!r}: not a local rank (a whole number 0, 1, ... as the launcher sets)")
        return int(value)
    return None


def check_device_index(device_index: Any, found: list[Any]) -> int:
    """`device_index` as an index into the cards XRT sees (0 .. count-1); UserError otherwise."""
    if isinstance(device_index, bool) or not isinstance(device_index, (int, np.integer)):
        raise UserError(f"device_index: {device_index!r} must be an integer card index (0 for the first card)")
    names = ", ".join(f"{i}: {getattr(d, 'name', '?')}" for i, d in enumerate(found))
    if not 0 <= int(device_index) < len(found):
        raise UserError(f"device_index {device_index}: this host has {len(found)} card(s) XRT can see ({names}); "
                        f"use 0..{len(found) - 1} (each rank its own card: see the README)")
    return int(device_index)


# ---- what xocl shows of a card in sysfs ----------------------------------------------------------
# XRT 2.14-2.16 abort the process (SIGABRT) where xclOpenContext meets a compute unit another process
# holds, and 2.16 where xclAllocBO fails: a C++ exception leaves shim.cpp's C wrapper. The backend
# checks those preconditions here first, from what the xocl driver publishes for the card's user
# function (userpf/xocl_sysfs.c): `kdsstat` (kdsstat_show: the pids holding contexts) and
# `memstat_raw` (xocl_mm_stat: bytes used and BO count per memory-group index).
ABORTING_XRT = ((2, 14), (2, 16))  # releases whose busy-CU (and, on 2.16, failed-alloc) calls abort


def sysfs_root() -> str:
    """/sys, or OPTIMUSNIC_SYSFS_ROOT (a folder standing in for it: the tests' simulated cards)."""
    return os.environ.get("OPTIMUSNIC_SYSFS_ROOT") or "/sys"


def user_sysfs(card: Any) -> str | None:
    """The xocl user function's sysfs folder of PYNQ device `card`: the management function whose
    `slot` is the card's PCI slot (as PYNQ's XrtDevice._find_sysfs finds it), function 1 of its device."""
    import glob

    try:
        slot = int(card._info.mPciSlot)
    except (AttributeError, TypeError, ValueError):
        return None
    root = sysfs_root()
    for mgmt in sorted(glob.glob(os.path.join(root, "bus/pci/drivers/xclmgmt/*:*"))):
        try:
            with open(os.path.join(mgmt, "slot")) as f:
                if int(f.read().strip() or -1) != slot:
                    continue
        except (OSError, ValueError):
            continue
        bdf = os.path.basename(os.path.realpath(mgmt))
        user = os.path.join(root, "bus/pci/drivers/xocl", bdf.rsplit(".", 1)[0] + ".1")
        return user if os.path.isdir(user) else None
    return None


def context_holders(card: Any) -> list[int] | None:
    """The pids holding XRT contexts on `card` (kdsstat's "client pid:" list); None if unreadable."""
    folder = user_sysfs(card)
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, "kdsstat")) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    if not any(line.startswith("client pid:") for line in lines):
        return None
    start = next(i for i, line in enumerate(lines) if line.startswith("client pid:"))
    try:
        return [int(line.strip()) for line in lines[start + 1:] if line.strip()]
    except ValueError:
        return None


def memory_used(card: Any, index: int) -> int | None:
    """Bytes in use in memory-group `index` of `card` (memstat_raw's first field); None if unreadable."""
    folder = user_sysfs(card)
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, "memstat_raw")) as f:
            rows = f.read().splitlines()
        return int(rows[index].split()[0])
    except (OSError, IndexError, ValueError):
        return None


__all__ = ["ABORTING_XRT", "LOCAL_RANK_VARS", "PYNQ_VERSION", "card_problems", "cards", "check_device_index",
           "context_holders", "import_pynq", "local_rank", "memory_used", "missing_runtime", "sysfs_root",
           "user_sysfs"]
