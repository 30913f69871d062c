"""Per-engine layer ids: the seed's 4-slot case, the standard 3-slot case and the conventions of eagle3-formats §4."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3lib.engines.advice import ENGINES, advise, captured_by, config_snippet
from eagle3lib.errors import LayoutError
from eagle3lib.layout import from_ids

SEED = ["embed", "layer_out.3", "layer_out.31", "layer_out.59"]   # [embed, out L3, out L31, out L59] of 61 layers


def rows(layout, L):
    return advise(layout, L).set_index("engine")


def test_seed_four_slot_case():
    """§4.3: vLLM/speculators [0,4,32,60] top level; first-id SGLang [0,4,32,60]; +1 SGLang [-1,3,31,59] where the
    model file guards index 0; SpecForge, EAGLE: no."""
    r = rows(SEED, 61)
    assert list(r.index) == list(ENGINES)
    assert r.loc["vllm", "ids"] == [0, 4, 32, 60] and r.loc["vllm", "expressible"] == "conditional"
    # 4 slots: vLLM 0.32.0 sizes fc from num_aux_hidden_states, never from top-level ids (checked on the engine)
    assert json.loads(r.loc["vllm", "snippet"]) == {"eagle_aux_hidden_state_layer_ids": [0, 4, 32, 60],
                                                    "num_aux_hidden_states": 4}
    assert "EagleModelMixin" in r.loc["vllm", "why"] and "num_aux_hidden_states" in r.loc["vllm", "why"]
    # the embedding is capture index 0: conditional on a model file that guards residual None (upstream's does not,
    # the CPU build's llama.py does: the running engine captured it, tests/engines/test_sglang_facts.py)
    assert r.loc["sglang", "ids"] == [-1, 3, 31, 59] and r.loc["sglang", "expressible"] == "conditional"
    assert "residual None" in r.loc["sglang", "why"] and r.loc["sglang", "snippet"]
    assert r.loc["sglang-first-id", "ids"] == [0, 4, 32, 60]
    assert r.loc["sglang-first-id", "expressible"] == "conditional"
    snip = json.loads(r.loc["sglang-first-id", "snippet"])
    assert snip["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 4, 32, 60]
    assert snip["num_aux_hidden_states"] == 4 and "eagle_aux_hidden_state_layer_ids" not in snip
    assert r.loc["specforge", "expressible"] == "no" and "exactly three" in r.loc["specforge", "why"]
    assert "-1" in r.loc["specforge", "why"]
    assert r.loc["speculators", "ids"] == [0, 4, 32, 60] and r.loc["speculators", "expressible"] == "conditional"
    assert r.loc["eagle", "expressible"] == "no"
    # what the first-id rule really captures for those ids, and the trap of writing them to a +1 SGLang
    assert captured_by("sglang-first-id", [0, 4, 32, 60], 61) == ("embed", "layer_in.4", "layer_in.32", "layer_in.60")
    assert captured_by("sglang", [0, 4, 32, 60], 61) == ("layer_in.1", "layer_in.5", "layer_in.33", "final_prenorm")
    with pytest.raises(LayoutError, match="layer id -1"):   # no +1 when the first id != 1: -1 is no capture index
        captured_by("sglang-first-id", [-1, 3, 31, 59], 61)


def test_standard_three_slot_case():
    """§4.2 equivalence: SGLang/SpecForge [1, L//2-1, L-4] == vLLM/speculators/EAGLE [2, L//2, L-3]."""
    L = 32
    layout = from_ids([1, L // 2 - 1, L - 4], "output", L)
    r = rows(layout, L)
    assert (r["expressible"] == "yes").all()
    assert r.loc["sglang", "ids"] == [1, 15, 28] == r.loc["specforge", "ids"] == r.loc["sglang-first-id", "ids"]
    assert r.loc["vllm", "ids"] == [2, 16, 29] == r.loc["speculators", "ids"] == r.loc["eagle", "ids"]
    assert [i + 1 for i in r.loc["sglang", "ids"]] == r.loc["vllm", "ids"]
    assert json.loads(r.loc["sglang", "snippet"]) == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True}}
    assert r.loc["specforge", "cli"] == "--aux-hidden-states-layers 1,15,28"
    assert "[2, 16, 29]" in r.loc["speculators", "cli"]
    assert config_snippet(layout, L, "vllm") == {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}
    for eng in ENGINES:   # absent ids: every engine's default is the same physical layers
        assert captured_by(eng, None, L) == layout


def test_layouts_no_engine_can_express():
    """Post-norm final state: nobody; non-ascending order: only SpecForge (config order)."""
    r = rows(["layer_in.2", "layer_in.16", "final_postnorm"], 32)
    assert (r["expressible"] == "no").all() and r["why"].str.contains("post-norm").all()
    assert (r["snippet"] == "").all()
    r = rows(["layer_in.16", "layer_in.2", "layer_in.29"], 32)
    assert r.loc["specforge", "expressible"] == "yes" and "config order" in r.loc["specforge", "why"]
    assert (r.drop(index="specforge")["expressible"] == "no").all()
    assert r.loc["vllm", "why"].startswith("slots are not in strictly ascending")


def test_final_prenorm_and_first_slot_one():
    """Final pre-norm: SpecForge hooks layers[L-1], +1 SGLang never captures it; layer_in.1 first defeats the rule."""
    r = rows(["layer_in.2", "layer_in.16", "final_prenorm"], 32)
    assert r.loc["specforge", "ids"] == [1, 15, 31] and r.loc["specforge", "expressible"] == "yes"
    assert r.loc["sglang", "expressible"] == "no" and "never reaches" in r.loc["sglang", "why"]
    assert r.loc["vllm", "ids"] == [2, 16, 32] and r.loc["vllm", "expressible"] == "conditional"
    r = rows(["layer_in.1", "layer_in.16", "layer_in.29"], 32)
    assert r.loc["sglang-first-id", "expressible"] == "no" and "cannot express" in r.loc["sglang-first-id", "why"]
    assert r.loc["sglang", "expressible"] == "yes" and r.loc["sglang", "ids"] == [0, 15, 28]


def test_bad_requests():
    """Unknown engine, empty layout and layers beyond the target are LayoutErrors."""
    with pytest.raises(LayoutError, match="unknown engine"):
        config_snippet(SEED, 61, "tensorrt")
    with pytest.raises(LayoutError, match="unknown engine"):
        captured_by("tgi", [1, 2, 3], 61)
    with pytest.raises(LayoutError, match="empty"):
        advise([], 61)
    with pytest.raises(LayoutError, match="beyond"):
        advise(["layer_in.70"], 61)


@settings(max_examples=60, deadline=None)
@given(st.integers(6, 96).flatmap(lambda L: st.tuples(st.just(L), st.lists(st.integers(0, L), min_size=3,
                                                                            max_size=3, unique=True))))
def test_advised_ids_capture_the_layout(case):
    """Round trip: wherever an engine can (conditionally) express a layout, its ids make it capture that layout."""
    L, idx = case
    layout = from_ids(sorted(idx), "input", L)
    for eng, row in advise(layout, L).set_index("engine").iterrows():
        if row["expressible"] != "no":
            assert captured_by(eng, row["ids"], L) == layout, (eng, row["ids"])
