"""The owner's update in the ring: the card's Adam kernel run on its shard (`ShardState`).

`ShardKernel` is the `update(reduced_chunk, grad_scale) -> params` callable the card model
(`hls.net.card.Card`) calls once per step: the reduced chunk (S elements of the wire dtype) is the
kernel's gradient input as it is, and `grad_scale` (float64: the 1/N average times the host's
unscale and clip factors; None when the two-phase step found a non-finite gradient) goes to the
kernel's `gs` register, rounded once to fp32 (design.md 3 and 8.1). The kernel runs on a real
device of the driver (`golden` or `csim` software card): register writes, buffers in its banks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hls.golden import Hyper
from hls.net import ring
from pynq_driver.device import Device
from pynq_driver.errors import StateError
from pynq_driver.shard import ShardState


class ShardKernel:
    """The owner's shard of `size` elements on `dev`, and the update the card calls.

    Set `hyper` (lr, betas, eps, weight decay, step t) before each step, as the host writes the
    kernel's registers; its `grad_scale` is replaced by the card's scale.
    """

    def __init__(self, dev: Device, params: np.ndarray) -> None:
        self.shard = ShardState(dev, params, nonfinite="skip")
        self.hyper: Hyper | None = None
        self.out_dtype = dev.spec.out_dtype
        self.updates = 0
        self.skipped = 0
        self.last_grad_scale: float | None = None  # the scale of the last update (None: it was skipped)

    @property
    def size(self) -> int:
        return self.shard.n

    def __call__(self, reduced_chunk: np.ndarray, grad_scale: float | None) -> np.ndarray:
        if self.hyper is None:
            raise StateError("the ring's update ran before the step's hyperparameters were set")
        self.last_grad_scale = grad_scale
        if grad_scale is None:  # the two-phase step found inf/NaN somewhere: no update, masters unchanged
            self.skipped += 1
            return ring.output_params(self.shard.params(), self.out_dtype)
        hyper = dataclasses.replace(self.hyper, grad_scale=float(grad_scale))
        # The reduced chunk goes in as it is: inf/NaN are applied (torch's AdamW would, too); the
        # skip policy is the two-phase step's, decided on every card at once.
        out = self.shard.step(reduced_chunk, hyper, apply_nonfinite=True)
        self.updates += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        """The owner's state: step, params (fp32 masters), exp_avg, exp_avg_sq (S elements each), spec."""
        return self.shard.state_dict()

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.shard.load_state_dict(sd)

    def close(self) -> None:
        self.shard.close()


__all__ = ["ShardKernel"]
