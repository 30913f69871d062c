"""Tests for eagle3lib.report.export: self-contained HTML, heading anchors, the index figure, evidence links."""
from __future__ import annotations

import base64
import io

import nbformat
import pytest

from eagle3lib.errors import ReportError
from eagle3lib.report import export
from eagle3lib.report import params as report_params


def _png(color: str = "red") -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], color=color)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure_cell(png: str, tags=()):
    cell = nbformat.v4.new_code_cell("plot()", metadata={"tags": list(tags)})
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]
    return cell


def _notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 09 · A notebook\nintro"),
                nbformat.v4.new_markdown_cell("## 1. Replay on the training samples"),
                _figure_cell(_png("blue")),
                nbformat.v4.new_markdown_cell("## 2. Layout search: which wiring?\ntext\n### 2a. Detail (sub)"),
                _figure_cell(_png("green")), _figure_cell(_png("red"), ["index-figure"]),
                nbformat.v4.new_markdown_cell("## 3. Findings"),
                nbformat.v4.new_code_cell("record()")]
    return nb


def test_the_page_loads_nothing_from_outside_and_keeps_figures_inline():
    nb = _notebook()
    page = export.to_html(nb, "09_x", banner="**This run failed.**").decode()
    assert export.external_loads(page) == []
    for gone in ("require.min.js", "mathjax", "embed-amd.js", "mermaid", "unpkg.com", "cdnjs"):
        assert gone not in page.lower(), gone
    assert page.count('src="data:image/png;base64,') == 3
    assert "This run failed." in page and "<title>09_x</title>" in page
    assert 'celltag_index-figure' in page                            # the tag travels as a class


def test_external_loads_lists_what_a_page_would_fetch():
    page = ('<script src="https://cdn.example/x.js"></script><img src="data:image/png;base64,AA">'
            '<a href="#sec">s</a><a href="02_x.html#y">report</a><link href="//fonts.example/css" rel=stylesheet>'
            '<img srcset="a.png 1x, b.png 2x"><object data="x.svg"></object>'
            "<style>@import 'https://fonts.example/f.css';a{background:url('img/local.png')}"
            "b{background:url(data:image/svg+xml;base64,AA)}</style>")
    assert export.external_loads(page) == ["https://cdn.example/x.js", "//fonts.example/css", "a.png", "b.png",
                                           "x.svg", "https://fonts.example/f.css", "img/local.png"]


def test_sections_are_the_anchors_nbconvert_gives_the_headings():
    nb = _notebook()
    page = export.to_html(nb, "09_x").decode()
    heads = export.sections(nb, page)
    assert [(h.cell, h.level, h.title) for h in heads] == [
        (0, 1, "09 · A notebook"), (1, 2, "1. Replay on the training samples"),
        (3, 2, "2. Layout search: which wiring?"), (3, 3, "2a. Detail (sub)"), (6, 2, "3. Findings")]
    for h in heads:
        assert f'id="{h.anchor}"' in page or f"id=\"{h.anchor.replace('&', '&amp;')}\"" in page
    assert export.section_of(heads, 5).title == "2a. Detail (sub)"
    assert export.section_of(heads, 2).title == "1. Replay on the training samples"
    assert export.section_of(heads, 0) is None                      # the title is not a section


def test_the_index_figure_is_the_last_png_of_the_tagged_cell():
    nb = _notebook()
    fig = export.index_figure(nb)
    assert (fig.cell, fig.kind, fig.suffix) == (5, "png", ".figure.png")
    assert fig.data == nb.cells[5].outputs[0]["data"]["image/png"]
    assert base64.b64decode(fig.data)[:8] == b"\x89PNG\r\n\x1a\n"
    nb.cells[5].outputs = [nbformat.v4.new_output("execute_result", execution_count=1, data={
        "text/html": "<table><tr><td>16 → 2</td></tr></table>", "text/plain": "table"})]
    table = export.index_figure(nb)                                 # no PNG: the cell's table
    assert (table.kind, table.suffix) == ("html", ".figure.html")
    assert table.data == "<table><tr><td>16 → 2</td></tr></table>"
    nb.cells[5].outputs = []
    assert export.index_figure(nb) is None                          # tagged, showed nothing
    nb.cells[5].metadata["tags"] = []
    assert export.index_figure(nb) is None                          # nothing tagged
    nb.cells[2].metadata["tags"] = nb.cells[4].metadata["tags"] = ["index-figure"]
    with pytest.raises(ReportError, match="more than one cell is tagged 'index-figure'.*cells \\[2, 4\\]"):
        export.index_figure(nb, "09_x")


def test_evidence_anchors_link_a_finding_only_to_a_section_that_names_it():
    nb = _notebook()
    heads = export.sections(nb, export.to_html(nb, "09_x").decode())
    by_title = {h.title: h.anchor for h in heads}
    found = {"headline": "x", "layout_search": {}, "replays": {}, "findings": [], "advice": {}, "detail": 1,
             "training": 2}
    anchors = export.evidence_anchors(found, heads, figure_cell=5)
    assert anchors == {"headline": by_title["2a. Detail (sub)"],            # where the index figure is
                       "layout_search": by_title["2. Layout search: which wiring?"],
                       "replays": by_title["1. Replay on the training samples"],  # plural key, singular heading
                       "detail": by_title["2a. Detail (sub)"],
                       "training": by_title["1. Replay on the training samples"]}
    assert "findings" not in anchors and "advice" not in anchors            # the findings list is no evidence
    assert "headline" not in export.evidence_anchors(found, heads, figure_cell=None)
    both = heads + [export.Section(7, 2, "4. More training", "more")]
    assert "training" not in export.evidence_anchors(found, both)           # two candidates: no link


def test_the_template_ships_with_the_package():
    """pyproject's package-data globs cover every file of the offline template (a wheel without them exports
    nothing)."""
    tomllib = pytest.importorskip("tomllib")
    root = export.TEMPLATE_DIR.parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    here = export.TEMPLATE_DIR.parent
    shipped = {p for g in globs["eagle3lib.report"] for p in here.glob(g)}
    files = {p for p in (export.TEMPLATE_DIR).rglob("*") if p.is_file()}
    assert files and files <= shipped and (export.TEMPLATE_DIR / export.TEMPLATE / "index.html.j2") in files


@pytest.mark.parametrize("text, tex", [("costs $5 and $6", False), ("`$x$` in code", False), ("a $x^2$ term", True),
                                       ("$$\\sum_k p_k$$", True), ("\\(a+b\\)", True), ("E[accept] = 1 + Σ p_j", False),
                                       ("price: $ 3", False)])
def test_tex_cells_finds_the_math_mathjax_would_render(text, tex):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = '$y$'"), nbformat.v4.new_markdown_cell(text)]
    assert export.tex_cells(nb) == ([1] if tex else [])


def test_no_workbook_notebook_needs_mathjax():
    """The offline template drops MathJax; that holds while no notebook's markdown uses TeX math."""
    from eagle3lib.report import runner

    root = export.TEMPLATE_DIR.parents[2]
    for source in runner.discover_notebooks(root / "notebooks"):
        assert export.tex_cells(report_params.read_source(source)) == [], source.name
