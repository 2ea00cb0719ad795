"""Bounded reads of the files the toolkit takes from users: regular files only, with a size cap.

A FIFO, a device (`/dev/zero`), a socket or a folder given where a data file belongs would block
or read until memory runs out; a file larger than its kind ever is would cost minutes before a
parser refuses it. Every data file (targets file, project manifest, registry manifest, shard
checkpoint, xclbin) is opened here: without following it into a blocking open (O_NONBLOCK), checked to
be a regular file, and read only up to the cap of its kind.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from hls.errors import UserError

# Caps per kind of file: far above what the toolkit writes, far below what would hurt.
TARGETS_FILE_MAX = 1 << 20  # the built-in catalog is ~40 KB
MANIFEST_MAX = 8 << 20  # a project manifest is ~20-60 KB (a 16-CU plan a few hundred KB)
REGISTRY_MANIFEST_MAX = 16 << 20  # a project manifest + build info and the parsed report summary
TEXT_REPORT_MAX = 64 << 20  # vendor report files (timing summaries are a few MB at most)
XCLBIN_MAX = 1 << 31  # device binaries are 30-300 MB
STATE_FILE_MAX = 1 << 40  # a shard checkpoint: 12 bytes per parameter; members are checked one by one


class FileRefused(UserError):
    """A data file is not a regular file, or is larger than its kind can be."""


def _describe(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


@contextlib.contextmanager
def open_regular(path: str | os.PathLike[str], max_bytes: int, what: str) -> Iterator[tuple[BinaryIO, int]]:
    """Open `path` for reading if it is a regular file of at most `max_bytes`; yields (file, size).

    The open itself never blocks: O_NONBLOCK makes opening a FIFO return at once, and the type is
    checked on the open descriptor (no race between a check and the open).
    """
    p = Path(path)
    if not str(p).strip() or "\0" in str(p):
        raise FileRefused(f"{str(path)!r}: not a usable {what} path (empty or with a NUL byte)")
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileRefused(f"{p}: cannot read {what} ({exc.strerror or exc})") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"{p}: {what} must be a regular file, this is {_describe(st.st_mode)}")
        if st.st_size > max_bytes:
            raise FileRefused(f"{p}: {what} is {st.st_size:,} bytes, more than the {max_bytes:,} such a file can be")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f, st.st_size


def read_bytes(path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    """The whole content of a regular file of at most `max_bytes` (re-checked while reading: a file
    that grows after the size check is refused, not read on)."""
    with open_regular(path, max_bytes, what) as (f, _size):
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileRefused(f"{path}: {what} grew beyond {max_bytes:,} bytes while being read")
    return data


def read_text(path: str | os.PathLike[str], max_bytes: int, what: str) -> str:
    data = read_bytes(path, max_bytes, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from exc


def inside(base: str | os.PathLike[str], rel: str | os.PathLike[str], what: str) -> Path:
    """`base / rel`, refused unless `rel` is a plain relative path that resolves inside `base`
    (no absolute path, no `..`, no symlink leading out)."""
    base_p = Path(base)
    rel_s = os.fspath(rel)
    if not rel_s or "\0" in rel_s or os.path.isabs(rel_s) or ".." in Path(rel_s).parts:
        raise UserError(f"{what}: {rel_s!r} must be a relative path inside {base_p} (no '..', not absolute)")
    root = base_p.resolve()
    dest = (base_p / rel_s).resolve()
    if dest != root and root not in dest.parents:
        raise UserError(f"{what}: {rel_s!r} leads outside {base_p} (to {dest})")
    return base_p / rel_s


def check_writable_dir(folder: str | os.PathLike[str], what: str) -> Path:
    """Fail now, in one line, if `folder` cannot be created or written: before minutes of work."""
    p = Path(folder)
    if str(folder).strip() == "" or "\0" in str(folder):
        raise UserError(f"{what}: {str(folder)!r} is not a usable path (empty or with a NUL byte)")
    for parent in (p, *p.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise UserError(f"{what}: {parent} exists and is not a folder")
            break
    try:
        p.resolve().mkdir(parents=True, exist_ok=True)  # 'a/../b' makes b only, not a too
    except OSError as exc:
        raise UserError(f"{what}: cannot create {p} ({exc.strerror or exc})") from exc
    if not os.access(p.resolve(), os.W_OK | os.X_OK):
        raise UserError(f"{what}: {p} is not writable")
    return p


def check_writable_file(path: str | os.PathLike[str], what: str) -> Path:
    """Fail now if `path` cannot be written: its folder must exist or be creatable and writable,
    and `path` itself must not be a folder."""
    p = Path(path)
    if str(path).strip() == "" or "\0" in str(path) or p.name in ("", ".", ".."):
        raise UserError(f"{what}: {str(path)!r} is not a file name")
    if p.is_dir():
        raise UserError(f"{what}: {p} is a folder, not a file")
    check_writable_dir(p.parent if str(p.parent) else Path("."), what)
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError(f"{what}: {p} is not writable")
    return p


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb", **kwargs: object) -> Iterator[BinaryIO]:
    """Write `path` atomically: into a fresh temporary file in its folder, renamed over `path` once
    complete (and synced). A symlink or hard link at `path` is replaced, never written through; a
    crash or an exception leaves `path` as it was and no temporary file behind."""
    if "w" not in mode:
        raise ValueError(f"atomic_open writes files (mode {mode!r})")
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode, **kwargs) as f:  # type: ignore[call-overload]
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            os.chmod(tmp, 0o666 & ~_umask())
        except OSError:
            pass
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """`path` := `data` (str as UTF-8), atomically, never through a symlink or hard link (atomic_open)."""
    with atomic_open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return Path(path)
