"""C simulation of the generated HLS kernel: bit-exact against the golden model (NaN equals NaN)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hls import layout
from hls.csim import DEFAULT_CHUNK, MAX_ELEMENTS, CsimKernel, check_project, make_inputs
from hls.generate import write_project
from hls.golden import Hyper, adam_update, bits_equal, prepare_scalars, to_bf16_bits
from hls.paths import BUILD_DIR, HLS_INCLUDE_DIR
from hls.spec import KernelSpec

# Memory plans (design.md section 3b): stripes of grad / each of p, m, v / out on the U55C.
PLANS = {
    "s1": {"stripes": 1},  # 1 / 1 / 1
    "auto": {},  # sizing's choice for the line rate: 1 / 2 / 1 at 16 lanes
    "s3": {"stripes": 3},  # 1 / 3 / 1
    "wide": {"stripes": 3, "rate_gps": 9.0, "clock_mhz": 600.0},  # 16 lanes: 2 / 3 / 2 (3 for fp32 out)
}
# (optimizer, grad dtype, out dtype, lanes, grad source, plan): every grad dtype twice, both
# outputs, lanes 1/4/16, both optimizers, the stream source twice, every plan, gradient and
# output stripes > 1 with 16-bit and fp32 data. The full cross product is `slow`.
DEFAULT_VARIANTS = [
    ("adamw", "fp32", "fp32", 16, "memory", "auto"),
    ("adam", "bf16", "bf16", 4, "memory", "s3"),
    ("adamw", "fp16", "bf16", 1, "memory", "s1"),
    ("adam", "fp16", "fp32", 16, "memory", "wide"),
    ("adam", "fp32", "bf16", 16, "stream", "auto"),
    ("adamw", "bf16", "fp32", 4, "stream", "s3"),
    ("adamw", "fp32", "bf16", 16, "memory", "wide"),
]
_CROSS = list(itertools.product(("adamw", "adam"), ("fp32", "bf16", "fp16"), ("fp32", "bf16"), (1, 4, 16),
                                ("memory", "stream")))
# Every combination once, each with a plan taken in turn, so the sweep meets every plan too.
ALL_VARIANTS = [(*v, list(PLANS)[i % len(PLANS)]) for i, v in enumerate(_CROSS)]
SLOW_VARIANTS = [v for v in ALL_VARIANTS if v not in DEFAULT_VARIANTS]
# Multiples of the lanes and of the 16-element beat, and not; around the chunk sizes (a multiple
# of 32 x lcm of the stripe counts); a size that spreads over both threads.
SIZES = (0, 1, 3, 15, 16, 17, 32, 33, 100, 193, 1000, 8195, 70_001)

_kernels: dict[tuple, CsimKernel] = {}


def _ids(variant: tuple) -> str:
    return "-".join(map(str, variant))


def spec_of(variant: tuple) -> KernelSpec:
    opt, gd, od, lanes, src, plan = variant
    return KernelSpec(target="u55c", optimizer=opt, grad_dtype=gd, out_dtype=od, lanes=lanes, grad_source=src,
                      name=f"k_{opt}_{gd}_{od}_l{lanes}_{src}_{plan}", **PLANS[plan])


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


@pytest.mark.parametrize("variant", DEFAULT_VARIANTS, ids=_ids)
def test_bit_exact(variant: tuple) -> None:
    _check(variant, SIZES)


@pytest.mark.slow
@pytest.mark.parametrize("variant", SLOW_VARIANTS, ids=_ids)
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


def test_default_variants_cover_the_stripe_plans() -> None:
    """The default variants exercise 1, 2 and 3 state stripes and more than one grad and out stripe."""
    counts = [kernel_for(v).stripes for v in DEFAULT_VARIANTS]
    assert {c.state for c in counts} >= {1, 2, 3}
    assert max(c.grad for c in counts) >= 2 and max(c.out for c in counts) >= 2
    assert any(c.out >= 2 for c, v in zip(counts, DEFAULT_VARIANTS, strict=True) if v[2] == "bf16")


def _stripe_buffers(kernel: CsimKernel, arrays: dict[str, np.ndarray], out_elems: int) -> tuple[dict, dict]:
    """Whole arrays -> {port: stripe buffer} as the host allocates them (one buffer for _rd and _wr)."""
    s = kernel.stripes
    parts = {name: layout.split(arrays[name], s.state) for name in ("p", "m", "v")}
    out_dtype = np.uint16 if kernel.spec.out_dtype == "bf16" else np.float32
    parts["out"] = layout.split(np.zeros(out_elems, out_dtype), s.out)
    buffers: dict[str, np.ndarray] = {}
    if kernel.spec.grad_source == "stream":
        buffers["grad"] = arrays["grad"]
    else:
        parts["grad"] = layout.split(arrays["grad"], s.grad)
        buffers.update({f"grad{k}": b for k, b in enumerate(parts["grad"])})
    for name in ("p", "m", "v"):
        for k, b in enumerate(parts[name]):
            buffers[f"{name}{k}_rd"] = buffers[f"{name}{k}_wr"] = b
    buffers.update({f"out{k}": b for k, b in enumerate(parts["out"])})
    return buffers, parts


@pytest.mark.parametrize("variant", [DEFAULT_VARIANTS[1], DEFAULT_VARIANTS[2], DEFAULT_VARIANTS[3],
                                     DEFAULT_VARIANTS[4], DEFAULT_VARIANTS[6]], ids=_ids)
def test_run_ports_tail_leaves_padding_untouched(variant: tuple) -> None:
    """Stripe buffers as on the card (whole beats, junk past n): lanes past n keep their old state,
    out carries the unchanged p there, and a bf16 output beat past the last compute beat is zero."""
    kernel = kernel_for(variant)
    spec = kernel.spec
    padded = 8 * kernel.align  # whole beats in every stripe of every array, several chunks
    out_dtype = np.uint16 if spec.out_dtype == "bf16" else np.float32
    scalars = prepare_scalars(Hyper(), spec.optimizer)
    sizes = (1, 5, 16, 17, 31, 47, kernel.align - 1, kernel.align + 17, 3 * kernel.align + 33, padded)
    kernel.chunk = kernel.align  # one chunk per round of stripes: many in-place calls and their seams
    try:
        _tail_cases(kernel, sizes, padded, out_dtype, scalars)
    finally:
        kernel.chunk = DEFAULT_CHUNK


def _tail_cases(kernel: CsimKernel, sizes: tuple[int, ...], padded: int, out_dtype: type, scalars) -> None:
    spec = kernel.spec
    for n in sizes:
        s = make_inputs(spec, padded, np.random.default_rng(n))
        buffers, parts = _stripe_buffers(kernel, s, padded)
        gp, gm, gv = s["p"][:n].copy(), s["m"][:n].copy(), s["v"][:n].copy()
        ref = adam_update(gp, gm, gv, s["grad"][:n], scalars, optimizer=spec.optimizer, grad_dtype=spec.grad_dtype,
                          out_dtype=spec.out_dtype)
        kernel.run_ports(buffers, n, scalars.registers(spec.optimizer))
        p, m, v = (layout.join(parts[a], padded, np.float32) for a in ("p", "m", "v"))
        out = layout.join(parts["out"], padded, out_dtype)
        for got, want in ((p[:n], gp), (m[:n], gm), (v[:n], gv), (out[:n], ref)):
            assert bits_equal(got, want).all(), f"n={n}"
        for got, old in ((p, s["p"]), (m, s["m"]), (v, s["v"])):
            assert (got[n:].view(np.uint32) == old[n:].view(np.uint32)).all(), f"n={n}"
        # The output's last beat past n: the unchanged p in the last compute beat, zero beyond it.
        per_beat = 64 // out.itemsize
        end = -(-n // per_beat) * per_beat
        lanes = np.arange(n, end)
        old_p = to_bf16_bits(s["p"]) if spec.out_dtype == "bf16" else s["p"]
        in_beat = lanes < -(-n // 16) * 16
        assert bits_equal(out[lanes[in_beat]], old_p[lanes[in_beat]]).all(), f"n={n}"
        assert (out[lanes[~in_beat]] == 0).all(), f"n={n}"
        assert (out[end:] == 0).all(), f"n={n}: written past the last output beat"


def test_run_ports_reads_rd_and_writes_wr() -> None:
    """Separate buffers for a stripe's read and write ports: read from _rd only, written to _wr only."""
    kernel = kernel_for(DEFAULT_VARIANTS[0])
    spec = kernel.spec
    n = 1000
    s = make_inputs(spec, n, np.random.default_rng(3))
    buffers, parts = _stripe_buffers(kernel, s, n)
    for name in ("p", "m", "v"):
        for k in range(kernel.stripes.state):
            buffers[f"{name}{k}_wr"] = np.full_like(buffers[f"{name}{k}_rd"], 0xAB)
    before = {k: b.copy() for k, b in buffers.items() if k.endswith("_rd")}
    scalars = prepare_scalars(Hyper(), spec.optimizer)
    gp, gm, gv = s["p"].copy(), s["m"].copy(), s["v"].copy()
    adam_update(gp, gm, gv, s["grad"], scalars, optimizer=spec.optimizer)
    kernel.run_ports(buffers, n, kernel.scalar_bits(scalars.registers(spec.optimizer)))
    for name, want in (("p", gp), ("m", gm), ("v", gv)):
        wr = [buffers[f"{name}{k}_wr"] for k in range(kernel.stripes.state)]
        assert bits_equal(layout.join(wr, n, np.float32), want).all()
    for k, b in before.items():
        assert (buffers[k] == b).all(), f"{k} was written"


@pytest.mark.parametrize("variant", [DEFAULT_VARIANTS[3], DEFAULT_VARIANTS[4]], ids=_ids)
def test_run_ports_on_chunks_of_a_shard(variant: tuple) -> None:
    """A shard run as chunks (views from port_offsets) equals one run on the whole shard."""
    kernel = kernel_for(variant)
    spec = kernel.spec
    n = 5 * kernel.align + 21
    s = make_inputs(spec, n, np.random.default_rng(11))
    whole, whole_parts = _stripe_buffers(kernel, s, n)
    chunked, parts = _stripe_buffers(kernel, s, n)
    regs = prepare_scalars(Hyper(step=3), spec.optimizer).registers(spec.optimizer)
    kernel.run_ports(whole, n, regs)
    for first in range(0, n, 2 * kernel.align):
        count = min(2 * kernel.align, n - first)
        offsets = kernel.port_offsets(first)
        views = {port: (b[first:] if port == "grad" else b[offsets[port]:])  # the stream gradient is typed
                 for port, b in chunked.items()}
        kernel.run_ports(views, count, regs)
    for name in ("p", "m", "v", "out"):
        for a, b in zip(whole_parts[name], parts[name], strict=True):
            assert (a == b).all(), name
    with pytest.raises(ValueError, match="multiple of"):
        kernel.port_offsets(kernel.align // 2)


def test_run_ports_validates_buffers() -> None:
    kernel = kernel_for(DEFAULT_VARIANTS[0])  # 1 grad, 2 state, 1 out stripes
    n = 100
    need = kernel.port_bytes(n)
    assert need == {p: layout.stripe_bytes(n, 4, kernel.stripes.of(kernel.port_info[p].array),
                                           kernel.port_info[p].index) for p in kernel.ports}
    good = {p: np.zeros(need[p], np.uint8) for p in kernel.ports}
    regs = prepare_scalars(Hyper(), "adamw").registers("adamw")
    kernel.run_ports(good, n, regs)
    with pytest.raises(ValueError, match="missing"):
        kernel.run_ports({k: b for k, b in good.items() if k != "p1_wr"}, n, regs)
    with pytest.raises(ValueError, match="unexpected"):
        kernel.run_ports({**good, "grad": good["grad0"]}, n, regs)
    with pytest.raises(ValueError, match="fewer than"):
        kernel.run_ports({**good, "v1_rd": good["v1_rd"][:-64]}, n, regs)
    readonly = good["out0"].copy()
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        kernel.run_ports({**good, "out0": readonly}, n, regs)
    with pytest.raises(ValueError, match="uint32"):
        kernel.run_ports(good, n, np.zeros(3, np.uint32))
    with pytest.raises(ValueError, match="n:"):
        kernel.run_ports(good, -1, regs)


def test_zero_elements_is_a_no_op() -> None:
    kernel = kernel_for(DEFAULT_VARIANTS[0])
    p = np.ones(4, np.float32)
    regs = prepare_scalars(Hyper(), "adamw").registers("adamw")
    kernel.run(np.ones(4, np.float32), p, p.copy(), p.copy(), np.zeros(4, np.float32), 0, regs)
    assert (p == 1).all()
    kernel.run_ports({port: np.zeros(0, np.uint8) for port in kernel.ports}, 0, regs)


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


@pytest.mark.parametrize("variant", [DEFAULT_VARIANTS[2], DEFAULT_VARIANTS[5], DEFAULT_VARIANTS[6]], ids=_ids)
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


def test_adam_without_weight_decay_keeps_infinite_params() -> None:
    """Like torch.optim.Adam, the kernel skips the L2 term when weight_decay is 0: p = +-inf stays
    +-inf (0 * inf would be NaN), bit-exact with the golden model."""
    kernel = kernel_for(DEFAULT_VARIANTS[3])  # adam, fp16 grads, fp32 out
    n = 40
    p = np.linspace(-3, 3, n).astype(np.float32)
    p[::7] = np.inf
    p[3::7] = -np.inf
    g = np.linspace(-1, 1, n).astype(np.float16)
    regs = prepare_scalars(Hyper(step=1, lr=1e-2, weight_decay=0.0), "adam").registers("adam")
    gp, gm, gv = p.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    want = adam_update(gp, gm, gv, g, prepare_scalars(Hyper(step=1, lr=1e-2, weight_decay=0.0), "adam"),
                       optimizer="adam", grad_dtype="fp16")
    m, v, out = np.zeros(n, np.float32), np.zeros(n, np.float32), np.empty(n, np.float32)
    kernel.run(g, p, m, v, out, n, regs)
    assert not np.isnan(out).any() and np.isinf(out[::7]).all()
    assert bits_equal(out, want).all() and bits_equal(p, gp).all() and bits_equal(m, gm).all()
