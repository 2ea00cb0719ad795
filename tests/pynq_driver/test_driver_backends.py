"""The driver's software backends (`golden`, `csim`): bit-exact against the golden model over
several steps, torch inputs and outputs, and checkpoints that continue bit-exact on another backend."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hls.golden import Hyper, adam_update, bf16_bits_to_f32, first_mismatch, prepare_scalars, to_bf16_bits
from hls.spec import KernelSpec
from pynq_driver import ShardState, open_device

N = 10_007  # several chunks, not a multiple of 16 lanes
CHUNK = 1000  # rounded down to whole beats of every stripe (992 with 1 stripe of each array)

SPECS = [
    KernelSpec(),
    KernelSpec(grad_dtype="bf16", out_dtype="bf16"),
    KernelSpec(optimizer="adam", grad_dtype="fp16", lanes=4, name="optimusnic_adam"),
    # several stripes per array and several compute units, each CU its own part of the shard
    KernelSpec(stripes=2, compute_units=2),  # 2 x 14 of the 32 HBM AXI ports
]


def grad_of(rng: np.random.Generator, n: int, grad_dtype: str) -> np.ndarray:
    g = (rng.standard_normal(n) * 1e-2).astype(np.float32)
    g[::97] = 0.0
    if grad_dtype == "bf16":
        return to_bf16_bits(g)
    return g.astype(np.float16) if grad_dtype == "fp16" else g


@pytest.mark.parametrize("backend", ["golden", "csim"])
@pytest.mark.parametrize("spec", SPECS,
                         ids=lambda s: f"{s.optimizer}-{s.grad_dtype}-{s.out_dtype}-l{s.lanes}-cu{s.compute_units}")
def test_backend_bit_exact_over_steps(backend: str, spec: KernelSpec) -> None:
    rng = np.random.default_rng(11)
    p0 = rng.standard_normal(N).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
    with open_device(backend, spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        align = dev.stripes.beat_align()
        assert shard.chunk_elems == CHUNK // align * align and shard.backend == backend
        assert len(shard.parts) == spec.compute_units
        for t in range(1, 5):
            g = grad_of(rng, N, spec.grad_dtype)
            h = Hyper(step=t, lr=3e-3, weight_decay=0.05, grad_scale=0.5 if t == 3 else 1.0)
            ref = adam_update(p, m, v, g, prepare_scalars(h, spec.optimizer), optimizer=spec.optimizer,
                              grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype)
            out = np.empty_like(ref)
            assert shard.step(g, h, out=out) is out
            assert first_mismatch(out, ref) is None, f"step {t}"
        sd = shard.state_dict()
        assert sd["step"] == 4
        for got, want in ((sd["params"], p), (sd["exp_avg"], m), (sd["exp_avg_sq"], v)):
            assert first_mismatch(got, want) is None


def test_torch_tensors_in_and_out() -> None:
    spec = KernelSpec(grad_dtype="bf16", out_dtype="bf16")
    rng = np.random.default_rng(5)
    p0 = torch.from_numpy(rng.standard_normal(N).astype(np.float32))
    with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        p, m, v = p0.numpy().copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
        out = torch.empty(N, dtype=torch.bfloat16)
        for t in (1, 2):
            g = torch.randn(N, dtype=torch.float32).to(torch.bfloat16)
            bits = g.view(torch.int16).numpy().view(np.uint16)
            ref = adam_update(p, m, v, bits, prepare_scalars(Hyper(step=t), "adamw"), grad_dtype="bf16",
                              out_dtype="bf16")
            assert shard.step(g, shard.next_hyper(), out=out) is out
            assert first_mismatch(out.view(torch.int16).numpy().view(np.uint16), ref) is None
        # torch's own bf16 rounding of the fp32 master params is what the kernel emits.
        assert torch.equal(out, torch.from_numpy(shard.params()).to(torch.bfloat16))
        assert np.array_equal(bf16_bits_to_f32(ref), out.float().numpy())


def test_state_dict_accepts_torch_format() -> None:
    rng = np.random.default_rng(2)
    with open_device("golden", KernelSpec()) as dev, ShardState(dev, np.zeros(N, np.float32)) as shard:
        sd = {"step": torch.tensor(7.0), "exp_avg": torch.from_numpy(rng.random(N, np.float32)),
              "exp_avg_sq": torch.from_numpy(rng.random(N, np.float32)),
              "params": torch.from_numpy(rng.standard_normal(N).astype(np.float32))}
        shard.load_state_dict(sd)
        back = shard.state_dict()
        assert back["step"] == 7 and shard.next_hyper().step == 8
        for k in ("exp_avg", "exp_avg_sq", "params"):
            assert back[k].tobytes() == sd[k].numpy().tobytes()


@pytest.mark.parametrize("first,second", [("golden", "csim"), ("csim", "golden")])
def test_checkpoint_continues_bit_exact_on_another_backend(first: str, second: str, tmp_path) -> None:
    spec = KernelSpec()
    rng = np.random.default_rng(9)
    p0 = rng.standard_normal(N).astype(np.float32)
    grads = [grad_of(rng, N, "fp32") for _ in range(4)]
    with open_device(first, spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        for t in (1, 2):
            shard.step(grads[t - 1], Hyper(step=t))
        before = shard.state_dict()
        path = shard.save(tmp_path / "shard.npz")
        # Uninterrupted reference: the same backend keeps going.
        outs = [shard.step(grads[t - 1], Hyper(step=t)) for t in (3, 4)]
        final = shard.state_dict()
    with open_device(second, spec) as dev2, ShardState.load(path, dev2, chunk_elems=2048) as resumed:
        loaded = resumed.state_dict()
        for k in ("params", "exp_avg", "exp_avg_sq"):
            assert loaded[k].tobytes() == before[k].tobytes()  # save/load round trip is bit-exact
        assert loaded["step"] == 2
        for t, want in zip((3, 4), outs, strict=True):
            assert first_mismatch(resumed.step(grads[t - 1], resumed.next_hyper()), want) is None
        for k in ("params", "exp_avg", "exp_avg_sq"):
            assert resumed.state_dict()[k].tobytes() == final[k].tobytes()


def test_small_shard_and_default_chunk() -> None:
    with open_device("golden", KernelSpec()) as dev, ShardState(dev, np.ones(5, np.float32)) as shard:
        assert shard.chunk_elems == 96  # one beat of each of the 3 p stripes, and of 16-bit data: 32 x lcm(3, 1, 1)
        out = shard.step(np.ones(5, np.float32), Hyper(step=1, lr=0.5, weight_decay=0.0))
        assert np.allclose(out, 0.5)
    with open_device("golden", KernelSpec()) as dev, ShardState(dev, np.ones(5_000_000, np.float32)) as shard:
        assert shard.chunk_elems == (1 << 20) // 96 * 96  # the sizing default, in whole beats of every stripe


def test_csim_backend_with_our_headers_is_bit_exact() -> None:
    """open_device("csim", headers="own"): the faster stand-in stream model, same bits as AMD's headers."""
    rng = np.random.default_rng(5)
    p0 = rng.standard_normal(3000).astype(np.float32)
    g = grad_of(rng, 3000, "fp32")
    outs = []
    for headers in ("amd", "own"):
        with open_device("csim", KernelSpec(), headers=headers) as dev, ShardState(dev, p0) as shard:
            outs.append(shard.step(g, Hyper(step=1, lr=1e-2, weight_decay=0.1)))
    assert outs[0].tobytes() == outs[1].tobytes()
