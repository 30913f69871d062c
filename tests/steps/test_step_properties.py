"""Property tests: notebook 02's and 03's steps never fail on a neighbour of a planted defect.

Each step function of the two notebooks (and the layout functions of `hidden.explain` beneath them) is fed what a
broken deployment hands it: slots that match no boundary (None), accuracies that were never measured (None / NaN),
dumps and samples with no slot, NaN slots, proof tables of replays that replayed nothing. Any exception fails; the
result must say "not checked" / "unidentified" / "not measured" and name what was missing. Small inputs are built
directly (a random reference capture of 4 layers, no demo world, no target model), so each example takes
milliseconds.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
from types import SimpleNamespace

import matplotlib
import pandas as pd
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from eagle3lib.causes import STATUSES
from eagle3lib.hidden.capture import Capture, Slots
from eagle3lib.hidden.compare import compare
from eagle3lib.causes import LAYOUT_CAUSES
from eagle3lib.hidden.explain import causes_of, explain
from eagle3lib.layout import boundary_names
from eagle3lib.replay import stats as S
from eagle3lib.replay.verdict import THRESHOLDS, Verdict
from eagle3lib.steps import diffing as D
from eagle3lib.steps import sample_replay as SR
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs

matplotlib.use("Agg")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
L, H, T = 4, 8, 6
NAMES = tuple(boundary_names(L))                 # embed, layer_in.1 .. 3, final_prenorm, final_postnorm
_g = torch.Generator().manual_seed(0)
REF = Capture({b: torch.randn(T, H, generator=_g) for b in NAMES}, torch.arange(T), L, torch.float32, "random")

# ---------------------------------------------------------------- building blocks

# one slot as a server or a capture tool hands it over: a boundary's state (identified), scaled (identified, damaged),
# noise / NaN / another width (unidentified), or zeros (padding)
slot_kinds = st.one_of(st.tuples(st.sampled_from(["state", "scaled"]), st.sampled_from(NAMES)),
                       st.tuples(st.sampled_from(["noise", "nan", "zeros", "width", "some_nan"]), st.just("")))


def make_slot(kind: str, name: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "state":
        return REF[name].clone()
    if kind == "scaled":
        return REF[name] * 3.0
    if kind == "noise":
        return torch.randn(T, H, generator=g)
    if kind == "nan":
        return torch.full((T, H), float("nan"))
    if kind == "some_nan":
        x = torch.randn(T, H, generator=g)
        x[0] = float("nan")
        return x
    if kind == "zeros":
        return torch.zeros(T, H)
    return torch.randn(T, 3, generator=g)          # width 3 against H = 8


comparisons = st.lists(slot_kinds, max_size=4).map(
    lambda kinds: compare(Slots(tuple(make_slot(k, n, j) for j, (k, n) in enumerate(kinds)), None, torch.arange(T),
                                "synthetic"), REF))
missing = st.sampled_from([None, float("nan")])
accuracies = st.one_of(missing, st.floats(0, 1))
named = st.sampled_from(NAMES + ("zeros",))
layouts_with_gaps = st.lists(st.one_of(named, st.none()), max_size=5).map(tuple)


def unidentified(layout) -> list[int]:
    return [j for j, x in enumerate(layout) if x is None]


def no_none_shown(texts) -> None:
    """An unidentified slot is said so, never printed as a name."""
    for t in texts:
        assert "None" not in t, t


# ---------------------------------------------------------------- hidden.explain: layouts with unidentified slots

@SETTINGS
@given(expected=layouts_with_gaps, actual=layouts_with_gaps)
def test_explain_names_every_unidentified_slot(expected, actual):
    """Plain layouts with None slots (what a Comparison's `identified` holds): never sorted against names (the
    target-drift crash), each None slot reported as unidentified on its side, no None shown as a name."""
    d = explain(expected, actual, num_layers=L)
    for side, layout, severity in (("training", expected, "warning"), ("serving", actual, "error")):
        for j in unidentified(layout):
            assert any(f.kind == "unidentified" and f.slot == j and f.severity == severity and side in f.text
                       for f in d.findings), (side, j, d.findings)
    if unidentified(expected) or unidentified(actual):
        assert not d.clean and "unidentified" in d.summary
    no_none_shown([d.summary] + [f.text for f in d.findings])
    assert set(causes_of(d)) <= set(LAYOUT_CAUSES) | {"target_drift", "quantized_target"}
    assert len(d.frame()) == len(d.findings)


@SETTINGS
@given(training=comparisons, serving=comparisons)
def test_explain_of_comparisons_never_fails(training, serving):
    """Comparisons with NaN, other-width, zero-slot and unmatched slots on either side."""
    d = explain(training, serving, num_layers=L)
    for j in unidentified(serving.identified):
        assert any(f.slot == j and f.severity == "error" for f in d.findings), (j, d.findings)
    for j in unidentified(training.identified):
        assert any(f.slot == j and f.severity == "warning" for f in d.findings), (j, d.findings)
    no_none_shown([d.summary] + [f.text for f in d.findings])


# ---------------------------------------------------------------- notebook 03 (steps.diffing)

proof_tables = st.one_of(
    st.none(), st.just("not replayed: no served layout"),
    st.lists(accuracies, min_size=1, max_size=2).map(lambda accs: pd.DataFrame(
        [{"replay": label, "acc step 0": a, "samples": 0 if a is None else 4}
         for label, a in zip(("as served", "fixed (identified training layout)"), accs)])))


def sides_of(training, serving, dump_missing: str):
    if serving is None:
        return D.Sides(training, None, None, REF, dump_missing)
    return D.Sides(training, serving, explain(training, serving, num_layers=L), REF)


@SETTINGS
@given(training=comparisons, serving=st.one_of(st.none(), comparisons), proof=proof_tables,
       dump_missing=st.sampled_from([D.NO_DUMP, "not checked: the serving dump d holds 0 request(s), no request 0 "
                                                "(serving_dump, dump_request)"]))
def test_notebook_03_steps_say_what_is_missing(training, serving, proof, dump_missing):
    s = sides_of(training, serving, dump_missing)
    case = SimpleNamespace(serving_dump="dump" if serving is not None else "")
    for cmp in (s.training, s.serving):
        table = D.slot_table(cmp, dump_missing)
        if cmp is None:
            assert table == dump_missing
        elif not len(cmp.slots):
            assert isinstance(table, str) and "0 slots" in table
        else:
            assert list(table.columns) == D.SLOT_COLUMNS and len(table) == len(cmp.slots)
    with contextlib.redirect_stdout(io.StringIO()):       # it prints the summary first
        frame = D.explanation_frame(s)
    assert frame == dump_missing if serving is None else len(frame) == len(s.explanation.findings)
    json.dumps(D.diff_summary(s))

    acc = D.proof_summary(proof)
    if isinstance(proof, pd.DataFrame):
        assert list(acc) == [f"{r} ({n} training samples)" for r, n in zip(proof["replay"], proof["samples"])]
        for a, given_ in zip(acc.values(), proof["acc step 0"]):
            assert a is None if given_ is None or math.isnan(given_) else a == given_
    else:
        assert acc == {}

    head = D.diff_headline(s, proof)
    no_none_shown([head])
    if serving is None:
        assert dump_missing in head
    else:
        if unidentified(training.identified):
            assert f"training slot(s) {unidentified(training.identified)}" in head
        if len(acc) == 2 and None in acc.values():
            assert "not measured" in head

    found = D.diffing_findings(case, s, proof)
    layout = sorted(f.cause for f in found if f.cause in LAYOUT_CAUSES)   # each layout cause once; a damaged
    assert layout == sorted(LAYOUT_CAUSES)                                  # slot may confirm others (scale: drift)
    assert all(f.status == "confirmed" for f in found if f.cause not in LAYOUT_CAUSES)
    for f in found:
        assert f.status in STATUSES
        if f.status == "not checked":
            assert f.needs
    if serving is None:
        assert all(f.status == "not checked" and f.summary == dump_missing for f in found)
    elif unidentified(training.identified):        # training slots matching nothing decide no layout cause
        assert all(f.status in ("confirmed", "not checked") for f in found)
        assert all(f"training slot(s) {unidentified(training.identified)}" in f.summary for f in found
                   if f.status == "not checked")


@SETTINGS
@given(served=st.one_of(st.none(), layouts_with_gaps), fixed=st.one_of(st.none(), layouts_with_gaps))
def test_proof_of_fix_refuses_layouts_it_cannot_replay(served, fixed):
    """A served or trained layout with an unidentified slot, none, or no slot: a sentence naming why, before any
    model is loaded (the paths here do not exist)."""
    replayable = served is not None and len(served) and not unidentified(served) and fixed and not unidentified(fixed)
    if replayable:
        return                      # would load the draft: covered by tests/steps/test_diffing.py on the demo world
    case = SimpleNamespace(draft_path="no/draft", target_path="no/target", train_data="no/data")
    out = D.proof_of_fix(case, served, fixed)
    assert isinstance(out, str) and out.startswith(("not checked", "not replayed"))
    if served is not None and unidentified(served):
        assert str(unidentified(served)) in out
    elif served is not None and len(served) and fixed and unidentified(fixed):
        assert f"training slot(s) {unidentified(fixed)}" in out


# ---------------------------------------------------------------- notebook 02 (steps.sample_replay)

@SETTINGS
@given(cmp=comparisons, request=st.integers(0, 3))
def test_a_dumped_layout_is_known_only_when_every_slot_is(cmp, request):
    sv = SR.dumped_layout(cmp, "dump", request)
    ident = cmp.identified
    if not ident:
        assert sv.layout is None and "0 slots" in sv.detail
    elif unidentified(ident):
        assert sv.layout is None and str(unidentified(ident)) in sv.detail
    else:
        assert sv.layout == ident
    json.dumps(sv.evidence)
    no_none_shown([sv.detail] + sv.evidence["identified"])


def result(acc, layout, label: str) -> S.ReplayResult:
    """A replay's result whose step-0 accuracy is `acc` (None / NaN: nothing was scored)."""
    per_step = pd.DataFrame({"step": [0], "positions": [0 if acc is None else 100], "acc": pd.Series([acc], dtype=object),
                             "oov_rate": [0.0], "cond_acc": pd.Series([acc], dtype=object)})
    skipped = (("sample 's0'", "skipped: no layout"),) if acc is None else ()
    return S.ReplayResult(label, tuple(layout), tuple(layout), "offsets", 0, "zeros", "target", "token", 1,
                          per_step, pd.DataFrame(), pd.DataFrame(), float("nan"), float("nan"), float("nan"), skipped)


TRAINED = ("embed", "layer_in.1", "layer_in.2", "layer_in.3")
training_layouts = st.sampled_from([TRAINED, ("layer_in.1", "layer_in.2", "layer_in.3", "final_prenorm"),
                                    tuple(f"stored slot {j}" for j in range(4))])
serving_layouts = st.builds(
    SR.ServingLayout,
    st.one_of(st.none(), st.lists(named, max_size=5).map(tuple)),
    st.sampled_from(["serving dump", "typed", "engine rules", SR.ENGINE_DEFAULT, "none"]),
    st.just("the evidence"),
    st.fixed_dictionaries({"fc_slots": st.one_of(st.none(), st.integers(0, 5))}))


def verdict_of(train_acc, held: dict, which: str) -> Verdict:
    return Verdict(which, "because", train_acc, None, held, dict(THRESHOLDS), pd.DataFrame())


@SETTINGS
@given(tr_acc=accuracies, sv_acc=accuracies, trained=training_layouts, serving=serving_layouts,
       replayed=st.sampled_from(["both", "training", "none"]), held=st.dictionaries(
           st.sampled_from(["held-out", "new prompts"]), accuracies, max_size=2),
       which=st.sampled_from(["wiring", "generalization", "healthy"]))
def test_replay_findings_name_what_is_missing(tr_acc, sv_acc, trained, serving, replayed, held, which):
    """Missing accuracies, stored-slot (unnamed) trained layouts, unknown or empty serving layouts: every layout
    cause and the generalization gap get a finding; a missing number reads "not measured", never nan or a crash."""
    if serving.source == SR.ENGINE_DEFAULT and serving.layout is None:
        serving = SR.ServingLayout(("layer_in.1", "layer_in.2", "layer_in.3"), serving.source, serving.detail,
                                   serving.evidence)
    train = {}
    if replayed != "none":
        train["training"] = result(tr_acc, trained, "training")
    if replayed == "both" and serving.layout is not None:
        train["serving"] = result(sv_acc, serving.layout, "serving")
    verdicts = {k: verdict_of(tr_acc if k == "training" else sv_acc, held, which) for k in train}
    found = SR.replay_findings(verdicts, train, serving, L)
    causes = [f.cause for f in found]
    for c in LAYOUT_CAUSES + ("generalization_gap",):
        assert causes.count(c) == 1, (c, causes)
    for f in found:
        if f.status == "not checked":
            assert f.needs
        assert "nan" not in f.summary.replace("nano", "") and "None" not in f.summary, f.summary
    gap = next(f for f in found if f.cause == "generalization_gap")
    gone = [k for k, a in held.items() if a is None or math.isnan(a)]
    if "training" in verdicts and held and (tr_acc is None or math.isnan(tr_acc) or gone):
        assert gap.status == "not checked" and all(k in gap.needs for k in gone)
    if "training" in train and trained[0].startswith("stored slot") and serving.layout is not None \
            and serving.source != SR.ENGINE_DEFAULT:
        assert all(f.status == "not checked" and "stored" in f.summary for f in found if f.cause in LAYOUT_CAUSES)


@SETTINGS
@given(training=st.one_of(st.none(), layouts_with_gaps), serving=serving_layouts, k=st.integers(0, 5))
def test_layouts_to_replay_never_hand_on_an_unidentified_slot(training, serving, k):
    lays = SR.layouts_to_replay(training, serving)
    assert "training" in lays
    for lay in lays.values():
        assert lay is None or (len(lay) and None not in lay)
    for lay in (training, serving.layout):
        shown = SR.shown(lay, k)
        assert all(isinstance(x, str) for x in shown) and (lay is None or len(shown) == len(lay))


@SETTINGS
@given(recorded=st.one_of(missing, st.floats(-1, 1), st.just(-1.0)))
def test_a_missing_recorded_accuracy_is_not_given(recorded):
    inp = case_of(Inputs(draft="draft", target="target", train_data="data", recorded_acc=recorded))
    if recorded is None or math.isnan(recorded) or recorded < 0:
        assert inp.recorded_acc is None and inp.recorded_from == "not given"
    else:
        assert inp.recorded_acc == recorded and inp.recorded_from == "parameter"
