"""One host-side loop numpy has no fast form for, compiled on first use: the bit-exact comparison
of a tensor's beats with one stripe of the card's masters (change detection, `ShardState.state_equals`).

A stripe holds beats k, k + S, k + 2S, ... of the tensor (hls/layout.py). numpy can only compare
them after gathering those beats into a contiguous block (a copy of the tensor's bytes); the loop
below reads each byte once, at memory speed, and ctypes releases the GIL while it runs, so the
step's two comparison threads really run at once. Where no C compiler is found (or it fails),
`stripe_equal()` gives None and the caller keeps numpy's gather-and-memcmp.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hls.paths import BUILD_DIR

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <stdint.h>
#include <string.h>

/* Whether beats k, k + S, k + 2S, ... of `want` (nbytes; its last beat may be partial) hold the
   same bits as the consecutive 64-byte beats of `stripe`. */
int onic_stripe_equal(const uint8_t *want, uint64_t nbytes, const uint8_t *stripe, uint32_t stripes,
                      uint32_t k) {
    const uint64_t whole = nbytes / 64;
    uint64_t j = k, i = 0;
    for (; j < whole; j += stripes, ++i) {
        uint64_t a[8], b[8], d = 0;
        memcpy(a, want + 64 * j, 64);
        memcpy(b, stripe + 64 * i, 64);
        for (int t = 0; t < 8; ++t)
            d |= a[t] ^ b[t];
        if (d)
            return 0;
    }
    if (j == whole && nbytes % 64)
        return memcmp(want + 64 * j, stripe + 64 * i, nbytes % 64) == 0;
    return 1;
}

/* The same for every stripe at once (all of them in host memory): `want` is read once, in order.
   Differences are OR-ed over 8 rounds of S beats before one test (a branch per beat halves the
   speed); a mismatch only needs to be found, not located. */
int onic_striped_equal(const uint8_t *want, uint64_t nbytes, const uint8_t *const *stripe, uint32_t stripes) {
    const uint64_t rounds = nbytes / 64 / stripes;
    uint64_t i = 0;
    for (; i + 8 <= rounds; i += 8) {
        uint64_t d[8] = {0}, all = 0;
        for (uint32_t k = 0; k < stripes; ++k) {
            const uint8_t *s = stripe[k] + 64 * i;
            for (int r = 0; r < 8; ++r) {
                uint64_t a[8], b[8];
                memcpy(a, want + 64 * ((i + r) * stripes + k), 64);
                memcpy(b, s + 64 * r, 64);
                for (int t = 0; t < 8; ++t)
                    d[t] |= a[t] ^ b[t];
            }
        }
        for (int t = 0; t < 8; ++t)
            all |= d[t];
        if (all)
            return 0;
    }
    for (uint64_t j = i * stripes; 64 * j < nbytes; ++j) {  /* the last rounds, and a partial last beat */
        const uint64_t len = nbytes - 64 * j < 64 ? nbytes - 64 * j : 64;
        if (memcmp(want + 64 * j, stripe[j % stripes] + 64 * (j / stripes), len))
            return 0;
    }
    return 1;
}
"""

_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def _build(cc: str) -> Path:
    digest = hashlib.sha256((_SOURCE + cc).encode()).hexdigest()[:16]
    out = BUILD_DIR / "native" / f"stripe_equal-{digest}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        src = Path(tmp) / "stripe_equal.c"
        src.write_text(_SOURCE)
        lib = Path(tmp) / out.name
        subprocess.run([cc, "-O3", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(lib, out)  # atomic: a concurrent build by another process leaves one whole file
    return out


def _load() -> Any:
    with _lock:
        if "lib" in _loaded:
            return _loaded["lib"]
        lib = None
        cc = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
        if cc:
            try:
                lib = ctypes.CDLL(str(_build(cc)))
                lib.onic_stripe_equal.restype = ctypes.c_int
                lib.onic_stripe_equal.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint32,
                                                  ctypes.c_uint32]
                lib.onic_striped_equal.restype = ctypes.c_int
                lib.onic_striped_equal.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint32]
            except (OSError, subprocess.SubprocessError) as exc:
                log.info("change detection: the C comparison could not be built (%s); numpy compares", exc)
                lib = None
        _loaded["lib"] = lib
        return lib


def stripe_equal() -> Any:
    """The compiled `onic_stripe_equal(want, nbytes, stripe, stripes, k) -> int` (one stripe, e.g.
    read back from a card into a host chunk), or None where it cannot be built (no C compiler)."""
    lib = _load()
    return None if lib is None else lib.onic_stripe_equal


def striped_equal(want: Any, stripes: list[Any]) -> bool | None:
    """Whether the contiguous uint8 array `want` holds exactly the bits of its beats dealt over the
    arrays `stripes` (beat j in stripes[j % S] at beat j // S; a partial last beat compares its
    bytes only); None where the C loop cannot be built."""
    lib = _load()
    if lib is None:
        return None
    ptrs = (ctypes.c_void_p * len(stripes))(*[s.ctypes.data for s in stripes])
    return bool(lib.onic_striped_equal(want.ctypes.data, want.size, ptrs, len(stripes)))


@contextlib.contextmanager
def numpy_only() -> Iterator[None]:
    """Within the block the compiled loops are off, as where no C compiler is found: `stripe_equal`
    and `striped_equal` return None and callers compare with numpy (what tests of that path use)."""
    with _lock:
        saved = dict(_loaded)
        _loaded["lib"] = None
    try:
        yield
    finally:
        with _lock:
            _loaded.clear()
            _loaded.update(saved)


__all__ = ["numpy_only", "stripe_equal", "striped_equal"]
