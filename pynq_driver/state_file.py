"""Checkpoints of a shard: the .npz (no pickle) `ShardState.save` writes, with a JSON header
(spec, n, step, sha256 of each array), and its verified, bounded reading.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from hls import safe_io, validate
from hls.errors import UserError
from hls.spec import KernelSpec
from pynq_driver.errors import StateFileError

STATE_FORMAT = "optimusnic-shard"
STATE_VERSION = 1
STATE_ARRAYS = ("params", "exp_avg", "exp_avg_sq")


def write_state_file(path: str | os.PathLike[str], sd: dict[str, Any], n: int, consistent: bool) -> Path:
    """Write a shard's `state_dict()` `sd` (of `n` elements) as .npz with its JSON header, atomically:
    a crash mid-save never leaves a half-written checkpoint at `path`."""
    header = {
        "format": STATE_FORMAT, "version": STATE_VERSION, "spec": sd["spec"], "n": n,
        "step": sd["step"], "consistent": consistent,
        "sha256": {k: hashlib.sha256(sd[k].tobytes()).hexdigest() for k in STATE_ARRAYS},
    }
    path = Path(path)
    # A fresh temporary name in the same folder, renamed over `path`: no fixed `<path>.tmp` that a
    # symlink could be planted at, and a symlink or hard link at `path` is replaced, not written through.
    with safe_io.atomic_open(path, "wb") as f:
        np.savez(f, header=np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8),
                 **{k: sd[k] for k in STATE_ARRAYS})
    return path


STATE_HEADER_MAX = 64 << 10  # the JSON header member of a checkpoint (~700 bytes)
_NPY_HEADER_MAX = 4096  # an .npy header (magic, dict, padding) is 128 bytes for these arrays


def read_state_file(path: str | os.PathLike[str], spec: KernelSpec, max_n: int | None = None
                    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Header and arrays of a saved shard, verified (format, spec, lengths, sha256), with bounded work.

    The file must be a regular file (a FIFO or /dev/zero is refused before any read); the zip
    holds exactly the members `save` writes, stored uncompressed (so nothing decompresses to more
    than the file holds); the header member is parsed and checked against its schema
    (hls/validate.py) first, then each array member's declared size, dtype and shape are checked
    against the header's element count before a byte of it is read. `max_n`: the most elements the
    device can hold (its plan's parameters per card): a header declaring more is refused before any
    array is allocated (a sparse file of a few KB may declare gigabytes).
    """
    path = Path(path)
    try:
        with safe_io.open_regular(path, safe_io.STATE_FILE_MAX, "state file") as (f, size):
            return _read_state_zip(path, f, size, spec, max_n)
    except StateFileError:
        raise
    except UserError as exc:  # not a regular file, unreadable
        raise StateFileError(str(exc)) from exc


def _read_state_zip(path: Path, f: Any, size: int, spec: KernelSpec, max_n: int | None
                    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise StateFileError(f"{path}: truncated or corrupt state file (not a readable .npz: {exc})") from exc
    with zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        want = sorted(f"{k}.npy" for k in ("header", *STATE_ARRAYS))
        if sorted(names) != want:
            raise StateFileError(f"{path}: not an optimusnic shard file (members {', '.join(sorted(names)[:8])}; "
                                 f"expected exactly {', '.join(want)})")
        by_name = {i.filename: i for i in infos}
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size \
                    or info.header_offset + info.file_size > size:
                raise StateFileError(f"{path}: member {info.filename} is compressed or runs past the end of the file; "
                                     "state files hold their arrays stored, as ShardState.save writes them")
        try:
            raw_header = _read_member(zf, by_name["header.npy"], np.dtype(np.uint8), None, STATE_HEADER_MAX, path)
            try:
                header_data = json.loads(raw_header.tobytes().decode("utf-8"), parse_constant=_no_json_constant)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise StateFileError(f"{path}: header: not JSON ({exc})") from exc
            try:
                header = validate.checkpoint_header(header_data, str(path))
            except validate.Invalid as exc:
                raise StateFileError(str(exc)) from exc
            check_spec(header["spec"], spec, str(path), StateFileError)
            n = header["n"]
            if max_n is not None and n > max_n:
                raise StateFileError(f"{path}: declares {n:,} elements ({12 * n:,} bytes of state); this device holds "
                                     f"at most {max_n:,} per card (its kernel plan): not a checkpoint of this card")
            arrays = {k: _read_member(zf, by_name[f"{k}.npy"], np.dtype("<f4"), n, None, path) for k in STATE_ARRAYS}
        except StateFileError:
            raise
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:  # a member that is cut short
            raise StateFileError(f"{path}: truncated or corrupt state file ({type(exc).__name__}: {exc})") from exc
    for k, arr in arrays.items():
        if hashlib.sha256(arr.tobytes()).hexdigest() != header["sha256"][k]:
            raise StateFileError(f"{path}: {k} does not match its sha256 in the header (corrupt file)")
    if not header.get("consistent", True):
        raise StateFileError(f"{path}: saved from a shard whose last step stopped half-way; not a usable checkpoint")
    return header, arrays


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dtype: np.dtype, n: int | None,
                 max_bytes: int | None, path: Path) -> np.ndarray:
    """One .npy member, its declared dtype, shape and byte size checked before its data is read:
    a 1-D array of `dtype` with `n` elements (or at most `max_bytes` when n is None)."""
    what = f"{path}: {info.filename}"
    with zf.open(info) as m:
        try:
            version = np.lib.format.read_magic(m)
            if version == (1, 0):
                shape, fortran, got = np.lib.format.read_array_header_1_0(m, max_header_size=_NPY_HEADER_MAX)
            elif version == (2, 0):
                shape, fortran, got = np.lib.format.read_array_header_2_0(m, max_header_size=_NPY_HEADER_MAX)
            else:
                raise StateFileError(f"{what}: .npy format version {version} (expected 1.0 or 2.0)")
        except StateFileError:
            raise
        except (ValueError, SyntaxError, EOFError, OSError) as exc:
            raise StateFileError(f"{what}: not a readable .npy member ({exc})") from exc
        if got != dtype or fortran or len(shape) != 1:
            raise StateFileError(f"{what}: is {got} {shape}{' (Fortran order)' if fortran else ''}; "
                                 f"expected a 1-D {dtype} array")
        count = shape[0]
        if n is not None and count != n:
            raise StateFileError(f"{what}: holds {count:,} elements; the header says {n:,}")
        if max_bytes is not None and count * dtype.itemsize > max_bytes:
            raise StateFileError(f"{what}: holds {count:,} bytes; at most {max_bytes:,}")
        nbytes = count * dtype.itemsize
        if info.file_size != m.tell() + nbytes:
            raise StateFileError(f"{what}: member is {info.file_size:,} bytes; its .npy header declares "
                                 f"{m.tell() + nbytes:,}")
        try:
            buf = bytearray(nbytes)
        except MemoryError:
            raise StateFileError(f"{what}: needs {nbytes:,} bytes of host memory to read; not available") from None
        view, got_bytes = memoryview(buf), 0
        while got_bytes < nbytes:
            k = m.readinto(view[got_bytes:])
            if not k:
                raise StateFileError(f"{what}: truncated ({got_bytes:,} of {nbytes:,} bytes)")
            got_bytes += k
    return np.frombuffer(buf, dtype=dtype)


def _no_json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# Fields that only place the same arrays differently on the card (saved state is in element order).
_PLACEMENT_FIELDS = frozenset({"stripes", "rate_gps", "compute_units"})


def check_spec(saved: dict[str, Any], spec: KernelSpec, where: str, err: type[UserError]) -> None:
    """Raise `err` if the spec a state was saved for differs from `spec` (placement aside)."""
    mine = spec.to_dict()
    diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k) and k not in _PLACEMENT_FIELDS)
    if diff:
        detail = ", ".join(f"{k}: saved {saved.get(k)!r} vs device {mine.get(k)!r}" for k in diff)
        raise err(f"{where}: state is for another kernel spec ({detail})")


__all__ = ["STATE_ARRAYS", "STATE_FORMAT", "STATE_VERSION", "check_spec", "read_state_file", "write_state_file"]
