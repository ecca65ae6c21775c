"""Every relative link in README.md and docs/*.md points at a file that exists, and every
``#anchor`` at a heading of that page (GitHub's slugs: lower case, punctuation dropped,
spaces to ``-``). README.md stays a front door: at most 150 lines, with the two commands
and a link to each docs page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")
TWO_COMMANDS = """```sh
# 1. Install everything into .venv (CPU engine stack) and run the demo on the built-in model
bash scripts/install.sh && .venv/bin/appliance demo

# 2. Run the tests
.venv/bin/python -m pytest -q
```"""


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return out


def _slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    heads = [line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines()
             if re.match(r"^#{1,6} ", line)]
    return {_slug(re.sub(r"`", "", h)) for h in heads}


def _links(page: Path) -> list[str]:
    return [m.group(1) for line in _prose(page.read_text(encoding="utf-8"))
            for m in LINK.finditer(line)]


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_relative_links_point_at_files_and_headings(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked here
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert broken == []


def test_every_link_stays_inside_the_repository() -> None:
    for page in PAGES:
        for target in _links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path = target.partition("#")[0]
            if path:
                assert (page.parent / path).resolve().is_relative_to(REPO), (page, target)


def test_readme_is_a_front_door() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert TWO_COMMANDS in text
    linked = {Path(t.partition("#")[0]).name for t in _links(REPO / "README.md")
              if t.startswith("docs/")}
    assert {p.name for p in (REPO / "docs").glob("*.md")} <= linked


def test_the_checker_catches_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## Some `code` heading\n\n[x](b.md) [y](#nope) "
                                   "[z](#some-code-heading) `[not](a-link.md)`\n")
    page = tmp_path / "a.md"
    assert _links(page) == ["b.md", "#nope", "#some-code-heading"]
    assert "some-code-heading" in _anchors(page) and "nope" not in _anchors(page)
