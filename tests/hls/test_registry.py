"""bitstreams/ registry: entries, sha256 checks, and the states a folder can be in."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hls import registry, xclbin
from hls.generate import render
from hls.spec import KernelSpec
from hls.targets import get_target
from optimusnic.cli import main

# An AXLF header listing one BITSTREAM section, so the registry's container checks pass. It is
# made up for these tests: the "bitstream" is 8 bytes of text and programs nothing.
FAKE_CONTAINER = (xclbin.XCLBIN_MAGIC + bytes(32 + 256 + 8 + 144) + struct.pack("<I4x", 1)
                  + struct.pack("<I16s4xQQ", xclbin.BITSTREAM, b"BITSTREAM", 496, 8) + b"not bits")


def _manifest(target: str = "u280", lanes: int = 8) -> dict:
    _, manifest = render(KernelSpec(target=target, lanes=lanes), get_target(target))
    return manifest


def _register(tmp_path: Path, data: bytes = FAKE_CONTAINER, target: str = "u280") -> dict:
    src = tmp_path / "in.xclbin"
    src.write_bytes(data)
    report = tmp_path / "impl_1_kernel_util_routed.rpt"
    report.write_text("report\n")
    summary = {"timing_met": True, "achieved_mhz": 300.0}
    return registry.register(src, _manifest(target), {"kernel": "hls", "platform": "p"}, summary,
                             root=tmp_path / "reg", extra_files=[report, tmp_path / "absent.rpt"])


def test_register_writes_manifest_with_spec_regmap_and_hash(tmp_path: Path) -> None:
    entry = _register(tmp_path)
    xclbin, manifest_path = registry.entry_paths("u280", "optimusnic_adamw", tmp_path / "reg")
    on_disk = json.loads(manifest_path.read_text())
    assert on_disk == entry
    assert entry["xclbin"] == {"file": "optimusnic_adamw.xclbin", "sha256": registry.sha256_file(xclbin),
                               "bytes": len(FAKE_CONTAINER), "axlf": True}
    manifest = _manifest()
    for key in ("spec", "sizing", "register_map", "banks", "target"):
        assert entry[key] == manifest[key]
    assert entry["reports"] == ["optimusnic_adamw.reports/impl_1_kernel_util_routed.rpt"]
    rows = registry.entries(tmp_path / "reg")
    assert [(r["target"], r["name"], r["status"]) for r in rows] == [("u280", "optimusnic_adamw", "ok")]
    assert rows[0]["spec"]["lanes"] == 8 and rows[0]["timing_met"] is True


def test_verify_states(tmp_path: Path) -> None:
    _register(tmp_path)
    root = tmp_path / "reg"
    xclbin, manifest_path = registry.entry_paths("u280", "optimusnic_adamw", root)
    xclbin.write_bytes(FAKE_CONTAINER + b"x")
    assert registry.entries(root)[0]["status"] == "modified"
    xclbin.unlink()
    assert registry.entries(root)[0]["status"] == "missing-xclbin"
    (root / "u50").mkdir()
    (root / "u50" / "orphan.xclbin").write_bytes(FAKE_CONTAINER)
    (root / "u50" / "broken.manifest.json").write_text("{not json")
    states = {(r["target"], r["name"]): r["status"] for r in registry.entries(root)}
    assert states == {("u280", "optimusnic_adamw"): "missing-xclbin", ("u50", "orphan"): "no-manifest",
                      ("u50", "broken"): "bad-manifest"}


def test_not_a_container_is_flagged(tmp_path: Path) -> None:
    _register(tmp_path, data=b"plain text, not an xclbin\n")
    assert registry.entries(tmp_path / "reg")[0]["status"] == "not-axlf"


def test_cli_list_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "reg"
    assert main(["bitstreams", "list", "--dir", str(root)]) == 0
    assert "no bitstreams" in capsys.readouterr().out
    _register(tmp_path)
    assert main(["bitstreams", "list", "--dir", str(root)]) == 0
    out = capsys.readouterr().out
    assert "u280" in out and "adamw 8L x1 fp32->fp32 memory" in out and "ok" in out
    assert main(["bitstreams", "verify", "--dir", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["all_ok"] is True
    registry.entry_paths("u280", "optimusnic_adamw", root)[0].write_bytes(b"xclbin2\0changed")
    assert main(["bitstreams", "verify", "--dir", str(root)]) == 1
    assert "modified" in capsys.readouterr().out


def test_register_replaces_old_reports(tmp_path: Path) -> None:
    _register(tmp_path)
    folder = tmp_path / "reg" / "u280" / "optimusnic_adamw.reports"
    (folder / "stale.rpt").write_text("from an earlier build\n")
    _register(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["impl_1_kernel_util_routed.rpt"]


# --- item 5: a metadata-only xclbin read back by PYNQ 3.0.1's parser -------------------------

@pytest.mark.parametrize("spec", [
    KernelSpec(target="u55c"),
    KernelSpec(target="u250", optimizer="adam", compute_units=2, grad_dtype="bf16"),
    KernelSpec(target="u280", grad_source="stream", compute_units=3, out_dtype="bf16"),
], ids=["u55c", "u250-adam-2cu", "u280-stream-3cu"])
def test_pynq_reads_manifest_regmap_and_banks_from_metadata_xclbin(spec: KernelSpec, tmp_path: Path) -> None:
    import dataclasses

    from pynq.pl_server.xclbin_parser import XclBin

    target = get_target(spec.target)
    _, manifest = render(spec, target)
    data = registry.metadata_xclbin(manifest, dataclasses.asdict(target.memory))
    parsed = XclBin(xclbin_data=bytearray(data))
    name = spec.name
    assert sorted(parsed.ip_dict) == [f"{name}_{cu + 1}" for cu in range(spec.compute_units)]
    banks = {b["cu"]: b["banks"] for b in manifest["banks"]}
    for cu in range(spec.compute_units):
        ip = parsed.ip_dict[f"{name}_{cu + 1}"]
        assert ip["hw_control_protocol"] == "ap_ctrl_hs"
        assert ip["addr_range"] == 1 << manifest["register_map"]["address_bits"]
        regs = {k: v for k, v in ip["registers"].items() if k != "CTRL"}
        args = manifest["register_map"]["args"]
        assert {a["name"]: a["offset"] for a in args if a["kind"] != "stream"} == \
            {k: v["address_offset"] for k, v in regs.items()}
        for a in args:
            if a["kind"] == "pointer":
                assert regs[a["name"]]["size"] == 64
                mems = regs[a["name"]].get("MBG", [regs[a["name"]]["memory"]])
                assert mems == registry.expand_banks(banks[cu][a["name"]]), a["name"]
            elif a["kind"] == "scalar":
                assert regs[a["name"]]["size"] == 32
        assert set(ip["streams"]) == {a["name"] for a in args if a["kind"] == "stream"}
    used = {t for b in banks.values() for e in b.values() if e for t in registry.expand_banks(e)}
    assert {tag for tag, m in parsed.mem_dict.items() if m["used"]} == used
    assert all(m["size"] == target.memory.channel_capacity_bytes for m in parsed.mem_dict.values())
    # Registered, the container is recognized as an xclbin without a bitstream.
    src = tmp_path / "meta.xclbin"
    src.write_bytes(data)
    registry.register(src, manifest, {"kernel": "metadata-only"}, {}, root=tmp_path / "reg")
    assert registry.entries(tmp_path / "reg")[0]["status"] == "no-bitstream"


def _driver_manifest_keys() -> set[str]:
    """Every top-level manifest key the driver reads (`manifest["k"]`, `manifest.get("k")`, any receiver)."""
    import re

    from hls.paths import REPO_ROOT

    keys: set[str] = set()
    for path in sorted((REPO_ROOT / "pynq_driver").rglob("*.py")):
        keys |= set(re.findall(r"manifest(?:\[|\.get\()\"([a-z_]+)\"", path.read_text()))
    return keys


def test_registry_manifest_carries_every_key_the_driver_reads(tmp_path: Path) -> None:
    """Issue 29: a manifest written by `optimusnic build` (registry.register) dropped memory_plan, so the card
    opened and the first ShardState died with KeyError. Every key the driver reads must be written."""
    read = _driver_manifest_keys()
    assert {"memory_plan", "register_map", "sizing", "spec", "banks", "xclbin"} <= read  # the scan sees them
    entry = _register(tmp_path)
    optional_in_driver = {"kernel"}  # read with .get() and a fallback (manifest["spec"]["name"])
    assert read - optional_in_driver <= set(entry), sorted(read - optional_in_driver - set(entry))
    on_disk = json.loads(Path(entry["paths"]["manifest"]).read_text())
    assert on_disk["memory_plan"] == _manifest()["memory_plan"]
    assert set(registry.MANIFEST_KEYS) & set(_manifest()) <= set(on_disk)
