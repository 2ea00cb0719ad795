"""The torch side of the driver, the only package that imports torch: `NicAdamW`/`NicAdam`
(drop-in `torch.optim` optimizers whose state lives on the card), `ShardedNicOptimizer`
(ZeRO-1-style sharding across ranks, one card per rank) and `RingNicAdamW`/`RingNicAdam` (the
ranks' cards synchronise the gradients and run the update on the wire, design.md section 8).

    from pynq_driver.optim import NicAdamW
"""

from pynq_driver.optim.adam import NicAdam, NicAdamW
from pynq_driver.optim.ring import RingNicAdam, RingNicAdamW
from pynq_driver.optim.sharded import ShardedNicOptimizer

__all__ = ["NicAdam", "NicAdamW", "RingNicAdam", "RingNicAdamW", "ShardedNicOptimizer"]
