"""The simulation top of N ring cards in one build (templates/net/ring_sim_top.v.j2).

The card's ports and parameters are read from its Verilog module header, so the same generator
serves the network kernel alone (`onic_net_kernel`, the Adam kernel beside it a bench stand-in)
and the card top `onic_card` (hls.rtl.card: the network kernel and the generated Adam RTL
kernel): only the module and the file list change (`prepare_cards`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hls.errors import UserError
from hls.paths import BUILD_DIR, RTL_DIR, TB_DIR
from hls.rtl_sources import read_filelist
from hls.safe_io import atomic_write
from hls.spec import KernelSpec

MAX_CARDS = 8  # the ring simulations' largest world; the protocol allows 255, a build of 8 is minutes
CARDS: dict[str, Path] = {"onic_net_kernel": RTL_DIR / "net" / "net_kernel.f"}
CHECKER = TB_DIR / "net" / "onic_mac_tx_check.v"
# the CI simulation's buffers (as the one-card bench): 8 receive slots of up to 4 payload beats in 128
# beats (2 x 8 + 1 frames: onic_net_kernel's rule), 16-beat retransmit slots in block RAM
SIM_PARAMS = {"RX_PAYLOAD_DEPTH_LOG2": 7, "RX_SLOT_LOG2": 3, "RX_FRAME_BEATS": 4, "TX_SLOTS_LOG2": 4,
              "TX_BEATS_LOG2": 4, "TX_URAM": 0, "TX_FIFO_LOG2": 6, "RD_FIFO_LOG2": 5, "WR_FIFO_LOG2": 5,
              "MAX_BURST": 8}

_PARAM = re.compile(r"parameter\s+integer\s+(\w+)\s*=\s*([^,\s)]+)")
_PORT = re.compile(r"^\s*(input|output)\s+wire\s*(\[[^\]]+\])?\s*(\w+)\s*,?\s*(?://.*)?$", re.M)


@dataclass(frozen=True)
class Port:
    direction: str
    range: str
    name: str


@dataclass(frozen=True)
class Param:
    name: str
    default: str


def module_header(text: str, module: str) -> tuple[list[Param], list[Port]]:
    """The parameters and ports of `module` in `text` (ANSI header, `wire` ports, integer parameters)."""
    start = re.search(rf"\bmodule\s+{module}\b", text)
    if start is None:
        raise UserError(f"module {module} not found")
    split = re.compile(r"\)\s*\(").search(text, start.end())
    end = text.find(");", split.end()) if split else -1
    if split is None or end < 0:
        raise UserError(f"module {module}: no `#( parameters ) ( ports );` header")
    params = [Param(m[1], m[2]) for m in _PARAM.finditer(text, start.end(), split.start())]
    ports = [Port(m[1], m[2] or "", m[3]) for m in _PORT.finditer(text[split.end():end])]
    if not ports:
        raise UserError(f"module {module}: no ports found")
    return params, ports


def render(cards: int, card: str = "onic_net_kernel", card_text: str | None = None,
           top: str | None = None) -> tuple[str, str]:
    """(top module name, Verilog text) of `cards` instances of module `card`, whose Verilog is
    `card_text` (default: the file of that name in the card's file list, for the cards of `CARDS`)."""
    if not 2 <= cards <= MAX_CARDS:
        raise UserError(f"cards: {cards} is not within 2..{MAX_CARDS}")
    if card_text is None:
        if card not in CARDS:
            raise UserError(f"card: {card!r} is not one of {', '.join(CARDS)} (or give its Verilog)")
        card_text = next(p for p in read_filelist(CARDS[card]) if p.stem == card).read_text()
    from hls.generate import environment

    params, ports = module_header(card_text, card)
    names = {p.name for p in ports}
    for need in ("ap_clk", "ap_rst_n", "s_axis_mac0_tuser", "m_axis_mac0_tvalid", "m_axis_mac0_tready"):
        if need not in names:
            raise UserError(f"module {card}: no port {need}")
    top = top or f"onic_ring_sim_top{cards}"
    body = environment().get_template("net/ring_sim_top.v.j2").render(
        top=top, card=card, cards=cards, params=params,
        ports=[p for p in ports if p.name not in ("ap_clk", "ap_rst_n")])
    return top, body


def sim_build_dir(cards: int, wire_bf16: int, param_bf16: int) -> Path:
    """The Verilator build of `cards` network-kernel cards at SIM_PARAMS (tests and the driver share it)."""
    dtypes = {(0, 0): "fp32", (1, 1): "bf16"}.get((wire_bf16, param_bf16), f"w{wire_bf16}p{param_bf16}")
    return BUILD_DIR / "sim" / "net" / f"ring{cards}-{dtypes}-verilator"


def card_spec(spec: KernelSpec) -> KernelSpec:
    """The Adam kernel of a simulated ring card for `spec`: gradients from the ring's stream,
    parameters also to it, reduced for simulation (2 lanes, one stripe), named by its optimizer
    and dtypes so the same spec always maps to the same build."""
    return spec.with_(grad_source="stream", out_sink="memory+stream", lanes=2, stripes=1,
                      name=f"onic_card_{spec.optimizer}_{spec.grad_dtype}_{spec.out_dtype}")


@dataclass(frozen=True)
class RingBuild:
    """What `prepare_cards` wrote: the top, every source, the parameters, the Adam kernel's manifest."""

    top: str
    sources: list[Path]
    parameters: dict[str, int]
    build_dir: Path
    manifest: Path


def prepare_cards(cards: int, spec: KernelSpec, *, params: dict[str, int] | None = None,
                  as_given: bool = False, net_stripes: int = 1) -> RingBuild:
    """`cards` `onic_card`s (network kernel + the generated Adam RTL kernel of `card_spec(spec)`)
    in one top, rendered under BUILD_DIR; one build per (cards, spec, net_stripes), shared by tests
    and driver. `net_stripes`: each network kernel's lgrad and gather buffers in that many stripes
    (ports m_axi_lgrad<k>, m_axi_gather<k> of every card; `hls.rtl.card.render_card`). `params` (the
    network kernel's buffers, default SIM_PARAMS) and `as_given` (the Adam kernel is `spec` itself,
    not reduced) are the bench's (`optimusnic bench rtlnet`: line-rate buffers and lanes); such a
    build has its own folder."""
    from hls.rtl.card import CARD_MODULE, prepare_card

    aspec = spec if as_given else card_spec(spec)
    params = dict(params or SIM_PARAMS)
    tag = ("" if params == SIM_PARAMS else "-bench") + ("" if net_stripes == 1 else f"-s{net_stripes}")
    build = BUILD_DIR / "sim" / "net" / f"ringcards{cards}-{aspec.name}{tag}-verilator"
    card = prepare_card(aspec, build / "card", net_stripes=net_stripes)
    top, sources = write(build / "src", cards, CARD_MODULE, card.sources)
    return RingBuild(top=top, sources=sources, parameters=params, build_dir=build,
                     manifest=card.project / "manifest.json")


def write(build_dir: Path, cards: int, card: str = "onic_net_kernel",
          card_sources: list[Path] | None = None) -> tuple[str, list[Path]]:
    """Render the top into `build_dir`; (top name, every source in compile order). `card_sources`:
    the card's sources in compile order, the last one defining module `card` (default: `CARDS`)."""
    if card_sources is None:
        if card not in CARDS:
            raise UserError(f"card: {card!r} is not one of {', '.join(CARDS)} (or give its sources)")
        card_sources = read_filelist(CARDS[card])
    text = next((p for p in reversed(card_sources) if re.search(rf"\bmodule\s+{card}\b", p.read_text())), None)
    if text is None:
        raise UserError(f"card: no source defines module {card}")
    top, body = render(cards, card, text.read_text())
    path = Path(build_dir) / f"{top}.v"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text() != body:  # unchanged text keeps the Verilator build
        atomic_write(path, body)
    return top, [*card_sources, CHECKER, path]


__all__ = ["CARDS", "MAX_CARDS", "SIM_PARAMS", "RingBuild", "card_spec", "module_header", "prepare_cards", "render",
           "sim_build_dir", "write"]
