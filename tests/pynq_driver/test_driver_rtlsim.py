"""The driver on the `rtlsim` backend: the generated RTL kernel in a cocotb simulation, programmed
through the same ShardState -> KernelRunner -> device-register path the `alveo` backend uses."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from hls.golden import Hyper, adam_update, first_mismatch, prepare_scalars, to_bf16_bits
from hls.rtl import simulators
from hls.spec import KernelSpec
from pynq_driver import DeviceError, KernelTimeout, ShardState, open_device
from pynq_driver.backends.rtlsim import RtlSimDevice
from pynq_driver.registers import KernelRunner

pytestmark = pytest.mark.skipif(not simulators.available("verilator"), reason="Verilator not installed (make deps)")

# 4 lanes: the lane count is a generate parameter, so 4 lanes run the same RTL as 16 while the
# Verilator build takes a fraction of the 16-lane one (136 s alone); 16 lanes run under --full
SPEC = KernelSpec(lanes=4)
N = 301  # several chunks of about 128 (whole stripe beats), the last one short: not a multiple of the 16 lanes
CHUNK = 128


@pytest.fixture(scope="module")
def rtl_dev():
    dev = open_device("rtlsim", SPEC, timeout_s=60.0)
    yield dev
    dev.close()


def run_steps(dev: RtlSimDevice, spec: KernelSpec, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    p0 = rng.standard_normal(N).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
    with ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        # CHUNK rounded to whole beats of every stripe: several chunks, a short last one
        chunks = [(lo, hi) for _, lo, hi in shard.chunks()]
        assert isinstance(shard.runner, KernelRunner) and len(chunks) >= 3 and chunks[-1][1] == N
        for t in range(1, steps + 1):
            g = (rng.standard_normal(N) * 1e-2).astype(np.float32)
            if spec.grad_dtype == "bf16":
                g = to_bf16_bits(g)
            h = Hyper(step=t, lr=1e-2, weight_decay=0.1)
            ref = adam_update(p, m, v, g, prepare_scalars(h, spec.optimizer), optimizer=spec.optimizer,
                              grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype)
            assert first_mismatch(shard.step(g, h), ref) is None, f"step {t}"
        sd = shard.state_dict()
        for got, want in ((sd["params"], p), (sd["exp_avg"], m), (sd["exp_avg_sq"], v)):
            assert first_mismatch(got, want) is None


def test_rtlsim_matches_golden_over_steps(rtl_dev: RtlSimDevice) -> None:
    assert rtl_dev.backend == "rtlsim"
    run_steps(rtl_dev, rtl_dev.spec, steps=3, seed=4)


def test_rtlsim_checkpoint_continues_on_golden(rtl_dev: RtlSimDevice, tmp_path) -> None:
    rng = np.random.default_rng(8)
    grads = [(rng.standard_normal(N) * 1e-2).astype(np.float32) for _ in range(3)]
    with ShardState(rtl_dev, rng.standard_normal(N).astype(np.float32), chunk_elems=CHUNK) as shard:
        shard.step(grads[0], Hyper(step=1))
        path = shard.save(tmp_path / "rtl.npz")
        want = [shard.step(grads[t - 1], Hyper(step=t)) for t in (2, 3)]
    with open_device("golden", SPEC) as gold, ShardState.load(path, gold) as resumed:
        for t, w in zip((2, 3), want, strict=True):
            assert first_mismatch(resumed.step(grads[t - 1], Hyper(step=t)), w) is None


def test_rtlsim_hung_kernel_times_out_and_state_stays_readable() -> None:
    with open_device("rtlsim", SPEC, timeout_s=3.0) as dev:
        p0 = np.arange(N, dtype=np.float32)
        shard = ShardState(dev, p0, chunk_elems=CHUNK)
        dev.inject_fault("hang")  # every memory channel stops answering
        with pytest.raises(KernelTimeout, match="did not finish"):
            shard.step(np.ones(N, np.float32), Hyper(step=1))
        assert shard.inconsistent
        sd = shard.state_dict()  # card memory is still readable
        assert sd["params"].shape == (N,) and sd["step"] == 0


def test_rtlsim_dead_simulator_is_an_error_not_a_hang() -> None:
    dev = open_device("rtlsim", SPEC, timeout_s=5.0)
    try:
        shard = ShardState(dev, np.zeros(N, np.float32), chunk_elems=CHUNK)
        os.kill(dev.child_pid, signal.SIGKILL)  # the child this test's device started
        with pytest.raises(DeviceError, match="simulator"):
            shard.step(np.ones(N, np.float32), Hyper(step=1))
    finally:
        dev.close()


@pytest.mark.slow
def test_rtlsim_sixteen_lanes() -> None:
    """The default spec's 16 lanes on the same driver path."""
    with open_device("rtlsim", KernelSpec(), timeout_s=60.0) as dev:
        run_steps(dev, dev.spec, steps=2, seed=9)


@pytest.mark.slow
def test_rtlsim_bf16_kernel() -> None:
    spec = KernelSpec(grad_dtype="bf16", out_dtype="bf16")
    with open_device("rtlsim", spec, timeout_s=60.0) as dev:
        run_steps(dev, spec, steps=2, seed=5)


def test_rtlsim_on_the_hbm_memory_model() -> None:
    """The same driver path with every port on its memory-plan channel at the channel's bandwidth."""
    with open_device("rtlsim", SPEC, timeout_s=60.0, memory="hbm") as dev:
        run_steps(dev, dev.spec, steps=1, seed=6)
