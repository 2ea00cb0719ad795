"""One ring card in RTL (hls.rtl.card, templates/net/card.v.j2): the network kernel and the real
generated Adam kernel joined as v++'s stream_connect joins them, on a ring of software cards.

- The card top: rendered deterministically per spec, refused for a spec that cannot sit on the
  ring, clean under `verilator --lint-only -Wall` and `iverilog -Wall` with every source.
- Ring steps in cocotb (sim/tb/net/test_onic_card.py; Verilator, and Icarus in `test_card_icarus`):
  ONE RTL card, N - 1 `hls.net.card.Card` peers through sim/tb/models' switch; p, m, v in the
  card's memory, its out buffer, its gathered buffer and every peer's gathered vector bit for bit against
  `hls.net.ring.ring_step`, several steps in a row with m and v carried in card memory, STATUS of
  both kernels 0, the network counters against the switch port and a lossless reference ring; the
  AXI monitor on every m_axi port. fp32 wire at every position of N = 2, 3, 4; bf16 wire and
  parameters; drops, duplicates, reordering and bit flips on every link; a stalled memory port;
  the Adam kernel's n misprogrammed (both kernels flag it); two-phase steps (clipping), the Adam
  kernel started with the scale from the card's entries after phase one.
The Adam kernel is reduced for CI (2 lanes, one stripe per array); the network kernel's buffers are
the small ones of test_net_kernel.py, its lgrad and gather buffers in 2 stripes each on the fp32 card
(every default test here), one on the bf16 cards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hls.errors import UserError
from hls.paths import BUILD_DIR, TB_DIR
from hls.rtl import ring_top, simulators
from hls.rtl.card import CARD_MODULE, prepare_card, render_card
from hls.spec import KernelSpec, SpecError

NET_TB = TB_DIR / "net"
SIM_PARAMS = ring_top.SIM_PARAMS  # the network kernel's CI simulation buffers
# the wire dtype is the Adam kernel's gradient dtype, the gathered parameters' its output dtype
SPECS = {
    "fp32": KernelSpec(optimizer="adamw", grad_dtype="fp32", out_dtype="fp32", grad_source="stream", lanes=2,
                       stripes=1, out_sink="memory+stream", name="onic_card_adamw"),
    "bf16": KernelSpec(optimizer="adam", grad_dtype="bf16", out_dtype="bf16", grad_source="stream", lanes=2,
                       stripes=1, out_sink="memory+stream", name="onic_card_adam"),
    "bf16-fp32": KernelSpec(optimizer="adamw", grad_dtype="bf16", out_dtype="fp32", grad_source="stream", lanes=2,
                            stripes=1, out_sink="memory+stream", name="onic_card_adamw"),
}


# The fp32 card's network kernel reads lgrad and writes gather through 2 stripes each (onic_card rendered
# with net_stripes=2, the bench splitting and joining the buffers with hls.layout), so every default card
# test runs the striped top; the bf16 cards (--full) keep one stripe, as do the N-card and rtlsim benches.
NET_STRIPES = {"fp32": 2}


def build_dir(dtypes: str) -> Path:
    return BUILD_DIR / "sim" / "net" / f"onic_card-{dtypes}"


def test_render_deterministic_and_checked() -> None:
    spec = SPECS["fp32"]
    text = render_card(spec)
    assert text == render_card(spec)
    assert f"module {CARD_MODULE} #(" in text and "    onic_card_adamw adam_inst (" in text
    assert ".WIRE_BF16(0)" in text and ".PARAM_BF16(0)" in text
    for port in ("p0_rd", "p0_wr", "m0_rd", "m0_wr", "v0_rd", "v0_wr", "out0", "lgrad0", "gather0"):
        assert f"m_axi_{port}_" in text, port
    assert "m_axi_lgrad1_" not in text and ".STRIPES(1)" in text  # one stripe unless asked
    with pytest.raises(UserError):
        render_card(spec, net_stripes=3)
    mixed = render_card(SPECS["bf16-fp32"])
    assert ".WIRE_BF16(1)" in mixed and ".PARAM_BF16(0)" in mixed
    for bad in (spec.with_(grad_source="memory"), spec.with_(out_sink="memory"), spec.with_(grad_dtype="fp16")):
        with pytest.raises(SpecError):
            render_card(bad)
    for taken in (CARD_MODULE, "onic_net_kernel"):  # the spec refuses a name the card's modules use
        with pytest.raises(SpecError):
            spec.with_(name=taken)


@pytest.mark.parametrize(("dtypes", "stripes"), [
    ("fp32", 1), ("fp32", 2), pytest.param("bf16-fp32", 1, marks=pytest.mark.slow)])
def test_lint(dtypes: str, stripes: int, tmp_path: Path) -> None:
    """The card top with every source: no Verilator -Wall warning, Icarus -Wall clean; also with the network
    kernel's lgrad and gather in two stripes (ports m_axi_lgrad0/1, m_axi_gather0/1)."""
    card = prepare_card(SPECS[dtypes], tmp_path, net_stripes=stripes)
    if stripes > 1:
        text = card.top.read_text()
        assert f".STRIPES({stripes})" in text and f"m_axi_gather{stripes - 1}_wdata" in text
    sources = [str(s) for s in card.sources]
    if simulators.available("verilator"):
        env = {**os.environ, **simulators.simulator_env("verilator")}
        proc = subprocess.run([simulators.verilator_bin(), "--lint-only", "-Wall", "--top-module", CARD_MODULE,
                               *sources], env=env, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "%Warning" not in out and "%Error" not in out, out
    iverilog = shutil.which("iverilog")
    if iverilog:
        proc = subprocess.run([iverilog, "-g2005", "-Wall", "-s", CARD_MODULE, "-o", str(tmp_path / "card.vvp"),
                               *sources], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and not proc.stdout + proc.stderr, proc.stdout + proc.stderr
    if not simulators.available("verilator") and not iverilog:
        pytest.skip("neither verilator nor iverilog installed")


def run(dtypes: str, cases: str, seed: int, *, steps: int = 1, extra: dict[str, str] | None = None,
        tag: str = "", testcase: str = "test_card_ring", simulator: str = "verilator") -> None:
    if not simulators.available(simulator):
        pytest.skip(f"{simulator} not installed: `make {'deps-icarus' if simulator == 'icarus' else 'deps'}`")
    bdir = build_dir(dtypes)
    stripes = NET_STRIPES.get(dtypes, 1)
    card = prepare_card(SPECS[dtypes], bdir / "card", net_stripes=stripes)
    env = {"ONIC_MANIFEST": str(card.project / "manifest.json"), "ONIC_SEED": str(seed), "ONIC_CASES": cases,
           "ONIC_STEPS": str(steps), "ONIC_NET_STRIPES": str(stripes), **(extra or {})}
    # the bench touches the top's ports only: no VPI handles to every internal signal (Verilator;
    # Icarus takes the runner's -g2012, as the Adam kernel's own Icarus runs do)
    build_args = ["--no-public-flat-rw", "--public-depth", "1"] if simulator == "verilator" else []
    xml = simulators.run_cocotb(
        sources=card.sources, toplevel=CARD_MODULE, test_module="test_onic_card", test_dir=NET_TB,
        build_dir=bdir / simulator, simulator=simulator, parameters=SIM_PARAMS, extra_env=env,
        build_args=build_args, testcase=testcase, log_file=bdir / f"run{tag}-{simulator}.log",
    )
    ran, failed = simulators.check_results(xml)
    assert ran == 1 and failed == 0, f"onic_card ({dtypes}{tag}, {simulator}): see {xml}"


@pytest.mark.slow  # 81 s: make test budget (the card's ring runs by default in test_card_ring_faults)
def test_card_ring_fp32() -> None:
    """fp32: the last position of N = 2 and a middle one of N = 4, one step each (every position,
    two steps each, in test_card_ring_fp32_two_steps under --full)."""
    run("fp32", "2:1,4:2", 3)


def test_card_ring_faults() -> None:
    """Drop, duplicate, reorder and bit flips on every link, every memory channel pausing 30 % of
    clocks: three steps in a row (m and v carried in card memory), bit-exact after each."""
    run("fp32", "4:1", 11, steps=3, tag="-faults",
        extra={"ONIC_DROP": "0.02", "ONIC_DUP": "0.02", "ONIC_REORDER": "0.02", "ONIC_BITFLIP": "0.01",
               "ONIC_MEM_STALL": "0.3"})


def test_card_ring_stalled_memory() -> None:
    """The Adam kernel's parameter read and output ports and the gather port pausing 90 % of
    clocks on a 1024-element chunk (64 beats): the Adam kernel back-pressures
    the gradient stream, the network kernel its receive slots; the ring finishes bit-exact, no
    deadlock."""
    run("fp32", "3:1", 12, tag="-stalled",
        extra={"ONIC_STALL_PORTS": "p0_rd,out0,gather0,v0_wr", "ONIC_SIZE": "1024"})


def test_card_two_phase() -> None:
    """Two-phase steps with the real Adam kernel (N = 3, rank 1): a clip that triggers, a skip (a
    non-finite gradient: the Adam kernel not started, phase 3 gathers the current parameters), one
    that does not clip, m and v carried; the host starts the Adam kernel with the scale from the
    card's entries after phase one. The sum in card memory, every entry, p, m, v, the gathered
    buffers and the counters bit for bit / exact against the reference."""
    run("fp32", "3:1", 14, steps=3, tag="-two-phase", extra={"ONIC_TWO_PHASE": "clip,skip,noclip"})


# 56 s: make test budget (by default Icarus runs the receive path, the retransmit buffer, the ring datapath,
# the scalar exchange)
@pytest.mark.slow
def test_card_icarus() -> None:
    """The card top on Icarus with every check of the Verilator runs (N = 3, rank 1): a one-phase
    step, then two-phase steps clip, skip (phase 3), no clip, m and v carried in card memory.
    About 20 s wall with the build: one simulation, one case, so CI on 2 cores can afford it."""
    # the bench cycles the kinds over the steps; the empty kind is a one-phase step
    run("fp32", "3:1", 14, steps=4, extra={"ONIC_TWO_PHASE": ",clip,skip,noclip"}, simulator="icarus")


@pytest.mark.slow
def test_card_two_phase_faults() -> None:
    """Two-phase steps (clip, skip, no clip) under drops, duplicates, reordering and bit flips, every
    memory channel pausing, at every position of N = 2, 3, 4; and bf16 wire (fp32 parameters)
    lossless."""
    run("fp32", "all:2/3/4", 15, steps=3, tag="-two-phase-faults",
        extra={"ONIC_TWO_PHASE": "clip,skip,noclip", "ONIC_DROP": "0.02", "ONIC_DUP": "0.02", "ONIC_REORDER": "0.02",
               "ONIC_BITFLIP": "0.01", "ONIC_MEM_STALL": "0.3"})
    run("bf16-fp32", "all:3", 16, steps=3, tag="-two-phase", extra={"ONIC_TWO_PHASE": "noclip,skip,clip"})


@pytest.mark.parametrize("n_error", [16, -16], ids=["n-long", "n-short"])
def test_card_misprogrammed(n_error: int) -> None:
    """The host's n for the Adam kernel one beat off the chunk the network kernel streams: the
    network kernel flags protocol_error; n short, the Adam kernel stream_long; n long, the Adam
    kernel stream_short and it never finishes (the network kernel takes only the chunk's beats
    of its parameter stream), so the host's wait times out. Never a clean step."""
    run("fp32", "3:1", 13, testcase="test_card_misprogrammed", tag=f"-n{n_error}",
        extra={"ONIC_N_ERROR": str(n_error)})


@pytest.mark.slow
@pytest.mark.parametrize("dtypes", ["bf16", "bf16-fp32"])
def test_card_ring_bf16(dtypes: str) -> None:
    """bf16 wire (bf16 or fp32 parameters): every position of N = 2, 3, 4, two steps each, then
    a lossy N = 4."""
    run(dtypes, "all:2/3/4", 21, steps=2)
    run(dtypes, "4:3", 22, steps=2, tag="-faults",
        extra={"ONIC_DROP": "0.03", "ONIC_DUP": "0.02", "ONIC_REORDER": "0.02", "ONIC_BITFLIP": "0.01",
               "ONIC_MEM_STALL": "0.3"})


@pytest.mark.slow
def test_card_ring_fp32_two_steps() -> None:
    """fp32: every position of N = 2, 3, 4, two steps each, lossless."""
    run("fp32", "all:2/3/4", 31, steps=2, tag="-two")


@pytest.mark.slow
@pytest.mark.parametrize("n", [5, 6, 7, 8])
def test_card_ring_large(n: int) -> None:
    """Every position of N = 5, 6, 7, 8, one step each."""
    run("fp32", f"all:{n}", 40 + n, tag=f"-n{n}")


@pytest.mark.slow
def test_card_ring_many_steps() -> None:
    """Eight steps in a row at two positions with faults: m and v carried in card memory."""
    run("fp32", "3:0,5:4", 51, steps=8, tag="-steps",
        extra={"ONIC_DROP": "0.01", "ONIC_DUP": "0.01", "ONIC_MEM_STALL": "0.2"})
