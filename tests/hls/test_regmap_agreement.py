"""One register map, four places: manifest.json, kernel.xml, the HLS C++ top and the Verilog
control block must agree on every argument's name, order and offset (design.md section 4).

Everything is parsed from the generated files, as a tool reading them would; nothing here
computes offsets itself. (The control block's behaviour at those offsets is tested in
simulation by test_rtl_kernel: test_control writes and reads back every argument.)
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from hls import regmap
from hls.generate import render
from hls.sizing import size_spec
from hls.spec import KernelSpec
from hls.targets import get_target

SPECS = [
    KernelSpec(),
    KernelSpec(optimizer="adam", name="optimusnic_adam"),
    KernelSpec(grad_source="stream", grad_dtype="bf16", out_dtype="bf16", lanes=4),
    KernelSpec(optimizer="adam", grad_source="stream", name="opt_adam_s", lanes=1, target="u280"),
    KernelSpec(target="u250", grad_dtype="fp16", name="k250"),
    # 34 m_axi ports (grad 2, state 5, out 2 stripes): two PORT_ERR words
    KernelSpec(optimizer="adam", grad_dtype="fp16", out_dtype="bf16", lanes=16, target="u50", name="k_u50"),
]


def _ids(spec: KernelSpec) -> str:
    return f"{spec.optimizer}-{spec.grad_source}-{spec.target}"


def manifest_offsets(manifest: dict) -> dict[str, int | None]:
    return {a["name"]: a["offset"] for a in manifest["register_map"]["args"]}


def kernel_xml_args(text: str) -> list[tuple[str, int | None, str]]:
    """(name, offset or None for a stream, port) in id order."""
    root = ET.fromstring(text)
    kernel = root.find("kernel")
    assert kernel is not None and kernel.get("hwControlProtocol") == "ap_ctrl_hs"
    args = sorted(kernel.iter("arg"), key=lambda a: int(a.get("id")))
    out = []
    for a in args:
        stream = a.get("addressQualifier") == "4"
        out.append((a.get("name"), None if stream else int(a.get("offset"), 16), a.get("port")))
    return out


def verilog_offsets(text: str) -> dict[str, int]:
    found = re.findall(r"localparam \[ADDR_BITS-1:0\] ADDR_(\w+?)(?:_DATA_0)?\s*=\s*\d+'h([0-9a-fA-F]+);", text)
    return {name.lower(): int(value, 16) for name, value in found if not name.endswith("_DATA_1")}


def hls_signature(text: str, name: str) -> list[str]:
    """Argument names of `extern "C" void name(...)`, in order."""
    m = re.search(r'extern "C" void ' + re.escape(name) + r"\s*\((.*?)\)\s*\{", text, re.S)
    assert m, f"no extern \"C\" top function {name} in the HLS C++"
    params, depth, cur = [], 0, ""
    for ch in m.group(1):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            params.append(cur)
            cur = ""
        else:
            cur += ch
    params.append(cur)
    return [re.findall(r"[A-Za-z_]\w*", p)[-1] for p in params if p.strip()]


def hls_offsets(text: str) -> dict[str, int]:
    found = re.findall(r"#pragma HLS INTERFACE s_axilite port=(\w+) bundle=control offset=(0x[0-9A-Fa-f]+)", text)
    return {name: int(value, 16) for name, value in found}


@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_register_map_agrees_everywhere(spec: KernelSpec) -> None:
    files, manifest = render(spec)
    want = manifest_offsets(manifest)
    names = list(want)
    assert names == [a.name for a in regmap.register_map(spec, size_spec(spec, get_target(spec.target)).stripes)]

    # kernel.xml: same arguments, same order (id), same offsets, pointers on their own m_axi port
    xml_args = kernel_xml_args(files["rtl/kernel.xml"].decode())
    assert [a[0] for a in xml_args] == names
    for name, offset, port in xml_args:
        assert offset == want[name], f"kernel.xml {name}: {offset} != manifest {want[name]}"
        kind = next(a["kind"] for a in manifest["register_map"]["args"] if a["name"] == name)
        assert port == {"pointer": f"m_axi_{name}", "scalar": "s_axi_control", "stream": "s_axis_grad"}[kind]
    xml_root = ET.fromstring(files["rtl/kernel.xml"].decode())
    control = [p for p in xml_root.iter("port") if p.get("name") == "s_axi_control"][0]
    assert int(control.get("range"), 16) == 2 ** manifest["register_map"]["address_bits"]

    # the Verilog control block: control words and every register argument at its offset
    ctrl = files[f"rtl/{spec.name}_control_s_axi.v"].decode()
    v = verilog_offsets(ctrl)
    for word, key in (("ap_ctrl", "CTRL"), ("gie", "GIE"), ("ier", "IER"), ("isr", "ISR")):
        assert v[word] == manifest["register_map"]["control"][key]
    for name, offset in want.items():
        if offset is None:
            assert name not in v, f"stream argument {name} must have no register"
        else:
            assert v.get(name) == offset, f"control block {name}: {v.get(name)} != manifest {offset}"
    # STATUS and its control word (the HLS stream kernel's status_ap_vld, as Vitis HLS lays out an
    # output scalar), then one PORT_ERR word per 32 m_axi ports (register-map order), all inside the range
    status = manifest["register_map"]["status"]
    assert v["status"] == status["offset"]
    pointers = [n for n, a in zip(names, manifest["register_map"]["args"], strict=True) if a["kind"] == "pointer"]
    assert status["port_errors"]["ports"] == pointers
    offsets = status["port_errors"]["offsets"]
    assert offsets == [status["offset"] + 8 + 4 * k for k in range(-(-len(pointers) // 32))]
    assert [v.get(f"port_err_{k}") for k in range(len(offsets))] == offsets
    assert offsets[-1] + 4 <= 2 ** manifest["register_map"]["address_bits"]
    assert re.search(rf"input  wire \[{len(pointers) - 1}:0\]\s+port_err,", ctrl)
    assert re.search(rf"parameter integer ADDR_BITS = {manifest['register_map']['address_bits']}\b", ctrl)

    # the Verilog top: one AXI4 master per pointer argument, the stream port iff a stream argument
    top = files[f"rtl/{spec.name}.v"].decode()
    ports = set(re.findall(r"\b(m_axi_\w+?)_a[rw]addr\b", top))  # read-only ports have no AW channel
    assert ports == {f"m_axi_{n}" for n, a in zip(names, manifest["register_map"]["args"], strict=True)
                     if a["kind"] == "pointer"}
    assert ("s_axis_grad_tdata" in top) == (spec.grad_source == "stream")
    # read ports (grad*, *_rd) have only AR/R, write ports (*_wr, out*) only AW/W/B
    for n in (n for n, a in zip(names, manifest["register_map"]["args"], strict=True) if a["kind"] == "pointer"):
        writes = n.endswith("_wr") or n.startswith("out")
        assert (f"m_axi_{n}_awaddr" in top) == writes and (f"m_axi_{n}_araddr" in top) != writes, n

    # the HLS C++ top function: argument order, and the s_axilite offsets it pins
    cpp_name = f"hls/{spec.name}.cpp"
    if cpp_name not in files:
        pytest.skip(f"{cpp_name} is not generated (templates/hls not in place yet)")
    cpp = files[cpp_name].decode()
    # a stream kernel reports STATUS (stream_short / stream_long) through a last output argument
    stream = spec.grad_source == "stream"
    assert hls_signature(cpp, spec.name) == names + (["status"] if stream else [])
    pinned = hls_offsets(cpp)
    assert pinned == {n: o for n, o in want.items() if o is not None} | (
        {"status": manifest["register_map"]["status"]["offset"]} if stream else {})
