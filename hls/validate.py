"""One validation layer for every data file the toolkit reads: a schema per format.

Formats: targets files (the catalog and users' overrides), project manifests, registry
manifests, shard checkpoint headers, and the xclbin container layout. Each schema states types,
finite ranges and string patterns (identifiers, part numbers, platform names, bank expressions,
relative file names); fields a schema does not know are refused. A failure is one line naming
the file, the field and what is allowed:

    mine.toml: targets.mycard.part: 'x; exec sh' is not a part number (e.g. xcu55c-fsvh2892-2L-e)

No text from a data file reaches a generated file, a command line or a path without passing
here. The string patterns are what makes that safe: a target name may appear in C++, Tcl,
Makefile and cfg comments, so it may not hold a newline, a backslash (line continuation), `*`
(a `*/`), quotes, `$`, `[`, `]`, braces or `;`; a part number is written unquoted into Tcl, so it is
letters, digits and dashes only; free text (a flow note, sources) is one printable line
without a backslash, so it can sit in a `#` comment and cannot continue it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hls.errors import Invalid, UserError  # noqa: F401  (Invalid: validate.Invalid, as callers name it)
from hls.ports import PORT_PATTERN
from hls.spec import CLOCK_MHZ_RANGE, MAX_COMPUTE_UNITS, MAX_LANES, MAX_STRIPES, RATE_GPS_MAX


@dataclass(frozen=True)
class Where:
    file: str
    path: tuple[str, ...] = ()

    def at(self, key: object) -> Where:
        return Where(self.file, (*self.path, str(key)))

    def fail(self, message: str) -> Invalid:
        field = ".".join(_plain(p) for p in self.path) or "(top level)"
        return Invalid(f"{self.file}: {field}: {message}")


_PLAIN = re.compile(r"[A-Za-z0-9_.:/+-]{1,64}")


def _plain(key: str) -> str:
    """A field name as it appears in a message: itself when plain, else quoted and escaped (a key
    from a hostile file may hold a newline or terminal escapes)."""
    return key if _PLAIN.fullmatch(key) else _show(key)


def _show(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Schema:
    def check(self, value: Any, where: Where) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class Int(Schema):
    """A whole number from lo to hi. An integral finite float (1e9 in JSON) is accepted as its int."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def check(self, value: Any, where: Where) -> int:
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise where.fail(f"{_show(value)} must be a whole number from {self.lo:,} to {self.hi:,}")
        return value


class Num(Schema):
    """A finite number in [lo, hi] (or (lo, hi] with lo_open)."""

    def __init__(self, lo: float, hi: float, *, lo_open: bool = False) -> None:
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def check(self, value: Any, where: Where) -> float | int:
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        if ok:
            try:
                f = float(value)
            except OverflowError:
                f = math.inf
            ok = math.isfinite(f) and (self.lo < f if self.lo_open else self.lo <= f) and f <= self.hi
        if not ok:
            low = f"above {self.lo:g}" if self.lo_open else f"from {self.lo:g}"
            raise where.fail(f"{_show(value)} must be a finite number {low} to {self.hi:g}")
        return value


class Bool(Schema):
    def check(self, value: Any, where: Where) -> bool:
        if not isinstance(value, bool):
            raise where.fail(f"{_show(value)} must be true or false")
        return value


class Str(Schema):
    """A string matching `pattern` (whole string), described to the user as `desc`."""

    def __init__(self, pattern: str, desc: str, max_len: int = 64) -> None:
        self.rx = re.compile(pattern)
        self.desc, self.max_len = desc, max_len

    def check(self, value: Any, where: Where) -> str:
        if not isinstance(value, str):
            raise where.fail(f"{_show(value)} must be a string: {self.desc}")
        if len(value) > self.max_len or not value.isascii() or not self.rx.fullmatch(value):
            raise where.fail(f"{_show(value)} is not {self.desc}")
        return value


class Text(Schema):
    """Free text: one printable line, no backslash, at most max_len characters."""

    def __init__(self, max_len: int = 2000) -> None:
        self.max_len = max_len

    def check(self, value: Any, where: Where) -> str:
        if not isinstance(value, str):
            raise where.fail(f"{_show(value)} must be a string (one line of text)")
        if len(value) > self.max_len:
            raise where.fail(f"text of {len(value)} characters; at most {self.max_len}")
        if not value.isprintable() or "\\" in value:
            raise where.fail(f"{_show(value)}: text must be one printable line without a backslash")
        return value


class Enum(Schema):
    def __init__(self, *values: object) -> None:
        self.values = values

    def check(self, value: Any, where: Where) -> Any:
        if isinstance(value, bool) or value not in self.values or type(value) is not type(self.values[0]):
            raise where.fail(f"{_show(value)}; choose one of {', '.join(map(str, self.values))}")
        return value


class Opt(Schema):
    """`null` (None) or the inner schema."""

    def __init__(self, inner: Schema) -> None:
        self.inner = inner

    def check(self, value: Any, where: Where) -> Any:
        return None if value is None else self.inner.check(value, where)


class List(Schema):
    def __init__(self, item: Schema, max_items: int, min_items: int = 0) -> None:
        self.item, self.max_items, self.min_items = item, max_items, min_items

    def check(self, value: Any, where: Where) -> list[Any]:
        if not isinstance(value, (list, tuple)):
            raise where.fail(f"must be a list, got {type(value).__name__}")
        if not self.min_items <= len(value) <= self.max_items:
            raise where.fail(f"{len(value)} items; allowed {self.min_items} to {self.max_items}")
        return [self.item.check(v, where.at(i)) for i, v in enumerate(value)]


class Map(Schema):
    """A table with keys matching `key` and values of one schema."""

    def __init__(self, key: Str, value: Schema, max_items: int, min_items: int = 0) -> None:
        self.key, self.value, self.max_items, self.min_items = key, value, max_items, min_items

    def check(self, value: Any, where: Where) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise where.fail(f"must be a table/object, got {type(value).__name__}")
        if not self.min_items <= len(value) <= self.max_items:
            raise where.fail(f"{len(value)} entries; allowed {self.min_items} to {self.max_items}")
        out = {}
        for k, v in value.items():
            self.key.check(k, where.at(k))
            out[k] = self.value.check(v, where.at(k))
        return out


class Obj(Schema):
    """A table with known fields: `required` must be there, others may be; anything else is refused.
    `partial=True` (an override merged onto a catalog entry) checks the fields present, none required."""

    def __init__(self, required: dict[str, Schema], optional: dict[str, Schema] | None = None,
                 extra: Callable[[dict[str, Any], Where], None] | None = None) -> None:
        self.required = required
        self.optional = optional or {}
        self.extra = extra

    @property
    def known(self) -> dict[str, Schema]:
        return {**self.required, **self.optional}

    def check(self, value: Any, where: Where, partial: bool = False) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise where.fail(f"must be a table/object, got {type(value).__name__}")
        known = self.known
        unknown = [k for k in value if k not in known]
        if unknown:
            raise where.at(unknown[0]).fail(f"unknown field; known fields: {', '.join(sorted(known))}")
        if not partial:
            missing = [k for k in self.required if k not in value]
            if missing:
                raise where.fail(f"missing field(s) {', '.join(missing)}")
        out = {}
        for k, v in value.items():
            schema = known[k]
            if partial and isinstance(schema, Obj):
                out[k] = schema.check(v, where.at(k), partial=True)
            else:
                out[k] = schema.check(v, where.at(k))
        if self.extra and not partial:
            self.extra(out, where)
        return out


class Json(Schema):
    """Any JSON value of bounded size: depth, items, string length; numbers finite. For parsed
    vendor-report summaries and the like, which are shown, never executed nor used as paths."""

    def __init__(self, max_depth: int = 8, max_items: int = 10_000, max_str: int = 4096) -> None:
        self.max_depth, self.max_items, self.max_str = max_depth, max_items, max_str

    def check(self, value: Any, where: Where) -> Any:
        budget = [self.max_items]

        def walk(v: Any, w: Where, depth: int) -> None:
            budget[0] -= 1
            if budget[0] < 0:
                raise where.fail(f"more than {self.max_items:,} values")
            if depth > self.max_depth:
                raise w.fail(f"nested deeper than {self.max_depth} levels")
            if v is None or isinstance(v, bool):
                return
            if isinstance(v, (int, float)):
                if isinstance(v, float) and not math.isfinite(v):
                    raise w.fail(f"{v!r} is not a finite number")
                return
            if isinstance(v, str):
                if len(v) > self.max_str:
                    raise w.fail(f"string of {len(v)} characters; at most {self.max_str}")
                return
            if isinstance(v, (list, tuple)):
                for i, x in enumerate(v):
                    walk(x, w.at(i), depth + 1)
                return
            if isinstance(v, Mapping):
                for k, x in v.items():
                    if not isinstance(k, str) or len(k) > 256:
                        raise w.fail(f"key {_show(k)} must be a string of at most 256 characters")
                    walk(x, w.at(k), depth + 1)
                return
            raise w.fail(f"{type(v).__name__} is not a JSON value")

        walk(value, where, 0)
        return value


# --- string patterns ---------------------------------------------------------------------------

IDENT_RE = r"[A-Za-z][A-Za-z0-9_]{0,63}"
IDENT = Str(IDENT_RE, "an identifier (ASCII letter first, then letters, digits, '_'; at most 64)")
TARGET_NAME = Str(r"[A-Za-z0-9][A-Za-z0-9 ._+()/,-]{0,63}",
                  "a card name: letters, digits, space and . _ + ( ) / , - (at most 64; e.g. 'Alveo U55C')")
PART = Str(r"[a-z][a-z0-9]{2,15}(-[A-Za-z0-9]{1,12}){1,5}",
           "a part number: lower-case letters and digits, then dash-separated groups (e.g. xcu55c-fsvh2892-2L-e)")
PLATFORM = Str(r"[A-Za-z][A-Za-z0-9_]{0,127}",
               "a platform name: letters, digits, '_' (e.g. xilinx_u55c_gen3x16_xdma_3_202210_1)", max_len=128)
BANK_PREFIXES = ("HBM", "DDR", "PLRAM", "HOST")
BANK_EXPR = Str(r"(HBM|DDR|PLRAM|HOST)\[[0-9]{1,3}(:[0-9]{1,3})?\]",
                "a bank expression PREFIX[i] or PREFIX[i:j] with PREFIX HBM, DDR, PLRAM or HOST")
KIND = Str(r"[A-Za-z0-9][A-Za-z0-9+_.-]{0,31}", "a short kind name (letters, digits, + _ . -), e.g. HBM2, QSFP28")
FAMILY = Str(r"[a-z][a-z0-9_]{0,63}", "a family name in lower case with '_' (e.g. virtex_ultrascale_plus)")
FIELD_KEY = Str(r"[A-Za-z][A-Za-z0-9_.]{0,63}", "a field name (letters, digits, '_', '.')")
HEX64 = Str(r"[0-9a-f]{64}", "a sha256 (64 lower-case hex digits)")
VERSION = Str(r"[0-9]{1,4}(\.[0-9]{1,6}){1,3}([A-Za-z0-9.+-]{0,32})", "a version like 0.1.0")
REL_FILE = Str(r"(hls|rtl|versal)/[A-Za-z0-9][A-Za-z0-9_.-]{0,127}",
               "a generated file: hls/, rtl/ or versal/ then a plain file name (no '..', no sub-folder)", max_len=140)
UTC = Str(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", "a UTC time like 2026-01-31T12:00:00Z")

BIG = 1 << 53  # counts and byte sizes
MIN_CHANNEL_BYTES = 1 << 20  # the smallest memory channel a targets file may declare

# --- targets files ----------------------------------------------------------------------------

CLOCK_MHZ = CLOCK_MHZ_RANGE  # the same range as KernelSpec.clock_mhz and every --clock option


def _memory_extra(mem: dict[str, Any], where: Where) -> None:
    if mem["channel_capacity_bytes"] > mem["capacity_bytes"]:
        raise where.at("channel_capacity_bytes").fail("is larger than capacity_bytes")
    slr = mem.get("bank_slr")
    if slr is not None and len(slr) != mem["channels"]:
        raise where.at("bank_slr").fail(f"{len(slr)} entries for {mem['channels']} channels; give one SLR per channel")


MEMORY = Obj(
    required={
        "kind": KIND,
        "capacity_bytes": Int(MIN_CHANNEL_BYTES, BIG),
        "peak_bandwidth_bytes_per_s": Int(1, 10**15),
        "channels": Int(1, 128),
        # A channel holds at least a few chunks of staging (a real one holds 256 MiB and more).
        "channel_capacity_bytes": Int(MIN_CHANNEL_BYTES, BIG),
        "channel_bandwidth_bytes_per_s": Int(1, 10**14),
        "bank_prefix": Enum(*BANK_PREFIXES),
    },
    optional={"bank_slr": Opt(List(Int(0, 7), 128)), "axi_ports": Int(1, 1024), "ports_per_channel": Int(1, 1024),
              "slr": Opt(Int(0, 7))},
    extra=_memory_extra,
)


def _target_extra(t: dict[str, Any], where: Where) -> None:
    slrs = t.get("slrs", 1)
    for i, s in enumerate(t["memory"].get("bank_slr") or ()):
        if s >= slrs:
            raise where.at("memory").at("bank_slr").at(i).fail(f"SLR {s}, but the card has slrs = {slrs}")
    mem_slr = t["memory"].get("slr")
    if mem_slr is not None and mem_slr >= slrs:
        raise where.at("memory").at("slr").fail(f"SLR {mem_slr}, but the card has slrs = {slrs}")
    if t["flow"] == "xrt" and not t.get("platform"):
        raise where.at("platform").fail("an xrt-flow target needs its XRT platform name")


EFFICIENCY = Obj(required={"value": Num(0, 1, lo_open=True)}, optional={"source": Text(4000)})
TARGET = Obj(
    required={
        "name": TARGET_NAME,
        "part": PART,
        "flow": Enum("xrt", "versal"),
        "kernel_clock_mhz": Num(*CLOCK_MHZ),
        "memory": MEMORY,
        "network": Obj(required={"ports": Int(1, 16), "line_rate_gbps": Num(0, 3200, lo_open=True)},
                       optional={"kind": KIND}),
    },
    optional={
        "family": FAMILY,
        "flow_note": Text(2000),
        "platform": Opt(PLATFORM),
        "slrs": Int(1, 8),
        "secondary_memory": Opt(MEMORY),
        "pcie": Text(200),
        "resources": Obj(required={}, optional={**{r: Int(0, 10**8) for r in ("lut", "ff", "dsp", "bram36", "uram")},
                                                "note": Text(2000)}),
        "usable_fraction": Num(0, 1, lo_open=True),
        "sources": Map(FIELD_KEY, Text(4000), 64),
        "unconfirmed": List(Text(4000), 64),
        "memory_efficiency": EFFICIENCY,
    },
    extra=_target_extra,
)
TARGET_KEY = Str(IDENT_RE, "a target key: an identifier like u55c or my_card")
CATALOG_FILE = Obj(
    required={"targets": Map(TARGET_KEY, Json(), 256, min_items=1)},
    optional={"schema": Int(1, 1), "hbm_efficiency": EFFICIENCY, "ddr_efficiency": EFFICIENCY,
              "hbm_mixed_efficiency": EFFICIENCY, "kernel_costs": Json()},
)
USER_TARGETS_FILE = Obj(
    required={"targets": Map(TARGET_KEY, Json(), 256, min_items=1)},
    optional={"schema": Int(1, 1)},
)


def targets_file(data: Any, file: str, *, builtin: bool = False) -> dict[str, Any]:
    """Top-level shape of a targets file; each target's own fields are checked by `target()`."""
    return (CATALOG_FILE if builtin else USER_TARGETS_FILE).check(data, Where(file))


def target(data: Any, file: str, key: str, *, partial: bool = False) -> dict[str, Any]:
    """One target entry (merged, or with `partial` the fields an override file sets)."""
    return TARGET.check(data, Where(file, ("targets", key)), partial=partial)


# --- kernel spec (as recorded in manifests and checkpoints) -----------------------------------

SPEC = Obj(
    required={},
    optional={
        "target": TARGET_KEY,
        "optimizer": Enum("adam", "adamw"),
        "grad_dtype": Enum("fp32", "bf16", "fp16"),
        "out_dtype": Enum("fp32", "bf16"),
        "lanes": Int(1, MAX_LANES),
        "compute_units": Int(1, MAX_COMPUTE_UNITS),
        "grad_source": Enum("memory", "stream"),
        "name": IDENT,
        "clock_mhz": Opt(Num(*CLOCK_MHZ)),
        "stripes": Opt(Int(1, MAX_STRIPES)),
        "rate_gps": Opt(Num(0, RATE_GPS_MAX, lo_open=True)),
        "out_sink": Enum("memory", "memory+stream"),
    },
)


def spec_dict(data: Any, where: Where) -> dict[str, Any]:
    return SPEC.check(data, where)


# --- project manifests ------------------------------------------------------------------------

MANIFEST_TARGET = Obj(required={"key": TARGET_KEY, "name": TARGET_NAME, "part": PART, "platform": Opt(PLATFORM),
                                "flow": Enum("xrt", "versal")})
STRIPE_COUNTS = Obj(required={"grad": Int(0, 32), "state": Int(1, 32), "out": Int(1, 32)})
PORT = Str(PORT_PATTERN, "a port name like grad0, p1_rd, v0_wr or out0")
REG_ARG = Obj(required={"name": IDENT, "kind": Enum("pointer", "scalar", "stream"), "offset": Opt(Int(0, 1 << 20)),
                        "size": Int(0, 64), "direction": Enum("in", "out", "inout"), "description": Text(200)})
REGISTER_MAP = Obj(
    required={"protocol": Enum("ap_ctrl_hs"), "control": Map(IDENT, Int(0, 255), 16),
              "ctrl_bits": Map(IDENT, Int(0, 31), 16), "address_bits": Int(4, 20),
              "args": List(REG_ARG, 512, min_items=1)},
    optional={"stripes": STRIPE_COUNTS, "status": Json(), "status_bits": Json()},
)
BANKS = List(Obj(required={"cu": Int(0, 15), "slr": Opt(Int(0, 7)), "banks": Map(PORT, Opt(BANK_EXPR), 512)}), 16,
             min_items=1)
MEMORY_PLAN = List(Obj(required={"cu": Int(0, 15), "stripes": List(Obj(required={
    "array": Enum("grad", "p", "m", "v", "out"), "index": Int(0, 31), "ports": List(PORT, 2, min_items=1),
    "bank": Opt(BANK_EXPR), "channel": Opt(Int(0, 127))}), 512, min_items=1)}), 16, min_items=1)
TARGET_FACTS = Obj(required={"definition": Json(), "memory_efficiency": Num(0, 1, lo_open=True)},
                   optional={"mixed_efficiency": Num(0, 1, lo_open=True)})
PROJECT_MANIFEST = Obj(
    required={"toolkit": Enum("optimusnic"), "version": VERSION, "spec": SPEC, "target": MANIFEST_TARGET,
              "sizing": Json(), "register_map": REGISTER_MAP, "banks": BANKS, "files": Map(REL_FILE, HEX64, 64,
                                                                                           min_items=1)},
    optional={"memory_plan": MEMORY_PLAN, "target_facts": TARGET_FACTS},
)


def project_manifest(data: Any, file: str) -> dict[str, Any]:
    return PROJECT_MANIFEST.check(data, Where(file))


# --- registry manifests (bitstreams/<target>/<name>.manifest.json) ----------------------------

REGISTRY_MANIFEST = Obj(
    required={**{k: PROJECT_MANIFEST.required[k] for k in ("spec", "target")},
              "xclbin": Obj(required={"file": Str(r"[A-Za-z][A-Za-z0-9_]{0,63}\.xclbin", "NAME.xclbin", 80),
                                      "sha256": HEX64, "bytes": Int(0, BIG), "axlf": Bool()})},
    optional={
        **{k: v for k, v in PROJECT_MANIFEST.required.items() if k not in ("spec", "target")},
        **PROJECT_MANIFEST.optional,
        "build": Json(), "summary": Json(), "reports": List(Str(r"[A-Za-z0-9_.-]{1,128}/[A-Za-z0-9_.-]{1,128}",
                                                                "a report copy FOLDER/FILE", 260), 256),
        "registered_utc": UTC, "paths": Json(),
    },
)


def registry_manifest(data: Any, file: str) -> dict[str, Any]:
    return REGISTRY_MANIFEST.check(data, Where(file))


# --- shard checkpoint headers -----------------------------------------------------------------

STATE_ARRAYS = ("params", "exp_avg", "exp_avg_sq")
MAX_STATE_ELEMENTS = (1 << 32) - 33  # the kernel's `n` register is 32 bits (hls.csim.kernel.MAX_ELEMENTS)
CHECKPOINT_HEADER = Obj(
    required={"format": Enum("optimusnic-shard"), "version": Int(1, 1), "spec": SPEC,
              "n": Int(0, MAX_STATE_ELEMENTS), "step": Int(0, (1 << 63) - 1),
              "sha256": Obj(required={k: HEX64 for k in STATE_ARRAYS})},
    optional={"consistent": Bool()},
)


def checkpoint_header(data: Any, file: str) -> dict[str, Any]:
    return CHECKPOINT_HEADER.check(data, Where(file, ("header",)))
