"""Check 13 (what the engine feeds the draft, what K means): each cause confirmed on the artifacts that show it,
ruled out on a healthy draft and launch (the demo's healthy vLLM deployment too), not checked naming the input
that is absent."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from eagle3lib.causes import raised
from eagle3lib.checks.draft_feed import DRAFT_FEED_CAUSES, check_draft_feed
from eagle3lib.checks.inputs import read_artifacts
from tests.checks.world import canonical_tensors, draft_raw, write_data, write_draft, write_target

SG = ("python -m sglang.launch_server --model-path t --speculative-draft-model-path d "
      "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
      "--speculative-num-draft-tokens 4")
VL_SPEC = "vllm serve t {top} --speculative-config '{{\"method\": \"eagle3\", \"model\": \"d\"{extra}}}'"
HEALTHY = Path(__file__).resolve().parents[2] / "data" / "demo_vllm" / "healthy"
OFF = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": False}


def vl(extra: str = '"num_speculative_tokens": 3', top: str = "") -> str:
    return VL_SPEC.format(top=top, extra=(", " + extra) if extra else "")


def _f(tmp_path, launch=None, raw=None, tensors=True, data=False, k=3, **kw) -> dict:
    raw = raw or draft_raw()
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))       # a fresh folder per call: no files left from the last
    d = write_draft(tmp_path, raw, canonical_tensors(raw, k) if tensors else None)
    art = read_artifacts(draft=d, target=write_target(tmp_path), launch=launch,
                         data=write_data(tmp_path) if data else None)
    found = check_draft_feed(art, **kw)
    assert [x.cause for x in found] == list(DRAFT_FEED_CAUSES)
    return {x.cause: x for x in found}


@pytest.mark.parametrize("launch,engine", [(SG, "sglang"), (vl(), "vllm")])
def test_healthy_draft_and_launch_raise_nothing(tmp_path, launch, engine):
    """The tiny healthy draft on either engine: nothing raised; the stale-KV row needs the version."""
    f = _f(tmp_path, launch, engine=engine)
    assert not raised(list(f.values()))
    for c in ("aux_opt_out", "pipeline_parallel_aux", "layer_id_count", "k_schedule"):
        assert f[c].status == "ruled out", c


@pytest.mark.skipif(not (HEALTHY / "served" / "launch.txt").exists(), reason="no demo vLLM deployment here")
def test_demo_healthy_deployment_is_ruled_out():
    """The demo's healthy vLLM 0.32 deployment (its launch, draft, target): every cause ruled out."""
    art = read_artifacts(draft=HEALTHY / "draft", target=HEALTHY.parents[1] / "demo_artifacts" / "target",
                         launch=(HEALTHY / "served" / "launch.txt").read_text())
    f = {x.cause: x for x in check_draft_feed(art, engine="vllm", engine_version="0.32.0")}
    assert {c: x.status for c, x in f.items()} == {c: "ruled out" for c in DRAFT_FEED_CAUSES}


def test_aux_opt_out_confirmed_when_the_draft_was_trained_with_aux_states(tmp_path):
    """use_aux_hidden_state false on a draft whose fc takes 3 slots: confirmed on vLLM (V1: last hidden state, no
    fc; V2: the concatenation, no fc), citing the runner rows; true / absent: ruled out."""
    raw = draft_raw(eagle_config=OFF)
    f = _f(tmp_path, vl(), raw, engine="vllm", engine_runner="v1")["aux_opt_out"]
    assert f.status == "confirmed" and f.evidence["fc_slots"] == 3 and f.explains == ("aux_layout_mismatch",)
    assert "last hidden state" in f.evidence["fed"]["vllm v1"] and "gpu_model_runner.py:643" in f.source
    f = _f(tmp_path, vl(), raw, engine="vllm")["aux_opt_out"]
    assert f.status == "confirmed" and set(f.evidence["fed"]) == {"vllm v1", "vllm v2"}
    no_flag = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5]})
    assert _f(tmp_path, vl(), no_flag, engine="vllm")["aux_opt_out"].status == "ruled out"


def test_aux_opt_out_from_training_data_and_on_a_last_state_draft(tmp_path):
    """Without weights the training data's 3 slots decide (confirmed); a 1-slot fc (a last-state draft): ruled out
    on V1, suspected without the runner (V2 still feeds aux states); no weights nor data: not checked naming them."""
    raw = draft_raw(eagle_config=OFF)
    assert _f(tmp_path, vl(), raw, tensors=False, data=True, engine="vllm")["aux_opt_out"].status == "confirmed"
    assert _f(tmp_path, vl(), raw, k=1, engine="vllm", engine_runner="v1")["aux_opt_out"].status == "ruled out"
    assert _f(tmp_path, vl(), raw, k=1, engine="vllm")["aux_opt_out"].status == "suspected"
    f = _f(tmp_path, vl(), raw, tensors=False, engine="vllm")["aux_opt_out"]
    assert f.status == "not checked" and "fc.weight" in f.needs
    f = _f(tmp_path, SG, raw, engine="sglang")["aux_opt_out"]          # sglang PR#14920 not placed by release
    assert f.status == "suspected" and "14920" in f.source and "version" in f.needs
    assert _f(tmp_path, SG, raw, engine="sglang", engine_version="head")["aux_opt_out"].status == "confirmed"


def test_aux_opt_out_without_the_engine_asks_every_home(tmp_path):
    """No engine given: each home's feed rule says what it feeds. Trained on aux states: vLLM confirms, SGLang (no
    version) suspects, so suspected until the engine is known; a last-state draft: each suspects (vLLM's V2 runner,
    SGLang before PR#14920 feed it aux states), none confirms: not checked, the engine decides (a public last-state
    draft alone alarms nobody); each engine's reading kept."""
    raw = draft_raw(eagle_config=OFF)
    f = _f(tmp_path, None, raw)["aux_opt_out"]
    assert f.status == "suspected" and f.evidence["by_engine"] == {"sglang": "suspected", "vllm": "confirmed"}
    assert f.needs and "14920" in f.source and set(f.evidence["fed"]) == {"sglang", "vllm v1", "vllm v2"}
    f = _f(tmp_path, None, raw, k=1)["aux_opt_out"]
    assert f.status == "not checked" and f.evidence["by_engine"] == {"sglang": "suspected", "vllm": "suspected"}
    assert "serving engine" in f.needs and f.summary.endswith("the serving engine decides")


def test_a_home_without_feed_rules_is_not_checked_naming_it(tmp_path, monkeypatch):
    """An engine whose home has no feed rule: aux_opt_out and pipeline_parallel_aux say "not checked", naming the
    home's feed_rules, never another engine's verdict."""
    import dataclasses
    from eagle3lib.checks import draft_feed
    from eagle3lib.serving.homes import homes
    bare = {e: dataclasses.replace(h, feed_rules={}) for e, h in homes().items()}
    monkeypatch.setattr(draft_feed, "homes", lambda: bare)
    f = _f(tmp_path, SG + " --pp-size 2", draft_raw(eagle_config=OFF), engine="sglang", engine_version="head")
    for c in ("aux_opt_out", "pipeline_parallel_aux"):
        assert f[c].status == "not checked" and "sglang's home (feed_rules)" in f[c].needs, c


def test_pipeline_parallel_aux_layers_on_earlier_ranks(tmp_path):
    """PP 2 on an 8-layer target, ids [1, 3, 5] (ranks 0 and 1): suspected on SGLang, not checked on vLLM (V2 relays
    for Llama / Qwen2); ids all on the last rank: ruled out; PP 1: ruled out."""
    f = _f(tmp_path, SG + " --pp-size 2")["pipeline_parallel_aux"]
    assert f.status == "suspected" and f.evidence["ranks"] == [0, 1] and "39644" in f.source
    f = _f(tmp_path, vl(top="--pipeline-parallel-size 2"))["pipeline_parallel_aux"]
    assert f.status == "not checked" and "eagle3_utils.py:44" in f.source
    late = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [5, 6, 7], "use_aux_hidden_state": True})
    assert _f(tmp_path, SG + " --pp-size 2", late)["pipeline_parallel_aux"].status == "ruled out"
    assert _f(tmp_path, SG)["pipeline_parallel_aux"].status == "ruled out"


def test_layer_id_count(tmp_path):
    """5 ids under target_layer_ids-style keys on a 3-slot fc: confirmed; 5 top-level ids on vLLM with no
    num_aux_hidden_states (fc sized 3): confirmed; 3 ids, a 3-slot fc: ruled out; no ids: not checked."""
    five = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 3, 5, 6]})
    f = _f(tmp_path, vl(), five, engine="vllm")["layer_id_count"]
    assert f.status == "confirmed" and f.evidence["fc_slots"] == 3
    top = draft_raw(eagle_config=None, eagle_aux_hidden_state_layer_ids=[0, 1, 3, 5, 6])
    f = _f(tmp_path, vl(), top, k=5, engine="vllm")["layer_id_count"]
    assert f.status == "confirmed" and f.evidence["vllm_fc_slots"] == 3
    assert _f(tmp_path, vl(), engine="vllm")["layer_id_count"].status == "ruled out"
    f = _f(tmp_path, vl(), draft_raw(eagle_config=None), engine="vllm")["layer_id_count"]
    assert f.status == "not checked" and "layer ids" in f.needs


def test_the_fc_an_engine_builds_is_its_homes_answer(tmp_path, monkeypatch):
    """Only a home that sizes fc from the config (`EngineHome.built_fc_slots`: vLLM's) judges the id count against
    it: five top-level ids with fc sized 3 are confirmed on vLLM, suspected with no engine named (vLLM would), and
    ruled out on SGLang, whose home sizes nothing, until its home says it builds 2 slots."""
    from dataclasses import replace

    from eagle3lib.serving.homes import homes
    top = draft_raw(eagle_config=None, eagle_aux_hidden_state_layer_ids=[0, 1, 3, 5, 6])
    assert _f(tmp_path, None, top, k=5)["layer_id_count"].status == "suspected"
    sg = _f(tmp_path, vl(), top, k=5, engine="sglang")["layer_id_count"]
    assert sg.status == "ruled out" and "size" not in sg.summary
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], built_fc_slots=lambda raw, v: (2, "a toy rule")))
    sg = _f(tmp_path, vl(), top, k=5, engine="sglang")["layer_id_count"]
    assert sg.status == "confirmed" and "SGLang builds fc for 2 slots (a toy rule)" in sg.summary


def test_stale_draft_kv_by_version(tmp_path):
    """vLLM 0.32.0: ruled out (the proposer's first pass rewrites the accepted tokens' KV, llm_base_proposer.py);
    an earlier release: not placed; no version: not checked naming it; SGLang: not checked (vLLM thread)."""
    f = _f(tmp_path, vl(), engine="vllm", engine_version="0.32.0")["stale_draft_kv"]
    assert f.status == "ruled out" and "llm_base_proposer.py:512" in f.source
    f = _f(tmp_path, vl(), engine="vllm", engine_version="0.10.0")["stale_draft_kv"]
    assert f.status == "not checked" and "14649" in f.source
    assert "version" in _f(tmp_path, vl(), engine="vllm")["stale_draft_kv"].needs
    assert _f(tmp_path, SG, engine="sglang")["stale_draft_kv"].status == "not checked"


def test_k_meaning(tmp_path):
    """vLLM inside the no-bonus window (0.8.5): confirmed (τ - 1); 0.32.0: ruled out; no version: not checked;
    SGLang NDT == steps at topk 1: suspected (NDT read as K); NDT = steps + 1: ruled out."""
    assert _f(tmp_path, vl(), engine_version="0.8.5")["k_meaning"].status == "confirmed"
    assert _f(tmp_path, vl(), engine_version="0.32.0")["k_meaning"].status == "ruled out"
    assert _f(tmp_path, vl())["k_meaning"].needs == "the vLLM version"
    bad = SG.replace("--speculative-num-draft-tokens 4", "--speculative-num-draft-tokens 3")
    assert _f(tmp_path, bad)["k_meaning"].status == "suspected"
    assert _f(tmp_path, SG)["k_meaning"].status == "ruled out"


def test_k_schedule(tmp_path):
    """num_speculative_tokens_per_batch_size in --speculative-config: confirmed; a fixed K: ruled out."""
    f = _f(tmp_path, vl('"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 8, 3]]'))
    assert f["k_schedule"].status == "confirmed" and "speculative.py:491" in f["k_schedule"].source
    assert _f(tmp_path, vl())["k_schedule"].status == "ruled out"


def test_without_inputs_each_names_what_it_needs(tmp_path):
    """No launch: the launch causes name it; no draft: the draft causes name it."""
    f = {x.cause: x for x in check_draft_feed(read_artifacts())}
    for c in ("pipeline_parallel_aux", "k_meaning", "k_schedule"):
        assert f[c].status == "not checked" and "launch" in f[c].needs, c
    for c in ("aux_opt_out", "layer_id_count"):
        assert f[c].status == "not checked" and "draft" in f[c].needs, c
    assert f["stale_draft_kv"].status == "not checked" and "engine" in f["stale_draft_kv"].needs
