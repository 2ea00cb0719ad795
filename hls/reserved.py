"""Kernel names that cannot be used: every identifier the generated code would collide with.

A kernel name becomes an `extern "C"` function at global scope in C++ (beside AMD's HLS headers,
the C and C++ standard libraries and our own generated identifiers), a Verilog module, a Tcl and
cfg word and a file name. A name that passes the C-identifier rule can still fail to compile:
`std`, `hls`, `memcpy`, `size_t`, `uint64_t`, `ap_uint`, `LANES`, `f32_beat`. So the spec refuses:

- C, C++ and (System)Verilog keywords (`hls/spec.py`);
- every identifier of the generated C++ (the kernel's own names, e.g. `LANES`, `f32_beat`, which a
  `using namespace` brings next to the kernel function);
- every name that collides at global scope in the C simulation translation unit: found by the
  compiler itself (`hls/tools/reserved_probe.py` declares `int NAME;` after the generated kernel, its
  testbench, the harness and the whole C/C++ standard library, and keeps the names g++ refuses), plus
  every macro defined there; saved in `reserved_names.txt` (regenerate: `python -m hls.tools.reserved_probe`);
- the global names of AMD's own HLS headers, which the stand-ins in `hls/csim/include/` do not define
  (`AMD_HLS_NAMES`), and our RTL module names, generated ones included (a kernel module may not shadow them).

This module holds only the names (the spec reads them); the probe that compiles generated projects
to find them lives above everything it runs, in `hls.tools.reserved_probe`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from hls.paths import RTL_DIR

NAMES_FILE = Path(__file__).resolve().parent / "reserved_names.txt"

# Global names of AMD's Vitis HLS headers (ap_int.h, ap_fixed.h, ap_axi_sdata.h, hls_stream.h,
# hls_vector.h, hls_math.h, hls_half.h) that our stand-in headers do not declare.
AMD_HLS_NAMES = frozenset(
    """
    ap_int ap_uint ap_fixed ap_ufixed ap_int_base ap_fixed_base ap_range_ref ap_bit_ref ap_concat_ref
    af_range_ref af_bit_ref ap_private ap_q_mode ap_o_mode ap_axis ap_axiu qdma_axis hls half
    AP_TRN AP_TRN_ZERO AP_RND AP_RND_ZERO AP_RND_MIN_INF AP_RND_INF AP_RND_CONV AP_SAT AP_SAT_ZERO
    AP_SAT_SYM AP_WRAP AP_WRAP_SM AP_INT_MAX_W AP_BIN AP_OCT AP_DEC AP_HEX ap_int_ref ap_fixed_ref
    hls_stream hls_vector ap_shift_reg ap_wait ap_wait_n AESL_SYN AESL_FP_MATH AP_ASSERT
    """.split()
)

# What the csim harness macro (OPTIMUSNIC_CSIM_ENTRY) defines beside the kernel.
HARNESS_NAMES = frozenset({"optimusnic_csim", "optimusnic_csim_abi", "optimusnic_csim_run", "optimusnic_csim_direct"})

# SystemVerilog (IEEE 1800-2017) keywords: Verilator reads the generated .v with them.
VERILOG_KEYWORDS = frozenset(
    """
    accept_on alias always always_comb always_ff always_latch and assert assign assume automatic before begin
    bind bins binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle checker class clocking
    cmos config const constraint context continue cover covergroup coverpoint cross deassign default defparam
    design disable dist do edge else end endcase endchecker endclass endclocking endconfig endfunction
    endgenerate endgroup endinterface endmodule endpackage endprimitive endprogram endproperty endspecify
    endsequence endtable endtask enum event eventually expect export extends extern final first_match for
    force foreach forever fork forkjoin function generate genvar global highz0 highz1 if iff ifnone
    ignore_bins illegal_bins implements implies import incdir include initial inout input inside instance int
    integer interconnect interface intersect join join_any join_none large let liblist library local
    localparam logic longint macromodule matches medium modport module nand negedge nettype new nexttime nmos
    nor noshowcancelled not notif0 notif1 null or output package packed parameter pmos posedge primitive
    priority program property protected pull0 pull1 pulldown pullup pulsestyle_ondetect pulsestyle_onevent pure
    rand randc randcase randsequence rcmos real realtime ref reg reject_on release repeat restrict return
    rnmos rpmos rtran rtranif0 rtranif1 s_always s_eventually s_nexttime s_until s_until_with scalared
    sequence shortint shortreal showcancelled signed small soft solve specify specparam static string strong
    strong0 strong1 struct super supply0 supply1 sync_accept_on sync_reject_on table tagged task this
    throughout time timeprecision timeunit tran tranif0 tranif1 tri tri0 tri1 triand trior trireg type typedef
    union unique unique0 unsigned until until_with untyped use uwire var vectored virtual void wait wait_order
    wand weak weak0 weak1 while wildcard wire with within wor xnor xor
    """.split()
)


# Modules rendered from templates beside the kernel (hls.rtl.card's card top), not in sim/rtl.
GENERATED_MODULES = frozenset({"onic_card"})


def rtl_module_names() -> frozenset[str]:
    names = set(GENERATED_MODULES)
    for path in RTL_DIR.rglob("*.v"):
        names.update(re.findall(r"^\s*module\s+([A-Za-z_][A-Za-z0-9_]*)", path.read_text(errors="replace"), re.M))
    return frozenset(names)


@lru_cache(maxsize=1)
def reserved_names() -> frozenset[str]:
    """Every name refused as a kernel name besides the C/C++ keywords (see the module docstring)."""
    try:
        saved = {ln.strip() for ln in NAMES_FILE.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    except OSError:
        saved = set()
    return frozenset(saved | AMD_HLS_NAMES | HARNESS_NAMES | VERILOG_KEYWORDS | rtl_module_names())
