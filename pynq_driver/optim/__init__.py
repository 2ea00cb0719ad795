"""The torch side of the driver, the only package that imports torch: `NicAdamW`/`NicAdam`
(drop-in `torch.optim` optimizers whose state lives on the card) and `ShardedNicOptimizer`
(ZeRO-1-style sharding across ranks, one card per rank).

    from pynq_driver.optim import NicAdamW
"""

from pynq_driver.optim.adam import NicAdam, NicAdamW
from pynq_driver.optim.sharded import ShardedNicOptimizer

__all__ = ["NicAdam", "NicAdamW", "ShardedNicOptimizer"]
