"""The target catalog: facts about each card, with their sources, loaded from data files.

The built-in catalog is `hls/targets/catalog.json`; a user adds or overrides targets with
their own JSON or TOML file (same schema, `targets` table), merged field by field on top.
"""

from __future__ import annotations

import copy
import json
import os
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hls import safe_io, validate
from hls.errors import UserError
from hls.spec import SpecError, validate_identifier

CATALOG_PATH = Path(__file__).resolve().parent / "targets" / "catalog.json"
FLOWS = ("xrt", "versal")


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
    # Kernel m_axi ports the memory accepts in all (HBM: the HBM AXI interfaces) and per channel (DDR).
    axi_ports: int | None = None
    ports_per_channel: int | None = None
    slr: int | None = None  # the SLR the HBM stacks attach to (None: not modelled, e.g. through a NoC)

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
    # Usable fraction of a channel that carries reads and writes together (state stripes); read-only
    # and write-only channels get memory_efficiency.
    mixed_efficiency: float | None = None

    @property
    def efficiency_mixed(self) -> float:
        return self.memory_efficiency if self.mixed_efficiency is None else self.mixed_efficiency

    @property
    def has_xrt_flow(self) -> bool:
        return self.flow == "xrt"

    def usable(self, resource: str) -> int | None:
        total = self.resources.get(resource)
        return int(total * self.usable_fraction) if isinstance(total, (int, float)) else None


def _load_file(path: Path) -> Any:
    """A targets file's parsed content: a regular file of at most 1 MiB, UTF-8 JSON or TOML."""
    try:
        text = safe_io.read_text(path, safe_io.TARGETS_FILE_MAX, "target file")
    except UserError as exc:
        raise CatalogError(str(exc)) from exc
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text)
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CatalogError(f"{path}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: {detail}") \
            from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _build(key: str, data: dict[str, Any], efficiencies: dict[str, float], origin: str) -> Target:
    """A Target from one entry, checked against the schema (hls/validate.py) first."""
    try:
        validate_identifier(key, "target")
    except SpecError as exc:
        raise CatalogError(f"{origin}: targets.{key}: {str(exc).partition(': ')[2]}") from exc
    try:
        data = validate.target(data, origin, key)
    except validate.Invalid as exc:
        raise CatalogError(str(exc)) from exc
    mem = data["memory"]
    net = data["network"]
    memory = Memory(
        kind=mem["kind"],
        capacity_bytes=mem["capacity_bytes"],
        peak_bandwidth_bytes_per_s=mem["peak_bandwidth_bytes_per_s"],
        channels=mem["channels"],
        channel_capacity_bytes=mem["channel_capacity_bytes"],
        channel_bandwidth_bytes_per_s=mem["channel_bandwidth_bytes_per_s"],
        bank_prefix=mem["bank_prefix"],
        bank_slr=tuple(mem["bank_slr"]) if mem.get("bank_slr") else None,
        axi_ports=mem.get("axi_ports"),
        ports_per_channel=mem.get("ports_per_channel"),
        slr=mem.get("slr"),
    )
    kind = "hbm" if memory.is_hbm else "ddr"
    eff, mixed = efficiencies[kind], efficiencies[f"{kind}_mixed"]
    if "memory_efficiency" in data:  # the card's own measurement, for its pattern: reads and writes alike
        eff = mixed = float(data["memory_efficiency"]["value"])
    return Target(
        key=key,
        name=data["name"],
        family=data.get("family", ""),
        part=data["part"],
        flow=data["flow"],
        flow_note=data.get("flow_note", ""),
        platform=data.get("platform"),
        kernel_clock_mhz=data["kernel_clock_mhz"],
        slrs=data.get("slrs", 1),
        memory=memory,
        network_ports=net["ports"],
        line_rate_gbps=net["line_rate_gbps"],
        pcie=data.get("pcie", ""),
        resources=dict(data.get("resources", {})),
        usable_fraction=float(data.get("usable_fraction", 1.0)),
        sources=dict(data.get("sources", {})),
        unconfirmed=tuple(data.get("unconfirmed", ())),
        memory_efficiency=eff,
        raw=data,
        mixed_efficiency=mixed,
    )


def target_from_facts(key: str, facts: dict[str, Any], origin: str) -> Target:
    """The Target a manifest recorded (`target_facts`: its definition and memory efficiency), re-validated."""
    eff = validate.Num(0, 1, lo_open=True).check(facts.get("memory_efficiency"),
                                                 validate.Where(origin, ("target_facts", "memory_efficiency")))
    mixed = facts.get("mixed_efficiency", eff)  # manifests from before the mixed figure: as they were sized
    mixed = validate.Num(0, 1, lo_open=True).check(mixed, validate.Where(origin, ("target_facts", "mixed_efficiency")))
    definition = facts.get("definition")
    effs = {"hbm": eff, "ddr": eff, "hbm_mixed": mixed, "ddr_mixed": mixed}
    return _build(key, definition if isinstance(definition, dict) else {}, effs, origin)


def _stamp(path: str) -> tuple[int, ...]:
    """What identifies a file's content for the cache: a changed file is read again."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=8)
def _catalog(extra: tuple[str, ...], _stamps: tuple[tuple[int, ...], ...] = ()) -> dict[str, Target]:
    base = validate.targets_file(_load_file(CATALOG_PATH), str(CATALOG_PATH.name), builtin=True)
    targets = dict(base["targets"])
    effs = {
        "hbm": float(base.get("hbm_efficiency", {}).get("value", 0.9)),
        "ddr": float(base.get("ddr_efficiency", {}).get("value", 0.8)),
    }
    # HBM's figure is read-only; DDR's is a concurrent read and write measurement already.
    effs["hbm_mixed"] = float(base.get("hbm_mixed_efficiency", {}).get("value", effs["hbm"]))
    effs["ddr_mixed"] = effs["ddr"]
    origins = {k: str(CATALOG_PATH.name) for k in targets}
    for path in extra:
        try:
            over = validate.targets_file(_load_file(Path(path)), str(path))
        except validate.Invalid as exc:
            raise CatalogError(str(exc)) from exc
        for key, data in over["targets"].items():
            try:
                validate_identifier(key, "target")
                validate.target(data, str(path), key, partial=True)  # the override's own fields, named by its file
            except SpecError as exc:
                raise CatalogError(f"{path}: targets.{key}: {str(exc).partition(': ')[2]}") from exc
            except validate.Invalid as exc:
                raise CatalogError(str(exc)) from exc
            targets[key] = _merge(targets.get(key, {}), data)
            origins[key] = str(path)
    return {key: _build(key, data, effs, origins[key]) for key, data in sorted(targets.items())}


def kernel_costs() -> dict[str, Any]:
    """The catalog's `kernel_costs`: what a lane and an m_axi port cost, each figure with its source."""
    base = validate.targets_file(_load_file(CATALOG_PATH), str(CATALOG_PATH.name), builtin=True)
    costs = base.get("kernel_costs")
    if not isinstance(costs, dict):
        raise CatalogError(f"{CATALOG_PATH.name}: kernel_costs missing")
    return copy.deepcopy(costs)


def load_catalog(extra_files: list[str] | tuple[str, ...] = ()) -> dict[str, Target]:
    """All targets: the built-in catalog merged with the user's files (later files win)."""
    files = tuple(str(p) for p in extra_files)
    return dict(_catalog(files, tuple(_stamp(f) for f in (str(CATALOG_PATH), *files))))


def get_target(key: str, extra_files: list[str] | tuple[str, ...] = ()) -> Target:
    catalog = load_catalog(extra_files)
    if key not in catalog:
        raise CatalogError(f"unknown target {key!r}; known targets: {', '.join(catalog)}")
    return catalog[key]
