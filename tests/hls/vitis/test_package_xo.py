"""The RTL kernel's package_xo.tcl: its memory map is written in AMD's lines and holds the manifest's register map.

AMD's lines are those of Vitis_Accel_Examples rtl_kernels (rtl_vadd_2clks, rtl_vadd_hw_debug, ...
scripts/package_kernel.tcl), quoted below. Vivado cannot run here, so the script is also run by
tclsh under a STAND-IN for Vivado's Tcl commands (a test double: each `ipx::` command records the
object it would create and `set_property` its properties), which checks that the script is valid
Tcl and that the memory map it builds is the manifest's register map.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hls.generate import render
from hls.paths import RTL_DIR
from hls.spec import KernelSpec

SPECS = [
    KernelSpec(),  # u55c: the default plan
    KernelSpec(grad_source="stream", grad_dtype="bf16", out_dtype="bf16"),  # STATUS with the stream bits
    KernelSpec(target="u50", grad_dtype="bf16", out_dtype="bf16", stripes=4),  # many ports, within the 32 of the card
]

# AMD's lines (package_kernel.tcl of the rtl_kernels examples), whitespace as AMD writes them.
AMD_MEMORY_MAP = 'set mem_map    [::ipx::add_memory_map -quiet "s_axi_control" $core]'
AMD_ADDRESS_BLOCK = 'set addr_block [::ipx::add_address_block -quiet "reg0" $mem_map]'
AMD_MAP_REF = 'set_property slave_memory_map_ref "s_axi_control" [::ipx::get_bus_interfaces -of $core "s_axi_control"]'
AMD_CONTROL_REGISTER = [  # CTRL, GIER, IP_IER, IP_ISR
    'set reg      [::ipx::add_register "{name}" $addr_block]',
    '  set_property description    "{description}"    $reg',
    "  set_property address_offset 0x{offset:03X} $reg",
    "  set_property size           32    $reg",
]
AMD_POINTER = [
    'set reg      [::ipx::add_register -quiet "{name}" $addr_block]',
    "  set_property address_offset 0x{offset:03X} $reg",
    "  set_property size           [expr {{8*8}}]   $reg",
    "  set regparam [::ipx::add_register_parameter -quiet {{ASSOCIATED_BUSIF}} $reg]",
    "  set_property value m_axi_{name} $regparam",
]
AMD_SCALAR = [
    'set reg      [::ipx::add_register -quiet "{name}" $addr_block]',
    "  set_property address_offset 0x{offset:03X} $reg",
    "  set_property size           [expr {{4*8}}]   $reg",
]
CONTROL = [("CTRL", "CTRL", "Control signals"), ("GIER", "GIE", "Global Interrupt Enable Register"),
           ("IP_IER", "IER", "IP Interrupt Enable Register"), ("IP_ISR", "ISR", "IP Interrupt Status Register")]


def _generated(spec: KernelSpec) -> tuple[str, dict]:
    files, manifest = render(spec)
    return files["rtl/package_xo.tcl"].decode(), manifest


def _block(lines: list[str], text: str) -> None:
    """`lines` appear in `text` consecutively (AMD's trailing blanks aside)."""
    body = [ln.rstrip() for ln in text.splitlines()]
    first = lines[0]
    starts = [i for i, ln in enumerate(body) if ln == first]
    assert any(body[i:i + len(lines)] == lines for i in starts), "\n".join(["not found:", *lines])


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.target}-{s.grad_source}-{s.grad_dtype}")
def test_memory_map_lines_are_amds_for_every_register(spec: KernelSpec) -> None:
    text, manifest = _generated(spec)
    regmap = manifest["register_map"]
    for line in (AMD_MEMORY_MAP, AMD_ADDRESS_BLOCK, AMD_MAP_REF):
        assert line in text.splitlines(), line
    for name, key, description in CONTROL:
        _block([ln.format(name=name, description=description, offset=regmap["control"][key])
                for ln in AMD_CONTROL_REGISTER], text)
    registers = 4
    for arg in regmap["args"]:
        if arg["kind"] == "stream":
            assert f'"{arg["name"]}"' not in text  # a stream has no register
            continue
        template = AMD_POINTER if arg["kind"] == "pointer" else AMD_SCALAR
        _block([ln.format(name=arg["name"], offset=arg["offset"]) for ln in template], text)
        registers += 1
    extra = [("STATUS", regmap["status"]["offset"])]
    extra += [(f"PORT_ERR{k}", off) for k, off in enumerate(regmap["status"]["port_errors"]["offsets"])]
    for name, offset in extra:  # AMD's scalar lines with a description between, as AMD's CTRL has
        lines = text.splitlines()
        at = lines.index(AMD_SCALAR[0].format(name=name))
        assert lines[at + 1].startswith('  set_property description    "'), name
        assert [ln.rstrip() for ln in lines[at + 2:at + 4]] == [ln.format(offset=offset) for ln in AMD_SCALAR[1:]]
        registers += 1
    assert text.count("ipx::add_register ") == registers
    # The lines the packager would reject or that name objects the packager never made.
    assert "ipx::get_memory_maps" not in text and "ipx::get_registers" not in text


def _run_under_standin(text: str, tmp_path: Path) -> list[list[str]]:
    """package_xo.tcl run by tclsh with the Vivado stand-in's commands; what it recorded, one list a line."""
    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.skip("tclsh not installed (apt-get install tcl): needed to run the script under the stand-in")
    script = tmp_path / "package_xo.tcl"
    script.write_text(text)
    prelude = tmp_path / "vivado_standin.tcl"
    prelude.write_text(r"""
# TEST DOUBLE for the Vivado commands package_xo.tcl calls: records, creates nothing.
namespace eval ipx {}
set ::order {}
proc unknown {args} { return "" }
proc obj {kind name parent} { lappend ::order [list $kind $name $parent]; return "$kind:$name" }
proc ipx::current_core {} { return core }
proc ipx::add_memory_map {args} { obj map [lindex $args end-1] [lindex $args end] }
proc ipx::add_address_block {args} { obj block [lindex $args end-1] [lindex $args end] }
proc ipx::add_register {args} { obj reg [lindex $args end-1] [lindex $args end] }
proc ipx::add_field {name reg} { obj field $name $reg }
proc ipx::add_register_parameter {args} {
    set reg [lindex $args end]
    lappend ::order [list param [lindex $args end-1] $reg]
    return "param:$reg"
}
proc ipx::get_bus_interfaces {args} { return "busif:[lindex $args end]" }
proc set_property {key value {obj ""}} { lappend ::order [list prop $obj $key $value] }
set script [lindex $argv 0]
set argv [lrange $argv 1 end]
set argc [llength $argv]
source $script
foreach rec $::order { puts $rec }
""")
    run = subprocess.run([tclsh, str(prelude), str(script), str(RTL_DIR), str(tmp_path / "k.xo")], capture_output=True,
                         text=True, cwd=tmp_path, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stdout.splitlines() if ln and not ln.startswith("packaged ")]
    return [_tcl_list(ln) for ln in lines]


def _tcl_list(line: str) -> list[str]:
    return [a or b for a, b in re.findall(r"\{([^{}]*)\}|(\S+)", line)]


@pytest.mark.parametrize("spec", SPECS[:2], ids=lambda s: f"{s.target}-{s.grad_source}")
def test_memory_map_built_is_the_manifest_register_map(spec: KernelSpec, tmp_path: Path) -> None:
    """Interpreted by tclsh (Vivado's commands stood in for): one memory map s_axi_control with one block
    reg0 of the decoded range, a register per word of the manifest's map at its offset and size,
    ASSOCIATED_BUSIF m_axi_<port> on each pointer, the CTRL fields at the manifest's bits, and the
    control interface pointed at the map."""
    text, manifest = _generated(spec)
    regmap = manifest["register_map"]
    recs = _run_under_standin(text, tmp_path)
    objs = [r for r in recs if r[0] != "prop"]
    props: dict[str, dict[str, str]] = {}
    for r in recs:
        if r[0] == "prop":
            props.setdefault(r[1], {})[r[2]] = r[3]
    assert [r for r in objs if r[0] == "map"] == [["map", "s_axi_control", "core"]]
    assert [r for r in objs if r[0] == "block"] == [["block", "reg0", "map:s_axi_control"]]
    assert int(props["block:reg0"]["range"]) == 2 ** regmap["address_bits"]
    want = {"CTRL": (regmap["control"]["CTRL"], 32), "GIER": (regmap["control"]["GIE"], 32),
            "IP_IER": (regmap["control"]["IER"], 32), "IP_ISR": (regmap["control"]["ISR"], 32)}
    for a in regmap["args"]:
        if a["kind"] != "stream":
            want[a["name"]] = (a["offset"], 64 if a["kind"] == "pointer" else 32)
    want["STATUS"] = (regmap["status"]["offset"], 32)
    for k, off in enumerate(regmap["status"]["port_errors"]["offsets"]):
        want[f"PORT_ERR{k}"] = (off, 32)
    regs = [r[1] for r in objs if r[0] == "reg"]
    assert all(r[2] == "block:reg0" for r in objs if r[0] == "reg")
    got = {name: (int(props[f"reg:{name}"]["address_offset"], 0), int(props[f"reg:{name}"]["size"]))
           for name in regs}
    assert len(regs) == len(set(regs)) and got == want
    params = {r[2]: props[f"param:{r[2]}"]["value"] for r in objs if r[0] == "param"}
    assert all(r[1] == "ASSOCIATED_BUSIF" for r in objs if r[0] == "param")
    assert params == {f"reg:{a['name']}": f"m_axi_{a['name']}" for a in regmap["args"] if a["kind"] == "pointer"}
    fields = {r[1]: (int(props[f"field:{r[1]}"]["BIT_OFFSET"]), int(props[f"field:{r[1]}"]["BIT_WIDTH"]))
              for r in objs if r[0] == "field"}
    assert {name.lower(): off for name, (off, _) in fields.items() if not name.startswith("RESERVED")} == \
        regmap["ctrl_bits"]
    assert sum(width for _, width in fields.values()) == 32  # every bit of CTRL once
    assert sorted(off for off, _ in fields.values()) == sorted({off for off, _ in fields.values()})
    assert props["busif:s_axi_control"]["slave_memory_map_ref"] == "s_axi_control"
    assert props["core"]["vitis_drc"] == f"ctrl_protocol {regmap['protocol']}"


def test_block_protocol_is_the_register_maps_everywhere() -> None:
    """HLS pragma, RTL kernel.xml, the packager's DRC property and the manifest name one protocol."""
    for spec in SPECS[:2]:
        files, manifest = render(spec)
        protocol = manifest["register_map"]["protocol"]
        assert f"#pragma HLS INTERFACE {protocol} port=return" in files[f"hls/{spec.name}.cpp"].decode()
        assert f'hwControlProtocol="{protocol}"' in files["rtl/kernel.xml"].decode()
        assert f"set_property vitis_drc {{ctrl_protocol {protocol}}} $core" in files["rtl/package_xo.tcl"].decode()
