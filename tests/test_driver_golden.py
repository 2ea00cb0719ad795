"""The driver on the `golden` backend: shard streaming bit-exact against the golden model."""

from __future__ import annotations

import numpy as np
import pytest

from hls.golden import Hyper, adam_update, first_mismatch, prepare_scalars, to_bf16_bits
from hls.spec import KernelSpec
from pynq_driver import ShardState, open_device

N = 10_007  # not a multiple of the lanes, several chunks
CHUNK = 1024

SPECS = [
    KernelSpec(),
    KernelSpec(grad_dtype="bf16", out_dtype="bf16"),
    KernelSpec(optimizer="adam", grad_dtype="fp16", name="optimusnic_adam"),
]


def make_grad(rng: np.random.Generator, n: int, grad_dtype: str) -> np.ndarray:
    g = (rng.standard_normal(n) * 1e-2).astype(np.float32)
    if grad_dtype == "bf16":
        return to_bf16_bits(g)
    if grad_dtype == "fp16":
        return g.astype(np.float16)
    return g


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.optimizer}-{s.grad_dtype}-{s.out_dtype}")
def test_golden_backend_matches_model(spec: KernelSpec) -> None:
    rng = np.random.default_rng(1)
    p0 = rng.standard_normal(N).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
    with open_device("golden", spec) as dev, ShardState(dev, p0, chunk_elems=CHUNK) as shard:
        assert shard.chunk_elems == CHUNK and N // CHUNK >= 9
        for t in range(1, 5):
            g = make_grad(rng, N, spec.grad_dtype)
            h = Hyper(step=t, lr=1e-2, weight_decay=0.1)
            ref = adam_update(p, m, v, g, prepare_scalars(h, spec.optimizer), optimizer=spec.optimizer,
                              grad_dtype=spec.grad_dtype, out_dtype=spec.out_dtype)
            out = shard.step(g, h)
            assert first_mismatch(out, ref) is None
        sd = shard.state_dict()
        assert sd["step"] == 4
        for got, want in ((sd["params"], p), (sd["exp_avg"], m), (sd["exp_avg_sq"], v)):
            assert first_mismatch(got, want) is None
