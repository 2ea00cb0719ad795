"""Every relative link in README.md, docs/ and the READMEs that point into docs/ reaches an
existing file, and a `#anchor` into a Markdown page names one of its headings (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "pynq_driver" / "README.md", ROOT / "bitstreams" / "README.md",
         *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = FENCED.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code is not a link
    return LINK.findall(text)


def test_pages_exist():
    assert all(p.is_file() for p in PAGES)


def test_slug_matches_github():
    assert slug("3. Update semantics") == "3-update-semantics"
    assert slug("STATUS and PORT_ERR") == "status-and-port_err"
    assert slug("Registry manifest (`bitstreams/<target>/<name>.manifest.json`)") == \
        "registry-manifest-bitstreamstargetnamemanifestjson"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
        elif ROOT not in dest.parents and dest != ROOT:
            bad.append(f"{target}: outside the repository")
    assert not bad, bad
