"""Bad input to the driver: one clear exception each, and the state on the card bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hls.golden import Hyper, adam_update, first_mismatch, prepare_scalars
from hls.spec import KernelSpec
from pynq_driver import (
    BadGradient,
    DeviceClosed,
    KernelTimeout,
    NonFiniteGradient,
    ShardState,
    ShardTooLarge,
    StateError,
    StateFileError,
    open_device,
)
from pynq_driver.errors import UserError

N = 3001
CHUNK = 512


def snapshot(shard: ShardState) -> tuple[int, bytes, bytes, bytes]:
    sd = shard.state_dict()
    return sd["step"], sd["params"].tobytes(), sd["exp_avg"].tobytes(), sd["exp_avg_sq"].tobytes()


@pytest.fixture
def shard():
    rng = np.random.default_rng(7)
    with open_device("golden", KernelSpec(), timeout_s=0.5) as dev:
        with ShardState(dev, rng.standard_normal(N).astype(np.float32), chunk_elems=CHUNK) as s:
            s.step(rng.standard_normal(N).astype(np.float32), Hyper(step=1))  # non-zero moments
            yield s


BAD_GRADS = {
    "float64": lambda: np.ones(N, np.float64),
    "bf16 bits for an fp32 kernel": lambda: np.ones(N, np.uint16),
    "too short": lambda: np.ones(N - 1, np.float32),
    "too long": lambda: np.ones(N + 16, np.float32),
    "non-contiguous numpy": lambda: np.ones(2 * N, np.float32)[::2],
    "torch float16": lambda: torch.ones(N, dtype=torch.float16),
    "non-contiguous torch": lambda: torch.ones(N, 2)[:, 0],
    "torch on another device": lambda: torch.ones(N, device="meta"),
    "a list": lambda: [1.0] * N,
}


@pytest.mark.parametrize("kind", list(BAD_GRADS))
def test_bad_gradient_leaves_state_unchanged(shard: ShardState, kind: str) -> None:
    before = snapshot(shard)
    with pytest.raises(BadGradient) as info:
        shard.step(BAD_GRADS[kind](), Hyper(step=2))
    assert "grad" in str(info.value)
    assert snapshot(shard) == before


def test_bad_out_and_hyper(shard: ShardState) -> None:
    before = snapshot(shard)
    g = np.ones(N, np.float32)
    with pytest.raises(BadGradient, match="out"):
        shard.step(g, Hyper(step=2), out=np.empty(N, np.uint16))
    with pytest.raises(BadGradient, match="read-only"):
        ro = np.empty(N, np.float32)
        ro.flags.writeable = False
        shard.step(g, Hyper(step=2), out=ro)
    with pytest.raises(UserError, match="Hyper"):
        shard.step(g, {"lr": 1e-3})
    assert snapshot(shard) == before


def test_shard_larger_than_card_says_how_many_cards(shard: ShardState) -> None:
    before = snapshot(shard)
    spec = shard.spec
    max_params = int(shard.dev.manifest["sizing"]["max_params_per_card"])
    huge = np.zeros(max_params * 2 + 5, np.float32)  # calloc'd pages, never touched
    with pytest.raises(ShardTooLarge, match=r"at least 3 cards"):
        ShardState(shard.dev, huge)
    assert snapshot(shard) == before and shard.spec == spec


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_nonfinite_gradient_skips_by_default(shard: ShardState, bad: float) -> None:
    before = snapshot(shard)
    g = np.ones(N, np.float32)
    g[N - 3] = bad  # in the last chunk: nothing may have been streamed before the check
    assert shard.step(g, Hyper(step=2)) is None
    assert shard.last_step_skipped and shard.skipped_steps == 1
    assert snapshot(shard) == before


def test_nonfinite_policies(shard: ShardState) -> None:
    g = np.ones(N, np.float32)
    g[5] = np.nan
    before = snapshot(shard)
    shard.nonfinite = "raise"
    with pytest.raises(NonFiniteGradient):
        shard.step(g, Hyper(step=2))
    assert snapshot(shard) == before
    # apply_nonfinite=True runs the step anyway, exactly as the golden model would.
    sd = shard.state_dict()
    p, m, v = sd["params"], sd["exp_avg"], sd["exp_avg_sq"]
    ref = adam_update(p, m, v, g, prepare_scalars(Hyper(step=2), "adamw"))
    out = shard.step(g, Hyper(step=2), apply_nonfinite=True)
    assert not shard.last_step_skipped and np.isnan(out[5])
    assert first_mismatch(out, ref) is None and first_mismatch(shard.params(), p) is None


def test_kernel_that_never_finishes_times_out_and_state_stays_readable(shard: ShardState) -> None:
    before = snapshot(shard)
    shard.dev.faults.add("hang")
    with pytest.raises(KernelTimeout, match="did not finish"):
        shard.step(np.ones(N, np.float32), Hyper(step=2))
    shard.dev.faults.clear()
    assert snapshot(shard) == before  # readable; the hung run never touched memory
    with pytest.raises(StateError, match="load a checkpoint"):
        shard.step(np.ones(N, np.float32), Hyper(step=2))


def test_timeout_then_checkpoint_recovers_on_a_fresh_device() -> None:
    rng = np.random.default_rng(3)
    g = rng.standard_normal(N).astype(np.float32)
    with open_device("golden", KernelSpec(), timeout_s=0.2) as dev:
        shard = ShardState(dev, rng.standard_normal(N).astype(np.float32), chunk_elems=CHUNK)
        shard.step(g, Hyper(step=1))
        dev.faults.add("hang")
        with pytest.raises(KernelTimeout):
            shard.step(g, Hyper(step=2))
        saved = shard.state_dict()  # the card's memory is still readable after the hang
    with open_device("golden", KernelSpec()) as dev2:
        fresh = ShardState(dev2, saved["params"], chunk_elems=CHUNK)
        fresh.load_state_dict(saved)
        assert fresh.step_count == 1
        assert fresh.step(g, Hyper(step=2)) is not None


def test_closed_device_and_shard(shard: ShardState) -> None:
    dev = shard.dev
    dev.close()
    with pytest.raises(DeviceClosed):
        shard.step(np.ones(N, np.float32), Hyper(step=2))
    with pytest.raises(DeviceClosed):
        shard.state_dict()
    with open_device("golden", KernelSpec()) as dev2:
        s = ShardState(dev2, np.zeros(100, np.float32))
        s.close()
        with pytest.raises(DeviceClosed, match="shard is closed"):
            s.params()


def test_state_file_truncated_corrupt_or_other_spec(shard: ShardState, tmp_path) -> None:
    path = shard.save(tmp_path / "s.npz")
    raw = path.read_bytes()
    before = snapshot(shard)
    cases = {
        "truncated": raw[: len(raw) // 2],
        "empty": b"",
        "not a zip": b"hello" * 100,
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(StateFileError, match="truncated or corrupt"):
            ShardState.load(tmp_path / name, shard.dev)
    # One flipped bit inside an array: the sha256 in the header catches it.
    i = raw.find(shard.params()[100:104].tobytes())
    flipped = bytearray(raw)
    flipped[i] ^= 1
    (tmp_path / "flipped").write_bytes(bytes(flipped))
    with pytest.raises(StateFileError, match="sha256|corrupt"):
        ShardState.load(tmp_path / "flipped", shard.dev)
    with open_device("golden", KernelSpec(out_dtype="bf16")) as other:
        with pytest.raises(StateFileError, match="another kernel spec.*out_dtype"):
            ShardState.load(path, other)
    with pytest.raises(StateFileError, match="cannot read"):
        ShardState.load(tmp_path / "missing.npz", shard.dev)
    assert snapshot(shard) == before


def test_bad_state_dict_leaves_state_unchanged(shard: ShardState) -> None:
    before = snapshot(shard)
    sd = shard.state_dict()
    for key, value in (("exp_avg", sd["exp_avg"][:-1]), ("exp_avg_sq", sd["exp_avg_sq"].astype(np.float64)),
                       ("step", -1), ("step", 1.5)):
        with pytest.raises(UserError):
            shard.load_state_dict({**sd, key: value})
    with pytest.raises(UserError, match="missing"):
        shard.load_state_dict({"step": 1})
    with pytest.raises(UserError, match="another kernel spec"):
        shard.load_state_dict({**sd, "spec": KernelSpec(optimizer="adam").to_dict()})
    assert snapshot(shard) == before
