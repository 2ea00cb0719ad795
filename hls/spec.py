"""The kernel spec: everything that decides what gets generated, validated once, here.

A `KernelSpec` is frozen: sizing, templates, manifest and driver all read the same values.
Every name a user gives flows into C++, Tcl, cfg files and paths, so it is checked here
before anything is rendered.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import asdict, dataclass, fields

import numpy as np

from hls.errors import UserError

OPTIMIZERS = ("adam", "adamw")
GRAD_DTYPES = ("fp32", "bf16", "fp16")
OUT_DTYPES = ("fp32", "bf16")
GRAD_SOURCES = ("memory", "stream")
# Where the updated parameters go: card memory always (the card's own copy); with "memory+stream"
# also out on an AXI4-Stream, for the ring's all-gather (design.md sections 4 and 8.4).
OUT_SINKS = ("memory", "memory+stream")
STATE_DTYPE = "fp32"  # master parameters and both moments: fixed by design.md section 3
BEAT_BITS = 512
MAX_LANES = BEAT_BITS // 32  # 16 fp32 values per 512-bit beat
MAX_STRIPES = 32  # stripes of one state array per compute unit (one channel each)
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
BEAT_BYTES = BEAT_BITS // 8
# How each dtype is held in host memory: bf16 as its 16-bit patterns (numpy has no bfloat16).
STORAGE_DTYPES = {"fp32": np.dtype(np.float32), "bf16": np.dtype(np.uint16), "fp16": np.dtype(np.float16)}
# The RTL kernel's GRAD_FMT parameter (sim/rtl/kernel/onic_unpack.v): how a gradient beat is read.
GRAD_FMT = {"fp32": 0, "bf16": 1, "fp16": 2}
# Ranges every entry point shares (KernelSpec, the CLI options, the data-file schemas).
CLOCK_MHZ_RANGE = (50, 700)
MAX_COMPUTE_UNITS = 16
RATE_GPS_MAX = 1000

# C and C++ keywords (and a few names that would collide in generated HLS/Tcl/XRT code).
_RESERVED = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not
    not_eq nullptr operator or or_eq private protected public register reinterpret_cast requires
    restrict return short signed sizeof static static_assert static_cast struct switch template
    this thread_local throw true try typedef typeid typename union unsigned using virtual void
    volatile wchar_t while xor xor_eq _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local main module endmodule input output wire reg
    """.split()
)
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
MAX_NAME_LEN = 64


class SpecError(UserError):
    """A kernel spec value is not allowed; the message names the field and what is allowed."""


def validate_identifier(value: object, field: str = "name") -> str:
    """Accept only a plain ASCII C identifier that is not a C/C++ (or Verilog) keyword."""
    if not isinstance(value, str):
        raise SpecError(f"{field}: expected a C identifier string, got {type(value).__name__}")
    if not value.isascii() or not _IDENT.match(value):
        raise SpecError(
            f"{field}: {value!r} is not a C identifier (ASCII letter first, then letters, digits, '_')"
        )
    if len(value) > MAX_NAME_LEN:
        raise SpecError(f"{field}: {value!r} is longer than {MAX_NAME_LEN} characters")
    if value in _RESERVED or keyword.iskeyword(value) or value.startswith("__"):
        raise SpecError(f"{field}: {value!r} is a reserved word in C, C++ or Verilog")
    return value


def validate_kernel_name(value: object, field: str = "name") -> str:
    """A C identifier that also compiles as the kernel: not a name the generated code, AMD's HLS
    headers, the C/C++ standard library or our RTL already use (hls/reserved.py)."""
    validate_identifier(value, field)
    from hls.reserved import reserved_names

    if value in reserved_names():
        raise SpecError(f"{field}: {value!r} is already a name in the generated code, AMD's HLS headers, the C/C++ "
                        f"standard library or Verilog; choose another (e.g. my_{value})")
    return str(value)


def _choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SpecError(f"{field}: {value!r} is not allowed; choose one of {', '.join(allowed)}")
    return str(value)


@dataclass(frozen=True)
class KernelSpec:
    """One Adam/AdamW update kernel: what it computes and how wide it is."""

    target: str = "u55c"
    optimizer: str = "adamw"
    grad_dtype: str = "fp32"
    out_dtype: str = "fp32"
    lanes: int = 16
    compute_units: int = 1
    grad_source: str = "memory"
    name: str = "optimusnic_adamw"
    clock_mhz: float | None = None  # None: the target's default kernel clock
    # Stripes of each state array (p, m, v) per compute unit, each in its own memory channel.
    # None: sizing picks the fewest that carry the rate (design.md section 3b).
    stripes: int | None = None
    # The rate the memory plan is sized for, in G elements/s for the card. None: the line rate.
    rate_gps: float | None = None
    # Last, and left out of to_dict() at its default: manifests and build folders of kernels
    # without the parameter stream stay what they were.
    out_sink: str = "memory"

    def __post_init__(self) -> None:
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("grad_dtype", self.grad_dtype, GRAD_DTYPES)
        _choice("out_dtype", self.out_dtype, OUT_DTYPES)
        _choice("grad_source", self.grad_source, GRAD_SOURCES)
        _choice("out_sink", self.out_sink, OUT_SINKS)
        validate_kernel_name(self.name, "name")
        validate_identifier(self.target, "target")
        lanes = self.lanes
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
            raise SpecError(f"lanes: {lanes!r} must be a power of two from 1 to {MAX_LANES}")
        if lanes > MAX_LANES:
            raise SpecError(f"lanes: {lanes} exceeds {MAX_LANES} fp32 values per {BEAT_BITS}-bit beat")
        cus = self.compute_units
        if isinstance(cus, bool) or not isinstance(cus, int) or not 1 <= cus <= MAX_COMPUTE_UNITS:
            raise SpecError(f"compute_units: {cus!r} must be an integer from 1 to {MAX_COMPUTE_UNITS}")
        if self.clock_mhz is not None:
            clk = self.clock_mhz
            if isinstance(clk, bool) or not isinstance(clk, (int, float)) or not math.isfinite(clk) \
                    or not CLOCK_MHZ_RANGE[0] <= clk <= CLOCK_MHZ_RANGE[1]:
                raise SpecError(f"clock_mhz: {clk!r} must be a number from {CLOCK_MHZ_RANGE[0]} to "
                                f"{CLOCK_MHZ_RANGE[1]} (MHz)")
        st = self.stripes
        if st is not None and (isinstance(st, bool) or not isinstance(st, int) or not 1 <= st <= MAX_STRIPES):
            raise SpecError(f"stripes: {st!r} must be an integer from 1 to {MAX_STRIPES} (or None: sizing chooses)")
        rate = self.rate_gps
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                 or not math.isfinite(rate) or not 0 < rate <= RATE_GPS_MAX):
            raise SpecError(f"rate_gps: {rate!r} must be a number of G elements/s above 0 and at most {RATE_GPS_MAX}")
        if self.out_sink != "memory" and cus != 1:
            # the ring's all-gather takes one stream per card, in element order; compute units each
            # update a slice of the shard, so their streams would need merging the kernel does not do
            raise SpecError(f"out_sink: {self.out_sink!r} needs compute_units 1 (got {cus}): the parameter "
                            "stream carries the card's whole shard in element order")

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def out_bytes(self) -> int:
        return DTYPE_BYTES[self.out_dtype]

    @property
    def param_stream(self) -> bool:
        """The kernel also sends its updated parameters out on an AXI4-Stream (out_sink)."""
        return self.out_sink == "memory+stream"

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        if data["out_sink"] == "memory":
            del data["out_sink"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> KernelSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown spec field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)  # type: ignore[arg-type]

    def with_(self, **changes: object) -> KernelSpec:
        data = self.to_dict()
        data.update(changes)
        return KernelSpec.from_dict(data)


def default_name(optimizer: str) -> str:
    return f"optimusnic_{optimizer}"
