"""hls/vitis/burst_check.py: the static burst check of generated HLS C++, on small snippets."""

from __future__ import annotations

import pytest

from hls.generate import render
from hls.spec import KernelSpec
from hls.vitis.burst_check import check_hls_source

# The striped style of the rewritten kernel: one load_* per read port, one store_* per write port.
STRIPED = """
#include "k.h"
namespace k_impl {
static void load_p0(const beat* ptr, hls::stream<beat>& s, unsigned int nb) {
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    s.write(ptr[b]);
  }
}
static void store_p0(beat* ptr, hls::stream<beat>& s, unsigned int nb) {
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    ptr[b] = s.read();  // not a read of ptr: s.read()
  }
}
static void compute(hls::stream<beat>& in, hls::stream<beat>& out, unsigned int nb) {
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    out.write(in.read());
  }
}
}  // namespace k_impl

extern "C" void k(const k_impl::beat* p0_rd, k_impl::beat* p0_wr, unsigned int nb) {
#pragma HLS INTERFACE m_axi port=p0_rd bundle=gmem_p0_rd offset=slave max_read_burst_length=64
#pragma HLS INTERFACE m_axi port=p0_wr bundle=gmem_p0_wr offset=slave max_write_burst_length=64
#pragma HLS INTERFACE s_axilite port=return bundle=control
#pragma HLS DATAFLOW
  using namespace k_impl;
  hls::stream<beat> a("a"), c("c");
  load_p0(p0_rd, a, nb);
  compute(a, c, nb);
  store_p0(p0_wr, c, nb);
}
"""


def top(body: str, pragmas: str, params: str = "beat* p, beat* m, unsigned int nb", helpers: str = "") -> str:
    return f"""{helpers}
extern "C" void k({params}) {{
{pragmas}
{body}
}}
"""


TWO = ("#pragma HLS INTERFACE m_axi port=p bundle=gmem_p\n"
       "#pragma HLS INTERFACE m_axi port=m bundle=gmem_m")


def test_striped_load_store_is_clean() -> None:
    assert check_hls_source(STRIPED) == []


def test_rmw_in_a_static_function_is_followed_to_the_top_pointer() -> None:
    helpers = """
static void compute(beat* q, const beat* r, unsigned int nb) {
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    const beat x = q[b];
    q[b] = x + r[b];
  }
}"""
    problems = check_hls_source(top("  compute(p, m, nb);", TWO, helpers=helpers))
    assert len(problems) == 1, problems
    assert problems[0].startswith("p (bundle gmem_p): read and written in one loop (compute()")


def test_rmw_two_calls_deep_and_compound_assignment() -> None:
    helpers = """
static void inner(beat* z, unsigned int nb) {
  for (unsigned int i = 0; i < nb; i++) {
#pragma HLS PIPELINE
    z[i] += 1;
  }
}
static void outer(beat* y, unsigned int nb) { inner(y, nb); }"""
    problems = check_hls_source(top("  outer(m, nb);", TWO, helpers=helpers))
    assert [p.split(":")[0] for p in problems] == ["m (bundle gmem_m)"], problems
    assert "inner()" in problems[0]


def test_read_then_write_in_separate_loops_is_not_rmw() -> None:
    body = """
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    buf[b] = p[b];
  }
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    p[b] = buf[b];
  }"""
    assert check_hls_source(top(body, TWO)) == []


def test_commented_out_access_is_ignored() -> None:
    body = """
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    // p[b] = 0;  (disabled)
    /* p[2 * b] */ m[b] = p[b];
  }"""
    assert check_hls_source(top(body, TWO)) == []


@pytest.mark.parametrize("index, header", [
    ("2 * b", "unsigned int b = 0; b < nb; ++b"),
    ("idx[b]", "unsigned int b = 0; b < nb; ++b"),
    ("b", "unsigned int b = 0; b < nb; b += 2"),
    ("b + k", "unsigned int b = 0; b < nb; ++b"),
])
def test_non_sequential_index_in_pipelined_loop(index: str, header: str) -> None:
    body = f"""
  unsigned int k = 0;
  for ({header}) {{
#pragma HLS PIPELINE II=1
    m[{index}] = x;
    k = k + 3;
  }}"""
    problems = check_hls_source(top(body, TWO))
    assert len(problems) == 1, problems
    assert problems[0].startswith("m (bundle gmem_m): index") and "pipelined loop" in problems[0]


def test_loop_invariant_offset_is_sequential() -> None:
    body = """
  const unsigned int base = nb / 2;
  for (unsigned int b = 0; b < nb / 2; ++b) {
#pragma HLS PIPELINE II=1
    m[b + base] = x;
    y = p[base + b];
  }"""
    assert check_hls_source(top(body, TWO)) == []


def test_non_sequential_outside_a_pipelined_loop_is_not_flagged() -> None:
    body = """
  for (unsigned int b = 0; b < nb; ++b) {
    m[2 * b] = x;
  }"""
    assert check_hls_source(top(body, TWO)) == []


def test_read_port_and_write_port_sharing_a_bundle() -> None:
    pragmas = ("#pragma HLS INTERFACE mode=m_axi port=p0_rd bundle=gmem_p0 offset=slave\n"
               "#pragma HLS INTERFACE mode=m_axi port=p0_wr bundle=gmem_p0 offset=slave")
    body = """
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    s.write(p0_rd[b]);
  }
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    p0_wr[b] = s.read();
  }"""
    problems = check_hls_source(top(body, pragmas, params="const beat* p0_rd, beat* p0_wr, unsigned int nb"))
    assert len(problems) == 1, problems
    assert "bundle gmem_p0 is shared by p0_rd, p0_wr" in problems[0]
    assert "p0_rd read; p0_wr written" in problems[0] and "separate bundles" in problems[0]


def test_any_shared_bundle_and_the_default_bundle() -> None:
    pragmas = ("#pragma HLS INTERFACE m_axi port=p offset=slave\n"
               "#pragma HLS INTERFACE m_axi port=m offset=slave")
    body = """
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    s.write(p[b] + m[b]);
  }"""
    problems = check_hls_source(top(body, pragmas))
    assert problems == ["bundle gmem is shared by p, m: each m_axi port needs its own bundle "
                        "(one AXI adapter and one memory channel per port)"]


def test_no_m_axi_ports_means_nothing_to_check() -> None:
    assert check_hls_source("void f(int* a) { for (int i = 0; i < 4; ++i) { a[i] = a[i] + 1; } }") == []


@pytest.mark.parametrize("spec", [
    KernelSpec(),
    KernelSpec(optimizer="adam", grad_source="stream", grad_dtype="bf16", out_dtype="bf16", lanes=16,
               name="optimusnic_adam"),
    KernelSpec(grad_dtype="fp16", out_dtype="bf16", lanes=4, stripes=3),
    KernelSpec(grad_dtype="bf16", compute_units=2, lanes=1),
    KernelSpec(target="u50"),
    KernelSpec(target="u250", stripes=1),
], ids=lambda s: f"{s.target}-{s.optimizer}-{s.grad_dtype}-{s.grad_source}-l{s.lanes}-s{s.stripes}")
def test_generated_kernels_keep_every_port_bursting(spec: KernelSpec) -> None:
    """The striped kernel: no port read and written in one loop, every pipelined access sequential,
    one bundle per port (the template before stripes was flagged for p, m and v here)."""
    files, _ = render(spec)
    text = files[f"hls/{spec.name}.cpp"].decode()
    assert check_hls_source(text) == []


def test_one_helper_for_several_ports_stands_for_each() -> None:
    helpers = """
static void load(const beat* src, hls::stream<beat>& s, unsigned int nb) {
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    s.write(src[b]);
  }
}
static void store(beat* dst, hls::stream<beat>& s, unsigned int nb) {
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    dst[b] = s.read();
  }
}"""
    pragmas = ("#pragma HLS INTERFACE m_axi port=p bundle=gmem_p\n"
               "#pragma HLS INTERFACE m_axi port=m bundle=gmem_p\n"
               "#pragma HLS INTERFACE m_axi port=out bundle=gmem_out")
    body = "  load(p, a, nb);\n  load(m, c, nb);\n  store(out, a, nb);"
    problems = check_hls_source(top(body, pragmas, params="const beat* p, const beat* m, beat* out, unsigned int nb",
                                    helpers=helpers))
    assert problems == ["bundle gmem_p is shared by p, m: each m_axi port needs its own bundle "
                        "(one AXI adapter and one memory channel per port)"]


def test_rmw_through_a_call_inside_the_loop() -> None:
    helpers = """
static void bump(beat* q, unsigned int b) {
  q[b] = q[b] + 1;
}"""
    body = """
  for (unsigned int b = 0; b < nb; ++b) {
#pragma HLS PIPELINE II=1
    bump(m, b);
  }"""
    problems = check_hls_source(top(body, TWO, helpers=helpers))
    assert [p.split(":")[0] for p in problems] == ["m (bundle gmem_m)"], problems
    assert "read and written in one loop (k() line" in problems[0]
