"""What the card optimizers share (NicAdamW/NicAdam in `adam.py`, ShardedNicOptimizer in
`sharded.py`): `CardOptimizer` (slots on cards, torch's state and state_dict, the step's host
work before the card), the devices they open (`DevicePool`), and torch's param-group handling.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import chain
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import _get_scalar_dtype

from hls.errors import UserError
from hls.golden import Hyper
from hls.spec import KernelSpec, default_name
from pynq_driver.backends import BACKENDS, open_device
from pynq_driver.device import Device
from pynq_driver.errors import DeviceClosed, StateError
from pynq_driver.optim.buckets import CardBucket, Slot, is_dtensor, local_tensor, param_slot
from pynq_driver.optim.devpath import DevicePath, data_path_option, stages
from pynq_driver.optim.state import MASTER_KEY, STATE_KEYS, CardState, ParamState, StateViews
from pynq_driver.shard import ShardState

log = logging.getLogger(__name__)

DEFAULT_BACKEND = "csim"
DEFAULT_TARGET = "u55c"
# Parameter dtype -> (grad_dtype, out_dtype) of the kernel that serves it.
KERNEL_DTYPES: dict[torch.dtype, tuple[str, str]] = {
    torch.float32: ("fp32", "fp32"),
    torch.bfloat16: ("bf16", "bf16"),
}
# Below this many bytes of tensors a step's scan and comparison run on the calling thread alone:
# handing work to the second thread and waiting for it back costs a few hundred microseconds here,
# what one thread takes to compare about 2 MiB.
SCAN_INLINE_BYTES = 2 << 20


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


def hyper_for(group: dict[str, Any], step: int) -> Hyper:
    """The kernel's hyperparameters of param group `group` at step `step`."""
    beta1, beta2 = group["betas"]
    return Hyper(lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]),
                 weight_decay=float(group["weight_decay"]), step=step)


def _number(value: Any) -> float | None:
    """`value` as a float (a number or a one-element tensor), None when it is not one."""
    if isinstance(value, bool):
        return None
    try:
        return float(value.item() if isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None


def check_hyper(lr: Any, betas: Any, eps: Any, weight_decay: Any) -> None:
    """torch.optim.AdamW's checks of its numbers, with its messages ("Invalid learning rate: -1"), as
    UserError (a ValueError, as torch raises); also refused: inf and NaN, which the kernel cannot
    run, and values that are not numbers (torch would fail later, on a comparison)."""
    def bad(value: Any, hi: float = math.inf) -> bool:
        x = _number(value)
        return x is None or not (0.0 <= x < hi) or not math.isfinite(x)

    if bad(lr):
        raise UserError(f"Invalid learning rate: {lr}")
    if bad(eps):
        raise UserError(f"Invalid epsilon value: {eps}")
    if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise UserError(f"Invalid betas: {betas!r} (two numbers in [0, 1), as torch.optim.AdamW takes)")
    for i in (0, 1):
        if bad(betas[i], 1.0):
            raise UserError(f"Invalid beta parameter at index {i}: {betas[i]}")
    if bad(weight_decay):
        raise UserError(f"Invalid weight_decay value: {weight_decay}")


def check_group(group: dict[str, Any], *, adamw: bool, who: str) -> None:
    """Raise UserError for a param group the kernel cannot run (amsgrad, the other decay, bad numbers)."""
    for key in ("lr", "betas", "eps", "weight_decay"):
        if key not in group:
            raise UserError(f"{who}: param group lacks {key!r} (torch.optim.AdamW's groups have lr, betas, eps, "
                            "weight_decay)")
    check_hyper(group["lr"], group["betas"], group["eps"], group["weight_decay"])
    if group.get("amsgrad", False):
        raise UserError(f"{who}: amsgrad=True is not implemented by the kernel (design.md section 3)")
    if group.get("decoupled_weight_decay", adamw) != adamw:
        other = "NicAdamW" if not adamw else "NicAdam"
        raise UserError(f"{who}: this param group asks for decoupled_weight_decay="
                        f"{group.get('decoupled_weight_decay')}; use {other}")


def torch_defaults(lr: float, betas: tuple[float, float], eps: float, weight_decay: float, *, adamw: bool,
                   amsgrad: bool = False, maximize: bool = False, foreach: bool | None = None,
                   capturable: bool = False, differentiable: bool = False, fused: bool | None = None
                   ) -> dict[str, Any]:
    """The param-group keys of torch.optim.AdamW / Adam (2.13), so state_dicts interchange.

    `foreach` and `fused` pick one of torch's host implementations: kept for the state dict,
    meaningless for the card. `capturable` and `differentiable` have no card equivalent.
    """
    check_hyper(lr, betas, eps, weight_decay)
    if capturable:
        raise UserError("capturable=True: torch's capturable step keeps its step counts on the GPU so that a CUDA "
                        "graph can capture it; the card's step is host calls and a kernel launch on another "
                        "device, which no CUDA graph can capture. Leave capturable=False (torch's default)")
    if differentiable:
        raise UserError("differentiable=True: autograd cannot differentiate through an update that runs on the "
                        "card. Leave differentiable=False (torch's default)")
    if fused and foreach:
        raise UserError("`fused` and `foreach` cannot be `True` together.")  # torch's own message
    return dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=bool(amsgrad),
                maximize=bool(maximize), foreach=foreach, capturable=False, differentiable=False, fused=fused,
                decoupled_weight_decay=adamw)


def check_no_overlap(groups: list[dict[str, Any]], who: str) -> None:
    """Refuse parameters whose memory overlaps (tied through `.data`, views of one tensor): the card
    keeps one copy of each and writes each back, so they would drift apart from what torch computes
    (which updates them one after another, each reading the other's result). Tie the modules
    (`b.weight = a.weight`, one parameter) instead."""
    spans = []
    for g, group in enumerate(groups):
        for i, p in enumerate(group["params"]):
            t = local_tensor(p)
            if t.numel() == 0:
                continue
            start = t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()
            spans.append((str(t.device), start, start + t.numel() * t.element_size(), g, i))
    spans.sort()
    for a, b in zip(spans, spans[1:], strict=False):
        if a[0] == b[0] and b[1] < a[2]:
            raise UserError(f"{who}: param_groups[{a[3]}]['params'][{a[4]}] and "
                            f"param_groups[{b[3]}]['params'][{b[4]}] "
                            "share memory (tied through .data, or views of one tensor); the card keeps one copy "
                            "of each, so they would drift apart: tie the modules instead (b.weight = a.weight, one "
                            "parameter)")


# Keywords of `open_device` that every backend takes, and the optimizer's own device-side options.
_COMMON_DEVICE_OPTIONS = ("project_dir", "timeout_s", "detect_changes", "data_path")


def backend_options(backend: str) -> tuple[str, ...]:
    """The device keywords a card optimizer passes on to backend `backend`, read from the
    backends' own signatures (so a backend's new option is accepted without a second list)."""
    names: list[str] = list(_COMMON_DEVICE_OPTIONS)
    if backend == "csim":
        names += ["threads", "headers"]
    elif backend == "rtlsim":
        from pynq_driver.backends.rtlsim import RtlSimDevice

        names += [n for n, prm in inspect.signature(RtlSimDevice.__init__).parameters.items()
                  if prm.kind == prm.KEYWORD_ONLY and n != "timeout_s"]
    elif backend == "alveo":
        from pynq_driver.backends.alveo import AlveoDevice

        names += [n for n, prm in inspect.signature(AlveoDevice.open).parameters.items()
                  if prm.kind == prm.KEYWORD_ONLY and n not in names]
    return tuple(names)


def check_device_options(backend: str, options: dict[str, Any], who: str) -> None:
    """TypeError, as Python raises for any function, for a keyword neither the optimizer nor the
    backend takes (a misspelt one included): naming the optimizer, not the device class below it."""
    if backend not in BACKENDS:
        return  # DevicePool says which backends there are
    known = backend_options(backend)
    for name in options:
        if name in known:
            continue
        other = [b for b in BACKENDS if b != backend and name in backend_options(b)]
        hint = f" (an option of backend={other[0]!r}, not {backend!r})" if other else ""
        raise TypeError(f"{who}.__init__() got an unexpected keyword argument {name!r}{hint}")


def _local_part(p: Any, value: torch.Tensor) -> torch.Tensor:
    """This rank's part of `value` (the full state of DTensor `p`), sliced where `value` lives: a
    full host tensor never goes to `p.device` whole. Placements other than Shard/Replicate (a
    strided shard) go through torch's distribute_tensor."""
    from torch.distributed.tensor import Replicate, Shard

    if all(type(pl) in (Shard, Replicate) for pl in p.placements):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
        return value.detach().reshape(p.shape)[tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))]
    from torch.distributed.tensor import distribute_tensor

    return local_tensor(distribute_tensor(value.detach().reshape(p.shape).to(p.device), p.device_mesh,
                                          p.placements))


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


class CardOptimizer(torch.optim.Optimizer):
    """What NicAdamW/NicAdam and ShardedNicOptimizer share: slots on cards, torch's state and state_dict."""

    _adamw = True
    _who = "NicAdamW"
    _staged_step = False  # whether this optimizer's step runs the staged data path (devpath.py)

    def _init_card(self, backend: str, target: str, lanes: int | None, skip_nonfinite: bool,
                   chunk_elems: int | None, device_options: dict[str, Any]) -> None:
        self.kind = "adamw" if self._adamw else "adam"
        check_device_options(backend, device_options, self._who)
        check_no_overlap(self.param_groups, self._who)
        self.skip_nonfinite = bool(skip_nonfinite)
        # Exact change detection (the card's masters compared with the parameters before every chunk
        # whose masters the kernel does not read from the parameter itself). `detect_changes=False`
        # saves that pass for scripts that never touch parameters between steps; an edit may then
        # be overwritten by the card's copy.
        self.detect_changes = bool(device_options.pop("detect_changes", True))
        # Which data path a step takes (devpath.py): "auto" stages tensors that are not in host
        # memory (a GPU's) through the pinned ring and side streams, "pipeline" stages CPU tensors
        # too (the same code, tested here), "direct" never stages.
        given = device_options.pop("data_path", None)
        if self._staged_step:
            self.data_path = data_path_option(given)
        else:
            if given not in (None, "direct"):
                data_path_option(given)
                raise UserError(f"{self._who}: data_path={given!r}: only NicAdamW / NicAdam stage their step "
                                "(devpath.py); this optimizer takes the direct path")
            self.data_path = "direct"
        self._devpaths: dict[str, DevicePath] = {}
        self.chunk_elems = chunk_elems
        self.pool = DevicePool(backend, self.kind, target, lanes, device_options)
        self.skipped_steps = 0
        self._closed = False
        self._buckets: list[list[CardBucket]] = []
        self._slots: dict[int, tuple[CardBucket, Slot]] = {}
        self._numels: dict[int, int] = {}  # id(p) -> its (local) elements when given to the optimizer
        try:
            for group in self.param_groups:
                check_group(group, adamw=self._adamw, who=self._who)
                self._buckets.append(self._make_buckets(group))
        except BaseException:
            self.close()
            raise
        self._share_host_chunks()
        self._group_params = [list(g["params"]) for g in self.param_groups]
        self.state = CardState(self)  # type: ignore[assignment]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__ and not getattr(cls.__dict__["step"], "_card_step", False):
            cls.step = card_step(cls.__dict__["step"])  # type: ignore[method-assign]

    def _share_host_chunks(self) -> None:
        """One pair of host chunks for all of this optimizer's shards (they step one after another)."""
        shards = self.shards()
        if shards:
            nbytes = 4 * max(s.chunk_elems for s in shards)
            if getattr(self, "_host_raw", None) is None or self._host_raw[0].nbytes < nbytes:
                self._host_raw = (np.empty(nbytes, np.uint8), np.empty(nbytes, np.uint8))
            for s in shards:
                s.share_host_chunks(*self._host_raw)

    # ---- layout: overridden by the sharded optimizer --------------------------------------------
    def _slots_for(self, params: list[torch.Tensor]) -> list[Slot]:
        return [param_slot(p) for p in params]

    def _wrap_state(self, p: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """A state tensor of `p` from the slot's fp32 values (host memory, read chunk by chunk from
        the card): shaped as `p`, and for a DTensor placed as `p` on its mesh with a host local
        tensor, as FSDP2's CPUOffloadPolicy keeps its sharded state. Never copied to `p.device`:
        a checkpoint of offloaded state must not need the device memory the offload freed."""
        if is_dtensor(p):
            from torch.distributed.tensor import DTensor

            loc = local.view(local_tensor(p).shape)
            return DTensor.from_local(loc, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                      stride=p.stride())
        return local.view(p.shape)

    def _local_value(self, p: torch.Tensor, value: Any, key: str) -> torch.Tensor:
        """This optimizer's part of a state value for `p` (a DTensor's local shard, else the value)."""
        if not isinstance(value, torch.Tensor):
            raise UserError(f"{self._who}: state {key!r} must be a tensor, got {type(value).__name__}")
        if is_dtensor(value):
            if is_dtensor(p) and tuple(value.placements) != tuple(p.placements):
                value = value.redistribute(p.device_mesh, p.placements)
            return local_tensor(value)
        if is_dtensor(p) and value.numel() == p.numel() != local_tensor(p).numel():
            return _local_part(p, value)
        return value

    def _make_buckets(self, group: dict[str, Any]) -> list[CardBucket]:
        by_dtype: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = defaultdict(list)
        for p in group["params"]:
            if p.dtype not in KERNEL_DTYPES:
                raise UserError(f"{self._who}: parameters of dtype {p.dtype} are not supported; "
                                f"use one of {', '.join(str(d) for d in KERNEL_DTYPES)}")
            # Frozen parameters get a place too: unfrozen later, they train (torch gives them state
            # at their first gradient; until then the card keeps zeros for them).
            by_dtype[p.dtype, local_tensor(p).device].append(p)
            self._numels[id(p)] = local_tensor(p).numel()
        out = []
        for (dtype, _), params in by_dtype.items():
            slots = self._slots_for(params)
            bucket = CardBucket(slots, self.pool.get(*KERNEL_DTYPES[dtype]), dtype, self.chunk_elems)
            for p, s in zip(params, slots, strict=True):
                self._slots[id(p)] = (bucket, s)
            out.append(bucket)
        return out

    def _guard(self) -> threading.RLock:
        """The lock that step(), state_dict(), load_state_dict() and add_param_group() hold: a second
        thread calling one of them waits for the first (each call sees a whole state)."""
        lock = self.__dict__.get("_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_lock", threading.RLock())
        return lock

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        with self._guard():
            if getattr(self, "_closed", False):
                self._check_open()
            building = not hasattr(self, "_buckets")  # during __init__, which builds them itself
            if not building and isinstance(param_group, dict):
                # Checked before torch appends it: a refused group must leave no trace.
                merged = {**self.defaults, **{k: v for k, v in param_group.items() if k != "params"}}
                check_group(merged, adamw=self._adamw, who=self._who)
            super().add_param_group(param_group)
            if building:
                return
            try:
                check_no_overlap(self.param_groups, self._who)
                self._buckets.append(self._make_buckets(self.param_groups[-1]))
                self._group_params.append(list(self.param_groups[-1]["params"]))
            except BaseException:
                group = self.param_groups.pop()
                for p in group["params"]:
                    self._slots.pop(id(p), None)
                    self._numels.pop(id(p), None)
                raise
            self._share_host_chunks()

    def shards(self) -> list[ShardState]:
        return [b.shard for buckets in self._buckets for b in buckets if b.shard is not None]

    def card_numel(self) -> int:
        """Elements of parameters this optimizer keeps on its cards (for an FSDP2 DTensor parameter its
        local shard, for the sharded optimizer this rank's slices), beat-alignment padding excluded."""
        return sum(s.numel for buckets in self._buckets for b in buckets for s in b.slots)

    def device_state_bytes(self) -> int:
        return sum(12 * s.n for s in self.shards())

    def host_bytes(self) -> int:
        """Host memory this optimizer holds for its steps: the shared pair of host chunks, every
        scratch of a step included (the state itself is on the card)."""
        raw = getattr(self, "_host_raw", None) or ()
        return sum(a.nbytes for a in raw) + sum(p.host_bytes() for p in getattr(self, "_devpaths", {}).values())

    def device_paths(self) -> dict[str, DevicePath]:
        """The staged data paths this optimizer's steps used so far, by device (devpath.py)."""
        return dict(getattr(self, "_devpaths", {}))

    def _path_for(self, b: CardBucket) -> DevicePath | None:
        """The staged data path of bucket `b`, or None for the direct one."""
        if self.data_path == "direct" or b.shard is None or not b.slots:
            return None
        device = b.slots[0].data().device
        if self.data_path == "auto" and not stages(device):
            return None
        path = self._devpaths.get(str(device))
        if path is None:
            path = self._devpaths[str(device)] = DevicePath(device)
        return path

    # ---- life cycle ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if getattr(self, "_closed", False):
            raise DeviceClosed(f"{self._who} is closed (close() released its cards and their state); "
                               "create a new optimizer and load_state_dict a saved state_dict into it")

    def close(self) -> None:
        worker = getattr(self, "_scan_worker", None)
        if worker is not None:
            worker.shutdown(wait=True)
            self._scan_worker = None
        for path in getattr(self, "_devpaths", {}).values():
            path.close()
        for buckets in getattr(self, "_buckets", []):
            for b in buckets:
                b.close()
        self._state_views().forget()
        self._buckets = []
        self._slots = {}
        if hasattr(self, "pool"):
            self.pool.close()
        self._closed = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._check_open()
        super().zero_grad(set_to_none)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"{self._who} cannot be pickled or deep-copied: its state lives on a card, which a copy "
                        "cannot share. Save optimizer.state_dict() (torch.save works on it) and load it into a new "
                        f"{self._who} over the copied model's parameters")

    def __deepcopy__(self, memo: Any) -> Any:
        self.__reduce_ex__(4)

    # ---- per-parameter state (optimizer.state, state_dict) ----------------------------------------
    def _state_views(self) -> StateViews:
        views = self.__dict__.get("_views")
        if views is None:
            views = self.__dict__.setdefault("_views", StateViews())
        return views

    def _read_param_state(self, p: torch.Tensor, key: str) -> torch.Tensor:
        """A host tensor of state `key` of `p`, tracked (`StateViews`): while the copy read last is
        current, a view of it (reads alias, as torch's); a tensor the user assigned, itself."""
        with self._guard():
            views = self._state_views()
            snap = views.lookup(p, key)
            if snap is not None and snap.obj is not None:
                obj = snap.obj()
                if obj is not None:
                    return obj
                self._sync_state()  # the assigned tensor died edited: its edit goes to the card first
                snap = views.lookup(p, key)
            if snap is not None:
                keep = snap.keep
            else:
                bucket, slot = self._slots[id(p)]
                if key == "step":
                    keep = torch.tensor(float(slot.step), dtype=_get_scalar_dtype())
                else:
                    keep = bucket.read(slot, {"exp_avg": "m", "exp_avg_sq": "v", MASTER_KEY: "p"}[key])
            out = keep.view(()) if key == "step" else self._wrap_state(p, keep)
            handed = [out]
            if is_dtensor(out):
                handed.append(out._local_tensor)
            views.track(p, key, keep, handed)
            return out

    def _param_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        return {k: self._read_param_state(p, k) for k in ParamState(self, p)}

    def _write_param_state(self, p: torch.Tensor, key: str, value: Any) -> None:
        """`optimizer.state[p][key] = value`: written to the card; a tensor is then tracked as the
        state (its later in-place edits reach the card, as they change torch's state)."""
        with self._guard():
            views = self._state_views()
            views.forget(p, key)
            self._store_param_state(p, key, value)
            self._track_assigned(p, key, value)

    def _track_assigned(self, p: torch.Tensor, key: str, value: Any) -> None:
        if not isinstance(value, torch.Tensor):
            return
        keep = value
        if is_dtensor(value):
            if not is_dtensor(p) or tuple(value.placements) != tuple(p.placements):
                return  # redistributed on its way to the card: a copy, as torch's load would make
            keep = local_tensor(value)
        self._state_views().track(p, key, keep, [value], assigned=value)

    def _sync_state(self) -> None:
        """Write every tracked state tensor edited in place since it was handed out to the card."""
        views = self._state_views()
        for snap in views.edits():
            if id(snap.p) in self._slots:
                self._store_param_state(snap.p, snap.key, snap.keep)
            views.written(snap)

    def _store_param_state(self, p: torch.Tensor, key: str, value: Any) -> None:
        bucket, slot = self._slots[id(p)]
        if key == "step":
            slot.step = as_step(value, self._who)
            slot.has_state = True
            bucket.shard_step_changed()
            return
        array = {"exp_avg": "m", "exp_avg_sq": "v", MASTER_KEY: "p"}.get(key)
        if array is None or (key == MASTER_KEY and bucket.dtype == torch.float32):
            raise UserError(f"{self._who}: optimizer.state[p][{key!r}]: the card keeps step, exp_avg, exp_avg_sq"
                            + (" and master_param" if bucket.dtype != torch.float32 else ""))
        bucket.write(slot, array, self._local_value(p, value, key))
        slot.has_state = True

    def _set_param_state(self, p: torch.Tensor, st: dict[str, Any]) -> None:
        """Replace the whole state of `p` (torch's keys; empty: no state, as before its first step)."""
        with self._guard():
            checked = self._check_param_state(p, st)
            self._state_views().forget(p)
            self._apply_param_state(p, checked)
            for key in (*STATE_KEYS, MASTER_KEY) if checked is not None else ():
                if key in st:
                    self._track_assigned(p, key, st[key])

    def _check_param_state(self, p: torch.Tensor, st: dict[str, Any]) -> tuple[Any, ...] | None:
        """Everything `_apply_param_state` needs, checked; nothing is written (None: no state)."""
        bucket, slot = self._slots[id(p)]
        if not st:
            return None
        missing = [k for k in STATE_KEYS if k not in st]
        if missing:
            raise UserError(f"{self._who}: state for a parameter lacks {', '.join(missing)} (torch.optim.AdamW "
                            "keeps step, exp_avg and exp_avg_sq)")
        unknown = sorted(set(st) - {*STATE_KEYS, MASTER_KEY})
        if unknown:
            raise UserError(f"{self._who}: state keys {unknown} have no place on the card (amsgrad's max_exp_avg_sq "
                            "is not implemented by the kernel)")
        step = as_step(st["step"], self._who)
        m = self._local_value(p, st["exp_avg"], "exp_avg")
        v = self._local_value(p, st["exp_avg_sq"], "exp_avg_sq")
        master = st.get(MASTER_KEY) if bucket.dtype != torch.float32 else None
        for value, key in ((m, "exp_avg"), (v, "exp_avg_sq")):
            if value.numel() != slot.numel:
                raise UserError(f"{self._who}: state {key!r} has {value.numel()} elements, the parameter "
                                f"{slot.numel} (a state_dict of another model or sharding?)")
        master = self._local_value(p, master, MASTER_KEY) if master is not None else None
        if master is not None and master.numel() != slot.numel:
            raise UserError(f"{self._who}: state {MASTER_KEY!r} has {master.numel()} elements, the parameter "
                            f"{slot.numel}")
        return step, m, v, master

    def _apply_param_state(self, p: torch.Tensor, checked: tuple[Any, ...] | None) -> None:
        bucket, slot = self._slots[id(p)]
        if checked is None:
            bucket.write(slot, "m", None)
            bucket.write(slot, "v", None)
            slot.step, slot.has_state = 0, False
            bucket.shard_step_changed()
            return
        step, m, v, master = checked
        bucket.write(slot, "m", m)
        bucket.write(slot, "v", v)
        # bf16: the saved fp32 masters where they still round to the parameter, else the parameter;
        # the next step compares element by element (CardBucket.run), so writing them is enough.
        bucket.write(slot, "p", master if master is not None else slot.data())
        slot.step, slot.has_state = step, True
        bucket.shard_step_changed()

    def _check_consistent(self) -> None:
        for shard in self.shards():
            if shard.inconsistent:
                raise StateError(f"{self._who}: {shard.inconsistent}: its state_dict would be half updated; "
                                 "load a saved state_dict (load_state_dict) first")

    @contextmanager
    def _hooks_off(self, *names: str) -> Iterator[None]:
        """torch's own state_dict/load_state_dict without the hooks named (we run them ourselves, where
        torch runs them relative to the state, which for us is on the card)."""
        kept = {n: getattr(self, n) for n in names}
        for n in names:
            setattr(self, n, OrderedDict())
        try:
            yield
        finally:
            for n, hooks in kept.items():
                setattr(self, n, hooks)

    @torch.compiler.disable
    def state_dict(self) -> dict[str, Any]:
        """torch.optim.AdamW's (or Adam's) state_dict, the state read from the card (refused while a
        step stopped halfway left it half updated).

        The state tensors are host tensors (DTensors with host local tensors for DTensor
        parameters), read from the card array by array, one chunk at a time: nothing of the state
        goes to the parameters' device. Hooks run as torch runs them: pre-hooks first (they may
        change the state, which then goes to the card), post-hooks on the finished dict (a hook's
        returned dict replaces it)."""
        with self._guard():
            self._check_open()
            self._check_param_groups()
            for pre_hook in self._optimizer_state_dict_pre_hooks.values():
                pre_hook(self)
            self._check_consistent()
            self._sync_state()
            kept = self.state
            self.state = {p: self._param_state(p) for p in kept}  # type: ignore[assignment]
            try:
                with self._hooks_off("_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks"):
                    state_dict = super().state_dict()
            finally:
                self.state = kept
            for post_hook in self._optimizer_state_dict_post_hooks.values():
                result = post_hook(self, state_dict)
                if result is not None:
                    state_dict = result
            return state_dict

    @torch.compiler.disable
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load torch.optim.AdamW's (or Adam's, or ours) format; each value goes straight to the card
        (all of it checked first; linear in the parameters, one chunk of host memory at a time).
        Hooks run as torch runs them: each pre-hook gets the dict (a returned dict replaces it),
        post-hooks once the card holds the new state."""
        with self._guard():
            self._check_open()
            self._check_param_groups()
            if isinstance(state_dict, dict):
                state_dict = state_dict.copy()  # torch's: a hook may edit its dict, not the caller's
            for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
                result = pre_hook(self, state_dict)
                if result is not None:
                    state_dict = result
            with self._hooks_off("_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks"):
                self._load_state_dict(state_dict)
            for post_hook in self._optimizer_load_state_dict_post_hooks.values():
                post_hook(self)

    def _load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_open()
        if not isinstance(state_dict, dict) or not isinstance(state_dict.get("state"), dict) \
                or not isinstance(state_dict.get("param_groups"), list) \
                or not all(isinstance(g, dict) and isinstance(g.get("params"), list)
                           for g in state_dict["param_groups"]):
            raise UserError(f"{self._who}: load_state_dict takes an optimizer state_dict (a dict with 'state' and "
                            "'param_groups', as state_dict() returns)")
        saved = map_saved_state(self, state_dict)
        # All or nothing: every group and every parameter's state is checked before anything changes.
        for group, new in zip(self.param_groups, state_dict["param_groups"], strict=True):
            check_group({**group, **{k: v for k, v in new.items() if k != "params"}}, adamw=self._adamw,
                        who=self._who)
        checked = {id(p): (p, self._check_param_state(p, saved.get(id(p)) or {}))
                   for group in self.param_groups for p in group["params"] if id(p) in self._slots}
        # torch's load casts every state tensor (a host copy of the whole state); the card needs none.
        self._state_views().forget()  # torch's load replaces the state: tensors read before are not it
        super().load_state_dict({**state_dict, "state": {}})
        self.state = CardState(self)  # type: ignore[assignment]
        by_bucket: dict[int, tuple[CardBucket, list[tuple[Slot, Any]]]] = {}
        for p, values in checked.values():
            bucket, slot = self._slots[id(p)]
            by_bucket.setdefault(id(bucket), (bucket, []))[1].append((slot, values))
        for bucket, items in by_bucket.values():
            bucket.load_slots(items)

    # ---- the step --------------------------------------------------------------------------------
    def _check_sizes(self) -> None:
        """Refuse a parameter or gradient whose size changed since the optimizer took the parameter
        (`p.data = torch.randn(2 * n)`): torch refuses it too (its state is sized at the first step)."""
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(group["params"]):
                want = self._numels.get(id(p))
                if want is None:
                    continue
                where = f"{self._who}: param_groups[{g}]['params'][{i}]"
                have = local_tensor(p).numel()
                if have != want:
                    raise UserError(f"{where} has {have} elements, {want} when it was given to the optimizer "
                                    "(resized through .data?); as torch.optim.AdamW, the optimizer's state "
                                    "cannot follow: create a new optimizer for a resized parameter")
                grad = p.grad
                if grad is not None and local_tensor(grad).numel() != want:
                    raise UserError(f"{where}: its gradient has {local_tensor(grad).numel()} elements, the "
                                    f"parameter {want} (torch.optim.AdamW refuses this too)")

    def _check_param_groups(self) -> None:
        """Follow edits of `param_groups[i]["params"]`: a parameter replaced by another tensor of the
        same dtype, size and device is trained from then on, with fresh state (torch keys state by
        the tensor object: the new one has none); any other change is refused, before anything runs."""
        recorded = getattr(self, "_group_params", None)
        if recorded is None:
            return
        if len(recorded) != len(self.param_groups):
            raise UserError(f"{self._who}: param_groups has {len(self.param_groups)} groups, {len(recorded)} when "
                            "last checked: add groups with add_param_group(), remove none")
        todo = []
        for g, (group, known) in enumerate(zip(self.param_groups, recorded, strict=True)):
            params = group["params"]
            if len(params) == len(known) and all(a is b for a, b in zip(params, known, strict=True)):
                continue
            if not isinstance(params, list) or len(params) != len(known):
                raise UserError(f"{self._who}: param_groups[{g}]['params'] changed length ({len(known)} -> "
                                f"{len(params)}); the card's memory is laid out per group when it is built: add "
                                "parameters with add_param_group(), or build a new optimizer")
            for i, (new, old) in enumerate(zip(params, known, strict=True)):
                if new is old:
                    continue
                where = f"{self._who}: param_groups[{g}]['params'][{i}] was replaced by another tensor"
                if not isinstance(new, torch.Tensor) or new.dtype != old.dtype \
                        or local_tensor(new).numel() != local_tensor(old).numel() \
                        or local_tensor(new).device != local_tensor(old).device or is_dtensor(new) != is_dtensor(old):
                    raise UserError(f"{where} of another dtype, size, device or kind; the card keeps its place for "
                                    "one of the same: build a new optimizer for a model whose parameters changed")
                if id(new) in self._slots or any(new is q for q in todo):
                    raise UserError(f"{where} that the optimizer already holds (a parameter twice)")
                if not new.is_leaf and not new.retains_grad:
                    raise UserError(f"{where} that is not a leaf (torch.optim refuses non-leaf parameters too)")
                todo.append((g, i, new, old))
        for g, i, new, old in todo:
            self._replace_param(new, old)
            self._group_params[g][i] = new

    def _check_layouts(self) -> None:
        """Refuse a parameter that is no longer contiguous (`model.to(memory_format=torch.channels_last)`
        after the optimizer was built): the card holds each parameter's elements in torch's row-major
        order and the step writes results into the parameter's memory in that order, which a strided
        parameter does not have. Refused before anything runs, rather than a raw view error midway."""
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(group["params"]):
                t = local_tensor(p)
                if id(p) in self._slots and not t.is_contiguous():
                    fmt = " (channels_last)" if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) \
                        else ""
                    raise UserError(f"{self._who}: param_groups[{g}]['params'][{i}] is not contiguous{fmt}: strides "
                                    f"{tuple(t.stride())} for shape {tuple(t.shape)}. The card keeps and writes each "
                                    "parameter in row-major order; keep the parameters contiguous (channels_last "
                                    "inputs and activations work with contiguous weights)")

    def _replace_param(self, new: torch.Tensor, old: torch.Tensor) -> None:
        """Point the slot of `old` at `new` and give it no state (zeros, masters := `new`)."""
        if type(self)._slots_for is not CardOptimizer._slots_for:
            raise UserError(f"{self._who}: a parameter in param_groups was replaced; this optimizer splits each "
                            "parameter across ranks when it is built: build a new one")
        bucket, slot = self._slots.pop(id(old))
        fresh = param_slot(new)
        slot.key, slot.data, slot.grad = new, fresh.data, fresh.grad
        self._slots[id(new)] = (bucket, slot)
        self._numels[id(new)] = self._numels.pop(id(old))
        self._state_views().forget(old)
        bucket.write(slot, "m", None)
        bucket.write(slot, "v", None)
        bucket.reset_masters(slot)
        slot.step, slot.has_state = 0, False
        bucket.shard_step_changed()

    def _plan(self) -> list[tuple[CardBucket, list[Any]]]:
        self._check_sizes()
        plans = []
        for group, buckets in zip(self.param_groups, self._buckets, strict=True):
            check_group(group, adamw=self._adamw, who=self._who)
            for b in buckets:
                b.maximize = bool(group.get("maximize", False))
                runs = b.plan(functools.partial(hyper_for, group), self.kind) if b.shard is not None else []
                if runs or b.empty_with_grad():
                    plans.append((b, runs))
        return plans

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        with self._guard():
            return self._step(closure)

    def _before_step(self) -> dict[int, int]:
        """What every step does first (`card_step`): follow param_groups edits, write edited state
        tensors to the card; returns the step counts of the parameters whose state is held."""
        self._check_open()
        self._check_param_groups()
        self._check_layouts()
        self._sync_state()
        return {id(s.p): self._slots[id(s.p)][1].step for s in self._state_views().held.values()
                if id(s.p) in self._slots}

    def _after_step(self, before: dict[int, int]) -> None:
        def moved(p: torch.Tensor) -> bool:
            found = self._slots.get(id(p))
            return found is None or found[1].step != before.get(id(p))

        self._state_views().advance(moved)

    def _step(self, closure: Callable[[], Any] | None) -> Any:
        self._check_open()
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = self._plan()
        if not plans:
            return loss
        # The inf/NaN scan, and where the card's memory is host memory the comparison of every
        # tensor with its masters (those the kernel does not read in place), run before the first
        # launch on two threads (their units release the GIL), while the card is idle; elsewhere
        # the comparison runs piece by piece in the stream and the scan beside the first piece's
        # staging (the first launch waits for it).
        verdict, compared = self._prefix(plans, scan=self.skip_nonfinite, wait=None)
        if verdict is False:
            return self._skipped(loss)
        gate = verdict if callable(verdict) else None
        for i, (b, runs) in enumerate(plans):
            path = self._path_for(b)
            first = gate if i == 0 else None
            ok = b.run(runs, detect=self.detect_changes, gate=first) if path is None or not runs \
                else self._run_staged(path, b, runs, first)
            if not ok:
                return self._skipped(loss)
        return loss

    def _run_staged(self, path: DevicePath, b: CardBucket, runs: list[Any], gate: Callable[[], bool] | None) -> bool:
        """`CardBucket.run` through the staged data path: the same pieces, registers and counts."""
        if not path.run(b, runs, b._pieces_plan(runs), self.detect_changes, gate):
            return False
        b._count_empty()
        for slots, *_ in runs:
            for s in slots:
                s.step += 1
                s.has_state = True
        b.shard_step_changed()
        return True

    def _prefix(self, plans: list[tuple[CardBucket, list[Any]]], *, scan: bool, wait: bool | None
                ) -> tuple[Any, set[int]]:
        """Start the step's host work that precedes the card: the inf/NaN scan (if `scan`) and the
        comparisons that can run anywhere (`CardBucket.compare_units`). Returns (verdict, ids of the
        buckets compared): verdict True/False when the units ran here (always when some bucket was
        compared, or `wait`), else a callable giving it later (a stream gate)."""
        units: list[Callable[[np.ndarray], bool]] = []
        if scan:
            for b, runs in plans:
                more, ok = b.scan_units(runs) if b.shard is not None else ([], True)
                if not ok:
                    return False, set()
                units += more
        compared: set[int] = set()
        if self.detect_changes:
            # The staged path detects changes itself, on the device (devpath.py).
            todo = [(b, b.compare_slots(runs) if b.shard is not None and self._path_for(b) is None else None)
                    for b, runs in plans]
            # A few small tensors (biases, norms: the large ones are read in place on the software
            # cards) are left to the stream, which compares each as it stages its piece, beside the
            # kernel on the piece before, instead of delaying the first launch.
            small = sum(4 * s.numel for _, ts in todo if ts for s, _ in ts) < SCAN_INLINE_BYTES
            if not (small and not scan):
                for b, ts in todo:
                    if ts is not None:
                        units += b.compare_units(ts)
                        compared.add(id(b))
        if not units:
            return True, compared
        run = _Scan(units, self._scan_pool(), self._host_raw)
        if compared or wait:
            return run.finish(), compared
        return run.finish, compared

    def _skipped(self, loss: Any) -> Any:
        self.skipped_steps += 1
        log.warning("%s: step skipped, a gradient holds inf or NaN (state unchanged)", self._who)
        return loss

    def _scan_pool(self) -> ThreadPoolExecutor:
        pool = getattr(self, "_scan_worker", None)
        if pool is None:
            pool = self._scan_worker = ThreadPoolExecutor(1, thread_name_prefix="nic-scan")
        return pool


def card_step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A card optimizer's `step`: edited state tensors and param_groups edits reach the card first,
    the state tensors handed out go stale after it (`StateViews`), and torch.compile leaves it out of
    its graph (a graph break, as for any step dynamo cannot trace: the card's step is host calls)."""
    @functools.wraps(fn)
    def step(self: CardOptimizer, *args: Any, **kwargs: Any) -> Any:
        with self._guard():
            before = self._before_step()
            try:
                return fn(self, *args, **kwargs)
            finally:
                self._after_step(before)

    step._card_step = True  # type: ignore[attr-defined]
    return torch.compiler.disable(step)


CardOptimizer.step = card_step(CardOptimizer.step)  # type: ignore[method-assign]


def as_step(value: Any, who: str) -> int:
    """A saved step count (number or tensor) as an int; UserError naming `who` if not a whole count >= 0."""
    step = _number(value)
    if step is None or not math.isfinite(step) or step != int(step) or step < 0:
        raise UserError(f"{who}: step {value!r} is not a whole count >= 0")
    return int(step)


class _Scan:
    """A step's scan and comparison units on two threads: the worker takes units from the front,
    the caller of `finish` from the back, until they meet or one finds inf/NaN. Each thread hands
    its units its own block (a host chunk). numpy's dot products and copies, memcmp and the
    compiled comparison (pynq_driver.native) release the GIL, so the two run at once. Units that
    read less than SCAN_INLINE_BYTES in all run on the caller's thread only."""

    def __init__(self, units: list[Callable[[np.ndarray], bool]], pool: ThreadPoolExecutor,
                 blocks: tuple[np.ndarray, np.ndarray]) -> None:
        self.units = units
        self.lock = threading.Lock()
        self.lo, self.hi = 0, len(units)
        self.bad = False
        self.blocks = blocks
        small = sum(getattr(u, "nbytes", SCAN_INLINE_BYTES) for u in units) < SCAN_INLINE_BYTES
        self.future = pool.submit(self._work, True) if units and not small else None

    def _take(self, front: bool) -> Callable[[np.ndarray], bool] | None:
        with self.lock:
            if self.bad or self.lo >= self.hi:
                return None
            if front:
                self.lo += 1
                return self.units[self.lo - 1]
            self.hi -= 1
            return self.units[self.hi]

    def _work(self, front: bool) -> None:
        blk = self.blocks[1 if front else 0]
        while (unit := self._take(front)) is not None:
            if not unit(blk):
                self.bad = True

    def finish(self) -> bool:
        """Help until every unit ran (or one found inf/NaN): True when all gradients are finite."""
        self._work(False)
        if self.future is not None:
            self.future.result()
        return not self.bad


__all__ = ["DEFAULT_BACKEND", "DEFAULT_TARGET", "KERNEL_DTYPES", "SCAN_INLINE_BYTES", "CardOptimizer", "DevicePool",
           "as_step", "check_group", "hyper_for", "map_saved_state", "torch_defaults"]
