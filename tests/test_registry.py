"""bitstreams/ registry: entries, sha256 checks, and the states a folder can be in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hls import registry
from hls.cli import main
from hls.generate import render
from hls.spec import KernelSpec
from hls.targets import get_target

# A file that starts with the AXLF magic, so the registry's container check passes. It is a
# made-up header for these tests, not a bitstream.
FAKE_CONTAINER = registry.XCLBIN_MAGIC + bytes(56) + b"fake container for registry tests"


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
