"""The report index: ``reports/index.json`` (data) and ``reports/index.html`` (one table row per notebook).

Rows are the report runner's per-notebook results (status, time, error, findings, links). Rows of notebooks
not run this time are carried over from the previous index.json, so ``--only 02`` keeps the others' rows.
Each row shows the notebook's index figure (the PNG, or table, of its cell tagged ``index-figure``, inline) and links
each finding to the section of the notebook's report that holds its evidence; the page loads nothing.
The page opens with the diagnosis: the problems first (a given parameter that could not be read, a notebook
that stopped on an input or broke: `report.problems`), then the cause findings of every notebook combined into
one ranked answer (eagle3lib.diagnose.combine), each place in its evidence ("[02 training-sample replay / ...]")
linking to that notebook's report; ``index.json`` holds it under ``"diagnosis"`` and the problems under
``"problems"``.
"""
from __future__ import annotations

import base64
import datetime as dt
import html
import json
import re
from pathlib import Path
from urllib.parse import quote

from ..diagnose.combine import Diagnosis, diagnose
from ..diagnose.decision import decision_html
from ..errors import Eagle3Error
from ..jsonfiles import atomic_write_all
from ..steps.given import Problem
from . import problems
from .findings import FINDINGS_KEY, findings_of
from .readable import findings_html

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;width:100%}
th,td{border:1px solid #ccc;padding:.4em .6em;vertical-align:top;text-align:left}th{background:#f3f3f3}
.ok{color:#176f2c;font-weight:bold}.failed,.timeout{color:#b00020;font-weight:bold}
.err{font-family:monospace;font-size:.9em;white-space:pre-wrap}ul{margin:.2em 0;padding-left:1.2em}
.meta{color:#666;font-size:.9em}.stale{color:#666;font-style:italic}
.confirmed,.conflict{color:#b00020;font-weight:bold}.suspected{color:#a15c00;font-weight:bold}
.ruled{color:#176f2c}.notchecked{color:#666}.healthy{color:#176f2c;font-weight:bold}
table.small{width:auto;margin:.3em 0;font-size:.85em}table.small th,table.small td{padding:.15em .4em}
img.fig{max-width:320px;max-height:220px;display:block}.cap{color:#666;font-size:.8em}
.figtable{max-width:420px;max-height:240px;overflow:auto;font-size:.75em}.figtable table{width:auto}
.figtable th,.figtable td{padding:.1em .3em}"""


def load_rows(out_dir: Path, keep: set[str]) -> list[dict]:
    """Rows of the previous ``index.json`` for the notebooks in `keep` (marked as from an earlier run)."""
    path = Path(out_dir) / "index.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("notebooks", [])
    except (OSError, ValueError, AttributeError):  # no index yet, or an unreadable one: start afresh
        return []
    kept = [dict(r, earlier_run=True) for r in rows if isinstance(r, dict) and r.get("notebook") in keep]
    return kept


_FRAGMENT_SAFE = "?/:@!$&'()*+,;=%"


def evidence_links(r: dict) -> dict[str, str]:
    """{finding key: "NN.html#anchor"} of one row (none without a report or recorded anchors)."""
    page = r.get("html")
    ev = r.get("evidence") or {}
    if not page or not isinstance(ev, dict):
        return {}
    # the anchor as nbconvert wrote the heading's id (already URL-quoted): kept, with what is left unsafe quoted
    return {k: f"{quote(page)}#{quote(v['anchor'], safe=_FRAGMENT_SAFE)}" for k, v in ev.items()
            if isinstance(v, dict) and isinstance(v.get("anchor"), str) and v["anchor"]}


def figure_of(out_dir: Path, r: dict) -> str | None:
    """The row's index figure as inline HTML: its PNG as a ``data:`` image, or its table (``.figure.html``);
    None when it has none or the file is gone."""
    name = r.get("figure")
    path = Path(out_dir) / str(name) if name else None
    if path is None or not path.is_file() or path.resolve().parent != Path(out_dir).resolve():
        return None
    if path.suffix == ".html":
        return f"<div class='figtable'>{path.read_text(encoding='utf-8')}</div>"
    uri = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img class="fig" alt="{html.escape(str(r.get("notebook", "")))} figure" src="{uri}">'


def _figure_html(r: dict, figure: str | None, links: dict[str, str]) -> str:
    if not figure:
        return ""
    esc = html.escape
    section = ((r.get("evidence") or {}).get("headline") or {}).get("section", "")
    cap = f"<div class='cap'>from § {esc(section)}</div>" if section else ""
    target = links.get("headline") or (quote(r["html"]) if r.get("html") else None)
    if target and figure.startswith("<img"):
        return f'<a href="{esc(target)}">{figure}</a>' + cap
    return figure + (f'<div class="cap"><a href="{esc(target)}">from § {esc(section) or "the report"}</a></div>'
                     if target else cap)


def _row_html(r: dict, figure: str | None = None) -> str:
    esc = html.escape
    status = r.get("status", "?")
    stale = ' <span class="stale">(earlier run)</span>' if r.get("earlier_run") else ""
    found = dict(r.get("findings") or {})
    headline = found.get("headline")
    causes = found.get(FINDINGS_KEY)
    to_evidence = evidence_links(r)
    head = f"<b>{esc(str(headline))}</b>" if headline is not None else ""
    if head and to_evidence.get("headline"):
        section = r["evidence"]["headline"].get("section") or "evidence"
        head += f' <a class="cap" href="{esc(to_evidence["headline"])}">evidence: § {esc(section)}</a>'
    cells = [head, findings_html(found, to_evidence)]
    if causes:
        cells.append(f"<p class='meta'>{len(causes)} cause findings, in the diagnosis above</p>")
    links = []
    if r.get("html"):
        links.append(f'<a href="{esc(r["html"])}">{"report" if status == "ok" else "failed run"}</a>')
    if r.get("previous_html"):
        links.append(f'<a href="{esc(r["previous_html"])}">last good report</a>')
    if r.get("ipynb"):
        links.append(f'<a href="{esc(r["ipynb"])}">notebook</a>')
    notes = [r["error"]] if r.get("error") else []
    notes += list(r.get("warnings") or [])
    return (f'<tr><td>{esc(r.get("notebook", "?"))}{stale}</td><td class="{esc(status)}">{esc(status)}</td>'
            f'<td>{float(r.get("seconds") or 0):.1f} s</td><td>{_figure_html(r, figure, to_evidence)}</td>'
            f'<td>{"".join(cells)}</td><td class="err">{esc(chr(10).join(notes))}</td>'
            f'<td>{" · ".join(links)}</td></tr>')


def problems_of(rows: list[dict]) -> list[Problem]:
    """Every row's problems (a parameter that could not be read, a notebook that stopped or broke), one per
    parameter and error with the notebooks it concerns; a failed row of an older index counts as a failure."""
    found = []
    for r in rows:
        stored = r.get("problems")
        if stored:
            found += [Problem.from_dict(p) for p in stored if isinstance(p, dict)]
        elif r.get("status") in ("failed", "timeout"):
            found += problems.of_failure(str(r.get("notebook", "?")), str(r["status"]), r.get("error"), {})
    return problems.merged(found)


def not_given_of(rows: list[dict]) -> list[str]:
    """The inputs a "no fault found" needs that no row was given: a core notebook's empty parameter, or a core
    notebook that did not run (when others did)."""
    out = [x for r in rows for x in r.get("not_given") or ()]
    if rows:
        ran = {str(r.get("notebook", ""))[:2] for r in rows if r.get("status") == "ok"}
        out += [f"notebook {nb} ({what})" for nb, (_, what) in problems.CORE.items() if nb not in ran and not any(
            str(r.get("notebook", "")).startswith(nb) for r in rows if r.get("problems"))]
    return list(dict.fromkeys(out))


def diagnosis_of(rows: list[dict]) -> tuple[Diagnosis, list[str]]:
    """The diagnosis of every notebook's cause findings (with the rows' problems and what was not given), and the
    rows whose findings could not be read (themselves problems: evidence that is lost)."""
    found, bad = [], []
    for r in rows:
        try:
            found += findings_of(dict(r.get("findings") or {}))
        except Eagle3Error as e:
            bad.append(f"{r.get('notebook')}: {e}")
    lost = [Problem(b.split(":", 1)[0], "", "FindingError", b, "", failure=True) for b in bad]
    return diagnose(found, problems_of(rows) + lost, not_given_of(rows)), bad


_WHERE = re.compile(r"\[(\d\d)\b([^\[\]]*)\]")   # "[02 training-sample replay / ...]" in a verdict's evidence


def _link_wheres(text: str, pages: dict[str, str]) -> str:
    """Escaped `text` whose "[NN ...]" places link to notebook NN's report (when it has one)."""
    def link(m):
        page = pages.get(m.group(1))
        inner = html.escape(m.group(1) + m.group(2))
        return f'[<a href="{html.escape(quote(page))}">{inner}</a>]' if page else f"[{inner}]"
    out, last = [], 0
    for m in _WHERE.finditer(text):
        out += [html.escape(text[last:m.start()]), link(m)]
        last = m.end()
    return "".join(out + [html.escape(text[last:])])


def _diagnosis_html(d: Diagnosis, bad: list[str], pages: dict[str, str] | None = None) -> str:
    esc = html.escape
    pages = pages or {}
    listed = _problems_html(d.problems)
    if not d.verdicts:
        return ("<h2>Diagnosis</h2>" + (f"<p><b>{esc(d.headline())}</b></p>" if d.problems else "") + listed +
                "<p>No notebook recorded cause findings.</p><h2>Notebooks</h2>")
    head = (f"<p class='healthy'>{esc(d.headline())}</p>" if d.healthy else f"<p><b>{esc(d.headline())}</b></p>")
    head += listed
    rows = []
    for v in d.verdicts:
        cls = v.status.replace(" ", "").replace("ruledout", "ruled")
        detail = v.needs if v.label == "not checked" else v.evidence
        if v.measurement:
            detail += f" (decided by: {v.measurement})"
        rows.append(f"<tr><td class='{cls}'>{esc(v.label)}</td><td><b>{esc(v.cause)}</b><br>{esc(v.title)}</td>"
                    f"<td>{_link_wheres(detail, pages)}</td><td>{esc(v.fix)}</td></tr>")
    warn = "".join(f"<p class='err'>{esc(b)}</p>" for b in bad)
    return ("<h2>Diagnosis</h2>" + head + warn + "<table><tr><th>status</th><th>cause</th><th>evidence (where) / "
            "input needed</th><th>fix</th></tr>" + "".join(rows) + "</table><h2>Notebooks</h2>")


def _problems_html(found) -> str:
    """The problems as a table at the top of the diagnosis: parameter, given, error, message, expected, notebooks."""
    if not found:
        return ""
    esc = html.escape
    rows = "".join(f"<tr class='problem'><td><b>{esc(p.param)}</b>{' (the workbook broke)' * p.failure}</td>"
                   f"<td class='err'>{esc(p.given)}</td><td class='failed'>{esc(p.error)}</td>"
                   f"<td class='err'>{esc(p.message)}</td><td>{esc(p.expected)}</td>"
                   f"<td>{esc(', '.join(p.notebooks))}</td></tr>" for p in found)
    return (f"<h3>Problems ({len(found)}): given inputs that could not be read, parts that broke</h3><table>"
            "<tr><th>parameter</th><th>given</th><th>error</th><th>message</th><th>expected</th><th>notebooks</th>"
            f"</tr>{rows}</table>")


def index_html(rows: list[dict], meta: dict, diagnosis: tuple[Diagnosis, list[str]] | None = None,
                figures: dict[str, str] | None = None) -> str:
    """The index page: run conditions, the diagnosis, then one row per notebook; `figures` maps a notebook to
    its figure as inline HTML (`figure_of`)."""
    figures = figures or {}
    d, bad = diagnosis if diagnosis is not None else diagnosis_of(rows)
    n_ok = sum(r.get("status") == "ok" for r in rows)
    info = " · ".join(f"{k}: {html.escape(str(v))}" for k, v in meta.items() if v not in (None, ""))
    pages = {str(r.get("notebook", ""))[:2]: r["html"] for r in rows if r.get("html")}  # where -> its report
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>eagle3lib reports</title>"
            f"<style>{_CSS}</style></head><body><h1>eagle3lib reports</h1>"
            f"<p>{n_ok}/{len(rows)} notebooks ok.</p><p class='meta'>{info}</p>{decision_html(d.decision)}"
            f"{_diagnosis_html(d, bad, pages)}<table>"
            "<tr><th>notebook</th><th>status</th><th>time</th><th>figure</th><th>headline findings</th>"
            "<th>error / warnings</th><th>files</th></tr>"
            + "".join(_row_html(r, figures.get(r.get("notebook"))) for r in rows) + "</table></body></html>\n")


def write_index(out_dir: Path, rows: list[dict], meta: dict) -> None:
    """Write ``index.json`` and ``index.html`` atomically into `out_dir`."""
    meta = {"generated_at": dt.datetime.now().isoformat(timespec="seconds"), **meta}
    d, bad = diagnosis_of(rows)
    data = {**meta, "problems": [p.to_dict() for p in d.problems], "diagnosis": {**d.to_dict(), "unreadable": bad},
            "notebooks": rows}
    out_dir = Path(out_dir)
    figures = {r.get("notebook"): f for r in rows if (f := figure_of(out_dir, r))}
    atomic_write_all({out_dir / "index.json": json.dumps(data, indent=2) + "\n",
                      out_dir / "index.html": index_html(rows, meta, (d, bad), figures)})
