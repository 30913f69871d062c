"""serving.loaded_view: the draft as an engine loads it, from the tables. Here: a vLLM draft that opts out of aux
states (use_aux_hidden_state false, field-causes.md #38) is predicted as vLLM 0.32's runners serve it, and the
layout check then sees the mismatch against the trained layout instead of a captured trained layout."""
from __future__ import annotations

import pytest

from eagle3lib.engines import facts
from eagle3lib.engine_kit.view import LAST_HIDDEN
from eagle3lib.serving.loaded_view import aux_opted_out, engine_view
from eagle3lib.hidden.explain import causes_of, explain
from eagle3lib.model.target import TargetInfo

TARGET = TargetInfo("<dict>", "LlamaForCausalLM", "llama", 8, 32, 120, False, {})
TRAINED = ("layer_in.2", "layer_in.4", "layer_in.6")
TENSORS = {"fc.weight": ((32, 96), "F32"), "lm_head.weight": ((40, 32), "F32"), "d2t": ((40,), "I64")}


def raw(use_aux=True, **extra) -> dict:
    ec = {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}
    if use_aux is not None:
        ec["use_aux_hidden_state"] = use_aux
    return {"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": [2, 4, 6],
            "num_aux_hidden_states": 3, "draft_vocab_size": 40, "vocab_size": 120, "eagle_config": ec, **extra}


def view(r: dict, runner=None):
    return engine_view("vllm", draft_raw=r, tensors=TENSORS, target_info=TARGET, version="0.32.0", runner=runner)


@pytest.mark.parametrize("value,off", [(True, False), (None, False), (False, True), ([], True), (0, True)])
def test_aux_opted_out_reads_eagle_config_truthiness(value, off):
    """vLLM reads use_aux_hidden_state from eagle_config only, and any false value turns aux states off."""
    assert aux_opted_out(raw(value)) is off
    assert aux_opted_out({"use_aux_hidden_state": False}) is False          # top level: not read


def test_opted_out_on_the_v1_runner_feeds_the_last_hidden_state_and_no_fc():
    """V1 (CPU builds): the target's last hidden state, no fc, served (no refusal); the detail cites the fact row."""
    v = view(raw(False), runner="v1")
    assert v.value("layout") == LAST_HIDDEN and v.fc_slots == 0 and v.refused is None
    assert facts.fact("vllm", "flag", "use_aux_hidden_state@v1_runner").source in v.aspects["layout"].detail
    assert "aux_layout_mismatch" in causes_of(explain(TRAINED, v.value("layout"), num_layers=8))


def test_opted_out_on_the_v2_runner_is_still_fed_aux_states_and_refused():
    """V2 (and no runner named: V2 is the CUDA default): the captured aux states, concatenated, with no fc: the
    table predicts the first request fails (a static reading, said so)."""
    for runner in ("v2", None):
        v = view(raw(False), runner=runner)
        assert v.fc_slots == 0 and len(v.value("layout")) == 3 and LAST_HIDDEN != v.value("layout")
        assert v.refused and "static" in v.refused and v.refused_source == "table"


def test_a_draft_that_keeps_aux_states_is_unchanged():
    """use_aux_hidden_state true or absent: the reading's layout, fc sized by num_aux_hidden_states, served."""
    for flag in (True, None):
        v = view(raw(flag), runner="v1")
        assert v.value("layout") == TRAINED and v.fc_slots == 3 and v.refused is None


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
