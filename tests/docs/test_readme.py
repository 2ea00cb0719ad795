"""README.md is a front door: short, the two commands, the one-line torch change, links into docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make demo" in text and "make test" in text
    assert "from pynq_driver.optim import NicAdamW" in text
    assert "optimizer = NicAdamW(model.parameters(), lr=3e-4)" in text
    assert "shared/design.md" not in text  # not in the repository a user clones
    for page in ("docs/getting-started.md", "docs/design.md", "docs/reference/cli.md", "docs/changelog.md",
                 "bench/results.md"):
        assert f"({page})" in text, page


def test_no_measured_figures_outside_bench_results():
    """Measured figures live in bench/results.md only: no speed ratios ("1.12x") in README or docs."""
    import re

    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        found = re.findall(r"\b\d+\.\d+x\b", page.read_text())
        assert not found, f"{page.relative_to(ROOT)} quotes {found}: link bench/results.md instead"
