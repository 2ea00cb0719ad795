"""Views of a card optimizer's per-parameter state: `optimizer.state` (`CardState`) and
`optimizer.state[p]` (`ParamState`), torch's mappings whose values are read from and written to
the card.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Protocol

import torch

from hls.errors import UserError

MASTER_KEY = "master_param"
STATE_KEYS = ("step", "exp_avg", "exp_avg_sq")


class StateOwner(Protocol):
    """What the views need of their optimizer (`base.CardOptimizer`, which keeps these internal)."""

    param_groups: list[dict[str, Any]]
    _slots: dict[int, tuple[Any, Any]]  # id(p) -> (its CardBucket, its Slot)

    def _check_open(self) -> None: ...

    def _read_param_state(self, p: torch.Tensor, key: str) -> torch.Tensor: ...

    def _write_param_state(self, p: torch.Tensor, key: str, value: Any) -> None: ...

    def _set_param_state(self, p: torch.Tensor, st: dict[str, Any]) -> None: ...


class CardState(MutableMapping):
    """`optimizer.state` of a card optimizer: torch's per-parameter state, read from and written to the card.

    `opt.state[p]` is a mapping with torch's keys (`step`, `exp_avg`, `exp_avg_sq`, and for bf16
    parameters `master_param`); each read is a fresh tensor read from the card (a DTensor shaped
    and placed like `p` when `p` is one), each assignment is written to the card. Parameters have
    state once they stepped (or state was loaded), as in torch; `len(opt.state)` counts them.
    """

    def __init__(self, opt: StateOwner) -> None:
        self._opt = opt
        self._other: dict[Any, Any] = {}  # keys that are not our parameters (torch's defaultdict keeps them)

    def __getitem__(self, p: Any) -> Any:
        self._opt._check_open()
        if isinstance(p, torch.Tensor) and id(p) in self._opt._slots:
            return ParamState(self._opt, p)
        return self._other.setdefault(p, {})

    def __contains__(self, p: Any) -> bool:
        self._opt._check_open()
        if isinstance(p, torch.Tensor) and id(p) in self._opt._slots:
            return self._opt._slots[id(p)][1].has_state
        return p in self._other

    def __setitem__(self, p: Any, value: Any) -> None:
        self._opt._check_open()
        if isinstance(p, torch.Tensor) and id(p) in self._opt._slots:
            self._opt._set_param_state(p, dict(value))
        else:
            self._other[p] = value

    def __delitem__(self, p: Any) -> None:
        self._opt._check_open()
        if isinstance(p, torch.Tensor) and id(p) in self._opt._slots:
            if not self._opt._slots[id(p)][1].has_state:
                raise KeyError(p)
            self._opt._set_param_state(p, {})
        else:
            del self._other[p]

    def __iter__(self) -> Iterator[Any]:
        self._opt._check_open()
        for group in self._opt.param_groups:
            for p in group["params"]:
                found = self._opt._slots.get(id(p))
                if found is not None and found[1].has_state:
                    yield p
        yield from self._other

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"CardState({len(self)} parameters with state on the card)"


class ParamState(MutableMapping):
    """The state of one parameter: every read comes from the card, every assignment goes to it."""

    def __init__(self, opt: StateOwner, p: torch.Tensor) -> None:
        self._opt, self._p = opt, p

    def _keys(self) -> tuple[str, ...]:
        bucket, slot = self._opt._slots[id(self._p)]
        if not slot.has_state:
            return ()
        return (*STATE_KEYS, MASTER_KEY) if bucket.dtype != torch.float32 else STATE_KEYS

    def __getitem__(self, key: str) -> torch.Tensor:
        self._opt._check_open()
        if key not in self._keys():
            raise KeyError(key)
        return self._opt._read_param_state(self._p, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._opt._check_open()
        self._opt._write_param_state(self._p, key, value)

    def __delitem__(self, key: str) -> None:
        raise UserError(f"optimizer.state[p][{key!r}]: the card keeps step, exp_avg and exp_avg_sq together; "
                        "`del optimizer.state[p]` resets all of them")

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:
        return f"ParamState(keys={list(self._keys())}, on the card)"


__all__ = ["MASTER_KEY", "STATE_KEYS", "CardState", "ParamState", "StateOwner"]
