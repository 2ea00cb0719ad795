"""Pending parts of issue 14 in files being rewritten by their owners (see the closing note):

- the C harness (hls/include/optimusnic_csim_host.h, hls/csim.py) checks the buffer sizes and
  dtypes it receives against the spec it was compiled for, and refuses a mismatch instead of
  reading or writing past a buffer;
- the alveo backend (pynq_driver/alveo.py) bounds the xclbin before PYNQ's parser walks it and reads
  its registry manifest through the validation layer (regular file, size cap, schema).

Each test is xfail with the pending change as its reason; `run=False` where today's code would
hang for minutes. Remove the markers when the changes land.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import time
from pathlib import Path

import pytest

from hls import validate
from hls.generate import load_manifest, write_project
from hls.spec import KernelSpec

HARNESS = pytest.mark.xfail(
    reason="pending in hls/include/optimusnic_csim_host.h + hls/csim.py: export "
           "optimusnic_csim_layout(unsigned long long* grad_bytes, unsigned long long* out_bytes, "
           "unsigned int* lanes) and pass the byte length of each buffer to optimusnic_csim_run/_direct, "
           "which return -1 (EINVAL) without touching memory when n * element size exceeds one",
    strict=False,
)
# Landed: verify_xclbin bounds the section table before PYNQ, manifests go through safe_io + schema.
def ALVEO(test):  # noqa: N802 - kept as a marker name so the tests read as before
    return test


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    from hls.csim import compile_kernel

    project = tmp_path_factory.mktemp("harness") / "p"
    write_project(KernelSpec(lanes=4), project)
    return project, ctypes.CDLL(str(compile_kernel(project)))


@HARNESS
def test_harness_reports_the_layout_it_was_compiled_for(compiled) -> None:
    project, lib = compiled
    g, o, lanes = ctypes.c_ulonglong(), ctypes.c_ulonglong(), ctypes.c_uint()
    lib.optimusnic_csim_layout(ctypes.byref(g), ctypes.byref(o), ctypes.byref(lanes))
    spec = load_manifest(project)["spec"]
    assert (g.value, o.value, lanes.value) == (4, 4 if spec["out_dtype"] == "fp32" else 2, spec["lanes"])


_SHORT_BUFFER = """
import ctypes, sys
import numpy as np
lib = ctypes.CDLL(sys.argv[1])
n = 1000
grad, p, m, v = (np.zeros(n, np.float32) for _ in range(4))
out = np.zeros(n // 2, np.uint16)  # a bf16-sized output for an fp32 kernel: a quarter of what it writes
scalars = np.zeros(9, np.uint32)
ptr, u64 = ctypes.c_void_p, ctypes.c_ulonglong
run = lib.optimusnic_csim_run
run.restype = ctypes.c_long
rc = run(ptr(grad.ctypes.data), ptr(p.ctypes.data), ptr(m.ctypes.data), ptr(v.ctypes.data), ptr(out.ctypes.data),
         u64(n), ptr(scalars.ctypes.data), ctypes.c_int(1), u64(256), u64(4),
         u64(grad.nbytes), u64(p.nbytes), u64(m.nbytes), u64(v.nbytes), u64(out.nbytes))
print("refused" if rc < 0 and not out.any() else f"ran: rc={rc}")
"""


@HARNESS
def test_harness_refuses_buffers_shorter_than_n(compiled) -> None:
    """In a child process: today the harness writes 4n bytes into a 2n-byte buffer (heap corruption)."""
    import subprocess
    import sys

    _project, lib = compiled
    r = subprocess.run([sys.executable, "-c", _SHORT_BUFFER, lib._name], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "refused", (r.returncode, r.stdout, r.stderr[-300:])


def _huge_section_count(path: Path) -> None:
    head = bytearray(b"xclbin2\0" + bytes(1992))
    struct.pack_into("<Q", head, 304, 2000)
    struct.pack_into("<I", head, validate.AXLF_HEADER_SIZE - 8, 0xFFFFFFFF)
    path.write_bytes(bytes(head))


@ALVEO
def test_verify_xclbin_bounds_the_section_table(tmp_path: Path) -> None:
    from pynq_driver.alveo import verify_xclbin
    from pynq_driver.errors import BitstreamMismatch

    write_project(KernelSpec(lanes=4), tmp_path / "p")
    manifest = load_manifest(tmp_path / "p")
    xclbin = tmp_path / "k.xclbin"
    _huge_section_count(xclbin)
    import hashlib

    manifest["xclbin"] = {"sha256": hashlib.sha256(xclbin.read_bytes()).hexdigest()}
    t0 = time.monotonic()
    with pytest.raises(BitstreamMismatch, match="m_numSections"):
        verify_xclbin(xclbin, manifest)
    assert time.monotonic() - t0 < 5


@ALVEO
def test_bitstream_manifest_fifo_is_refused(tmp_path: Path) -> None:
    from hls.errors import UserError
    from pynq_driver.alveo import load_bitstream_manifest

    xclbin = tmp_path / "k.xclbin"
    xclbin.write_bytes(b"xclbin2\0")
    os.mkfifo(tmp_path / "k.manifest.json")
    with pytest.raises(UserError, match="FIFO"):
        load_bitstream_manifest(xclbin)
    (tmp_path / "k.manifest.json").unlink()
    (tmp_path / "k.manifest.json").write_text(json.dumps({"spec": [], "xclbin": {}}))
    with pytest.raises(UserError, match=r"k\.manifest\.json: .*(missing field|spec)"):  # the schema, naming the file
        load_bitstream_manifest(xclbin)
