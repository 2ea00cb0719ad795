"""Advisory locks on files shared by several processes.

Build folders and generated projects are shared by pytest-xdist workers, the CLI and the
driver's rtlsim backends; each takes a lock file beside what it builds or reads. An exclusive
lock writes, a shared one reads. `flock` locks are dropped by the kernel when a process dies, so
a killed build never leaves a folder locked.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(lock_file: Path, *, exclusive: bool = True) -> Iterator[None]:
    """Hold `lock_file` (created with its folder if missing) for the body of the `with`."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
