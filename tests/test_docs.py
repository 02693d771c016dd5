"""The manual holds together: every relative link in README.md and docs/ names a file that exists, and every page
under docs/ is reachable from the README (directly or through another page)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _links(page: Path) -> list[Path]:
    return [
        (page.parent / target).resolve()
        for target in LINK.findall(page.read_text())
        if "://" not in target and not target.startswith("mailto:")
    ]


def test_every_relative_link_resolves():
    broken = [f"{page.relative_to(ROOT)} -> {link}" for page in _pages() for link in _links(page) if not link.exists()]
    assert not broken, broken


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = set(), [(ROOT / "README.md").resolve()]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md":
            continue
        seen.add(page)
        todo.extend(_links(page))
    unreachable = [
        p.relative_to(ROOT)
        for p in sorted((ROOT / "docs").rglob("*.md"))
        if p.resolve() not in seen and p.name != "report.md"
    ]  # experiment run reports are written by the runs, linked by folder
    assert not unreachable, unreachable


def test_readme_is_a_short_manual():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
