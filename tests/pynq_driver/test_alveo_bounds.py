"""The alveo backend reads nothing unbounded: the xclbin's section table is
bounded by the file size before PYNQ's parser walks it (a header claiming 0xFFFFFFFF sections kept
PYNQ busy about 22 minutes), and a registry manifest is read as a regular file with a size cap and
checked against its schema (a FIFO used to block forever).

The C harness's own checks (buffer lengths and layout checked in C before any memory is touched)
are tested in tests/hls/csim/test_csim.py through its ABI.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from pathlib import Path

import pytest

from hls import xclbin
from hls.generate import write_project
from hls.manifest import load_manifest
from hls.spec import KernelSpec


def _huge_section_count(path: Path) -> None:
    head = bytearray(b"xclbin2\0" + bytes(1992))
    struct.pack_into("<Q", head, 304, 2000)
    struct.pack_into("<I", head, xclbin.AXLF_HEADER_SIZE - 8, 0xFFFFFFFF)
    path.write_bytes(bytes(head))


def test_verify_xclbin_bounds_the_section_table(tmp_path: Path) -> None:
    from pynq_driver.backends.xclbin_checks import verify_xclbin
    from pynq_driver.errors import BitstreamMismatch

    write_project(KernelSpec(lanes=4), tmp_path / "p")
    manifest = load_manifest(tmp_path / "p")
    xclbin = tmp_path / "k.xclbin"
    _huge_section_count(xclbin)
    manifest["xclbin"] = {"sha256": hashlib.sha256(xclbin.read_bytes()).hexdigest()}
    t0 = time.monotonic()
    with pytest.raises(BitstreamMismatch, match="m_numSections"):
        verify_xclbin(xclbin, manifest)
    assert time.monotonic() - t0 < 5


def test_bitstream_manifest_fifo_is_refused(tmp_path: Path) -> None:
    from hls.errors import UserError
    from pynq_driver.backends.xclbin_checks import load_bitstream_manifest

    xclbin = tmp_path / "k.xclbin"
    xclbin.write_bytes(b"xclbin2\0")
    os.mkfifo(tmp_path / "k.manifest.json")
    with pytest.raises(UserError, match="FIFO"):
        load_bitstream_manifest(xclbin)
    (tmp_path / "k.manifest.json").unlink()
    (tmp_path / "k.manifest.json").write_text(json.dumps({"spec": [], "xclbin": {}}))
    with pytest.raises(UserError, match=r"k\.manifest\.json: .*(missing field|spec)"):  # the schema, naming the file
        load_bitstream_manifest(xclbin)
