"""Views of a card optimizer's per-parameter state: `optimizer.state` (`CardState`) and
`optimizer.state[p]` (`ParamState`), torch's mappings whose values are read from and written to
the card.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Protocol

import torch

from hls.errors import UserError
from pynq_driver.errors import StateError

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


class _Snapshot:
    """One state tensor of one parameter in the user's hands: `keep` shares its storage and version
    counter with every tensor handed out for it (views, the DTensor's local tensor), so an in-place
    edit of any of them shows as `keep._version != version`."""

    __slots__ = ("p", "key", "keep", "obj", "version", "alive", "stale", "__weakref__")

    def __init__(self, p: torch.Tensor, key: str, keep: torch.Tensor, obj: Any = None) -> None:
        self.p, self.key, self.keep = p, key, keep
        self.obj = weakref.ref(obj) if obj is not None else None  # a tensor the user assigned (None: read)
        self.version = keep._version
        self.alive = 0  # objects handed out that are still referenced
        self.stale = False  # the card's state moved on (a step) after it was read

    def edited(self) -> bool:
        return self.keep._version != self.version


class StateViews:
    """The state tensors handed out by `optimizer.state[p][key]` and `state_dict()`, and those
    assigned to `optimizer.state[p]`, tracked so that their in-place edits reach the card.

    torch's state tensors are the optimizer's state itself: `opt.state[p]["exp_avg"].zero_()`
    zeroes it. The card's state is elsewhere, so each tensor handed out is a host copy, tracked
    here by its version counter (bumped by every in-place op): an edited copy is written to the
    card before the next step, state_dict() or read of the same state, whether or not the user
    still holds it (its storage is kept until then). While a copy is current, every read of the
    same state returns a view of it (two reads alias, as in torch). A step makes the copies of
    the parameters it updated stale: torch would update the user's tensor in place, the card
    cannot, so an edit of a stale copy raises at the next sync instead of landing on the newer
    state. Copies nobody holds and nobody edited are dropped (their memory freed) as they die.

    Finalizers only do bookkeeping (they run wherever the last reference dies); card I/O happens
    in `CardOptimizer._sync_state`, under the optimizer's lock.
    """

    def __init__(self) -> None:
        self.current: dict[tuple[int, str], _Snapshot] = {}
        self.held: dict[int, _Snapshot] = {}  # id -> every snapshot alive or carrying an edit not yet written

    def lookup(self, p: torch.Tensor, key: str) -> _Snapshot | None:
        return self.current.get((id(p), key))

    def track(self, p: torch.Tensor, key: str, keep: torch.Tensor, handed: list[Any], assigned: Any = None) -> None:
        """Record that `handed` (tensors sharing `keep`'s version counter) went to the user, or
        (`assigned`) that the user assigned that tensor as the state."""
        snap = self.current.get((id(p), key))
        if snap is None or snap.keep is not keep:
            snap = _Snapshot(p, key, keep, assigned)
            self.current[(id(p), key)] = snap
            self.held[id(snap)] = snap
        for obj in handed:
            snap.alive += 1
            weakref.finalize(obj, self._release, weakref.ref(snap))

    def _release(self, ref: weakref.ref) -> None:
        snap = ref()
        if snap is None:
            return
        snap.alive -= 1
        if snap.alive <= 0 and not snap.edited():
            self._drop(snap)

    def _drop(self, snap: _Snapshot) -> None:
        self.held.pop(id(snap), None)
        k = (id(snap.p), snap.key)
        if self.current.get(k) is snap:
            del self.current[k]

    def forget(self, p: torch.Tensor | None = None, key: str | None = None) -> None:
        """Stop tracking the tensors of `p` (all keys, or `key`; all parameters if None): the state
        was replaced (assignment, `del`, load_state_dict), which in torch detaches the old tensors."""
        for snap in list(self.held.values()):
            if (p is None or snap.p is p) and (key is None or snap.key == key):
                self._drop(snap)

    def edits(self) -> list[_Snapshot]:
        """Snapshots edited since they were last written; StateError for one edited after a step."""
        out = []
        for snap in list(self.held.values()):
            if not snap.edited():
                continue
            if snap.stale:
                self._drop(snap)  # raised once: the edit cannot be applied to the state it was meant for
                raise StateError(
                    f"optimizer.state[p][{snap.key!r}] (or its state_dict() entry) was read before a step and "
                    "edited in place after it: torch's state tensors are the live state, which its step updates "
                    "in place, but the card's are copies of the state when read, so this edit would overwrite "
                    "the newer state with an edited old one. Read optimizer.state[p] again after the step and "
                    "edit that")
            out.append(snap)
        return out

    def written(self, snap: _Snapshot) -> None:
        snap.version = snap.keep._version
        if snap.alive <= 0:
            self._drop(snap)

    def advance(self, moved: Callable[[torch.Tensor], bool]) -> None:
        """After a step: the snapshots of every parameter `moved` says changed on the card go stale."""
        for snap in list(self.held.values()):
            if not snap.stale and moved(snap.p):
                snap.stale = True
                k = (id(snap.p), snap.key)
                if self.current.get(k) is snap:
                    del self.current[k]
                if snap.alive <= 0:
                    self._drop(snap)


__all__ = ["MASTER_KEY", "STATE_KEYS", "CardState", "ParamState", "StateOwner", "StateViews"]
