"""`ShardedNicOptimizer`: AdamW/Adam sharded over `torch.distributed` (ZeRO-2), each rank's shard on its card.

For models that stay whole on every rank (no wrapping, as with DDP). At scale, the recommended
path is torch's own engine: FSDP2 (`fully_shard`) with `NicAdamW`, which keeps each rank's
DTensor shard on its card (README). What this class adds over FSDP2 and ZeroRedundancyOptimizer:
parameters stay replicated (no all-gather in the forward pass, unlike FSDP2), gradients are
reduce-scattered (half the traffic of ZeroRedundancyOptimizer's all-reduce) and every rank's
card holds an equal 1/world of every parameter (ZeRO-1 partitions whole parameters, unevenly);
the reduce-scatter can start from the backward pass (`overlap=True`); gradient clipping and
loss-scale unscaling run on the card (its grad-scale register), on the reduced gradient.

Sharding is FSDP2's: every parameter is cut along dim 0 into `world` chunks (torch.chunk), rank r
keeps chunk r. Each param group and dtype is cut into buckets of up to `bucket_cap_mb` of gradient
(DDP's bucketing: parameters in reverse order, 25 MiB by default). Per bucket:

1. its gradients go into a bucket-sized input laid out as FSDP2 lays out its reduce-scatter input
   (rank r's chunks of every parameter, each padded to the chunk size, then rank r+1's), divided
   by the world size; the input exists only while its reduce-scatter runs (two in flight at most);
2. `reduce_scatter` leaves rank r with the summed gradient of its chunks only, in the bucket's
   shard (1/world of its gradients: the only buffer kept between steps);
3. at `step()` the rank's card updates them: results land straight in rank r's rows of each parameter;
4. `all_gather` of the shard brings every rank every other rank's rows.

Overlap. With overlap=True a bucket's reduce-scatter starts (async_op=True) from the backward pass,
from the post-accumulate-grad hook of its last gradient; step() waits for it. Gradient accumulation
over micro-batches works with and without `no_sync()`: with free_grads (the default) each backward's
reduction is added to the shard (what torch's `p.grad +=` does, after the reduction), without it
`p.grad` holds every micro-batch and its latest reduction replaces the shard; `zero_grad()` drops the
reductions of earlier backward passes as torch drops `p.grad`. With async_all_gather=True step()
returns with the all-gathers in flight (launched in the order the next forward needs them); the
forward pass of a module waits for the buckets of its own parameters (a global forward pre-hook
while any is in flight), and every method of this optimizer waits for all of them. Code that reads
parameters between step() and the forward of the module that holds them (`model.state_dict()`, an
evaluation without a forward, a parent module using a child's weight before the child runs) calls
`optimizer.wait_all_gather()` first, as FSDP2 wants its parameters used inside their modules.

Every collective of the process group takes its tensors on the group's device
(`collective_device`: cuda for nccl, cpu for gloo): the buckets are on the parameters' device, which
must be one the backend takes, and the clip norm and the inf/NaN vote are made there.

The optimizer state is torch's: `optimizer.state[p]` and `state_dict()` hold DTensors (Shard(0)
over the process group), exactly as FSDP2 + torch.optim.AdamW, so `torch.distributed.checkpoint`
saves them sharded and loads them at another world size, and `get_optimizer_state_dict(...,
options=StateDictOptions(full_state_dict=True))` gives torch.optim.AdamW's plain format.
`load_state_dict()` takes DTensor or plain (full) state.

A parameter has a gradient in a step if it has one on any rank (as DDP); parameters without one
are skipped, their moments and step count untouched. A step whose reduced gradient holds inf/NaN
on any rank is skipped on every rank.

Loss scaling and clipping, with overlap on or off:

    scaler.scale(loss).backward()
    optimizer.clip_grad_norm_(max_norm, grad_scaler=scaler)   # instead of torch.nn.utils.clip_grad_norm_
    scaler.step(optimizer); scaler.update()

`clip_grad_norm_` is the 2-norm of the reduced, unscaled gradient over all ranks (one all-reduce),
what single-process torch computes; its coefficient and 1/scale go to the card's grad-scale
register in the step. `scaler.step` passes the scaler to `step` (GradScaler's contract for
optimizers with `_step_supports_amp_scaling`; torch warns once that it will change it): the step
decides inf/NaN on the reduced gradient of all ranks and records that verdict in the scaler, so
every rank skips the same steps and keeps the same scale (a plain GradScaler is enough).
`scaler.unscale_(optimizer)` may still be called: with overlap=False the reduction runs after it;
with overlap=True the reduce-scatter read the gradients during backward, so the step unscales on
the card anyway. `torch.nn.utils.clip_grad_norm_(model.parameters())` clips each rank's local,
unreduced gradient, which is not the single-process result: use this optimizer's.
Each full gradient is dropped (`p.grad = None`) once it is reduced: ZeRO-2's memory saving. With
overlap=False that happens in `step()`, so code that reads `p.grad` between backward and step
works; with overlap=True it happens in the backward pass. `free_grads=False` keeps them.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import faulthandler
import functools
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from hls.errors import UserError
from pynq_driver.backends.discovery import local_rank
from pynq_driver.optim.base import (
    DEFAULT_BACKEND,
    DEFAULT_TARGET,
    KERNEL_DTYPES,
    CardOptimizer,
    hyper_for,
    torch_defaults,
)
from pynq_driver.optim.buckets import CardBucket, Slot

# torch 2.13 renamed the tensor collectives; both names work on gloo there, older torch has the old ones.
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
# Reduce-scatters in flight at once: their inputs are the only bucket-sized buffers, so this bounds
# the reduction's memory (a third bucket's launch first waits for the oldest).
_REDUCE_IN_FLIGHT = 2


def backend_device(backend: str) -> torch.device:
    """The device a process group of torch.distributed backend `backend` takes its tensors on: cpu
    for gloo (and mpi, ucc: any backend that takes host tensors), the backend's own device otherwise
    (cuda for nccl, xpu for xccl). A mixed backend ("cpu:gloo,cuda:nccl") uses its cpu half."""
    name = str(backend).lower()
    if ":" in name:  # "cpu:gloo,cuda:nccl": the device types it serves
        types = [part.split(":", 1)[0].strip() for part in name.split(",") if ":" in part]
    else:
        types = dist.Backend.backend_capability.get(name)
        if types is None:
            raise UserError(f"ShardedNicOptimizer: process-group backend {backend!r} is unknown to torch.distributed "
                            f"(known: {', '.join(sorted(dist.Backend.backend_capability))})")
    if "cpu" in types:
        return torch.device("cpu")
    kind = types[0]
    mod = getattr(torch, kind, None)
    if mod is not None and hasattr(mod, "is_available") and mod.is_available():
        return torch.device(kind, mod.current_device())  # this rank's device, as the process group uses it
    return torch.device(kind)


def collective_device(group: Any = None) -> torch.device:
    """The device of `group`'s collectives (`backend_device` of its backend): every small tensor this
    optimizer all-reduces (the clip norm, the inf/NaN vote) is made there, as NCCL requires."""
    return backend_device(dist.get_backend(group))


class _Rows:
    """Parameter `p` cut along dim 0 into `world` chunks (torch.chunk, as FSDP2): rank r's rows."""

    def __init__(self, p: torch.Tensor, rank: int, world: int) -> None:
        if p.dim() == 0:
            raise UserError("ShardedNicOptimizer: a 0-dim parameter cannot be sharded along dim 0; "
                            "reshape it to (1,)")
        rows = self.rows = p.shape[0]
        self.cols = p.numel() // rows if rows else 0
        self.chunk_rows = -(-rows // world)
        self.padded = self.chunk_rows * self.cols  # elements of every rank's chunk in the bucket
        self.rank_rows = [max(0, min(rows, (r + 1) * self.chunk_rows) - r * self.chunk_rows) for r in range(world)]
        self.start = min(rows, rank * self.chunk_rows) * self.cols  # this rank's first element of p
        self.numel = self.rank_rows[rank] * self.cols
        self.local_shape = (self.rank_rows[rank], *p.shape[1:])

    def of_rank(self, r: int) -> tuple[int, int]:
        lo = min(self.rows, r * self.chunk_rows) * self.cols
        return lo, lo + self.rank_rows[r] * self.cols


class _CommBucket:
    """Parameters whose gradients are reduce-scattered together (up to `bucket_cap_mb` of gradient).

    Its reduce-scatter input (every rank's chunks of every gradient, as FSDP2 lays it out, plus one
    presence flag per parameter at the end of each rank's segment) is allocated for the collective
    only; what persists is `shard`, this rank's segment: the reduced gradient of its rows until the
    step, then the all-gather's input. A flag is 1/world where a rank has the gradient, so after the
    reduction it is nonzero where any rank had one (DDP's rule), with no collective of its own."""

    def __init__(self, params: list[torch.Tensor], rank: int, world: int) -> None:
        self.params = params
        self.rows = [_Rows(p, rank, world) for p in params]
        self.seg_offsets = [0]
        for r in self.rows:
            self.seg_offsets.append(self.seg_offsets[-1] + r.padded)
        self.flags_at = self.seg_offsets[-1]
        self.seg_len = self.flags_at + len(params)
        self.rank, self.world = rank, world
        self.dtype, self.device = params[0].dtype, params[0].device
        self.shard = torch.zeros(self.seg_len, dtype=self.dtype, device=self.device)
        self.filled = False  # shard holds this step's reduced gradient (of one or more backward passes)
        self.present: list[bool] | None = None  # which parameters have a gradient on any rank (once reduced)
        self.ready: set[int] = set()  # gradients accumulated in this backward, since the last reduction
        self.pending = False  # a backward under no_sync() (or a partial one) left gradients unreduced
        self.op: _Op | None = None  # the collective in flight on this bucket
        self.reduced_seq = 0  # when it was last reduced: the all-gathers go in the reverse order

    def fill(self, out: torch.Tensor, divide: bool) -> None:
        """Every rank's chunks of every gradient into `out` (zeros where there is none), and the flags.

        One pass: each chunk is copied and only the padding after it zeroed; dividing by a world
        of one is skipped (x / 1 is x, bit for bit)."""
        seg = out.view(self.world, self.seg_len)
        for i, (p, r) in enumerate(zip(self.params, self.rows, strict=True)):
            g = p.grad
            if g is not None and g.is_sparse:
                raise UserError("ShardedNicOptimizer does not support sparse gradients")
            seg[:, self.flags_at + i] = 0.0 if g is None else 1.0
            flat = None if g is None else g.detach().reshape(-1)
            for k in range(self.world):
                lo, hi = r.of_rank(k)
                at = k * self.seg_len + self.seg_offsets[i]
                used = 0 if flat is None else hi - lo
                if used:
                    out[at:at + used].copy_(flat[lo:hi])
                if used < r.padded:
                    out[at + used:at + r.padded].zero_()
        if divide and self.world > 1:
            out.div_(self.world)

    def gather_input(self) -> torch.Tensor:
        """This rank's updated rows, laid out as its segment (the shard's gradient is used up: it
        carries them now)."""
        send = self.shard
        send.zero_()
        for p, r, off in zip(self.params, self.rows, self.seg_offsets, strict=False):
            send[off:off + r.numel].copy_(p.detach().view(-1)[r.start:r.start + r.numel])
        return send

    def scatter_gathered(self, out: torch.Tensor) -> None:
        """Every other rank's rows from the all-gather's output into the parameters."""
        for i, (p, r) in enumerate(zip(self.params, self.rows, strict=True)):
            flat = p.detach().view(-1)
            for k in range(self.world):
                if k == self.rank:
                    continue
                lo, hi = r.of_rank(k)
                at = k * self.seg_len + self.seg_offsets[i]
                flat[lo:hi].copy_(out[at:at + hi - lo])


class _Op:
    """A collective in flight: a bucket's reduce-scatter (its input freed once done; its output
    added to the shard when it is not the shard itself) or all-gather (scattered into the parameters)."""

    __slots__ = ("kind", "cb", "work", "inp", "out")

    def __init__(self, kind: str, cb: _CommBucket, work: Any, inp: torch.Tensor | None, out: torch.Tensor) -> None:
        self.kind, self.cb, self.work, self.inp, self.out = kind, cb, work, inp, out


class ShardedBucket:
    """One param group and dtype: its card slots, and its parameters cut into reduce-scatter buckets."""

    def __init__(self, params: list[torch.Tensor], rank: int, world: int, cap_bytes: int) -> None:
        self.params = params
        self.rank, self.world = rank, world
        self.dtype = params[0].dtype
        # DDP's bucketing: parameters in reverse order (gradients become ready roughly from the last
        # layer back), a new bucket once the gradient bytes would pass the cap; each bucket keeps the
        # group's order inside.
        groups: list[list[int]] = []
        size = 0
        for i in reversed(range(len(params))):
            nbytes = params[i].numel() * params[i].element_size()
            if not groups or (size + nbytes > cap_bytes and groups[-1]):
                groups.append([])
                size = 0
            groups[-1].append(i)
            size += nbytes
        self.comm = [_CommBucket([params[i] for i in sorted(g)], rank, world) for g in groups]
        self.where: dict[int, tuple[_CommBucket, int]] = {}
        for cb in self.comm:
            for j, p in enumerate(cb.params):
                self.where[id(p)] = (cb, j)
        self.card: CardBucket | None = None
        self.maximize = False

    def slot(self, i: int) -> Slot:
        p = self.params[i]
        cb, j = self.where[id(p)]
        r, off = cb.rows[j], cb.seg_offsets[j]

        def data() -> torch.Tensor:
            return p.detach().view(-1)[r.start:r.start + r.numel]

        def grad() -> torch.Tensor | None:
            if not cb.filled or cb.present is None or not cb.present[j]:
                return None
            return cb.shard[off:off + r.numel]

        return Slot(p, r.numel, data, grad)


class ShardedNicOptimizer(CardOptimizer):
    """AdamW (or Adam) sharded over the ranks of a process group; each rank's shard on its card."""

    _step_supports_amp_scaling = True  # GradScaler hands over the scale; the card unscales
    _who = "ShardedNicOptimizer"

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float | None = None, *, optimizer: str = "adamw",
                 process_group: Any = None, average_gradients: bool = True, backend: str = DEFAULT_BACKEND,
                 target: str = DEFAULT_TARGET, lanes: int | None = None, skip_nonfinite: bool = False,
                 chunk_elems: int | None = None, maximize: bool = False, overlap: bool = False,
                 free_grads: bool = True, bucket_cap_mb: float = 25.0, async_all_gather: bool = False,
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
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.world = dist.get_world_size(self.process_group)
        self.rank = dist.get_rank(self.process_group)
        self.average = bool(average_gradients)
        cap = bucket_cap_mb if isinstance(bucket_cap_mb, (int, float)) and not isinstance(bucket_cap_mb, bool) \
            else None
        if cap is None or not cap > 0 or not math.isfinite(cap):
            raise UserError(f"ShardedNicOptimizer: bucket_cap_mb={bucket_cap_mb!r}; give a positive number of MiB "
                            "(DDP's default is 25)")
        self._cap_bytes = max(1, int(cap * (1 << 20)))
        self.collective_device = collective_device(self.process_group)
        if backend == "alveo" and "device_index" not in device_options:
            # Each rank drives its own card: its rank on this host picks it (override with device_index=).
            device_options = {**device_options, "device_index": host_local_rank(self.process_group)}
        self.overlap = bool(overlap)
        self.free_grads = bool(free_grads)
        self.async_all_gather = bool(async_all_gather)
        self.overlapped_reductions = 0  # buckets reduced from the backward pass (a check that overlap happens)
        self.gathers_waited_by_forward = 0  # all-gathers step() left to the forward pre-hook to complete
        self._sync = True
        self._inflight: collections.deque[_Op] = collections.deque()  # launch order
        self._gathering: dict[int, _CommBucket] = {}  # id(param) -> its bucket, while its all-gather is in flight
        self._forward_hook: Any = None
        self._reductions = 0
        self._hooks: list[Any] = []
        self._sharded: dict[int, ShardedBucket] = {}  # id(CardBucket) -> its ShardedBucket
        self._mesh: Any = None
        self._clip: tuple[float, float] | None = None  # (max_norm, total norm of the reduced, unscaled gradient)
        self._reduced_stage: Any = None  # the GradScaler's stage when this step's reduction ran (if known)
        super().__init__(params, defaults)
        self._init_card(backend, target, lanes, skip_nonfinite, chunk_elems, device_options)

    # ---- layout ----------------------------------------------------------------------------------
    def _make_buckets(self, group: dict[str, Any]) -> list[CardBucket]:
        by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for p in group["params"]:
            if p.dtype not in KERNEL_DTYPES:
                raise UserError(f"ShardedNicOptimizer: parameters of dtype {p.dtype} are not supported; use one of "
                                f"{', '.join(str(d) for d in KERNEL_DTYPES)}")
            types = dist.Backend.backend_capability.get(str(dist.get_backend(self.process_group)).lower())
            if types is not None and p.device.type not in types and self.world > 1:
                raise UserError(f"ShardedNicOptimizer: a parameter on {p.device.type} cannot be reduce-scattered by "
                                f"the {dist.get_backend(self.process_group)} process group (it takes "
                                f"{', '.join(types)} tensors); move the model or use another backend")
            by_dtype.setdefault((p.dtype, p.device), []).append(p)
            self._numels[id(p)] = p.numel()
        out = []
        for (dtype, _), params in by_dtype.items():
            sb = ShardedBucket(params, self.rank, self.world, self._cap_bytes)
            slots = [sb.slot(i) for i in range(len(params))]
            card = CardBucket(slots, self.pool.get(*KERNEL_DTYPES[dtype]), dtype, self.chunk_elems)
            sb.card = card
            self._sharded[id(card)] = sb
            for p, s in zip(params, slots, strict=True):
                self._slots[id(p)] = (card, s)
            if self.overlap:
                for p in params:
                    cb, j = sb.where[id(p)]
                    self._hooks.append(p.register_post_accumulate_grad_hook(functools.partial(self._grad_ready, cb, j)))
            out.append(card)
        return out

    def _sharded_buckets(self) -> list[tuple[dict[str, Any], ShardedBucket]]:
        return [(g, self._sharded[id(b)]) for g, bs in zip(self.param_groups, self._buckets, strict=True) for b in bs]

    def mesh(self) -> Any:
        """The 1-D device mesh of the process group (state DTensors live on it)."""
        if self._mesh is None:
            from torch.distributed.device_mesh import DeviceMesh

            dev = next((sb.params[0].device for _, sb in self._sharded_buckets()), torch.device("cpu"))
            self._mesh = DeviceMesh.from_group(self.process_group, dev.type)
        return self._mesh

    def _wrap_state(self, p: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Shard

        # The rows stay in host memory (as NicAdamW's state does): a checkpoint never brings the
        # offloaded state back to the GPU.
        rows = _Rows(p, self.rank, self.world)
        return DTensor.from_local(local.view(rows.local_shape), self.mesh(), [Shard(0)],
                                  run_check=False, shape=p.shape, stride=p.stride())

    def _local_value(self, p: torch.Tensor, value: Any, key: str) -> torch.Tensor:
        if isinstance(value, torch.Tensor) and getattr(value, "_local_tensor", None) is None \
                and value.numel() == p.numel():  # full (plain) state: this rank's rows of it
            r = _Rows(p, self.rank, self.world)
            return value.detach().reshape(-1)[r.start:r.start + r.numel]
        return super()._local_value(p, value, key)

    # ---- reduction -------------------------------------------------------------------------------
    def _grad_ready(self, cb: _CommBucket, j: int, _param: torch.Tensor) -> None:
        """Post-accumulate-grad hook (overlap=True): a bucket whose every gradient of this backward is
        in starts its reduce-scatter, asynchronously."""
        if not self._sync:
            cb.pending = True  # no_sync(): reduced by a later backward or by step()
            return
        cb.ready.add(j)
        if len(cb.ready) == len(cb.params):
            self._reduce(cb, async_op=True)
            self.overlapped_reductions += 1

    def _reduce(self, cb: _CommBucket, *, async_op: bool) -> None:
        """Reduce-scatter the bucket's gradients into its shard. With free_grads a backward's gradients
        are dropped once reduced, so the next backward's are new: their reduction adds to the shard
        (gradient accumulation, as torch's `p.grad +=`). Without, `p.grad` holds every backward
        since zero_grad: its reduction replaces the shard."""
        self._finish(cb)  # an earlier backward's reduction, or last step's all-gather (its input is the shard)
        accumulate = cb.filled and self.free_grads
        self._reductions += 1
        cb.reduced_seq = self._reductions
        cb.ready.clear()
        cb.pending = False
        n = self.world * cb.seg_len
        if self.world == 1 and not accumulate:
            inp = cb.shard  # the bucket is this rank's reduced gradient already
        else:
            while sum(op.kind == "reduce" for op in self._inflight) >= _REDUCE_IN_FLIGHT:
                self._complete(next(op for op in self._inflight if op.kind == "reduce"))
            inp = torch.empty(n, dtype=cb.dtype, device=cb.device)
        with torch.no_grad():
            cb.fill(inp, self.average)
        if self.free_grads:
            for p in cb.params:
                p.grad = None
        cb.present = None
        if self.world == 1:
            if accumulate:
                cb.shard.add_(inp)
            cb.filled = True
            return
        out = torch.empty(cb.seg_len, dtype=cb.dtype, device=cb.device) if accumulate else cb.shard
        work = _reduce_scatter(out, inp, group=self.process_group, async_op=async_op)
        op = _Op("reduce", cb, work, inp, out)
        if async_op:
            cb.op = op
            self._inflight.append(op)
        else:
            self._complete(op)

    def _complete(self, op: _Op) -> None:
        """Wait for a collective and use its result (in whatever order: each has its own buffers)."""
        if op.work is not None:
            op.work.wait()
        with contextlib.suppress(ValueError):
            self._inflight.remove(op)
        cb = op.cb
        if cb.op is op:
            cb.op = None
        if op.kind == "reduce":
            if op.out is not cb.shard:
                cb.shard.add_(op.out)
            cb.filled = True
        else:
            with torch.no_grad():
                cb.scatter_gathered(op.out)
            for p in cb.params:
                self._gathering.pop(id(p), None)
            if not self._gathering and self._forward_hook is not None:
                self._forward_hook.remove()
                self._forward_hook = None
        op.inp = op.out = None  # type: ignore[assignment]  # the collective's buffers go now

    def _finish(self, cb: _CommBucket) -> None:
        if cb.op is not None:
            self._complete(cb.op)

    def wait_all_gather(self) -> None:
        """Complete every all-gather still in flight (async_all_gather=True): afterwards every
        parameter holds every rank's updated rows. Needed before reading parameters between step()
        and the forward pass of the module that holds them (a saved `model.state_dict()`, an
        evaluation by hand); a forward, backward and every method of this optimizer do it themselves."""
        for op in [op for op in self._inflight if op.kind == "gather"]:
            self._complete(op)

    def _wait_all(self) -> None:
        while self._inflight:
            self._complete(self._inflight[0])

    def _before_forward(self, module: torch.nn.Module, _args: Any) -> None:
        """Global forward pre-hook while all-gathers are in flight: a module's forward waits for the
        buckets of its own parameters (the rest keep overlapping the forward)."""
        if not self._gathering:
            return
        for p in module.parameters(recurse=False):
            cb = self._gathering.get(id(p))
            if cb is not None:
                self.gathers_waited_by_forward += 1
                self._finish(cb)

    def _gather(self, buckets: list[_CommBucket]) -> None:
        """Every rank's updated rows into every rank's parameters: all-gather of each bucket's shard,
        asynchronous with async_all_gather (waited as `wait_all_gather` says), else done here."""
        if self.world == 1:
            return  # a world of one has them all already
        for cb in buckets:
            send = cb.gather_input()
            out = torch.empty(self.world * cb.seg_len, dtype=cb.dtype, device=cb.device)
            work = _all_gather(out, send, group=self.process_group, async_op=self.async_all_gather)
            op = _Op("gather", cb, work, None, out)
            if not self.async_all_gather:
                self._complete(op)
                continue
            cb.op = op
            self._inflight.append(op)
            for p in cb.params:
                self._gathering[id(p)] = cb
        if self._gathering and self._forward_hook is None:
            self._forward_hook = torch.nn.modules.module.register_module_forward_pre_hook(self._before_forward)

    def _comm_buckets(self) -> Iterator[tuple[dict[str, Any], ShardedBucket, _CommBucket]]:
        for group, sb in self._sharded_buckets():
            for cb in sb.comm:
                yield group, sb, cb

    def _reduce_all(self) -> list[tuple[dict[str, Any], ShardedBucket]]:
        """Make sure every bucket's reduced gradient is here: reductions in flight waited for, and
        buckets with gradients no reduction has taken (overlap=False, a backward under no_sync() or
        one that left a bucket incomplete) reduced now."""
        self.wait_all_gather()
        for group, sb, cb in self._comm_buckets():
            sb.maximize = bool(group.get("maximize", False))
            self._finish(cb)
            if not cb.filled or cb.pending or cb.ready:
                self._reduce(cb, async_op=False)
            if cb.present is None:
                flags = cb.shard[cb.flags_at:].tolist()
                cb.present = [f != 0 for f in flags]
        return self._sharded_buckets()

    def _discard_reductions(self) -> None:
        """zero_grad(): reduced gradients of backward passes before it are dropped, as torch drops
        `p.grad` (gradient accumulation restarts)."""
        for op in [op for op in self._inflight if op.kind == "reduce"]:
            self._complete(op)  # the last step's all-gathers stay in flight: the next forward waits for them
        for _, _, cb in self._comm_buckets():
            cb.filled, cb.present, cb.pending = False, None, False
            cb.ready.clear()

    def zero_grad(self, set_to_none: bool = True) -> None:
        with self._guard():
            self._discard_reductions()
            super().zero_grad(set_to_none)


    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients over several backward passes without reducing them (as DDP.no_sync)."""
        before, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = before

    # ---- clipping on the card --------------------------------------------------------------------
    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0, grad_scaler: Any = None) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ on the reduced gradient: the global 2-norm over all ranks'
        shards (one all-reduce), unscaled by `grad_scaler`'s scale when given; the clip factor is
        applied on the card in the next step (grad-scale register). Returns the total norm."""
        self._check_open()
        if float(norm_type) != 2.0:
            raise UserError("ShardedNicOptimizer.clip_grad_norm_: only the 2-norm is implemented")
        self.wait_all_gather()
        if grad_scaler is not None and grad_scaler.is_enabled() and not any(
                cb.filled or cb.op is not None for _, _, cb in self._comm_buckets()):
            self._reduced_stage = grad_scaler._per_optimizer_states[id(self)]["stage"]
        buckets = self._reduce_all()
        dev = self.collective_device  # NCCL all-reduces device tensors only
        sq = torch.zeros((), dtype=torch.float64, device=dev)
        for _, sb in buckets:
            for s in sb.card.slots:
                g = s.grad()
                if g is not None and s.numel:
                    sq += g.double().pow(2).sum().to(dev)
        dist.all_reduce(sq, group=self.process_group)
        total = math.sqrt(sq.item())
        if grad_scaler is not None and grad_scaler.is_enabled():
            from torch.amp.grad_scaler import OptState

            stage = grad_scaler._per_optimizer_states[id(self)]["stage"]
            if self.overlap or (self._reduced_stage or stage) is OptState.READY:  # still scaled
                total /= float(grad_scaler.get_scale())
        self._clip = (float(max_norm), total)
        return torch.tensor(total, dtype=torch.float32)

    def _grad_scale(self, scaler: Any) -> float:
        """The factor the card multiplies every gradient by: 1/loss scale (when the reduced gradient is
        still scaled), times the clip coefficient."""
        gs = 1.0
        if scaler is not None and scaler.is_enabled():
            from torch.amp.grad_scaler import OptState

            stage = scaler._per_optimizer_states[id(self)]["stage"]
            # Reduced before any unscale_: from the backward pass (overlap), or while the scaler was READY.
            scaled = self.overlap or self._reduced_stage is OptState.READY or (
                self._reduced_stage is None and stage is OptState.READY)
            if scaled:
                gs = 1.0 / float(scaler.get_scale())
        elif hasattr(self, "found_inf"):
            # GradScaler's announced contract (no `grad_scaler` argument): it sets `grad_scale` (None
            # once the user ran unscale_) and `found_inf` on the optimizer.
            scale = getattr(self, "grad_scale", None)
            if scale is not None:
                gs = 1.0 / float(scale)
            elif self.overlap:
                raise UserError("ShardedNicOptimizer(overlap=True): GradScaler unscaled gradients the reduce-"
                                "scatter had already read, and no longer says by how much; drop scaler.unscale_"
                                "(optimizer) and pass grad_scaler= to optimizer.clip_grad_norm_")
        if self._clip is not None:
            max_norm, total = self._clip
            gs *= min(1.0, max_norm / (total + 1e-6))  # torch's clip coefficient
        return gs

    # ---- the step --------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, grad_scaler: Any = None) -> Any:
        """One step. Under `GradScaler.step(opt)` the scaler passes itself (`grad_scaler`): the card
        unscales, every rank skips a step whose reduced gradient is not finite on any rank, and the
        scaler's inf record is that global verdict, so every rank's scale stays the same."""
        with self._guard():  # a second thread's step waits for this one
            return self._sharded_step(closure, grad_scaler)

    def _sharded_step(self, closure: Callable[[], Any] | None, grad_scaler: Any) -> Any:
        self._check_open()
        self.wait_all_gather()  # the last step's, before a closure's forward reads the parameters
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_sizes()  # a resized parameter or gradient, refused before any collective
        try:
            buckets = self._reduce_all()
            gs = self._grad_scale(grad_scaler)
            plans = []
            for group, sb in buckets:
                runs = sb.card.plan(lambda step, g=group: _hyper(g, step, gs), self.kind) if sb.card.shard else []
                plans.append((sb, runs))
            local_inf = float(getattr(self, "found_inf", 0.0) or 0.0)  # the announced GradScaler contract
            check = self.skip_nonfinite or grad_scaler is not None or hasattr(self, "found_inf")
            # The scan and the comparisons with the masters (where the card's memory is host
            # memory) on two threads, before anything reaches the card (NicAdamW's `_prefix`).
            finite, compared = self._prefix([(sb.card, runs) for sb, runs in plans], scan=check, wait=True)
            if check:
                bad = torch.tensor([float(local_inf > 0 or not finite)], device=self.collective_device)
                if self.world > 1:
                    dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=self.process_group)
                if grad_scaler is not None and grad_scaler.is_enabled():
                    found = bad.to(grad_scaler._scale.device if grad_scaler._scale is not None else "cpu")
                    grad_scaler._per_optimizer_states[id(self)]["found_inf_per_device"] = {found.device: found}
                if bad.item():
                    # a GradScaler skip is the scaler's, not ours
                    self.skipped_steps += int(grad_scaler is None and not local_inf)
                    return loss
            for sb, runs in plans:
                sb.card.maximize = sb.maximize
                sb.card.run(runs, detect=self.detect_changes)
            # Buckets where no rank has a gradient changed nothing: every rank skips their all-gather.
            # The last reduced first: the backward pass reduced the first layers last, and the next
            # forward needs them first (the same order on every rank, as the reductions').
            changed = [cb for _, _, cb in self._comm_buckets() if any(cb.present or ())]
            self._gather(sorted(changed, key=lambda cb: -cb.reduced_seq))
        finally:
            self._clip = None
            self._reduced_stage = None
            for _, _, cb in self._comm_buckets():
                cb.filled, cb.present = False, None
        return loss

    # ---- what lives where ------------------------------------------------------------------------
    def placement(self) -> list[dict[str, Any]]:
        """This rank's shards: its rows of every parameter, backend, bytes on the card."""
        rows = []
        for gi, (_, sb) in enumerate(self._sharded_buckets()):
            card = sb.card
            seg = sum(cb.seg_len for cb in sb.comm)  # this rank's segments of every reduce-scatter bucket
            rows.append({
                "rank": self.rank, "world_size": self.world, "group": gi,
                "dtype": str(sb.dtype).replace("torch.", ""), "bucket_params": sum(p.numel() for p in sb.params),
                "padded": sb.world * seg, "shard_lo": sb.rank * seg, "shard_hi": (sb.rank + 1) * seg,
                "reduce_buckets": len(sb.comm), "shard_params": sum(s.numel for s in card.slots),
                "backend": card.shard.backend if card.shard else None,
                "kernel": card.shard.spec.name if card.shard else None,
                "state_bytes": 12 * (card.shard.n if card.shard else 0),
            })
        return rows

    def bucket_bytes(self) -> int:
        """Memory of the gradient shards this optimizer keeps between steps: each reduce-scatter
        bucket's segment of this rank (1/world of its gradients, padding and one presence flag per
        parameter included). The buckets' full-size inputs live only while their reduce-scatter
        runs (two at most: `peak_bucket_bytes`)."""
        return sum(cb.shard.nbytes for _, _, cb in self._comm_buckets())

    def peak_bucket_bytes(self) -> int:
        """Memory of the reduction at its peak: the shards (`bucket_bytes`), the two largest
        reduce-scatter inputs in flight and one accumulation output. With async_all_gather the
        all-gathers' outputs (world x each shard) also live from the end of step() until the
        forward pass reaches their parameters."""
        full = sorted((self.world * cb.shard.nbytes for _, _, cb in self._comm_buckets()), reverse=True)
        if not full:
            return 0
        if self.world == 1:  # an accumulating backward's input only (otherwise the shard is the input)
            return self.bucket_bytes() + full[0]
        return self.bucket_bytes() + sum(full[:_REDUCE_IN_FLIGHT]) + full[0] // self.world

    def host_bytes(self) -> int:
        """Memory this optimizer holds beside the model (host memory when the parameters are on the
        host): the two host chunks, the comparison blocks, and this rank's gradient shards."""
        return super().host_bytes() + self.bucket_bytes()

    def full_state_dict(self) -> dict[str, Any]:
        """Collective: torch.optim.AdamW's plain state_dict, the full state gathered onto every rank
        (for interchange with a single-process optimizer; checkpoints should stay sharded, DCP)."""
        sd = self.state_dict()
        for st in sd["state"].values():
            for k, v in st.items():
                if getattr(v, "_local_tensor", None) is not None:
                    st[k] = v.full_tensor()
        return sd

    def state_dict(self) -> dict[str, Any]:
        self.wait_all_gather()
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_all_gather()
        super().load_state_dict(state_dict)

    def close(self) -> None:
        if getattr(self, "_inflight", None):
            self._wait_all()  # the collectives every other rank runs too; the parameters get their rows
        for h in getattr(self, "_hooks", []):
            h.remove()
        self._hooks = []
        super().close()


def _hyper(group: dict[str, Any], step: int, grad_scale: float) -> Any:
    return replace(hyper_for(group, step), grad_scale=grad_scale)


def host_local_rank(group: Any = None) -> int:
    """This rank's index among the ranks of `group` on its host: the launcher's LOCAL_RANK (torchrun,
    MPI, Slurm) when set, else counted from every rank's hostname (collective)."""
    import socket

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


def _rank_main(rank: int, fn: Callable[..., None], *args: Any) -> None:
    """One spawned rank: fn, then the end of the process without interpreter finalization.

    A gloo group that torch still references after destroy_process_group (DTensor's redistribute
    planners cache the DeviceMesh, which holds the group: every DTensor program) keeps its worker
    threads. A worker that takes the GIL while the interpreter finalizes (to free its last finished
    work) is ended by Python with pthread_exit inside a C++ destructor: std::terminate, "terminate
    called without an active exception" (the message of a rank that aborted once in CI, under load,
    after its work was done). fn's results are written and its collectives complete when it
    returns; only the finalization is skipped. An exception still goes to torch's handler (its
    traceback to the parent). A native crash (a signal: SIGABRT, SIGSEGV) prints every thread's Python
    stack to stderr first (faulthandler), which the parent's test log keeps."""
    faulthandler.enable(all_threads=True)
    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn: Callable[..., None], world_size: int, args: tuple[Any, ...] = (), timeout_s: float = 300.0
              ) -> None:
    """Spawn `world_size` processes running fn(rank, world_size, *args); kill them all after `timeout_s`.

    A rank that raises makes this raise (torch.multiprocessing's ProcessRaisedException) after the
    others are terminated, so a failing rank never leaves the rest waiting in a collective. A rank
    whose fn returns exits at once, without interpreter finalization (see `_rank_main`).
    """
    import time

    import torch.multiprocessing as mp

    ctx = mp.start_processes(_rank_main, args=(fn, world_size, *args), nprocs=world_size, join=False,
                             start_method="spawn")
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
