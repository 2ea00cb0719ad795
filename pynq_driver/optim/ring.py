"""`RingNicAdamW` / `RingNicAdam`: the cards do the gradient synchronisation and the update.

Each rank's card joins a ring with its peers' cards (design.md section 8): the cards
reduce-scatter the ranks' gradients, each owner card runs Adam on its shard of the flat parameter
vector, and the cards all-gather the updated parameters, so every rank gets the full updated
parameters back from its card. No DDP wrapper, no NCCL/gloo collective in the optimizer step.

The one-line change in a training script run under torchrun (`dist.init_process_group("gloo")`
as usual, the model *not* wrapped in DDP)::

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)          # before (model wrapped in DDP)
    optimizer = RingNicAdamW(model.parameters(), lr=3e-4)               # after  (model as it is)

How it maps onto the ring:

- rank and world size come from the default process group (`dist.get_rank()`,
  `dist.get_world_size()`); a ring has 2 .. 255 ranks. The cards learn each other's UDP addresses
  through a torch.distributed store: `store=` if given, else a `TCPStore` client to torchrun's
  rendezvous store (`MASTER_ADDR`, `MASTER_PORT`: the store `init_process_group("env://")`
  itself connects to). torch has no public accessor for the default group's store (only the
  private `distributed_c10d._get_default_store()`), so this is the public way; a script that
  initialised with `init_method="tcp://host:port"` passes `store=dist.TCPStore(host, port)`.
- Building the optimizer is collective: every rank builds it at the same point. Unless
  `broadcast_params=False`, rank 0's parameters are broadcast over the process group first (once,
  as DDP does when it wraps), so every rank starts from the same model.
- The trainable parameters (requires_grad=True when the optimizer is built; others are left out
  and never change, as torch never updates them) must be fp32 CPU tensors. They are laid end to
  end, in param-group order, into one flat vector of L elements; rank r's card owns its chunk of
  it (`owned`) and keeps the fp32 masters and both moments of that chunk for the whole run.
- `step()` copies every gradient into one persistent flat buffer of the wire dtype (`wire_dtype`
  "fp32", or "bf16": the gradients are rounded to bf16 on the host, as a bf16 compression hook
  would), gives it to the card and copies the gathered parameters (one persistent flat fp32
  buffer) back into every parameter: the same bits on every rank by construction. Nothing else
  is allocated per step.
- Gradients are averaged over the ranks as DDP averages them: the card divides the summed
  gradient by N (`hyper.grad_scale` = 1 / N on the owner's kernel).
- A parameter whose `.grad` is None contributes a zero gradient from this rank (DDP with
  find_unused_parameters does the same). Unlike torch, which skips such a parameter, a step in
  which *no* rank has a gradient for it still updates it: AdamW's weight decay and the decay of
  its moments apply. Freeze parameters before building the optimizer to keep them out.
- One kernel call covers the whole flat vector, so every param group must have the same lr,
  betas, eps and weight_decay at each step (a clear error otherwise). lr schedulers work: lr is
  read from the groups at every step; `add_param_group` after building is refused. One step
  count for the whole vector (torch keeps one per parameter; they are equal unless parameters
  skip steps).
- `max_norm=`: the two-phase step (design.md 8.1): the cards exchange the chunks' sums of
  squares, and each owner scales the averaged gradient by min(max_norm / (norm + 1e-6), 1), as
  `clip_grad_norm_` on the averaged gradients of a DDP model; a non-finite gradient on any rank
  skips the step on every card (`skipped_steps`, `last_step_skipped`). `skip_nonfinite=True`
  gives that skip without clipping. Without either a non-finite gradient is applied as torch
  applies it. `torch.amp.GradScaler` does not fit: it checks each rank's own gradients, so the
  ranks could disagree about calling `step()` (the others would then raise PeerTimeout).
- Parameter edits between steps (`model.load_state_dict`, `p.data` writes) are picked up: before
  the step each rank compares its parameters bit for bit with the parameters the cards returned
  last, and where its owned chunk differs writes the new values into its card's masters
  (moments kept). `detect_changes=False` skips the comparison. Every rank must make the same
  edit (the card of the owner of a chunk decides).
- `state_dict()` is torch's shape (`state`, `param_groups`) for this rank's shard: `state` has
  one entry, 0, the owned chunk as a flat fp32 "parameter" (`step`, `exp_avg`, `exp_avg_sq`, and
  `master_param`, the card's fp32 masters of the chunk, S elements each, zero padded), plus
  `ring`: world, rank, length L, the chunk [lo, lo + S), wire dtype and optimizer. Each rank saves
  its own. `load_state_dict()` restores it at the same world size, rank and parameter layout (a
  clear error otherwise) and the group hyperparameters, as torch does; a resume then continues
  bit for bit (load the model's parameters too: they are the same on every rank).
- A rank that dies or stops answering: the others raise `PeerTimeout` (one line naming the dead
  peer) after `timeout_s` of silence; a rank that never builds the optimizer: `RendezvousTimeout`.
  After a failed step the optimizer is unusable (build a new one and load a checkpoint).

Semantics differ from torch.optim.AdamW on a DDP model by rounding only: the ring sums the
gradients in its own order and the kernel computes `sqrt(v) * f32(1/sqrt(bc2)) + eps`
(see `NicAdamW`). The software cards `backend="golden"` and `"csim"` join a ring today.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hls.errors import UserError
from hls.golden import Hyper
from hls.net import ring as ring_ref
from hls.spec import KernelSpec
from pynq_driver.backends import BACKENDS
from pynq_driver.errors import DeviceClosed
from pynq_driver.net.node import RingNode
from pynq_driver.optim.base import backend_options, torch_defaults

_WIRE_TORCH = {"fp32": torch.float32, "bf16": torch.bfloat16}
_HYPER_KEYS = ("lr", "betas", "eps", "weight_decay")


def default_store(timeout_s: float) -> Any:
    """A client of torchrun's rendezvous store (MASTER_ADDR:MASTER_PORT), or an error saying what to pass."""
    import datetime

    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise UserError("RingNicAdamW: no store= and no MASTER_ADDR / MASTER_PORT in the environment (torchrun "
                        "sets them); pass store=dist.TCPStore(host, port) with the address given to init_method")
    return dist.TCPStore(addr, int(port), is_master=False, timeout=datetime.timedelta(seconds=timeout_s))


def _plain(value: Any) -> Any:
    """A group's hyperparameter as plain floats (lr may be a tensor)."""
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


class _RingNicAdamBase(torch.optim.Optimizer):
    _adamw = True

    def __init__(self, params: Iterable[Any], lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, *, backend: str = "csim", wire_dtype: str = "fp32", store: Any = None,
                 payload_bytes: int = 1408, timeout_s: float = 60.0, max_norm: float | None = None,
                 skip_nonfinite: bool = False, broadcast_params: bool = True, detect_changes: bool = True,
                 comm: int = 0, **node_options: Any) -> None:
        who = type(self).__name__
        _check_node_options(backend, node_options, who)
        if wire_dtype not in _WIRE_TORCH:
            raise UserError(f"{who}: wire_dtype {wire_dtype!r}; choose one of {', '.join(_WIRE_TORCH)}")
        if max_norm is not None and not (isinstance(max_norm, (int, float)) and max_norm > 0):
            raise UserError(f"{who}: max_norm {max_norm!r} must be a positive number")
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise UserError(f"{who}: timeout_s {timeout_s!r} must be a positive number of seconds")
        defaults = torch_defaults(lr, betas, eps, weight_decay, adamw=self._adamw)
        super().__init__(params, defaults)
        if not dist.is_available() or not dist.is_initialized():
            raise UserError(f"{who}: call dist.init_process_group(...) first (under torchrun: "
                            "dist.init_process_group('gloo')); the ring's rank and world size are the group's")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if self.world < 2:
            raise UserError(f"{who}: a ring needs 2 .. 255 ranks, the process group has {self.world}; "
                            "on one rank use NicAdamW")
        self._who = who
        self.backend, self.wire_dtype = backend, wire_dtype
        self.max_norm = None if max_norm is None else float(max_norm)
        self.two_phase = max_norm is not None or bool(skip_nonfinite)
        self.detect_changes = bool(detect_changes)
        self.timeout_s = float(timeout_s)
        self.skipped_steps = 0
        self._steps = 0  # updates applied (the kernel's step count)
        self._node: RingNode | None = None
        self._check_hyper()
        # the ring's flat vector: every trainable parameter, in group order
        self._params: list[torch.Tensor] = []
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                if p.dtype != torch.float32 or p.device.type != "cpu" or type(p.data) is not torch.Tensor:
                    raise UserError(f"{who}: parameter {len(self._params)} is {p.dtype} on {p.device} "
                                    f"({type(p.data).__name__}); the ring holds fp32 CPU tensors")
                self._params.append(p)
        if not self._params:
            raise UserError(f"{who}: no trainable parameters")
        self._numels = [p.numel() for p in self._params]
        self.length = sum(self._numels)
        self._flat_params = torch.empty(self.length, dtype=torch.float32)
        self._flat_grad = torch.empty(self.length, dtype=_WIRE_TORCH[wire_dtype])
        self._param_views = self._views(self._flat_params)
        self._grad_views = self._views(self._flat_grad)
        with torch.no_grad():
            for view, p in zip(self._param_views, self._params, strict=True):
                view.copy_(p.detach().reshape(-1))
            if broadcast_params:  # once, as DDP does when it wraps: one broadcast of the flat vector
                dist.broadcast(self._flat_params, 0)
                for view, p in zip(self._param_views, self._params, strict=True):
                    p.copy_(view.view_as(p))
        store = default_store(self.timeout_s) if store is None else store
        spec = KernelSpec(optimizer="adamw" if self._adamw else "adam", grad_dtype=wire_dtype)
        self._sealed = True  # the flat vector is fixed: add_param_group is refused from here on
        self._node = RingNode.join(backend, spec, store=store, rank=self.rank, world=self.world,
                                   params=self._flat_params.numpy().copy(), comm=comm,
                                   rendezvous_timeout_s=self.timeout_s, payload_bytes=payload_bytes,
                                   peer_timeout_s=self.timeout_s, **node_options)
        self.owned = self._node.owned
        self.chunk_elems = self._node.chunk_elems

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        if getattr(self, "_sealed", False):
            raise UserError(f"{type(self).__name__}: the ring's flat vector is fixed when the optimizer is built; "
                            "pass every param group to the constructor")
        super().add_param_group(param_group)

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        out, lo = [], 0
        for n in self._numels:
            out.append(flat[lo:lo + n])
            lo += n
        return out

    # ---- hyperparameters ------------------------------------------------------------------------------
    def _check_hyper(self) -> dict[str, Any]:
        first = self.param_groups[0]
        for gi, group in enumerate(self.param_groups[1:], 1):
            for key in _HYPER_KEYS:
                if _plain(group[key]) != _plain(first[key]):
                    raise UserError(f"{type(self).__name__}: param group {gi} has {key}={group[key]!r}, group 0 "
                                    f"{first[key]!r}; one kernel call updates the whole flat vector, so every "
                                    f"group needs the same {', '.join(_HYPER_KEYS)}")
            for key in ("amsgrad", "maximize"):
                if group.get(key):
                    raise UserError(f"{type(self).__name__}: {key}=True is not what the card computes")
        if first.get("amsgrad") or first.get("maximize"):
            raise UserError(f"{type(self).__name__}: amsgrad / maximize are not what the card computes")
        return first

    def _hyper(self) -> Hyper:
        g = self._check_hyper()
        b1, b2 = _plain(g["betas"])
        return Hyper(lr=float(_plain(g["lr"])), beta1=float(b1), beta2=float(b2), eps=float(g["eps"]),
                     weight_decay=float(g["weight_decay"]), step=self._steps + 1, grad_scale=1.0)

    # ---- the step --------------------------------------------------------------------------------------
    def _node_or_raise(self) -> RingNode:
        if self._node is None or self._node.closed:
            raise DeviceClosed(f"{self._who}: closed")
        return self._node

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One step on the ring: every rank calls it after its backward; see the module docstring."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        node = self._node_or_raise()
        hyper = self._hyper()
        if self.detect_changes:
            self._push_edits(node)
        for view, p in zip(self._grad_views, self._params, strict=True):
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad.reshape(-1))
        node.step(self._flat_grad, hyper, two_phase=self.two_phase, max_norm=self.max_norm, out=self._flat_params)
        if self.two_phase and node.last_step_skipped:
            self.skipped_steps += 1
        else:
            self._steps += 1
        for view, p in zip(self._param_views, self._params, strict=True):
            p.copy_(view.view_as(p))
        return loss

    def _push_edits(self, node: RingNode) -> None:
        """Write parameter edits since the last step into the owner's masters (this rank's chunk)."""
        lo, hi = self.owned
        changed, start = False, 0
        for view, p, n in zip(self._param_views, self._params, self._numels, strict=True):
            a, b = max(lo, start), min(hi, start + n)  # the part of p in the owned chunk
            if a < b and not torch.equal(view[a - start:b - start].view(torch.int32),
                                         p.detach().reshape(-1)[a - start:b - start].view(torch.int32)):
                changed = True
                break
            start += n
        if not changed:
            return
        for view, p in zip(self._param_views, self._params, strict=True):
            view.copy_(p.detach().reshape(-1))
        sd = node.state_dict()
        masters = np.array(sd["params"], dtype=np.float32, copy=True)
        masters[: hi - lo] = self._flat_params.numpy()[lo:hi]
        sd["params"] = masters
        node.load_state_dict(sd)

    @property
    def last_step_skipped(self) -> bool:
        return self._node_or_raise().last_step_skipped

    # ---- checkpoints -----------------------------------------------------------------------------------
    def _ring_facts(self) -> dict[str, Any]:
        lo, _ = self.owned
        return {"world": self.world, "rank": self.rank, "length": self.length, "lo": lo,
                "chunk_elems": self.chunk_elems, "wire_dtype": self.wire_dtype,
                "optimizer": "adamw" if self._adamw else "adam", "numels": list(self._numels)}

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """torch's shape for this rank's shard: state {0: step, exp_avg, exp_avg_sq, master_param}, groups, ring."""
        sd = self._node_or_raise().state_dict()
        groups, index = [], 0
        for group in self.param_groups:
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = list(range(index, index + len(group["params"])))
            index += len(group["params"])
            groups.append(g)
        shard = {"step": torch.tensor(float(sd["step"]), dtype=torch.float32),
                 "exp_avg": torch.from_numpy(np.array(sd["exp_avg"], np.float32)),
                 "exp_avg_sq": torch.from_numpy(np.array(sd["exp_avg_sq"], np.float32)),
                 "master_param": torch.from_numpy(np.array(sd["params"], np.float32))}
        return {"state": {0: shard}, "param_groups": groups, "ring": self._ring_facts(),
                "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # type: ignore[override]
        """Restore this rank's shard from `state_dict()` of the same rank, world size and parameters."""
        node = self._node_or_raise()
        ring = state_dict.get("ring") if isinstance(state_dict, dict) else None
        if not isinstance(ring, dict):
            raise UserError(f"{self._who}.load_state_dict: no 'ring' entry: not a {self._who} state_dict (a "
                            "torch.optim state_dict holds per-parameter state, the ring one shard per rank)")
        mine = self._ring_facts()
        if int(ring["world"]) != self.world:
            raise UserError(f"{self._who}.load_state_dict: saved by a ring of {ring['world']} ranks, this ring has "
                            f"{self.world}; resume at the same world size (each rank's shard is its chunk of "
                            f"the flat vector split {ring['world']} ways)")
        for key in ("rank", "length", "numels", "optimizer", "wire_dtype"):
            if ring.get(key) != mine[key]:
                raise UserError(f"{self._who}.load_state_dict: saved {key} {ring.get(key)!r}, this optimizer has "
                                f"{mine[key]!r}")
        saved_groups = state_dict["param_groups"]
        if [len(g["params"]) for g in saved_groups] != [len(g["params"]) for g in self.param_groups]:
            raise UserError(f"{self._who}.load_state_dict: the param groups differ in number or size")
        shard = state_dict.get("state", {}).get(0)
        missing = [k for k in ("step", "exp_avg", "exp_avg_sq", "master_param") if not isinstance(shard, dict)
                   or k not in shard]
        if missing:
            raise UserError(f"{self._who}.load_state_dict: state[0] lacks {', '.join(missing)}")
        node.load_state_dict({"step": int(torch.as_tensor(shard["step"]).item()), "params": shard["master_param"],
                              "exp_avg": shard["exp_avg"], "exp_avg_sq": shard["exp_avg_sq"],
                              "rank": self.rank, "world": self.world, "length": self.length})
        for group, saved in zip(self.param_groups, saved_groups, strict=True):
            for key, value in saved.items():
                if key != "params":
                    group[key] = value
        self._steps = int(torch.as_tensor(shard["step"]).item())
        self.skipped_steps = int(state_dict.get("skipped_steps", 0))
        # the owned chunk's masters are the card's now; the rest of the model is the caller's to load
        lo, hi = self.owned
        self._flat_params[lo:hi].copy_(torch.as_tensor(shard["master_param"])[: hi - lo])

    # ---- life cycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        if self._node is not None:
            self._node.close()

    def __enter__(self) -> _RingNicAdamBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(f"{type(self).__name__} holds its state on the ring's cards: save state_dict() instead")

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError(f"{type(self).__name__} holds its state on the ring's cards: save state_dict() instead")


class RingNicAdamW(_RingNicAdamBase):
    """`torch.optim.AdamW` over a DDP model, done by the ring's cards; see the module docstring."""

    _adamw = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, **options: Any) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, **options)


class RingNicAdam(_RingNicAdamBase):
    """`torch.optim.Adam` (L2 weight decay) over a DDP model, done by the ring's cards."""

    _adamw = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, **options: Any) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, **options)


def _check_node_options(backend: str, options: dict[str, Any], who: str) -> None:
    """TypeError naming the optimizer (as Python raises for any function) for a keyword neither the
    ring's node nor the card's backend takes: a misspelt one fails here, not deep inside the join."""
    params = inspect.signature(RingNode.__init__).parameters
    known = {n for n, prm in params.items() if prm.kind == prm.KEYWORD_ONLY}
    known |= {n for n, prm in inspect.signature(RingNode.join).parameters.items() if prm.kind == prm.KEYWORD_ONLY}
    known -= {"store", "rank", "world", "params", "transport", "peers", "comm", "payload_bytes",
              "peer_timeout_s", "rendezvous_timeout_s", "wire_dtype"}  # the optimizer sets these
    if backend in BACKENDS:
        known |= set(backend_options(backend)) - {"detect_changes", "data_path"}
    for name in options:
        if name not in known:
            raise TypeError(f"{who}.__init__() got an unexpected keyword argument {name!r}")


def chunk_of(length: int, world: int, rank: int) -> tuple[int, int]:
    """The elements [lo, hi) of a flat vector of `length` that `rank`'s card owns in a ring of `world`."""
    s = ring_ref.chunk_elems(length, world)
    return min(rank * s, length), min((rank + 1) * s, length)


__all__ = ["RingNicAdam", "RingNicAdamW", "chunk_of", "default_store"]
