"""serving.loaded_view: the draft as an engine loads it, by the tables of the engine's home (`EngineHome.table_view`);
a home without one leaves every aspect unknown, naming it. What only vLLM does (its fc, a draft opting out of aux
states): tests/vllm_engine/test_loads.py."""
from __future__ import annotations

import pytest

from dataclasses import replace

from eagle3lib.engines import facts
from eagle3lib.model.target import TargetInfo
from eagle3lib.serving.homes import homes
from eagle3lib.serving.loaded_view import engine_view

TARGET = TargetInfo("<dict>", "LlamaForCausalLM", "llama", 8, 32, 120, False, {})
TRAINED = ("layer_in.2", "layer_in.4", "layer_in.6")
TENSORS = {"fc.weight": ((32, 96), "F32"), "lm_head.weight": ((40, 32), "F32"), "d2t": ((40,), "I64")}


def raw(use_aux=True, **extra) -> dict:
    ec = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}
    if use_aux is not None:
        ec["use_aux_hidden_state"] = use_aux
    return {"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": [2, 4, 6],
            "num_aux_hidden_states": 3, "draft_vocab_size": 40, "vocab_size": 120, "eagle_config": ec, **extra}


@pytest.mark.parametrize("engine,device,keys,value,source", [
    ("sglang", "cpu", ("midlayer.self_attn.k_proj.weight", "midlayer.self_attn.v_proj.weight"), "padded", "table"),
    ("sglang", None, ("midlayer.self_attn.k_proj.weight",), None, "unknown"),
    ("sglang", "cuda", ("midlayer.self_attn.q_proj.weight",), None, "unknown"),
    ("sglang", "cpu", ("midlayer.mlp.up_proj.weight",), "absent", ""),     # no row for other tensors
    ("sglang", "cpu", (), "absent", ""),
    ("vllm", "cpu", ("midlayer.self_attn.k_proj.weight",), "absent", ""),  # vLLM refuses: its log says so
])
def test_mis_shaped_qkv_is_padded_by_sglang_on_the_cpu_alone(engine, device, keys, value, source):
    """Row keys short_qkv_shard_zero_padded@cpu: SGLang's CPU loader puts a shorter q/k/v shard in its leading rows
    and zeros past them; on another device (or one the launch leaves to its default) no row applies: not known."""
    v = engine_view(engine, draft_raw=raw(), tensors=TENSORS, target_info=TARGET,
                    version="0.5.6" if engine == "sglang" else "0.32.0", mis_shaped=keys, device=device)
    if value == "absent":
        assert "mis_shaped" not in v.aspects
        return
    a = v.aspects["mis_shaped"]
    assert (a.value, a.source) == (value, source) and keys[0] in a.detail
    assert facts.fact("sglang", "keys", "short_qkv_shard_zero_padded@cpu").source in a.detail


def test_each_engine_answers_from_its_own_home_and_a_home_without_a_view_leaves_it_unknown(monkeypatch):
    """The view is the engine's home's (vLLM builds fc, SGLang does not); a home without `table_view` answers every
    aspect unknown, naming itself, never another engine's tables."""
    views = {e: engine_view(e, draft_raw=raw(), tensors=TENSORS, target_info=TARGET) for e in homes()}
    assert views["vllm"].engine == "vllm" and views["vllm"].fc_slots == 3
    assert views["sglang"].engine == "sglang" and views["sglang"].fc_slots is None
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], table_view=None))
    bare = engine_view("sglang", draft_raw=raw(), tensors=TENSORS, target_info=TARGET, version="0.5.6")
    assert {a.source for a in bare.aspects.values()} == {"unknown"}
    assert all("sglang's home has no table view" in a.detail for a in bare.aspects.values())
