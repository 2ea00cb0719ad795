"""The target catalog: facts about each card, with their sources, loaded from data files.

The built-in catalog is `hls/targets/catalog.json`; a user adds or overrides targets with
their own JSON or TOML file (same schema, `targets` table), merged field by field on top.
"""

from __future__ import annotations

import copy
import json
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hls.errors import UserError
from hls.spec import SpecError, validate_identifier

CATALOG_PATH = Path(__file__).resolve().parent / "targets" / "catalog.json"
FLOWS = ("xrt", "versal")
_REQUIRED = ("name", "part", "flow", "kernel_clock_mhz", "memory", "network")
_REQUIRED_MEMORY = (
    "kind",
    "capacity_bytes",
    "peak_bandwidth_bytes_per_s",
    "channels",
    "channel_capacity_bytes",
    "channel_bandwidth_bytes_per_s",
    "bank_prefix",
)


class CatalogError(UserError):
    """A catalog or override file is malformed; the message names the file, target and field."""


@dataclass(frozen=True)
class Memory:
    kind: str
    capacity_bytes: int
    peak_bandwidth_bytes_per_s: int
    channels: int
    channel_capacity_bytes: int
    channel_bandwidth_bytes_per_s: int
    bank_prefix: str
    bank_slr: tuple[int, ...] | None

    @property
    def is_hbm(self) -> bool:
        return self.kind.upper().startswith("HBM")


@dataclass(frozen=True)
class Target:
    key: str
    name: str
    family: str
    part: str
    flow: str
    flow_note: str
    platform: str | None
    kernel_clock_mhz: float
    slrs: int
    memory: Memory
    network_ports: int
    line_rate_gbps: float
    pcie: str
    resources: dict[str, Any]
    usable_fraction: float
    sources: dict[str, str]
    unconfirmed: tuple[str, ...]
    memory_efficiency: float
    raw: dict[str, Any]

    @property
    def has_xrt_flow(self) -> bool:
        return self.flow == "xrt"

    def usable(self, resource: str) -> int | None:
        total = self.resources.get(resource)
        return int(total * self.usable_fraction) if isinstance(total, (int, float)) else None


def _load_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read target file ({exc.strerror})") from exc
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text.decode("utf-8"))
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: not valid {path.suffix.lstrip('.').upper() or 'JSON'}: {exc}") from exc


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _number(where: str, value: Any, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and value <= 0):
        raise CatalogError(f"{where}: expected a positive number, got {value!r}")
    return value


def _build(key: str, data: dict[str, Any], efficiencies: dict[str, float], origin: str) -> Target:
    where = f"{origin}: target {key!r}"
    try:
        validate_identifier(key, "target")
    except SpecError as exc:
        raise CatalogError(f"{where}: {exc}") from exc
    missing = [f for f in _REQUIRED if f not in data]
    if missing:
        raise CatalogError(f"{where}: missing field(s) {', '.join(missing)}")
    mem = data["memory"]
    missing = [f for f in _REQUIRED_MEMORY if f not in mem]
    if missing:
        raise CatalogError(f"{where}: memory is missing {', '.join(missing)}")
    for f in _REQUIRED_MEMORY[1:-1]:
        _number(f"{where}: memory.{f}", mem[f])
    prefix = mem["bank_prefix"]
    if prefix not in ("HBM", "DDR", "PLRAM", "HOST"):
        raise CatalogError(f"{where}: memory.bank_prefix {prefix!r}; choose HBM, DDR, PLRAM or HOST")
    if data["flow"] not in FLOWS:
        raise CatalogError(f"{where}: flow {data['flow']!r}; choose one of {', '.join(FLOWS)}")
    platform = data.get("platform")
    if platform is not None:
        try:
            validate_identifier(platform, "platform")
        except SpecError as exc:
            raise CatalogError(f"{where}: {exc}") from exc
    net = data["network"]
    memory = Memory(
        kind=str(mem["kind"]),
        capacity_bytes=int(mem["capacity_bytes"]),
        peak_bandwidth_bytes_per_s=int(mem["peak_bandwidth_bytes_per_s"]),
        channels=int(mem["channels"]),
        channel_capacity_bytes=int(mem["channel_capacity_bytes"]),
        channel_bandwidth_bytes_per_s=int(mem["channel_bandwidth_bytes_per_s"]),
        bank_prefix=prefix,
        bank_slr=tuple(mem["bank_slr"]) if mem.get("bank_slr") else None,
    )
    eff = efficiencies["hbm" if memory.is_hbm else "ddr"]
    return Target(
        key=key,
        name=str(data["name"]),
        family=str(data.get("family", "")),
        part=str(data["part"]),
        flow=data["flow"],
        flow_note=str(data.get("flow_note", "")),
        platform=platform,
        kernel_clock_mhz=_number(f"{where}: kernel_clock_mhz", data["kernel_clock_mhz"]),
        slrs=int(data.get("slrs", 1)),
        memory=memory,
        network_ports=int(_number(f"{where}: network.ports", net.get("ports"))),
        line_rate_gbps=_number(f"{where}: network.line_rate_gbps", net.get("line_rate_gbps")),
        pcie=str(data.get("pcie", "")),
        resources=dict(data.get("resources", {})),
        usable_fraction=float(data.get("usable_fraction", 1.0)),
        sources=dict(data.get("sources", {})),
        unconfirmed=tuple(data.get("unconfirmed", ())),
        memory_efficiency=eff,
        raw=data,
    )


@lru_cache(maxsize=8)
def _catalog(extra: tuple[str, ...]) -> dict[str, Target]:
    base = _load_file(CATALOG_PATH)
    targets = dict(base.get("targets", {}))
    effs = {
        "hbm": float(base.get("hbm_efficiency", {}).get("value", 0.9)),
        "ddr": float(base.get("ddr_efficiency", {}).get("value", 0.8)),
    }
    origins = {k: str(CATALOG_PATH.name) for k in targets}
    for path in extra:
        over = _load_file(Path(path))
        if not isinstance(over.get("targets"), dict) or not over["targets"]:
            raise CatalogError(f"{path}: expected a top-level 'targets' table with at least one target")
        for key, data in over["targets"].items():
            if not isinstance(data, dict):
                raise CatalogError(f"{path}: target {key!r} must be a table")
            targets[key] = _merge(targets.get(key, {}), data)
            origins[key] = str(path)
    return {key: _build(key, data, effs, origins[key]) for key, data in sorted(targets.items())}


def load_catalog(extra_files: list[str] | tuple[str, ...] = ()) -> dict[str, Target]:
    """All targets: the built-in catalog merged with the user's files (later files win)."""
    return dict(_catalog(tuple(str(p) for p in extra_files)))


def get_target(key: str, extra_files: list[str] | tuple[str, ...] = ()) -> Target:
    catalog = load_catalog(extra_files)
    if key not in catalog:
        raise CatalogError(f"unknown target {key!r}; known targets: {', '.join(catalog)}")
    return catalog[key]
