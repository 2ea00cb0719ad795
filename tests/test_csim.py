"""C simulation of the generated HLS kernel: bit-exact against the golden model (NaN equals NaN)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hls.csim import MAX_ELEMENTS, CsimKernel, check_project, make_inputs
from hls.generate import write_project
from hls.golden import Hyper, adam_update, bits_equal, prepare_scalars
from hls.paths import BUILD_DIR, HLS_INCLUDE_DIR
from hls.spec import KernelSpec

# (optimizer, grad dtype, out dtype, lanes, grad source): every grad dtype twice, both outputs,
# lanes 1/4/16, both optimizers, the stream source twice. The full cross product is `slow`.
DEFAULT_VARIANTS = [
    ("adamw", "fp32", "fp32", 16, "memory"),
    ("adam", "bf16", "bf16", 4, "memory"),
    ("adamw", "fp16", "bf16", 1, "memory"),
    ("adam", "fp16", "fp32", 16, "memory"),
    ("adam", "fp32", "bf16", 16, "stream"),
    ("adamw", "bf16", "fp32", 4, "stream"),
]
ALL_VARIANTS = list(itertools.product(("adamw", "adam"), ("fp32", "bf16", "fp16"), ("fp32", "bf16"), (1, 4, 16),
                                      ("memory", "stream")))
SLOW_VARIANTS = [v for v in ALL_VARIANTS if v not in DEFAULT_VARIANTS]
# Multiples of the lanes and of the 16-element beat, and not; the harness's 32-element chunk
# granule and the 8192-element chunk boundary; a size that spreads over both threads.
SIZES = (1, 3, 15, 16, 17, 32, 33, 100, 1000, 8195, 70_001)

_kernels: dict[tuple, CsimKernel] = {}


def spec_of(variant: tuple) -> KernelSpec:
    opt, gd, od, lanes, src = variant
    return KernelSpec(target="u55c", optimizer=opt, grad_dtype=gd, out_dtype=od, lanes=lanes, grad_source=src,
                      name=f"k_{opt}_{gd}_{od}_l{lanes}_{src}")


def kernel_for(variant: tuple) -> CsimKernel:
    """Generate and compile a variant once per session (the .so is also cached across sessions in build/)."""
    if variant not in _kernels:
        spec = spec_of(variant)
        project = BUILD_DIR / "test_csim" / spec.name
        write_project(spec, project)
        _kernels[variant] = CsimKernel(project)
    return _kernels[variant]


def _check(variant: tuple, sizes: tuple[int, ...], steps: int = 3) -> None:
    kernel = kernel_for(variant)
    for n in sizes:
        results = check_project(kernel, n, steps, seed=n)
        bad = [r for r in results if not r["ok"]]
        assert not bad, f"{variant} n={n}: {bad[:4]}"


@pytest.mark.parametrize("variant", DEFAULT_VARIANTS, ids=lambda v: "-".join(map(str, v)))
def test_bit_exact(variant: tuple) -> None:
    _check(variant, SIZES)


@pytest.mark.slow
@pytest.mark.parametrize("variant", SLOW_VARIANTS, ids=lambda v: "-".join(map(str, v)))
def test_bit_exact_full(variant: tuple) -> None:
    _check(variant, SIZES + (4096, 65_536, 1_000_003), steps=4)


def test_single_thread_matches_threads() -> None:
    kernel = kernel_for(DEFAULT_VARIANTS[0])
    spec = kernel.spec
    n = 200_003
    a = make_inputs(spec, n, np.random.default_rng(5))
    b = {k: x.copy() for k, x in a.items()}
    regs = prepare_scalars(Hyper(step=2), spec.optimizer).registers(spec.optimizer)
    outs = []
    for threads, s in ((1, a), (2, b)):
        kernel.threads = threads
        out = np.empty(n, np.float32)
        kernel.run(s["grad"], s["p"], s["m"], s["v"], out, n, regs)
        outs.append(out)
    kernel.threads = 2
    for name in ("p", "m", "v"):
        assert bits_equal(a[name], b[name]).all()
    assert bits_equal(outs[0], outs[1]).all()


@pytest.mark.parametrize("variant", [DEFAULT_VARIANTS[1], DEFAULT_VARIANTS[2], DEFAULT_VARIANTS[4]],
                         ids=lambda v: "-".join(map(str, v)))
@pytest.mark.parametrize("n", [1, 5, 16, 17, 31, 47])
def test_kernel_tail_leaves_padding_untouched(variant: tuple, n: int) -> None:
    """One kernel call on whole-beat buffers (as on the card): lanes past n keep their old state."""
    kernel = kernel_for(variant)
    spec = kernel.spec
    padded = 64  # whole beats for every dtype
    s = make_inputs(spec, padded, np.random.default_rng(n))
    p, m, v = s["p"].copy(), s["m"].copy(), s["v"].copy()
    out = np.zeros(padded, np.uint16 if spec.out_dtype == "bf16" else np.float32)
    scalars = prepare_scalars(Hyper(), spec.optimizer)
    gp, gm, gv = p[:n].copy(), m[:n].copy(), v[:n].copy()
    ref = adam_update(gp, gm, gv, s["grad"][:n], scalars, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                      out_dtype=spec.out_dtype)
    kernel.run_direct(s["grad"], p, m, v, out, n, scalars.registers(spec.optimizer))
    for got, want in ((p[:n], gp), (m[:n], gm), (v[:n], gv), (out[:n], ref)):
        assert bits_equal(got, want).all()
    for got, old in ((p, s["p"]), (m, s["m"]), (v, s["v"])):
        assert (got[n:].view(np.uint32) == old[n:].view(np.uint32)).all()


def test_zero_elements_is_a_no_op() -> None:
    kernel = kernel_for(DEFAULT_VARIANTS[0])
    p = np.ones(4, np.float32)
    regs = prepare_scalars(Hyper(), "adamw").registers("adamw")
    kernel.run(np.ones(4, np.float32), p, p.copy(), p.copy(), np.zeros(4, np.float32), 0, regs)
    assert (p == 1).all()


def test_run_validates_buffers_and_scalars() -> None:
    kernel = kernel_for(DEFAULT_VARIANTS[1])  # bf16 grad (uint16), bf16 out
    n = 10
    f = np.zeros(n, np.float32)
    g = np.zeros(n, np.uint16)
    o = np.zeros(n, np.uint16)
    regs = prepare_scalars(Hyper(), "adam").registers("adam")
    with pytest.raises(ValueError, match="grad"):
        kernel.run(np.zeros(n, np.float32), f, f.copy(), f.copy(), o, n, regs)
    with pytest.raises(ValueError, match="out"):
        kernel.run(g, f, f.copy(), f.copy(), np.zeros(n, np.float32), n, regs)
    with pytest.raises(ValueError, match="fewer than"):
        kernel.run(g, f, f.copy(), f[:5].copy(), o, n, regs)
    with pytest.raises(ValueError, match="contiguous"):
        kernel.run(g, np.zeros(2 * n, np.float32)[::2], f.copy(), f.copy(), o, n, regs)
    with pytest.raises(ValueError, match="registers"):
        kernel.run(g, f, f.copy(), f.copy(), o, n, prepare_scalars(Hyper(), "adamw").registers("adamw"))
    with pytest.raises(ValueError, match="32-bit"):
        kernel.run(g, f, f.copy(), f.copy(), o, n, {**regs, "b1": 1 << 32})
    with pytest.raises(ValueError, match="n:"):
        kernel.run(g, f, f.copy(), f.copy(), o, MAX_ELEMENTS + 1, regs)


@pytest.mark.parametrize("variant", [DEFAULT_VARIANTS[2], DEFAULT_VARIANTS[5]], ids=lambda v: "-".join(map(str, v)))
def test_vitis_testbench_passes_with_gcc(variant: tuple, tmp_path: Path) -> None:
    """The generated csim_design testbench builds and passes against our simulation headers."""
    spec = spec_of(variant)
    write_project(spec, tmp_path)
    hls_dir = tmp_path / "hls"
    exe = tmp_path / "tb"
    cmd = ["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas",
           "-I", str(HLS_INCLUDE_DIR), str(hls_dir / f"{spec.name}.cpp"), str(hls_dir / f"{spec.name}_tb.cpp"),
           "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
    assert "PASS" in result.stdout
