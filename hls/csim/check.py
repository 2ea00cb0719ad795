"""C simulation, checking: a project's csim library against the golden model, bit for bit.

`check_project` runs consecutive optimizer steps on realistic inputs with every special value
(zeros of both signs, subnormals, the largest finite values, infinities, NaNs) mixed in, on the
library and on hls.golden, and compares every array bit for bit (`optimusnic csim` and the tests).
A kernel with the parameter stream (out_sink "memory+stream") is checked on what it streamed too.
"""

from __future__ import annotations

import numpy as np

from hls.csim.kernel import CsimKernel
from hls.golden import Hyper, adam_update, bits_equal, prepare_scalars, to_bf16_bits
from hls.spec import STORAGE_DTYPES, KernelSpec

F32_SPECIALS = np.array(
    [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
     0x7F7FFFFE, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001, 0x3F800000],
    dtype=np.uint32,
).view(np.float32)
H16_SPECIALS = {
    "fp16": np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00,
                      0x7C01, 0x3C00], dtype=np.uint16),
    "bf16": np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0,
                      0x7F81, 0x3F80], dtype=np.uint16),
}


def make_inputs(spec: KernelSpec, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """p, m, v (fp32) and a gradient in the spec's dtype: realistic values with every special value mixed in.

    Specials (zeros of both signs, subnormals, the largest finite values, infinities, NaNs) are
    scattered at random positions, so they land in every lane and in the tail.
    """
    def specials(arr: np.ndarray, pool: np.ndarray, fraction: float = 0.1) -> np.ndarray:
        k = min(n, max(len(pool), int(n * fraction))) if n else 0
        where = rng.choice(n, size=k, replace=False) if k else np.zeros(0, dtype=np.int64)
        arr.view(pool.dtype)[where] = pool[rng.integers(0, len(pool), size=k)].view(pool.dtype)
        return arr

    p = specials(rng.standard_normal(n).astype(np.float32), F32_SPECIALS)
    m = specials((rng.standard_normal(n) * 1e-2).astype(np.float32), F32_SPECIALS)
    v = specials((np.abs(rng.standard_normal(n)) * 1e-4).astype(np.float32), F32_SPECIALS)
    g32 = (rng.standard_normal(n) * 1e-1).astype(np.float32)
    if spec.grad_dtype == "fp32":
        grad = specials(g32, F32_SPECIALS)
    elif spec.grad_dtype == "fp16":
        grad = specials(g32.astype(np.float16), H16_SPECIALS["fp16"].view(np.float16))
    else:
        grad = specials(to_bf16_bits(g32), H16_SPECIALS["bf16"])
    return {"grad": grad, "p": p, "m": m, "v": v}


def check_project(kernel: CsimKernel, elements: int, steps: int, seed: int = 0) -> list[dict[str, object]]:
    """Run `steps` consecutive steps on the csim library and the golden model; one result per step and array."""
    spec = kernel.spec
    rng = np.random.default_rng(seed)
    state = make_inputs(spec, elements, rng)
    p, m, v = state["p"], state["m"], state["v"]
    gp, gm, gv = p.copy(), m.copy(), v.copy()
    out = np.zeros(elements, dtype=STORAGE_DTYPES[spec.out_dtype])
    param = np.zeros(elements, dtype=out.dtype) if spec.param_stream else None
    results: list[dict[str, object]] = []
    for step in range(1, steps + 1):
        grad = state["grad"] if step == 1 else make_inputs(spec, elements, rng)["grad"]
        # Vary the hyperparameters too, so every scalar register matters.
        hyper = Hyper(lr=1e-3 * step, weight_decay=0.01 * step, step=step, grad_scale=1.0 if step == 1 else 0.5,
                      bias_correction=step != 3)
        scalars = prepare_scalars(hyper, spec.optimizer)
        ref = adam_update(gp, gm, gv, grad, scalars, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                          out_dtype=spec.out_dtype)
        kernel.run(grad, p, m, v, out, elements, scalars.registers(spec.optimizer), param=param)
        arrays = [("p", p, gp), ("m", m, gm), ("v", v, gv), ("out", out, ref)]
        if param is not None:
            arrays.append(("param", param, ref))
        for name, got, want in arrays:
            bad = np.flatnonzero(~bits_equal(got, want))
            results.append({"step": step, "array": name, "elements": elements, "ok": not bad.size,
                            "mismatches": int(bad.size), "first_mismatch": int(bad[0]) if bad.size else None})
    return results
