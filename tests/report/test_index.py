"""The report index (eagle3lib.report.index): rows carried over, index.json + index.html written atomically."""
from __future__ import annotations

import base64
import json
import re
import tempfile

import pytest

from eagle3lib.report import index as I
from eagle3lib.report.index import load_rows, index_html, write_index
from eagle3lib.report.page import evidence_links

ROWS = [
    {"notebook": "00_ok", "status": "ok", "seconds": 1.25, "html": "00_ok.html", "ipynb": "00_ok.ipynb",
     "findings": {"headline": "acc 0.75", "n": 3}},
    {"notebook": "01_bad", "status": "failed", "seconds": 2, "error": "ValueError: boom",
     "html": "01_bad.failed.html", "previous_html": "01_bad.html", "ipynb": "01_bad.failed.ipynb"},
    {"notebook": "02_slow", "status": "timeout", "seconds": 600.0, "error": "timed out after 600 s",
     "html": "02_slow.failed.html", "warnings": ["w1", "w2"]},
]


def rows_by_name(page: str) -> dict[str, str]:
    """The <tr> of each notebook in a rendered page."""
    rows = re.findall(r"<tr><td>.*?</tr>", page, re.DOTALL)
    return {re.match(r"<tr><td>([^<]*)", tr).group(1): tr for tr in rows}


# ---------------------------------------------------------------- load_rows

def test_load_rows_keeps_only_the_named_notebooks(tmp_path):
    (tmp_path / "index.json").write_text(json.dumps({"generated_at": "x", "notebooks": ROWS + ["junk", 3]}))
    rows = load_rows(tmp_path, keep={"02_slow", "00_ok", "99_missing"})
    assert rows == [dict(ROWS[0], earlier_run=True), dict(ROWS[2], earlier_run=True)]   # index order, not keep's
    assert "earlier_run" not in ROWS[0]                                                 # copies, not the originals
    assert load_rows(tmp_path, keep=set()) == []


@pytest.mark.parametrize("content", [None, "", "{not json", "[1, 2]", '{"other": 1}', '"text"'])
def test_load_rows_starts_afresh_without_a_usable_index(tmp_path, content):
    if content is not None:
        (tmp_path / "index.json").write_text(content)
    assert load_rows(tmp_path, keep={"00_ok"}) == []


# ---------------------------------------------------------------- write_index

def test_write_index_writes_both_files(tmp_path):
    out = tmp_path / "reports"                                     # created on demand
    write_index(out, ROWS, {"params_file": "params/a.yaml", "kernel": "python3"})
    data = json.loads((out / "index.json").read_text(encoding="utf-8"))
    assert data["notebooks"] == ROWS and data["params_file"] == "params/a.yaml" and data["kernel"] == "python3"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", data["generated_at"])
    assert list(data) == ["generated_at", "params_file", "kernel", "problems", "diagnosis", "notebooks"]
    # no finding at all is no evidence: never a healthy verdict; a notebook that broke or timed out is a problem
    # of the workbook, listed first
    assert data["diagnosis"]["verdicts"] == [] and not data["diagnosis"]["healthy"]
    assert [(p["param"], p["error"], p["failure"]) for p in data["problems"]] == [
        ("01_bad", "ValueError", True), ("02_slow", "timeout", True)]
    assert data["diagnosis"]["headline"].startswith("the workbook failed in 01_bad: ValueError: boom")
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert "<p>1/3 notebooks ok.</p>" in page and f"generated_at: {data['generated_at']}" in page
    assert "params_file: params/a.yaml · kernel: python3" in page
    assert list(rows_by_name(page)) == ["00_ok", "01_bad", "02_slow"]
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "index.json"]     # no temp files left


def test_write_index_given_generated_at_wins_and_round_trips(tmp_path):
    write_index(tmp_path, ROWS[:1], {"generated_at": "2026-01-02T03:04:05", "empty": None})
    data = json.loads((tmp_path / "index.json").read_text())
    assert data["generated_at"] == "2026-01-02T03:04:05" and data["empty"] is None
    page = (tmp_path / "index.html").read_text()
    assert "empty" not in page                                         # None meta values are not shown
    assert load_rows(tmp_path, keep={"00_ok"}) == [dict(ROWS[0], earlier_run=True)]


def test_write_index_is_atomic(tmp_path, monkeypatch):
    """A failure while staging index.html replaces neither file and leaves no temp file behind."""
    write_index(tmp_path, ROWS[:1], {"run": "first"})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real, calls = tempfile.mkstemp, []

    def failing_mkstemp(*a, **kw):
        calls.append(kw.get("prefix"))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*a, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", failing_mkstemp)
    with pytest.raises(OSError, match="No space left"):
        write_index(tmp_path, ROWS, {"run": "second"})
    assert calls == [".index.json.", ".index.html."]
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert json.loads(before["index.json"])["run"] == "first"


# ---------------------------------------------------------------- rendering

def test_html_escapes_every_value():
    evil = {"notebook": "03_<x>", "status": "o\"k<", "seconds": 0.04, "error": "a < b & c",
            "warnings": ["<script>alert(1)</script>"], "html": 'a"b.html', "ipynb": "n&b.ipynb",
            "findings": {"headline": "<i>big</i>", "k<ey>": "<v>", "obj": {"a": "<b>"}}}
    page = index_html([evil], {"params_file": "<p>.yaml"})
    for raw in ("<x>", "<i>", "<script>", "<v>", "k<ey>", '"b.html', "<p>.yaml", "n&b"):
        assert raw not in page, raw
    assert "<td>03_&lt;x&gt;</td>" in page and '<td class="o&quot;k&lt;">o&quot;k&lt;</td>' in page
    assert "<b>&lt;i&gt;big&lt;/i&gt;</b>" in page and "<li><b>k&lt;ey&gt;</b>: &lt;v&gt;</li>" in page
    assert "<li><b>obj</b>: <div>a: &lt;b&gt;</div></li>" in page
    assert '<td class="err">a &lt; b &amp; c\n&lt;script&gt;alert(1)&lt;/script&gt;</td>' in page
    assert '<a href="a&quot;b.html">failed run</a>' in page and '<a href="n&amp;b.ipynb">notebook</a>' in page
    assert "<td>0.0 s</td>" in page and "params_file: &lt;p&gt;.yaml" in page


def test_rows_link_their_reports():
    page = rows_by_name(index_html(ROWS, {}))
    ok, bad, slow = page["00_ok"], page["01_bad"], page["02_slow"]
    assert '<td class="ok">ok</td>' in ok and "<td>1.2 s</td>" in ok                  # 1.25 -> 1.2 (half-even)
    assert '<a href="00_ok.html">report</a> · <a href="00_ok.ipynb">notebook</a>' in ok
    assert ("<b>acc 0.75</b><details><summary>recorded findings (1)</summary><div class='scroll'><ul><li><b>n</b>: "
            "3</li></ul></div></details>") in ok and ".failed.html" not in ok
    assert '<td class="failed">failed</td>' in bad and "<td>2.0 s</td>" in bad
    assert ('<a href="01_bad.failed.html">failed run</a> · <a href="01_bad.html">last good report</a> · '
            '<a href="01_bad.failed.ipynb">notebook</a>') in bad
    assert '<td class="err">ValueError: boom</td>' in bad
    assert '<td class="timeout">timeout</td>' in slow and '<a href="02_slow.failed.html">failed run</a></td>' in slow
    assert "last good report" not in slow and '<td class="err">timed out after 600 s\nw1\nw2</td>' in slow


def test_row_without_optional_fields_and_earlier_run_marker():
    page = index_html([{"notebook": "04_x", "earlier_run": True}, {}], {})
    assert '<tr><td>04_x <span class="stale">(earlier run before run ids)</span></td><td class="?">?</td><td>0.0 s</td>' \
           '<td></td><td></td><td class="err"></td><td></td></tr>' in page
    assert '<tr><td>?</td><td class="?">?</td>' in page and "<p>0/1 notebooks ok.</p>" in page


def test_long_findings_are_kept_whole_and_read_as_text():
    """No finding is cut: a long sentence is shown whole, a dict as words, never as JSON."""
    long = "x" * 200
    page = I.index_html([{"notebook": "05", "status": "ok",
                           "findings": {"v": long, "d": {"sglang_version": "0.5.6", "ok": True}}}], {})
    assert f"<li><b>v</b>: {long}</li>" in page and "…" not in page
    assert "<li><b>d</b>: <div>sglang version: 0.5.6 · ok: yes</div></li>" in page and "&quot;" not in page


def test_the_index_opens_with_the_diagnosis_of_every_notebooks_findings(tmp_path):
    """Cause findings recorded by two notebooks are combined: a conflict is shown as one, ranked first here."""
    from eagle3lib.causes import Finding
    f0 = Finding("d2t_mapping", "confirmed", "d2t holds absolute ids", {"n": 3}, "00 / checks.vocab").to_dict()
    f2 = Finding("d2t_mapping", "ruled out", "offsets reading is best", {}, "02 / layout search").to_dict()
    f3 = Finding("ndt_override", "ruled out", "knobs <as> requested", {}, "01 / serving settings").to_dict()
    rows = [dict(ROWS[0], findings={"headline": "a", "findings": [f0, f3]}),
            dict(ROWS[1], findings={"headline": "b", "findings": [f2]})]
    write_index(tmp_path, rows, {})
    data = json.loads((tmp_path / "index.json").read_text())
    d = data["diagnosis"]
    assert not d["healthy"] and [v["status"] for v in d["verdicts"]] == ["conflict", "ruled out"]
    page = (tmp_path / "index.html").read_text()
    assert page.index("<h2>The answer</h2>") < page.index("<h2>Notebooks of this run</h2>")
    assert 'd2t holds absolute ids [<a href="00_ok.html">00 / checks.vocab</a>]' in page   # linked to its report
    assert 'offsets reading is best [<a href="01_bad.failed.html">02 / layout search</a>]' not in page
    assert "offsets reading is best [02 / layout search]" in page          # no notebook 02 row: no link
    assert "2 cause findings, in the answer above" in page
    assert 'knobs &lt;as&gt; requested [<a href="01_bad.failed.html">01 / serving settings</a>]' in page
    assert "d2t_mapping" not in rows_by_name(page.split("<h2>Notebooks of this run</h2>")[1])["00_ok"]   # no raw


# ---------------------------------------------------------------- figures and evidence links

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c63f8cf"
                    "c0f01f0005000201ffa65f6c0000000049454e44ae426082")   # a 1x1 PNG


def test_the_index_shows_each_notebooks_figure_inline_and_links_findings_to_their_evidence(tmp_path):
    (tmp_path / "00_ok.figure.png").write_bytes(PNG)
    row = dict(ROWS[0], figure="00_ok.figure.png", findings={"headline": "acc 0.75", "n": 3, "layout": "x y"},
               evidence={"headline": {"anchor": "2.-Replay-on-the-samples", "section": "2. Replay on the samples"},
                         "n": {"anchor": "Über & more", "section": "s"}})
    write_index(tmp_path, [row, ROWS[1]], {})
    page = (tmp_path / "index.html").read_text()
    tr = rows_by_name(page)["00_ok"]
    uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert f'<a href="00_ok.html#2.-Replay-on-the-samples"><img class="fig" alt="00_ok figure" src="{uri}"></a>' in tr
    assert "from § 2. Replay on the samples" in tr
    assert ('<b>acc 0.75</b> <a class="cap" href="00_ok.html#2.-Replay-on-the-samples">evidence: § 2. Replay on '
            'the samples</a>') in tr
    assert '<b><a href="00_ok.html#%C3%9Cber%20&amp;%20more">n</a></b>: 3' in tr      # an anchor is quoted
    assert "<b>layout</b>: x y" in tr                                                   # no anchor: no link
    assert "<img" not in rows_by_name(page)["01_bad"]
    table = dict(ROWS[0], notebook="03_t", figure="03_t.figure.html", html="03_t.html")
    (tmp_path / "03_t.figure.html").write_text("<table><tr><td>cell</td></tr></table>")
    write_index(tmp_path, [table], {})
    assert ("<div class='figtable'><table><tr><td>cell</td></tr></table></div><div class=\"cap\"><a "
            "href=\"03_t.html\">from § the report</a></div>") in (tmp_path / "index.html").read_text()
    assert "00_ok.figure.png" not in page and "http" not in page.split("</style>", 1)[1]   # inline, no load


def test_a_missing_or_outside_figure_file_is_left_out(tmp_path):
    (tmp_path.parent / "outside.png").write_bytes(PNG)
    assert I.figure_of(tmp_path, {"figure": "gone.png"}) is None
    assert I.figure_of(tmp_path, {"figure": "../outside.png"}) is None
    assert I.figure_of(tmp_path, {}) is None
    (tmp_path / "01_t.figure.html").write_text("<table><tr><td>16 → 2</td></tr></table>")
    assert I.figure_of(tmp_path, {"figure": "01_t.figure.html"}) == \
        "<div class='figtable'><table><tr><td>16 → 2</td></tr></table></div>"     # a table, inline
    assert evidence_links({"evidence": {"headline": {"anchor": "a"}}}) == {}           # no report, no link
    assert evidence_links({"html": "x.html", "evidence": {"k": "bad", "j": {"anchor": ""}}}) == {}


def test_one_run_one_diagnosis_earlier_rows_are_stale_never_combined(tmp_path):
    """Issue 46: a run of notebook 00 alone after a run of 02 that confirmed a cause: the diagnosis combines only
    this run's row (the earlier confirmation is not in its headline), the earlier row is listed as stale with its
    own run id, and index.json keeps both rows, each with its run id."""
    confirmed = {"notebook": "02_b", "status": "ok", "run_id": "r1", "findings": {"headline": "old", "findings": [
        {"cause": "ndt_override", "status": "confirmed", "summary": "16 -> 2", "evidence": {}, "where": "02_b"}]}}
    (tmp_path / "index.json").write_text(json.dumps({"run_id": "r1", "notebooks": [confirmed]}))
    now = {"notebook": "00_a", "status": "ok", "run_id": "r2", "findings": {"headline": "new", "findings": [
        {"cause": "rope_mismatch", "status": "ruled out", "summary": "same rope", "evidence": {}, "where": "00_a"}]}}
    rows = [now] + load_rows(tmp_path, keep={"02_b"})
    write_index(tmp_path, rows, {"run_id": "r2"})
    data = json.loads((tmp_path / "index.json").read_text())
    assert [v["cause"] for v in data["diagnosis"]["verdicts"]] == ["rope_mismatch"]
    assert "confirmed" not in data["diagnosis"]["headline"]
    assert [(r["notebook"], r["run_id"], r.get("earlier_run", False)) for r in data["notebooks"]] == [
        ("00_a", "r2", False), ("02_b", "r1", True)]
    page = (tmp_path / "index.html").read_text()
    stale = page.index("Earlier runs: stale")
    assert page.index("00_a") < stale < page.index("02_b") and "(earlier run r1)" in page
