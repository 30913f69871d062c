"""Widget views as static HTML, for reports read offline in a browser with no kernel and no network.

A saved notebook keeps each widget as a view output (a model id) and the models' last state in
``metadata.widgets``. The live way to show them is the `@jupyter-widgets/html-manager` embed script (1.9 MB,
from a CDN, and its callbacks are the kernel's Python: notebook 02's token view would show sliders that move
and a table that never changes). `staticize(nb)` instead replaces each view output with the HTML of the saved
state: boxes as rows and columns, HTML / Label values as they are, controls as disabled inputs showing their
value (``sample: s0 · step 0 · position t 5``), an Output widget's captured outputs (the table) as the report
shows outputs. Models it does not know become one line naming the model; a view whose model was not saved
says so. The executed ``.ipynb`` keeps the real views for JupyterLab.
"""
from __future__ import annotations

import copy
import html

VIEW_MIME = "application/vnd.jupyter.widget-view+json"
STATE_MIME = "application/vnd.jupyter.widget-state+json"
CSS_CLASS = "eagle3lib-widget"      # every static view's outer element; the offline check counts them
NOTE = "static copy of a widget: run the notebook in JupyterLab to browse it"

_BOXES = {"VBoxModel": "column", "HBoxModel": "row", "BoxModel": "row", "GridBoxModel": "row",
          "AccordionModel": "column", "TabModel": "column", "StackModel": "column"}
_TEXT = {"HTMLModel", "HTMLMathModel", "LabelModel"}
_VALUES = {"IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "IntRangeSliderModel",
           "FloatRangeSliderModel", "BoundedIntTextModel", "BoundedFloatTextModel", "IntTextModel",
           "FloatTextModel", "TextModel", "TextareaModel", "CheckboxModel", "ToggleButtonModel",
           "IntProgressModel", "FloatProgressModel", "PlayModel", "DatePickerModel", "ColorPickerModel"}
_CHOICES = {"DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel", "SelectionSliderModel",
            "SelectMultipleModel"}
_SLIDERS = {"IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "IntProgressModel", "FloatProgressModel"}

STYLE = (f".{CSS_CLASS}{{border:1px dashed #bbb;padding:.4em;margin:.2em 0}}"
         f".{CSS_CLASS} .w-row{{display:flex;flex-wrap:wrap;gap:1em;align-items:center}}"
         f".{CSS_CLASS} .w-col{{display:flex;flex-direction:column;gap:.3em}}"
         f".{CSS_CLASS} .w-note{{color:#666;font-size:.85em;font-style:italic}}"
         f".{CSS_CLASS} label{{font-size:.9em}}")


def widget_states(nb) -> dict[str, dict]:
    """{model id: {"model_name": ..., "state": {...}}} saved in a notebook's metadata (empty when none)."""
    saved = (nb.get("metadata", {}).get("widgets") or {}).get(STATE_MIME) or {}
    return dict(saved.get("state") or {})


def _ref(value) -> str | None:
    """The model id of an ``IPY_MODEL_<id>`` reference."""
    return value[len("IPY_MODEL_"):] if isinstance(value, str) and value.startswith("IPY_MODEL_") else None


def _label(state: dict) -> str:
    desc = state.get("description") or ""
    return f"{html.escape(str(desc))} " if desc else ""


def _value_text(v) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (list, tuple)):
        return " – ".join(str(x) for x in v)
    return str(v)


def _output_html(out: dict, states: dict[str, dict], seen: frozenset) -> str:
    """One captured output of an Output widget, the way the report shows a cell's output."""
    kind = out.get("output_type")
    if kind == "stream":
        return f"<pre>{html.escape(out.get('text', ''))}</pre>"
    if kind == "error":
        return f"<pre>{html.escape(out.get('ename', ''))}: {html.escape(out.get('evalue', ''))}</pre>"
    data = out.get("data", {})
    if VIEW_MIME in data:                                                   # a widget displayed inside it
        return render(data[VIEW_MIME].get("model_id", ""), states, seen)
    if "text/html" in data:
        return "".join(data["text/html"]) if isinstance(data["text/html"], list) else str(data["text/html"])
    if "image/png" in data:
        png = data["image/png"]
        png = "".join(png) if isinstance(png, list) else png
        return f'<img alt="figure" src="data:image/png;base64,{png.strip()}">'
    if "text/plain" in data:
        text = data["text/plain"]
        return f"<pre>{html.escape(''.join(text) if isinstance(text, list) else text)}</pre>"
    return ""


def render(model_id: str, states: dict[str, dict], seen: frozenset = frozenset()) -> str:
    """The static HTML of one widget model and its children."""
    model = states.get(model_id)
    if model is None:
        return f"<span class='w-note'>widget {html.escape(model_id[:8])}: its state was not saved</span>"
    if model_id in seen:                                                  # a model that contains itself
        return ""
    seen = seen | {model_id}
    name, state = model.get("model_name", "?"), model.get("state") or {}
    if name in _BOXES:
        kids = "".join(render(r, states, seen) for r in map(_ref, state.get("children") or []) if r)
        titles = state.get("titles") or state.get("_titles") or ()
        head = (f"<div class='w-note'>{html.escape(' · '.join(str(t) for t in titles if t))}</div>"
                if titles else "")
        return f"<div class='w-{'col' if _BOXES[name] == 'column' else 'row'}'>{head}{kids}</div>"
    if name in _TEXT:
        value = str(state.get("value", ""))
        return f"<div>{_label(state)}{value if name != 'LabelModel' else html.escape(value)}</div>"
    if name == "OutputModel":
        return "<div>" + "".join(_output_html(o, states, seen) for o in state.get("outputs") or []) + "</div>"
    if name in _CHOICES:
        labels = list(state.get("_options_labels") or [])
        index = state.get("index")
        picked = [labels[i] for i in (index if isinstance(index, list) else [index])
                  if isinstance(i, int) and 0 <= i < len(labels)]
        shown = ", ".join(picked) if picked else "—"
        return f"<label>{_label(state)}<select disabled><option selected>{html.escape(shown)}</option></select></label>"
    if name in _VALUES:
        value = state.get("value")
        bar = ""
        if name in _SLIDERS and isinstance(value, (int, float)) and not isinstance(value, bool):
            bar = (f"<input type='range' disabled min='{state.get('min', 0)}' max='{state.get('max', 100)}' "
                   f"value='{value}'> ")
        return f"<label>{_label(state)}{bar}<b>{html.escape(_value_text(value))}</b></label>"
    if name == "ButtonModel":
        return f"<button disabled>{html.escape(str(state.get('description', '')))}</button>"
    return f"<span class='w-note'>{html.escape(name.removesuffix('Model'))} widget (live in JupyterLab)</span>"


def view_html(model_id: str, states: dict[str, dict]) -> str:
    """One view output as static HTML: the widget, then a note saying it is a copy."""
    return (f"<div class='{CSS_CLASS}' data-model-id='{html.escape(model_id)}'>{render(model_id, states)}"
            f"<div class='w-note'>{NOTE}</div></div>")


def staticize(nb):
    """A copy of `nb` whose widget view outputs are static HTML (``text/html``) and with no widget metadata."""
    nb = copy.deepcopy(nb)
    states = widget_states(nb)
    styled = False
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if VIEW_MIME not in data:
                continue
            body = view_html(data[VIEW_MIME].get("model_id", ""), states)
            if not styled:                                                  # one style block, on the first view
                body, styled = f"<style>{STYLE}</style>{body}", True
            out["data"] = {"text/html": body}
    nb.get("metadata", {}).pop("widgets", None)
    return nb
