"""The `alveo` backend without a card: PYNQ 3.0.1 really imported, its own xclbin parser reading
xclbins made from our manifests, the bitstream checks, and the missing-XRT path for real."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from hls import registry
from hls.errors import ToolMissing
from hls.spec import KernelSpec
from hls.targets import get_target
from pynq_driver import BitstreamMismatch, open_device
from pynq_driver.alveo import _missing_runtime, verify_xclbin
from pynq_driver.backends import rendered_manifest


def make_bitstream(folder: Path, spec: KernelSpec, *, xclbin_spec: KernelSpec | None = None) -> Path:
    """bitstreams/<target>/<name>.xclbin + manifest as the registry writes them; the xclbin is a
    metadata-only container (EMBEDDED_METADATA, MEM_TOPOLOGY, IP_LAYOUT, CONNECTIVITY)."""
    manifest = rendered_manifest(spec)
    inner = rendered_manifest(xclbin_spec or spec)
    memory = asdict(get_target(spec.target).memory)
    data = registry.metadata_xclbin(inner, memory)
    xclbin = folder / f"{spec.name}.xclbin"
    xclbin.write_bytes(data)
    manifest["xclbin"] = {"file": xclbin.name, "sha256": registry.sha256_file(xclbin)}
    (folder / f"{spec.name}.manifest.json").write_text(json.dumps(manifest))
    return xclbin


def test_pynq_is_the_real_package() -> None:
    import pynq
    from pynq.pl_server.xclbin_parser import XclBin

    assert pynq.__version__ == "3.0.1" and XclBin.__module__ == "pynq.pl_server.xclbin_parser"


def test_matching_xclbin_passes_pynq_parser_checks(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    manifest = json.loads((tmp_path / f"{spec.name}.manifest.json").read_text())
    ip = verify_xclbin(xclbin, manifest)
    assert ip["cu_name"].startswith(f"{spec.name}:")
    assert ip["registers"]["p"]["address_offset"] == 0x1C and ip["registers"]["p"]["memory"].startswith("HBM[")


def test_xclbin_with_other_sha256_is_rejected(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    xclbin.write_bytes(xclbin.read_bytes() + b"\0")
    with pytest.raises(BitstreamMismatch, match="sha256"):
        open_device("alveo", spec, xclbin=xclbin)


def test_xclbin_with_other_register_map_is_rejected(tmp_path: Path) -> None:
    # The manifest describes AdamW; the xclbin holds an Adam kernel of the same name (l2, not decay).
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec, xclbin_spec=KernelSpec(optimizer="adam"))
    with pytest.raises(BitstreamMismatch, match="decay: missing"):
        open_device("alveo", spec, xclbin=xclbin)


def test_xclbin_with_other_kernel_name_is_rejected(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec, xclbin_spec=KernelSpec(name="other_kernel"))
    with pytest.raises(BitstreamMismatch, match="no kernel named 'optimusnic_adamw'"):
        open_device("alveo", spec, xclbin=xclbin)


@pytest.mark.skipif(not _missing_runtime(), reason="XRT and a card are present")
def test_no_xrt_names_what_is_missing(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with pytest.raises(ToolMissing, match=r"alveo backend: missing XRT .*csim"):
        open_device("alveo", spec, xclbin=xclbin)
    # Without an xclbin too, the one message lists both.
    with pytest.raises(ToolMissing, match=r"missing the xclbin .*; XRT"):
        open_device("alveo", spec.with_(name="never_built_kernel"))
