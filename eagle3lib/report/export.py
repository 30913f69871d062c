"""A notebook as one self-contained HTML page that opens offline, and what the index takes from it.

`to_html` exports with the ``eagle3lib_offline`` template (``templates/``: nbconvert's lab template without
require.js, the widget embed script, MathJax or mermaid: `tex_cells` names the cells that would need MathJax)
after `static_widgets.staticize`; CSS and PNG figures
are inline, so the page loads nothing (`external_loads` lists what a page would fetch). `sections` reads the
anchors nbconvert gives markdown headings, `index_figure` the PNG (or, with none, the table) of the cell a
notebook tags ``index-figure`` (its figure for the index), and `evidence_anchors` links each recorded finding
to the section whose heading names it.
"""
from __future__ import annotations

import copy
import dataclasses
import html
import re
from html.parser import HTMLParser
from pathlib import Path

from ..errors import ReportError
from .findings import FINDINGS_KEY
from .static_widgets import staticize

TEMPLATE = "eagle3lib_offline"
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
FIGURE_TAG = "index-figure"                 # the cell whose last PNG the index shows for the notebook
_SKIP_WORDS = {"the", "and", "for", "vs", "of", "to", "in", "on", "a", "an", "by", "per"}
_CSS_LOADS = re.compile(r"""url\(\s*["']?([^"')]*)|@import\s+["']([^"']+)""", re.I)
_HEADING = re.compile(r"<h([1-6])\b[^>]*\bid=\"([^\"]+)\"[^>]*>(.*?)</h\1>", re.S | re.I)
_CELL = re.compile(r'id="cell-id=([^"]+)"')
_TEX = re.compile(r"\$\$.+?\$\$|(?<![\\$\w])\$[^\s$`][^$`\n]*?(?<![\s\\])\$(?![\w$])|\\\(.+?\\\)|\\\[.+?\\\]", re.S)


@dataclasses.dataclass(frozen=True)
class Section:
    """A markdown heading of an exported notebook: the cell it is in, its level, text and anchor (no '#')."""
    cell: int
    level: int
    title: str
    anchor: str


@dataclasses.dataclass(frozen=True)
class IndexFigure:
    """What a notebook marks for the index: the tagged cell and its last PNG (``kind`` "png", base64 as in the
    notebook) or, in a cell that draws none, its last HTML output (``kind`` "html": a table)."""
    cell: int
    kind: str
    data: str

    @property
    def suffix(self) -> str:
        """The file the report runner writes it to, after the notebook's name: ``.figure.png`` / ``.figure.html``."""
        return f".figure.{self.kind}"


def to_html(nb, title: str, banner: str | None = None) -> bytes:
    """Self-contained HTML of a notebook (figures inline, widgets as static HTML), an optional banner on top."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = staticize(nb)
    if banner:
        nb = copy.deepcopy(nb)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(banner))
    exporter = HTMLExporter(template_name=TEMPLATE, extra_template_basedirs=[str(TEMPLATE_DIR)])
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": title}})
    return body.encode("utf-8")


class _Loads(HTMLParser):
    """The addresses the tags of a page fetch: ``src`` / ``srcset`` / ``poster`` of any tag, ``<link href>``,
    ``<object data>`` (an ``<a href>`` is a link a reader may follow, not a load)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value is None:
                continue
            if name in ("src", "poster") or (name == "href" and tag == "link") or (name == "data" and tag == "object"):
                self.urls.append(value)
            elif name == "srcset":
                self.urls += [part.split()[0] for part in value.split(",") if part.strip()]


def external_loads(page: str) -> list[str]:
    """Every address a page would fetch that is not inline (``data:``) or within the page (``#...``): tags'
    sources and stylesheets, CSS ``url(...)`` and ``@import``."""
    tags = _Loads()
    tags.feed(page)
    tags.close()
    css = [m.group(1) if m.group(1) is not None else m.group(2) for m in _CSS_LOADS.finditer(page)]
    found = []
    for url in tags.urls + css:
        url = (url or "").strip()
        if url and not url.startswith(("data:", "#", "about:", "javascript:")):
            found.append(url)
    return found


def tex_cells(nb) -> list[int]:
    """Markdown cells that hold TeX math (``$x$``, ``$$x$$``, ``\\(x\\)``, ``\\[x\\]``; code spans left out):
    the offline page loads no MathJax, so there they show as their source."""
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
            and _TEX.search(re.sub(r"`[^`]*`", "", c.source))]


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("¶", "").split())


def sections(nb, page: str) -> list[Section]:
    """The headings of `nb`'s markdown cells as the exported `page` anchors them, in order."""
    index = {c.get("id"): i for i, c in enumerate(nb.cells) if c.get("id")}
    marks = list(_CELL.finditer(page))
    out = []
    for k, m in enumerate(marks):
        i = index.get(m.group(1))
        if i is None or nb.cells[i].cell_type != "markdown":
            continue
        chunk = page[m.end(): marks[k + 1].start() if k + 1 < len(marks) else len(page)]
        out += [Section(i, int(h.group(1)), _text(h.group(3)), html.unescape(h.group(2)))
                for h in _HEADING.finditer(chunk)]
    return out


def section_of(found: list[Section], cell: int) -> Section | None:
    """The section a cell is in: the last heading below the title (level 2+) at or before it."""
    before = [s for s in found if s.cell <= cell and s.level >= 2]
    return before[-1] if before else None


def index_figure(nb, where: str = "notebook") -> IndexFigure | None:
    """The last PNG of the one cell tagged ``index-figure``, else its last HTML output (a table); None when no
    cell is tagged or it showed neither."""
    tagged = [i for i, c in enumerate(nb.cells) if FIGURE_TAG in c.get("metadata", {}).get("tags", [])]
    if len(tagged) > 1:
        raise ReportError(where, f"more than one cell is tagged '{FIGURE_TAG}'", expected="one cell, the figure "
                          "that shows the notebook's finding best", found=f"cells {tagged}")
    if not tagged:
        return None
    outputs = [o.get("data", {}) for o in nb.cells[tagged[0]].get("outputs", [])]
    for mime, kind in (("image/png", "png"), ("text/html", "html")):
        found = [d[mime] for d in outputs if mime in d]
        if found:
            data = "".join(found[-1]) if isinstance(found[-1], list) else str(found[-1])
            return IndexFigure(tagged[0], kind, data.strip())
    return None


def _words(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
            for w in words if w not in _SKIP_WORDS}


def evidence_anchors(found: dict, heads: list[Section], figure_cell: int | None = None) -> dict[str, str]:
    """{finding key: anchor} for the findings whose evidence a section holds: the headline -> the section of the
    index figure; another key -> the one section (below the title, not the findings list) whose heading holds
    every word of the key ("layout_search" -> "6. Layout search: ..."). Keys with no sure section get none."""
    body = [s for s in heads if s.level >= 2 and not _words(s.title) & {"finding", "headline"}]
    out = {}
    if figure_cell is not None and "headline" in found:
        home = section_of(heads, figure_cell)
        if home is not None:
            out["headline"] = home.anchor
    for key in found:
        if key in ("headline", FINDINGS_KEY):
            continue
        words = _words(key.replace("_", " "))
        hits = {s.anchor for s in body if words and words <= _words(s.title)}
        if len(hits) == 1:
            out[key] = hits.pop()
    return out
