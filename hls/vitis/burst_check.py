"""Static check of generated HLS C++: will every m_axi port get long AXI bursts?

Sizing assumes each port streams its stripe in long bursts (design.md 3b). Vitis HLS infers a
burst only from a loop that walks one port sequentially, and it gives up, or falls back to
short bursts, when a port is read and written in the same loop (the write may clobber a later
read: the "access is clobbered" / "could not burst" messages that hls/vitis/reports.py reads from a
synthesis log, UG1399 "Optimizing Burst Transfers"). Synthesis takes an hour and needs Vitis;
this check reads the C++ text in milliseconds, so `generate` and the tests catch the patterns
before anyone runs the tool:

1. an m_axi port read and written in one loop (read-modify-write);
2. a port accessed in a `#pragma HLS PIPELINE` loop at an index other than the loop variable
   (plus a loop-invariant offset), i.e. not sequentially;
3. a bundle shared by two m_axi ports (a stripe's read port and write port on one bundle share
   one AXI adapter, and a shared bundle serialises its ports).

It is a pattern check for the style of templates/hls (one function per process, one loop per
function, `ptr[b]` accesses), not a C++ parser: comments and strings are blanked, functions and
loops are found by brace matching, and pointers passed to static functions are followed (a
parameter that receives a top-level m_axi pointer is that pointer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "catch", "do", "else"}
_FUNC = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_PRAGMA_MAXI = re.compile(r"#pragma\s+HLS\s+INTERFACE\b[^\n]*?\bm_axi\b[^\n]*", re.I)
_LOOP = re.compile(r"\b(for|while)\s*\(")
_ASSIGN_OP = r"(?:[-+*/%&|^]|<<|>>)?=(?!=)"


@dataclass
class _Function:
    name: str
    params: list[str]
    body_start: int  # index of the opening brace
    body_end: int  # index of the closing brace
    line: int


@dataclass
class _Port:
    name: str
    bundle: str
    reads: list[str] = field(default_factory=list)  # where (function names)
    writes: list[str] = field(default_factory=list)


def _blank(text: str) -> str:
    """Comments and string contents replaced by spaces (newlines kept), so offsets and lines stay."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            lo, hi = i, (n if j < 0 else j)
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            lo, hi = i, (n if j < 0 else j + 2)
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] not in (text[i], "\n"):
                j += 2 if text[j] == "\\" else 1
            lo, hi = i + 1, min(j, n)
            hi_next = min(j + 1, n)
            for k in range(lo, hi):
                out[k] = " "
            i = hi_next
            continue
        else:
            i += 1
            continue
        for k in range(lo, hi):
            if out[k] != "\n":
                out[k] = " "
        i = hi
    return "".join(out)


def _match(text: str, start: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at `start` (or len(text) if unbalanced)."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def _split_top(s: str) -> list[str]:
    """Split at commas outside (), <>, [] and {}."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def _param_name(param: str) -> str | None:
    param = re.sub(r"\[[^\]]*\]", "", param.split("=")[0]).strip()
    m = re.search(r"([A-Za-z_]\w*)\s*$", param)
    return m.group(1) if m and param != "void" else None


def _functions(code: str) -> list[_Function]:
    funcs: list[_Function] = []
    pos = 0
    while True:
        m = _FUNC.search(code, pos)
        if not m:
            return funcs
        name, paren = m.group(1), m.end() - 1
        close = _match(code, paren, "(", ")")
        after = re.match(r"\s*(?:const\s*)?\{", code[close + 1:])
        if name in _KEYWORDS or after is None:
            pos = m.end()
            continue
        brace = close + after.end()
        end = _match(code, brace, "{", "}")
        params = [_param_name(p) for p in _split_top(code[paren + 1:close])]
        funcs.append(_Function(name, [p or "" for p in params], brace, end, code.count("\n", 0, m.start()) + 1))
        pos = end + 1


@dataclass
class _Loop:
    start: int  # the `for`/`while` keyword
    body_start: int
    body_end: int
    header: str
    line: int


def _loops(code: str, start: int, end: int) -> list[_Loop]:
    loops = []
    for m in _LOOP.finditer(code, start, end):
        paren = m.end() - 1
        close = _match(code, paren, "(", ")")
        after = re.match(r"\s*\{", code[close + 1:])
        if after is None:
            continue  # a braceless loop body: not the templates' style; its accesses count for the function
        brace = close + after.end()
        loops.append(_Loop(m.start(), brace, _match(code, brace, "{", "}"), code[paren + 1:close],
                           code.count("\n", 0, m.start()) + 1))
    return loops


def _own_text(code: str, loop: _Loop, inner: list[_Loop]) -> str:
    """The loop's body with its nested loops blanked: what runs once per iteration of this loop."""
    body = list(code[loop.body_start + 1:loop.body_end])
    for other in inner:
        if loop.body_start < other.start and other.body_end <= loop.body_end:
            for k in range(other.start - loop.body_start - 1, other.body_end - loop.body_start):
                if body[k] != "\n":
                    body[k] = " "
    return "".join(body)


def _accesses(text: str, alias: str) -> tuple[list[str], list[str]]:
    """(read index expressions, written index expressions) of `alias[...]` in `text`;
    `*alias` and memcpy count with the index '?'."""
    reads: list[str] = []
    writes: list[str] = []
    for m in re.finditer(rf"(?<![\w.>]){re.escape(alias)}\s*\[", text):
        close = _match(text, m.end() - 1, "[", "]")
        idx = text[m.end():close].strip()
        rest = text[close + 1:]
        if re.match(rf"\s*(?:\.\w+\s*|\[[^\]]*\]\s*)*{_ASSIGN_OP}", rest):
            writes.append(idx)
            if re.match(r"\s*(?:\.\w+\s*|\[[^\]]*\]\s*)*[-+*/%&|^<>]+=", rest):
                reads.append(idx)  # compound assignment reads too
        else:
            reads.append(idx)
    deref = rf"\*\s*(?:\(\s*{re.escape(alias)}\b[^()]*\)|{re.escape(alias)}\b)(\s*{_ASSIGN_OP})?"
    for m in re.finditer(deref, text):
        before = text[:m.start()].rstrip()
        if before and (before[-1].isalnum() or before[-1] in "_)]"):
            continue  # a multiplication or a declaration, not a dereference
        (writes if m.group(1) else reads).append("?")
    for m in re.finditer(r"\bmemcpy\s*\(", text):
        args = _split_top(text[m.end():_match(text, m.end() - 1, "(", ")")])
        if len(args) >= 2:
            if re.match(rf"\(?\s*{re.escape(alias)}\b", args[0]):
                writes.append("?")
            if re.match(rf"\(?\s*(?:\([^)]*\)\s*)?{re.escape(alias)}\b", args[1]):
                reads.append("?")
    return reads, writes


def _loop_var(header: str) -> tuple[str | None, bool]:
    """(loop variable, steps by one) of a for-loop header."""
    parts = header.split(";")
    if len(parts) != 3:
        return None, False
    m = re.search(r"([A-Za-z_]\w*)\s*=[^=]", parts[0])
    if not m:
        return None, False
    var, inc = m.group(1), parts[2].replace(" ", "")
    unit = inc in (f"++{var}", f"{var}++", f"{var}+=1", f"{var}={var}+1", f"{var}=1+{var}")
    return var, unit


def _sequential(idx: str, var: str | None, body: str) -> bool:
    """`var`, or `var` plus/minus an expression the loop never assigns."""
    idx = idx.replace(" ", "")
    if var is None:
        return False
    if idx == var:
        return True
    m = re.fullmatch(rf"{var}[+-](.+)|(.+)\+{var}", idx)
    if not m:
        return False
    offset = m.group(1) or m.group(2)
    if re.search(rf"\b{var}\b", offset):
        return False
    for name in set(re.findall(r"[A-Za-z_]\w*", offset)):
        if re.search(rf"(?<![\w.]){name}\s*{_ASSIGN_OP}|(?:\+\+|--)\s*{name}\b|\b{name}\s*(?:\+\+|--)", body):
            return False
    return True


def _calls(code: str, f: _Function, by_name: dict[str, _Function],
           amap: dict[str, set[str]]) -> list[tuple[_Function, str, set[str]]]:
    """(callee, callee parameter, ports) for each argument of a call in `f`'s body that is one of
    `amap`'s aliases (or that alias plus an offset)."""
    out = []
    body = code[f.body_start:f.body_end]
    for m in _FUNC.finditer(body):
        callee = by_name.get(m.group(1))
        if callee is None or callee.name == f.name or m.group(1) in _KEYWORDS:
            continue
        args = _split_top(body[m.end():_match(body, m.end() - 1, "(", ")")])
        for param, arg in zip(callee.params, args, strict=False):
            head = re.match(r"\(?\s*&?\s*([A-Za-z_]\w*)\s*(?:[+-].*)?\)?$", arg)
            if head and param and head.group(1) in amap:
                out.append((callee, param, set(amap[head.group(1)])))
    return out


def _own_code(code: str, loop: _Loop, own: str) -> str:
    """`code` with the loop's body replaced by its own text (nested loops blanked), offsets kept."""
    return code[:loop.body_start + 1] + own + code[loop.body_end:]


def check_hls_source(text: str) -> list[str]:
    """Burst problems in HLS C++ `text` (empty list: none found). One line per problem, naming
    the port, its bundle, the function and the line."""
    code = _blank(text)
    pragmas = []
    for m in _PRAGMA_MAXI.finditer(code):
        port = re.search(r"\bport\s*=\s*(\w+)", m.group(0))
        bundle = re.search(r"\bbundle\s*=\s*(\w+)", m.group(0))
        if port:
            # Vitis HLS puts every m_axi port without a bundle option on the one default bundle.
            pragmas.append((m.start(), port.group(1), bundle.group(1) if bundle else "gmem"))
    if not pragmas:
        return []
    funcs = _functions(code)
    by_name = {f.name: f for f in funcs}
    top = next((f for f in funcs if f.body_start < pragmas[0][0] < f.body_end), None)
    if top is None:
        return [f"m_axi pragma for {pragmas[0][1]} is not inside a function body; cannot find the top function"]
    ports = {name: _Port(name, bundle) for at, name, bundle in pragmas if top.body_start < at < top.body_end}
    problems: list[str] = []
    missing = [p for p in ports if p not in top.params]
    problems += [f"{p}: m_axi pragma names a port that is not an argument of {top.name}()" for p in missing]

    # Which ports each parameter of each function stands for, following calls from the top down
    # (a helper called once per port, load(p0_rd, ...) and load(m0_rd, ...), stands for both).
    aliases: dict[str, dict[str, set[str]]] = {top.name: {p: {p} for p in ports if p in top.params}}
    work = [top]
    while work:
        f = work.pop()
        for callee, param, targets in _calls(code, f, by_name, aliases[f.name]):
            known = aliases.setdefault(callee.name, {}).setdefault(param, set())
            if not targets <= known:
                known |= targets
                work.append(callee)

    def whole(fname: str, param: str, seen: frozenset[str] = frozenset()) -> tuple[bool, bool]:
        """(read, written) anywhere in `fname` through `param`, calls included."""
        f = by_name[fname]
        r, w = _accesses(code[f.body_start:f.body_end], param)
        read, written = bool(r), bool(w)
        for callee, cparam, _ in _calls(code, f, by_name, {param: {param}}):
            if callee.name not in seen:
                cr, cw = whole(callee.name, cparam, seen | {fname})
                read, written = read or cr, written or cw
        return read, written

    for fname, amap in aliases.items():
        f = by_name[fname]
        loops = _loops(code, f.body_start, f.body_end)
        for alias, targets in amap.items():
            r, w = _accesses(code[f.body_start:f.body_end], alias)
            for port in targets:
                if r:
                    ports[port].reads.append(fname)
                if w:
                    ports[port].writes.append(fname)
        for loop in loops:
            own = _own_text(code, loop, loops)
            pipelined = re.search(r"#pragma\s+HLS\s+PIPELINE\b(?![^\n]*\boff\b)", own, re.I) is not None
            var, unit = _loop_var(loop.header) if code[loop.start:loop.start + 3] == "for" else (None, False)
            where = f"{fname}() line {loop.line}"
            # accesses made by functions called from this loop count as the loop's own
            via_calls: dict[str, list[bool]] = {}
            scope = _Function(fname, f.params, loop.body_start, loop.body_end, loop.line)
            for callee, cparam, targets in _calls(_own_code(code, loop, own), scope, by_name, amap):
                cr, cw = whole(callee.name, cparam)
                for port in targets:
                    seen = via_calls.setdefault(port, [False, False])
                    seen[0], seen[1] = seen[0] or cr, seen[1] or cw
            for alias, targets in amap.items():
                r, w = _accesses(own, alias)
                for port in sorted(targets):
                    bundle = ports[port].bundle
                    cr, cw = via_calls.get(port, [False, False])
                    if (r or cr) and (w or cw):
                        problems.append(
                            f"{port} (bundle {bundle}): read and written in one loop ({where}); HLS cannot burst a "
                            f"port whose writes may clobber its later reads: read it in a load process and write "
                            f"it in a store process, on separate ports and bundles")
                    if pipelined:
                        bad = [i for i in r + w if not (unit and _sequential(i, var, own))]
                        if bad:
                            why = "" if unit or var is None else f" (the loop does not step {var} by one)"
                            problems.append(
                                f"{port} (bundle {bundle}): index {bad[0]!r} in the pipelined loop at {where} is "
                                f"not the loop variable{' ' + var if var else ''} plus a loop-invariant offset{why}; "
                                f"non-sequential accesses do not burst")

    bundles: dict[str, list[str]] = {}
    for p in ports.values():
        bundles.setdefault(p.bundle, []).append(p.name)
    for bundle, names in bundles.items():
        if len(names) < 2:
            continue
        kinds = {n: ("read" if ports[n].reads and not ports[n].writes else
                     "written" if ports[n].writes and not ports[n].reads else "read and written") for n in names}
        rd = [n for n in names if kinds[n] == "read"]
        wr = [n for n in names if kinds[n] == "written"]
        if rd and wr:
            problems.append(
                f"bundle {bundle} is shared by {', '.join(names)} ({'; '.join(f'{n} {k}' for n, k in kinds.items())}): "
                f"a stripe's read port and write port must be on separate bundles, or they share one AXI adapter")
        else:
            problems.append(f"bundle {bundle} is shared by {', '.join(names)}: each m_axi port needs its own bundle "
                            f"(one AXI adapter and one memory channel per port)")
    return problems
