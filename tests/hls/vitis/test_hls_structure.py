"""The generated HLS C++ has the structure that gives every m_axi port long sequential bursts.

Static checks on the rendered kernel text (nothing is compiled; a few ms per variant):
- every pointer argument is its own m_axi port on its own bundle `gmem_<name>`;
- each pointer is accessed in exactly one process and one pipelined loop, as `ptr[b]` with `b`
  that loop's variable; `_rd` and grad pointers are only read, `_wr` and out pointers only written;
- the top function is a canonical DATAFLOW region: stream declarations, pragmas and process
  calls only; every stream has one producer and one consumer, and the producer is called first;
- the compute loop's ALLOCATION limits are (operations of update_one, counted here from its
  text) x lanes, and its II is 16 / lanes;
- the compute loop alone is a free-running pipeline (style=frp), and it meets frp's conditions:
  stream-only I/O, every FIFO read before the arithmetic (in the first II), none under a data test.
The C simulation (test_csim) checks what the kernel computes; this checks how it moves data.
"""

from __future__ import annotations

import re

import pytest
from kernel_variants import DEFAULT_VARIANTS, spec_of

from hls.generate import render
from hls.spec import KernelSpec

# The C simulation's default variants (every plan, dtype and source), and more shapes.
SPECS = [spec_of(v) for v in DEFAULT_VARIANTS] + [
    KernelSpec(),
    KernelSpec(optimizer="adam", name="optimusnic_adam"),
    KernelSpec(grad_dtype="bf16", out_dtype="bf16", lanes=4, stripes=3),
    KernelSpec(grad_dtype="fp16", lanes=1, stripes=1),
    KernelSpec(grad_dtype="fp16", out_dtype="bf16", stripes=3, rate_gps=9.0, clock_mhz=600.0),
    KernelSpec(optimizer="adam", stripes=3, rate_gps=10.0),
    KernelSpec(grad_source="stream", grad_dtype="bf16", lanes=8),
    KernelSpec(grad_source="stream", optimizer="adam", out_dtype="bf16", lanes=2, stripes=2),
    KernelSpec(compute_units=2, lanes=16),
    KernelSpec(target="u250", grad_dtype="bf16", out_dtype="bf16"),
    KernelSpec(target="u280", lanes=16, stripes=2, out_dtype="bf16", grad_dtype="fp16"),
    # the parameter stream out (store_param), with two out stripes and with one
    KernelSpec(grad_source="stream", grad_dtype="bf16", out_dtype="bf16", stripes=3, rate_gps=9.0, clock_mhz=600.0,
               out_sink="memory+stream"),
    KernelSpec(lanes=4, out_sink="memory+stream"),
]
OPS = {"*": "fmul", "+": "fadd", "-": "fsub", "/": "fdiv"}


def _ids(spec: KernelSpec) -> str:
    return (f"{spec.target}-{spec.optimizer}-{spec.grad_dtype}-{spec.grad_source}-{spec.out_dtype}-l{spec.lanes}"
            f"-cu{spec.compute_units}-s{spec.stripes}-r{spec.rate_gps}")


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def _block(text: str, open_at: int) -> tuple[int, int]:
    """(start, end) of the brace block whose `{` is at or after `open_at`; end is past the `}`."""
    start = text.index("{", open_at)
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return start, i + 1
    raise AssertionError("unbalanced braces")


def _split_params(params: str) -> list[str]:
    """Parameter or argument list -> items, splitting on top-level commas only."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


class Function:
    def __init__(self, name: str, params: list[str], body: str) -> None:
        self.name = name
        self.params = [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in params]
        self.body = body


def _functions(code: str) -> dict[str, Function]:
    """Every function definition (static helpers and the extern "C" top) by name."""
    found = {}
    for m in re.finditer(r"^(?:static [\w:<>]+|extern \"C\" void) (\w+)\(", code, re.M):
        close = m.end()
        depth = 1
        while depth:
            depth += {"(": 1, ")": -1}.get(code[close], 0)
            close += 1
        if code[close:].lstrip().startswith(";"):
            continue  # a prototype
        start, end = _block(code, close)
        found[m.group(1)] = Function(m.group(1), _split_params(code[m.end():close - 1]), code[start:end])
    return found


def _loops(body: str) -> list[tuple[str, str]]:
    """(loop variable, loop body) of every `for` loop in `body` (nested loops included)."""
    out = []
    for m in re.finditer(r"for \((?:unsigned )?int (\w+) = [^;]*;[^;]*;[^)]*\)", body):
        start, end = _block(body, m.end())
        out.append((m.group(1), body[start:end]))
    return out


_RENDERED: dict[KernelSpec, tuple[str, dict]] = {}


def _source(spec: KernelSpec) -> tuple[str, dict]:
    """The kernel's C++ as generated (comments included) and the manifest, rendered once per spec."""
    if spec not in _RENDERED:
        files, manifest = render(spec)
        _RENDERED[spec] = files[f"hls/{spec.name}.cpp"].decode(), manifest
    return _RENDERED[spec]


def _kernel(spec: KernelSpec) -> tuple[str, dict, dict[str, Function]]:
    raw, manifest = _source(spec)
    code = _strip_comments(raw)
    return code, manifest, _functions(code)


@pytest.fixture(scope="module", params=SPECS, ids=_ids)
def kernel(request: pytest.FixtureRequest) -> tuple[KernelSpec, str, dict, dict[str, Function]]:
    spec = request.param
    return (spec, *_kernel(spec))


def test_every_pointer_has_its_own_bundle(kernel) -> None:
    spec, code, manifest, _ = kernel
    pointers = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
    stripes = manifest["register_map"]["stripes"]
    assert len(pointers) == stripes["grad"] + 6 * stripes["state"] + stripes["out"]
    found = re.findall(r"#pragma HLS INTERFACE m_axi port=(\w+) bundle=(\w+) ", code)
    assert [p for p, _ in found] == pointers
    assert all(b == f"gmem_{p}" for p, b in found)
    assert len({b for _, b in found}) == len(found)


def test_each_pointer_one_process_one_pipelined_loop_sequential(kernel) -> None:
    spec, code, manifest, funcs = kernel
    top = funcs[spec.name]
    pointers = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
    for ptr in pointers:
        # In the top function the pointer is only handed to its process.
        assert not re.search(rf"\b{ptr}\s*\[", top.body), f"{ptr} accessed in the top function"
        users = [f for f in funcs.values() if f is not top and re.search(rf"\b{ptr}\b", f.body)]
        assert len(users) == 1, f"{ptr} used in {[f.name for f in users]}"
        proc = users[0]
        accesses = re.findall(rf"\b{ptr}\[([^\]]*)\](\s*=(?!=))?", proc.body)
        assert len(accesses) == 1, f"{ptr}: {len(accesses)} accesses in {proc.name}"
        index, assigned = accesses[0]
        written = bool(assigned)
        if ptr.endswith("_rd") or ptr.startswith("grad"):
            assert not written, f"read port {ptr} is written"
        else:
            assert written and (ptr.endswith("_wr") or ptr.startswith("out")), f"write port {ptr} is read"
        loops = [(var, body) for var, body in _loops(proc.body) if re.search(rf"\b{ptr}\[", body)]
        assert len(loops) == 1, f"{ptr} accessed in {len(loops)} loops"
        var, body = loops[0]
        assert "#pragma HLS PIPELINE II=1" in body, f"{ptr}: its loop is not pipelined at II=1"
        assert index == var, f"{ptr}[{index}] is not indexed by the loop variable {var}"
        # Only this pointer touches memory in the loop: one port, one burst stream.
        others = [p for p in pointers if p != ptr and re.search(rf"\b{p}\b", proc.body)]
        assert not others, f"{proc.name} also uses {others}"


def test_dataflow_is_canonical_single_producer_single_consumer(kernel) -> None:
    spec, code, manifest, funcs = kernel
    top = funcs[spec.name]
    body = top.body.strip()[1:-1]
    assert "#pragma HLS DATAFLOW" in body
    streams: list[str] = []
    calls: list[tuple[str, list[str]]] = []
    for stmt in (s.strip() for s in re.sub(r"#pragma[^\n]*", "", body).split(";")):
        if not stmt or stmt.startswith("using namespace"):
            continue
        decl = re.match(r"hls::stream<\w+> (.*)", stmt, re.S)
        if decl:
            streams += [re.match(r"(\w+)", d).group(1) for d in _split_params(decl.group(1))]
            continue
        call = re.match(r"(\w+)\((.*)\)\Z", stmt, re.S)
        assert call, f"not a stream declaration or a process call in the DATAFLOW region: {stmt!r}"
        calls.append((call.group(1), _split_params(call.group(2))))
    writers: dict[str, list[int]] = {s: [] for s in streams}
    readers: dict[str, list[int]] = {s: [] for s in streams}
    if spec.grad_source == "stream":
        writers["grad"], readers["grad"] = [-1], []  # the AXI4-Stream argument: written outside
    for order, (name, args) in enumerate(calls):
        proc = funcs[name]
        assert len(args) == len(proc.params), f"{name}: {len(args)} arguments for {len(proc.params)} parameters"
        for arg, param in zip(args, proc.params, strict=True):
            if arg not in writers:
                continue
            reads = re.search(rf"\b{param}\.read\(", proc.body)
            writes = re.search(rf"\b{param}\.write\(", proc.body)
            assert bool(reads) != bool(writes), f"{name} must either read or write stream {arg}"
            (readers if reads else writers)[arg].append(order)
    for s in writers:
        assert len(writers[s]) == 1 and len(readers[s]) == 1, f"stream {s}: writers {writers[s]}, readers {readers[s]}"
        assert writers[s][0] < readers[s][0], f"stream {s} is read by a process called before its producer"
    # One load process per read port (and the stream), one store process per write port.
    pointers = [a["name"] for a in manifest["register_map"]["args"] if a["kind"] == "pointer"]
    written = [p for p in pointers if p.endswith("_wr") or p.startswith("out")]
    want = [f"load_{p}" for p in pointers if p not in written] + [f"store_{p}" for p in written]
    want += ["load_grad"] if spec.grad_source == "stream" else []
    want += ["store_param"] if spec.param_stream else []  # the parameter stream out
    assert sorted(n for n, _ in calls if n.startswith(("load_", "store_"))) == sorted(want)


def test_one_fifo_hop_per_port_between_memory_and_compute(kernel) -> None:
    """Beats go port -> load -> compute -> store -> port: compute itself picks the stripe of beat b
    of p, m, v (round robin), as it already hands each result to its stripe, so no merge process
    sits between the stripe FIFOs and compute. The only extra process is merge_grad, where the
    memory gradient is striped or 16-bit and needs interleaving or widening."""
    spec, code, manifest, funcs = kernel
    top = funcs[spec.name]
    calls = re.findall(r"^\s*(\w+)\(", re.sub(r"#pragma[^\n]*", "", top.body), re.M)
    stripes = manifest["register_map"]["stripes"]
    gmerge = spec.grad_source == "memory" and (spec.grad_dtype != "fp32" or stripes["grad"] > 1)
    extra = [c for c in calls if not c.startswith(("load_", "store_")) and c != "compute"]
    assert extra == (["merge_grad"] if gmerge else [])
    compute = funcs["compute"]
    for a in ("p", "m", "v"):
        for k in range(stripes["state"]):
            assert f"{a}{k}_in" in compute.params and re.search(rf"\b{a}{k}_in\.read\(", compute.body)
            assert f"{a}{k}_out" in compute.params and re.search(rf"\b{a}{k}_out\.write\(", compute.body)


def _count_ops(update_one: Function) -> dict[str, int]:
    body = update_one.body
    counts = {op: 0 for op in (*OPS.values(), "fsqrt")}
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "{", "}")):
            continue
        rhs = line.split("=", 1)[1] if "=" in line else line
        counts["fsqrt"] += len(re.findall(r"\bhls::sqrt\(", rhs))
        for sym, op in OPS.items():
            counts[op] += rhs.count(sym)
    return counts


def test_allocation_is_ops_times_lanes(kernel) -> None:
    spec, code, manifest, funcs = kernel
    ops = _count_ops(funcs["update_one"])
    want = {"fmul": 9, "fadd": 3 if spec.optimizer == "adamw" else 4, "fsub": 1, "fdiv": 1, "fsqrt": 1}
    assert ops == want  # the semantics of design.md section 3, op by op
    loops = [body for _, body in _loops(funcs["compute"].body) if "update_one(" in body]
    assert len(loops) >= 1
    outer = max(loops, key=len)
    assert f"#pragma HLS PIPELINE II={16 // spec.lanes} style=frp\n" in outer
    limits = dict(re.findall(r"#pragma HLS ALLOCATION operation instances=(\w+) limit=(\d+)", outer))
    assert {k: int(v) for k, v in limits.items()} == {k: n * spec.lanes for k, n in ops.items()}
    assert "II = 16 / LANES" in _source(spec)[0]  # the comment that says why the limits are what they are


def test_only_the_compute_loop_is_free_running_and_it_may_be(kernel) -> None:
    """UG1399/UG1448: frp needs a process in a dataflow region whose I/O are streams, with blocking reads
    whose condition is known in the first stage (HLS falls back to stp with a warning otherwise)."""
    spec, code, _, funcs = kernel
    assert code.count("style=frp") == 1
    compute = funcs["compute"]
    loop = max((body for _, body in _loops(compute.body) if "update_one(" in body), key=len)
    assert "style=frp" in loop
    decl = re.search(r"static void compute\(([^)]*)\)\s*\{", code)
    assert decl
    params = _split_params(decl.group(1))
    streams = [p for p in params if p.startswith("hls::stream<")]
    scalars = [p for p in params if not p.startswith("hls::stream<")]
    assert all(re.fullmatch(r"hls::stream<\w+>& \w+", p) for p in streams), streams
    # Scalars by value (read once, at the start), and no array or pointer: nothing but FIFOs moves data.
    assert all(re.fullmatch(r"(unsigned int|float) \w+", p) for p in scalars), scalars
    reads = [m.start() for m in re.finditer(r"\.read\(\)", loop)]
    assert reads and max(reads) < loop.index("update_one(")  # every read before the arithmetic
    assert "empty()" not in loop and "read_nb" not in loop  # blocking reads only (200-1964)
    # Reads are unconditional or chosen by the stripe counter k (a loop register), never by data.
    for cond in re.findall(r"\b(?:if|switch)\s*\(([^)]*)\)", loop[:max(reads)]):
        assert cond.strip() == "k", cond


def test_burst_check_finds_nothing(kernel) -> None:
    """The project's static burst checker (hls/vitis/burst_check.py), once it is merged."""
    burst_check = pytest.importorskip("hls.vitis.burst_check")
    spec, _, _, _ = kernel
    assert burst_check.check_hls_source(_source(spec)[0]) == []
