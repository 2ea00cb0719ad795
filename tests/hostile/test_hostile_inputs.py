"""Hostile and careless inputs: each class of defect, pinned by a directed test.

Code injection through targets files, edited projects, path escape through manifests, kernel
names that cannot compile, unbounded reads (FIFOs, /dev/zero, crafted zips and xclbins), and
CLI errors that must be one line with exit status 2. Everything here runs in-process and fast.
"""

from __future__ import annotations

import io
import json
import os
import struct
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from projects import copy_project

from hls import registry, safe_io, validate, xclbin
from hls.errors import UserError
from hls.golden import Hyper
from hls.manifest import load_manifest
from hls.spec import KernelSpec, SpecError
from hls.targets import CatalogError, load_catalog
from optimusnic.cli import main
from pynq_driver import ShardState, open_device
from pynq_driver.errors import StateFileError

pytestmark = pytest.mark.usefixtures("in_tmp")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line_error(rc: int, err: str, needle: str = "") -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert needle.lower() in err.lower(), err





def edit_manifest(pdir: Path, change) -> None:  # noqa: ANN001 - a function editing the dict
    path = pdir / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# --- code injection through a targets file -------------------------------------------------------

INJECTIONS = {
    "name": {"name": "U55C\n$(touch {pwn})"},
    "name_tcl": {"name": "x [exec touch {pwn}]"},
    "name_comment_end": {"name": "x */ int pwn; /*"},
    "name_backslash": {"name": "x \\"},
    "part": {"part": "xcu55c; exec touch {pwn}"},
    "part_space": {"part": "xcu55c-fsvh2892 -2L-e"},
    "platform": {"platform": "p $(touch {pwn})"},
    "flow_note": {"flow_note": "line one\nsp=evil"},
    "bank_prefix": {"memory": {"bank_prefix": "HBM];exec"}},
    "memory_kind": {"memory": {"kind": "HBM2\n"}},
}


@pytest.mark.parametrize("case", sorted(INJECTIONS))
def test_targets_file_strings_cannot_reach_generated_files(case: str, tmp_path: Path, capsys) -> None:
    pwn = tmp_path / "PWNED"
    fields = json.loads(json.dumps(INJECTIONS[case]).replace("{pwn}", str(pwn)))
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"targets": {"u55c": fields}}))
    rc, _, err = cli(capsys, "generate", "--target", "u55c", "--targets-file", f, "-o", tmp_path / "out")
    one_line_error(rc, err, "t.json: targets.u55c.")
    assert not (tmp_path / "out").exists() and not pwn.exists()


@pytest.mark.parametrize("field,value", [("name", "x\n#include </etc/passwd>"), ("part", "xcu55c; exec id"),
                                         ("platform", "p $(id)"), ("flow_note", "a\nb"), ("kernel_clock_mhz", 1e9)])
def test_a_target_built_in_python_is_checked_too(field: str, value: object) -> None:
    import dataclasses

    from hls.generate import render

    target = dataclasses.replace(load_catalog()["u55c"], **{field: value})
    with pytest.raises(validate.Invalid, match=field):
        render(KernelSpec(lanes=4), target)


@pytest.mark.parametrize("key", ["../x", "a b", "x;y", "int", "", "u55c\n", "x" * 65])
def test_target_keys_must_be_identifiers(key: str, tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    entry = {k: v for k, v in load_catalog()["u55c"].raw.items()}
    f.write_text(json.dumps({"targets": {key: entry}}))
    with pytest.raises(CatalogError):
        load_catalog([str(f)])


@pytest.mark.parametrize("text,needle", [
    ("[1, 2]", "(top level): must be a table"),
    ('{"targets": {"u55c": {"kernel_clock_mhz": 1e400}}}', "not a finite number"),
    ('{"targets": {"u55c": {"kernel_clock_mhz": NaN}}}', "not valid JSON"),
    ('{"targets": {"u55c": {"memory": {"channels": "8"}}}}', "memory.channels"),
    ('{"targets": {"u55c": {"memory": {"channels": 1e300}}}}', "memory.channels"),
    ('{"targets": {"u55c": {"network": []}}}', "network: must be a table"),
    ('{"targets": {"u55c": {"colour": "red"}}}', "colour: unknown field"),
    ('{"targets": {"u55c": "x"}}', "must be a table"),
    ('{"targets": {}}', "0 entries"),
    ('{"targets": {"u55c": {}}, "extra": 1}', "extra: unknown field"),
    ('{"targets": {"u55c": {"memory": {"bank_slr": [0, 1]}}}}', "bank_slr"),
    ('{"targets": {"u55c": {"kernel_clock_mhz": -300}}}', "kernel_clock_mhz"),
    ('{"targets": {"u55c": {"slrs": true}}}', "slrs"),
    ("\xff\xfe", "not UTF-8"),
    ("{" * 100_000, "not valid JSON"),
])
def test_malformed_targets_files_one_line(text: str, needle: str, tmp_path: Path, capsys) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    rc, out, err = cli(capsys, "size", "--target", "u55c", "--params", "1e9", "--targets-file", f, "--json")
    one_line_error(rc, err, needle)
    assert out == ""


def test_targets_file_that_is_not_a_regular_file(tmp_path: Path, capsys) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (safe_io.TARGETS_FILE_MAX + 1))
    link = tmp_path / "link.json"
    link.symlink_to(fifo)
    for path, needle in ((fifo, "FIFO"), (link, "FIFO"), (Path("/dev/zero"), "character device"),
                         (tmp_path, "folder"), (big, "more than")):
        t0 = time.monotonic()
        rc, _, err = cli(capsys, "targets", "--targets-file", path)
        one_line_error(rc, err, needle)
        assert time.monotonic() - t0 < 5


def test_edited_targets_file_is_read_again(tmp_path: Path) -> None:
    f = tmp_path / "t.toml"
    f.write_text("[targets.u55c]\nkernel_clock_mhz = 250\n")
    assert load_catalog([str(f)])["u55c"].kernel_clock_mhz == 250
    f.write_text("[targets.u55c]\nkernel_clock_mhz = 280.5\n")
    assert load_catalog([str(f)])["u55c"].kernel_clock_mhz == 280.5


# --- kernel names that pass the identifier rule but cannot compile ------------------------------

@pytest.mark.parametrize("name", ["std", "hls", "memcpy", "size_t", "uint64_t", "ap_uint", "LANES", "f32_beat",
                                  "printf", "NULL", "EOF", "INFINITY", "assert", "ap_axiu", "half", "compute",
                                  "optimusnic_csim_run", "fp32_add", "onic_fifo", "logic", "always_ff", "main"])
def test_kernel_names_that_collide_are_refused(name: str) -> None:
    with pytest.raises(SpecError, match="name"):
        KernelSpec(name=name)


@pytest.mark.parametrize("name", ["optimusnic_adamw", "optimusnic_adam", "my_kernel", "adamw_u55c_16l", "K"])
def test_ordinary_kernel_names_are_accepted(name: str) -> None:
    assert KernelSpec(name=name).name == name


@pytest.mark.slow
def test_reserved_name_list_is_current() -> None:
    """The saved list equals what g++ finds now (templates or headers changed: python -m hls.tools.reserved_probe)."""
    from hls.reserved import NAMES_FILE
    from hls.tools.reserved_probe import probe

    saved = {ln for ln in NAMES_FILE.read_text().splitlines() if ln and not ln.startswith("#")}
    assert probe() <= saved


# --- edited projects ---------------------------------------------------------------------------

def test_edited_spec_in_manifest_is_refused_before_compiling(project: Path, tmp_path: Path, capsys) -> None:
    pdir = copy_project(project, tmp_path)
    edit_manifest(pdir, lambda m: m["spec"].update(out_dtype="bf16"))
    t0 = time.monotonic()
    rc, _, err = cli(capsys, "csim", pdir, "--elements", "100")
    one_line_error(rc, err, "does not give the recorded files")
    assert time.monotonic() - t0 < 5  # refused before g++ ran
    with pytest.raises(UserError, match="does not give the recorded files"):
        open_device("csim", project_dir=pdir)
    with pytest.raises(UserError, match="does not give the recorded files"):
        open_device("golden", project_dir=pdir)


@pytest.mark.parametrize("change,needle", [
    (lambda m: m["register_map"]["args"][0].update(offset=20), "register_map"),
    (lambda m: m["sizing"].update(lanes=8), "sizing"),
    (lambda m: m["banks"][0]["banks"].update(grad0="HBM[31]"), "banks"),
    (lambda m: m["memory_plan"][0]["stripes"][0].update(channel=9), "memory_plan"),
    (lambda m: m["target"].update(name="Other card"), "target"),
    (lambda m: m["target_facts"]["definition"].update(kernel_clock_mhz=250), "does not give the recorded files"),
    (lambda m: m["files"].update({"hls/extra.cpp": "0" * 64}), "extra.cpp: missing"),
    (lambda m: m["files"].update({"../escape.cpp": "0" * 64}), "files.../escape.cpp"),
    (lambda m: m["files"].update({"/etc/passwd": "0" * 64}), "files./etc/passwd"),
    (lambda m: m["target"].update(key="../escaped"), "target.key"),
    (lambda m: m["spec"].update(lanes=3), "power of two"),
    (lambda m: m["spec"].update(name="std"), "spec.name"),
    (lambda m: m["spec"].update(unknown=1), "spec.unknown: unknown field"),
    (lambda m: m.update(spec=[]), "spec: must be a table"),
    (lambda m: m.clear(), "missing field"),
])
def test_inconsistent_manifest_is_refused(change, needle: str, project: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    pdir = copy_project(project, tmp_path)
    edit_manifest(pdir, change)
    rc, _, err = cli(capsys, "csim", pdir, "--elements", "100")
    one_line_error(rc, err, needle)


def test_edited_generated_file_names_the_file(project: Path, tmp_path: Path, capsys) -> None:
    pdir = copy_project(project, tmp_path)
    src = pdir / "hls" / "optimusnic_adamw.cpp"
    src.write_text(src.read_text().replace("p = p - u;", "p = p + u;"))
    rc, _, err = cli(capsys, "csim", pdir)
    one_line_error(rc, err, "optimusnic_adamw.cpp: differs from the sha256")
    src.unlink()
    src.symlink_to("/dev/zero")
    rc, _, err = cli(capsys, "csim", pdir)
    one_line_error(rc, err, "leads outside")
    src.unlink()
    os.mkfifo(src)
    rc, _, err = cli(capsys, "csim", pdir)
    one_line_error(rc, err, "FIFO")


@pytest.mark.parametrize("content", [b"[]", b"", b"{", b"null", b'"x"', b"\xff", b"1e999"])
def test_manifest_that_is_not_an_object(content: bytes, project: Path, tmp_path: Path, capsys) -> None:
    pdir = copy_project(project, tmp_path)
    (pdir / "manifest.json").write_bytes(content)
    rc, _, err = cli(capsys, "csim", pdir)
    one_line_error(rc, err, "manifest")


def test_manifest_fifo_or_missing_project(project: Path, tmp_path: Path, capsys) -> None:
    pdir = copy_project(project, tmp_path)
    (pdir / "manifest.json").unlink()
    os.mkfifo(pdir / "manifest.json")
    rc, _, err = cli(capsys, "csim", pdir)
    one_line_error(rc, err, "FIFO")
    rc, _, err = cli(capsys, "csim", tmp_path / "nope")
    one_line_error(rc, err, "no such directory")
    rc, _, err = cli(capsys, "csim", pdir / "hls" / "Makefile")
    one_line_error(rc, err, "")


def test_old_manifest_without_target_facts_checks_against_catalog(project: Path, tmp_path: Path) -> None:
    pdir = copy_project(project, tmp_path)
    edit_manifest(pdir, lambda m: m.pop("target_facts"))
    assert load_manifest(pdir)["spec"]["lanes"] == 4


# --- path escape through the registry ---------------------------------------------------------

def test_registry_paths_stay_inside(tmp_path: Path) -> None:
    for target, name in (("../escaped", "k"), ("u55c", "../k"), ("/abs", "k"), ("u55c", "k/../../x"), ("", "k")):
        with pytest.raises(UserError):
            registry.entry_paths(target, name, tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "reg").mkdir()
    (tmp_path / "reg" / "u55c").symlink_to(tmp_path / "out")
    with pytest.raises(UserError, match="leads outside"):
        registry.entry_paths("u55c", "k", tmp_path / "reg")


def test_register_refuses_escaping_manifest(project: Path, tmp_path: Path) -> None:
    manifest = load_manifest(project)
    xclbin = tmp_path / "k.xclbin"
    xclbin.write_bytes(b"xclbin2\0" + bytes(600))
    (tmp_path / "escaped" / "optimusnic_adamw.reports").mkdir(parents=True)
    bad = json.loads(json.dumps(manifest))
    bad["target"]["key"] = "../escaped"
    with pytest.raises(UserError):
        registry.register(xclbin, bad, {}, {}, root=tmp_path / "regX")
    assert (tmp_path / "escaped" / "optimusnic_adamw.reports").is_dir()
    assert not (tmp_path / "escaped" / "optimusnic_adamw.xclbin").exists()


def _axlf(sections: int, size: int = 2000) -> bytes:
    head = bytearray(b"xclbin2\0" + bytes(size - 8))
    struct.pack_into("<Q", head, 8 + 32 + 256 + 8, size)
    struct.pack_into("<I", head, xclbin.AXLF_HEADER_SIZE - 8, sections)
    return bytes(head)


def _registered(tmp_path: Path, data: bytes, project: Path) -> Path:
    root = tmp_path / "reg"
    xclbin = tmp_path / "k.xclbin"
    xclbin.write_bytes(data)
    registry.register(xclbin, load_manifest(project), {}, {}, root=root)
    return root


def test_xclbin_with_huge_section_count_is_refused_fast(project: Path, tmp_path: Path, capsys) -> None:
    root = _registered(tmp_path, _axlf(0xFFFFFFFF), project)
    t0 = time.monotonic()
    rc, out, _ = cli(capsys, "bitstreams", "verify", "--dir", root)
    assert rc == 1 and "bad-xclbin" in out and "m_numSections" in out
    assert time.monotonic() - t0 < 5
    with pytest.raises(validate.Invalid, match="runs past the end"):
        head = bytearray(_axlf(1))
        xclbin.AXLF_SECTION_HEADER.pack_into(head, xclbin.AXLF_HEADER_SIZE, 0, b"BIT", 1900, 500)
        xclbin.xclbin_sections(bytes(head), len(head), "x.xclbin")


def test_registry_manifest_fifo_and_garbage(project: Path, tmp_path: Path, capsys) -> None:
    root = _registered(tmp_path, _axlf(0), project)
    mpath = next(root.glob("*/*.manifest.json"))
    data = json.loads(mpath.read_text())
    for bad, needle in ((dict(data, xclbin={"file": "../../x.xclbin", "sha256": "0" * 64, "bytes": 1, "axlf": True}),
                         "xclbin.file"),
                        (dict(data, summary={"timing_met": float("inf")}), "summary"),
                        (dict(data, register_map=dict(data["register_map"], address_bits=13)), "register_map")):
        mpath.write_text(json.dumps(bad).replace("Infinity", "1e999"))
        rows = registry.entries(root)
        assert rows[0]["status"] == "bad-manifest" and needle in rows[0]["detail"], rows[0]
    mpath.unlink()
    os.mkfifo(mpath)
    t0 = time.monotonic()
    rows = registry.entries(root)
    assert rows[0]["status"] == "bad-manifest" and "FIFO" in rows[0]["detail"]
    assert time.monotonic() - t0 < 5


def test_bitstreams_verify_missing_folder_fails(tmp_path: Path, capsys) -> None:
    rc, _, err = cli(capsys, "bitstreams", "verify", "--dir", tmp_path / "missing")
    one_line_error(rc, err, "no such folder")


# --- checkpoints -------------------------------------------------------------------------------

@pytest.fixture
def shard():
    rng = np.random.default_rng(3)
    with open_device("golden", KernelSpec(), timeout_s=0.5) as dev:
        with ShardState(dev, rng.standard_normal(1000).astype(np.float32)) as s:
            s.step(rng.standard_normal(1000).astype(np.float32), Hyper(step=1))
            yield s


def _npz(members: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compress) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _header(members: dict[str, bytes]) -> dict:
    return json.loads(np.load(io.BytesIO(members["header.npy"])).tobytes())


def _with_header(members: dict[str, bytes], header: object) -> dict[str, bytes]:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return {**members, "header.npy": _npy(np.frombuffer(raw, np.uint8))}


HEADER_EDITS = {
    "n_string": lambda h: h.update(n="1000"),
    "n_huge": lambda h: h.update(n=10**30),
    "n_float_inf": lambda h: h.update(n=1e999),
    "step_negative": lambda h: h.update(step=-1),
    "step_huge": lambda h: h.update(step=10**40),
    "spec_list": lambda h: h.update(spec=[]),
    "spec_bad_field": lambda h: h["spec"].update(lanes="16"),
    "sha_missing": lambda h: h["sha256"].pop("params"),
    "sha_not_hex": lambda h: h["sha256"].update(params="zz"),
    "format": lambda h: h.update(format="other"),
    "version": lambda h: h.update(version=2),
    "unknown": lambda h: h.update(extra=1),
    "consistent_str": lambda h: h.update(consistent="yes"),
    "n_mismatch": lambda h: h.update(n=999),
}


@pytest.mark.parametrize("case", sorted(HEADER_EDITS))
def test_malformed_checkpoint_header_is_state_file_error(case: str, shard: ShardState, tmp_path: Path) -> None:
    members = _members(shard.save(tmp_path / "s.npz"))
    header = _header(members)
    HEADER_EDITS[case](header)
    (tmp_path / "bad.npz").write_bytes(_npz(_with_header(members, header)))
    with pytest.raises(StateFileError):
        ShardState.load(tmp_path / "bad.npz", shard.dev)


@pytest.mark.parametrize("raw", [b"[]", b"null", b"{", b"\xff\xfe", b'{"n": NaN}', b"1" * 70_000])
def test_checkpoint_header_not_an_object(raw: bytes, shard: ShardState, tmp_path: Path) -> None:
    members = _members(shard.save(tmp_path / "s.npz"))
    (tmp_path / "bad.npz").write_bytes(_npz(_with_header(members, raw)))
    with pytest.raises(StateFileError):
        ShardState.load(tmp_path / "bad.npz", shard.dev)


def test_checkpoint_members_checked_before_reading(shard: ShardState, tmp_path: Path) -> None:
    members = _members(shard.save(tmp_path / "s.npz"))
    cases = {
        "wrong_dtype": {**members, "params.npy": _npy(np.zeros(1000, np.float64))},
        "wrong_shape": {**members, "exp_avg.npy": _npy(np.zeros((10, 100), np.float32))},
        "wrong_len": {**members, "exp_avg_sq.npy": _npy(np.zeros(999, np.float32))},
        "object": {**members, "params.npy": _npy(np.array([None] * 1000, dtype=object))},
        "extra_member": {**members, "evil.npy": _npy(np.zeros(1, np.float32))},
        "missing_member": {k: v for k, v in members.items() if k != "exp_avg.npy"},
        "declares_more": {**members, "params.npy": _npy(np.zeros(1000, np.float32))[:-400]},
    }
    for name, m in cases.items():
        (tmp_path / f"{name}.npz").write_bytes(_npz(m))
        with pytest.raises(StateFileError):
            ShardState.load(tmp_path / f"{name}.npz", shard.dev)


def test_compressed_bomb_is_refused_before_decompressing(shard: ShardState, tmp_path: Path) -> None:
    members = _members(shard.save(tmp_path / "s.npz"))
    n = 1 << 25  # 128 MB per array once decompressed, ~0.4 MB on disk
    header = _header(members) | {"n": n}
    npy_head = _npy(np.zeros(0, np.float32)).replace(b"(0,)", f"({n},)".encode())[:128]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.npy", _npy(np.frombuffer(json.dumps(header).encode(), np.uint8)))
        for k in ("params", "exp_avg", "exp_avg_sq"):
            with z.open(f"{k}.npy", "w", force_zip64=True) as w:
                w.write(npy_head)
                block = bytes(1 << 20)
                for _ in range(4 * n >> 20):
                    w.write(block)
    (tmp_path / "bomb.npz").write_bytes(buf.getvalue())
    assert (tmp_path / "bomb.npz").stat().st_size < 8 << 20
    t0 = time.monotonic()
    with pytest.raises(StateFileError, match="compressed"):
        ShardState.load(tmp_path / "bomb.npz", shard.dev)
    assert time.monotonic() - t0 < 2


def test_checkpoint_that_is_not_a_regular_file(shard: ShardState, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    for path, needle in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "folder")):
        t0 = time.monotonic()
        with pytest.raises(StateFileError, match=needle):
            ShardState.load(path, shard.dev)
        assert time.monotonic() - t0 < 5


# --- CLI: one line, exit status 2 --------------------------------------------------------------

CLI_ERRORS = [
    (("size", "--target", "u55c", "--params", "1e9", "--clock", "nan"), "--clock"),
    (("size", "--target", "u55c", "--params", "1e9", "--clock", "-300"), "--clock"),
    (("size", "--target", "u55c", "--params", "1e9", "--clock", "inf", "--json"), "--clock"),
    (("size", "--target", "u55c", "--params", "1e9", "--clock", "701"), "--clock"),
    (("size", "--target", "u55c", "--params", "1e9", "--cards", "0"), "--cards"),
    (("size", "--target", "u55c", "--params", "1e400"), "--params"),
    (("size", "--target", "u55c", "--params", "1e9", "--rate", "-1"), "--rate"),
    (("size", "--target", "u55c", "--params", "1e9", "--stripes", "0"), "--stripes"),
    (("size", "--target", "u55c", "--params", "1e9", "--compute-units", "99"), "--compute-units"),
    (("size", "--target", "u55c"), "--params"),
    (("size",), "required"),
    (("generate", "--target", "u55c", "--name", "std", "-o", "{tmp}/o"), "name"),
    (("generate", "--target", "u55c", "--name", "a-b", "-o", "{tmp}/o"), "name"),
    (("generate", "--target", "u55c", "--clock", "1e9", "-o", "{tmp}/o"), "--clock"),
    (("generate", "--target", "u55c", "-o", "{tmp}/file/sub"), "not a"),
    (("generate", "--target", "u55c", "-o", ""), "empty"),
    (("csim", "{tmp}", "--seed", "-1"), "--seed"),
    (("csim", "{tmp}", "--steps", "0"), "--steps"),
    (("csim", "{tmp}", "--elements", "1e12"), "--elements"),
    (("sim", "--target", "u55c", "--elements", "inf"), "--elements"),
    (("sim", "--target", "u55c", "--elements", "-1"), "--elements"),
    (("sim", "--target", "u55c", "--stalls", "2"), "--stalls"),
    (("bench", "csim", "--threads", "-1"), "--threads"),
    (("bench", "csim", "--repeats", "0"), "--repeats"),
    (("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--plot", "{tmp}/x.xyz"),
     ".xyz"),
    (("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--plot", "{tmp}/file/x.png"),
     "not a folder"),
    (("plan", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--mfu", "nan"), "--mfu"),
    (("demo", "--out", "{tmp}/file"), "not a folder"),
    (("demo", "--steps", "1"), "--steps"),
    (("build", "--target", "u55c", "--platform", "../../x", "--dry-run"), "platform"),
    (("targets", "--bogus"), "unrecognized"),
    (("nosuchverb",), "invalid choice"),
]


@pytest.mark.parametrize("argv,needle", CLI_ERRORS, ids=[" ".join(a[:3]) + f" {i}" for i, (a, _) in
                                                         enumerate(CLI_ERRORS)])
def test_cli_errors_are_one_line_exit_2(argv: tuple[str, ...], needle: str, tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("a file, not a folder")
    t0 = time.monotonic()
    rc, out, err = cli(capsys, *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    one_line_error(rc, err, needle)
    assert time.monotonic() - t0 < 10  # checked before any long work (demo trains for a minute)


def test_size_clock_range_matches_generate(capsys) -> None:
    for clock in ("49.9", "700.1"):
        rc_size, _, _ = cli(capsys, "size", "--target", "u55c", "--params", "1e9", "--clock", clock)
        rc_gen, _, _ = cli(capsys, "generate", "--target", "u55c", "--clock", clock, "-o", "/nonexistent/x")
        assert rc_size == rc_gen == 2
    rc, out, _ = cli(capsys, "size", "--target", "u55c", "--params", "1e9", "--clock", "50", "--json")
    assert rc == 0 and json.loads(out)["step_time_s"] > 0
