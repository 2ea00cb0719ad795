"""C simulation of the HLS kernel's parameter stream (out_sink "memory+stream"): what the kernel
sends on its `param` AXI4-Stream is the out array, bit-exact against the golden model and equal to
what it wrote to its out stripes; the harness checks every packet's beat count, TKEEP, TSTRB,
TLAST and zero padding (a wrong one fails the run)."""

from __future__ import annotations

import numpy as np
import pytest

from hls.csim.check import check_project, make_inputs
from hls.csim.kernel import CsimKernel
from hls.generate import write_project
from hls.golden import Hyper, adam_update, bits_equal, prepare_scalars
from hls.paths import BUILD_DIR
from hls.spec import STORAGE_DTYPES, KernelSpec

# bf16 out from the gradient stream (the ring's kernel; 2 out stripes), and fp32 out from memory.
SPECS = [
    KernelSpec(optimizer="adamw", grad_dtype="bf16", out_dtype="bf16", grad_source="stream", lanes=16, stripes=3,
               rate_gps=9.0, clock_mhz=600.0, out_sink="memory+stream", name="k_ps_bf16_stream"),
    KernelSpec(optimizer="adam", grad_dtype="fp32", out_dtype="fp32", lanes=4, stripes=3, out_sink="memory+stream",
               name="k_ps_fp32_memory"),
]
# 0, one element, a partial beat, whole beats, several beats per stripe, more than one chunk (8192)
SIZES = (0, 1, 5, 32, 33, 1000, 8195, 20_011)

_kernels: dict[tuple[str, str], CsimKernel] = {}


def kernel_for(spec: KernelSpec, headers: str = "amd") -> CsimKernel:
    if (spec.name, headers) not in _kernels:
        project = BUILD_DIR / "test_csim_param_stream" / spec.name  # not test_csim.py's folder: xdist workers
        write_project(spec, project)
        _kernels[spec.name, headers] = CsimKernel(project, headers=headers)
    return _kernels[spec.name, headers]


# AMD's headers for both; our stand-ins for one (the harness reads the packet through both)
@pytest.mark.parametrize(("spec", "headers"), [(SPECS[0], "amd"), (SPECS[1], "amd"), (SPECS[0], "own")],
                         ids=lambda x: x.name if isinstance(x, KernelSpec) else x)
def test_param_stream_bit_exact(spec: KernelSpec, headers: str) -> None:
    kernel = kernel_for(spec, headers)
    if spec.out_dtype == "bf16":
        assert kernel.stripes.out == 2  # the stream interleaves the out stripes back into element order
    for n in SIZES:
        bad = [r for r in check_project(kernel, n, 2, seed=n) if not r["ok"]]
        assert not bad, f"{spec.name} n={n}: {bad[:4]}"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_param_stream_equals_memory_out(spec: KernelSpec) -> None:
    """The stream and the out stripes carry the same bytes (NaN payloads included), on one run
    that spans several chunks and threads."""
    kernel = kernel_for(spec)
    n = 50_003
    data = make_inputs(spec, n, np.random.default_rng(9))
    out = np.zeros(n, STORAGE_DTYPES[spec.out_dtype])
    param = np.full(n, 0x5A5A, out.dtype) if out.dtype == np.uint16 else np.full(n, np.nan, out.dtype)
    scalars = prepare_scalars(Hyper(lr=1e-2, weight_decay=0.1, step=4), spec.optimizer)
    p0, m0, v0 = data["p"].copy(), data["m"].copy(), data["v"].copy()
    kernel.run(data["grad"], data["p"], data["m"], data["v"], out, n, scalars.registers(spec.optimizer),
               param=param)
    assert param.tobytes() == out.tobytes()
    want = adam_update(p0, m0, v0, data["grad"], scalars, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                       out_dtype=spec.out_dtype)
    assert bits_equal(param, want).all()


def test_param_argument_is_checked() -> None:
    kernel = kernel_for(SPECS[1])
    n = 40
    data = make_inputs(kernel.spec, n, np.random.default_rng(1))
    out = np.zeros(n, np.float32)
    regs = prepare_scalars(Hyper(), "adam").registers("adam")
    with pytest.raises(ValueError, match="param"):
        kernel.run(data["grad"], data["p"], data["m"], data["v"], out, n, regs, param=np.zeros(n - 1, np.float32))
    buffers, _, _ = kernel.stripe_arrays(data["grad"], data["p"], data["m"], data["v"], n)
    with pytest.raises(ValueError, match="missing \\['param'\\]"):
        kernel.run_ports(buffers, n, regs)
