"""A notebook's recorded findings as a reader wants them in the index: short sentences and small tables.

`findings_html(found)` renders the JSON values notebooks record (`findings.record`) without cutting them:
the small facts (scalars, short lists) on one line, a finding with a ``message`` / ``reason`` as that sentence, requested -> effective
settings (``changed``: {setting: [requested, effective]}) and one -> the other (`ARROWS`) with arrows, layouts of
the same length as one slot table, a dict of records (one per replay, per engine) or a list of records (the
config search's candidates) as a table whose constant columns become one line. The cause findings (``"findings"``) and the headline are left to the index; the full
data stays in ``index.json``.
"""
from __future__ import annotations

import html
import math

from .findings import FINDINGS_KEY

ARROWS = ("fix_accuracy",)          # {before: number, after: number} findings read as "before x -> after y"
LIST_LIMIT = 12                     # items of a list shown inline before "(+n more)"


def number(x) -> str:
    """A number as a reader wants it: ints as they are, floats to 3 significant digits, no exponent below 1e6."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    return str(x)


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def value_text(v) -> str:
    """Any JSON value as one escaped line (nested values compact: "k v, k v"; lists "a, b")."""
    esc = html.escape
    if v is None:
        return "—"
    if isinstance(v, str):
        return esc(v)
    if _scalar(v):
        return esc(number(v))
    if isinstance(v, list):
        if not v:
            return "none"
        shown = ", ".join(value_text(x) for x in v[:LIST_LIMIT])
        return shown + (f" (+{len(v) - LIST_LIMIT} more)" if len(v) > LIST_LIMIT else "")
    if isinstance(v, dict):
        return ", ".join(f"{esc(_label(k))} {value_text(x)}" for k, x in v.items()) or "none"
    return esc(str(v))


def _label(key: str) -> str:
    return str(key).replace("_", " ")


def _table(header: list[str] | None, rows: list[list[str]]) -> str:
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='small'>{head}{body}</table>"


def _lists(value: dict) -> bool:
    """{name: [ids]} with more than one name (layers per engine, ids per convention): read as a table."""
    return len(value) > 1 and all(isinstance(v, list) and all(_scalar(x) for x in v) for v in value.values())


def _short(v) -> bool:
    """Fits in one run of a line: a scalar, or a short list of scalars."""
    if isinstance(v, list):
        return len(v) <= LIST_LIMIT and all(_scalar(x) for x in v) and len(value_text(v)) <= 80
    return _scalar(v) and len(str(v)) <= 80


def _changed(changed: dict) -> str:
    rows = [[html.escape(_label(k)), f"{value_text(v[0])} → {value_text(v[1])}"] if isinstance(v, list) and len(v) == 2
            else [html.escape(_label(k)), value_text(v)] for k, v in changed.items()]
    return _table(["setting", "requested → effective"], rows) if rows else "nothing changed"


def _records(value: dict) -> str:
    """{name: {field: value}}: sentences when each has a reason / message, else a table, constant fields as a line."""
    esc = html.escape
    if all(isinstance(r.get("reason") or r.get("message"), str) for r in value.values()):
        return "<ul>" + "".join(
            f"<li><b>{esc(str(k))}</b>: " + (f"<b>{value_text(r['verdict'])}</b>: " if "verdict" in r else "")
            + value_text(r.get("reason") or r.get("message")) + "</li>" for k, r in value.items()) + "</ul>"
    fields = [f for f in dict.fromkeys(f for r in value.values() for f in r)
              if not all(r.get(f) == str(k) for k, r in value.items())]             # a field naming the row: dropped
    same = [f for f in fields if len(value) > 1 and len({repr(r.get(f)) for r in value.values()}) == 1]
    cols = [f for f in fields if f not in same]
    table = _table([""] + [esc(_label(f)) for f in cols],
                   [[f"<b>{esc(str(k))}</b>"] + [value_text(r.get(f)) for f in cols] for k, r in value.items()])
    first = next(iter(value.values()))
    common = f"<div>all: {value_text({f: first.get(f) for f in same})}</div>" if same else ""
    return table + common


def value_html(key: str, value) -> str:
    """One finding: a sentence, an inline list, or a small table."""
    esc = html.escape
    if isinstance(value, dict) and value:
        if key in ARROWS and len(value) == 2 and all(isinstance(v, (int, float)) for v in value.values()):
            (a, x), (b, y) = value.items()
            return f"{esc(str(a))} <b>{value_text(x)}</b> → {esc(str(b))} <b>{value_text(y)}</b>"
        message = value.get("message") or value.get("reason")
        if isinstance(message, str):
            return value_text(message)
        if all(isinstance(v, dict) for v in value.values()):
            return _records(value)
        if _lists(value):
            return _table(None, [[esc(str(n)), value_text(x)] for n, x in value.items()])
        parts, inline = [], {}
        for k, v in value.items():
            if k == "changed" and isinstance(v, dict):
                parts.append(_changed(v))
            elif isinstance(v, dict) and _lists(v):
                parts.append(_table([esc(_label(k)), ""], [[esc(str(n)), value_text(x)] for n, x in v.items()]))
            elif isinstance(v, list) and v and all(isinstance(x, dict) and x for x in v):    # records: a table
                parts.append(f"<div>{esc(_label(k))}:</div>" + _records({str(i): x for i, x in enumerate(v, 1)}))
            else:
                inline[k] = v
        line = " · ".join(f"{esc(_label(k))}: {value_text(v)}" for k, v in inline.items())
        return "".join([f"<div>{line}</div>" if line else ""] + parts)
    return value_text(value)


def _layout_table(layouts: dict[str, list]) -> str:
    n = len(next(iter(layouts.values())))
    return _table(["slot"] + [html.escape(_label(k)) for k in layouts],
                  [[str(i)] + [value_text(v[i]) for v in layouts.values()] for i in range(n)])


def _key_html(key: str, links: dict[str, str]) -> str:
    label = html.escape(_label(key))
    return f'<a href="{html.escape(links[key])}">{label}</a>' if key in links else label


def findings_html(found: dict, links: dict[str, str] | None = None) -> str:
    """Every finding but the headline and the cause findings, as a list of sentences and small tables; a key in
    `links` ({key: address}) links to the section holding its evidence."""
    links = links or {}
    found = {k: v for k, v in dict(found or {}).items() if k not in ("headline", FINDINGS_KEY)}
    layouts = {k: v for k, v in found.items() if k.endswith("layout") and isinstance(v, list) and v
               and all(_scalar(x) for x in v)}
    if len(layouts) > 1 and len({len(v) for v in layouts.values()}) == 1:     # trained vs served, slot by slot
        items = [f"<li>{_layout_table(layouts)}</li>"]
        found = {k: v for k, v in found.items() if k not in layouts}
    else:
        items = []
    short = {k: v for k, v in found.items() if _short(v)}
    if short:                                                                # the small facts: one line
        items.append("<li>" + " · ".join(f"<b>{_key_html(k, links)}</b>: {value_text(v)}" for k, v in short.items())
                     + "</li>")
    for k, v in found.items():
        if k not in short:
            items.append(f"<li><b>{_key_html(k, links)}</b>: {value_html(k, v)}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""
