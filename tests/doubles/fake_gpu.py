"""TEST DOUBLE: a GPU for a machine that has none, with an allocator that counts its bytes.

Tensors on it report device `fakegpu:0` (torch's PrivateUse1 device type, renamed) and keep
their data in an ordinary host tensor inside (`FakeGpuTensor`, a wrapper subclass). While
`FakeGpu()` is active (a `TorchDispatchMode`), every aten op the code under test runs goes
through it: ops on fakegpu tensors run on their host data and return fakegpu tensors;
`.to("fakegpu")`, `torch.empty(..., device="fakegpu")` and the other factories create them;
`.cpu()`, `.to("cpu")` and `copy_` between the two are the only ways across, as on a GPU; an op
mixing a fakegpu tensor with a host tensor of more than one element fails as CUDA's
"Expected all tensors to be on the same device". `.numpy()` of a fakegpu tensor fails as for
a CUDA tensor (its device type is not cpu), so the driver takes the paths it takes for a GPU.

The allocator: a fakegpu result whose storage is none of its inputs' (not a view, not an
in-place result) is an allocation: its bytes are added to `live` when it is made and removed
when its last fakegpu tensor dies (weakref finalizers: CPython frees at once). `peak` is the
highest `live` since `reset_peak()`. These are the bytes the code would have held on a real
GPU at once (torch.cuda.max_memory_allocated, without the caching allocator's rounding).

What it does not model: streams, asynchrony, pinned memory, kernels' numerics (every op runs
on the host: results are the CPU's, bit for bit).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

if torch._C._get_privateuse1_backend_name() == "privateuseone":
    # torch's own setup of PrivateUse1 as a Python backend (device guard, hooks): without it
    # indexing a tensor of the device fails ("not linked with support"). Process-wide, once.
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(rename="fakegpu")
DEVICE_TYPE = torch._C._get_privateuse1_backend_name()
DEVICE = torch.device(DEVICE_TYPE, 0)


class DeviceMemory:
    """Bytes held on the fake GPU: `live` now, `peak` since `reset_peak()`, `allocations` made."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.allocations = 0
        self._storages: dict[int, list[int]] = {}  # host storage pointer -> [fakegpu tensors alive, bytes]

    def reset_peak(self) -> None:
        self.peak = self.live

    def _adopt(self, t: FakeGpuTensor) -> None:
        storage = t.inner.untyped_storage()
        key = storage.data_ptr()
        entry = self._storages.get(key)
        if entry is None:
            entry = self._storages[key] = [0, storage.nbytes()]
            self.live += entry[1]
            self.allocations += 1
            self.peak = max(self.peak, self.live)
        entry[0] += 1
        weakref.finalize(t, self._release, key)

    def _release(self, key: int) -> None:
        entry = self._storages.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._storages[key]


MEMORY = DeviceMemory()


class FakeGpuTensor(torch.Tensor):
    """A tensor on `fakegpu:0`; its data is `inner`, a host tensor of the same shape and strides."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor, requires_grad: bool = False) -> FakeGpuTensor:
        r = torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(),
                                                storage_offset=inner.storage_offset(), dtype=inner.dtype,
                                                device=DEVICE, requires_grad=requires_grad)
        r.inner = inner
        MEMORY._adopt(r)
        return r

    # A real device tensor has a storage and a data pointer (the driver compares parameters'
    # address ranges): those of the host data stand in for them.
    def untyped_storage(self) -> torch.UntypedStorage:
        return self.inner.untyped_storage()

    def data_ptr(self) -> int:
        return self.inner.data_ptr()

    def __repr__(self, **kwargs: Any) -> str:
        return f"FakeGpuTensor({self.inner!r}, device={DEVICE})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        with FakeGpu():
            return func(*args, **(kwargs or {}))


def _is_gpu_device(dev: Any) -> bool:
    return dev is not None and torch.device(dev).type == DEVICE_TYPE


class FakeGpu(TorchDispatchMode):
    """While active, fakegpu tensors behave as tensors on a GPU (see the module docstring)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        flat, _ = tree_flatten((args, kwargs))
        inputs = [t for t in flat if isinstance(t, torch.Tensor)]
        on_gpu = any(isinstance(t, FakeGpuTensor) for t in inputs)
        name = func.overloadpacket.__name__
        target = kwargs.get("device")
        if target is not None:
            kwargs["device"] = torch.device("cpu") if _is_gpu_device(target) else target
        crossing = name in ("copy_", "_to_copy", "_copy_from", "_copy_from_and_resize")
        if on_gpu and not crossing:
            for t in inputs:
                if not isinstance(t, FakeGpuTensor) and t.device.type == "cpu" and t.numel() > 1:
                    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two "
                                       f"devices, {DEVICE} and cpu! ({func})")

        def unwrap(t: Any) -> Any:
            return t.inner if isinstance(t, FakeGpuTensor) else t

        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        if name in ("copy_",) or (func._schema.is_mutable and name.endswith("_")):
            return args[0]  # in place: the tensor written is the result
        if name == "_to_copy":
            gpu_out = _is_gpu_device(target) if target is not None else on_gpu
        elif target is not None:
            gpu_out = _is_gpu_device(target)
        else:
            gpu_out = on_gpu

        def wrap(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and not isinstance(t, FakeGpuTensor) and gpu_out:
                return FakeGpuTensor(t)
            return t

        return tree_map(wrap, out)


def to_gpu(t: torch.Tensor, requires_grad: bool = False) -> FakeGpuTensor:
    """A fakegpu copy of host tensor `t` (a leaf; `requires_grad` for a parameter)."""
    return FakeGpuTensor(t.detach().clone(), requires_grad=requires_grad)


__all__ = ["DEVICE", "MEMORY", "DeviceMemory", "FakeGpu", "FakeGpuTensor", "to_gpu"]
