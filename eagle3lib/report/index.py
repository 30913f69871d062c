"""The report index: ``reports/index.json`` (data) and ``reports/index.html`` (one table row per notebook).

Rows are the report runner's per-notebook results (status, time, error, findings, links). Rows of notebooks
not run this time are carried over from the previous index.json, so ``--only 02`` keeps the others' rows.
The page opens with the diagnosis: the cause findings of every notebook combined into one ranked answer
(eagle3lib.diagnose.combine); ``index.json`` holds it under ``"diagnosis"``.
"""
from __future__ import annotations

import datetime as dt
import html
import json
from pathlib import Path

from ..diagnose.combine import Diagnosis, diagnose
from ..errors import Eagle3Error
from ..jsonfiles import atomic_write_all
from .findings import FINDINGS_KEY, findings_of
from .readable import findings_html

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;width:100%}
th,td{border:1px solid #ccc;padding:.4em .6em;vertical-align:top;text-align:left}th{background:#f3f3f3}
.ok{color:#176f2c;font-weight:bold}.failed,.timeout{color:#b00020;font-weight:bold}
.err{font-family:monospace;font-size:.9em;white-space:pre-wrap}ul{margin:.2em 0;padding-left:1.2em}
.meta{color:#666;font-size:.9em}.stale{color:#666;font-style:italic}
.confirmed,.conflict{color:#b00020;font-weight:bold}.suspected{color:#a15c00;font-weight:bold}
.ruled{color:#176f2c}.notchecked{color:#666}.healthy{color:#176f2c;font-weight:bold}
table.small{width:auto;margin:.3em 0;font-size:.85em}table.small th,table.small td{padding:.15em .4em}"""


def load_rows(out_dir: Path, keep: set[str]) -> list[dict]:
    """Rows of the previous ``index.json`` for the notebooks in `keep` (marked as from an earlier run)."""
    path = Path(out_dir) / "index.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("notebooks", [])
    except (OSError, ValueError, AttributeError):  # no index yet, or an unreadable one: start afresh
        return []
    kept = [dict(r, earlier_run=True) for r in rows if isinstance(r, dict) and r.get("notebook") in keep]
    return kept


def _row_html(r: dict) -> str:
    esc = html.escape
    status = r.get("status", "?")
    stale = ' <span class="stale">(earlier run)</span>' if r.get("earlier_run") else ""
    found = dict(r.get("findings") or {})
    headline = found.get("headline")
    causes = found.get(FINDINGS_KEY)
    cells = [f"<b>{esc(str(headline))}</b>" if headline is not None else "", findings_html(found)]
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
            f'<td>{float(r.get("seconds") or 0):.1f} s</td><td>{"".join(cells)}</td>'
            f'<td class="err">{esc(chr(10).join(notes))}</td><td>{" · ".join(links)}</td></tr>')


def diagnosis_of(rows: list[dict]) -> tuple[Diagnosis, list[str]]:
    """The diagnosis of every notebook's cause findings, and the rows whose findings could not be read."""
    found, bad = [], []
    for r in rows:
        try:
            found += findings_of(dict(r.get("findings") or {}))
        except Eagle3Error as e:
            bad.append(f"{r.get('notebook')}: {e}")
    return diagnose(found), bad


def _diagnosis_html(d: Diagnosis, bad: list[str]) -> str:
    esc = html.escape
    if not d.verdicts:
        return "<h2>Diagnosis</h2><p>No notebook recorded cause findings.</p>"
    head = (f"<p class='healthy'>{esc(d.headline())}</p>" if d.healthy else f"<p><b>{esc(d.headline())}</b></p>")
    rows = []
    for v in d.verdicts:
        cls = v.status.replace(" ", "").replace("ruledout", "ruled")
        detail = v.needs if v.status == "not checked" else v.evidence
        rows.append(f"<tr><td class='{cls}'>{esc(v.status)}</td><td><b>{esc(v.cause)}</b><br>{esc(v.title)}</td>"
                    f"<td>{esc(detail)}</td><td>{esc(v.fix)}</td></tr>")
    warn = "".join(f"<p class='err'>{esc(b)}</p>" for b in bad)
    return ("<h2>Diagnosis</h2>" + head + warn + "<table><tr><th>status</th><th>cause</th><th>evidence (where) / "
            "input needed</th><th>fix</th></tr>" + "".join(rows) + "</table><h2>Notebooks</h2>")


def render_html(rows: list[dict], meta: dict, diagnosis: tuple[Diagnosis, list[str]] | None = None) -> str:
    """The index page: run conditions, the diagnosis, then one row per notebook."""
    d, bad = diagnosis if diagnosis is not None else diagnosis_of(rows)
    n_ok = sum(r.get("status") == "ok" for r in rows)
    info = " · ".join(f"{k}: {html.escape(str(v))}" for k, v in meta.items() if v not in (None, ""))
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>eagle3lib reports</title>"
            f"<style>{_CSS}</style></head><body><h1>eagle3lib reports</h1>"
            f"<p>{n_ok}/{len(rows)} notebooks ok.</p><p class='meta'>{info}</p>{_diagnosis_html(d, bad)}<table>"
            "<tr><th>notebook</th><th>status</th><th>time</th><th>headline findings</th><th>error / warnings</th>"
            "<th>files</th></tr>" + "".join(_row_html(r) for r in rows) + "</table></body></html>\n")


def write_index(out_dir: Path, rows: list[dict], meta: dict) -> None:
    """Write ``index.json`` and ``index.html`` atomically into `out_dir`."""
    meta = {"generated_at": dt.datetime.now().isoformat(timespec="seconds"), **meta}
    d, bad = diagnosis_of(rows)
    data = {**meta, "diagnosis": {**d.to_dict(), "unreadable": bad}, "notebooks": rows}
    out_dir = Path(out_dir)
    atomic_write_all({out_dir / "index.json": json.dumps(data, indent=2) + "\n",
                      out_dir / "index.html": render_html(rows, meta, (d, bad))})
