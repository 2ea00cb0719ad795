"""`ShardedNicOptimizer`: ZeRO-style sharded AdamW/Adam over `torch.distributed`, each shard on a card.

Every rank runs the same model on its own slice of the batch. At `step()`, per param group and
parameter dtype:

1. the gradients go end to end into one flat bucket (padded to a multiple of world size x 16
   elements, so every rank's shard starts on a 64-byte beat), divided by the world size;
2. `reduce_scatter` leaves rank r with the summed gradient of its shard [r*S, (r+1)*S) only;
3. the rank's card updates that shard: the fp32 masters and both moments of 1/world of the
   parameters live there and nowhere else;
4. `all_gather` brings every rank the updated parameters, which go back into the model.

That is ZeRO stage 1 optimizer-state sharding with stage 2's communication (reduce-scatter of
flat gradient buckets instead of an all-reduce). It runs on any process group: gloo on CPU,
NCCL on GPUs. The buckets live on the parameters' device and the collectives run there; only
the rank's own shard crosses to host memory, which the card reads, and back. (This machine has
no GPU: the CUDA path is written for, not yet run.)

A step whose reduced gradient holds inf/NaN on any rank is skipped on every rank (one
all-reduce of a flag), so the shards never drift apart. `state_dict()` is collective: it
gathers the shards into `torch.optim.AdamW`'s format, identical on every rank, and
`load_state_dict()` takes that format (from this class, NicAdamW or torch.optim.AdamW) and
keeps each rank's slice.

Loss scaling: use torch's `ShardedGradScaler` (torch.distributed.fsdp.sharded_grad_scaler,
`ShardedGradScaler("cpu")` on gloo). It all-reduces the inf flags it finds in the local
gradients, so every rank skips the same steps and keeps the same scale. A plain
`torch.amp.GradScaler` judges each rank's local gradients alone: ranks could disagree and one
would wait in the reduce-scatter until the process group's timeout.

`overlap=True` launches each bucket's reduce-scatter from the backward pass, as soon as every
gradient of the bucket is complete (post-accumulate-grad hooks), and `step()` waits for it;
wrap the backward passes of gradient accumulation but the last in `optimizer.no_sync()`, as with
DDP. Not yet: freeing each rank's full gradients after the reduce-scatter (ZeRO stage 2's
memory saving).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hls.errors import UserError
from pynq_driver.optim import (
    DEFAULT_BACKEND,
    DEFAULT_TARGET,
    KERNEL_DTYPES,
    DevicePool,
    FlatBucket,
    check_group,
    grads_present,
    hyper_for,
    map_saved_state,
    masters_from,
    saved_step,
    torch_defaults,
    torch_param_state,
)
from pynq_driver.shard import CHUNK_ALIGN, ShardState

# torch 2.13 renamed the tensor collectives; both names work on gloo there, older torch has the old ones.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class ShardedBucket:
    """One flat bucket of the whole model-side group, and this rank's slice of it on the card."""

    def __init__(self, params: list[torch.Tensor], rank: int, world: int, align: int) -> None:
        self.flat = FlatBucket(params)
        self.dtype = self.flat.dtype
        unit = world * align
        self.padded = -(-self.flat.n // unit) * unit
        self.shard_len = self.padded // world
        self.lo = rank * self.shard_len
        self.hi = self.lo + self.shard_len
        # Buckets live where the parameters live (collectives run there: gloo on CPU, NCCL on GPUs);
        # the card reads and writes host memory, so the shard crosses to the host and back.
        dev = self.flat.device
        self.grad = torch.zeros(self.padded, dtype=self.dtype, device=dev)  # the tail stays zero
        self.gathered = torch.empty(self.padded, dtype=self.dtype, device=dev)
        self.shard_grad = torch.empty(self.shard_len, dtype=self.dtype, device=dev)
        self.shard_out = torch.empty(self.shard_len, dtype=self.dtype, device=dev)
        self.host_out = self.shard_out if dev.type == "cpu" else torch.empty(self.shard_len, dtype=self.dtype)
        self.shard: ShardState | None = None
        self.maximize = False
        self.ready = 0  # parameters whose gradient is complete in this backward pass (overlap mode)
        self.work: Any = None  # the reduce-scatter launched from the backward pass, if any

    def masters(self, states: list[dict[str, Any]] | None = None) -> np.ndarray:
        """fp32 masters of this rank's slice, zero-padded past the last parameter."""
        out = np.zeros(self.shard_len, np.float32)
        lo, hi = min(self.lo, self.flat.n), min(self.hi, self.flat.n)
        if hi > lo:
            out[: hi - lo] = masters_from(self.flat, states, lo, hi)
        return out

    def slice_of(self, full: torch.Tensor) -> np.ndarray:
        out = np.zeros(self.shard_len, np.float32)
        lo, hi = min(self.lo, self.flat.n), min(self.hi, self.flat.n)
        out[: hi - lo] = full[lo:hi].numpy()
        return out


class ShardedNicOptimizer(torch.optim.Optimizer):
    """AdamW (or Adam) sharded over the ranks of a process group; each rank's shard on its card."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float | None = None, *, optimizer: str = "adamw",
                 process_group: Any = None, average_gradients: bool = True, backend: str = DEFAULT_BACKEND,
                 target: str = DEFAULT_TARGET, lanes: int | None = None, skip_nonfinite: bool = True,
                 chunk_elems: int | None = None, maximize: bool = False, overlap: bool = False,
                 **device_options: Any) -> None:
        if optimizer not in ("adamw", "adam"):
            raise UserError(f"optimizer: {optimizer!r}; choose adamw or adam")
        if not dist.is_available() or not dist.is_initialized():
            raise UserError("ShardedNicOptimizer needs torch.distributed: call "
                            "torch.distributed.init_process_group(...) first (gloo on CPU, nccl on GPUs)")
        self._adamw = optimizer == "adamw"
        if weight_decay is None:  # torch's defaults: AdamW 1e-2, Adam 0
            weight_decay = 1e-2 if self._adamw else 0.0
        defaults = torch_defaults(lr, betas, eps, weight_decay, adamw=self._adamw, maximize=maximize)
        super().__init__(params, defaults)
        self.kind = optimizer
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.world = dist.get_world_size(self.process_group)
        self.rank = dist.get_rank(self.process_group)
        self.average = bool(average_gradients)
        self.skip_nonfinite = bool(skip_nonfinite)
        self.chunk_elems = chunk_elems
        if backend == "alveo" and "device_index" not in device_options:
            # Each rank drives its own card: its rank on this host picks it (override with device_index=).
            device_options = {**device_options, "device_index": host_local_rank(self.process_group)}
        self.pool = DevicePool(backend, optimizer, target, lanes, device_options)
        self.skipped_steps = 0
        self.overlap = bool(overlap)
        self.overlapped_reductions = 0  # buckets reduced from the backward pass (a check that overlap happens)
        self._sync = True
        self._hooks: list[Any] = []
        self._buckets: list[list[ShardedBucket]] = []
        try:
            for group in self.param_groups:
                check_group(group, adamw=self._adamw, who=type(self).__name__)
                self._buckets.append(self._make_buckets(group))
        except BaseException:
            self.close()
            raise

    def _make_buckets(self, group: dict[str, Any]) -> list[ShardedBucket]:
        by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = defaultdict(list)
        for p in group["params"]:
            if p.dtype not in KERNEL_DTYPES:
                raise UserError(f"ShardedNicOptimizer: parameters of dtype {p.dtype} are not supported; use one of "
                                f"{', '.join(str(d) for d in KERNEL_DTYPES)}")
            if p.requires_grad:
                by_dtype[p.dtype, p.device].append(p)
        out = []
        for (dtype, _), params in by_dtype.items():
            b = ShardedBucket(params, self.rank, self.world, CHUNK_ALIGN)
            b.shard = ShardState(self.pool.get(*KERNEL_DTYPES[dtype]), b.masters(), self.chunk_elems,
                                 nonfinite="skip")
            b.flat.remember()
            b.maximize = bool(group.get("maximize", False))
            if self.overlap:
                for p in params:
                    self._hooks.append(p.register_post_accumulate_grad_hook(functools.partial(self._grad_ready, b)))
            out.append(b)
        return out

    # ---- overlap: reduce-scatter each bucket as soon as backward has produced all its gradients --------
    def _grad_ready(self, b: ShardedBucket, _param: torch.Tensor) -> None:
        if not self._sync:
            return
        b.ready += 1
        if b.ready == len(b.flat.params):
            b.ready = 0
            self._launch(b, async_op=True)
            self.overlapped_reductions += 1

    def _launch(self, b: ShardedBucket, *, async_op: bool) -> None:
        if b.work is not None:  # a previous backward's reduction that no step consumed
            b.work.wait()
        if b.flat.changed_outside():
            self._reload_masters(b)
        with torch.no_grad():
            b.flat.flat_grads(b.grad, negate=b.maximize)
            if self.average:
                b.grad.div_(self.world)
        work = _reduce_scatter(b.shard_grad, b.grad, group=self.process_group, async_op=async_op)
        b.work = work if async_op else None

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients over several backward passes without reducing them (as DDP.no_sync)."""
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if hasattr(self, "_buckets"):  # collective: every rank adds the same group
            check_group(self.param_groups[-1], adamw=self._adamw, who=type(self).__name__)
            self._buckets.append(self._make_buckets(self.param_groups[-1]))

    # ---- what lives where ----------------------------------------------------------------------
    def shards(self) -> list[ShardState]:
        return [b.shard for buckets in self._buckets for b in buckets]

    def placement(self) -> list[dict[str, Any]]:
        """This rank's shards: elements [lo, hi) of each flat bucket, backend, bytes on the card."""
        rows = []
        for gi, buckets in enumerate(self._buckets):
            for b in buckets:
                rows.append({
                    "rank": self.rank, "world_size": self.world, "group": gi,
                    "dtype": str(b.dtype).replace("torch.", ""), "bucket_params": b.flat.n, "padded": b.padded,
                    "shard_lo": b.lo, "shard_hi": b.hi, "shard_params": b.shard.n, "backend": b.shard.backend,
                    "kernel": b.shard.spec.name, "state_bytes": 12 * b.shard.n,
                })
        return rows

    def device_state_bytes(self) -> int:
        return sum(12 * s.n for s in self.shards())

    def close(self) -> None:
        for h in getattr(self, "_hooks", []):
            h.remove()
        self._hooks = []
        for buckets in getattr(self, "_buckets", []):
            for b in buckets:
                if b.shard is not None:
                    b.shard.close()
        self._buckets = []
        self.pool.close()

    # ---- the step -----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        who = type(self).__name__
        work: list[tuple[dict[str, Any], ShardedBucket]] = []
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            check_group(group, adamw=self._adamw, who=who)
            for b in buckets:
                b.ready = 0
                b.maximize = bool(group.get("maximize", False))
                if b.work is None:  # not launched from the backward pass: reduce now
                    if not grads_present(b.flat, who):
                        continue  # every rank runs the same model, so every rank skips it
                    self._launch(b, async_op=False)
                else:
                    b.work.wait()
                    b.work = None
                work.append((group, b))
        if not work:
            return loss
        if self.skip_nonfinite:
            # One flag for all buckets: if any rank's reduced shard is not finite, all skip the step.
            bad = torch.tensor([float(not all(bool(torch.isfinite(b.shard_grad).all()) for _, b in work))],
                               device=work[0][1].grad.device)
            dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=self.process_group)
            if bad.item():
                self.skipped_steps += 1
                return loss
        for group, b in work:
            hyper = hyper_for(group, b.shard.step_count + 1)
            b.shard.step(b.shard_grad.cpu(), hyper, out=b.host_out, apply_nonfinite=True)
            if b.host_out is not b.shard_out:
                b.shard_out.copy_(b.host_out)
            _all_gather(b.gathered, b.shard_out, group=self.process_group)
            b.flat.write_back(b.gathered)
        return loss

    def _reload_masters(self, b: ShardedBucket) -> None:
        sd = b.shard.state_dict()
        sd["params"] = b.masters()
        b.shard.load_state_dict(sd)
        b.flat.remember()

    # ---- state_dict: torch.optim.AdamW's format, gathered from every rank (collective) -----------
    def _gather_full(self, b: ShardedBucket, local: np.ndarray) -> torch.Tensor:
        dev = b.grad.device
        full = torch.empty(b.padded, dtype=torch.float32, device=dev)
        _all_gather(full, torch.from_numpy(np.ascontiguousarray(local)).to(dev), group=self.process_group)
        return full[: b.flat.n].cpu()

    def state_dict(self) -> dict[str, Any]:
        """Collective: every rank must call it. Returns the full state in torch.optim.AdamW's format."""
        state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
        for buckets in self._buckets:
            for b in buckets:
                sd = b.shard.state_dict()
                steps = torch.tensor([float(sd["step"])], device=b.grad.device)
                dist.all_reduce(steps, op=dist.ReduceOp.MAX, group=self.process_group)
                if steps.item() == 0:
                    continue
                full = {k: self._gather_full(b, sd[k]) for k in ("exp_avg", "exp_avg_sq", "params")}
                f = b.flat
                for p, lo, hi in zip(f.params, f.offsets, f.offsets[1:], strict=False):
                    master = full["params"][lo:hi].numpy() if b.dtype != torch.float32 else None
                    state[p] = torch_param_state(sd["step"], full["exp_avg"][lo:hi].numpy(),
                                                 full["exp_avg_sq"][lo:hi].numpy(), p, master)
        kept = self.state
        self.state = state
        try:
            return super().state_dict()
        finally:
            self.state = kept

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a full torch.optim.AdamW-format state (every rank the same); each rank keeps its slice."""
        saved = map_saved_state(self, state_dict)
        super().load_state_dict(state_dict)
        self.state = defaultdict(dict)
        who = type(self).__name__
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            check_group(group, adamw=self._adamw, who=who)
            for b in buckets:
                states = [saved.get(id(p)) for p in b.flat.params]
                present = [st is not None and "exp_avg" in st for st in states]
                if not any(present):
                    zeros = np.zeros(b.shard_len, np.float32)
                    sd = {"step": 0, "exp_avg": zeros, "exp_avg_sq": zeros, "params": b.masters()}
                elif not all(present):
                    raise UserError(f"{who}: the state dict has state for only some parameters of a param group")
                else:
                    cat = {k: torch.cat([st[k].detach().to("cpu", torch.float32).reshape(-1) for st in states])
                           for k in ("exp_avg", "exp_avg_sq")}
                    sd = {"step": saved_step(states, who), "exp_avg": b.slice_of(cat["exp_avg"]),
                          "exp_avg_sq": b.slice_of(cat["exp_avg_sq"]), "params": b.masters(states)}
                b.shard.load_state_dict(sd)
                b.flat.remember()


def host_local_rank(group: Any = None) -> int:
    """This rank's index among the ranks of `group` on its host: the launcher's LOCAL_RANK (torchrun,
    MPI, Slurm) when set, else counted from every rank's hostname (collective)."""
    import socket

    from pynq_driver.alveo import local_rank

    env = local_rank()
    if env is not None:
        return env
    hosts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    me = dist.get_rank(group)
    return sum(1 for r in range(me) if hosts[r] == hosts[me])


# ---- launching ranks on one machine (tests and the demo) ---------------------------------------
def init_gloo(rank: int, world_size: int, port: int, timeout_s: float = 60.0) -> None:
    """Join a gloo group on 127.0.0.1:port; every collective gives up after `timeout_s`."""
    if sys.platform.startswith("linux"):  # all ranks on this host: talk over loopback, whatever the hostname says
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))


def run_ranks(fn: Callable[..., None], world_size: int, args: tuple[Any, ...] = (), timeout_s: float = 300.0
              ) -> None:
    """Spawn `world_size` processes running fn(rank, world_size, *args); kill them all after `timeout_s`.

    A rank that raises makes this raise (torch.multiprocessing's ProcessRaisedException) after the
    others are terminated, so a failing rank never leaves the rest waiting in a collective.
    """
    import time

    import torch.multiprocessing as mp

    ctx = mp.start_processes(fn, args=(world_size, *args), nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world_size} ranks did not finish within {timeout_s:g} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)


__all__ = ["ShardedNicOptimizer", "host_local_rank", "init_gloo", "run_ranks"]
