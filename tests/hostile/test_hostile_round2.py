"""Hostile input, round 2: one directed test per defect, in classes (test_<class>_..., counted in the
closing note of the change): planted or swapped compile inputs, writes through links, silent wrong
results, costs out of proportion, misleading answers. Races run through a deterministic hook (a
wrapped call that does the other thing at the worst moment), not through timing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from projects import copy_project

from hls.generate import write_project
from hls.golden import Hyper
from hls.spec import KernelSpec
from optimusnic.cli import main
from pynq_driver import ShardState, open_device
from pynq_driver.optim import NicAdamW

CLASSES = ("csim", "links", "wrong", "cost", "misleading")  # each test is named test_<class>_...

pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.usefixtures("in_tmp")]





def one_line_error(rc: int, err: str, needle: str = "") -> None:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    assert needle.lower() in err.lower(), err


# --- compile only verified bytes ----------------------------------------------------------------

def _fake_cxx(tmp_path: Path, body: str | None = None) -> str:
    """A compiler that only preprocesses (fast): the 'library' it writes is ELF's magic and the
    preprocessed unit, so a test can see which bytes were compiled. `body`: a shell script instead."""
    script = tmp_path / "fake-cxx"
    if body is None:
        script.write_text(f"""#!{sys.executable}
import subprocess, sys
args = sys.argv[1:]
if "--version" in args:
    print("fake-cxx 1"); sys.exit(0)
i = args.index("-o")
out = args[i + 1]
del args[i:i + 2]
pre = subprocess.run(["g++", "-E", *args], capture_output=True, check=True).stdout
open(out, "wb").write(b"\\x7fELF" + pre)
""")
    else:
        script.write_text('#!/bin/sh\nfor a; do [ "$a" = --version ] && { echo fake-cxx 1; exit 0; }; done\n'
                          + body + "\n")
    script.chmod(0o755)
    return str(script)


def _compile(pdir: Path, tmp_path: Path) -> bytes:
    from hls.csim.compile import compile_kernel

    lib = compile_kernel(pdir, tmp_path / "build", headers="own")
    return lib.read_bytes()


def test_csim_planted_header_in_project_is_not_compiled(project: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pdir = copy_project(project, tmp_path)
    (pdir / "hls" / "hls_math.h").write_text("int planted_header_was_compiled;\n")
    monkeypatch.setenv("CXX", _fake_cxx(tmp_path))
    data = _compile(pdir, tmp_path)
    assert b"optimusnic_adamw" in data  # the kernel was preprocessed
    assert b"planted_header_was_compiled" not in data


def test_csim_source_swapped_between_check_and_compile_is_not_compiled(project: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from hls.csim import compile as comp

    pdir = copy_project(project, tmp_path)
    src = pdir / "hls" / "optimusnic_adamw.cpp"
    seen: list[bytes] = []
    real_run = subprocess.run

    def swap_then(cmd, *a, **kw):  # noqa: ANN001, ANN002, ANN003 - the hook: swap right before the compiler runs
        if "--version" not in cmd:
            src.write_bytes(src.read_bytes() + b"\nint swapped_in_after_check;\n")
            out = cmd[cmd.index("-o") + 1]
            unit = Path(cmd[-1])
            # what the compiler would read: the unit and whatever it includes from its own folder
            text = unit.read_text()
            included = [unit.parent / m for m in re.findall(r'#include "([^"]+)"', text)]
            seen.append(text.encode() + b"".join(f.read_bytes() for f in included if f.is_file()))
            Path(out).write_bytes(b"\x7fELF" + b"\0" * 60)
            return subprocess.CompletedProcess(cmd, 0, "", "")
        return real_run(cmd, *a, **kw)

    try:
        from hls import proc as hproc  # tools run through hls.proc.run

        monkeypatch.setattr(hproc, "run", lambda cmd, what, timeout=None, **kw: swap_then(cmd, **kw))
    except ImportError:  # code that calls subprocess.run itself
        monkeypatch.setattr(subprocess, "run", swap_then)
    monkeypatch.setenv("CXX", shutil.which("g++") or "g++")
    comp.compile_kernel(pdir, tmp_path / "build", headers="own")
    assert seen and all(b"swapped_in_after_check" not in s for s in seen)


def test_csim_cached_library_replaced_is_not_loaded(project: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from hls.csim.compile import compile_kernel

    pdir = copy_project(project, tmp_path)
    monkeypatch.setenv("CXX", _fake_cxx(tmp_path, 'out=; prev=; for a; do [ "$prev" = -o ] && out=$a; prev=$a; done\n'
                                        'printf "\\177ELF-genuine" > "$out"'))
    lib = compile_kernel(pdir, tmp_path / "build", headers="own")
    lib.write_bytes(b"\x7fELF-foreign")  # someone replaced the cached library
    again = compile_kernel(pdir, tmp_path / "build", headers="own")
    assert again.read_bytes() == b"\x7fELF-genuine"


def test_csim_compiler_exiting_0_without_output_caches_nothing(project: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from hls.csim.compile import CsimError, compile_kernel

    pdir = copy_project(project, tmp_path)
    monkeypatch.setenv("CXX", _fake_cxx(tmp_path, "exit 0"))
    with pytest.raises(CsimError, match="no shared library"):
        compile_kernel(pdir, tmp_path / "build", headers="own")
    assert not list((tmp_path / "build").glob("*.so"))


def test_csim_compiler_that_hangs_is_stopped(project: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from hls.csim.compile import compile_kernel

    pdir = copy_project(project, tmp_path)
    monkeypatch.setenv("CXX", _fake_cxx(tmp_path, "sleep 20"))
    monkeypatch.setenv("OPTIMUSNIC_TOOL_TIMEOUT_S", "1")
    t = time.monotonic()
    with pytest.raises(Exception, match="did not finish") as exc:
        compile_kernel(pdir, tmp_path / "build", headers="own")
    assert time.monotonic() - t < 10
    assert "fake-cxx" in str(exc.value)



def test_csim_vitis_build_runs_on_a_verified_copy_without_planted_files(project: Path, tmp_path: Path) -> None:
    from hls.targets import get_target
    from hls.vitis import build

    pdir = copy_project(project, tmp_path)
    (pdir / "hls" / "hls_math.h").write_text("#error planted\n")
    plan = build.plan_build(KernelSpec(lanes=4), get_target("u55c"), run_dir=tmp_path / "run", project_dir=pdir)
    assert all(pdir not in (s.cwd, *s.cwd.parents) for s in plan.steps)  # the tools never run in the user's project
    build.copy_verified_project(pdir, plan.project_dir)
    assert not (plan.project_dir / "hls" / "hls_math.h").exists()
    assert (plan.project_dir / "hls" / "optimusnic_adamw.cpp").read_bytes() == \
        (pdir / "hls" / "optimusnic_adamw.cpp").read_bytes()

# --- every file written atomically, never through a link ----------------------------------------

def test_csim_library_replaced_between_check_and_load_is_not_loaded(project: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from hls.csim.compile import CsimError, compile_kernel, load_library

    pdir = copy_project(project, tmp_path)
    monkeypatch.setenv("CXX", _fake_cxx(tmp_path, 'out=; prev=; for a; do [ "$prev" = -o ] && out=$a; prev=$a; done\n'
                                        'printf "\\177ELF-genuine" > "$out"'))
    lib = compile_kernel(pdir, tmp_path / "build", headers="own")
    lib.write_bytes(b"\x7fELF-swapped after the check")
    with pytest.raises(CsimError, match="not the library that was built"):
        load_library(lib)

@pytest.fixture
def shard():
    rng = np.random.default_rng(3)
    with open_device("golden", KernelSpec(), timeout_s=0.5) as dev:
        with ShardState(dev, rng.standard_normal(1000).astype(np.float32)) as s:
            s.step(rng.standard_normal(1000).astype(np.float32), Hyper(step=1))
            yield s


def test_links_shard_save_does_not_follow_a_planted_tmp_symlink(shard: ShardState, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "s.npz.tmp").symlink_to(victim)
    shard.save(tmp_path / "s.npz")
    assert victim.read_bytes() == b"precious"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".s.npz")]  # no temporary left


def test_links_shard_save_replaces_a_symlink_and_keeps_hard_links(shard: ShardState, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (tmp_path / "s.npz").symlink_to(victim)
    shard.save(tmp_path / "s.npz")
    assert victim.read_bytes() == b"precious" and not (tmp_path / "s.npz").is_symlink()
    os.link(tmp_path / "s.npz", tmp_path / "backup.npz")
    before = (tmp_path / "backup.npz").read_bytes()
    shard.step(np.ones(1000, np.float32), Hyper(step=2))
    shard.save(tmp_path / "s.npz")
    assert (tmp_path / "backup.npz").read_bytes() == before


def test_links_generate_keeps_hard_linked_backups(project: Path, tmp_path: Path) -> None:
    pdir = tmp_path / "p"
    write_project(KernelSpec(lanes=4), pdir)
    backup = tmp_path / "backup"
    shutil.copytree(pdir, backup, copy_function=os.link)  # cp -al
    before = {f: f.read_bytes() for f in backup.rglob("*") if f.is_file()}
    write_project(KernelSpec(lanes=8), pdir)
    assert {f: f.read_bytes() for f in before} == before


def test_links_plan_outputs_do_not_write_through_symlinks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    victim = tmp_path / "victim.csv"
    victim.write_text("precious")
    (tmp_path / "sweep.csv").symlink_to(victim)
    rc = main(["plan", "--params", "7B", "--gpus", "16", "--gpu", "h200", "--nic", "u55c", "--sweep", "gpus",
               "--sweep-out", str(tmp_path / "sweep")])
    capsys.readouterr()
    assert rc == 0
    assert victim.read_text() == "precious"


def test_links_synth_cache_and_registry_entry_do_not_write_through_links(tmp_path: Path) -> None:
    from hls.rtl.synth import save_estimate, spec_key

    spec = KernelSpec()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    cache = tmp_path / "synth"
    cache.mkdir()
    (cache / f"{spec_key(spec)}.json").symlink_to(victim)
    save_estimate({"spec": spec.to_dict(), "lut": 1}, cache)
    assert victim.read_text() == "precious"
    (tmp_path / "a").mkdir()
    root, manifest_path = _registered(tmp_path / "a")
    os.link(manifest_path, tmp_path / "backup.json")  # cp -al of the registry
    before = (tmp_path / "backup.json").read_bytes()
    time.sleep(1.1)  # another registered_utc second: the entry differs
    _registered(tmp_path / "a")  # registered again over it
    assert (tmp_path / "backup.json").read_bytes() == before

def test_links_atomic_write_leaves_target_alone_on_error(tmp_path: Path) -> None:
    from hls import safe_io

    dest = tmp_path / "f.json"
    dest.write_text("old")
    with pytest.raises(RuntimeError), safe_io.atomic_open(dest, "w") as f:
        f.write("half")
        raise RuntimeError("disk full")
    assert dest.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "f.json"]


# --- the optimizer: refuse what torch refuses, never half-apply -----------------------------------

def _params(*sizes: int, seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(n, generator=g)) for n in sizes]


def _grads(params: list[torch.nn.Parameter], seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def test_wrong_parameter_grown_between_steps_is_refused() -> None:
    ps = _params(64, 32)
    opt = NicAdamW(ps, backend="golden")
    _grads(ps)
    opt.step()
    ps[1].data = torch.randn(64)
    ps[1].grad = torch.randn(64)
    before = ps[0].detach().clone()
    with pytest.raises(ValueError, match=r"\['params'\]\[1\].*64 elements.*32"):
        opt.step()
    assert torch.equal(ps[0].detach(), before)  # nothing half-applied


def test_wrong_gradient_larger_than_parameter_is_refused() -> None:
    ps = _params(64)
    opt = NicAdamW(ps, backend="golden")
    ps[0].grad = torch.randn(64)
    ps[0].grad.data = torch.randn(128)  # torch refuses `p.grad = ...` of another size; .data does not check
    with pytest.raises(ValueError, match=r"gradient has 128 elements"):
        opt.step()


def test_wrong_parameters_sharing_storage_are_refused() -> None:
    a, b = _params(100, 100)
    b.data = a.data  # tied through .data: two parameters, one storage
    with pytest.raises(ValueError, match="share memory"):
        NicAdamW([a, b], backend="golden")
    c, d = _params(100, 50)
    d.data = c.data[10:60]  # overlapping views
    with pytest.raises(ValueError, match="share memory"):
        NicAdamW([c, d], backend="golden")


def test_wrong_failed_add_param_group_leaves_no_ghost() -> None:
    ps = _params(16)
    opt = NicAdamW(ps, backend="golden")
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        opt.add_param_group({"params": _params(8, seed=5), "lr": -1})
    assert len(opt.param_groups) == 1
    _grads(ps)
    opt.step()  # no unrelated error from the refused group


def test_wrong_state_dict_after_an_interrupted_step_is_refused() -> None:
    ps = _params(4096)
    opt = NicAdamW(ps, backend="golden", chunk_elems=512)
    _grads(ps)
    opt.step()
    sd_good = opt.state_dict()
    slot = opt._slots[id(ps[0])][1]
    real = slot.data
    calls = [0]

    def data() -> torch.Tensor:  # the hook: Ctrl-C after some chunks reached the card
        calls[0] += 1
        if calls[0] == 6:
            raise KeyboardInterrupt
        return real()

    slot.data = data
    _grads(ps, seed=2)
    with pytest.raises(KeyboardInterrupt):
        opt.step()
    slot.data = real
    with pytest.raises(Exception, match="half"):
        opt.state_dict()
    opt.load_state_dict(sd_good)  # a whole state makes it usable again
    opt.state_dict()


def test_wrong_two_threads_stepping_one_optimizer_give_two_steps() -> None:
    from pynq_driver.optim.buckets import CardBucket

    ps = _params(2048, 300)
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    opt = NicAdamW(ps, backend="golden", lr=1e-2)
    torch_opt = torch.optim.AdamW(ref, lr=1e-2)
    _grads(ps)
    _grads(ref)
    real_run = CardBucket.run
    other: list[BaseException | None] = []
    started = threading.Event()

    def run(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003 - the hook: a second step() while the first runs
        if not started.is_set():
            started.set()

            def second() -> None:
                try:
                    opt.step()
                    other.append(None)
                except BaseException as exc:  # noqa: BLE001
                    other.append(exc)

            t = threading.Thread(target=second)
            t.start()
            t.join(0.5)  # with a lock it waits for us; without one it runs now, inside our step
            self._second = t
        return real_run(self, *a, **kw)

    CardBucket.run = run
    try:
        opt.step()
        for b in (b for bs in opt._buckets for b in bs):
            if hasattr(b, "_second"):
                b._second.join(30)
    finally:
        CardBucket.run = real_run
    assert other and other[0] is None or "concurrent" in str(other[0])
    torch_opt.step()
    if other[0] is None:
        torch_opt.step()
    for p, r in zip(ps, ref, strict=True):
        torch.testing.assert_close(p.detach(), r.detach(), rtol=1e-5, atol=1e-6)


def test_misleading_load_state_dict_refuses_bad_values_with_torch_messages() -> None:
    ps = _params(16)
    opt = NicAdamW(ps, backend="golden")
    _grads(ps)
    opt.step()
    sd = opt.state_dict()
    for change, message in ((lambda g: g.update(betas=(1.5, 0.999)), "Invalid beta parameter at index 0: 1.5"),
                            (lambda g: g.update(lr=-1), "Invalid learning rate: -1"),
                            (lambda g: g.update(lr="fast"), "Invalid learning rate: fast"),
                            (lambda g: g.update(eps=float("nan")), "Invalid epsilon value: nan"),
                            (lambda g: g.update(weight_decay=None), "Invalid weight_decay value: None")):
        bad = {"state": sd["state"], "param_groups": [dict(g) for g in sd["param_groups"]]}
        change(bad["param_groups"][0])
        with pytest.raises(ValueError, match=re.escape(message)):
            opt.load_state_dict(bad)
    for step in (float("inf"), "x", -1, 1.5):
        bad = {"state": {0: {**sd["state"][0], "step": step}}, "param_groups": sd["param_groups"]}
        with pytest.raises(ValueError, match="whole count"):
            opt.load_state_dict(bad)
    opt.step()  # nothing of the refused loads stayed


# --- costs in proportion to the work --------------------------------------------------------------

def test_cost_load_state_dict_is_linear_in_parameters() -> None:
    ps = [torch.nn.Parameter(torch.randn(4)) for _ in range(20_000)]
    opt = NicAdamW(ps, backend="golden")
    _grads(ps)
    opt.step()
    sd = opt.state_dict()
    t = time.monotonic()
    opt.load_state_dict(sd)
    assert time.monotonic() - t < 10  # was ~4 minutes (quadratic)
    assert torch.equal(opt.state[ps[-1]]["exp_avg"], sd["state"][19_999]["exp_avg"])


def test_cost_size_of_a_huge_model_is_closed_form(capsys: pytest.CaptureFixture) -> None:
    t = time.monotonic()
    rc = main(["size", "--target", "u55c", "--params", "1e15"])
    capsys.readouterr()
    assert rc == 0 and time.monotonic() - t < 5


def test_cost_size_with_a_tiny_channel_is_closed_form(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from hls.paths import REPO_ROOT

    catalog = json.loads((REPO_ROOT / "hls" / "targets" / "catalog.json").read_text())
    tiny = catalog["targets"]["u55c"]
    tiny["memory"]["channel_capacity_bytes"] = 1 << 20  # the smallest a targets file may declare
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schema": catalog["schema"], "targets": {"tiny": tiny}}))
    t = time.monotonic()
    rc = main(["size", "--target", "tiny", "--targets-file", str(path), "--params", "1e15"])
    capsys.readouterr()
    assert rc == 0 and time.monotonic() - t < 5
    tiny["memory"]["channel_capacity_bytes"] = 1024
    path.write_text(json.dumps({"schema": catalog["schema"], "targets": {"tiny": tiny}}))
    assert main(["size", "--target", "tiny", "--targets-file", str(path), "--params", "7e9"]) == 2
    assert "channel_capacity_bytes" in capsys.readouterr().err


def test_wrong_build_step_that_writes_nothing_does_not_pass_on_an_old_output(tmp_path: Path) -> None:
    from hls.vitis.build import BuildFailed, Step, run_step

    old = tmp_path / "k.xclbin"
    old.write_bytes(b"the bitstream of an earlier spec")
    log = tmp_path / "logs" / "2-v++_link.log"
    log.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious")
    log.symlink_to(victim)
    step = Step("link", "v++ --link", ["true"], tmp_path, [], [old], log)
    with pytest.raises(BuildFailed, match="did not write"):
        run_step(step)
    assert victim.read_text() == "precious"


def test_cost_build_step_that_hangs_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hls.vitis.build import Step, run_step

    monkeypatch.setenv("OPTIMUSNIC_TOOL_TIMEOUT_S", "1")
    step = Step("link", "v++ --link", ["sleep", "20"], tmp_path, [], [tmp_path / "k.xclbin"], tmp_path / "l.log")
    t = time.monotonic()
    with pytest.raises(Exception, match="did not finish"):
        run_step(step)
    assert time.monotonic() - t < 10


def test_cost_yosys_that_hangs_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hls.rtl import synth

    fake = tmp_path / "yosys"
    fake.write_text('#!/bin/sh\n[ "$1" = -V ] && { echo "Yosys 0.0"; exit 0; }\nsleep 20\n')
    fake.chmod(0o755)
    monkeypatch.setattr(synth, "yosys_bin", lambda: str(fake))
    monkeypatch.setenv("OPTIMUSNIC_TOOL_TIMEOUT_S", "1")
    src = tmp_path / "m.v"
    src.write_text("module m(input a, output b); assign b = a; endmodule\n")
    t = time.monotonic()
    with pytest.raises(Exception, match="did not finish"):
        synth.synth_module([src], "m", cache_dir=tmp_path / "cache", use_cache=False)
    assert time.monotonic() - t < 10


class _SparseWriter:
    """A file object that seeks over the zero block instead of writing it (a sparse file)."""

    def __init__(self, f, zero: bytes) -> None:  # noqa: ANN001
        self.f, self.zero = f, zero

    def write(self, data) -> int:  # noqa: ANN001
        if data is self.zero:
            self.f.seek(len(data), 1)
            return len(data)
        return self.f.write(data)

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.f, name)


def test_cost_sparse_checkpoint_declaring_more_than_the_card_holds_is_refused_before_allocating(
        tmp_path: Path) -> None:
    import io
    import zipfile

    from pynq_driver.errors import StateFileError

    n = 600_000_000  # 7.2 GB of state; the default u55c plan (3 state stripes) holds 402M parameters per card
    spec = KernelSpec()
    header = {"format": "optimusnic-shard", "version": 1, "spec": spec.to_dict(), "n": n, "step": 1,
              "consistent": True, "sha256": {k: "0" * 64 for k in ("params", "exp_avg", "exp_avg_sq")}}
    path = tmp_path / "sparse.npz"
    zero = bytes(4_000_000)  # divides each array's 2.4e9 bytes: every block is skipped
    with open(path, "wb") as raw:
        out = _SparseWriter(raw, zero)
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as z:  # type: ignore[arg-type]
            buf = io.BytesIO()
            np.save(buf, np.frombuffer(json.dumps(header).encode(), np.uint8))
            z.writestr("header.npy", buf.getvalue())
            for k in ("params", "exp_avg", "exp_avg_sq"):
                npy = io.BytesIO()
                np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False, "shape": (n,)})
                info = zipfile.ZipInfo(f"{k}.npy")
                with z.open(info, "w", force_zip64=True) as m:
                    m.write(npy.getvalue())
                    for _ in range(4 * n // len(zero)):
                        m.write(zero)
    assert path.stat().st_size > 12 * n and path.stat().st_blocks * 512 < 16 << 20  # sparse
    with open_device("golden", spec, timeout_s=0.5) as dev:
        t = time.monotonic()
        with pytest.raises(StateFileError, match="holds at most"):
            ShardState.load(path, dev)
        assert time.monotonic() - t < 5


# --- bitstreams verify runs the checks opening the card runs --------------------------------------

def _registered(tmp_path: Path) -> tuple[Path, Path]:
    import struct

    from hls import registry, xclbin
    from hls.generate import render
    from hls.targets import get_target

    container = (xclbin.XCLBIN_MAGIC + bytes(32 + 256 + 8 + 144) + struct.pack("<I4x", 1)
                 + struct.pack("<I16s4xQQ", xclbin.BITSTREAM, b"BITSTREAM", 496, 8) + b"not bits")
    src = tmp_path / "in.xclbin"
    src.write_bytes(container)
    _, manifest = render(KernelSpec(target="u55c", lanes=8), get_target("u55c"))
    registry.register(src, manifest, {"kernel": "hls", "platform": "p"}, {}, root=tmp_path / "reg")
    return tmp_path / "reg", registry.entry_paths("u55c", "optimusnic_adamw", tmp_path / "reg")[1]


@pytest.mark.parametrize("edit", [
    lambda m: m["banks"][0]["banks"].update(grad0="HBM[40]"),  # a bank the card does not have
    lambda m: m["banks"][0]["banks"].update(grad0="DDR[0]"),  # DDR on an HBM card
    lambda m: m["target"].update(platform="xilinx_u280_gen3x16_xdma_1_202211_1"),  # another card's platform
], ids=["no-such-bank", "ddr-on-hbm", "other-platform"])
def test_misleading_bitstreams_verify_refuses_registry_edits_opening_refuses(
        edit, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: ANN001
    root, manifest_path = _registered(tmp_path)
    assert main(["bitstreams", "verify", "--dir", str(root)]) == 0
    capsys.readouterr()
    data = json.loads(manifest_path.read_text())
    edit(data)
    manifest_path.write_text(json.dumps(data))
    assert main(["bitstreams", "verify", "--dir", str(root)]) == 1
    assert "bad-manifest" in capsys.readouterr().out
    from pynq_driver.backends.xclbin_checks import resolve_xclbin
    from pynq_driver.errors import BitstreamMismatch

    with pytest.raises(BitstreamMismatch):  # and opening the card refuses it for the same reason
        resolve_xclbin(KernelSpec(target="u55c", lanes=8), root / "u55c" / "optimusnic_adamw.xclbin")


def test_misleading_shrunk_parameter_is_refused_naming_it() -> None:
    ps = _params(64, 32)
    opt = NicAdamW(ps, backend="golden")
    ps[0].data = torch.randn(16)
    _grads(ps)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\] has 16 elements, 64"):
        opt.step()


def test_misleading_local_rank_that_is_not_a_number_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from pynq_driver.backends.discovery import local_rank

    monkeypatch.setenv("LOCAL_RANK", "\u00b2")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        local_rank()


def test_wrong_sharded_optimizer_refuses_a_grown_parameter(tmp_path: Path) -> None:
    import torch.distributed as dist

    from pynq_driver.optim import ShardedNicOptimizer

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ps = _params(64, 32)
        opt = ShardedNicOptimizer(ps, backend="golden", overlap=False)
        ps[1].data = torch.randn(64)
        _grads(ps)
        with pytest.raises(ValueError, match=r"\['params'\]\[1\] has 64 elements, 32"):
            opt.step()
        opt.close()
    finally:
        dist.destroy_process_group()
