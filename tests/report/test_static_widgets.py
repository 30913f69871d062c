"""Tests for eagle3lib.report.static_widgets: widget views -> static HTML of their saved state."""
from __future__ import annotations

import nbformat
import pytest

from eagle3lib.report import static_widgets as sw
from tests.widget_views import view_ids

w = pytest.importorskip("ipywidgets")


def _token_view_like():
    """A widget shaped like notebook 02's token view: a box of controls, an HTML view, an Output with a table."""
    sample = w.Dropdown(options=[("s0", 0), ("s1", 1)], value=1, description="sample")
    pos = w.IntSlider(5, 0, 9, description="position t")
    out = w.Output()
    out.outputs = ({"output_type": "display_data", "metadata": {},
                    "data": {"text/html": "<table class='pos'><tr><td>top-1</td></tr></table>"}},)
    box = w.VBox([w.HBox([sample, pos]), w.HTML("<p class='marks'>tokens</p>"), out,
                  w.ColorPicker(description="odd")])
    return box


def _notebook(views: list[str], state: dict):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("browser")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/plain": "VBox(...)", sw.VIEW_MIME: {"version_major": 2, "version_minor": 0, "model_id": m}})
        for m in views]
    nb.cells = [cell]
    nb.metadata["widgets"] = {sw.STATE_MIME: state}
    return nb


def test_a_token_view_becomes_its_saved_table_and_control_values():
    box = _token_view_like()
    state = w.Widget.get_manager_state()
    nb = _notebook([box.model_id], state)
    out = sw.staticize(nb)
    data = out.cells[0].outputs[0]["data"]
    assert list(data) == ["text/html"]
    page = data["text/html"]
    assert "<table class='pos'><tr><td>top-1</td></tr></table>" in page      # the Output widget's table
    assert "<p class='marks'>tokens</p>" in page                             # the HTML view, unescaped
    assert "sample <select disabled><option selected>s1</option></select>" in page
    assert "position t <input type='range' disabled min='0' max='9' value='5'> <b>5</b>" in page
    assert "odd <b>black</b>" in page                                       # a control shows its value
    assert page.count(f"class='{sw.CSS_CLASS}'") == 1 and sw.NOTE in page and page.startswith("<style>")
    assert "widgets" not in out.metadata
    assert sw.VIEW_MIME in nb.cells[0].outputs[0]["data"] and "widgets" in nb.metadata   # the input is untouched


def test_views_of_models_that_were_not_saved_or_are_unknown_say_so():
    state = {"version_major": 2, "version_minor": 0, "state": {
        "a": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_a", "IPY_MODEL_b", "IPY_MODEL_gone"]}},
        "b": {"model_name": "FancyChartModel", "state": {}}}}
    page = sw.staticize(_notebook(["a", "zz-missing"], state)).cells[0].outputs
    first, second = (o["data"]["text/html"] for o in page)
    assert "FancyChart widget (live in JupyterLab)" in first                # unknown model: named, not dropped
    assert "widget gone: its state was not saved" in first                  # a child that was not saved
    assert "widget zz-missi: its state was not saved" in second             # a view of an unsaved model
    assert second.count("<style>") == 0 and first.count("<style>") == 1     # one style block per page


def test_a_notebook_without_widgets_is_copied_unchanged():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1")]
    nb.cells[0].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "1"}, execution_count=1)]
    out = sw.staticize(nb)
    assert out == nb and out is not nb
    assert view_ids(nb) == [] and sw.widget_states(nb) == {}
