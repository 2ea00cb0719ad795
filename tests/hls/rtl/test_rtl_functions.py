"""Every Verilog `function` must read only its own arguments (and constants).

Icarus re-evaluates a function called in a continuous assignment (`wire x = f(a) && ...`, and
likewise in an `always @*`) only when its ARGUMENTS change: a module register or wire the body
reads without taking it as an argument is not in the sensitivity, so the result keeps a stale
value (the X of reset). Verilator evaluates the whole expression and never shows it. That is how
onic_net_scalar's `hop_ok(recv_hops_reg)`, which read `world_ge2_reg` / `world_m2_reg`, hung the
two-phase step on Icarus only (sim/rtl/net/README.md "Icarus").

The check is a small tokenizer, not a parser: comments, strings, attributes and compiler
directives are stripped; in each `function ... endfunction` every identifier read must be one of
the function's inputs, its own name (the return value), a variable declared inside it (`reg`,
`integer`, loop variables), a `parameter` / `localparam` or `genvar` of its module, another
function of the module, a keyword, a system function (`$clog2`) or a (sized) literal. Scanned:
every `.v` under sim/ (sim/rtl, and the testbenches and formal wrappers beside it) and the Verilog
the templates render (the RTL kernel top and its control block, the card top, the ring
simulation top, the network kernel's package wrapper), rendered in memory for one spec each.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from hls.paths import REPO_ROOT, SIM_DIR, TEMPLATES_DIR

WHY = (
    "Icarus re-evaluates a function called in a continuous assignment (or always @*) only when its "
    "arguments change, so a value the body reads that is not an argument leaves a stale result (X) on "
    "Icarus while Verilator is fine: pass it as an input"
)

KEYWORDS = frozenset(
    """
    alias always always_comb always_ff always_latch and assert assign assume automatic before begin bind bins
    binsof bit break buf bufif0 bufif1 byte case casex casez cell chandle class clocking cmos config const
    constraint context continue cover covergroup coverpoint cross deassign default defparam design disable dist
    do edge else end endcase endclass endclocking endconfig endfunction endgenerate endgroup endinterface
    endmodule endpackage endprimitive endprogram endproperty endspecify endsequence endtable endtask enum event
    expect export extends extern final first_match for force foreach forever fork forkjoin function generate
    genvar highz0 highz1 if iff ifnone ignore_bins illegal_bins import incdir include initial inout input inside
    instance int integer interface intersect join join_any join_none large liblist library local localparam
    logic longint macromodule matches medium modport module nand negedge new nmos nor noshowcancelled not
    notif0 notif1 null or output package packed parameter pmos posedge primitive priority program property
    protected pull0 pull1 pulldown pullup pulsestyle_ondetect pulsestyle_onevent pure rand randc randcase
    randsequence rcmos real realtime ref reg release repeat return rnmos rpmos rtran rtranif0 rtranif1 scalared
    sequence shortint shortreal showcancelled signed small solve specify specparam static string strong0 strong1
    struct super supply0 supply1 table tagged task this throughout time timeprecision timeunit tran tranif0
    tranif1 tri tri0 tri1 triand trior trireg type typedef union unique unique0 unsigned use uwire var vectored
    virtual void wait wait_order wand weak0 weak1 while wildcard wire with within wor xnor xor
""".split()
)
# Keywords that start a declaration inside a function (ports, variables, loop variables).
DECL_KEYWORDS = frozenset(
    """
    input output inout ref reg integer int logic bit byte shortint longint real realtime shortreal time var
    genvar parameter localparam string event
""".split()
)

# Comments, strings and attributes `(* ... *)` (not `@(*)`), blanked with newlines kept.
_STRIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\(\*(?!\s*\)).*?\*\)', re.S)
# Compiler directives whose arguments are names or text, not Verilog: dropped with their arguments.
_DIRECTIVES = re.compile(
    r"`define\b(?:\\\n|[^\n])*"
    r"|`(?:ifdef|ifndef|elsif|undef)\s+\w+"
    r"|`(?:timescale|default_nettype|include|line|pragma|resetall|celldefine|endcelldefine|begin_keywords"
    r"|end_keywords|unconnected_drive|nounconnected_drive)\b[^\n]*"
)
_TOKEN = re.compile(
    r"""
     (?P<sys>\$[A-Za-z0-9_$]+)
    |(?P<macro>`[A-Za-z_]\w*)
    |(?P<num>(?:\d[\d_]*\s*)?'[sS]?[bBoOdDhH]\s*[0-9a-fA-FxXzZ_]+
            |\d[\d_]*(?:\.[\d_]+)?(?:[eE][+-]?\d+)?
            |'[01xXzZ])
    |(?P<id>[A-Za-z_][A-Za-z0-9_$]*|\\\S+)
    |(?P<op>===|!==|==|!=|<=|>=|\+:|-:|::|&&|\|\||<<<|>>>|<<|>>|\*\*|\S)
    """,
    re.X,
)
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class Tok:
    kind: str  # id, op, num, sys, macro
    text: str
    line: int


@dataclass(frozen=True)
class Impure:
    source: str
    function: str
    line: int
    names: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"{self.source}:{self.line}: function {self.function} reads {', '.join(self.names)}, "
            f"which are not its arguments nor constants: {WHY}"
        )


def _blank(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group())


def tokenize(text: str) -> list[Tok]:
    text = _DIRECTIVES.sub(_blank, _STRIP.sub(_blank, text))
    toks, line, pos = [], 1, 0
    for m in _TOKEN.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        toks.append(Tok(m.lastgroup or "op", m.group(), line))
    return toks


def _is_name(t: Tok) -> bool:
    return t.kind == "id" and t.text not in KEYWORDS


def _items(toks: list[Tok], start: int) -> tuple[list[list[Tok]], int]:
    """The comma-separated items from `start` to the first `;` (or unmatched closer) at depth 0,
    and the index of that terminator."""
    items: list[list[Tok]] = [[]]
    depth, i = 0, start
    while i < len(toks):
        t = toks[i].text
        if t in _OPEN:
            depth += 1
        elif t in _CLOSE:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and t == ";":
            break
        elif depth == 0 and t == ",":
            items.append([])
            i += 1
            continue
        items[-1].append(toks[i])
        i += 1
    return items, i


def _declared(item: list[Tok]) -> str | None:
    """The name an item of a declaration declares: its last identifier at depth 0 before any `=`
    (`input [W-1:0] a`, `reg [32:0] s [0:3]`, `integer i = 0`, `my_t x`)."""
    depth, name = 0, None
    for t in item:
        if t.text in _OPEN:
            depth += 1
        elif t.text in _CLOSE:
            depth -= 1
        elif depth == 0 and t.text == "=":
            break
        elif depth == 0 and _is_name(t):
            name = t.text
    return name


def _assigned_names(toks: list[Tok], start: int) -> set[str]:
    """Names of a `parameter` / `localparam` list from `start`: every identifier followed by `=`."""
    items, _ = _items(toks, start)
    return {_declared(item) or "" for item in items if any(t.text == "=" for t in item)} - {""}


def _typedefs(toks: list[Tok]) -> set[str]:
    """Type names of `typedef ... name;` (SystemVerilog): a declaration inside a function may start with one."""
    return {
        n
        for i, t in enumerate(toks)
        if t.text == "typedef"
        for item in _items(toks, i + 1)[0]
        if (n := _declared(item))
    }


def _scope_constants(toks: list[Tok]) -> set[str]:
    """A module's constants and names a function may use: parameters, localparams, genvars, enum
    members, type names, functions (their bodies are checked on their own)."""
    names: set[str] = _typedefs(toks)
    for i, t in enumerate(toks):
        if t.text in ("parameter", "localparam"):
            names |= _assigned_names(toks, i + 1)
        elif t.text == "genvar":
            items, _ = _items(toks, i + 1)
            names |= {n for item in items if (n := _declared(item))}
        elif t.text == "enum":
            brace = next((j for j in range(i + 1, len(toks)) if toks[j].text in ("{", ";")), len(toks))
            if brace < len(toks) and toks[brace].text == "{":
                items, _ = _items(toks, brace + 1)
                names |= {n for item in items if (n := _declared(item))}
        elif t.text == "function":
            header = _function_header(toks, i)
            if header:
                names.add(header[0])
    return names


def _function_header(toks: list[Tok], i: int) -> tuple[str, int] | None:
    """(name, index of the `(` or `;` ending the name) of the function whose keyword is at `i`."""
    name, depth = None, 0
    for j in range(i + 1, len(toks)):
        t = toks[j].text
        if t == "[":
            depth += 1
        elif t == "]":
            depth -= 1
        elif depth == 0 and t in ("(", ";"):
            return (name, j) if name else None
        elif depth == 0 and _is_name(toks[j]):
            name = toks[j].text
    return None


def _check_function(
    toks: list[Tok], i: int, end: int, constants: set[str], types: frozenset[str] | set[str] = frozenset()
) -> tuple[str, int, list[str]] | None:
    header = _function_header(toks, i)
    if header is None:
        return None
    name, j = header
    declared = {name}
    if toks[j].text == "(":  # ANSI ports: each comma item declares one name
        items, _ = _items(toks, j + 1)
        declared |= {n for item in items if (n := _declared(item))}
    body = toks[j:end]
    for k, t in enumerate(body):
        if t.text in DECL_KEYWORDS or (t.text in types and k + 1 < len(body) and _is_name(body[k + 1])):
            items, _ = _items(body, k + 1)
            declared |= {n for item in items if (n := _declared(item))}
    skip: set[int] = set()
    for k, t in enumerate(body):
        prev = body[k - 1].text if k else ""
        if t.kind != "id":
            continue
        if prev == ":" and k >= 2 and body[k - 2].text in ("begin", "end", "fork", "join", "endfunction"):
            skip.add(k)  # a block label
        elif prev in (".", "disable", "::") or (k + 1 < len(body) and body[k + 1].text == "::"):
            skip.add(k)  # a member, a named block, a package and its item
    reads = sorted({t.text for k, t in enumerate(body) if _is_name(t) and k not in skip} - declared - constants)
    return name, toks[i].line, reads


def check_text(text: str, source: str) -> list[Impure]:
    """Every function of `text` that reads something other than its arguments and constants."""
    toks = tokenize(text)
    # scopes: each module (its constants), and the text outside modules (the file's constants)
    scopes: list[tuple[int, int]] = []
    i = 0
    while i < len(toks):
        if toks[i].text in ("module", "macromodule"):
            end = next((j for j in range(i, len(toks)) if toks[j].text == "endmodule"), len(toks))
            scopes.append((i, end))
            i = end
        i += 1
    known: dict[tuple[int, int], tuple[set[str], set[str]]] = {}  # scope: (constants, type names)
    found: list[Impure] = []
    for i, t in enumerate(toks):
        if t.text != "function":
            continue
        end = next((j for j in range(i, len(toks)) if toks[j].text == "endfunction"), len(toks))
        lo, hi = next(((a, b) for a, b in scopes if a < i < b), (0, len(toks)))
        if (lo, hi) not in known:
            known[lo, hi] = (_scope_constants(toks[lo:hi]), _typedefs(toks[lo:hi]))
        result = _check_function(toks, i, end, *known[lo, hi])
        if result and result[2]:
            found.append(Impure(source, result[0], result[1], tuple(result[2])))
    return found


# ---- the sources ----


def static_sources() -> list[Path]:
    return sorted(SIM_DIR.rglob("*.v"))


@functools.cache
def rendered_sources() -> dict[str, str]:
    """{template: Verilog} for every templates/**/*.v.j2, each rendered in memory for one spec."""
    from hls.generate import render
    from hls.rtl import ring_top
    from hls.rtl.card import render_card
    from hls.spec import KernelSpec
    from hls.targets import get_target
    from hls.vitis import netpkg

    card = KernelSpec(
        optimizer="adamw",
        grad_dtype="fp32",
        out_dtype="fp32",
        grad_source="stream",
        lanes=2,
        stripes=1,
        out_sink="memory+stream",
        name="onic_card_adamw",
    )
    files, _ = render(KernelSpec())
    out = {
        f"rtl/KERNEL{path.removeprefix('rtl/optimusnic_adamw')}.j2": text.decode()
        for path, text in files.items()
        if path.startswith("rtl/") and path.endswith(".v")
    }
    out["net/card.v.j2"] = render_card(card)
    out["net/ring_sim_top.v.j2"] = ring_top.render(2)[1]
    out["net/wrapper.v.j2"] = netpkg.package(card, get_target(card.target), "hls").wrapper_v
    return out


def _static_id(path: Path) -> str:
    return str(path.relative_to(SIM_DIR))


@pytest.mark.parametrize("path", static_sources(), ids=_static_id)
def test_static_functions_read_only_arguments(path: Path) -> None:
    impure = check_text(path.read_text(), str(path.relative_to(REPO_ROOT)))
    assert not impure, "\n".join(map(str, impure))


def test_rendered_functions_read_only_arguments() -> None:
    rendered = rendered_sources()
    templates = {str(p.relative_to(TEMPLATES_DIR)) for p in TEMPLATES_DIR.rglob("*.v.j2")}
    assert set(rendered) == templates, f"render every Verilog template here: {sorted(templates ^ set(rendered))}"
    impure = [f for name, text in rendered.items() for f in check_text(text, f"templates/{name} (rendered)")]
    assert not impure, "\n".join(map(str, impure))


# ---- the checker itself: it fails where it must ----

IMPURE = """
module m #(parameter W = 8) (input wire clk, input wire [7:0] a, output wire y, output wire [7:0] z);
    reg       world_ge2_reg;
    reg [7:0] world_m2_reg;
    function hop_ok;                       // Verilog-2001: inputs in the body
        input [7:0] hop;
        begin
            hop_ok = world_ge2_reg && hop <= world_m2_reg;
        end
    endfunction
    function automatic [7:0] add_m2(input [7:0] x);   // ANSI
        add_m2 = x + world_m2_reg;
    endfunction
    assign y = hop_ok(a);
    assign z = add_m2(a);
endmodule
"""

PURE = """
`timescale 1ns / 1ps
`default_nettype none
`define ONIC_HALF(x) ((x) >> 1)
module m #(parameter W = 8, parameter [3:0] K = 4'd3, N = 2) (input wire [W-1:0] a, output wire [7:0] y);
    localparam integer LOG = $clog2(W), MASK = {W{1'b1}};
    localparam [1:0] R_NONE = 2'd0, R_ACK = 2'd1;
    genvar g;
    reg [7:0] state_reg;  // a register no function below reads: "state_reg" only in comments and strings
    /* function bad; bad = state_reg; endfunction */
    function [4:0] ones16;
        input [15:0] k;
        integer i;
        begin : count
            ones16 = 5'd0;
            for (i = 0; i < 16; i = i + 1) ones16 = ones16 + {4'd0, k[i]};
        end
    endfunction
    function [31:0] sat_add;
        input [31:0] a, c;
        reg   [32:0] s;
        begin
            s = {1'b0, a} + {1'b0, c};
            sat_add = s[32] ? 32'hFFFF_FFFF : s[31:0] & 'hffff_ffff;
        end
    endfunction
    function automatic [W-1:0] mix(input [W-1:0] x, input integer b, y2);
        reg [1:0] r;
        begin
            r = R_ACK;
            mix = `ONIC_HALF(x) ^ MASK ^ {W{y2[0]}} ^ LOG ^ K ^ N ^ ones16(x[15:0]) ^ sat_add(b, 1) ^ 8'sd5;
`ifdef ONIC_STATE
            mix = mix ^ r;
`endif
            $display("state_reg %d", x);
        end
    endfunction
    function integer lut_bits(input integer depth);
        for (int j = 0; j < 4; j++) lut_bits = depth >> j;
    endfunction
    typedef logic [3:0] nib_t;
    typedef enum logic [1:0] {S_IDLE, S_RUN = 2'd2} state_t;
    function automatic state_t next_of(input nib_t n);
        nib_t m;
        m = n + 4'd1;
        return (m == '0) ? S_IDLE : S_RUN;
    endfunction
    generate for (g = 0; g < 2; g = g + 1) begin : lanes
        function [7:0] lane_of(input [7:0] v);
            lane_of = v + g;
        endfunction
    end endgenerate
    assign y = mix(a, 3, 1'b1) + lut_bits(N);
endmodule
"""


def test_checker_flags_a_function_reading_module_registers() -> None:
    found = check_text(IMPURE, "impure.v")
    assert [(f.function, f.names) for f in found] == [
        ("hop_ok", ("world_ge2_reg", "world_m2_reg")),
        ("add_m2", ("world_m2_reg",)),
    ]
    message = str(found[0])
    assert message.startswith("impure.v:5: function hop_ok reads world_ge2_reg, world_m2_reg")
    assert "only when its arguments change" in message


def test_checker_accepts_pure_functions() -> None:
    assert check_text(PURE, "pure.v") == []


def test_checker_scopes_constants_by_module() -> None:
    """A parameter of another module in the same file is not a constant of this one."""
    text = (
        "module a #(parameter P = 1) (); endmodule\n"
        "module b (); function f; input x; f = x ^ P; endfunction endmodule\n"
    )
    assert [(f.function, f.names) for f in check_text(text, "two.v")] == [("f", ("P",))]
