"""Check 9 (weights): keys each engine would drop or refuse, and tensors left at random init, by name."""
from __future__ import annotations

from eagle3lib.checks.inputs import read_artifacts
import pytest
import torch

from eagle3lib.model.checkpoint import expected_tensors
from eagle3lib.checks.loaded_keys import check_weights, engine_name, expected_shapes
from eagle3lib.model.config import DraftConfig
from tests.checks.world import canonical_tensors, draft_raw, statuses, write_draft


def _f(tmp_path, rename=None, drop=(), engine=None, version=None):
    raw = draft_raw()
    t = {(rename(k) if rename else k): v for k, v in canonical_tensors(raw).items() if k not in drop}
    return check_weights(read_artifacts(draft=write_draft(tmp_path, raw, t)), engine, version)


def test_clean_midlayer_checkpoint_is_ruled_out_for_every_engine(tmp_path):
    for engine in (None, "sglang", "vllm"):
        assert statuses(_f(tmp_path, engine=engine, version="0.5.6"), "weights_dropped") == {"ruled out"}


def test_layers0_keys_on_old_sglang_are_dropped_silently(tmp_path):
    """speculators-style layers.0.* on SGLang 0.5.6 (before the legacy map): confirmed, naming a key."""
    ren = lambda k: k.replace("midlayer.", "layers.0.")   # noqa: E731
    f = _f(tmp_path, ren, engine="sglang", version="0.5.6")
    assert [x.status for x in f] == ["confirmed"] and "layers.0." in f[0].summary and "silently" in f[0].summary
    assert statuses(_f(tmp_path, ren, engine="sglang", version="0.5.12"), "weights_dropped") == {"ruled out"}
    assert statuses(_f(tmp_path, ren, engine="sglang"), "weights_dropped") == {"suspected"}
    assert statuses(_f(tmp_path, ren, engine="vllm"), "weights_dropped") == {"ruled out"}


def test_a_framework_prefix_and_a_missing_tensor(tmp_path):
    """'draft_model.' prefix: every engine misses the tensors -> confirmed; a missing o_proj -> confirmed by name."""
    f = _f(tmp_path, lambda k: "draft_model." + k)
    assert [x.status for x in f] == ["confirmed"]
    f = _f(tmp_path, drop=("midlayer.self_attn.o_proj.weight",))
    assert [x.status for x in f] == ["confirmed"] and "o_proj" in f[0].summary


def test_engine_name_rules():
    assert engine_name("model.fc.weight", "sglang", None) == ("fc.weight", True)
    assert engine_name("model.fc.weight", "vllm", None) == (None, True)
    assert engine_name("layers.0.mlp.up_proj.weight", "vllm", None) == ("midlayer.mlp.up_proj.weight", True)


def test_each_engine_loads_keys_as_its_home_says(monkeypatch):
    """The loader's key names are the engine's home's (`EngineHome.loaded_key`); a home that does not say leaves
    the name unknown (None), never another engine's mapping."""
    from dataclasses import replace

    from eagle3lib.serving.homes import homes
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], loaded_key=lambda key, version: (
        "renamed." + key, True)))
    assert engine_name("fc.weight", "sglang", None) == ("renamed.fc.weight", True)
    monkeypatch.setitem(homes(), "sglang", replace(homes()["sglang"], loaded_key=None))
    assert engine_name("model.fc.weight", "sglang", None) == ("model.fc.weight", None)


MLA_FIELDS = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "q_lora_rank": 16, "kv_lora_rank": 12,
              "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 6}


@pytest.mark.parametrize("changes", [{}, {"fc_norm": True, "bias": True}, {"norm_before_fc": True,
                                     "num_aux_hidden_states": 4, "eagle_config": {"eagle_aux_hidden_state_layer_ids":
                                                                                  [-1, 1, 3, 5]}},
                                     dict(MLA_FIELDS, fc_norm=True), dict(MLA_FIELDS, q_lora_rank=None, bias=True),
                                     dict(MLA_FIELDS, num_hidden_layers=2),
                                     {"parallel_drafting": True, "mask_token_id": 3},
                                     {"num_hidden_layers": 3, "mlp_bias": True},
                                     {"num_hidden_layers": 2, "model_type": "qwen3", "attention_bias": True}])
def test_expected_shapes_equal_the_built_draft(changes):
    """The config-only shape table equals the tensors Eagle3Draft actually builds (flags, bias, 4 slots, later
    layers, Qwen3 q/k norms and biases)."""
    cfg = DraftConfig.from_dict(draft_raw(**changes))
    assert expected_shapes(cfg) == {k: v[0] for k, v in expected_tensors(cfg).items()}


def _two_layer(tmp_path, norm_name: str, engine, version=None):
    """A 2-layer draft whose layer 1 keeps its input norm as layers.1.<norm_name> (vLLM / speculators write
    input_layernorm, SGLang >= PR#24663 runs hidden_norm)."""
    raw = draft_raw(num_hidden_layers=2)
    t = canonical_tensors(raw)
    for k, shape in expected_shapes(DraftConfig.from_dict(raw)).items():
        if k.startswith("layers.1."):
            t[k.replace("input_layernorm", norm_name)] = torch.ones(shape)
    return check_weights(read_artifacts(draft=write_draft(tmp_path, raw, t)), engine, version)


def test_a_later_layers_input_norm_is_read_under_one_name_per_engine(tmp_path):
    """layers.1.input_layernorm: vLLM runs it, SGLang (>= PR#24663) leaves it unused and runs an untrained
    hidden_norm; layers.1.hidden_norm: the other way round. eagle3lib reads both names."""
    f = _two_layer(tmp_path, "input_layernorm", "sglang", "0.5.12")
    assert [x.status for x in f] == ["confirmed"] and "layers.1.input_layernorm.weight" in f[0].summary
    assert "never uses" in f[0].summary
    f = _two_layer(tmp_path, "input_layernorm", "vllm")          # the norm's name is right for vLLM; whether
    assert [x.status for x in f] == ["suspected"] and "2-layer draft" in f[0].summary   # it loads layer 1 at all
    assert f[0].needs == "the exact engine version"              # depends on the version (capture_rules)
    assert statuses(_two_layer(tmp_path, "input_layernorm", "sglang"), "weights_dropped") == {"suspected"}
    assert statuses(_two_layer(tmp_path, "hidden_norm", "sglang", "0.5.12"), "weights_dropped") == {"ruled out"}
    f = _two_layer(tmp_path, "hidden_norm", "vllm")
    assert [x.status for x in f] == ["confirmed"] and "layers.1.hidden_norm.weight" in f[0].summary
    nothing_served = _two_layer(tmp_path, "hidden_norm", None)     # which name is read is the engine's question
    assert [x.status for x in nothing_served] == ["not checked"] and "serving engine" in nothing_served[0].needs


def test_a_multi_layer_draft_on_an_engine_that_drops_its_extra_layers(tmp_path):
    """Two draft layers: SGLang before ~0.5.12 refuses or skips layer 1 (capture_rules), 0.5.12 loads it; a
    one-layer draft is not affected by those rules."""
    raw = {**draft_raw(), "num_hidden_layers": 2}
    t = canonical_tensors(raw)                                             # layer 0, plus layer 1 by shape
    t.update({k: torch.zeros(s) for k, s in expected_shapes(DraftConfig.from_dict(raw)).items()
              if k.startswith("layers.1.")})
    art = read_artifacts(draft=write_draft(tmp_path, raw, t))
    old = check_weights(art, "sglang", "0.5.6")
    assert [f.status for f in old] == ["confirmed"] and "2-layer draft" in old[0].summary
    assert "PR #24663" in old[0].fix and old[0].evidence["layer_rules"]
    one = read_artifacts(draft=write_draft(tmp_path / "one", draft_raw(), canonical_tensors(draft_raw())))
    assert [f.status for f in check_weights(one, "sglang", "0.5.6")] == ["ruled out"]


def test_a_vllm_mla_checkpoint_is_read_as_vllm_reads_it(tmp_path):
    """A 3-layer MLA draft in vLLM's names (fused fused_qkv_a_proj / gate_up_proj, an unread hidden_norm in layers
    1-2): vLLM's deepseek_eagle3 loads all of it (ruled out); SGLang knows neither fused name (confirmed); a fused
    tensor whose rows do not add up is named as a wrong shape."""
    from tests.model.test_mla_vllm import random_draft, vllm_raw, vllm_state, write, YARN
    raw = vllm_raw(layers=3, scaling=YARN)
    draft = random_draft(DraftConfig.from_dict(raw))
    art = read_artifacts(draft=write(tmp_path / "ok", raw, vllm_state(draft, fused=True)))
    f = check_weights(art, "vllm")
    assert [x.status for x in f] == ["ruled out"], f[0].summary
    sg = check_weights(art, "sglang", "0.5.12")
    assert [x.status for x in sg] == ["confirmed"] and "fused_qkv_a_proj" in sg[0].summary
    agnostic = check_weights(art)                      # nothing served: the engine decides, no suspicion raised
    assert [x.status for x in agnostic] == ["not checked"] and "sglang" in agnostic[0].summary
    assert agnostic[0].evidence["missing"] == [] and agnostic[0].evidence["engines"]["vllm"]["unmapped"] == []
    bad = vllm_state(draft, fused=True)
    w = bad["layers.0.self_attn.fused_qkv_a_proj.weight"]
    bad["layers.0.self_attn.fused_qkv_a_proj.weight"] = w[:-1]                 # one row short
    f = check_weights(read_artifacts(draft=write(tmp_path / "bad", raw, bad)), "vllm")
    assert [x.status for x in f] == ["confirmed"] and "midlayer.self_attn.q_a_proj.weight" in f[0].summary


def test_a_renamed_tensor_names_the_file_key_expected_found_and_the_new_name(tmp_path):
    """Issue 25: an MLP tensor renamed (gate_proj -> gate) is confirmed naming the weight file, the key, the expected
    shape, 'found nothing' and the unexpected key of that shape; SGLang keeps it at random init, vLLM refuses it."""
    (f,) = _f(tmp_path, rename=lambda k: k.replace("mlp.gate_proj", "mlp.gate"))
    assert f.status == "confirmed" and f.evidence["key"] == "midlayer.mlp.gate_proj.weight"
    assert f.evidence["file"].endswith("model.safetensors") and f.evidence["found"] is None
    assert f.evidence["tensors"][0]["renamed_as"] == "midlayer.mlp.gate.weight"
    assert "unexpected 'midlayer.mlp.gate.weight' has that shape" in f.summary
    assert "SGLang keeps them at random init; vLLM refuses the draft" in f.summary     # each by its keys row
    from eagle3lib.engines.facts import fact
    assert f.source == "; ".join(fact(e, "keys", "unknown_dropped_silently").source for e in ("sglang", "vllm"))


def test_a_config_that_sizes_tensors_otherwise_names_its_key_value_and_shape(tmp_path):
    """num_key_value_heads 4 in the config, the weights trained with 2: every tensor is there, the config disagrees
    with them (not "weights silently dropped")."""
    raw = draft_raw()
    t = canonical_tensors(raw)
    raw4 = {**raw, "num_key_value_heads": 2 * raw["num_key_value_heads"]}
    f = check_weights(read_artifacts(draft=write_draft(tmp_path, raw4, t)))
    by = {x.cause: x for x in f}
    conf = by["draft_config_differs"]
    assert conf.status == "confirmed" and conf.explains == ("weights_dropped",)
    assert conf.evidence["key"] == "num_key_value_heads" and conf.evidence["value"] == raw4["num_key_value_heads"]
    assert conf.evidence["implied"] == raw["num_key_value_heads"]
    assert "`num_key_value_heads` 4 sizes midlayer.self_attn.k_proj.weight" in conf.summary
    assert f"the checkpoint holds {list(t['midlayer.self_attn.k_proj.weight'].shape)}" in conf.summary
    assert conf.fix.startswith(f"set `num_key_value_heads` to {raw['num_key_value_heads']}")
    assert by["weights_dropped"].status == "ruled out"
    # a tensor of a shape no single field gives stays a weights finding
    t2 = dict(t, **{"midlayer.self_attn.o_proj.weight": torch.zeros(3, 5)})
    f2 = check_weights(read_artifacts(draft=write_draft(tmp_path, raw, t2, name="odd")))
    assert [(x.cause, x.status) for x in f2] == [("weights_dropped", "confirmed")]
