"""Notebook 02's steps: the serving layout only from evidence (dump > typed > engine rules > none), and the findings
its replays support (what its case is: tests/steps/test_case.py)."""
from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from eagle3lib.replay import stats as S
from eagle3lib.replay import verdict as V
from eagle3lib.steps import sample_replay as SR
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from tests.replay.test_run import LAYOUT, make_setup

SERVED = ("layer_in.2", "layer_in.4", "layer_in.6")


def fake(acc0: float, layout=LAYOUT, label: str = "x") -> S.ReplayResult:
    per_step = pd.DataFrame({"step": [0], "positions": [100], "acc": [acc0], "oov_rate": [0.0], "cond_acc": [acc0]})
    return S.ReplayResult(label, tuple(layout), tuple(layout), "offsets", 0, "zeros", "target", "token", 1, per_step,
                          pd.DataFrame(), pd.DataFrame(), 1 + acc0, float("nan"), float("nan"), ())


def test_serving_layout_comes_from_evidence_never_a_default(tmp_path):
    setup = make_setup(tmp_path)
    inp = case_of(Inputs(draft=str(tmp_path / "draft"), target=str(tmp_path / "target"), train_data="data/x"))
    none = SR.serving_layout(inp, setup.num_layers)
    assert none.layout is None and none.source == "none" and "serving_dump" in none.detail
    assert SR.layouts_to_replay(setup.training_layout, none) == {"training": LAYOUT}
    typed = SR.serving_layout(inp, setup.num_layers, typed="layer_in.2,layer_in.4")
    assert typed.layout == ("layer_in.2", "layer_in.4") and typed.source == "typed"
    # the tiny draft's ids [-1, 1, 3, 5] sit in eagle_config: SGLang reads them (+1), vLLM falls back to its default
    sg = SR.serving_layout(inp, setup.num_layers, engine="sglang", engine_version="0.5.6")
    assert sg.source == "engine rules" and sg.layout == LAYOUT
    vl = SR.serving_layout(inp, setup.num_layers, engine="vllm")
    assert vl.layout == ("layer_in.2", "layer_in.4", "layer_in.5")
    assert SR.layouts_to_replay(setup.training_layout, vl)["serving"] == vl.layout


def _verdicts(train, held=None):
    return {k: V.decide(r, held, recorded_acc=0.8) for k, r in train.items()}


def test_findings_clean_when_serving_feeds_the_trained_layout():
    served = SR.ServingLayout(LAYOUT, "serving dump", "identified from a dump")
    train = {"training": fake(0.8), "serving": fake(0.8)}
    f = SR.replay_findings(_verdicts(train, {"held-out": fake(0.78)}), train, served, 8)
    assert {x.status for x in f} == {"ruled out"}
    assert {x.cause for x in f} == {"aux_layout_mismatch", "final_norm_slot", "layer_id_off_by_one",
                                    "generalization_gap"}


def test_missing_embedding_slot_is_confirmed_with_both_accuracies():
    served = SR.ServingLayout(SERVED + ("zeros",), "serving dump", "identified from a dump")
    train = {"training": fake(0.8), "serving": fake(0.2, SERVED + ("zeros",))}
    f = {x.cause: x for x in SR.replay_findings(_verdicts(train), train, served, 8)}
    m = f["aux_layout_mismatch"]
    assert m.status == "confirmed" and m.evidence["acc_0_served_layout"] == 0.2
    assert m.evidence["acc_0_trained_layout"] == 0.8 and "embed" in m.fix
    assert f["final_norm_slot"].status == "ruled out" and f["generalization_gap"].status == "not checked"


def test_engine_rules_alone_only_suspect_and_no_evidence_is_not_checked():
    served = SR.ServingLayout(SERVED + ("zeros",), "engine rules", "what sglang captures by its rules")
    train = {"training": fake(0.8), "serving": fake(0.2, SERVED + ("zeros",))}
    f = {x.cause: x for x in SR.replay_findings(_verdicts(train), train, served, 8)}
    assert f["aux_layout_mismatch"].status == "suspected"
    none = SR.ServingLayout(None, "none", "give a serving dump")
    f = SR.replay_findings(_verdicts({"training": fake(0.8)}), {"training": fake(0.8)}, none, 8)
    assert all(x.status == "not checked" for x in f) and all(x.needs for x in f)


def test_a_shifted_or_postnorm_slot_is_its_own_cause():
    shifted = ("layer_in.1", "layer_in.3", "layer_in.5", "layer_in.7")
    lay = ("layer_in.1", "layer_in.3", "layer_in.5", "layer_in.7")
    train = {"training": fake(0.8, lay), "serving": fake(0.1, ("layer_in.2", "layer_in.4", "layer_in.6", "final_prenorm"))}
    f = {x.cause: x for x in SR.replay_findings(_verdicts(train), train,
                                                SR.ServingLayout(("layer_in.2", "layer_in.4", "layer_in.6",
                                                                  "final_prenorm"), "typed", "typed"), 8)}
    assert f["layer_id_off_by_one"].status == "confirmed", shifted
    assert f["aux_layout_mismatch"].status == "ruled out"
    post = ("layer_in.2", "layer_in.4", "layer_in.6", "final_postnorm")
    lay = ("layer_in.2", "layer_in.4", "layer_in.6", "final_prenorm")
    train = {"training": fake(0.8, lay), "serving": fake(0.3, post)}
    f = {x.cause: x for x in SR.replay_findings(_verdicts(train), train, SR.ServingLayout(post, "typed", "t"), 8)}
    assert f["final_norm_slot"].status == "confirmed" and f["aux_layout_mismatch"].status == "ruled out"


def test_search_starts_only_from_a_wiring_verdict():
    train = {"training": fake(0.8), "serving": fake(0.1, SERVED + ("zeros",))}
    v = _verdicts(train)
    assert SR.search_start(v, {"training": LAYOUT, "serving": SERVED + ("zeros",)}) == ("serving", SERVED + ("zeros",))
    v = _verdicts({"training": fake(0.8)})
    assert SR.search_start(v, {"training": LAYOUT}) is None
    assert dataclasses.is_dataclass(SR.ServingLayout)


# ---------------------------------------------------------------- a config without ids (issue 25)

def _no_ids(tmp_path):
    import json
    setup = make_setup(tmp_path)
    cfg = tmp_path / "draft" / "config.json"
    raw = json.loads(cfg.read_text())
    raw.get("eagle_config", {}).pop("eagle_aux_hidden_state_layer_ids", None)
    raw.pop("eagle_aux_hidden_state_layer_ids", None)
    cfg.write_text(json.dumps(raw))
    return setup, case_of(Inputs(draft=str(tmp_path / "draft"), target=str(tmp_path / "target"), train_data="data/x"))


def test_a_config_without_ids_is_served_the_engine_default_and_the_replay_decides(tmp_path):
    """No ids: the serving side is every engine's default capture (named with the config file and the key), never
    a DataError; the drop of its replay against the trained layout confirms missing_layer_ids (measured); the
    layout causes are not checked (there are no ids to be off)."""
    setup, inp = _no_ids(tmp_path)
    sv = SR.serving_layout(inp, setup.num_layers)
    assert sv.source == SR.ENGINE_DEFAULT and sv.layout == ("layer_in.2", "layer_in.4", "layer_in.5")
    assert sv.evidence["key"] == "eagle_aux_hidden_state_layer_ids" and sv.evidence["file"].endswith("config.json")
    assert SR.serving_layout(inp, setup.num_layers, engine="vllm").source == SR.ENGINE_DEFAULT
    assert SR.layouts_to_replay(None, sv) == {"training": None, "serving": sv.layout}      # stored slots
    assert SR.shown(None, 4) == ["stored slot 0", "stored slot 1", "stored slot 2", "stored slot 3"]
    train = {"training": fake(0.8), "serving": fake(0.2, sv.layout + ("zeros",))}
    f = {x.cause: x for x in SR.replay_findings(_verdicts(train), train, sv, 8)}
    m = f["missing_layer_ids"]
    assert m.status == "confirmed" and m.measured and m.evidence["acc_0_engine_default"] == 0.2
    assert "vLLM refuses" in m.summary and "measurement" in m.evidence
    assert all(f[c].status == "not checked" for c in ("aux_layout_mismatch", "layer_id_off_by_one"))
    train = {"training": fake(0.8), "serving": fake(0.79, sv.layout)}   # trained on the default: ruled out
    f = {x.cause: x for x in SR.replay_findings(_verdicts(train), train, sv, 8)}
    assert f["missing_layer_ids"].status == "ruled out"


def test_a_trained_layout_nothing_names_replays_the_stored_slots(tmp_path):
    """No ids, no declared layout, no identification: the training samples are replayed as stored (the fc's
    order) instead of stopping."""
    import torch
    from eagle3lib.replay import items as I, run as R
    from eagle3lib.samples.sample import Sample
    setup = dataclasses.replace(make_setup(tmp_path), training_layout=None)
    s = Sample("s0", torch.randint(0, 120, (16,)), torch.ones(16, dtype=torch.long), torch.randn(16, 4, 32))
    r = R.replay(setup, [s], layout=None, num_steps=1, progress=False)
    assert r.layout == I.stored_layout(4) and not r.skipped and r.summary()["positions"] > 0


@pytest.mark.slow
def test_the_notebooks_replays_beside_the_part_read_no_sample_again():
    """Notebook 02's accuracy by position and token view run after its part inside the case's reads: the hidden-state
    files the part read are not opened again (each was, up to 7 times in the notebook)."""
    from eagle3lib import opened
    from eagle3lib.demo import world as demo
    demo.ensure_world(progress=False)
    case = case_of(Inputs())
    res = SR.run(case).results
    setup, layouts = res["setup"], res["layouts"]
    with opened.counting() as opens:
        by_position = SR.position_accuracy(case, setup, n=4, seed=0)
        details = SR.token_details(case, setup, layouts, n=2, seed=0, num_steps=2)
    states = [p for p in opens if "/hidden_states/" in p]
    assert not states, states[:3]
    assert by_position.positions.sum() > 0 and set(details) == set(layouts)
    assert all(len(d) == 2 for d in details.values())
