"""explain() on plain layouts: every kind of layout difference is named, with the slot and in words.

Comparisons with damage (scale, dtype, alignment, NaN) are explained in tests/test_compare.py, where they are made.
"""
from __future__ import annotations

import pytest

from eagle3lib.hidden.explain import explain

L = 61


def test_explain_plain_layouts_seed_case():
    """The seed in names only: trained [embed, out3, out31, out59] of 61 layers, served [out3, out31, out59]."""
    d = explain(["embed", "layer_out.3", "layer_out.31", "layer_out.59"], ["layer_out.3", "layer_out.31",
                                                                          "layer_out.59"], num_layers=L)
    assert d.expected == ("embed", "layer_in.4", "layer_in.32", "layer_in.60")
    assert d.kinds == {"missing_slot", "width"} and "expects 4 slots" in d.summary
    missing = [f for f in d.findings if f.kind == "missing_slot"]
    assert [f.slot for f in missing] == [0] and "embed" in missing[0].text and "move one place left" in missing[0].text
    assert explain(["layer_in.2", "final_prenorm"], ["layer_in.2", "final_prenorm"], num_layers=L).clean
    assert explain(["layer_in.2"], ["layer_in.2", "layer_in.9"], num_layers=L).kinds == {"extra_slot", "width"}
    assert list(d.frame().columns) == ["kind", "severity", "slot", "text"] and len(d.frame()) == len(d.findings)


@pytest.mark.parametrize("served, kind, slot, words", [
    (["layer_in.4", "layer_in.32", "layer_in.60"], "shift", None, "1 layer(s) deeper"),       # output- vs input-of
    (["layer_in.2", "layer_in.30", "layer_in.58"], "shift", None, "1 layer(s) shallower"),
    (["layer_in.31", "layer_in.3", "layer_in.59"], "permutation", None, "wrong order"),
    (["layer_in.3", "layer_in.31", "layer_in.40"], "shift", 2, "slot 2 holds layer_in.40"),
    (["layer_in.3", "layer_in.31", "final_postnorm"], "other_boundary", 2,
     "holds final_postnorm, trained on layer_in.59"),   # a norm is not a layer: no "2 layers deeper"
])
def test_each_layout_difference_is_named(served, kind, slot, words):
    d = explain(["layer_in.3", "layer_in.31", "layer_in.59"], served, num_layers=L)
    hits = [f for f in d.findings if f.kind == kind]
    assert not d.clean and hits and hits[0].slot == slot and words in hits[0].text and hits[0].severity == "error"
    assert words in d.summary and d.summary.startswith(f"{len(d.findings)} problem(s)")


def test_zero_slot_given_by_name_is_padding():
    """'zeros' (an all-zero slot, as compare() identifies it and replay feeds it) is accepted by name too; a real
    unknown name is still refused."""
    from eagle3lib.errors import LayoutError
    d = explain(["embed", "layer_in.2", "layer_in.4", "layer_in.6"], ["layer_in.2", "layer_in.4", "layer_in.6",
                                                                     "zeros"], num_layers=8)
    assert d.kinds == {"missing_slot", "padding"}
    with pytest.raises(LayoutError, match="nonsense"):
        explain(["layer_in.3"], ["nonsense"], num_layers=L)


def test_pre_vs_post_norm_final_state_is_named():
    d = explain(["layer_in.3", "final_prenorm"], ["layer_in.3", "final_postnorm"], num_layers=L)
    assert d.kinds == {"postnorm"} and "post-norm" in d.findings[0].text and d.findings[0].slot == 1


def test_names_are_used_in_the_words():
    d = explain(["embed", "layer_in.3"], ["layer_in.3"], num_layers=L, names=("SpecForge", "vLLM"))
    assert all("vLLM" in f.text or "expects" in f.text for f in d.findings) and d.actual == ("layer_in.3",)


def test_an_unidentified_training_slot_is_never_sorted_against_names():
    """Regression (target drift, served from the changed target): the training slots past the embedding match no
    boundary of the changed target (None) while serving's all do. `_layout_findings` sorted both sides to look for a
    permutation: TypeError '<' between NoneType and str, and notebook 03 never reached its drift check."""
    d = explain(("embed", None, None, None), ("embed", "layer_in.2", "layer_in.4", "layer_in.6"), num_layers=8)
    assert d.kinds == {"unidentified"} and not d.clean
    assert [(f.slot, f.severity) for f in d.findings] == [(1, "warning"), (2, "warning"), (3, "warning")]
    assert all("training slot" in f.text and "not checked" in f.text for f in d.findings)
    d = explain(("layer_in.1",), (None,), num_layers=8)       # a served slot matching nothing is never "clean"
    assert d.kinds == {"unidentified"} and d.findings[0].severity == "error" and "serving slot 0" in d.summary
    d = explain((None, "layer_in.2"), ("layer_in.2",), num_layers=8)
    assert "(unidentified) is not fed" in d.summary and "None" not in d.summary
