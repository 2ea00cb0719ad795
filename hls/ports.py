"""The kernel's m_axi port names and their inverse: one grammar for generator, schema and readers.

Every array (grad, p, m, v, out) is split into stripes (hls/sizing.py); stripe k of a staging
array (grad, out) has one port, `grad<k>` / `out<k>`; stripe k of a state array (p, m, v) a read
and a write port, `p<k>_rd` and `p<k>_wr`, which the host points at the same buffer.
"""

from __future__ import annotations

import re

ARRAYS = ("grad", "p", "m", "v", "out")  # register-map order
STATE_ARRAYS = ("p", "m", "v")
READ_SUFFIX, WRITE_SUFFIX = "_rd", "_wr"
# AXI4-Stream arguments (not m_axi ports): the gradient shard in (grad_source "stream") and the
# updated parameters out (out_sink "memory+stream"). The HLS kernel's argument and the v++
# stream_connect end are the name; the RTL kernel's port is the prefixed AXI4-Stream interface.
GRAD_STREAM = "grad"
PARAM_STREAM = "param"
AXIS_PORTS = {GRAD_STREAM: "s_axis_grad", PARAM_STREAM: "m_axis_param"}
# The manifest schema's pattern (hls/validate.py) for any port name (stripe index up to 2 digits).
PORT_PATTERN = r"(grad|p|m|v|out)[0-9]{1,2}(_rd|_wr)?"
_PORT = re.compile(r"(grad|p|m|v|out)([0-9]+)(_rd|_wr)?\Z")


def port_names(array: str, index: int) -> list[str]:
    """The kernel's m_axi ports for stripe `index` of `array` (state: read and write port)."""
    if array in STATE_ARRAYS:
        return [f"{array}{index}{READ_SUFFIX}", f"{array}{index}{WRITE_SUFFIX}"]
    return [f"{array}{index}"]


def read_port(array: str, index: int) -> str:
    """The port the kernel reads stripe `index` of `array` through (grad<k>, p<k>_rd ...)."""
    return f"{array}{index}{READ_SUFFIX}" if array in STATE_ARRAYS else f"{array}{index}"


def write_port(array: str, index: int) -> str:
    """The port the kernel writes stripe `index` of `array` through (out<k>, p<k>_wr ...)."""
    return f"{array}{index}{WRITE_SUFFIX}" if array in STATE_ARRAYS else f"{array}{index}"


def parse_port(port: str) -> tuple[str, int, str | None]:
    """(array, stripe index, "rd" / "wr" / None) of a port name: the inverse of `port_names`."""
    m = _PORT.match(port)
    if not m or (m.group(3) is None) != (m.group(1) not in STATE_ARRAYS):
        raise ValueError(f"{port!r} is not a kernel port name (grad0, p1_rd, v0_wr, out0, ...)")
    return m.group(1), int(m.group(2)), m.group(3)[1:] if m.group(3) else None


def port_array(port: str) -> tuple[str, int]:
    """("p", 1) for p1_rd / p1_wr, ("grad", 0) for grad0."""
    array, index, _ = parse_port(port)
    return array, index


def is_read_port(port: str) -> bool:
    """The kernel reads through it: gradient stripes and the state read ports."""
    array, _, direction = parse_port(port)
    return array == "grad" or direction == "rd"


def is_written_port(port: str) -> bool:
    """The kernel writes through it: output stripes and the state write ports."""
    return not is_read_port(port)
