"""The ring reference (hls.net.ring) against torch: pinned-order fp32 sums, bf16 widen-add-round,
gloo's reduce_scatter_tensor and DDP at N = 2, and DDP-equivalent AdamW over a few steps."""

from __future__ import annotations

import socket
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hls.golden import Hyper, bits_equal, to_bf16_bits, widen_grad
from hls.net import ring

# the driver's AdamW tolerance (tests/pynq_driver/optim/test_optim.py): parameters absolute, moments rtol/atol
PARAM_TOL = 2e-6
MOMENT_RTOL, MOMENT_ATOL = 1e-5, 1e-9
# Against DDP the gradient itself differs: the ring's pinned order and x f32(1/N) versus torch's sum
# then / N (N not a power of two) move a gradient by an fp32 ulp, about 1e-7 for gradients near 1.
DDP_MOMENT_ATOL = 1e-7


def order_sensitive(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values whose fp32 sum depends on the order: huge cancelling terms beside small ones."""
    x = rng.standard_normal(n).astype(np.float32)
    big = rng.random(n) < 0.3
    x[big] *= np.float32(1e8)
    x[rng.random(n) < 0.05] = np.float32(1e-38)  # near-subnormal terms
    return x


def torch_pinned(grads: list[torch.Tensor], size: int, widen_round: bool) -> list[torch.Tensor]:
    """Written from the spec, independently of hls.net.ring: ((g[c+1] + g[c+2]) + ...) + g[c]."""
    world = len(grads)
    padded = [torch.nn.functional.pad(g, (0, world * size - g.numel())) for g in grads]
    out = []
    for c in range(world):
        acc = padded[(c + 1) % world][c * size : (c + 1) * size].clone()
        for j in range(2, world + 1):
            own = padded[(c + j) % world][c * size : (c + 1) * size]
            acc = (acc.float() + own.float()).to(torch.bfloat16) if widen_round else acc + own
        out.append(acc)
    return out


def test_schedule() -> None:
    assert ring.chunk_elems(1, 2) == 16 and ring.chunk_elems(33, 2) == 32 and ring.chunk_elems(100, 3) == 48
    for world in range(2, 9):
        for r in range(world):
            assert ring.rs_send_chunk(r, 0, world) == (r - 1) % world
            assert ring.rs_recv_chunk(r, world - 2, world) == r  # the owner's sum arrives at the last hop
            assert ring.ag_send_chunk(r, 0, world) == r
            got = {ring.ag_recv_chunk(r, k, world) for k in range(world - 1)}
            assert got == set(range(world)) - {r}
            for k in range(world - 2):  # what a card receives at hop k it forwards at hop k + 1
                assert ring.rs_recv_chunk(r, k, world) == ring.rs_send_chunk(r, k + 1, world)
                assert ring.ag_recv_chunk(r, k, world) == ring.ag_send_chunk(r, k + 1, world)


@pytest.mark.parametrize("world", range(2, 9))
def test_reduce_scatter_fp32_is_torch_pinned_order(world: int) -> None:
    rng = np.random.default_rng(world)
    length = 16 * world + 7
    grads = [order_sensitive(rng, length) for _ in range(world)]
    got = ring.reduce_scatter(grads, "fp32")
    want = torch_pinned([torch.from_numpy(g) for g in grads], ring.chunk_elems(length, world), False)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32 and bits_equal(g, w.numpy()).all()
    if world >= 3:  # the data is order-sensitive: another order gives other bits
        naive = np.sum(np.stack([ring.pad(g, world) for g in grads]), axis=0, dtype=np.float32)
        assert not bits_equal(np.concatenate(got), naive).all()


@pytest.mark.parametrize("world", [2, 3, 5, 8])
def test_reduce_scatter_bf16_widen_add_round(world: int) -> None:
    rng = np.random.default_rng(100 + world)
    length = 40 * world + 3
    grads32 = [order_sensitive(rng, length) for _ in range(world)]
    grads32[0][:4] = [np.inf, -np.inf, np.float32(3e38), np.nan]  # overflow to inf and NaN propagation
    grads = [to_bf16_bits(g) for g in grads32]
    got = ring.reduce_scatter(grads, "bf16")
    tgrads = [torch.from_numpy(g.view(np.int16)).view(torch.bfloat16) for g in grads]
    want = torch_pinned(tgrads, ring.chunk_elems(length, world), True)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.uint16 and bits_equal(g, w.view(torch.int16).numpy().view(np.uint16)).all()


def test_all_gather_is_exact() -> None:
    rng = np.random.default_rng(7)
    for world in (2, 3, 8):
        length = 50 * world + 1
        size = ring.chunk_elems(length, world)
        shards = [rng.standard_normal(size).astype(np.float32) for _ in range(world)]
        out = ring.all_gather(shards, length)
        assert out.tobytes() == np.concatenate(shards)[:length].tobytes()


def run_torch_adamw(params: np.ndarray, step_grads: list[list[np.ndarray]], hyper: Hyper,
                    max_norm: float | None) -> tuple[torch.Tensor, torch.optim.AdamW]:
    """DDP-equivalent: average of the ranks' gradients, optional clip_grad_norm_, torch.optim.AdamW."""
    p = torch.nn.Parameter(torch.from_numpy(params.copy()))
    opt = torch.optim.AdamW([p], lr=hyper.lr, betas=(hyper.beta1, hyper.beta2), eps=hyper.eps,
                            weight_decay=hyper.weight_decay)
    for grads in step_grads:
        p.grad = torch.stack([torch.from_numpy(g) for g in grads]).sum(0) / len(grads)
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_([p], max_norm)
        opt.step()
    return p.detach(), opt


def run_ring(params: np.ndarray, step_grads: list[list[np.ndarray]], hyper: Hyper, **kw: object) -> tuple:
    world = len(step_grads[0])
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    result = None
    for t, grads in enumerate(step_grads, start=1):
        result = ring.ring_step(shards, grads, Hyper(**{**hyper.__dict__, "step": t}), **kw)
        shards = result.shards
        assert result.gathered.tobytes() == ring.all_gather([s.p for s in shards], params.size).tobytes()
    return result


@pytest.mark.parametrize(("world", "two_phase", "max_norm"), [(2, False, None), (3, False, None), (4, True, 0.05),
                                                              (8, True, None), (5, True, 1e9)])
def test_ring_step_tracks_ddp_adamw(world: int, two_phase: bool, max_norm: float | None) -> None:
    rng = np.random.default_rng(world * 11)
    length = 37 * world + 5
    params = rng.standard_normal(length).astype(np.float32)
    step_grads = [[rng.standard_normal(length).astype(np.float32) for _ in range(world)] for _ in range(4)]
    hyper = Hyper(lr=1e-2, weight_decay=1e-2)
    result = run_ring(params, step_grads, hyper, two_phase=two_phase, max_norm=max_norm)
    p_ref, opt = run_torch_adamw(params, step_grads, hyper, max_norm)
    assert np.abs(result.gathered - p_ref.numpy()).max() <= PARAM_TOL
    state = opt.state[opt.param_groups[0]["params"][0]]
    m = np.concatenate([s.m for s in result.shards])[:length]
    v = np.concatenate([s.v for s in result.shards])[:length]
    atol = MOMENT_ATOL if world & (world - 1) == 0 else DDP_MOMENT_ATOL
    np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=MOMENT_RTOL, atol=atol)
    np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=MOMENT_RTOL, atol=atol)
    if max_norm == 0.05:
        assert result.grad_scale < 1 / world  # clipping was active


def test_ring_step_bf16_out_and_nonfinite_skip() -> None:
    rng = np.random.default_rng(5)
    world, length = 3, 100
    params = rng.standard_normal(length).astype(np.float32)
    grads = [to_bf16_bits(rng.standard_normal(length).astype(np.float32)) for _ in range(world)]
    shards = [ring.Shard.from_params(params, r, world) for r in range(world)]
    out = ring.ring_step(shards, grads, Hyper(), wire_dtype="bf16", out_dtype="bf16")
    assert out.gathered.dtype == np.uint16 and out.gathered.size == length
    assert shards[0].m.tobytes() == np.zeros_like(shards[0].m).tobytes()  # inputs untouched
    grads[1][7] = 0x7F80  # +inf on one rank: two-phase skips the update everywhere
    skip = ring.ring_step(shards, grads, Hyper(), wire_dtype="bf16", out_dtype="bf16", two_phase=True, max_norm=1.0)
    assert skip.grad_scale is None and skip.gathered.tobytes() == to_bf16_bits(params).tobytes()
    with pytest.raises(ValueError, match="two-phase"):
        ring.ring_step(shards, grads, Hyper(), wire_dtype="bf16", max_norm=1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_worker(rank: int, world: int, port: int, grads: list[np.ndarray], params: np.ndarray, steps: int,
                out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        size = ring.chunk_elems(grads[0].size, world)
        inp = torch.from_numpy(ring.pad(grads[rank], world))
        out = torch.empty(size, dtype=torch.float32)
        with warnings.catch_warnings():  # torch 2.13 renames it reduce_scatter_single; the old name still works
            warnings.simplefilter("ignore", FutureWarning)
            dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM)

        class Flat(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.from_numpy(params.copy()))

            def forward(self, g: torch.Tensor) -> torch.Tensor:
                return (self.w * g).sum()

        model = torch.nn.parallel.DistributedDataParallel(Flat())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
        for t in range(steps):  # loss = <w, g>: the local gradient is exactly g
            loss = model(torch.from_numpy(grads[(rank + t) % world]))  # through DDP's forward: its hooks reduce
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.save({"rs": out, "w": model.module.w.detach()}, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_gloo_reduce_scatter_and_ddp_at_two_ranks(tmp_path: object) -> None:
    world, length, steps = 2, 1000, 3
    rng = np.random.default_rng(2)
    grads = [order_sensitive(rng, length) * np.float32(1e-8) for _ in range(world)]
    params = rng.standard_normal(length).astype(np.float32)
    mp.spawn(gloo_worker, args=(world, free_port(), grads, params, steps, str(tmp_path)), nprocs=world, join=True)
    results = [torch.load(f"{tmp_path}/rank{r}.pt") for r in range(world)]
    ours = ring.reduce_scatter(grads, "fp32")
    for r in range(world):
        assert bits_equal(ours[r], results[r]["rs"].numpy()).all()
    step_grads = [[grads[(r + t) % world] for r in range(world)] for t in range(steps)]
    result = run_ring(params, step_grads, Hyper(lr=1e-2, weight_decay=1e-2))
    for r in range(world):
        assert np.abs(result.gathered - results[r]["w"].numpy()).max() <= PARAM_TOL


def _sumsq_by_hand(values: np.ndarray, lanes: int) -> float:
    """The order of design.md 8.1 written out with Python floats (IEEE float64, RNE)."""
    squares = [float(x) * float(x) for x in values.astype(np.float64)]
    squares += [0.0] * (-len(squares) % lanes)

    def tree(xs: list[float]) -> float:
        while len(xs) > 1:
            xs = [xs[i] + xs[i + 1] for i in range(0, len(xs), 2)]
        return xs[0]

    acc = [0.0] * ring.SUMSQ_SLOTS
    for b in range(len(squares) // lanes):
        acc[b % ring.SUMSQ_SLOTS] += tree(squares[b * lanes:(b + 1) * lanes])
    return tree(acc)


@pytest.mark.parametrize("wire_dtype", ["fp32", "bf16"])
def test_chunk_scalars_fixed_order(wire_dtype: str) -> None:
    rng = np.random.default_rng(3)
    for n in (16, 48, 16 * 9, 16 * 37):
        x = (rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))).astype(np.float32)
        reduced = to_bf16_bits(x) if wire_dtype == "bf16" else x
        wide = widen_grad(reduced, wire_dtype)
        got, flag = ring.chunk_scalars(reduced, wire_dtype)
        want = _sumsq_by_hand(wide, 16 if wire_dtype == "fp32" else 32)
        assert not flag and np.float64(got).tobytes() == np.float64(want).tobytes()
        assert got == pytest.approx(float(np.sum(wide.astype(np.float64) ** 2)), rel=1e-12)
    x = rng.standard_normal(64).astype(np.float32)
    x[7] = np.array([0xFFC01234], dtype=np.uint32).view(np.float32)[0]  # a negative NaN with a payload
    got, flag = ring.chunk_scalars(x, "fp32")
    assert flag and np.float64(got).view(np.uint64) == ring.SUMSQ_NAN_BITS
    x[7] = -np.inf
    assert ring.chunk_scalars(x, "fp32") == (float("inf"), True)
