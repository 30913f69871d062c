"""Reports open offline: the system's headless Chromium under Playwright with the network off (tests/browser.py) on
a planted page, on a small report this test makes through the real runner, and on the demo's real reports."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pytest

from eagle3lib.report import runner as report
from eagle3lib.report import params as report_params
from eagle3lib.report.export import external_loads
from eagle3lib.report.page import evidence_links
from tests.browser import Browser, skip_reason
from tests.widget_views import view_ids

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=str(skip_reason()))

TINY = '''\
# %% [markdown]
# # 00 · Tiny report
# A notebook shaped like the workbook's: a figure, a widget browser, findings.

# %% tags=["parameters"]
n: int = 4  # points

# %% [markdown]
# ## 1. Replay: the evidence

# %% tags=["index-figure"]
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot(range(n))
plt.show()

# %% [markdown]
# ## 2. Token view

# %%
import ipywidgets as w
from IPython.display import HTML, display
out = w.Output()
with out:
    display(HTML("<table class='pos'><tr><th>step</th><td>top-1 tok_17</td></tr></table>"))
display(w.VBox([w.HBox([w.Dropdown(options=["s0", "s1"], description="sample"),
                        w.IntSlider(2, 0, 9, description="position t")]), w.HTML("<b>marks</b>"), out]))

# %% [markdown]
# ## 3. Findings

# %%
from eagle3lib.report import findings
findings.record("headline", "tiny: replay accuracy 0.91")
findings.record("replay", {"accuracy": 0.91})
'''


@pytest.fixture(scope="module")
def browser():
    with Browser(timeout=60) as b:
        yield b


def _check_page(browser, page: Path):
    """Open one page offline; assert nothing failed, nothing loads from outside, every image decoded."""
    assert external_loads(page.read_text(encoding="utf-8")) == [], page.name
    view = browser.open(page)
    assert view.problems() == [], (page.name, view.problems())
    assert not view.scripts and all(i["width"] > 0 and i["shown"] for i in view.images), (page.name, view.images)
    return view


def _check_links(browser, out: Path, rows: list[dict]) -> dict[str, str]:
    """Every evidence link of the index, followed in the browser, lands on a heading; {href: heading id}."""
    landed = {}
    for r in rows:
        for key, href in evidence_links(r).items():
            page, fragment = href.split("#", 1)
            view = browser.open(out / unquote(page), fragment)
            assert view.target is not None and view.target in view.anchors, (r["notebook"], key, href)
            assert view.target == r["evidence"][key]["anchor"]
            landed[href] = view.target
    return landed


def _links_resolve(out: Path) -> int:
    """Every <a href> of the index names a file beside it (the reports, notebooks, evidence sections)."""
    hrefs = re.findall(r'<a [^>]*href="([^"]+)"', (out / "index.html").read_text(encoding="utf-8"))
    for href in hrefs:
        assert (out / unquote(html.unescape(href).split("#", 1)[0])).is_file(), href
    return len(hrefs)


def test_the_check_sees_what_an_online_page_would_miss(browser, tmp_path):
    """A page that needs the network: its CDN script and remote image fail, a console error is caught, a
    missing local image does not decode, hidden text is not 'visible'."""
    page = tmp_path / "online.html"
    page.write_text('<!DOCTYPE html><html><head><title>online</title><script src="https://cdn.example.com/x.js">'
                    '</script></head><body><h1 id="top">Top</h1><img src="https://example.com/a.png">'
                    '<img src="missing.png"><script>console.error("planted error")</script>'
                    '<p style="display:none">hidden words</p><p>shown words</p></body></html>')
    view = browser.open(page)
    failed = " ".join(view.failed)
    assert "https://cdn.example.com/x.js" in failed and "https://example.com/a.png" in failed
    assert "missing.png: net::ERR_FILE_NOT_FOUND" in failed
    assert "planted error" in view.console_errors
    assert sorted(view.undecoded_images()) == [(tmp_path / "missing.png").as_uri(), "https://example.com/a.png"]
    assert "shown words" in view.text and "hidden words" not in view.text
    assert view.title == "online" and view.anchors == ("top",) and view.problems()


def test_a_small_report_and_its_index_open_offline(browser, tmp_path):
    """A small notebook through the real runner: its report and the index load nothing, show the figure, the
    widget view (with its saved table), the headline, the diagnosis, and link the evidence to a real anchor."""
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    (nbs / "00_tiny.py").write_text(TINY)
    out = tmp_path / "reports"
    assert report.main(["--notebooks", str(nbs), "--out", str(out)]) == 0

    view = _check_page(browser, out / "00_tiny.html")
    assert "00 · Tiny report" in view.text and len(view.images) == 1
    executed = nbformat.read(out / "00_tiny.ipynb", as_version=4)
    assert len(view.widgets) == len(view_ids(executed)) == 1
    widget = view.widgets[0]
    assert widget["shown"] and "top-1 tok_17" in widget["text"] and "position t" in widget["text"]
    assert "Error displaying widget" not in view.text and "model not found" not in view.text

    index = _check_page(browser, out / "index.html")
    assert "The answer" in index.text and "tiny: replay accuracy 0.91" in index.text
    assert len(index.images) == 1                                          # the figure, inline
    rows = json.loads((out / "index.json").read_text())["notebooks"]
    assert set(rows[0]["evidence"]) == {"headline", "replay"}
    assert _check_links(browser, out, rows) == {"00_tiny.html#1.-Replay:-the-evidence": "1.-Replay:-the-evidence"}
    assert view.anchors[:2] == ("00-%C2%B7-Tiny-report", "1.-Replay:-the-evidence")   # nbconvert's heading ids
    assert browser.open(out / "00_tiny.html", "no-such-heading").target is None
    assert _links_resolve(out) >= 4


@pytest.mark.slow
def test_the_demo_reports_open_offline(browser, demo_reports):
    """The demo's real reports (the end-to-end run, shared): every page loads nothing from outside and shows
    its title and every figure; notebook 02 shows its token-view widget; the index shows the answer first (the
    alarms whole, the rest folded), every notebook's headline and figure, its evidence links land on headings,
    and it fits a 1400 px window (tests/report/test_page.py checks that on a page made to be wide)."""
    _, out = demo_reports
    index = json.loads((out / "index.json").read_text())
    rows = index["notebooks"]
    assert [r["status"] for r in rows] == ["ok"] * len(rows)
    for r in rows:
        view = _check_page(browser, out / r["html"])
        title = report_params.read_source(ROOT / "notebooks" / f"{r['notebook']}.py").cells[0].source.splitlines()[0]
        assert title.lstrip("# ").strip() in view.text, r["notebook"]
        executed = nbformat.read(out / r["ipynb"], as_version=4)
        assert len(view.widgets) == len(view_ids(executed)), r["notebook"]
        assert all(w["shown"] for w in view.widgets)
        if r["notebook"].startswith("02_"):
            assert view.widgets and "position t" in view.widgets[0]["text"] and "<table" not in view.widgets[0]["text"]
        assert r["figure"] and "headline" in r["evidence"], r["notebook"]
    page = _check_page(browser, out / "index.html")
    assert page.text.index("The answer") < page.text.index("Notebooks of this run")
    for v in index["diagnosis"]["verdicts"]:      # the alarms shown whole; ruled out and not checked folded
        assert (v["cause"] in page.text) == (v["status"] in ("confirmed", "conflict", "suspected")), v["cause"]
    for r in rows:
        assert r["findings"]["headline"] in page.text, r["notebook"]
    pngs = sum(r["figure"].endswith(".png") for r in rows)
    assert len(page.images) == pngs
    assert _check_links(browser, out, rows)
    assert _links_resolve(out) > 2 * len(rows)
    shown = browser.layout(out / "index.html", out / "index.1400px.png", width=1400)
    assert shown["scroll_width"] <= shown["client_width"] == 1400
    assert shown["headings"][:3] == ["The answer", "The seed's decision", "Notebooks of this run"]
