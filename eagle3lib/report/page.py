"""The index page's HTML, read in 30 seconds: the answer first, then the notebooks of this run, then the stale rows.

- `answer_html(d, ...)`: the body of the answer section (`report.index` wraps it in ``<section id="answer">``
  after its heading, where a table that opens the answer can go first): the headline, the problems, each
  confirmed / conflicting / suspected cause with one evidence line per check (its place linked to the notebook's
  report) and its whole fix, the layer names the answer uses as the engines write them, then the causes ruled out
  and those not checked folded (``<details>``), the latter grouped by the flag and YAML key that would check them.
- `notebooks_table(rows, figures)`: one row per notebook: status, time, figure, headline, recorded findings
  (folded), errors, files; `stale_html(rows)`: the rows kept from earlier runs, listed, never combined.
- `relative(text, base)`: paths under the inputs' common folder written relative to it.
The page fits a 1400 px window: fixed table layouts, long words broken, wide small tables scroll in their cell.
"""
from __future__ import annotations

import html
import os
import re
from urllib.parse import quote

from ..diagnose.answer import ALARMS, evidence_lines, give_text, named, unchecked_groups
from .findings import FINDINGS_KEY
from .readable import findings_html

CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1360px;padding:0 1em;color:#222;
overflow-wrap:anywhere}table{border-collapse:collapse;width:100%;table-layout:fixed}
th,td{border:1px solid #ccc;padding:.4em .6em;vertical-align:top;text-align:left}th{background:#f3f3f3}
.ok{color:#176f2c;font-weight:bold}.failed,.timeout{color:#b00020;font-weight:bold}.skipped{color:#666}
.err{font-family:monospace;font-size:.85em;white-space:pre-wrap}ul{margin:.2em 0;padding-left:1.2em}
.meta{color:#666;font-size:.9em}.stale{color:#666;font-style:italic}
.confirmed,.conflict{color:#b00020}.suspected{color:#a15c00}.ruled{color:#176f2c}.notchecked{color:#666}
.healthy{color:#176f2c;font-weight:bold}.headline{font-size:1.1em;font-weight:bold}
ol.causes>li{margin:.5em 0}.cid{font-family:monospace;color:#555;font-size:.9em}
.ev{margin:.15em 0 0 .2em;font-size:.95em}.fix{margin:.2em 0 0 .2em;font-weight:bold}
details{margin:.6em 0}summary{cursor:pointer;font-weight:bold}
table.small{width:auto;table-layout:auto;margin:.3em 0;font-size:.85em}table.small th,table.small td{padding:.15em .4em}
.scroll{overflow-x:auto;max-width:100%}img.fig{max-width:100%;max-height:220px;display:block}
.cap{color:#666;font-size:.8em}.figtable{max-width:100%;max-height:240px;overflow:auto;font-size:.75em;
overflow-wrap:normal}.figtable table{width:auto;table-layout:auto}
.figtable th,.figtable td{padding:.1em .3em;white-space:nowrap}.scroll table.small td{overflow-wrap:normal}"""
COLUMNS = ("<colgroup><col style='width:13%'><col style='width:6%'><col style='width:5%'><col style='width:22%'>"
           "<col style='width:34%'><col style='width:12%'><col style='width:8%'></colgroup>")
_WHERE = re.compile(r"\[(\d\d)\b([^\[\]]*)\]")   # "[02 training-sample replay / ...]" in a finding's evidence
_FRAGMENT_SAFE = "?/:@!$&'()*+,;=%"
_LAYER_IN = re.compile(r"^layer_in\.(\d+)$")


def relative(text: str, base: str | None) -> str:
    """`text` with every path under `base` (the inputs' common folder) written relative to it."""
    if not base or base == os.sep:
        return text
    return text.replace(base.rstrip(os.sep) + os.sep, "")


def link_wheres(text: str, pages: dict[str, str]) -> str:
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


def _cause_html(v, pages: dict[str, str], base: str | None) -> str:
    esc = html.escape
    ev = "".join(f"<div class='ev'>{link_wheres(relative(line, base), pages)}</div>" for line in evidence_lines(v))
    fix = f"<div class='fix'>Fix: {esc(relative(v.fix, base))}</div>" if v.fix else ""
    return f"<li><b>{esc(v.title)}</b> <span class='cid'>{esc(v.cause)}</span>{ev}{fix}</li>"


def layer_names(d) -> list[str]:
    """The boundary names the alarms' layouts hold (trained and served), in order of first use."""
    names = []
    for v in d.alarms:
        for f in v.findings:
            for key in ("trained_layout", "served_layout"):
                got = f.evidence.get(key)
                names += [str(x) for x in got] if isinstance(got, (list, tuple)) else []
    return list(dict.fromkeys(n for n in names if n and n != "None"))


def _layer_row(name: str) -> str:
    m = _LAYER_IN.match(name)
    if name == "embed":
        out_id, in_id, what = "-1", "0", "the embedding output (input of decoder layer 0)"
    elif m:
        i = int(m.group(1))
        out_id, in_id = f"{i - 1} (L{i - 1})", str(i)
        what = f"the input of decoder layer {i} = the output of layer {i - 1}"
    else:
        out_id = in_id = "—"
        what = {"zeros": "nothing captured: the slot is fed zeros", "final_prenorm": "the last layer's raw output",
                "final_postnorm": "the final norm's output"}.get(name, "")
    return (f"<tr><td><code>{html.escape(name)}</code></td><td>{html.escape(what)}</td><td>{out_id}</td>"
            f"<td>{in_id}</td></tr>")


def layers_html(d) -> str:
    """The layer names the answer uses, beside the ids the engines write (one explanation of the naming)."""
    names = layer_names(d)
    if not names:
        return ""
    return ("<details open><summary>Layer names in this answer, as the engines write them</summary><p class='meta'>"
            "The workbook names a boundary of the target's residual stream (0-based decoder layers): "
            "<code>layer_in.i</code> is the hidden state entering decoder layer i. SGLang and SpecForge configs "
            "write output-of-layer ids (id j = the output of layer j, written L<i>j</i> in logs and stories; -1 = "
            "the embedding); vLLM and speculators write input-of-layer ids (id i = the input of layer i).</p>"
            "<div class='scroll'><table class='small'><tr><th>workbook name</th><th>what it is</th>"
            "<th>SGLang / SpecForge config id</th><th>vLLM / speculators id</th></tr>"
            + "".join(_layer_row(n) for n in names) + "</table></div></details>")


def _problems_html(found, base: str | None) -> str:
    if not found:
        return ""
    esc = html.escape
    rows = "".join(f"<tr class='problem'><td><b>{esc(p.param)}</b>{' (the workbook broke)' * p.failure}</td>"
                   f"<td class='err'>{esc(relative(p.given, base))}</td><td class='failed'>{esc(p.error)}</td>"
                   f"<td class='err'>{esc(relative(p.message, base))}</td><td>{esc(p.expected)}</td>"
                   f"<td>{esc(', '.join(p.notebooks))}</td></tr>" for p in found)
    return (f"<h3>Problems ({len(found)}): given inputs that could not be read, parts that broke</h3><table>"
            "<colgroup><col style='width:12%'><col style='width:14%'><col style='width:10%'><col style='width:34%'>"
            "<col style='width:18%'><col style='width:12%'></colgroup>"
            "<tr><th>parameter</th><th>given</th><th>error</th><th>message</th><th>expected</th><th>notebooks</th>"
            f"</tr>{rows}</table>")


def _ruled_out_html(ruled, pages, base) -> str:
    if not ruled:
        return ""
    rows = "".join(f"<tr><td><span class='cid'>{html.escape(v.cause)}</span></td><td>{html.escape(v.title)}</td><td>"
                   + "".join(f"<div>{link_wheres(relative(x, base), pages)}</div>" for x in evidence_lines(v))
                   + "</td></tr>" for v in ruled)
    return (f"<details id='ruled-out'><summary class='ruled'>Ruled out ({len(ruled)})</summary><table>"
            "<colgroup><col style='width:18%'><col style='width:30%'><col style='width:52%'></colgroup>"
            f"<tr><th>cause</th><th>what it is</th><th>evidence</th></tr>{rows}</table></details>")


def _not_checked_html(verdicts, given) -> str:
    groups = unchecked_groups(verdicts, given)
    if not groups:
        return ""
    esc = html.escape
    n = sum(len(g) for _, g in groups)
    items = "".join(f"<li><b>{esc(give_text(inputs))}</b>: {esc(', '.join(map(named, group)))}</li>"
                    for inputs, group in groups if inputs)
    rest = [v for inputs, group in groups if not inputs for v in group]
    table = ("<table><colgroup><col style='width:25%'><col style='width:75%'></colgroup><tr><th>cause</th>"
             "<th>what would check it</th></tr>" + "".join(
                 f"<tr><td><span class='cid'>{esc(named(v))}</span></td><td>{esc(v.needs)}</td></tr>" for v in rest)
             + "</table>") if rest else ""
    return (f"<details id='not-checked'><summary class='notchecked'>Not checked ({n}), by the input that would "
            f"check them</summary><ul>{items}</ul>{table}</details>")


def answer_html(d, bad: list[str], pages: dict[str, str], base: str | None = None, given=()) -> str:
    """The answer's body (a `combine.Diagnosis`): headline, problems, alarms whole, layer names, then the causes
    ruled out and not checked folded. `pages`: notebook number -> its report; `base`: the inputs' folder, paths
    under it written relative; `given`: the inputs given (`names.GIVE` names), never asked for again."""
    esc = html.escape
    cls = "headline healthy" if d.healthy else "headline"
    out = [f"<p class='{cls}'>{esc(relative(d.headline(), base))}</p>", _problems_html(d.problems, base)]
    out += [f"<p class='err'>{esc(b)}</p>" for b in bad]
    if not d.verdicts:
        out.append("<p>No notebook of this run recorded cause findings.</p>")
    for status in ALARMS:
        group = d.by_status(status)
        if group:
            out.append(f"<h3 class='{status}'>{status.capitalize()} ({len(group)})</h3><ol class='causes'>"
                       + "".join(_cause_html(v, pages, base) for v in group) + "</ol>")
    out += [layers_html(d), _ruled_out_html(d.by_status("ruled out"), pages, base),
            _not_checked_html(d.verdicts, given)]
    return "".join(out)


_FILES = (("html", "report"), ("previous_html", "last good report"), ("ipynb", "notebook"))


def evidence_links(r: dict) -> dict[str, str]:
    """{finding key: "NN.html#anchor"} of one row (none without a report or recorded anchors)."""
    page = r.get("html")
    ev = r.get("evidence") or {}
    if not page or not isinstance(ev, dict):
        return {}
    # the anchor as nbconvert wrote the heading's id (already URL-quoted): kept, with what is left unsafe quoted
    return {k: f"{quote(page)}#{quote(v['anchor'], safe=_FRAGMENT_SAFE)}" for k, v in ev.items()
            if isinstance(v, dict) and isinstance(v.get("anchor"), str) and v["anchor"]}


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


def row_html(r: dict, figure: str | None = None, base: str | None = None) -> str:
    """One notebook's row: name (and the run it is from, when stale), status, time, figure, headline with the
    recorded findings folded, error and warnings, files."""
    esc = html.escape
    status = r.get("status", "?")
    stale = (f' <span class="stale">(earlier run {esc(str(r.get("run_id") or "before run ids"))})</span>'
             if r.get("earlier_run") else "")
    found = dict(r.get("findings") or {})
    headline = found.get("headline")
    to_evidence = evidence_links(r)
    head = f"<b>{esc(relative(str(headline), base))}</b>" if headline is not None else ""
    if head and to_evidence.get("headline"):
        section = r["evidence"]["headline"].get("section") or "evidence"
        head += f' <a class="cap" href="{esc(to_evidence["headline"])}">evidence: § {esc(section)}</a>'
    recorded = findings_html(found, to_evidence)
    n = len([k for k in found if k not in ("headline", FINDINGS_KEY)])
    cells = [head] + ([f"<details><summary>recorded findings ({n})</summary><div class='scroll'>{recorded}</div>"
                       "</details>"] if recorded else [])
    if found.get(FINDINGS_KEY):
        cells.append(f"<p class='meta'>{len(found[FINDINGS_KEY])} cause findings, in the answer above</p>")
    labels = dict(_FILES, html="report" if status == "ok" else "failed run")
    links = " · ".join(f'<a href="{esc(r[k])}">{labels[k]}</a>' for k, _ in _FILES if r.get(k))
    notes = [r["error"]] if r.get("error") else []
    notes += list(r.get("warnings") or [])
    return (f'<tr><td>{esc(r.get("notebook", "?"))}{stale}</td><td class="{esc(status)}">{esc(status)}</td>'
            f'<td>{float(r.get("seconds") or 0):.1f} s</td><td>{_figure_html(r, figure, to_evidence)}</td>'
            f'<td>{"".join(cells)}</td><td class="err">{esc(relative(chr(10).join(notes), base))}</td>'
            f'<td>{links}</td></tr>')


def notebooks_table(rows: list[dict], figures: dict[str, str], base: str | None = None) -> str:
    """The notebooks' rows as one table that fits the page."""
    return ("<table>" + COLUMNS + "<tr><th>notebook</th><th>status</th><th>time</th><th>figure</th>"
            "<th>headline and recorded findings</th><th>error / warnings</th><th>files</th></tr>"
            + "".join(row_html(r, figures.get(r.get("notebook")), base) for r in rows) + "</table>")


def stale_html(rows: list[dict], figures: dict[str, str], base: str | None = None) -> str:
    """The rows kept from earlier runs, under their own heading: listed, never combined into the answer."""
    if not rows:
        return ""
    return ("<section id='stale'><h2>Earlier runs: stale, not in the diagnosis</h2><p class='stale'>These notebooks "
            "did not run this time; their rows are kept from the run named beside each, and nothing of them is "
            "combined into the answer. Run them again (without --only) to bring them in.</p>"
            + notebooks_table(rows, figures, base) + "</section>")
