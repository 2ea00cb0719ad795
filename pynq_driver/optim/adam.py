"""`NicAdamW` / `NicAdam`: drop-in `torch.optim` optimizers whose state lives on the card.

The one-line change in a training script::

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)       # before
    optimizer = NicAdamW(model.parameters(), lr=3e-4)                # after (backend="csim")

How the parameters map onto the card: per param group and parameter dtype, one `ShardState`
holds the fp32 master parameters and both moments in card memory for the whole run; each
parameter (for an FSDP2 DTensor parameter: its local shard) has its own beat-aligned range of
it and its own step count, as torch keeps one per parameter (`buckets.py`). `step()` runs the
kernel over the runs of consecutive parameters that have a gradient and share a step count,
each with its own scalar registers, streaming gradients chunk by chunk from `p.grad` and
writing the results straight into the parameters: two chunks of host memory, shared by all
shards. A group can have its own lr and weight decay, so every `torch.optim.lr_scheduler` works.

Behaviour is torch.optim.AdamW's (or Adam's), parameter by parameter:
- parameters without a gradient in a step are skipped (moments and step count untouched);
  parameters frozen when the optimizer was built have their place on the card and train once
  they get gradients;
- any change to a parameter between steps (`p.data` edits, `model.load_state_dict`, a broadcast)
  is picked up, bit for bit (-0.0 for 0.0 and another NaN payload count). Where the card's
  memory is host memory (csim, golden) and a tensor's pieces are whole, 64-byte aligned beats
  (fp32; torch aligns its tensors), the kernel reads its masters from the parameter itself,
  every stripe a view of it, and writes the new ones to the card's copy as always: nothing to
  compare. Elsewhere the masters on the card are compared bit for bit with the parameters (bf16:
  with the bf16 rounding the card returned) before the kernel runs, and replaced where they
  differ: on the software cards on two threads before the first launch (with the inf/NaN scan,
  if asked for; a few small tensors, under 2 MiB in all, as the stream stages their piece), on a
  card read back into the free host chunk as the chunks stream.
  `detect_changes=False` skips the comparison, for scripts that never touch parameters between
  steps: an edit may then be overwritten by the card's copy (not where the kernel reads the
  parameter itself);
- parameters on a GPU (any `torch.accelerator`) take the staged data path (`devpath.py`): a
  pinned ring, side streams and events, no host synchronisation at the end of `step()`, and
  change detection by hashes taken on the device (only a tensor whose hash changed is read back
  and compared). `data_path="pipeline"` forces it on CPU tensors, `"direct"` turns it off;
- `optimizer.state[p]` has `step`, `exp_avg`, `exp_avg_sq` (and `master_param` for bf16
  parameters): each read comes from the card, each assignment goes to it, `del` resets it, and
  a parameter has state once it stepped. Tools that read it (torch.distributed.checkpoint's
  `get_optimizer_state_dict`, ZeroRedundancyOptimizer's `load_state_dict`) work; DTensor
  parameters (FSDP2) get DTensor state placed like the parameter. The tensors are host tensors
  (for DTensors: host local tensors), read a chunk at a time: a checkpoint never brings the
  offloaded state back to the GPU. In-place edits of them reach the card before the next step
  or read (`state.StateViews`); an edit of one read before a step that since updated its
  parameter raises StateError (torch's tensors are live, ours are copies);
- a parameter replaced in `param_groups[i]["params"]` trains with fresh state from the next
  step; `opt.step()` in `torch.compile`d code is a graph break; a parameter that stopped being
  contiguous (channels_last) is refused at the next step.

`state_dict()` returns exactly `torch.optim.AdamW`'s (or `Adam`'s) format, read from the card.
For bf16 parameters one more entry, `master_param` (fp32), carries the card's master copy;
torch ignores it. Loading writes the saved masters, and the next step keeps them only where
they still round to the model's bf16 values (else the model's value). torch's own
`load_state_dict` casts the moments to the parameter dtype; ours keeps them fp32.

`torch.amp.GradScaler` works as with any torch optimizer: `scaler.step(opt)` unscales the
gradients on the host and skips the step when one is not finite.

The optimizer cannot be pickled or deep-copied (its state is on a card): both raise TypeError
saying to save `state_dict()` instead. After `close()` every call raises DeviceClosed.

Semantics differ from torch's only by rounding (the golden model computes
`sqrt(v) * f32(1/sqrt(bc2)) + eps` and `step_size = f32(lr/bc1)`; torch divides by
`sqrt(bc2)`). A gradient holding inf/NaN is applied as torch applies it (the parameters and
moments it reaches become inf/NaN); `skip_nonfinite=True` opts into skipping such a step on the
card instead (state unchanged, `skipped_steps` counts it, a warning is logged), at the cost of one
pass over the gradients before the card starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hls.ports import STATE_ARRAYS, parse_port
from pynq_driver.optim.base import (
    DEFAULT_BACKEND,
    DEFAULT_TARGET,
    KERNEL_DTYPES,
    CardOptimizer,
    DevicePool,
    torch_defaults,
)
from pynq_driver.optim.state import MASTER_KEY, CardState


class _NicAdamBase(CardOptimizer):
    _staged_step = True

    def __init__(self, params: Iterable[Any], lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, backend: str = DEFAULT_BACKEND, target: str = DEFAULT_TARGET,
                 lanes: int | None = None, skip_nonfinite: bool = False, chunk_elems: int | None = None,
                 **device_options: Any) -> None:
        defaults = torch_defaults(lr, betas, eps, weight_decay, adamw=self._adamw, amsgrad=amsgrad,
                                  maximize=maximize, foreach=foreach, capturable=capturable,
                                  differentiable=differentiable, fused=fused)
        self._who = type(self).__name__
        super().__init__(params, defaults)
        self._init_card(backend, target, lanes, skip_nonfinite, chunk_elems, device_options)

    def placement(self) -> list[dict[str, Any]]:
        """Where the optimizer state lives: one entry per shard (backend, kernel, banks, bytes)."""
        rows = []
        for gi, buckets in enumerate(self._buckets):
            for bucket in buckets:
                shard = bucket.shard
                if shard is None:
                    continue
                banks = {cu: shard.dev.banks(cu) for cu in range(shard.dev.cus)}
                rows.append({
                    "group": gi, "dtype": str(bucket.dtype).replace("torch.", ""), "params": shard.n,
                    "backend": shard.backend, "kernel": shard.spec.name, "target": shard.spec.target,
                    "state_bytes": 12 * shard.n,
                    # In stripe order (dict.fromkeys keeps it): a string sort put HBM[10] before HBM[8].
                    "banks": {a: list(dict.fromkeys(b[port] for b in banks.values() for port in b
                                                    if parse_port(port)[::2] == (a, "rd"))) for a in STATE_ARRAYS},
                })
        return rows


class NicAdamW(_NicAdamBase):
    """`torch.optim.AdamW` with its state (fp32 masters, exp_avg, exp_avg_sq) on the card.

    torch's keywords: `amsgrad=True`, `capturable=True` and `differentiable=True` are refused
    (ValueError naming each and why); `maximize` is honoured; `foreach` and `fused` choose among
    torch's host implementations, so they are kept in the param groups (state_dicts interchange)
    and change nothing on the card. Any other keyword must be one of the backend's (TypeError
    otherwise, as for a misspelt torch keyword)."""

    _adamw = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, **options: Any) -> None:
        if "decoupled_weight_decay" in options:  # torch.optim.AdamW takes no such keyword either
            raise TypeError("NicAdamW.__init__() got an unexpected keyword argument 'decoupled_weight_decay' "
                            "(AdamW's weight decay is always decoupled, as torch.optim.AdamW's: use NicAdam for "
                            "L2 decay)")
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, **options)


class NicAdam(_NicAdamBase):
    """`torch.optim.Adam` (L2 weight decay added to the gradient) with its state on the card;
    `decoupled_weight_decay=True` makes it AdamW, as it makes torch.optim.Adam."""

    _adamw = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 decoupled_weight_decay: bool = False, **options: Any) -> None:
        if not isinstance(decoupled_weight_decay, bool):
            raise TypeError(f"NicAdam: decoupled_weight_decay must be True or False, got {decoupled_weight_decay!r}")
        self._adamw = decoupled_weight_decay
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, **options)


# CardOptimizer, CardState, DevicePool, KERNEL_DTYPES and MASTER_KEY live in base.py and state.py (kept importable here)
__all__ = ["KERNEL_DTYPES", "MASTER_KEY", "CardOptimizer", "CardState", "DevicePool", "NicAdam", "NicAdamW"]
