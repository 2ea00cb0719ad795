"""Import paths of earlier releases, kept working: each old module name is the new module itself.

The driver's modules moved into `backends/` and `optim/`; a script that imports
`pynq_driver.distributed` or `pynq_driver.alveo` gets the very module object at its new home
(one module, two names: monkeypatching either patches both). Loaded on first use, so importing
`pynq_driver` does not import torch or PYNQ.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "pynq_driver.alveo": "pynq_driver.backends.alveo",
    "pynq_driver.buckets": "pynq_driver.optim.buckets",
    "pynq_driver.distributed": "pynq_driver.optim.sharded",
    "pynq_driver.kernel": "pynq_driver.registers",
    "pynq_driver.rtlsim": "pynq_driver.backends.rtlsim",
    "pynq_driver.soft": "pynq_driver.backends.soft",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module at its new home is already executed


def install() -> None:
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
