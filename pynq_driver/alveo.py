"""The `alveo` backend: a card through PYNQ 3.0.1 (XRT 2.13-2.16). Thin on purpose.

`pynq.Overlay(xclbin)` programs the card, `pynq.allocate(..., target=<bank>)` makes buffers in
the banks the manifest names, `ip.write/read` are the register accesses of the shared kernel
layer. Before anything touches the card, `verify_xclbin` checks the bitstream is the one its
manifest describes: sha256, kernel name, and the register offsets and banks as PYNQ's own
parser (`pynq.pl_server.xclbin_parser.XclBin`) reads them from the xclbin.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from hls.errors import ToolMissing, UserError
from hls.paths import BITSTREAMS_DIR
from hls.spec import KernelSpec
from pynq_driver.device import Buffer, Device
from pynq_driver.errors import BitstreamMismatch

MANIFEST_SUFFIX = ".manifest.json"


def manifest_for(xclbin: Path) -> Path:
    """bitstreams/<target>/<name>.xclbin -> <name>.manifest.json next to it (the registry's layout)."""
    return xclbin.with_name(xclbin.name[: -len(".xclbin")] + MANIFEST_SUFFIX if xclbin.name.endswith(".xclbin")
                            else xclbin.name + MANIFEST_SUFFIX)


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _expand(expr: str) -> list[str]:
    import re

    m = re.fullmatch(r"(\w+)\[(\d+)(?::(\d+))?\]", expr or "")
    if not m:
        return [expr]
    lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
    return [f"{m.group(1)}[{i}]" for i in range(lo, hi + 1)]


def load_bitstream_manifest(xclbin: Path) -> dict[str, Any]:
    path = manifest_for(xclbin)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UserError(f"{path}: no manifest next to {xclbin.name}; register the build (optimusnic build)") from exc
    except ValueError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from exc


def verify_xclbin(xclbin: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Raise BitstreamMismatch unless `xclbin` is the one `manifest` describes; returns PYNQ's ip entry."""
    from pynq.pl_server.xclbin_parser import XclBin

    xclbin = Path(xclbin)
    want_sha = (manifest.get("xclbin") or {}).get("sha256") or manifest.get("xclbin_sha256")
    if not want_sha:
        raise BitstreamMismatch(f"{manifest_for(xclbin)}: records no xclbin sha256; rebuild and register")
    got_sha = _sha256(xclbin)
    if got_sha != want_sha:
        raise BitstreamMismatch(f"{xclbin}: sha256 {got_sha[:16]}... but its manifest records {want_sha[:16]}...: "
                                "this is not the bitstream the manifest describes (rebuild or re-register it)")
    name = manifest.get("kernel") or manifest["spec"]["name"]
    try:
        parsed = XclBin(str(xclbin))
    except Exception as exc:  # PYNQ raises KeyError/ValueError on containers it cannot read
        raise BitstreamMismatch(f"{xclbin}: PYNQ cannot parse it as an xclbin ({type(exc).__name__}: {exc})") from exc
    ips = [ip for ip in parsed.ip_dict.values() if str(ip.get("cu_name", "")).split(":")[0] == name]
    if not ips:
        found = sorted({str(ip.get("cu_name", "")).split(":")[0] for ip in parsed.ip_dict.values()})
        raise BitstreamMismatch(f"{xclbin}: no kernel named {name!r} (it has: {', '.join(found) or 'none'})")
    ip = ips[0]
    problems = []
    for arg in manifest["register_map"]["args"]:
        if arg["kind"] == "stream":
            continue
        reg = ip["registers"].get(arg["name"])
        if reg is None:
            problems.append(f"{arg['name']}: missing")
        elif int(reg["address_offset"]) != int(arg["offset"]):
            problems.append(f"{arg['name']}: offset {int(reg['address_offset']):#x} in the xclbin, "
                            f"{int(arg['offset']):#x} in the manifest")
        elif arg["kind"] == "pointer" and "memory" in reg:
            banks = {b["cu"]: b["banks"] for b in manifest.get("banks", [])}.get(0, {})
            expr = banks.get(arg["name"])
            if expr and reg["memory"] not in _expand(expr) and reg["memory"] != expr:
                problems.append(f"{arg['name']}: connected to {reg['memory']}, the manifest says {expr}")
    if problems:
        raise BitstreamMismatch(f"{xclbin}: register map of kernel {name!r} differs from its manifest: "
                                + "; ".join(problems))
    return ip


def _missing_runtime() -> list[str]:
    """What stands between this host and a card: XRT, then a card XRT can see."""
    try:
        import pynq  # noqa: F401 - importing may warn when XRT is absent
        from pynq._3rdparty import xrt
    except ImportError:
        return ["PYNQ 3.0.1 (pip install pynq==3.0.1, or make deps)"]
    if not xrt.XRT_SUPPORTED:
        where = os.environ.get("XILINX_XRT")
        return [f"XRT ({'XILINX_XRT=' + where + ' has no usable libxrt_core.so' if where else 'XILINX_XRT is not set'};"
                " install XRT 2.13-2.16 and `source /opt/xilinx/xrt/setup.sh`)"]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not pynq.Device.devices:
            return ["an Alveo card (XRT sees none; check `xbutil examine`)"]
    return []


class AlveoDevice(Device):
    backend = "alveo"

    @classmethod
    def open(cls, spec: KernelSpec, *, xclbin: str | Path | None, project_dir: str | Path | None = None,
             timeout_s: float = 10.0, device_index: int = 0) -> AlveoDevice:
        missing: list[str] = []
        if xclbin is None:
            guess = BITSTREAMS_DIR / spec.target / f"{spec.name}.xclbin"
            if guess.is_file():
                xclbin = guess
            else:
                missing.append(f"the xclbin (none at {guess}; build one with `optimusnic build` or pass xclbin=)")
        if xclbin is not None:
            xclbin = Path(xclbin)
            if not xclbin.is_file():
                raise UserError(f"{xclbin}: no such xclbin")
            manifest = load_bitstream_manifest(xclbin)
            if manifest.get("spec") != spec.to_dict():
                raise BitstreamMismatch(f"{xclbin}: built for spec {manifest.get('spec')}, not {spec.to_dict()}")
            ip_entry = verify_xclbin(xclbin, manifest)  # before any card is touched
        missing += _missing_runtime()
        if missing:
            raise ToolMissing("alveo backend: missing " + "; ".join(missing)
                              + ". Without a card, use backend='csim' or 'rtlsim'.")
        return cls(manifest, xclbin, ip_entry, timeout_s=timeout_s, device_index=device_index)

    def __init__(self, manifest: dict[str, Any], xclbin: Path, ip_entry: dict[str, Any], *, timeout_s: float,
                 device_index: int = 0) -> None:
        super().__init__(manifest, timeout_s=timeout_s)
        import pynq

        self._pynq = pynq
        self.overlay = pynq.Overlay(str(xclbin), device=pynq.Device.devices[device_index])
        # CU instances are <kernel>_1 .. <kernel>_N (link.cfg nk=), each with its own registers.
        first = str(ip_entry["cu_name"]).split(":")[1]
        stem = first.rsplit("_", 1)[0]
        self.ips = [getattr(self.overlay, first if c == 0 else f"{stem}_{c + 1}") for c in range(self.cus)]
        self.ip = self.ips[0]
        self._verified = True

    def _memory(self, bank: str) -> Any:
        # A group connection (HBM[0:9]) may appear under its own tag; else its first channel serves.
        mem_dict = self.overlay.mem_dict
        for tag in (bank, *_expand(bank)):
            if tag in mem_dict:
                return self.overlay.device.get_memory(mem_dict[tag])
        raise UserError(f"bank {bank}: not in the xclbin's memory topology ({', '.join(mem_dict)})")

    def _allocate(self, nbytes: int, bank: str) -> Buffer:
        pbuf = self._pynq.allocate((nbytes,), np.uint8, target=self._memory(bank))
        return Buffer(int(pbuf.device_address), nbytes, bank, handle=pbuf)

    def _free(self, buf: Buffer) -> None:
        buf.handle.freebuffer()

    def _write(self, buf: Buffer, data: np.ndarray, offset: int) -> None:
        view = buf.handle[offset : offset + data.nbytes]
        view[:] = data
        view.sync_to_device()

    def _read(self, buf: Buffer, out: np.ndarray, offset: int) -> None:
        view = buf.handle[offset : offset + out.nbytes]
        view.sync_from_device()
        out[...] = view

    def _write_reg(self, offset: int, value: int, cu: int = 0) -> None:
        self.ips[cu].write(offset, value)

    def _read_reg(self, offset: int, cu: int = 0) -> int:
        return int(self.ips[cu].read(offset))

    def _close(self) -> None:
        self.overlay.free()
