"""Property-based fuzzing (hypothesis) of everything a user, a data file or an edited project feeds in.

Properties, whatever the input:
- the CLI ends with success or one line on stderr and exit status 2 (never a traceback, never an
  "internal error"), and --json output is strict JSON;
- nothing is written outside the output folder;
- a data file (targets file, manifest, checkpoint header) is accepted only when it is valid,
  otherwise refused with the toolkit's own error naming the file;
- after an error, optimizer state is bit for bit what it was.

Bounded by default (a few dozen examples per property, the whole file well under 2 minutes);
`make fuzz` sets HYPOTHESIS_PROFILE=fuzz for thousands.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hls import validate  # noqa: E402
from hls.errors import UserError  # noqa: E402
from hls.generate import write_project  # noqa: E402
from hls.golden import Hyper  # noqa: E402
from hls.manifest import load_manifest  # noqa: E402
from hls.spec import KernelSpec  # noqa: E402
from hls.targets import CatalogError, load_catalog  # noqa: E402
from optimusnic.cli import main  # noqa: E402
from optimusnic.cli import sim as sim_cmd  # noqa: E402
from optimusnic.cli.common import CLOCK, float_in, int_in, parse_count  # noqa: E402
from pynq_driver import ShardState, open_device  # noqa: E402
from pynq_driver.errors import StateFileError  # noqa: E402

_COMMON = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)
# Default: bounded, and no shrinking (a failure prints its draws; `make fuzz` shrinks them).
settings.register_profile("default", max_examples=25, phases=[Phase.explicit, Phase.generate], **_COMMON)
settings.register_profile("fuzz", max_examples=1500, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Strings a hostile user would try: shell, Tcl, C comment and Makefile metacharacters, paths, controls.
NASTY = ["$(touch PWNED)", "`id`", "[exec id]", "*/", "/*", "\\", "\n", "\r", "\t", "\0", "../", "/etc/passwd",
         "'", '"', ";", "{", "}", "#", "%", "\u2028", "\x1b[2J", "std", "memcpy", "NaN", "-1", "1e400", "", " "]
text = st.one_of(st.sampled_from(NASTY), st.text(max_size=20),
                 st.lists(st.sampled_from(NASTY + ["a", "x1", "_", "-"]), max_size=4).map("".join))
numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, -1, 2**31, 2**32, 2**63, 1e400, -0.0, 0.5, 700.0001, 49.99]))
json_leaf = st.one_of(st.none(), st.booleans(), numbers, text)
json_value = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=3),
                                                        st.dictionaries(text, c, max_size=3)), max_leaves=8)


def strict_json_dumps(value: Any) -> str:
    """What a hostile file can hold: JSON extended with NaN/Infinity where Python writes them."""
    return json.dumps(value)


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


def set_at(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    value = copy.deepcopy(value)
    node = value
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = new
    return value


def mutate(data: st.DataObject, value: Any) -> Any:
    """Replace one node of `value` (chosen among all its paths) with a hostile value, or drop a key."""
    path = data.draw(st.sampled_from(paths_of(value)))
    if path and data.draw(st.booleans()) and isinstance(value, dict):
        parent = value
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict):
            out = copy.deepcopy(value)
            node = out
            for k in path[:-1]:
                node = node[k]
            del node[path[-1]]
            return out
    return set_at(value, path, data.draw(json_value))


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_clean(rc: int, out: str, err: str, json_out: bool = False) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    assert rc in (0, 1, 2), (rc, err)
    if rc == 2:
        assert len(err.strip().splitlines()) == 1, err
    if rc == 0 and json_out:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"--json printed {c}"))


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "file").write_text("a file")
    return d


@pytest.fixture(autouse=True)
def _in_workdir(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)


# --- CLI arguments ---------------------------------------------------------------------------------

option_value = st.one_of(st.sampled_from(["0", "-1", "1", "3", "16", "17", "nan", "inf", "-inf", "1e400", "1e9",
                                          "7B", "0.5", "", " ", "abc", "50", "700", "701", "2**31", "1_000",
                                          "u55c", "u200", "v80", "x9", "std", "../x", "file", "file/x"]), text)
SIZE_OPTS = ["--target", "--params", "--cards", "--lanes", "--compute-units", "--clock", "--stripes", "--rate",
             "--grad-dtype", "--out-dtype", "--grad-source"]
SPEC_OPTS = ["--target", "--optimizer", "--lanes", "--compute-units", "--grad-dtype", "--out-dtype", "--grad-source",
             "--name", "--clock", "--stripes", "--rate"]
PLAN_OPTS = ["--gpus", "--gpu", "--nic", "--nodes", "--micro-batch", "--seq", "--grad-accum", "--mfu",
             "--link-efficiency", "--rtl-efficiency", "--nic-ports", "--cpu-adam-rate", "--params"]


def argv_for(verb: list[str], opts: list[str], base: list[str]) -> st.SearchStrategy[list[str]]:
    pair = st.tuples(st.sampled_from(opts), option_value).map(list)
    return st.lists(pair, max_size=4).map(lambda ps: [*verb, *base, *[x for p in ps for x in p]])


@given(argv=st.one_of(
    argv_for(["size"], SIZE_OPTS, ["--target", "u55c", "--params", "1e9", "--json"]),
    argv_for(["size"], SIZE_OPTS, []),
    argv_for(["plan"], PLAN_OPTS, ["--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "u55c", "--json"]),
    argv_for(["build"], [*SPEC_OPTS, "--kernel", "--platform"], ["--target", "u55c", "--dry-run", "--json"]),
    argv_for(["bitstreams"], ["--dir"], ["verify"]),
    argv_for(["targets"], ["--targets-file"], ["--json"]),
    argv_for(["csim"], ["--elements", "--steps", "--seed"], ["nonexistent_project"]),
    st.lists(option_value, max_size=4),
))
def test_cli_arguments(argv: list[str], capsys, workdir: Path) -> None:
    before = tree(workdir)
    rc, out, err = run_cli(capsys, argv)
    assert_clean(rc, out, err, json_out="--json" in argv)
    assert tree(workdir) == before  # none of these verbs writes anything here


@given(argv=argv_for(["generate"], SPEC_OPTS, ["--target", "u55c", "--lanes", "4"]), data=st.data())
@settings(max_examples=int(os.environ.get("FUZZ_GENERATE_EXAMPLES", "12")))
def test_generate_writes_only_into_its_output_folder(argv: list[str], data: st.DataObject, capsys,
                                                     workdir: Path) -> None:
    out = data.draw(st.sampled_from(["out", "out/sub", "file/sub", "file", "out/../out2", "."]))
    before = tree(workdir)
    rc, stdout, err = run_cli(capsys, [*argv, "-o", out])
    assert_clean(rc, stdout, err)
    new = tree(workdir) - before
    if out == ".":
        assert rc == 2 or new <= {"hls", "rtl", "manifest.json"} | {n for n in new if n.startswith(("hls/", "rtl/"))}
    else:
        dest = os.path.normpath(out)
        assert all(n == dest or n.startswith(dest + "/") or dest.startswith(n + "/") for n in new), (out, new)
    for n in sorted(new, key=len, reverse=True):  # leave the folder as found
        p = workdir / n
        if p.is_file() or p.is_symlink():
            p.unlink()
        elif p.is_dir():
            p.rmdir()


@given(value=st.one_of(option_value, st.floats(allow_nan=True, allow_infinity=True).map(repr),
                       st.integers(-(2**80), 2**80).map(str)))
def test_numeric_option_types(value: str) -> None:
    """The argparse types of every numeric option: a value in range, or ArgumentTypeError."""
    import argparse

    for parse, lo, hi in ((CLOCK, 50, 700), (int_in(1, 16), 1, 16), (float_in(0, 1, lo_open=True), 0, 1)):
        try:
            v = parse(value)
        except argparse.ArgumentTypeError:
            continue
        assert math.isfinite(v) and lo <= v <= hi
    try:
        assert 1 <= parse_count(value) <= 10**15
    except argparse.ArgumentTypeError:
        pass
    try:
        counts = sim_cmd._counts(value)
        assert counts and all(0 <= c <= sim_cmd.MAX_SIM_ELEMENTS for c in counts)
    except argparse.ArgumentTypeError:
        pass


# --- targets files ----------------------------------------------------------------------------------

U55C = load_catalog()["u55c"].raw
SAFE_TEXT = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._+()/,-")


@given(data=st.data(), as_new=st.booleans())
def test_targets_file(data: st.DataObject, as_new: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    entry = mutate(data, copy.deepcopy(U55C))
    key = "mycard" if as_new else "u55c"
    doc = data.draw(st.one_of(st.just({"targets": {key: entry}}), json_value, st.just({"targets": entry})))
    f = tmp_path_factory.mktemp("t") / "t.json"
    f.write_text(strict_json_dumps(doc))
    try:
        target = load_catalog([str(f)])[key]
    except CatalogError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith(str(f)), msg
        return
    except KeyError:  # a valid file that does not define `key`
        return
    # Accepted: every string that can reach a generated file is plain.
    assert set(target.name) <= SAFE_TEXT
    assert target.part.replace("-", "").isalnum() and (target.platform or "x").replace("_", "").isalnum()
    assert "\n" not in target.flow_note and "\\" not in target.flow_note and target.flow_note.isprintable()
    assert math.isfinite(target.kernel_clock_mhz) and 50 <= target.kernel_clock_mhz <= 700


# --- manifests ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("proj") / "p"
    write_project(KernelSpec(lanes=4, compute_units=2), out)
    return out


MATTERS = ("spec", "target", "files", "register_map", "sizing", "banks", "memory_plan")


@given(data=st.data())
def test_manifest(data: st.DataObject, project: Path) -> None:
    path = project / "manifest.json"
    original = json.loads(path.read_text())
    edited = mutate(data, original)
    path.write_text(strict_json_dumps(edited))
    try:
        try:
            loaded = load_manifest(project)
        except UserError as exc:
            assert "\n" not in str(exc)
            return
        assert {k: loaded.get(k) for k in MATTERS} == {k: original.get(k) for k in MATTERS}
    finally:
        path.write_text(json.dumps(original, indent=2, sort_keys=True) + "\n")


# --- checkpoint headers ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], dict[str, Any]]:
    path = tmp_path_factory.mktemp("ckpt") / "s.npz"
    with open_device("golden", KernelSpec()) as dev, ShardState(dev, np.arange(100, dtype=np.float32)) as s:
        s.step(np.ones(100, np.float32), Hyper(step=1))
        s.save(path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    header = json.loads(np.load(io.BytesIO(members["header.npy"])).tobytes())
    return members, header


@given(data=st.data())
def test_checkpoint_header(data: st.DataObject, saved, tmp_path_factory: pytest.TempPathFactory) -> None:
    from pynq_driver.shard import read_state_file

    members, header = saved
    edited = mutate(data, header)
    raw = strict_json_dumps(edited).encode()
    buf = io.BytesIO()
    np.save(buf, np.frombuffer(raw, np.uint8))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, blob in {**members, "header.npy": buf.getvalue()}.items():
            z.writestr(name, blob)
    f = tmp_path_factory.mktemp("c") / "c.npz"
    f.write_bytes(out.getvalue())
    try:
        got, arrays = read_state_file(f, KernelSpec())
    except StateFileError as exc:
        assert "\n" not in str(exc)
        return
    # Accepted: the arrays are the saved ones (the step count is metadata a user may set, any whole count).
    assert got["n"] == header["n"] and got["sha256"] == header["sha256"]
    assert isinstance(got["step"], int) and got["step"] >= 0
    assert all(a.shape == (100,) for a in arrays.values())


# --- optimizer inputs: a bad step leaves the shard bit for bit as it was ---------------------------

bad_arrays = st.one_of(
    st.sampled_from(["float64", "short", "long", "2d", "int32", "list", "none", "noncontig", "nan"]),
)


def _grad(kind: str, n: int) -> Any:
    return {"float64": lambda: np.ones(n, np.float64), "short": lambda: np.ones(n - 1, np.float32),
            "long": lambda: np.ones(n + 1, np.float32), "2d": lambda: np.ones((2, n // 2), np.float32),
            "int32": lambda: np.ones(n, np.int32), "list": lambda: [1.0] * n, "none": lambda: None,
            "noncontig": lambda: np.ones(2 * n, np.float32)[::2], "nan": lambda: np.full(n, np.nan, np.float32),
            }[kind]()


hyper_values = st.fixed_dictionaries({}, optional={
    "lr": numbers, "beta1": numbers, "beta2": numbers, "eps": numbers, "weight_decay": numbers,
    "grad_scale": numbers, "step": numbers})


@given(kind=bad_arrays, hyper=hyper_values)
def test_shard_step_is_all_or_nothing(kind: str, hyper: dict[str, Any]) -> None:
    n = 64
    with open_device("golden", KernelSpec()) as dev, ShardState(dev, np.arange(n, dtype=np.float32)) as s:
        s.step(np.ones(n, np.float32), Hyper(step=1))
        before = s.state_dict()
        try:
            h = Hyper(**{"step": 2, **hyper})
            result = s.step(_grad(kind, n), h)
        except (UserError, ValueError, TypeError):
            after = s.state_dict()
            assert after["step"] == before["step"]
            for k in ("params", "exp_avg", "exp_avg_sq"):
                assert after[k].tobytes() == before[k].tobytes()
            return
        if kind == "nan" and result is None:  # skipped: state unchanged
            after = s.state_dict()
            assert after["params"].tobytes() == before["params"].tobytes()


def test_hostile_strings_cannot_pass_the_patterns() -> None:
    """A string holding a shell, Tcl, C-comment or Makefile metacharacter, a control character or a
    path step passes none of the patterns that guard generated files, command lines and paths."""
    danger = set("$`[]*\\\n\r\t\0'\";{}#%\u2028\x1b")
    schemas = (validate.TARGET_NAME, validate.PART, validate.PLATFORM, validate.IDENT, validate.BANK_EXPR,
               validate.REL_FILE, validate.KIND, validate.TARGET_KEY)
    for s in [*NASTY, *(a + b for a in NASTY for b in NASTY)]:
        for schema in schemas:
            try:
                schema.check(s, validate.Where("f"))
            except validate.Invalid:
                continue
            assert not danger & set(s), (s, schema.desc)
            assert schema is validate.TARGET_NAME or ".." not in s, (s, schema.desc)
    for s in ("../x", "/etc/passwd", "hls/../../x", "hls/a/b", "hls/.hidden", "hls/"):
        with pytest.raises(validate.Invalid):
            validate.REL_FILE.check(s, validate.Where("f"))
