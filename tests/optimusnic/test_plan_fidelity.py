"""The planner models what the driver does and what training stacks allocate: recompute-aware compute time,
the card chain leg by leg, memory as allocated, capacity-first card plans, whole-node questions."""

from __future__ import annotations

import pytest

from hls.targets import get_target
from optimusnic import planner as P
from optimusnic.cli import main

H100, U55C = P.get_gpu("h100"), get_target("u55c")


def _plan(model: str, gpus: int, questions: bool = False, **a):
    m = P.get_model(model)
    return P.plan(params=m.params, gpus=gpus, gpu=H100, target=U55C, model=m,
                  assumptions=P.Assumptions(rtl_efficiency=0.9, **a), questions=questions)


def test_recompute_none_with_flash_attention_stores_no_scores() -> None:
    # 8B on 8 H100, no recompute: 16P/8 = 16.1 GB + 32 x 34 x 8192 x 4096 = 36.5 GB + logits 4.2 GB + FSDP's
    # buffers 1.5 GB = 58 GB (the old figure, with s x s scores, was 388 GB)
    z3 = _plan("llama3-8b", 8, recompute="none").scheme("zero3")
    assert 55e9 < z3.memory["total"] < 60e9 and z3.fits
    with pytest.raises(P.PlanError, match="fits under no scheme"):  # a stack that stores the scores
        _plan("llama3-8b", 8, recompute="none", attention="eager")


def test_recompute_changes_step_time_and_the_source_is_printed() -> None:
    full, none = _plan("llama3-8b", 8), _plan("llama3-8b", 8, recompute="none")
    assert full.scheme("zero3").compute_s > none.scheme("zero3").compute_s
    assert full.hfu == pytest.approx(0.4) and none.mfu == pytest.approx(0.4)
    note = next(n for n in full.assumptions if n.startswith("HFU"))
    assert "Llama 3 paper" in note and "the source's recompute: none" in note


def test_change_detection_and_pcie_directions_in_the_chain() -> None:
    on, off = _plan("llama3-70b", 64), _plan("llama3-70b", 64, detect_changes=False)
    legs_on = dict(on.chain["optimusnic"])
    assert "fp32 masters card -> host (change detection)" in legs_on
    assert "fp32 masters card -> host (change detection)" not in dict(off.chain["optimusnic"])
    assert sum(legs_on.values()) > sum(dict(off.chain["optimusnic"]).values())
    assert on.nic.card_pcie_bytes_per_s == pytest.approx(9.0e9) and on.nic.card_c2h_bytes_per_s == pytest.approx(12.2e9)
    given = _plan("llama3-70b", 64, card_h2c_bytes_per_s=13e9, card_c2h_bytes_per_s=13e9)
    assert sum(dict(given.chain["optimusnic"]).values()) < sum(legs_on.values())


def test_card_capacity_is_monotone_in_the_gradient_buffer() -> None:
    # the line-rate plans differ (fp32 gradients: 1 CU, bf16: 2 CUs); capacity-first is the same for both
    # (1 CU x 5 state stripes, the most the 32 HBM AXI ports take) and holds neither 1.10 G shard
    bf16, fp32 = _plan("llama3-70b", 64), _plan("llama3-70b", 64, grad_buffer="fp32")
    assert not bf16.nic.fits and not fp32.nic.fits
    assert bf16.nic.max_params_any_plan == fp32.nic.max_params_any_plan == 671_088_640


def test_compute_units_and_stripes_pass_through_to_sizing() -> None:
    p = _plan("llama3-70b", 64, compute_units=2)
    assert p.nic.plan_kind == "given" and p.nic.compute_units == 2 and not p.nic.fits
    q = _plan("llama3-70b", 64, compute_units=1, stripes=4)
    assert q.nic.stripes == 4 and q.nic.max_params_per_card == 536_870_912
    with pytest.raises(P.PlanError, match="stripes"):
        _plan("llama3-70b", 64, compute_units=2, stripes=10)


def test_fewest_gpus_past_the_limit_is_printed_as_more_than() -> None:
    p = _plan("llama3-70b", 64, questions=True)
    assert p.questions["fewest_gpus"]["ddp"]["gpus"] is None
    ddp_row = next(line for line in P.format_plan(p).split("questions (")[1].splitlines() if line.startswith("DDP"))
    assert "> 65,536" in ddp_row and "never" not in ddp_row


def test_stream_path_refuses_gradient_accumulation() -> None:
    with pytest.raises(P.PlanError, match="grad-accum"):
        _plan("llama3-8b", 16, nic_placement="rail", nic_grad_path="stream", clip=False, grad_accum=2)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--params", "-7e9"], "--params"),
        (["--params", "7B", "--freed-threshold-gb", "0"], "--freed-threshold-gb"),
        (["--params", "7B", "--compute-units", "0"], "--compute-units"),
    ],
)
def test_one_line_errors_name_the_flag(argv: list[str], needle: str, capsys) -> None:
    try:
        rc = main(["plan", *argv, "--gpus", "8", "--gpu", "h100", "--nic", "u55c"])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("optimusnic plan: error:") and needle in err and "\n" not in err
    assert "expected one argument" not in err


def test_cli_new_flags(capsys) -> None:
    rc = main(["plan", "--model", "llama3-70b", "--gpus", "64", "--gpu", "h100", "--nic", "u55c", "--hfu", "0.45",
               "--recompute", "full", "--param-dtype", "bf16", "--no-detect-changes", "--card-h2c-gbs", "9.6"])
    out = capsys.readouterr().out
    assert rc == 0 and "HFU 45%" in out and "capacity-first" in out and "card chain per step" in out
    assert "frees 12 x P / N" in out  # bf16 FSDP2 parameters: the card frees all 12 bytes
