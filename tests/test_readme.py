"""README.md stays short (at most 2,000 words: the rest lives in docs/), and every relative link in README.md and
docs/*.md resolves: to a file or folder of the repository, and for a link into a Markdown file with a #fragment,
to one of its headings (GitHub's heading ids)."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_WORDS = 2000
_MD = MarkdownIt("commonmark").enable("table")


def _tokens(text: str):
    """Every token of a Markdown text, inline children included."""
    for tok in _MD.parse(text):
        yield tok
        yield from tok.children or ()


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images of `text` (code spans and code blocks are not links)."""
    out = []
    for tok in _tokens(text):
        if tok.type == "link_open":
            out.append(tok.attrGet("href"))
        elif tok.type == "image":
            out.append(tok.attrGet("src"))
    return out


def heading_ids(text: str) -> set[str]:
    """GitHub's ids of a Markdown text's headings: lower case, punctuation dropped, spaces -> '-'."""
    tokens = list(_MD.parse(text))
    ids = set()
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            title = "".join(c.content for c in tokens[i + 1].children or () if c.type in ("text", "code_inline"))
            ids.add(re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-"))
    return ids


def broken_links(page: Path) -> list[str]:
    """The relative links of `page` that name no file or folder, or no heading of the Markdown file they name."""
    text, bad = page.read_text(encoding="utf-8"), []
    for href in links(text):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:            # http(s):, mailto:: not a path of this repository
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.exists():
            bad.append(f"{href}: no such file")
        elif parts.fragment and target.suffix == ".md" and \
                unquote(parts.fragment) not in heading_ids(target.read_text(encoding="utf-8")):
            bad.append(f"{href}: no heading #{parts.fragment} in {target.name}")
    return bad


def test_readme_is_at_most_2000_words():
    words = len((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert words <= MAX_WORDS, f"README.md has {words} words (at most {MAX_WORDS}): move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert broken_links(page) == [], page.name


def test_the_link_check_finds_a_broken_link_and_a_missing_heading(tmp_path):
    """The checker itself: a link to a missing file and to a missing heading are reported; a good file link, a
    good heading link, a folder, a URL and a link-looking text in code are not."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "other.md").write_text("# Other page\n\n## The `eagle3lib` command: in short\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md) [b](other.md#the-eagle3lib-command-in-short) [c](sub/) [d](https://x.org/y)\n"
                    "[e](missing.md) [f](other.md#nowhere) `[g](code.md)`\n\n```\n[h](block.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "other.md#nowhere: no heading #nowhere in other.md"]
