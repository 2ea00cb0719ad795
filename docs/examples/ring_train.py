"""Data-parallel training where the cards synchronise the gradients and run AdamW: `RingNicAdamW`.

Run it with one process per rank (each rank's card is a software card, csim by default):

    torchrun --nproc-per-node 2 docs/examples/ring_train.py --steps 20 --out run

The model is not wrapped in DDP; each rank's backward fills its local gradients, and
`optimizer.step()` hands them to its card: the cards reduce-scatter them, each owner card runs
AdamW on its shard, and the cards all-gather the updated parameters into every rank's model.
Each rank writes its final parameters to OUT/rank<r>.pt. Options for the tests
(tests/pynq_driver/optim/test_ring_optimizer.py): --compare trains DDP + torch.optim.AdamW over
gloo from the same start on the same data and records the largest parameter difference;
--save-at / --resume write and read a checkpoint; --die-rank / --die-at make a rank leave.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist

from pynq_driver.optim import RingNicAdamW


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))


def batch(step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of `step` (the same on every rank); this rank trains on its slice of it."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(8 * world, 16, generator=g)
    y = torch.sin(x[:, :4] * 2.0) + 0.1 * torch.randn(8 * world, 4, generator=g)
    return x[rank::world], y[rank::world]


def train(model, optimizer, scheduler, start: int, steps: int, rank: int, world: int, args) -> list[float]:
    losses = []
    for step in range(start, steps):
        x, y = batch(step, rank, world)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if args.save_at == step + 1:
            ckpt = Path(args.ckpt)
            ckpt.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(), "step": step + 1}, ckpt / f"rank{rank}.pt")
        if args.die_rank == rank and args.die_at == step + 1:
            print(f"rank {rank}: leaving after step {step + 1}", flush=True)
            os._exit(0)  # no error, no goodbye: the others must notice on their own
    return losses


def ddp_reference(steps: int, rank: int, world: int) -> torch.Tensor:
    """The script before the change: DDP + torch.optim.AdamW over gloo; its final parameters.

    A function of its own so that the DDP model is gone before destroy_process_group: its reducer
    holds the process group, and were it the last holder, the group would be destroyed in the
    reducer's destructor, which joins gloo's worker threads with the GIL held, while a worker may
    still need the GIL to free its last allreduce (a deadlock at exit, seen under load). Released
    by destroy_process_group, the group is destroyed with the GIL released."""
    ref = torch.nn.parallel.DistributedDataParallel(make_model())
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.05)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=5, gamma=0.5)
    train(ref, ref_opt, ref_sched, 0, steps, rank, world, argparse.Namespace(save_at=0, die_rank=-1))
    return torch.cat([p.detach().reshape(-1) for p in ref.parameters()])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="run")
    ap.add_argument("--backend", default="csim")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--save-at", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--ckpt", default="ckpt")
    ap.add_argument("--die-rank", type=int, default=-1)
    ap.add_argument("--die-at", type=int, default=0)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    optimizer = RingNicAdamW(model.parameters(), lr=1e-2, weight_decay=0.05,  # the one-line change
                             backend=args.backend, timeout_s=args.timeout)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    start = 0
    if args.resume:
        saved = torch.load(Path(args.ckpt) / f"rank{rank}.pt", weights_only=False)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        start = saved["step"]
    losses = train(model, optimizer, scheduler, start, args.steps, rank, world, args)
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    result = {"params": params, "losses": losses, "skipped": optimizer.skipped_steps}
    optimizer.close()

    if args.compare:
        result["ref_diff"] = (params - ddp_reference(args.steps, rank, world)).abs().max().item()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(result, out / f"rank{rank}.pt")
    print(f"rank {rank}: {args.steps} steps, last loss {losses[-1] if losses else float('nan'):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
