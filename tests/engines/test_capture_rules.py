"""Engine capture rules for MLA (DeepSeek-V3 / Kimi-K2) targets and multi-layer drafts: the data and its resolvers."""
from __future__ import annotations

import re

import pytest
from packaging.version import Version

from eagle3lib.errors import LayoutError
from eagle3lib.engines.capture_rules import (DRAFT_RULES, TARGET_RULES, draft_rules, draft_serving,
    served_capture, target_rules)
from eagle3lib.engine_kit.capturespec import CaptureSpec

L = 61                     # DeepSeek-V3 / Kimi-K2 decoder layers (first_k_dense_replace 3 in V3, 1 in Kimi-K2)
DSV3 = "DeepseekV3ForCausalLM"
SOURCE = re.compile(r"(@ [0-9a-f]{8}|PR#\d+|\.py:\d+.*\(\d+\.\d+\.\d+)")   # commit, PR, or file:line of a release


def test_every_row_cites_a_commit_or_pr_and_versions_do_not_overlap():
    """Each row names its file @ commit, a PR, or file:line in a release; distinct known version ranges of one
    model file never overlap."""
    for r in TARGET_RULES + DRAFT_RULES:
        assert SOURCE.search(r.source), r.source
        assert r.since is None or r.until is None or Version(r.since) < Version(r.until)
    for rows in (TARGET_RULES, DRAFT_RULES):
        spans = {}
        for r in rows:
            if r.since or r.until:
                spans.setdefault((r.engine, r.model_file, r.archs, r.since, r.until), r)
        for (e, f, a, s1, u1) in spans:
            for (e2, f2, a2, s2, u2) in spans:
                if (e, f, a) == (e2, f2, a2) and (s1, u1) != (s2, u2):
                    assert (u1 and s2 and Version(u1) <= Version(s2)) or (u2 and s1 and Version(u2) <= Version(s1))


@pytest.mark.parametrize("version", ["0.5.6", "0.5.12", "0.5.20"])
@pytest.mark.parametrize("ids", [(1, 29, 57), (2, 30, 58), None])
def test_sglang_deepseek_ids_match_capturespec(version, ids):
    """The MLA target rows give the slots CaptureSpec.sglang gives for the DeepseekV3 model file, by version."""
    got = served_capture("sglang", ids, L, target_arch=DSV3, version=version)
    assert got.agreed and len(got.readings) == 1
    assert got.boundaries == CaptureSpec.sglang(ids, version, target_arch=DSV3).layout(L)


def test_sglang_first_id_rule_by_version():
    """[2, 30, 58] is read +1 before ~0.5.12 and as capture indices after (PR#25454); [1, 29, 57] the same in both."""
    old = served_capture("sglang", [2, 30, 58], L, target_arch=DSV3, version="0.5.6")
    new = served_capture("sglang", [2, 30, 58], L, target_arch=DSV3, version="0.5.12")
    assert old.boundaries == ("layer_in.3", "layer_in.31", "layer_in.59")
    assert new.boundaries == ("layer_in.2", "layer_in.30", "layer_in.58")
    assert "3e4a39ee" in old.readings[0].source and "PR#25454" in new.readings[0].source


def test_sglang_embed_and_final_slots_never_arrive():
    """ids [0, 30, 61] under the first-id rule ask for embed and the final pre-norm state: both slots stay empty."""
    got = served_capture("sglang", [0, 30, 61], L, target_arch=DSV3, version="0.5.12")
    assert got.boundaries == (None, "layer_in.30", None)
    assert any("residual None" in p for p in got.readings[0].problems)
    assert any("never reached" in p for p in got.readings[0].problems)


def test_vllm_deepseek_final_slot_depends_on_the_build():
    """vLLM's DeepSeek file reaches id L only in builds with the end_layer capture: without a way to tell, both."""
    got = served_capture("vllm", [2, 30, 61], L, target_arch=DSV3)
    assert not got.agreed and got.boundaries is None
    assert {r.boundaries for r in got.readings} == {("layer_in.2", "layer_in.30", None),
                                                    ("layer_in.2", "layer_in.30", "final_prenorm")}
    plain = served_capture("vllm", [2, 30, 58], L, target_arch=DSV3, version="0.20.0")
    assert plain.agreed and plain.boundaries == ("layer_in.2", "layer_in.30", "layer_in.58")
    crash = served_capture("vllm", [0, 30], L, target_arch=DSV3)
    assert all(r.boundaries[0] is None for r in crash.readings)


def test_two_batch_overlap_drops_the_moe_layers_slots():
    """SGLang before ~0.5.12 under two-batch overlap captures only below first_k_dense_replace."""
    got = served_capture("sglang", None, L, target_arch=DSV3, version="0.5.6", first_k_dense_replace=3,
                         two_batch_overlap=True)
    assert got.boundaries == ("layer_in.2", None, None)
    assert sum("two-batch overlap" in p for p in got.readings[0].problems) == 2
    assert served_capture("sglang", None, L, target_arch=DSV3, version="0.5.6",
                          first_k_dense_replace=3).boundaries == ("layer_in.2", "layer_in.30", "layer_in.58")


def test_targets_without_a_model_file_rule_fall_back_to_the_llama_rule():
    """A target with no row is read by the Llama-file rule (and says so); vLLM's llama.py row captures index 0
    (the embedding output) and L (the final pre-norm state), its deepseek_v2.py rows do not capture index 0."""
    got = served_capture("vllm", [2, 16, 29], 32, target_arch="GemmaForCausalLM")
    assert got.boundaries == ("layer_in.2", "layer_in.16", "layer_in.29")
    assert "Llama-file rule" in got.readings[0].problems[0]
    llama = served_capture("vllm", [0, 16, 32], 32, target_arch="LlamaForCausalLM", version="0.32.0")
    assert llama.boundaries == ("embed", "layer_in.16", "final_prenorm") and llama.readings[0].problems == ()
    assert served_capture("vllm", [0, 16], 32, target_arch=DSV3, version="0.32.0").boundaries == (None, "layer_in.16")
    assert target_rules("sglang", "Qwen3ForCausalLM") == ()
    with pytest.raises(LayoutError, match="unknown engine"):
        served_capture("trtllm", None, 32, target_arch=DSV3)


def _draft(arch: str, layers: int = 1, k: int = 3) -> dict:
    return {"architectures": [arch], "num_hidden_layers": layers,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(range(1, 1 + k))}}


def test_sglang_multi_layer_llama_draft_is_served_only_after_pr24663():
    """Two draft layers: refused (d737979c) or silently left at init (03d5a777) before ~0.5.12, loaded after."""
    old = draft_serving("sglang", _draft("LlamaForCausalLMEagle3", layers=2), "0.5.6")
    assert len(old) == 2 and all(r.ok is False for r in old)
    assert {("refuses" in r.problems[0], "random init" in r.problems[0]) for r in old} == {(True, False),
                                                                                          (False, True)}
    new = draft_serving("sglang", _draft("LlamaForCausalLMEagle3", layers=2, k=4), "0.5.12")
    assert [r.ok for r in new] == [True] and "PR#24663" in new[0].source
    four = draft_serving("sglang", _draft("LlamaForCausalLMEagle3", k=4), "0.5.6")
    assert all(not r.ok and any("3 aux slots" in p for p in r.problems) for r in four)


def test_mla_drafts_one_layer_in_sglang_any_in_vllm():
    """Eagle3DeepseekV2ForCausalLM: SGLang's kimi_k25_eagle3.py serves one layer, vLLM's deepseek_eagle3.py any;
    both size fc from the configured ids."""
    two = _draft("Eagle3DeepseekV2ForCausalLM", layers=2, k=4)
    sg, vl = draft_serving("sglang", two), draft_serving("vllm", two)
    assert [r.ok for r in sg] == [False] and "kimi_k25_eagle3.py @ 054a1cef" in sg[0].source
    assert [r.ok for r in vl] == [True] and "deepseek_eagle3.py @ 03590193" in vl[0].source
    assert [r.ok for r in draft_serving("sglang", _draft("Eagle3DeepseekV2ForCausalLM", k=4))] == [True]
    assert all("pre-norm" in r.feedback for r in sg + vl)
    assert draft_rules("vllm", "Eagle3DeepseekV3ForCausalLM") == draft_rules("vllm", "Eagle3DeepseekV2ForCausalLM")


def test_vllm_multi_layer_llama_draft_readings_and_unknown_drafts():
    """vLLM's Llama file: the one-layer build fails to load layers.1.*, later builds serve it; an unknown
    architecture gets no reading. With no version every dated row answers (4 eagle_config slots: refused by the
    3-slot build, undecided for PR#26164's, served by 0.32.0's, which sizes fc from num_aux_hidden_states or the
    eagle_config ids only); at 0.32.0 only that row does, and top-level-only ids leave its fc at 3 slots."""
    got = draft_serving("vllm", _draft("Eagle3LlamaForCausalLM", layers=2))
    assert sorted(map(str, (r.ok for r in got))) == ["False", "True", "True"]
    assert any("load fails" in p for r in got for p in r.problems)
    four = draft_serving("vllm", _draft("Eagle3LlamaForCausalLM", k=4))
    assert {r.ok for r in four} == {False, None, True}
    (now,) = draft_serving("vllm", _draft("LlamaForCausalLM", layers=2, k=4), "0.32.0")
    assert now.ok and now.problems == ()
    top4 = {"architectures": ["LlamaForCausalLM"], "eagle_aux_hidden_state_layer_ids": [0, 2, 4, 6]}
    (llama,) = draft_serving("vllm", top4, "0.32.0")
    assert llama.ok is False and "built for 3 aux slots, the draft has 4" in llama.problems[0]
    (qwen,) = draft_serving("vllm", {**top4, "architectures": ["Qwen3ForCausalLM"]}, "0.32.0")
    assert qwen.ok and "qwen3_eagle3.py" in qwen.source
    assert draft_serving("vllm", _draft("MedusaModel")) == ()
