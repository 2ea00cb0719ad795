"""pytest imports test modules by basename (rootdir-relative imports without packages): two
`test_x.py` in different folders stop the whole suite at collection. A targeted run of one folder
never notices, so this checks the whole tree."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (pytest stops at collection): {clashes}"
