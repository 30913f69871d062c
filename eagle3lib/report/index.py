"""The report index: ``reports/index.json`` (data) and ``reports/index.html`` (the page a busy engineer reads).

Rows are the report runner's per-notebook results (status, time, error, findings, links), each with the id of
the run that made it (``run_id``). Rows of notebooks not run this time are carried over from the previous
index.json, so ``--only 02`` keeps the others' rows: they are listed as stale (``earlier_run``, their own run id),
and never combined into this run's diagnosis (`this_run`).
The page (`report.page` writes its parts) opens with the answer: this run's problems (a given parameter that could
not be read, an unknown key, a notebook that stopped on an input or broke: `report.problems`) and its cause findings
combined into one ranked answer (eagle3lib.diagnose.combine): confirmed causes first, each with one evidence line
per check, its place linking to that notebook's report, and its fix; then suspected; ruled out and not checked
folded. Then the notebooks of this run (each with its index figure and its findings folded), then the stale rows.
Paths under the inputs' common folder are shown relative to it (`base_of`). ``index.json`` holds the diagnosis
under ``"diagnosis"`` and the problems under ``"problems"``.
"""
from __future__ import annotations

import base64
import datetime as dt
import html
import json
import os
from pathlib import Path

from ..diagnose.combine import Diagnosis, diagnose
from ..diagnose.decision import decision_html
from ..errors import Eagle3Error
from ..jsonfiles import atomic_write_all
from ..steps.given import Problem
from . import page, problems
from .findings import findings_of

def load_rows(out_dir: Path, keep: set[str]) -> list[dict]:
    """Rows of the previous ``index.json`` for the notebooks in `keep` (marked as from an earlier run)."""
    path = Path(out_dir) / "index.json"
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("notebooks", [])
    except (OSError, ValueError, AttributeError):  # no index yet, or an unreadable one: start afresh
        return []
    kept = [dict(r, earlier_run=True) for r in rows if isinstance(r, dict) and r.get("notebook") in keep]
    return kept


def this_run(rows: list[dict]) -> list[dict]:
    """The rows this run made: the diagnosis combines only these (the others are stale, from earlier runs)."""
    return [r for r in rows if not r.get("earlier_run")]


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
    """The inputs a "no fault found" needs that no row was given: a core notebook's empty parameter (one entry per
    key, naming every notebook that needed it: "train_data (02_training_sample_replay, 03_hidden_state_diffing)"),
    or a core notebook that did not run (when others did)."""
    keys: dict[str, list[str]] = {}
    for x in (x for r in rows for x in r.get("not_given") or ()):
        key, _, stem = str(x).partition(" (")
        keys.setdefault(key, []).append(stem.rstrip(")"))
    out = [f"{k} ({', '.join(dict.fromkeys(s for s in stems if s))})" if any(stems) else k
           for k, stems in keys.items()]
    if rows:
        ran = {str(r.get("notebook", ""))[:2] for r in rows if r.get("status") == "ok"}
        out += [f"notebook {nb} ({what})" for nb, (_, what) in problems.CORE.items() if nb not in ran and not any(
            str(r.get("notebook", "")).startswith(nb) for r in rows if r.get("problems") or r.get("not_given"))]
    return list(dict.fromkeys(out))


def diagnosis_of(rows: list[dict], extra: tuple[Problem, ...] = ()) -> tuple[Diagnosis, list[str]]:
    """The diagnosis of every notebook's cause findings (with the rows' problems, `extra` problems of the run
    itself such as unknown parameter keys, and what was not given), and the rows whose findings could not be read
    (themselves problems: evidence that is lost)."""
    found, bad = [], []
    for r in rows:
        try:
            found += findings_of(dict(r.get("findings") or {}))
        except Eagle3Error as e:
            bad.append(f"{r.get('notebook')}: {e}")
    lost = [Problem(b.split(":", 1)[0], "", "FindingError", b, "", failure=True) for b in bad]
    return diagnose(found, list(extra) + problems_of(rows) + lost, not_given_of(rows)), bad


def base_of(meta: dict) -> str | None:
    """The folder the run's inputs share (`meta["inputs"]`: {name: path}), paths under it shown relative; else the
    notebooks' working folder (`meta["cwd"]`: the repository, where the demo world lives); None when neither."""
    paths = [os.path.abspath(str(v)) for v in (meta.get("inputs") or {}).values()
             if isinstance(v, str) and v.strip() and os.path.isabs(v.strip())]
    if paths:
        common = os.path.commonpath([os.path.dirname(p) if os.path.splitext(p)[1] else p for p in paths])
        return common if common != os.sep else None
    return meta.get("cwd") or None


_HIDDEN = ("inputs", "cwd")          # meta the page uses (paths relative, inputs given) rather than lists


def index_html(rows: list[dict], meta: dict, diagnosis: tuple[Diagnosis, list[str]] | None = None,
               figures: dict[str, str] | None = None) -> str:
    """The index page: the answer (this run's diagnosis), the notebooks of this run, the stale rows of earlier
    runs; `figures` maps a notebook to its figure as inline HTML (`figure_of`)."""
    figures = figures or {}
    current, stale = this_run(rows), [r for r in rows if r.get("earlier_run")]
    d, bad = diagnosis if diagnosis is not None else diagnosis_of(current)
    n_ok = sum(r.get("status") == "ok" for r in current)
    base = base_of(meta)
    info = " · ".join(f"{k}: {html.escape(str(v))}" for k, v in meta.items() if v not in (None, "") and k not in
                      _HIDDEN)
    info += f" · paths relative to {html.escape(base)}" if base else ""
    pages = {str(r.get("notebook", ""))[:2]: r["html"] for r in current if r.get("html")}  # where -> its report
    given = tuple((meta.get("inputs") or {}).keys())         # the inputs given: never asked for again
    body = ["<section id='answer'><h2>The answer</h2>", decision_html(d.decision),   # the seed's decision first
            page.answer_html(d, bad, pages, base, given), "</section>",
            f"<section id='notebooks'><h2>Notebooks of this run</h2><p>{n_ok}/{len(current)} notebooks ok.</p>",
            page.notebooks_table(current, figures, base), "</section>",
            page.stale_html(stale, figures, base)]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>eagle3lib report</title>"
            f"<style>{page.CSS}</style></head><body><h1>eagle3lib report</h1><p class='meta'>{info}</p>"
            + "".join(body) + "</body></html>\n")


def write_index(out_dir: Path, rows: list[dict], meta: dict, problems: tuple[Problem, ...] = ()) -> None:
    """Write ``index.json`` and ``index.html`` atomically into `out_dir`; `problems`: the run's own (a parameters
    file's unknown keys), listed first."""
    meta = {"generated_at": dt.datetime.now().isoformat(timespec="seconds"), **meta}
    d, bad = diagnosis_of(this_run(rows), tuple(problems))
    data = {**meta, "problems": [p.to_dict() for p in d.problems], "diagnosis": {**d.to_dict(), "unreadable": bad},
            "notebooks": rows}
    out_dir = Path(out_dir)
    figures = {r.get("notebook"): f for r in rows if (f := figure_of(out_dir, r))}
    atomic_write_all({out_dir / "index.json": json.dumps(data, indent=2) + "\n",
                      out_dir / "index.html": index_html(rows, meta, (d, bad), figures)})
