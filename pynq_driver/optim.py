"""`NicAdamW` / `NicAdam`: drop-in `torch.optim` optimizers whose state lives on the card.

The one-line change in a training script::

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)       # before
    optimizer = NicAdamW(model.parameters(), lr=3e-4)                # after (backend="csim")

How the parameters map onto the card: each param group is flattened, per parameter dtype, into
one flat shard (a `ShardState`) that holds the fp32 master parameters and both moments in card
memory for the whole run. `step()` concatenates the gradients of the shard, streams them
through the kernel and copies the returned parameters back into the model's tensors. A group
can have its own lr and weight decay (each shard gets its own scalar registers per step), so
every `torch.optim.lr_scheduler` works: they only write `param_groups[i]["lr"]`.

Parameters that are bf16 on the model side use a bf16-gradient / bf16-output kernel: the card
keeps fp32 masters and returns the bf16 rounding of them (design.md section 3).

`state_dict()` returns exactly `torch.optim.AdamW`'s (or `Adam`'s) format: per parameter `step`
(float32 scalar tensor), `exp_avg`, `exp_avg_sq` (fp32, read from the card), and param groups
with torch's keys. For bf16 parameters one more entry, `master_param` (fp32), carries the card's
master copy; torch ignores it. Loading restores the masters from `master_param` when it is
present and still rounds to the model's current bf16 values, else from the model's parameters
(after a stretch under `torch.optim.AdamW`, whose bf16 state has no masters). torch's own
`load_state_dict` casts the moments to the parameter dtype; ours keeps them fp32.

`torch.amp.GradScaler` works as with any torch optimizer: `scaler.step(opt)` unscales the
gradients on the host and skips the step when one is not finite, so the card sees ordinary
gradients and its grad-scale register stays 1.0.

Semantics differ from torch's only by rounding (the golden model computes
`sqrt(v) * f32(1/sqrt(bc2)) + eps` and `step_size = f32(lr/bc1)`; torch divides by
`sqrt(bc2)`), except for two documented choices: a step whose gradient holds inf/NaN is
skipped on the card (state unchanged; `skip_nonfinite=False` applies it as torch would), and a
shard is updated as a whole, so the parameters of one group and dtype must all have a gradient
in a step or none of them (torch would skip just the ones without).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import _get_scalar_dtype

from hls.errors import UserError
from hls.golden import Hyper, to_bf16_bits
from hls.spec import KernelSpec, default_name
from pynq_driver.backends import BACKENDS, open_device
from pynq_driver.device import Device
from pynq_driver.shard import ShardState

DEFAULT_BACKEND = "csim"
DEFAULT_TARGET = "u55c"
# Parameter dtype -> (grad_dtype, out_dtype) of the kernel that serves it.
KERNEL_DTYPES: dict[torch.dtype, tuple[str, str]] = {
    torch.float32: ("fp32", "fp32"),
    torch.bfloat16: ("bf16", "bf16"),
}
MASTER_KEY = "master_param"


class DevicePool:
    """One opened device per kernel spec (fp32 and bf16 parameters need different kernels)."""

    def __init__(self, backend: str, optimizer: str, target: str, lanes: int | None,
                 device_options: dict[str, Any]) -> None:
        if backend not in BACKENDS:
            raise UserError(f"backend: {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.optimizer = optimizer
        self.target = target
        self.lanes = lanes
        self.options = dict(device_options)
        self.devices: dict[KernelSpec, Device] = {}

    def spec(self, grad_dtype: str, out_dtype: str) -> KernelSpec:
        kw: dict[str, Any] = {}
        if self.lanes is not None:
            kw["lanes"] = self.lanes
        return KernelSpec(target=self.target, optimizer=self.optimizer, grad_dtype=grad_dtype,
                          out_dtype=out_dtype, name=default_name(self.optimizer), **kw)

    def get(self, grad_dtype: str, out_dtype: str) -> Device:
        spec = self.spec(grad_dtype, out_dtype)
        if spec not in self.devices:
            if self.devices and self.options.get("project_dir") is not None:
                raise UserError(
                    "project_dir names one generated kernel, but these parameters need a second one "
                    f"({grad_dtype} gradients, {out_dtype} output): keep all parameters in one dtype, "
                    "or leave project_dir unset so the driver generates each kernel"
                )
            self.devices[spec] = open_device(self.backend, spec=spec, **self.options)
        return self.devices[spec]

    def close(self) -> None:
        for dev in self.devices.values():
            dev.close()
        self.devices.clear()


class FlatBucket:
    """Parameters of one group and one dtype laid end to end: offsets, flat copies in and out."""

    def __init__(self, params: list[torch.Tensor]) -> None:
        self.params = params
        self.dtype = params[0].dtype
        self.device = params[0].device
        self.numels = [p.numel() for p in params]
        self.offsets = [0, *np.cumsum(self.numels).tolist()]
        self.n = int(self.offsets[-1])
        self.versions: list[tuple[int, int]] = []

    def flat_params(self) -> torch.Tensor:
        """The parameters end to end, on the host (the card is fed from host memory)."""
        return torch.cat([p.detach().reshape(-1) for p in self.params]).cpu()

    def flat_grads(self, out: torch.Tensor | None = None, *, negate: bool = False) -> torch.Tensor:
        """The gradients end to end (into `out`, which may be longer: the tail is left alone)."""
        if out is None:
            out = torch.empty(self.n, dtype=self.dtype, device=self.device)
        for p, lo, hi in zip(self.params, self.offsets, self.offsets[1:], strict=False):
            g = p.grad
            if g.is_sparse:
                raise UserError("NicAdamW does not support sparse gradients (neither does torch.optim.AdamW)")
            if g.dtype != self.dtype:
                raise UserError(f"a {self.dtype} parameter has a {g.dtype} gradient; the kernel needs {self.dtype}")
            out[lo:hi].copy_(g.detach().reshape(-1))
        if negate:  # maximize: the negation is exact, so it is the same update as torch's
            out[: self.n].neg_()
        return out

    def write_back(self, flat: torch.Tensor) -> None:
        """Copy the updated flat parameters (host or any device) into the model's tensors."""
        for p, lo, hi in zip(self.params, self.offsets, self.offsets[1:], strict=False):
            p.detach().copy_(flat[lo:hi].view_as(p))
        self.remember()

    def remember(self) -> None:
        # A parameter written by anyone but us (model.load_state_dict, manual init) bumps its
        # version counter; the next step then re-reads the masters from the model.
        self.versions = [(p._version, p.data_ptr()) for p in self.params]

    def changed_outside(self) -> bool:
        return self.versions != [(p._version, p.data_ptr()) for p in self.params]


def grads_present(bucket: FlatBucket, where: str) -> bool:
    """True if every parameter of the bucket has a gradient, False if none; a clear error otherwise."""
    have = [p.grad is not None for p in bucket.params]
    if all(have):
        return True
    if not any(have):
        return False
    missing = [i for i, h in enumerate(have) if not h]
    raise UserError(
        f"{where}: {len(missing)} of {len(have)} parameters (indices {missing[:8]}) have no gradient this step "
        "while the others do; the card updates a param group as one flat shard. Put parameters that may "
        "miss a gradient (frozen or unused) in their own param group, or call zero_grad(set_to_none=False)"
    )


def flat_to_host(x: torch.Tensor) -> np.ndarray:
    return x.view(torch.int16).numpy().view(np.uint16) if x.dtype == torch.bfloat16 else x.numpy()


def hyper_for(group: dict[str, Any], step: int) -> Hyper:
    beta1, beta2 = group["betas"]
    return Hyper(lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]),
                 weight_decay=float(group["weight_decay"]), step=step)


def check_group(group: dict[str, Any], *, adamw: bool, who: str) -> None:
    if group.get("amsgrad", False):
        raise UserError(f"{who}: amsgrad=True is not implemented by the kernel (design.md section 3)")
    if group.get("decoupled_weight_decay", adamw) != adamw:
        other = "NicAdamW" if not adamw else "NicAdam"
        raise UserError(f"{who}: this param group asks for decoupled_weight_decay="
                        f"{group.get('decoupled_weight_decay')}; use {other}")
    for name in ("lr", "eps", "weight_decay"):
        value = float(group[name])
        if not math.isfinite(value) or value < 0:
            raise UserError(f"{who}: {name}={group[name]!r} must be a finite number >= 0")


def torch_defaults(lr: float, betas: tuple[float, float], eps: float, weight_decay: float, *, adamw: bool,
                   amsgrad: bool = False, maximize: bool = False, foreach: bool | None = None,
                   capturable: bool = False, differentiable: bool = False, fused: bool | None = None
                   ) -> dict[str, Any]:
    """The param-group keys of torch.optim.AdamW / Adam (2.13), so state_dicts interchange.

    `foreach` and `fused` pick one of torch's host implementations: kept for the state dict,
    meaningless for the card. `capturable` and `differentiable` have no card equivalent.
    """
    if not 0.0 <= lr or not 0.0 <= eps or not 0.0 <= weight_decay:
        raise ValueError(f"lr={lr}, eps={eps}, weight_decay={weight_decay} must be >= 0")
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"betas={betas} must each be in [0, 1)")
    if capturable or differentiable:
        raise UserError("capturable / differentiable: CUDA-graph capture and differentiating through the step "
                        "do not apply to an update that runs on the card")
    return dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=bool(amsgrad),
                maximize=bool(maximize), foreach=foreach, capturable=False, differentiable=False, fused=fused,
                decoupled_weight_decay=adamw)


def torch_param_state(step: int, exp_avg: np.ndarray, exp_avg_sq: np.ndarray, p: torch.Tensor,
                      master: np.ndarray | None) -> dict[str, torch.Tensor]:
    st = {
        "step": torch.tensor(float(step), dtype=_get_scalar_dtype()),
        "exp_avg": torch.from_numpy(exp_avg.copy()).view_as(p),
        "exp_avg_sq": torch.from_numpy(exp_avg_sq.copy()).view_as(p),
    }
    if master is not None:
        st[MASTER_KEY] = torch.from_numpy(master.copy()).view_as(p)
    return st


def masters_from(bucket: FlatBucket, states: list[dict[str, Any]] | None, lo: int = 0, hi: int | None = None
                 ) -> np.ndarray:
    """fp32 masters for flat range [lo, hi) of the bucket: saved ones if still current, else the model's."""
    current = bucket.flat_params()[lo:hi]  # on the host
    if bucket.dtype == torch.float32:
        return current.numpy().copy()
    if states and all(MASTER_KEY in st for st in states):
        saved = torch.cat([st[MASTER_KEY].detach().to("cpu", torch.float32).reshape(-1) for st in states])[lo:hi]
        saved_np = saved.numpy()
        if np.array_equal(to_bf16_bits(saved_np), flat_to_host(current.contiguous())):
            return saved_np.copy()
    return current.to(torch.float32).numpy().copy()


def saved_step(states: list[dict[str, Any]], who: str) -> int:
    steps = {float(st["step"]) for st in states}
    if len(steps) != 1:
        raise UserError(f"{who}: the parameters of one param group carry different step counts {sorted(steps)}; "
                        "the card keeps one count per group")
    step = steps.pop()
    if step != int(step) or step < 0:
        raise UserError(f"{who}: step {step} is not a whole count")
    return int(step)


def map_saved_state(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Saved per-parameter state keyed by id() of our parameter (torch's id matching, no casts)."""
    saved_groups = state_dict["param_groups"]
    if len(saved_groups) != len(optimizer.param_groups):
        raise ValueError("loaded state dict has a different number of parameter groups")
    for g, s in zip(optimizer.param_groups, saved_groups, strict=True):
        if len(g["params"]) != len(s["params"]):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
    id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                      chain.from_iterable(g["params"] for g in optimizer.param_groups), strict=True))
    return {id(id_map[k]): v for k, v in state_dict["state"].items() if k in id_map}


class _NicAdamBase(torch.optim.Optimizer):
    _adamw = True

    def __init__(self, params: Iterable[Any], lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, *, amsgrad: bool = False, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, backend: str = DEFAULT_BACKEND, target: str = DEFAULT_TARGET,
                 lanes: int | None = None, skip_nonfinite: bool = True, chunk_elems: int | None = None,
                 **device_options: Any) -> None:
        defaults = torch_defaults(lr, betas, eps, weight_decay, adamw=self._adamw, amsgrad=amsgrad,
                                  maximize=maximize, foreach=foreach, capturable=capturable,
                                  differentiable=differentiable, fused=fused)
        super().__init__(params, defaults)
        self.kind = "adamw" if self._adamw else "adam"
        self.skip_nonfinite = bool(skip_nonfinite)
        self.chunk_elems = chunk_elems
        self.pool = DevicePool(backend, self.kind, target, lanes, device_options)
        self.skipped_steps = 0
        self._buckets: list[list[tuple[FlatBucket, ShardState]]] = []
        try:
            for group in self.param_groups:
                check_group(group, adamw=self._adamw, who=type(self).__name__)
                self._buckets.append(self._make_buckets(group))
        except BaseException:
            self.close()
            raise

    # ---- layout ------------------------------------------------------------------------------
    def _make_buckets(self, group: dict[str, Any]) -> list[tuple[FlatBucket, ShardState]]:
        by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = defaultdict(list)
        for p in group["params"]:
            if p.dtype not in KERNEL_DTYPES:
                raise UserError(f"{type(self).__name__}: parameters of dtype {p.dtype} are not supported; "
                                f"use one of {', '.join(str(d) for d in KERNEL_DTYPES)}")
            if p.requires_grad:  # frozen parameters never get state, as in torch
                by_dtype[p.dtype, p.device].append(p)
        out = []
        for (dtype, _), params in by_dtype.items():
            bucket = FlatBucket(params)
            dev = self.pool.get(*KERNEL_DTYPES[dtype])
            shard = ShardState(dev, bucket.flat_params().to(torch.float32), self.chunk_elems,
                               nonfinite="skip")
            bucket.remember()
            out.append((bucket, shard))
        return out

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)
        if hasattr(self, "_buckets"):  # not during __init__, which builds them itself
            check_group(self.param_groups[-1], adamw=self._adamw, who=type(self).__name__)
            self._buckets.append(self._make_buckets(self.param_groups[-1]))

    def shards(self) -> list[ShardState]:
        return [s for buckets in self._buckets for _, s in buckets]

    def placement(self) -> list[dict[str, Any]]:
        """Where the optimizer state lives: one entry per shard (backend, kernel, banks, bytes)."""
        rows = []
        for gi, buckets in enumerate(self._buckets):
            for bucket, shard in buckets:
                banks = {cu: shard.dev.banks(cu) for cu in range(shard.dev.cus)}
                rows.append({
                    "group": gi, "dtype": str(bucket.dtype).replace("torch.", ""), "params": shard.n,
                    "backend": shard.backend, "kernel": shard.spec.name, "target": shard.spec.target,
                    "state_bytes": 12 * shard.n,
                    "banks": {a: sorted({b[port] for b in banks.values() for port in b
                                         if port.startswith(a) and port.endswith("_rd")}) for a in ("p", "m", "v")},
                })
        return rows

    def device_state_bytes(self) -> int:
        return sum(12 * s.n for s in self.shards())

    def close(self) -> None:
        for buckets in getattr(self, "_buckets", []):
            for _, shard in buckets:
                shard.close()
        self._buckets = []
        self.pool.close()

    # ---- the step ----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        who = type(self).__name__
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            check_group(group, adamw=self._adamw, who=who)
            for bucket, shard in buckets:
                if not grads_present(bucket, who):
                    continue
                if bucket.changed_outside():
                    self._reload_masters(bucket, shard)
                # GPU gradients come to the host in one copy: the card reads host memory over PCIe.
                grad = bucket.flat_grads(negate=bool(group.get("maximize", False))).cpu()
                hyper = hyper_for(group, shard.step_count + 1)
                out = torch.empty(bucket.n, dtype=bucket.dtype)
                result = shard.step(grad, hyper, out=out, apply_nonfinite=not self.skip_nonfinite)
                if result is None:
                    self.skipped_steps += 1
                    continue
                bucket.write_back(out)
        return loss

    def _reload_masters(self, bucket: FlatBucket, shard: ShardState) -> None:
        sd = shard.state_dict()
        sd["params"] = masters_from(bucket, None)
        shard.load_state_dict(sd)
        bucket.remember()

    # ---- state_dict interchange with torch.optim.AdamW / Adam --------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
        for buckets in self._buckets:
            for bucket, shard in buckets:
                if shard.step_count == 0:
                    continue  # torch has no state for a parameter before its first step
                sd = shard.state_dict()
                for p, lo, hi in zip(bucket.params, bucket.offsets, bucket.offsets[1:], strict=False):
                    master = sd["params"][lo:hi] if bucket.dtype != torch.float32 else None
                    state[p] = torch_param_state(sd["step"], sd["exp_avg"][lo:hi], sd["exp_avg_sq"][lo:hi], p, master)
        kept = self.state
        self.state = state
        try:
            return super().state_dict()
        finally:
            self.state = kept

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = map_saved_state(self, state_dict)
        super().load_state_dict(state_dict)  # param groups (lr, betas, ...) and torch's hooks
        self.state = defaultdict(dict)  # the state lives on the card, not in host tensors
        who = type(self).__name__
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            check_group(group, adamw=self._adamw, who=who)
            for bucket, shard in buckets:
                states = [saved.get(id(p)) for p in bucket.params]
                present = [st is not None and "exp_avg" in st for st in states]
                if not any(present):
                    sd = {"step": 0, "exp_avg": np.zeros(bucket.n, np.float32),
                          "exp_avg_sq": np.zeros(bucket.n, np.float32), "params": masters_from(bucket, None)}
                elif not all(present):
                    raise UserError(f"{who}: the state dict has state for only some parameters of a param group; "
                                    "the card keeps one shard per group")
                else:
                    sd = {
                        "step": saved_step(states, who),
                        "exp_avg": torch.cat([st["exp_avg"].detach().to("cpu", torch.float32).reshape(-1)
                                              for st in states]),
                        "exp_avg_sq": torch.cat([st["exp_avg_sq"].detach().to("cpu", torch.float32).reshape(-1)
                                                 for st in states]),
                        "params": masters_from(bucket, states),
                    }
                shard.load_state_dict(sd)
                bucket.remember()


class NicAdamW(_NicAdamBase):
    """`torch.optim.AdamW` with its state (fp32 masters, exp_avg, exp_avg_sq) on the card."""

    _adamw = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, **options: Any) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, **options)


class NicAdam(_NicAdamBase):
    """`torch.optim.Adam` (L2 weight decay added to the gradient) with its state on the card."""

    _adamw = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, **options: Any) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, **options)


__all__ = ["NicAdam", "NicAdamW", "DevicePool", "FlatBucket", "KERNEL_DTYPES", "MASTER_KEY"]
