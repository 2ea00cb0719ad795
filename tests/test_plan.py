"""The training-step planner: formulas on hand-computed cases, presets, the CLI, impossible inputs."""

from __future__ import annotations

import json
import math

import pytest

from hls import plan as P
from hls.cli import main
from hls.sizing import size
from hls.targets import get_target

GB = 1e9


# ------------------------------------------------------------------ formulas


@pytest.mark.parametrize(
    ("scheme", "expected"),
    [
        # 1e9 params over 8 GPUs, bytes per GPU: (params, grads, optimizer state)
        ("ddp", (2e9, 2e9, 12e9)),  # 16 GB in all
        ("zero1", (2e9, 2e9, 1.5e9)),  # 4 + 12/8
        ("zero2", (2e9, 0.25e9, 1.5e9)),  # 2 + 14/8
        ("zero3", (0.25e9, 0.25e9, 1.5e9)),  # 16/8
        ("offload", (2e9, 0.25e9, 0.0)),
        ("optimusnic", (2e9, 2e9, 0.0)),
        ("optimusnic_z3", (0.25e9, 0.25e9, 0.0)),
    ],
)
def test_memory_per_gpu_hand_computed(scheme: str, expected: tuple[float, float, float]) -> None:
    mem = P.gpu_memory_bytes(scheme, 1e9, 8)
    assert (mem["params"], mem["grads"], mem["optimizer"]) == pytest.approx(expected)


def test_ddp_is_sixteen_bytes_per_param_and_optimusnic_sharded_grads() -> None:
    assert sum(P.gpu_memory_bytes("ddp", 1e9, 8).values()) == pytest.approx(16 * GB)
    assert P.gpu_memory_bytes("optimusnic", 1e9, 8, nic_grads="sharded")["grads"] == pytest.approx(0.25e9)
    with pytest.raises(P.PlanError, match="known schemes"):
        P.gpu_memory_bytes("zero4", 1e9, 8)


def test_ring_volumes() -> None:
    assert P.ring_all_reduce_bytes(8, 1e9) == pytest.approx(1.75e9)  # 2 * 7/8
    assert P.ring_reduce_scatter_bytes(8, 1e9) == pytest.approx(0.875e9)
    assert P.ring_all_gather_bytes(8, 1e9) == pytest.approx(0.875e9)
    assert P.ring_all_reduce_bytes(1, 1e9) == 0  # one rank sends nothing
    # all-reduce = reduce-scatter + all-gather
    assert P.ring_all_reduce_bytes(64, 3e9) == pytest.approx(
        P.ring_reduce_scatter_bytes(64, 3e9) + P.ring_all_gather_bytes(64, 3e9))


def test_activation_formulas() -> None:
    # Korthikanti et al.: s=4, b=1, h=8, a=2 -> sbh = 32; 34 + 5*a*s/h = 39
    assert P.activation_bytes(1, 8, 2, 4, 1, "none") == 32 * 39
    assert P.activation_bytes(3, 8, 2, 4, 1, "selective") == 3 * 32 * 34
    assert P.activation_bytes(3, 8, 2, 4, 1, "full") == 3 * 32 * 2
    # Llama 3 70B, seq 8192, micro-batch 1, full recomputation: 80 layers x 2 x 8192 x 8192 bytes
    assert P.activation_bytes(80, 8192, 64, 8192, 1, "full") == 80 * 2 * 8192 * 8192
    with pytest.raises(P.PlanError):
        P.activation_bytes(1, 8, 2, 4, 1, "some")


def test_train_flops() -> None:
    assert P.train_flops(1e9, 1000, "none") == 6e12
    assert P.train_flops(1e9, 1000, "selective") == 6e12
    assert P.train_flops(1e9, 1000, "full") == 8e12


# ------------------------------------------------------------------ presets


@pytest.mark.parametrize(
    ("key", "expected", "exact"),
    [("llama3-8b", 8.03e9, 8_030_261_248), ("llama3-70b", 70.6e9, 70_553_706_496), ("llama3-405b", 405.9e9, None)],
)
def test_llama_parameter_counts(key: str, expected: float, exact: int | None) -> None:
    m = P.get_model(key)
    assert m.params == pytest.approx(expected, rel=0.01)
    if exact is not None:  # the count published with the released weights
        assert m.params == exact


def test_gpu_and_cluster_presets() -> None:
    h100 = P.get_gpu("h100")
    assert h100.memory_bytes == 80e9 and h100.bf16_flops == 989e12 and h100.memory_bandwidth_bytes_per_s == 3.35e12
    assert P.get_gpu("H200").memory_bytes == 141e9
    assert P.get_gpu("a100").key == "a100-80gb"
    dgx = P.get_cluster("dgx-h100")
    assert dgx.gpus_per_node == 8 and dgx.nic_gbps_per_gpu == 400
    for g in P.gpus().values():
        assert g.default_cluster in P.clusters() and g.source


def test_rtl_efficiency_file(tmp_path) -> None:
    f = tmp_path / "rtl.json"
    eff, source = P.read_rtl_efficiency(f)  # no file yet
    assert eff == P.DEFAULT_RTL_EFFICIENCY and source.startswith("assumed")
    f.write_text(json.dumps({"efficiency": 0.875}))
    eff, source = P.read_rtl_efficiency(f)
    assert eff == 0.875 and source.startswith("measured")
    f.write_text(json.dumps({"efficiency": 1.5}))
    assert P.read_rtl_efficiency(f)[1].startswith("assumed")


# ------------------------------------------------------------------ the plan, hand-computed


def _plan(**kw):
    a = P.Assumptions(**kw.pop("assumptions", {}))
    args = dict(params=1_000_000_000, gpus=8, gpu=P.get_gpu("h100"), target=get_target("u55c"), assumptions=a)
    args.update(kw)
    return P.plan(**args)


def test_single_node_plan_hand_computed() -> None:
    p = _plan(assumptions={"rtl_efficiency": 0.9})
    s = {r.key: r for r in p.schemes}
    assert p.nodes == 1 and p.gpus_per_node == 8
    # compute: 8 * 1e9 * 8192 FLOPs (full recomputation) at 40% of 989 TFLOPS
    compute = 8 * 1e9 * 8192 / (989e12 * 0.4)
    assert s["ddp"].compute_s == pytest.approx(compute)
    # DDP: all-reduce of 2 GB of bf16 grads on NVLink (450 GB/s x 0.85), hidden under backward
    ar = 2 * 7 / 8 * 2e9
    assert s["ddp"].comm_bytes["all_reduce_grads"] == pytest.approx(ar)
    assert s["ddp"].comm_s == pytest.approx(ar / (450e9 * 0.85))
    assert s["ddp"].comm_exposed_s == 0
    # DDP optimizer: 28 bytes x 1e9 params at 80% of 3.35 TB/s, exposed
    assert s["ddp"].optimizer_s == pytest.approx(28e9 / (3.35e12 * 0.8))
    assert s["ddp"].step_s == pytest.approx(compute + 28e9 / (3.35e12 * 0.8))
    # ZeRO-1: the post-step all-gather of 2 GB bf16 params is exposed
    ag = 7 / 8 * 2e9 / (450e9 * 0.85)
    assert s["zero1"].comm_exposed_s == pytest.approx(ag)
    assert s["zero1"].optimizer_s == pytest.approx(28e9 / 8 / (3.35e12 * 0.8))
    # Offload: CPU Adam 2 sockets x 1e9 params/s shared by 8 GPUs -> 0.25e9 params/s per rank
    assert s["offload"].optimizer_s == pytest.approx(1e9 / 8 / 0.25e9)
    assert s["offload"].host_bytes_per_node == pytest.approx(8 * 14 * 1e9 / 8)
    # Every scheme fits 1e9 params on 80 GB (activations of --params models are not estimated)
    assert all(r.fits for r in p.schemes)
    assert s["ddp"].memory["total"] == pytest.approx(16e9)


def test_optimusnic_uses_sizing_and_hides_update() -> None:
    target = get_target("u55c")
    p = _plan(assumptions={"rtl_efficiency": 0.9})
    n = p.nic
    ref = size(target, 1_000_000_000, cards=8, grad_dtype="bf16", out_dtype="bf16", grad_source="stream")
    assert n.shard_params == ref.shard_params == 125_000_000
    assert n.max_params_per_card == ref.max_params_per_card and n.fits
    assert n.achieved_params_per_s == pytest.approx(min(ref.memory_params_per_s, ref.kernel_params_per_s * 0.9))
    assert n.update_time_s == pytest.approx(125_000_000 / n.achieved_params_per_s)
    o = next(r for r in p.schemes if r.key == "optimusnic")
    assert o.memory["optimizer"] == 0 and o.optimizer_s == pytest.approx(n.update_time_s)
    # one node: the 250 MB bf16 gradient shard streams through a 100 Gb/s port at 85%
    rs = max(7 / 8 * 2e9 / (450e9 * 0.85), 2 * 125e6 / (100e9 / 8 * 0.85))
    assert o.optimizer_exposed_s == pytest.approx(max(0.0, n.update_time_s - rs))
    assert o.optimizer_exposed_s == 0  # the card keeps up with its line rate


def test_multi_node_uses_network_and_card_links() -> None:
    p = _plan(gpus=64)
    s = {r.key: r for r in p.schemes}
    assert p.nodes == 8
    rs = 63 / 64 * 2e9
    assert s["zero1"].comm_s == pytest.approx(2 * rs / (400e9 / 8 * 0.85))
    assert s["optimusnic"].comm_s == pytest.approx(2 * rs / (100e9 / 8 * 0.85))
    # two ports double the card link
    p2 = _plan(gpus=64, assumptions={"nic_ports": 2})
    o2 = next(r for r in p2.schemes if r.key == "optimusnic")
    assert o2.comm_s == pytest.approx(s["optimusnic"].comm_s / 2)


def test_zero3_comm_volume_is_one_and_a_half_ddp() -> None:
    p = _plan(gpus=16)
    s = {r.key: r for r in p.schemes}
    assert sum(s["zero3"].comm_bytes.values()) == pytest.approx(1.5 * s["ddp"].comm_bytes["all_reduce_grads"])


def test_llama70b_on_64_h100() -> None:
    m = P.get_model("llama3-70b")
    p = _plan(params=m.params, gpus=64, model=m)
    s = {r.key: r for r in p.schemes}
    assert not s["ddp"].fits and not s["zero1"].fits and s["zero3"].fits and s["optimusnic_z3"].fits
    assert s["zero3"].memory["activations"] == pytest.approx(80 * 2 * 8192 * 8192)
    assert p.nic.fits and p.nic.shard_params == math.ceil(m.params / 64)
    assert p.fastest is not None and p.fastest.fits


# ------------------------------------------------------------------ impossible inputs


@pytest.mark.parametrize("gpus", [0, -4])
def test_no_gpus(gpus: int) -> None:
    with pytest.raises(P.PlanError, match="gpus"):
        _plan(gpus=gpus)


def test_model_that_fits_nowhere() -> None:
    m = P.get_model("llama3-405b")
    with pytest.raises(P.PlanError, match="fits under no scheme"):
        _plan(params=m.params, gpus=8, gpu=P.get_gpu("a100-40gb"), model=m)


def test_unknown_presets_list_known_names() -> None:
    with pytest.raises(P.PlanError, match="llama3-8b"):
        P.get_model("gpt5")
    with pytest.raises(P.PlanError, match="h100"):
        P.get_gpu("b200")
    with pytest.raises(P.PlanError, match="dgx-h100"):
        P.get_cluster("nvl72")


def test_bad_node_split_and_ports() -> None:
    with pytest.raises(P.PlanError, match="split evenly"):
        _plan(gpus=12, nodes=5)
    with pytest.raises(P.PlanError, match="GPUs per node"):
        _plan(gpus=32, nodes=2)
    with pytest.raises(P.PlanError, match="whole"):
        _plan(gpus=12)
    with pytest.raises(P.PlanError, match="nic-ports"):
        _plan(assumptions={"nic_ports": 3})


# ------------------------------------------------------------------ the command


def test_cli_table_and_chart(tmp_path, capsys) -> None:
    png = tmp_path / "plan.png"
    rc = main(["plan", "--model", "llama3-70b", "--gpus", "64", "--gpu", "h100", "--nic", "u55c",
               "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0
    for word in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-Offload", "OptimusNIC", "assumptions:",
                 "NIC side", "fastest scheme that fits", "Korthikanti", "MFU"):
        assert word in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_json(capsys) -> None:
    rc = main(["plan", "--params", "7B", "--gpus", "16", "--gpu", "h200", "--nic", "u55c", "--json",
               "--rtl-efficiency", "0.9"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["gpus"] == 16 and data["nodes"] == 2 and data["params"] == 7_000_000_000
    assert [s["key"] for s in data["schemes"]][:4] == ["ddp", "zero1", "zero2", "zero3"]
    assert data["nic"]["rtl_efficiency"] == 0.9 and data["nic"]["sizing"]["target"] == "u55c"
    assert data["assumptions"] and data["fastest"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "llama3-8b", "--gpus", "0", "--gpu", "h100", "--nic", "u55c"], "gpus"),
        (["--model", "llama3-405b", "--gpus", "8", "--gpu", "a100-40gb", "--nic", "u55c"], "fits under no scheme"),
        (["--model", "nope", "--gpus", "8", "--gpu", "h100", "--nic", "u55c"], "known models"),
        (["--model", "llama3-8b", "--gpus", "8", "--gpu", "tpu", "--nic", "u55c"], "known GPUs"),
        (["--model", "llama3-8b", "--gpus", "8", "--gpu", "h100", "--nic", "x9"], "known targets"),
    ],
)
def test_cli_errors_are_one_line(argv: list[str], needle: str, capsys) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("optimusnic plan: error:") and needle in err and "\n" not in err
