"""The kernel's AXI4-Lite register map, computed once from the spec (design.md section 4).

Vitis HLS `ap_ctrl_hs` layout: control words at 0x00-0x0C, then the arguments from 0x10 in
declaration order, a 64-bit pointer taking 12 bytes (low, high, reserved) and a 32-bit scalar
8 bytes (value, reserved). The manifest carries this map; the HLS C++, the RTL control block,
kernel.xml and the driver all read it from there, so they cannot drift apart.

After the arguments: the sticky STATUS word and its control word (8 bytes), then the PORT_ERR
words (one bit per m_axi port in register-map order, 32 ports per word: an RRESP error on a read
port, a BRESP error on a write port). The HLS stream kernel's STATUS is its `status` output
argument, which Vitis HLS gives the ap_vld protocol: the data word at the pragma's offset and a
control word after it (bit 0 `status_ap_vld`, clear on read; UG1399 "S_AXILITE and Port-Level
Protocols", "S_AXILITE Offset Option"), so PORT_ERR starts a word later. Only the RTL kernel
implements PORT_ERR (its STATUS control word reads 0): a Vitis HLS m_axi adapter does not hand
RRESP or BRESP to the C++, and the HLS kernel reads 0 there (its control block has nothing there).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hls.golden import scalar_names
from hls.ports import PARAM_STREAM, STATE_ARRAYS, is_read_port, port_names
from hls.sizing import StripeCounts
from hls.spec import KernelSpec

# The block-level protocol of every kernel: the HLS pragma, the RTL control block, kernel.xml, the
# packager's DRC property and the driver all follow this one (design.md section 4 says why it is
# ap_ctrl_hs and not Vitis's default ap_ctrl_chain).
PROTOCOL = "ap_ctrl_hs"

CTRL = 0x00
GIE = 0x04
IER = 0x08
ISR = 0x0C
ARGS_BASE = 0x10

CTRL_START = 1 << 0
CTRL_DONE = 1 << 1
CTRL_IDLE = 1 << 2
CTRL_READY = 1 << 3
CTRL_AUTO_RESTART = 1 << 7

POINTER_STRIDE = 12
SCALAR_STRIDE = 8

# The sticky STATUS word that follows the arguments: cleared when a run starts, set by the run's
# errors, read by the driver after every run (the kernel still reaches ap_done on any of them).
STATUS_BITS = {
    "read_response": 0,  # an RRESP of SLVERR/DECERR on any read port
    "write_response": 1,  # a BRESP of SLVERR/DECERR on any write port
    "stream_short": 2,  # TLAST came before the shard's n elements (the rest read as zero gradients)
    "stream_long": 3,  # the shard's last beat had no TLAST (beats dropped up to TLAST)
    "misaligned": 4,  # a pointer not 64-byte aligned (nothing read or written)
    "stream_keep": 5,  # a stream beat's TKEEP did not cover the shard's bytes (partial beat)
}
STATUS_CAUSES = {
    "read_response": "a memory read returned an error response (RRESP): wrong bank or address",
    "write_response": "a memory write returned an error response (BRESP): wrong bank or address",
    "stream_short": "the gradient stream shard ended (TLAST) before n elements",
    "stream_long": "the gradient stream shard was longer than n elements (dropped up to TLAST)",
    "misaligned": "a buffer pointer is not 64-byte aligned (the kernel read and wrote nothing)",
    "stream_keep": "a gradient stream beat's TKEEP was neither all ones nor, on the shard's last beat, the bytes"
                   " of its last elements: bytes of the shard are missing",
}
# After a read response error, a short stream shard or a stream beat with missing bytes (TKEEP) the
# rest of the run's results are wrong: the kernel finishes every burst it started but with
# WSTRB = 0, so memory keeps the values it had from the beat where the error entered the datapath
# on (earlier beats may be kept too). Memory then holds p, m, v of two steps mixed element by
# element: only a checkpoint restores a consistent state (design.md section 4).
SUPPRESSING = ("read_response", "stream_short", "stream_keep")
PORTS_PER_WORD = 32
# STATUS takes its data word and a control word, as Vitis HLS lays out an output scalar on
# s_axilite (ap_vld: `status_ap_vld` in bit 0 of the second word, clear on read): the HLS stream
# kernel's control block has it there, so nothing else may be (the RTL kernel reads 0 there).
STATUS_SIZE = 8


@dataclass(frozen=True)
class Arg:
    name: str
    kind: str  # "pointer" | "scalar" | "stream"
    offset: int | None  # register offset (None for a stream)
    size: int  # bytes of register space (12, 8, or 0 for a stream)
    direction: str  # "in" | "out" | "inout"
    description: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_ARRAYS = {
    "grad": "gradient shard",
    "p": "fp32 master parameters",
    "m": "fp32 first moment",
    "v": "fp32 second moment",
    "out": "updated parameters in the output dtype",
}
_DESCRIPTIONS = {
    "n": "number of elements in the shard",
    "step_size": "f32(lr / bc1)",
    "rbc2": "f32(1 / sqrt(bc2))",
    "decay": "f32(1 - lr * weight_decay) (AdamW)",
    "l2": "f32(weight_decay) (Adam L2 term)",
    "b1": "f32(beta1)",
    "omb1": "f32(1 - beta1)",
    "b2": "f32(beta2)",
    "omb2": "f32(1 - beta2)",
    "eps": "f32(eps)",
    "gs": "f32(grad_scale)",
}


def _pointer(array: str, index: int, stripes: int, port: str) -> tuple[str, str]:
    """Direction and description of one m_axi port (stripe `index` of `stripes`)."""
    where = f"stripe {index} of {stripes} (beats {index}, {index} + {stripes}, ...)" if stripes > 1 else "whole array"
    if array in STATE_ARRAYS:
        rd = is_read_port(port)
        return ("in" if rd else "out"), f"{_ARRAYS[array]}, {where}, {'read' if rd else 'written back'}"
    verb = "read" if array == "grad" else "written"
    return ("in" if array == "grad" else "out"), f"{_ARRAYS[array]}, {where}, {verb}"


def register_map(spec: KernelSpec, stripes: StripeCounts) -> list[Arg]:
    """The arguments of `spec`'s kernel in declaration order, with their register offsets.

    Pointers are one per m_axi port of the memory plan (sizing): a state stripe has a read and a
    write port, which the host points at the same buffer.
    """
    args: list[Arg] = []
    offset = ARGS_BASE
    if spec.grad_source == "stream":
        args.append(Arg("grad", "stream", None, 0, "in", "gradient AXI4-Stream (tlast ends a shard)"))
    if spec.param_stream:
        args.append(Arg(PARAM_STREAM, "stream", None, 0, "out",
                        f"updated parameters ({spec.out_dtype}) as an AXI4-Stream in element order, as out is "
                        "laid out (tlast ends the run)"))
    for array, index in stripes.stripes():
        for port in port_names(array, index):
            direction, text = _pointer(array, index, stripes.of(array), port)
            args.append(Arg(port, "pointer", offset, POINTER_STRIDE, direction, text))
            offset += POINTER_STRIDE
    for name in ("n", *scalar_names(spec.optimizer)):
        args.append(Arg(name, "scalar", offset, SCALAR_STRIDE, "in", _DESCRIPTIONS[name]))
        offset += SCALAR_STRIDE
    return args


def status_offset(args: list[Arg]) -> int:
    """The STATUS word: the next free offset after the arguments."""
    return max((a.offset + a.size for a in args if a.offset is not None), default=ARGS_BASE)


def pointer_ports(args: list[Arg]) -> list[str]:
    """The m_axi ports in register-map order: bit k % 32 of PORT_ERR word k // 32 is port k."""
    return [a.name for a in args if a.kind == "pointer"]


def port_error_offsets(args: list[Arg]) -> list[int]:
    """The PORT_ERR words, after STATUS and its control word: one per 32 m_axi ports."""
    words = -(-len(pointer_ports(args)) // PORTS_PER_WORD)
    return [status_offset(args) + STATUS_SIZE + 4 * k for k in range(words)]


def port_errors(ports: list[str], words: list[int]) -> list[str]:
    """The ports (register-map order) whose bit is set in the PORT_ERR `words` (offset order)."""
    return [port for k, port in enumerate(ports)
            if k // PORTS_PER_WORD < len(words) and words[k // PORTS_PER_WORD] >> (k % PORTS_PER_WORD) & 1]


def status_causes(value: int) -> list[str]:
    """The names of the STATUS bits set in `value` (unknown bits as `bit<k>`)."""
    names = [name for name, bit in STATUS_BITS.items() if value >> bit & 1]
    known = sum(1 << bit for bit in STATUS_BITS.values())
    names += [f"bit{k}" for k in range(32) if (value & ~known) >> k & 1]
    return names


def address_range(args: list[Arg]) -> int:
    """Size of the AXI4-Lite address space, a power of two (at least 0x1000 as XRT expects)."""
    end = max([status_offset(args) + STATUS_SIZE - 4, *port_error_offsets(args)]) + 4
    size = 0x1000
    while size < end:
        size *= 2
    return size


def to_manifest(spec: KernelSpec, stripes: StripeCounts) -> dict[str, object]:
    args = register_map(spec, stripes)
    return {
        "protocol": PROTOCOL,
        "control": {"CTRL": CTRL, "GIE": GIE, "IER": IER, "ISR": ISR},
        "ctrl_bits": {"ap_start": 0, "ap_done": 1, "ap_idle": 2, "ap_ready": 3, "auto_restart": 7},
        "address_bits": (address_range(args) - 1).bit_length(),
        "stripes": {"grad": stripes.grad, "state": stripes.state, "out": stripes.out},
        "args": [a.to_dict() for a in args],
        "status": {"offset": status_offset(args), "size": STATUS_SIZE, "bits": dict(STATUS_BITS),
                   "port_errors": {"offsets": port_error_offsets(args), "ports": pointer_ports(args),
                                   "ports_per_word": PORTS_PER_WORD}},
    }
