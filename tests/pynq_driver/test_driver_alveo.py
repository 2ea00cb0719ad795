"""The `alveo` backend without a card: PYNQ 3.0.1 really imported, and the whole driver path run
through PYNQ's own Overlay, DefaultIP, XrtDevice, XrtMemory and PynqBuffer code on simulated
cards (`fake_xrt_card`, a test double: only the XRT library calls are replaced; nothing here is
a hardware result). Bit-exact against the golden model; lifecycle, waits, errors, several cards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import tomllib
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from fake_xrt_card import FakeCard, build_xclbin, fake_cards

from hls import registry
from hls.errors import OptimusError, ToolMissing, UserError
from hls.paths import REPO_ROOT
from hls.spec import KernelSpec, default_name
from hls.targets import get_target
from pynq_driver import BitstreamMismatch, DeviceError, KernelTimeout, ShardState, StateError, open_device
from pynq_driver.backends import rendered_manifest
from pynq_driver.backends.discovery import missing_runtime
from pynq_driver.backends.xclbin_checks import verify_xclbin
from pynq_driver.errors import CardBusy, CardNotResponding
from pynq_driver.placement import check_fits, cu_ranges, default_chunk_elems, plan_buffers

N, CHUNK = 3001, 1024


def memory_of(spec: KernelSpec) -> dict:
    return asdict(get_target(spec.target).memory)


def register(folder: Path, manifests: list[dict], data: bytes, name: str | None = None) -> Path:
    """Register `data` through `hls.registry.register()`, the path `optimusnic build` takes: the registry
    under `folder` gets <target>/<name>.xclbin and its manifest for each kernel of `manifests` (an
    xclbin that links several kernels is registered once under each kernel's name). The first path."""
    stage = folder / "_built"
    stage.mkdir(parents=True, exist_ok=True)
    src = stage / f"{name or manifests[0]['spec']['name']}.xclbin"
    src.write_bytes(data)
    paths = [Path(registry.register(src, m, {"kernel": m["spec"]["name"], "platform": m["target"]["platform"]},
                                    {"timing_met": True}, root=folder)["paths"]["xclbin"]) for m in manifests]
    return paths[0]


def make_bitstream(folder: Path, spec: KernelSpec, *, xclbin_spec: KernelSpec | None = None,
                   manifest: dict | None = None, **build) -> Path:
    """An xclbin as v++ lays it out (with a stand-in bitstream section), registered as `optimusnic build`
    registers it (`hls.registry.register`). With `xclbin_spec` the manifest describes `spec` but the
    container holds another kernel."""
    manifest = manifest or rendered_manifest(spec)
    inner = rendered_manifest(xclbin_spec) if xclbin_spec else manifest
    data = build_xclbin([inner], memory_of(spec), **build)
    return register(folder, [manifest], data)


def golden_steps(spec: KernelSpec, params: np.ndarray, grads: list[np.ndarray]) -> tuple[list[np.ndarray], dict]:
    with open_device("golden", spec) as dev, ShardState(dev, params, CHUNK) as shard:
        outs = [shard.step(g, shard.next_hyper(lr=1e-3, weight_decay=0.01)) for g in grads]
        return outs, shard.state_dict()


def grads_for(spec: KernelSpec, n: int, steps: int, seed: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(steps)]
    if spec.grad_dtype == "bf16":
        grads = [(g.view(np.uint32) >> 16).astype(np.uint16) for g in grads]
    return params, grads


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def assert_clean(card: FakeCard) -> None:
    """Nothing of ours left on the card, the shared XRT handle still open, nothing done wrong."""
    assert card.open_contexts() == 0
    assert card.live_bos() == []
    assert card.errors == []
    assert card.aborts == []  # no XRT call that would abort the process on 2.14-2.16
    assert not any(h.closed for h in card.handles)


# ---- item 1: installation -------------------------------------------------------------------------

def test_pynq_is_the_real_package() -> None:
    import pynq
    from pynq.pl_server.xclbin_parser import XclBin

    assert pynq.__version__ == "3.0.1" and XclBin.__module__ == "pynq.pl_server.xclbin_parser"


def test_pyproject_pins_what_pynq_needs() -> None:
    meta = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    for reqs in (meta["dependencies"], meta["optional-dependencies"]["card"]):
        assert {"pynq==3.0.1", "pycparser>=2.21,<3", "setuptools<82"} <= set(reqs)


def test_pynq_lib_imports_and_an_overlay_is_built_on_a_fake_card(tmp_path: Path) -> None:
    import pycparser
    import pynq
    import pynq.lib  # noqa: F401 - what every Overlay() imports; fails with pycparser 3

    from pynq_driver.backends.xclbin_checks import pynq_parser

    assert int(pycparser.__version__.split(".")[0]) < 3
    pynq_parser()  # as every open does: PYNQ 3.0.1 has no name for XRT's MEM_HOST bank type
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c")) as (card,):
        ov = pynq.Overlay(str(xclbin), device=pynq.Device.devices[0])
        assert type(ov.optimusnic_adamw_1).__name__ == "DefaultIP" and card.loads == 1
        ov.optimusnic_adamw_1.device.close_context("optimusnic_adamw:optimusnic_adamw_1")


# ---- item 2: the whole driver path on the fake card ---------------------------------------------------

SPECS = {
    "u55c-fp32": (KernelSpec(), {}),
    "u55c-bf16": (KernelSpec(grad_dtype="bf16", out_dtype="bf16"), {}),
    "u250-adam-2cu-bankN": (KernelSpec(target="u250", optimizer="adam", compute_units=2, grad_dtype="bf16"),
                            {"ddr_tags": "bank"}),
}


@pytest.mark.parametrize("key", SPECS)
def test_open_shard_step_save_load_close_bit_exact(key: str, tmp_path: Path) -> None:
    spec, build = SPECS[key]
    xclbin = make_bitstream(tmp_path, spec, **build)
    params, grads = grads_for(spec, N, 3)
    want, want_sd = golden_steps(spec, params, grads)
    with fake_cards(FakeCard(spec.target)) as (card,):
        dev = open_device("alveo", spec, xclbin=xclbin, timeout_s=5.0)
        assert card.open_contexts() == spec.compute_units
        shard = ShardState(dev, params, CHUNK)
        assert dev.host_pinned_bytes == sum(b.nbytes for b in dev.buffers) > 12 * N
        for g, w in zip(grads[:2], want[:2], strict=True):
            assert same_bits(shard.step(g, shard.next_hyper(lr=1e-3, weight_decay=0.01)), w)
        shard.save(tmp_path / "shard.npz")
        shard.close()
        dev.close()
        assert_clean(card)
        # Reopened (same xclbin: not reprogrammed), the checkpoint continues bit-exact.
        with open_device("alveo", spec, xclbin=xclbin) as dev2, ShardState.load(tmp_path / "shard.npz", dev2,
                                                                                 CHUNK) as resumed:
            assert same_bits(resumed.step(grads[2], resumed.next_hyper(lr=1e-3, weight_decay=0.01)), want[2])
            sd = resumed.state_dict()
        assert all(same_bits(sd[k], want_sd[k]) for k in ("params", "exp_avg", "exp_avg_sq"))
        assert card.loads == 1
        assert_clean(card)
    # ... and on another backend.
    with open_device("golden", spec) as g, ShardState.load(tmp_path / "shard.npz", g, CHUNK) as other:
        assert same_bits(other.step(grads[2], other.next_hyper(lr=1e-3, weight_decay=0.01)), want[2])


def nic_bitstreams(folder: Path, *, one_xclbin: bool) -> Path:
    """fp32 and bf16 AdamW kernels as NicAdamW asks for them; the bf16 one registered under its own name."""
    fp32 = rendered_manifest(KernelSpec(name=default_name("adamw")))
    bf16 = rendered_manifest(KernelSpec(name="optimusnic_adamw_bf16", grad_dtype="bf16", out_dtype="bf16"))
    mem = memory_of(KernelSpec())
    if one_xclbin:
        return register(folder, [fp32, bf16], build_xclbin([fp32, bf16], mem), name="optimusnic_adamw_both").parent
    register(folder, [fp32], build_xclbin([fp32], mem))
    return register(folder, [bf16], build_xclbin([bf16], mem)).parent


def two_dtype_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Linear(30, 5))
    model[1].to(torch.bfloat16)
    return model


def train_nic(model: torch.nn.Module, steps: int = 3, **opts) -> list[torch.Tensor]:
    from pynq_driver.optim.adam import NicAdamW

    opt = NicAdamW(model.parameters(), lr=1e-2, **opts)
    torch.manual_seed(1)
    try:
        for _ in range(steps):
            x = torch.randn(8, 40)
            loss = model[1](model[0](x).to(torch.bfloat16)).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]
    finally:
        opt.close()


def test_nicadamw_fp32_and_bf16_kernels_from_one_xclbin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    want = train_nic(two_dtype_model(), backend="golden")
    xclbin = nic_bitstreams(tmp_path, one_xclbin=True)
    with fake_cards(FakeCard("u55c")) as (card,):
        got = train_nic(two_dtype_model(), backend="alveo", xclbin=xclbin)
        assert card.loads == 1
        assert_clean(card)
    assert all(torch.equal(a.view(torch.uint8) if a.dtype == torch.bfloat16 else a, b.view(torch.uint8)
                           if b.dtype == torch.bfloat16 else b) for a, b in zip(got, want, strict=True))


def test_fp32_and_bf16_xclbins_resolve_by_spec_and_cannot_share_a_card(tmp_path: Path) -> None:
    folder = nic_bitstreams(tmp_path, one_xclbin=False)
    bf16 = KernelSpec(grad_dtype="bf16", out_dtype="bf16")  # NicAdamW's name for it: optimusnic_adamw
    with fake_cards(FakeCard("u55c"), FakeCard("u55c")) as (c0, c1):
        with open_device("alveo", KernelSpec(), xclbin=folder, device_index=0) as a, \
                open_device("alveo", bf16, xclbin=folder, device_index=1) as b:
            assert a.xclbin.name == "optimusnic_adamw.xclbin" and b.xclbin.name == "optimusnic_adamw_bf16.xclbin"
            assert b.spec.name == "optimusnic_adamw_bf16"
            # A second xclbin may not replace the one another open device runs on card 0.
            with pytest.raises(CardBusy, match="one xclbin that links both"):
                open_device("alveo", bf16, xclbin=folder, device_index=0)
            assert c0.open_contexts() == 1 and c0.loads == 1
        assert_clean(c0)
        assert_clean(c1)


# ---- item 3: banks as v++ writes them, and bank ranges ---------------------------------------------

def test_xclbin_topology_reads_like_a_vpp_build(tmp_path: Path) -> None:
    from pynq.pl_server.xclbin_parser import XclBin

    from pynq_driver.backends.xclbin_checks import pynq_parser, xclbin_facts

    pynq_parser()  # PYNQ 3.0.1 knows no MEM_HOST type: the driver teaches it before parsing
    spec = KernelSpec()
    manifest = rendered_manifest(spec)
    data = build_xclbin([manifest], memory_of(spec))
    parsed = XclBin(xclbin_data=bytearray(data))
    tags = list(parsed.mem_dict)
    assert tags == [f"HBM[{i}]" for i in range(32)] + [f"PLRAM[{i}]" for i in range(6)] + ["HOST[0]"]
    used = {t for t, m in parsed.mem_dict.items() if m["used"]}
    assert used == {s["bank"] for s in manifest["memory_plan"][0]["stripes"]}
    assert parsed.mem_dict["HOST[0]"]["type"] == "HOST"
    assert xclbin_facts(data)["groups"] == []  # every port on one bank: no GROUP_TOPOLOGY
    ddr = build_xclbin([rendered_manifest(KernelSpec(target="u250"))], memory_of(KernelSpec(target="u250")),
                       ddr_tags="bank")
    assert list(XclBin(xclbin_data=bytearray(ddr)).mem_dict)[:4] == ["bank0", "bank1", "bank2", "bank3"]


def ranged_manifest(spec: KernelSpec) -> dict:
    """The plan with out0 connected to HBM[7:8] (a bank range: v++ makes a memory group)."""
    manifest = rendered_manifest(spec)
    manifest["banks"][0]["banks"]["out0"] = "HBM[7:8]"
    for s in manifest["memory_plan"][0]["stripes"]:
        if s["ports"] == ["out0"]:
            s["bank"] = "HBM[7:8]"
    return manifest


def test_bank_range_allocates_in_its_memory_group(tmp_path: Path) -> None:
    from pynq_driver.backends.xclbin_checks import xclbin_facts

    spec = KernelSpec()
    manifest = ranged_manifest(spec)
    xclbin = make_bitstream(tmp_path, spec, manifest=manifest)
    groups = xclbin_facts(xclbin.read_bytes())["groups"]
    assert [g["tag"] for g in groups[39:]] == ["HBM[7:8]"] and groups[39]["size"] == 2 << 29
    params, grads = grads_for(spec, N, 1)
    want, _ = golden_steps(spec, params, grads)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev:
            # More than one 512 MB channel: only the group can hold it, at its own address range.
            big = dev.allocate(600 << 20, "HBM[7:8]")
            assert 7 << 29 <= big.address and big.address + big.nbytes <= 9 << 29
            with pytest.raises(DeviceError, match=r"cannot allocate 629,145,600 bytes in HBM\[7\]"):
                dev.allocate(600 << 20, "HBM[7]")
            dev.free(big)
            with ShardState(dev, params, CHUNK) as shard:
                assert same_bits(shard.step(grads[0], shard.next_hyper(lr=1e-3, weight_decay=0.01)), want[0])
        assert_clean(card)


def test_the_largest_shard_sizing_allows_fits_the_readme_spec(tmp_path: Path) -> None:
    # The README's card example (bf16 in and out, U55C): every buffer of a shard of
    # max_params_per_card parameters is allocated on the card (not written: 4.8 GB).
    spec = KernelSpec(target="u55c", grad_dtype="bf16", out_dtype="bf16")
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev:
            n = int(dev.manifest["sizing"]["max_params_per_card"])
            assert n == 536_870_912  # 4 state stripes of 128M elements (the bf16 plan under the port budget)
            chunk = default_chunk_elems(dev, n)
            check_fits(dev, n, chunk)
            plan = plan_buffers(dev, cu_ranges(n, dev.cus, dev.stripes.beat_align()), chunk)
            bufs = [dev.allocate(nbytes, bank) for _, _, bank, _, _, nbytes in plan]
            state = sum(b.nbytes for b in bufs if b.nbytes > 4 * chunk)
            assert state == 12 * n and dev.host_pinned_bytes == sum(b.nbytes for b in bufs)
            with pytest.raises(DeviceError, match="cannot allocate"):
                dev.allocate(1 << 20, plan[1][2])  # a state channel is full
            for b in bufs:
                dev.free(b)
        assert_clean(card)


# ---- item 4: several cards and ranks -------------------------------------------------------------

def test_device_index_is_validated(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), FakeCard("u55c")) as found:
        for bad in (-1, 2, True, "0", 1.0):
            with pytest.raises(UserError, match=r"device_index"):
                open_device("alveo", spec, xclbin=xclbin, device_index=bad)
        with open_device("alveo", spec, xclbin=xclbin, device_index=1) as dev:
            assert dev.device_index == 1 and found[1].open_contexts() == 1 and found[0].loads == 0
        for card in found:
            assert_clean(card)


def test_local_rank_picks_the_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), FakeCard("u55c")) as (c0, c1):
        monkeypatch.setenv("LOCAL_RANK", "1")
        with open_device("alveo", spec, xclbin=xclbin) as dev:
            assert dev.device_index == 1 and c1.open_contexts() == 1 and c0.open_contexts() == 0
        monkeypatch.setenv("LOCAL_RANK", "2")
        with pytest.raises(UserError, match="device_index 2: this host has 2 card"):
            open_device("alveo", spec, xclbin=xclbin)


def test_two_programs_on_one_card_do_not_share_a_kernel(tmp_path: Path) -> None:
    # One card listed twice = two XRT handles on it, as two processes (ranks) have.
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    other = make_bitstream(tmp_path / "other", spec.with_(lanes=8))
    card = FakeCard("u55c")
    # XRT 2.13: a busy CU is an error code, so two handles of this process stand for two processes
    # (2.14-2.16 abort there: test_busy_card_never_aborts_the_process).
    with fake_cards(card, card, xrt_version=(2, 13, 0)):
        with open_device("alveo", spec, xclbin=xclbin, device_index=0) as dev:
            with pytest.raises(CardBusy, match="another program holds compute unit"):
                open_device("alveo", spec, xclbin=xclbin, device_index=1)
            with pytest.raises(CardBusy, match="in use by another program with another xclbin"):
                open_device("alveo", spec.with_(lanes=8), xclbin=other, device_index=1)
            with pytest.raises(CardBusy, match="in use by another open device of this process"):
                open_device("alveo", spec, xclbin=xclbin, device_index=0)
            assert card.open_contexts() == 1
            dev.read_reg(0)
        assert_clean(card)


def _rank_worker(rank: int, world: int, port: int, folder: str, out: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "doubles"))
    from fake_xrt_card import FakeCard, fake_cards

    from pynq_driver.optim.sharded import ShardedNicOptimizer, init_gloo

    os.environ.pop("LOCAL_RANK", None)  # counted from hostnames
    init_gloo(rank, world, port)
    with fake_cards(FakeCard("u55c"), FakeCard("u55c")) as found:
        torch.manual_seed(0)
        model = torch.nn.Linear(50, 20)
        opt = ShardedNicOptimizer(model.parameters(), lr=1e-2, backend="alveo", xclbin=folder)
        model(torch.randn(4, 50)).pow(2).mean().backward()
        opt.step()
        dev = opt.shards()[0].dev
        Path(out, f"rank{rank}.json").write_text(json.dumps(
            {"device_index": dev.device_index, "contexts": [c.open_contexts() for c in found]}))
        opt.close()
    import torch.distributed as dist

    dist.destroy_process_group()


def test_each_rank_drives_its_own_card(tmp_path: Path) -> None:
    from optimusnic.demo.run import free_port
    from pynq_driver.optim.sharded import run_ranks

    bits = nic_bitstreams(tmp_path / "bits", one_xclbin=False)
    run_ranks(_rank_worker, 2, (free_port(), str(bits), str(tmp_path)), timeout_s=240)
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert seen == [{"device_index": 0, "contexts": [1, 0]}, {"device_index": 1, "contexts": [0, 1]}]


# ---- item 5: lifecycle and waits ------------------------------------------------------------------

def test_close_releases_only_this_kernel(tmp_path: Path) -> None:
    import pynq

    xclbin = nic_bitstreams(tmp_path, one_xclbin=True)
    bf16 = KernelSpec(grad_dtype="bf16", out_dtype="bf16")
    params, grads = grads_for(bf16, N, 1)
    want, _ = golden_steps(bf16.with_(name="optimusnic_adamw_bf16"), params, grads)
    with fake_cards(FakeCard("u55c")) as (card,):
        a = open_device("alveo", KernelSpec(), xclbin=xclbin)
        b = open_device("alveo", bf16, xclbin=xclbin)
        sa = ShardState(a, np.ones(100, np.float32))
        assert card.open_contexts() == 2
        a.close()  # sa's buffers freed with it, b untouched
        assert card.open_contexts() == 1 and card.errors == []
        assert pynq.Device.devices[0].handle and not card.handles[0].closed
        with pytest.raises(Exception, match="closed"):
            sa.params()
        with ShardState(b, params, CHUNK) as sb:
            assert same_bits(sb.step(grads[0], sb.next_hyper(lr=1e-3, weight_decay=0.01)), want[0])
        b.close()
        assert_clean(card)


def test_a_handle_closed_elsewhere_is_an_error_not_a_crash(tmp_path: Path) -> None:
    import pynq

    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c")) as (card,):
        dev = open_device("alveo", spec, xclbin=xclbin)
        shard = ShardState(dev, np.ones(100, np.float32))
        pynq.Device.devices[0].close()  # what Overlay.free() does to every user of the card
        with pytest.raises(DeviceError, match="XRT handle of this card was closed"):
            dev.read_reg(0)
        with pytest.raises(DeviceError, match="XRT handle of this card was closed"):
            dev.allocate(4096, "HBM[1]")
        shard.close()
        dev.close()
        assert card.errors == [] and card.live_bos() == [] and card.open_contexts() == 0


def test_timeout_makes_the_device_unusable_and_a_late_done_is_never_taken(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    params, grads = grads_for(spec, N, 2)
    want, _ = golden_steps(spec, params, grads[1:])
    with fake_cards(FakeCard("u55c")) as (card,):
        dev = open_device("alveo", spec, xclbin=xclbin, timeout_s=0.2)
        shard = ShardState(dev, params, CHUNK)
        card.faults.add("late")
        with pytest.raises(KernelTimeout, match="did not finish"):
            shard.step(grads[0], shard.next_hyper(lr=1e-3, weight_decay=0.01))
        card.finish_late()  # the abandoned run completes: ap_done is now set, stale
        card.faults.clear()
        with pytest.raises(DeviceError, match="unusable"):
            dev.start()
        with pytest.raises(StateError):
            shard.step(grads[1], shard.next_hyper(lr=1e-3, weight_decay=0.01))
        shard.close()
        dev.close()
        # Closing asked the timed-out CU whether it still runs (it does not: its buffers were freed);
        # that read took the stale ap_done away (clear-on-read), as a reopen's idle check would.
        assert not card.cus[0].running and not card.cus[0].done
        # Reopened: the first run runs for real.
        with open_device("alveo", spec, xclbin=xclbin) as dev2, ShardState(dev2, params, CHUNK) as fresh:
            assert not card.cus[0].done
            assert same_bits(fresh.step(grads[1], fresh.next_hyper(lr=1e-3, weight_decay=0.01)), want[0])
        assert_clean(card)


def test_buffers_of_a_cu_still_running_after_a_timeout_are_not_freed(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    params, grads = grads_for(spec, N, 1)
    with fake_cards(FakeCard("u55c")) as (card,):
        dev = open_device("alveo", spec, xclbin=xclbin, timeout_s=0.1)
        shard = ShardState(dev, params, CHUNK)
        card.faults.add("late")
        with pytest.raises(KernelTimeout):
            shard.step(grads[0], shard.next_hyper(lr=1e-3, weight_decay=0.01))
        held = len(card.live_bos())
        shard.close()
        dev.close()
        assert len(card.live_bos()) == held > 0  # the running CU may still write into them: kept
        assert card.open_contexts() == 0
        card.finish_late()  # the run ends (writing into buffers that are still allocated)
        card.faults.clear()
        with open_device("alveo", spec, xclbin=xclbin):  # every CU idle: what was kept is freed
            assert card.live_bos() == []
        assert_clean(card)


def test_hung_kernel_start_checks_idle_and_reopen_refuses(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c")) as (card,):
        dev = open_device("alveo", spec, xclbin=xclbin)
        card.faults.add("hang")
        dev.start()
        with pytest.raises(DeviceError, match="not idle"):
            dev.start()
        with pytest.raises(KernelTimeout):
            dev.wait(0.05)
        dev.close()
        with pytest.raises(CardBusy, match="not idle"):
            open_device("alveo", spec, xclbin=xclbin)
        assert_clean(card)


def test_card_off_the_bus_and_failed_register_access_are_errors(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    params, grads = grads_for(spec, N, 1)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev, ShardState(dev, params, CHUNK) as shard:
            card.faults.add("off_bus")  # every register reads 0xFFFFFFFF, ap_done bit included
            with pytest.raises(CardNotResponding, match="0xFFFFFFFF"):
                shard.step(grads[0], shard.next_hyper(lr=1e-3))
            with pytest.raises(DeviceError, match="unusable"):
                dev.write_reg(0x10, 1)
        card.faults.clear()
        with open_device("alveo", spec, xclbin=xclbin) as dev:
            card.faults.add("reg_error")
            with pytest.raises(DeviceError, match=r"register write at .* failed: EIO"):
                dev.write_reg(0x10, 1)
            with pytest.raises(DeviceError, match=r"register read at .* failed: EIO"):
                dev.read_reg(0x10)
            card.faults.clear()
        assert_clean(card)


def test_first_open_from_a_thread(tmp_path: Path) -> None:
    # PYNQ's XrtDevice() calls asyncio.get_event_loop(): the first probe may happen off the main thread.
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    result: list[object] = []

    def opener() -> None:
        try:
            with open_device("alveo", spec, xclbin=xclbin) as dev:
                result.append(dev.device_index)
        except BaseException as exc:  # noqa: BLE001 - reported below
            result.append(exc)

    with fake_cards(FakeCard("u55c")) as (card,):
        t = threading.Thread(target=opener)
        t.start()
        t.join(60)
        assert result == [0]
        assert_clean(card)


# ---- item 6: every failure to open is one project error, and leaves nothing open -------------------

def test_matching_xclbin_passes_pynq_parser_checks(tmp_path: Path) -> None:
    spec = KernelSpec(compute_units=2)
    xclbin = make_bitstream(tmp_path, spec)
    manifest = json.loads(xclbin.with_name(f"{spec.name}.manifest.json").read_text())
    ips = verify_xclbin(xclbin, manifest)
    assert [ip["cu_name"] for ip in ips] == [f"{spec.name}:{spec.name}_1", f"{spec.name}:{spec.name}_2"]
    assert ips[0]["registers"]["p0_rd"]["address_offset"] == 0x1C
    assert ips[1]["registers"]["p0_rd"]["memory"].startswith("HBM[")


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


@pytest.mark.parametrize("case", ["metadata-only", "platform", "protocol"])
def test_verify_checks_bitstream_platform_and_protocol(case: str, tmp_path: Path) -> None:
    spec = KernelSpec()
    if case == "metadata-only":
        manifest = rendered_manifest(spec)
        xclbin = register(tmp_path, [manifest], registry.metadata_xclbin(manifest, memory_of(spec)))
        match = "no bitstream section"
    elif case == "platform":
        xclbin = make_bitstream(tmp_path, spec, platform="xilinx_u55c_gen3x16_xdma_2_202110_1")
        match = "built for platform 'xilinx_u55c_gen3x16_xdma_2_202110_1'"
    else:
        xclbin = make_bitstream(tmp_path, spec, protocol="ap_ctrl_chain")
        match = "control protocol 'ap_ctrl_chain'"
    with fake_cards(FakeCard("u55c")) as (card,):
        with pytest.raises(BitstreamMismatch, match=match):
            open_device("alveo", spec, xclbin=xclbin)
        assert card.loads == 0


def test_a_launch_writes_its_arguments_in_one_call(tmp_path: Path) -> None:
    """The argument block in one xclWrite (then only the span that changed), plus ap_start: bit-exact."""
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    params, grads = grads_for(spec, 4 * CHUNK, 2)
    want, _ = golden_steps(spec, params, grads)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev, ShardState(dev, params, CHUNK) as shard:
            launches = 0
            for g, w in zip(grads, want, strict=True):
                before = card.calls.get("xclWrite", 0)
                assert same_bits(shard.step(g, shard.next_hyper(lr=1e-3, weight_decay=0.01)), w)
                launches = len(shard.chunks())
                assert card.calls["xclWrite"] - before <= 2 * launches  # block + ap_start, not ~50 words
            runner = shard.parts[0].runner
            assert len(runner.pointers) * 2 + len(runner.scalars) > 20  # what it would have been word by word
        assert_clean(card)


def test_overlapped_pipeline_uploads_and_downloads_on_their_own_workers(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """LaunchPipeline(overlap=True): upload of chunk i+1, kernel i and download of chunk i-1 at once, bit-exact."""
    import functools

    import pynq_driver.shard as shard_module
    from pynq_driver.backends.alveo import AlveoDevice
    from pynq_driver.pipeline import LaunchPipeline

    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    params, grads = grads_for(spec, 6 * CHUNK + 17, 3)
    want, want_sd = golden_steps(spec, params, grads)
    monkeypatch.setattr(shard_module, "LaunchPipeline", functools.partial(LaunchPipeline, overlap=True))
    threads: dict[str, set[str]] = {"write": set(), "read": set()}
    for name in ("write", "read"):
        orig = getattr(AlveoDevice, f"_{name}")

        def spy(self, *a, _orig=orig, _name=name):  # noqa: ANN001, ANN202
            threads[_name].add(threading.current_thread().name.split("_")[0])
            return _orig(self, *a)

        monkeypatch.setattr(AlveoDevice, f"_{name}", spy)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev, ShardState(dev, params, CHUNK) as shard:
            threads["write"].clear()
            threads["read"].clear()
            for g, w in zip(grads, want, strict=True):
                assert same_bits(shard.step(g, shard.next_hyper(lr=1e-3, weight_decay=0.01)), w)
            got_sd = shard.state_dict()
        assert_clean(card)
    assert "optimusnic-upload" in threads["write"] and "optimusnic-download" in threads["read"], threads
    assert all(same_bits(got_sd[k], want_sd[k]) for k in ("params", "exp_avg", "exp_avg_sq"))


def test_a_shared_context_of_this_process_is_reopened_exclusive(tmp_path: Path) -> None:
    """PYNQ's open_context returns an open context as it is: one an IP object opened shared must not be
    taken for the exclusive one the driver asks for."""
    import pynq

    folder = nic_bitstreams(tmp_path, one_xclbin=True)
    bf16 = KernelSpec(name="optimusnic_adamw_bf16", grad_dtype="bf16", out_dtype="bf16")
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", KernelSpec(), xclbin=folder):
            ov = pynq.Overlay(str(folder / "optimusnic_adamw_bf16.xclbin"), device=pynq.Device.devices[0],
                              download=False)
            ov.optimusnic_adamw_bf16_1.device.open_context(ov.ip_dict["optimusnic_adamw_bf16_1"])  # shared
            ip = next(i for i, cu in enumerate(card.cus) if cu.name.endswith("bf16_1"))
            assert list(card.contexts[ip].values()) == [True]
            with open_device("alveo", bf16, xclbin=folder):
                assert list(card.contexts[ip].values()) == [False]  # exclusive now
        assert_clean(card)


@pytest.mark.parametrize("exc", [KeyError("ip_dict"), OSError(5, "Input/output error"), ValueError("bad")])
def test_pynq_errors_while_programming_are_project_errors(exc: Exception, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import pynq

    def broken(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise exc

    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c")) as (card,):
        monkeypatch.setattr(pynq, "Overlay", broken)
        with pytest.raises(DeviceError, match=r"card 0 .*(programming|cannot read)"):
            open_device("alveo", spec, xclbin=xclbin)
        assert_clean(card)


def test_compute_units_are_taken_by_instance_name_not_address(tmp_path: Path) -> None:
    spec = KernelSpec(compute_units=2)
    xclbin = make_bitstream(tmp_path, spec, reverse_addresses=True)  # _2 below _1 in the address map
    params, grads = grads_for(spec, N, 2)
    want, _ = golden_steps(spec, params, grads)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev, ShardState(dev, params, CHUNK) as shard:
            assert dev._cu_names == ["optimusnic_adamw_1", "optimusnic_adamw_2"]
            assert dev._reg_base[0] > dev._reg_base[1]
            for g, w in zip(grads, want, strict=True):  # each CU's pointers in its own banks
                assert same_bits(shard.step(g, shard.next_hyper(lr=1e-3, weight_decay=0.01)), w)
        assert_clean(card)


def test_register_map_past_the_kernels_decoder_is_refused(tmp_path: Path) -> None:
    """An HLS build whose control decoder is narrower than the register map: STATUS and PORT_ERR (past
    0x100 with the default plan's ports) would read back other control words; verify_xclbin refuses
    it before a card is touched."""
    from pynq_driver.backends.xclbin_checks import register_reach

    spec = KernelSpec()
    manifest = rendered_manifest(spec)
    reach, last = register_reach(manifest["register_map"])
    assert last == "PORT_ERR" and reach == manifest["register_map"]["status"]["port_errors"]["offsets"][-1] + 4
    xclbin = make_bitstream(tmp_path, spec, ctrl_range=0x100)
    with pytest.raises(BitstreamMismatch, match=r"decoder covers 0x100 bytes .* reaches 0x[0-9a-f]+ \(PORT_ERR\)"):
        verify_xclbin(xclbin, json.loads(xclbin.with_name(f"{spec.name}.manifest.json").read_text()))
    with fake_cards(FakeCard("u55c")) as (card,):
        with pytest.raises(BitstreamMismatch, match="control decoder"):
            open_device("alveo", spec, xclbin=xclbin)
        assert card.loads == 0
    ok = make_bitstream(tmp_path / "ok", spec, ctrl_range=reach)  # a decoder that just covers it passes
    verify_xclbin(ok, json.loads(ok.with_name(f"{spec.name}.manifest.json").read_text()))


def test_xclbin_for_another_card_and_wrong_shell(tmp_path: Path) -> None:
    spec = KernelSpec(target="u280")
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), FakeCard("u280", platforms={"xilinx_u280_gen3x16_xdma_1_202211_1"})) as (a, b):
        with pytest.raises(BitstreamMismatch, match=r"is for an Alveo U280 .* card 0 is an Alveo U55C"):
            open_device("alveo", spec, xclbin=xclbin, device_index=0)
        # Same board, older shell version than the xclbin's platform: XRT refuses it. The U280 gen3x16
        # shell is 2-stage: XRT says "interface uuids do not match" (EINVAL), and the user gets the hint.
        b.platforms = {"xilinx_u280_xdma_201920_3"}
        with pytest.raises(BitstreamMismatch, match=r"EINVAL.*another shell version.*2-stage shell.*xbmgmt"):
            open_device("alveo", spec, xclbin=xclbin, device_index=1)
        assert a.loads == b.loads == 0
        assert_clean(a)
        assert_clean(b)


def test_one_stage_shell_mismatch_is_eopnotsupp_and_named(tmp_path: Path) -> None:
    spec = KernelSpec(target="u250", optimizer="adam", compute_units=2, grad_dtype="bf16")
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u250", platforms={"xilinx_u250_xdma_201830_2"})) as (card,):
        with pytest.raises(BitstreamMismatch, match=r"Shell does not match.*another shell version than the card's"):
            open_device("alveo", spec, xclbin=xclbin)
        assert card.loads == 0 and card.aborts == []


XRT_VERSIONS = [(2, 13, 0), (2, 14, 0), (2, 15, 0), (2, 16, 0)]


@pytest.mark.parametrize("version", XRT_VERSIONS, ids=lambda v: ".".join(map(str, v)))
def test_busy_card_never_aborts_the_process(version: tuple[int, int, int], tmp_path: Path) -> None:
    """A CU another program holds: CardBusy on every supported XRT, and never the call that aborts on 2.14-2.16."""
    spec = KernelSpec(compute_units=2)
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), xrt_version=version) as (card,):
        open_device("alveo", spec, xclbin=xclbin).close()
        card.hold_context_elsewhere(cu=1)  # another program holds the second CU
        # 2.13 answers EBUSY on the CU itself; 2.14-2.16 are asked first (kdsstat lists the other pid).
        match = "optimusnic_adamw_2" if version < (2, 14) else r"another program \(pid 4242\)"
        with pytest.raises(CardBusy, match=match):
            open_device("alveo", spec, xclbin=xclbin)
        assert card.aborts == []  # no call that would have killed the process
        assert card.open_contexts() == 1  # only the other program's
        assert card.live_bos() == [] and card.errors == []


@pytest.mark.parametrize("version", XRT_VERSIONS, ids=lambda v: ".".join(map(str, v)))
def test_the_double_aborts_where_xrt_does(version: tuple[int, int, int], tmp_path: Path) -> None:
    """The double is as strict as XRT: PYNQ's own calls, made without the backend's checks, abort."""
    import pynq
    from fake_xrt_card import XrtAbort

    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), xrt_version=version) as (card,):
        ov = pynq.Overlay(str(xclbin), device=pynq.Device.devices[0])
        desc = ov.ip_dict["optimusnic_adamw_1"]
        card.hold_context_elsewhere(cu=0)
        if (2, 14) <= version[:2] <= (2, 16):
            with pytest.raises(XrtAbort):
                ov.device.open_context(desc, shared=False)
        else:
            with pytest.raises(RuntimeError, match="Could not open CU context"):
                ov.device.open_context(desc, shared=False)
        memory = ov.device.get_memory(ov.mem_dict["HBM[0]"])
        if version[:2] == (2, 16):
            with pytest.raises(XrtAbort):
                pynq.allocate((1 << 30,), np.uint8, target=memory)
        else:
            with pytest.raises(RuntimeError, match="Allocate failed"):
                pynq.allocate((1 << 30,), np.uint8, target=memory)
        assert len(card.aborts) == ((2, 14) <= version[:2] <= (2, 16)) + (version[:2] == (2, 16))


def test_unreadable_kdsstat_on_aborting_xrt_is_refused_not_tried(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), xrt_version=(2, 15, 0)) as (card,):
        monkeypatch.setenv("OPTIMUSNIC_SYSFS_ROOT", str(tmp_path / "no-sysfs"))
        with pytest.raises(DeviceError, match="cannot read the card's kdsstat"):
            open_device("alveo", spec, xclbin=xclbin)
        assert card.aborts == [] and card.open_contexts() == 0


def test_allocation_failure_is_a_project_error(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c")) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev:
            with pytest.raises(DeviceError, match=r"cannot allocate .* in HBM\[1\] \(HBM\[1\], 536,870,912 bytes"):
                dev.allocate(600 << 20, "HBM[1]")
            with pytest.raises(BitstreamMismatch, match=r"no kernel port .* is connected to it"):
                dev.allocate(4096, "HBM[20]")
        assert_clean(card)


def test_allocation_failure_on_xrt_2_16_is_checked_before_the_call(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards(FakeCard("u55c"), xrt_version=(2, 16, 0)) as (card,):
        with open_device("alveo", spec, xclbin=xclbin) as dev:
            kept = dev.allocate(300 << 20, "HBM[1]")
            with pytest.raises(DeviceError, match=r"cannot allocate .* in HBM\[1\] .*in use there.*aborts"):
                dev.allocate(300 << 20, "HBM[1]")
            dev.free(kept)
            dev.free(dev.allocate(300 << 20, "HBM[1]"))  # room again once freed (memstat_raw follows)
        assert card.aborts == []
        assert_clean(card)


def test_no_card(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with fake_cards():
        with pytest.raises(ToolMissing, match=r"missing an Alveo card .*xbutil examine.*csim"):
            open_device("alveo", spec, xclbin=xclbin)


def test_v80_is_not_an_xrt_card() -> None:
    with pytest.raises(ToolMissing, match="not an xclbin/XRT card"):
        open_device("alveo", KernelSpec(target="v80"))


def test_no_pynq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    monkeypatch.setitem(sys.modules, "pynq", None)  # `import pynq` raises ModuleNotFoundError
    with pytest.raises(ToolMissing, match=r"missing PYNQ 3.0.1 \(pip install 'optimusnic\[card\]'\)"):
        open_device("alveo", spec, xclbin=xclbin)


def _open_in_subprocess(tmp_path: Path, prelude: str, env: dict[str, str]) -> str:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    code = (f"{prelude}\nfrom hls.spec import KernelSpec\nfrom pynq_driver import open_device\n"
            f"try:\n    open_device('alveo', KernelSpec(), xclbin={str(xclbin)!r})\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env})
    return run.stdout.strip() + run.stderr[-2000:]


def test_xrt_set_without_its_library_is_tool_missing(tmp_path: Path) -> None:
    out = _open_in_subprocess(tmp_path, "", {"XILINX_XRT": str(tmp_path / "no-xrt")})
    assert out.startswith("ToolMissing alveo backend: missing XRT (XILINX_XRT=") and "libxrt_core.so" in out


def test_pycparser_3_is_named(tmp_path: Path) -> None:
    out = _open_in_subprocess(tmp_path, "import sys; sys.modules['pycparser.plyparser'] = None", {})
    assert out.startswith("ToolMissing alveo backend: missing pycparser < 3"), out


@pytest.mark.skipif(not missing_runtime(), reason="XRT and a card are present")
def test_no_xrt_names_what_is_missing(tmp_path: Path) -> None:
    spec = KernelSpec()
    xclbin = make_bitstream(tmp_path, spec)
    with pytest.raises(ToolMissing, match=r"alveo backend: missing XRT .*csim"):
        open_device("alveo", spec, xclbin=xclbin)
    # Without an xclbin too, the one message lists both.
    with pytest.raises(ToolMissing, match=r"missing the xclbin .*; XRT"):
        open_device("alveo", spec.with_(name="never_built_kernel"))


def test_every_open_error_is_a_project_error() -> None:
    for cls in (ToolMissing, BitstreamMismatch, CardBusy, CardNotResponding, DeviceError, UserError):
        assert issubclass(cls, OptimusError)
