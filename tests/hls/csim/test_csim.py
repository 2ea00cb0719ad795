"""C simulation of the generated HLS kernel: bit-exact against the golden model (NaN equals NaN)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import platform
import re
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest
from kernel_variants import ALL_VARIANTS, DEFAULT_VARIANTS, spec_of

from hls import layout, regmap
from hls.csim import compile as csim_compile
from hls.csim import kernel as csim
from hls.csim.check import check_project, make_inputs
from hls.csim.kernel import DEFAULT_CHUNK, MAX_ELEMENTS, CsimKernel, aligned_zeros
from hls.errors import ToolMissing, UserError
from hls.generate import write_project
from hls.golden import Hyper, adam_update, bits_equal, first_mismatch, prepare_scalars, to_bf16_bits, widen_grad
from hls.paths import BUILD_DIR, REPO_ROOT

HEADERS = ("amd", "own")  # AMD's ap_int.h/hls_stream.h (hls4ml), our stand-ins

SLOW_VARIANTS = [v for v in ALL_VARIANTS if v not in DEFAULT_VARIANTS]
# Multiples of the lanes and of the 16-element beat, and not; around the chunk sizes (a multiple
# of 32 x lcm of the stripe counts); a size that spreads over both threads.
SIZES = (0, 1, 3, 15, 16, 17, 32, 33, 100, 193, 1000, 8195, 70_001)

_kernels: dict[tuple, CsimKernel] = {}


def _ids(variant: tuple) -> str:
    return "-".join(map(str, variant))


def kernel_for(variant: tuple, headers: str = "amd") -> CsimKernel:
    """Generate and compile a variant once per session (the .so is also cached across sessions in build/)."""
    if (variant, headers) not in _kernels:
        spec = spec_of(variant)
        project = BUILD_DIR / "test_csim" / spec.name
        write_project(spec, project)
        _kernels[variant, headers] = CsimKernel(project, headers=headers)
    return _kernels[variant, headers]


def _check(variant: tuple, sizes: tuple[int, ...], steps: int = 3, headers: str = "amd") -> None:
    kernel = kernel_for(variant, headers)
    for n in sizes:
        results = check_project(kernel, n, steps, seed=n)
        bad = [r for r in results if not r["ok"]]
        assert not bad, f"{variant} n={n}: {bad[:4]}"


@pytest.mark.parametrize("headers", HEADERS)
@pytest.mark.parametrize("variant", DEFAULT_VARIANTS, ids=_ids)
def test_bit_exact(variant: tuple, headers: str) -> None:
    """Every default variant, with AMD's headers and with ours: bit-exact against the golden model."""
    _check(variant, SIZES, headers=headers)


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


TB_VARIANTS = [DEFAULT_VARIANTS[2], DEFAULT_VARIANTS[5], DEFAULT_VARIANTS[6]]


def _run_testbench(variant: tuple, headers: str, tmp_path: Path, defines: tuple[str, ...] = ()) -> str:
    spec = spec_of(variant)
    write_project(spec, tmp_path)
    hls_dir = tmp_path / "hls"
    exe = tmp_path / "tb"
    cmd = ["g++", "-std=c++14", "-faligned-new", "-O1", "-ffp-contract=off", "-Wall", "-Wextra", "-Werror",
           "-Wno-unknown-pragmas", *defines, *csim_compile.include_flags(headers), str(hls_dir / f"{spec.name}.cpp"),
           str(hls_dir / f"{spec.name}_tb.cpp"), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[:3000]
    result = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
    assert "PASS: 0 mismatches" in result.stdout
    return result.stdout


def _seen(stdout: str) -> tuple[int, int]:
    found = re.search(r"(\d+) IEEE results seen, (\d+) FTZ results seen", stdout)
    assert found, stdout
    return int(found[1]), int(found[2])


@pytest.mark.parametrize("headers", HEADERS)
@pytest.mark.parametrize("variant", TB_VARIANTS, ids=_ids)
def test_vitis_testbench_passes_with_gcc(variant: tuple, headers: str, tmp_path: Path) -> None:
    """The generated csim_design testbench builds at -std=c++14 (as run_hls.tcl) and passes, on either header set;
    on IEEE arithmetic it sees IEEE results where IEEE and flush-to-zero differ, never FTZ ones."""
    ieee, ftz = _seen(_run_testbench(variant, headers, tmp_path))
    assert ieee > 0 and ftz == 0


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="MXCSR FTZ/DAZ is x86")
@pytest.mark.parametrize("variant", TB_VARIANTS, ids=_ids)
def test_vitis_testbench_accepts_flush_to_zero(variant: tuple, tmp_path: Path) -> None:
    """The kernel run with x86 FTZ|DAZ (as AMD's floating-point cores in cosim_design: subnormals flushed) passes
    the testbench, which says it saw FTZ results; the toolkit's own csim check stays IEEE bit-exact."""
    ieee, ftz = _seen(_run_testbench(variant, "own", tmp_path, ("-DOPTIMUSNIC_TB_FTZ",)))
    assert ftz > 0 and ieee == 0


FP16_VARIANTS = [v for v in DEFAULT_VARIANTS if v[1] == "fp16"]
ALL_FP16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)  # every fp16 bit pattern


def test_fp16_widening_is_exact_for_every_value(tmp_path: Path) -> None:
    """The kernel's own widen() (the generated source, compiled as csim compiles it, with AMD's headers)
    on all 65,536 fp16 patterns gives the golden model's fp32 bits exactly: zeros with their sign,
    subnormals normalised, normals, infinities, and every NaN with its payload (signalling NaNs stay
    signalling). Our stand-in headers build the same function in test_bit_exact's fp16 variants."""
    headers = "amd"
    spec = spec_of(FP16_VARIANTS[0])
    write_project(spec, tmp_path)
    driver = tmp_path / "widen_all.cpp"
    driver.write_text(f"""
#include <cstdio>
#include <cstring>
#include "{spec.name}.cpp"
int main() {{
  for (unsigned int h = 0; h < 65536u; ++h) {{
    const float f = {spec.name}_impl::widen((uint16_t)h);
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if (std::fwrite(&u, sizeof u, 1, stdout) != 1) return 1;
  }}
  return 0;
}}
""")
    exe = tmp_path / "widen_all"
    cmd = [csim_compile.compiler(), "-std=c++14", "-faligned-new", "-O2", *csim_compile.IEEE_FLAGS,
           *csim_compile.WARN_FLAGS, *csim_compile.include_flags(headers), "-I", str(tmp_path / "hls"),
           str(driver), "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[:3000]
    got = np.frombuffer(subprocess.run([str(exe)], capture_output=True, check=True).stdout, np.uint32)
    want = widen_grad(ALL_FP16.view(np.float16), "fp16").view(np.uint32)
    assert got.shape == want.shape == (1 << 16,)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(hex(ALL_FP16[i]), hex(got[i]), hex(want[i])) for i in bad[:8]]


@pytest.mark.parametrize("variant", FP16_VARIANTS, ids=_ids)
def test_fp16_kernel_is_bit_exact_on_every_gradient_value(variant: tuple) -> None:
    """Every fp16 pattern as a gradient through the whole kernel (widening, then the update), twice
    over in other lanes, on finite state (so no state special hides a gradient's effect): bit-exact
    against the golden model."""
    kernel = kernel_for(variant)
    spec = kernel.spec
    grad = np.concatenate([ALL_FP16, ALL_FP16[::-1]]).view(np.float16)
    n = grad.size
    rng = np.random.default_rng(16)
    s = {"grad": grad.copy(), "p": rng.standard_normal(n).astype(np.float32),
         "m": (rng.standard_normal(n) * 1e-2).astype(np.float32),
         "v": (np.abs(rng.standard_normal(n)) * 1e-4).astype(np.float32)}
    scalars = prepare_scalars(Hyper(step=2), spec.optimizer)
    gp, gm, gv = s["p"].copy(), s["m"].copy(), s["v"].copy()
    ref = adam_update(gp, gm, gv, grad, scalars, optimizer=spec.optimizer, grad_dtype="fp16",
                      out_dtype=spec.out_dtype)
    out = np.zeros(n, np.uint16 if spec.out_dtype == "bf16" else np.float32)
    kernel.run(s["grad"], s["p"], s["m"], s["v"], out, n, scalars.registers(spec.optimizer))
    for name, got, want in (("p", s["p"], gp), ("m", s["m"], gm), ("v", s["v"], gv), ("out", out, ref)):
        assert bits_equal(got, want).all(), f"{name}: first difference at {first_mismatch(got, want)}"


STREAM_VARIANTS = [v for v in DEFAULT_VARIANTS if v[4] == "stream"]


@pytest.mark.parametrize("variant", STREAM_VARIANTS, ids=_ids)
def test_stream_shards_short_and_long_reach_done(variant: tuple, tmp_path: Path) -> None:
    """A stream kernel reads to TLAST with a count guard and checks TKEEP as the RTL kernel: a short shard (TLAST
    early) returns with STATUS stream_short and p, m, v unchanged past it (write-back suppressed), a long one (no
    TLAST on the last beat) with stream_long and the stream drained to TLAST, a shard one byte short and one with a
    byte of a mid beat not kept with stream_keep and p, m, v unchanged from that beat on; right shards give STATUS 0
    and are bit-exact, one of them with null beats mid-shard and TLAST on a null beat (the testbench checks each)."""
    bits = regmap.STATUS_BITS
    out = _run_testbench(variant, "own", tmp_path)
    want = {"short": "stream_short", "long": "stream_long", "byte-short": "stream_keep", "holed": "stream_keep"}
    for shard, name in want.items():
        bit = 1 << bits[name]
        line = f"{shard} shard: STATUS 0x{bit:X} (want 0x{bit:X}), 0 elements past the shard written, stream empty"
        assert line in out.splitlines(), out


def test_stream_kernel_reports_status_at_the_manifest_offset(tmp_path: Path) -> None:
    """The HLS stream kernel's STATUS port sits at the register map's STATUS offset; memory kernels have none."""
    for variant in (STREAM_VARIANTS[0], DEFAULT_VARIANTS[0]):
        spec = spec_of(variant)
        write_project(spec, tmp_path / spec.name)
        manifest = json.loads((tmp_path / spec.name / "manifest.json").read_text())
        source = (tmp_path / spec.name / "hls" / f"{spec.name}.cpp").read_text()
        pragma = f"s_axilite port=status bundle=control offset=0x{manifest['register_map']['status']['offset']:02X}"
        assert (pragma in source) == (spec.grad_source == "stream")


@pytest.mark.parametrize("offset", [0, 16, 48])
def test_unaligned_buffers_are_bit_exact(offset: int) -> None:
    """AMD's hls::vector is alignas(64): buffers 16 and 48 bytes past a 64-byte boundary (what numpy
    gives) go through aligned copies, and equal a run on aligned buffers bit for bit."""
    kernel = kernel_for(DEFAULT_VARIANTS[1])  # bf16 grad and out, 3 state stripes
    spec = kernel.spec
    n = 3 * kernel.align + 1000  # several chunks and a tail
    s = make_inputs(spec, n, np.random.default_rng(offset))
    buffers, parts = _stripe_buffers(kernel, s, n)
    shifted: dict[str, np.ndarray] = {}
    for port, b in buffers.items():
        if port.endswith("_wr"):
            continue
        raw = aligned_zeros(b.nbytes + 64)[offset : offset + b.nbytes]
        raw[:] = b.view(np.uint8)
        shifted[port] = raw
        if port.endswith("_rd"):
            shifted[port[:-3] + "_wr"] = raw
    assert all(b.ctypes.data % 64 == offset for b in shifted.values())
    regs = prepare_scalars(Hyper(step=2), spec.optimizer).registers(spec.optimizer)
    kernel.run_ports(buffers, n, regs)
    kernel.run_ports(shifted, n, regs)
    for port, b in buffers.items():
        assert (shifted[port] == b.view(np.uint8)).all(), port


@pytest.mark.parametrize("variant", [DEFAULT_VARIANTS[0], DEFAULT_VARIANTS[1]], ids=_ids)
def test_read_ports_take_stripes_of_an_unstriped_array(variant: tuple) -> None:
    """A read port may get rows of 64 bytes a multiple of 64 apart: stripe k of the masters as
    `rows[k::stripes]` of the unstriped array (how the soft card lends a parameter as the masters),
    bit-exact with the striped copies, over several chunks, threads and a partial tail; the
    unstriped array is not written. A written port refuses such rows."""
    kernel = kernel_for(variant)
    spec = kernel.spec
    stripes = kernel.stripes.state
    n = 3 * kernel.align + 16 * stripes * 7  # several chunks, whole beats (a lent array is whole beats)
    s = make_inputs(spec, n, np.random.default_rng(5))
    buffers, parts = _stripe_buffers(kernel, s, n)
    lent, lent_parts = _stripe_buffers(kernel, s, n)
    p_rows = s["p"].copy().view(np.uint8).reshape(-1, 64)
    before = p_rows.copy()
    for k in range(stripes):
        lent[f"p{k}_rd"] = p_rows[k::stripes]  # not contiguous for stripes > 1
        lent[f"p{k}_wr"] = np.zeros_like(buffers[f"p{k}_wr"])
    assert stripes == 1 or not lent["p0_rd"].flags.c_contiguous
    regs = prepare_scalars(Hyper(step=2), spec.optimizer).registers(spec.optimizer)
    kernel.run_ports(buffers, n, regs)
    kernel.run_ports(lent, n, regs)
    assert (p_rows == before).all()
    for k in range(stripes):
        assert (lent[f"p{k}_wr"] == buffers[f"p{k}_wr"]).all(), k
    for name in ("m", "v", "out"):
        for a, b in zip(parts[name], lent_parts[name], strict=True):
            assert (a == b).all(), name
    if stripes > 1:
        with pytest.raises(ValueError, match="writes"):
            kernel.run_ports({**lent, "p0_wr": p_rows[0::stripes]}, n, regs)
        with pytest.raises(ValueError, match="C-contiguous"):
            kernel.run_ports({**lent, "p0_rd": p_rows[0::stripes, :32]}, n, regs)


def test_concurrent_calls_share_the_workers() -> None:
    """Two calls at once (a card's compute units, run by the driver concurrently) on the library's
    shared worker pool, each bit-exact."""
    kernel = kernel_for(DEFAULT_VARIANTS[0])
    spec = kernel.spec
    n = 300_001
    regs = prepare_scalars(Hyper(step=4), spec.optimizer).registers(spec.optimizer)
    cases = [make_inputs(spec, n, np.random.default_rng(20 + i)) for i in range(2)]
    want = []
    for c in cases:
        gp, gm, gv = c["p"].copy(), c["m"].copy(), c["v"].copy()
        out = adam_update(gp, gm, gv, c["grad"], prepare_scalars(Hyper(step=4), spec.optimizer),
                          optimizer=spec.optimizer)
        want.append((gp, gm, gv, out))
    outs = [np.zeros(n, np.float32) for _ in cases]
    threads = [threading.Thread(target=kernel.run, args=(c["grad"], c["p"], c["m"], c["v"], o, n, regs))
               for c, o in zip(cases, outs, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c, o, (gp, gm, gv, ref) in zip(cases, outs, want, strict=True):
        for got, exp in ((c["p"], gp), (c["m"], gm), (c["v"], gv), (o, ref)):
            assert bits_equal(got, exp).all()


def test_threads_must_be_positive() -> None:
    project = kernel_for(DEFAULT_VARIANTS[0]).project_dir
    with pytest.raises(UserError, match="threads"):
        CsimKernel(project, threads=0)


def test_header_set_is_checked() -> None:
    with pytest.raises(UserError, match="amd, own"):
        csim_compile.include_flags("vendor")


def test_missing_amd_headers_say_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No hls4ml, or an hls4ml without the header files: one line naming the pinned wheel to install."""
    monkeypatch.setattr(csim_compile.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ToolMissing, match=r"pip install --no-deps hls4ml==") as err:
        csim_compile.amd_headers_dir()
    assert "\n" not in str(err.value) and "--headers own" in str(err.value)

    class Found:
        submodule_search_locations = [str(tmp_path)]

    monkeypatch.setattr(csim_compile.importlib.util, "find_spec", lambda name: Found())
    with pytest.raises(ToolMissing, match="lacks ap_int.h"):
        csim_compile.amd_headers_dir()


def test_hls4ml_pin_is_pyproject_s() -> None:
    """The wheel the Makefile installs (pyproject.toml) is the one csim names, and it is installed."""
    pin = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["optimusnic"]["csim-headers"]
    assert pin == csim_compile.HLS4ML_REQUIREMENT
    from importlib.metadata import version

    assert version("hls4ml") == pin.split("==")[1]
    assert "hls4ml" not in sys.modules  # found without importing it (its dependencies are not installed)


def test_library_exports_only_its_abi() -> None:
    """The replaced aligned operator new/delete stay inside the library (exports.map)."""
    lib = kernel_for(DEFAULT_VARIANTS[0]).library
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    assert {"optimusnic_csim_abi", "optimusnic_csim_ports", "optimusnic_csim_run"} <= names
    assert not [n for n in names if "Znw" in n or "Zdl" in n], names


@pytest.mark.parametrize("headers", HEADERS)
def test_stream_warnings_are_counted_not_printed(headers: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    """A kernel whose processes disagree on a beat count (its output store reads one beat fewer than
    compute writes): the simulation model's warning lines (AMD's and ours print the same) are taken
    off std::cout, counted, and reported as a CsimError."""
    spec = spec_of(DEFAULT_VARIANTS[2])  # one stripe of every array
    write_project(spec, tmp_path)
    source = tmp_path / "hls" / f"{spec.name}.cpp"
    loop = "for (unsigned int b = 0; b < count; ++b) {\n#pragma HLS PIPELINE II=1\n    out0[b] = s.read();"
    text = source.read_text()
    assert loop in text
    source.write_text(text.replace(loop, loop.replace("b < count", "b + 1 < count")))
    # The project is edited on purpose: its manifest records the edited source (csim compiles only
    # bytes with the recorded sha256) and is read without re-rendering the spec.
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["files"][f"hls/{spec.name}.cpp"] = hashlib.sha256(source.read_bytes()).hexdigest()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(csim, "load_manifest", lambda d: json.loads((Path(d) / "manifest.json").read_text()))
    kernel = CsimKernel(tmp_path, headers=headers)
    n = 5000
    f = np.zeros(n, np.float32)
    regs = prepare_scalars(Hyper(), spec.optimizer).registers(spec.optimizer)
    capfd.readouterr()
    with pytest.raises(csim_compile.CsimError, match=r"reported \d+ stream underflow\(s\), leftover beat"):
        kernel.run(np.zeros(n, np.float16), f, f.copy(), f.copy(), np.zeros(n, np.uint16), n, regs)
    assert "WARNING" not in capfd.readouterr().out


def test_c_abi_refuses_short_buffers_untouched() -> None:
    """Called directly through its C ABI, the library checks each buffer's length (and the layout
    words) before touching memory: a port one beat short is refused with -4 and nothing written."""
    kernel = kernel_for(DEFAULT_VARIANTS[0])
    n = 1000
    need = kernel.port_bytes(n)
    buffers = [np.full(need[p], 0x5A, np.uint8) for p in kernel.ports]  # real buffers are large enough
    ports = (ctypes.c_void_p * len(buffers))(*[b.ctypes.data for b in buffers])
    bits = kernel.scalar_bits(prepare_scalars(Hyper(), "adamw").registers("adamw"))

    def call(lengths: list[int], info: np.ndarray, align: int) -> int:
        arr = (ctypes.c_ulonglong * len(lengths))(*lengths)
        return kernel._run(ports, arr, info.ctypes.data, len(buffers), None, 0, 0, None, 0, 0, n, bits.ctypes.data,
                           1, kernel.chunk, align)

    good = [b.nbytes for b in buffers]
    short = [*good[:-1], good[-1] - 64]  # the output stripe one beat short
    assert call(short, kernel._info, kernel.align) == -4
    bad_info = kernel._info.copy()
    bad_info[0, 0] = 8  # not 16 or 32 elements a beat
    assert call(good, bad_info, kernel.align) == -4
    assert call(good, kernel._info, 16) == -4  # chunks that would not start a round of the 2 state stripes
    bad_pitch = kernel._info.copy()
    bad_pitch[0, 4] = 96  # beats that would not start on 64-byte rows
    assert call(good, bad_pitch, kernel.align) == -4
    assert all((b == 0x5A).all() for b in buffers)
    assert call(good, kernel._info, kernel.align) == 0


def test_hls_vector_stand_in_behaves_as_an_array(tmp_path: Path) -> None:
    """Our hls::vector keeps power-of-two beats in one SIMD word (for speed) and others in an array;
    both are the vendor type's value semantics: value-initialised to zero, broadcast, per-element
    access in order, aligned to the largest power of two dividing their size, and (as in AMD's
    hls::stream, which returns T() from an empty read) copied whole."""
    src = tmp_path / "vec.cpp"
    src.write_text(r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "hls_vector.h"
template <class T, std::size_t N> int check() {
  hls::vector<T, N> z = hls::vector<T, N>();
  for (std::size_t i = 0; i < N; ++i) if (z[i] != T(0)) return 1;
  hls::vector<T, N> b(T(7));
  for (std::size_t i = 0; i < N; ++i) if (b[i] != T(7)) return 2;
  for (std::size_t i = 0; i < N; ++i) b[i] = T(i + 1);
  const hls::vector<T, N> c = b;
  T flat[N];
  std::memcpy(flat, &c, sizeof(flat));
  for (std::size_t i = 0; i < N; ++i) if (c[i] != T(i + 1) || flat[i] != T(i + 1)) return 3;
  if (sizeof(c) != sizeof(T) * N || alignof(hls::vector<T, N>) != hls::details::gp2(sizeof(T) * N)) return 4;
  return 0;
}
int main() {
  const int r[] = {check<float, 16>(), check<std::uint16_t, 32>(), check<std::uint16_t, 16>(), check<float, 3>(),
                   check<float, 1>()};
  for (int i = 0; i < 5; ++i) if (r[i]) { std::printf("case %d failed: %d\n", i, r[i]); return 1; }
  return 0;
}
""")
    exe = tmp_path / "vec"
    subprocess.run([csim_compile.compiler(), "-std=c++14", "-O2", "-Wall", "-Wextra", "-Werror", "-I",
                    str(csim_compile.HLS_INCLUDE_DIR), "-o", str(exe), str(src)],
                   check=True, capture_output=True, text=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
