"""Print the test time per module from a pytest JUnit report, largest first: where `make test`'s
minutes go (with --dist loadfile a module runs on one worker, so the largest bounds the run)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def main(path: str) -> None:
    totals: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "?").split(".")
        module = ".".join(parts[:-1] if parts[-1][:4] == "Test" else parts)  # a test class's module
        totals[module] += float(case.get("time", 0))
    print(f"test time per module ({sum(totals.values()):.0f} s in all, summed over workers):")
    for module, seconds in totals.most_common(25):
        print(f"{seconds:8.0f} s  {module}")


if __name__ == "__main__":
    main(sys.argv[1])
