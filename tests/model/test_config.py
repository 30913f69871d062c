"""DraftConfig from every public dialect: fields, layer-id conventions, warnings, errors."""
from __future__ import annotations

import json

import pytest

from eagle3lib.model.config import DraftConfig, config_to_dict, load_config
from eagle3lib.model.config_fields import detect_dialect
from eagle3lib.errors import ConfigError, MissingFileError

LLAMA = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
         "rms_norm_eps": 1e-5, "max_position_embeddings": 2048, "vocab_size": 128256, "num_hidden_layers": 1}

EAGLE = {"architectures": ["LlamaForCausalLM"], **LLAMA, "draft_vocab_size": 32000, "tie_word_embeddings": False}
SPECFORGE = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **LLAMA, "head_dim": 128,
             "draft_vocab_size": 32000, "rope_theta": 500000.0,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192},
             "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}}
VLLM = {"architectures": ["LlamaForCausalLMEagle3"], **LLAMA, "draft_vocab_size": 32000,
        "eagle_aux_hidden_state_layer_ids": [2, 30, 58], "norm_before_residual": False}
SPECULATORS = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
               "speculators_config": {"algorithm": "eagle3"},
               "transformer_layer_config": {"model_type": "llama", **LLAMA, "rope_theta": 10000.0},
               "draft_vocab_size": 32000, "norm_before_residual": True, "target_hidden_size": None,
               "eagle_aux_hidden_state_layer_ids": [0, 4, 32, 60], "norm_before_fc": False, "fc_norm": False,
               "norm_output": False}
MODELOPT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", **LLAMA, "draft_vocab_size": 32000,
            "rope_theta": 500000.0,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True,
                             "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
                             "use_mtp_layernorm": False}}


@pytest.mark.parametrize("raw,dialect", [(EAGLE, "eagle"), (SPECFORGE, "specforge"), (VLLM, "vllm"),
                                         (SPECULATORS, "speculators"), (MODELOPT, "modelopt")])
def test_dialect_detection(raw, dialect):
    """Each public dialect is recognised."""
    assert detect_dialect(raw) == dialect
    assert DraftConfig.from_dict(raw).dialect == dialect


def test_specforge_ids_are_output_of_layer():
    """SpecForge nested ids are output-of-layer: [1, 29, 57] of 61 layers = HF inputs [2, 30, 58]."""
    c = DraftConfig.from_dict(SPECFORGE)
    assert (c.aux_layer_ids, c.aux_ids_convention) == ((1, 29, 57), "output")
    assert c.aux_layout(61) == ("layer_in.2", "layer_in.30", "layer_in.58")
    assert c.rope_theta == 500000.0 and c.rope_scaling["rope_type"] == "llama3"
    assert (c.num_aux, c.fc_in_features, c.head_dim, c.num_key_value_heads) == (3, 3 * 4096, 128, 8)


def test_vllm_top_level_ids_are_input_of_layer():
    """vLLM top-level ids are input-of-layer and name the same tensors as SpecForge's [1, 29, 57]."""
    c = DraftConfig.from_dict(VLLM)
    assert c.aux_ids_convention == "input"
    assert c.aux_layout(61) == DraftConfig.from_dict(SPECFORGE).aux_layout(61)


def test_speculators_four_slot_seed_layout():
    """A 4-slot speculators draft [0, 4, 32, 60] is the seed's [embed, out3, out31, out59] of 61 layers."""
    c = DraftConfig.from_dict(SPECULATORS)
    assert c.num_aux == 4 and c.fc_in_features == 4 * 4096
    assert c.aux_layout(61) == ("embed", "layer_in.4", "layer_in.32", "layer_in.60")
    assert c.norm_before_residual is True and c.vocab_size == 128256


def test_eagle_has_no_ids_and_warns_about_theta():
    """EAGLE configs carry no ids (hard-coded capture) and no rope_theta (training used 10000)."""
    c = DraftConfig.from_dict(EAGLE)
    assert c.aux_layer_ids is None and c.num_aux == 3 and c.rope_theta == 10000.0
    assert any("10000" in w for w in c.warnings) and any("[2, L//2, L-3]" in w for w in c.warnings)
    assert c.default_layout(32) == ("layer_in.2", "layer_in.16", "layer_in.29")


def test_contradictions_become_warnings():
    """Nested and top-level ids naming different tensors, non-ascending ids, unknown keys: warnings."""
    raw = dict(SPECFORGE, eagle_aux_hidden_state_layer_ids=[1, 29, 57], foo=1, num_aux_hidden_states=4)
    raw["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [57, 1, 29]}
    w = " | ".join(DraftConfig.from_dict(raw).warnings)
    assert "name different tensors" in w and "not ascending" in w and "'foo'" in w and "num_aux_hidden_states=4" in w


def test_config_is_frozen_and_keeps_raw():
    """The dataclass is frozen and keeps the raw dict."""
    c = DraftConfig.from_dict(SPECFORGE)
    with pytest.raises(Exception):
        c.hidden_size = 1
    assert c.raw["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]


def test_missing_field_names_key_and_file(tmp_path):
    """A missing required field names the file and the key."""
    raw = dict(SPECFORGE)
    del raw["intermediate_size"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"config\.json, key 'intermediate_size'.*required"):
        load_config(tmp_path)


def test_not_json_and_missing_file(tmp_path):
    """Broken JSON names the line; a missing config is a MissingFileError."""
    (tmp_path / "config.json").write_text('{"hidden_size": 12,\n "oops"')
    with pytest.raises(ConfigError, match="line 2"):
        load_config(tmp_path)
    with pytest.raises(MissingFileError):
        load_config(tmp_path / "nope")


def test_bad_gqa_and_bad_ids():
    """Heads not divisible by kv heads, and non-integer ids, are errors."""
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        DraftConfig.from_dict(dict(SPECFORGE, num_key_value_heads=5))
    with pytest.raises(ConfigError, match="list of integers"):
        DraftConfig.from_dict(dict(VLLM, eagle_aux_hidden_state_layer_ids=["2", 3]))


@pytest.mark.parametrize("dialect", ["specforge", "vllm", "speculators"])
def test_config_to_dict_round_trip(dialect):
    """Writing a config in another dialect and reading it back names the same boundaries."""
    c = DraftConfig.from_dict(SPECULATORS)
    back = DraftConfig.from_dict(config_to_dict(c, dialect))
    assert back.aux_layout(61) == c.aux_layout(61)
    assert (back.num_aux, back.draft_vocab_size, back.vocab_size) == (4, 32000, 128256)


@pytest.mark.parametrize("raw,algo", [
    ({"architectures": ["DFlashDraftModel"], "hidden_size": 64}, "dflash"),
    ({"speculators_model_type": "dspark", "speculators_config": {}}, "dspark"),
    ({"model_type": "domino"}, "domino"),
    ({"architectures": ["LlamaForCausalLM"], "dflash_config": {"target_layer_ids": [1, 2]}}, "dflash"),
    ({"speculators_config": {"algorithm": "JetSpec"}}, "jetspec"),
])
def test_block_drafters_are_refused_by_name_never_loaded_as_eagle3(raw, algo):
    """A block drafter's config names its algorithm in the error (a ConfigError subclass), whatever dialect it is."""
    from eagle3lib.errors import ConfigError, UnsupportedDraftError
    with pytest.raises(UnsupportedDraftError, match=algo.upper()) as e:
        DraftConfig.from_dict(raw, source="d/config.json")
    assert isinstance(e.value, ConfigError) and "d/config.json" in str(e.value) and "EAGLE-family" in str(e.value)


def test_an_eagle3_config_is_not_taken_for_a_block_drafter():
    from eagle3lib.model.config_fields import block_drafter
    assert block_drafter({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"}) is None


# An MLA draft in SGLang's dialect with Kimi-K2's attention sizes (DeepSeek-V3 MLA, YaRN x32)
MLA = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
       "intermediate_size": 18432, "num_attention_heads": 64, "num_key_value_heads": 64, "vocab_size": 163840,
       "draft_vocab_size": 32000, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "max_position_embeddings": 131072,
       "num_hidden_layers": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
       "qk_nope_head_dim": 128, "v_head_dim": 128,
       "rope_scaling": {"type": "yarn", "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 1.0,
                        "beta_slow": 1.0, "original_max_position_embeddings": 4096},
       "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}}


def test_mla_fields_and_derived_scale():
    """An MLA draft config gets `mla` with qk_head_dim and the YaRN softmax scale computed once; Llama drafts None."""
    import math
    c = DraftConfig.from_dict(MLA)
    m = c.mla
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == \
        (1536, 512, 128, 64, 128)
    assert m.rope_interleave is True and m.qk_head_dim == 192 == c.head_dim and c.num_key_value_heads == 64
    assert m.softmax_scale == pytest.approx(192 ** -0.5 * (0.1 * math.log(32) + 1) ** 2)
    assert m.rope_mscale == pytest.approx(1.0)                       # mscale == mscale_all_dim: cos/sin unscaled
    assert c.dialect == "specforge" and not any("unknown fields" in w for w in c.warnings)
    assert c.summary()["attention"] == "MLA" and DraftConfig.from_dict(SPECFORGE).mla is None
    plain = DraftConfig.from_dict({k: v for k, v in MLA.items() if k != "rope_scaling"}).mla
    assert plain.softmax_scale == pytest.approx(192 ** -0.5) and plain.rope_mscale == 1.0
    # SGLang's DeepSeek YaRN defaults mscale=1, mscale_all_dim=0 (transformers takes get_mscale(factor) when
    # either is missing): cos/sin x mscale(f, 1) / mscale(f, 0.5), softmax scale x mscale(f, 0.5)**2
    half = DraftConfig.from_dict(dict(MLA, rope_scaling={"type": "yarn", "factor": 32.0, "mscale_all_dim": 0.5,
                                                         "original_max_position_embeddings": 4096})).mla
    g = 0.1 * math.log(32)
    assert half.rope_mscale == pytest.approx((g + 1) / (0.5 * g + 1))
    assert half.softmax_scale == pytest.approx(192 ** -0.5 * (0.5 * g + 1) ** 2)


def test_mla_detected_from_fields_and_engine_limits_warned():
    """MLA fields alone make an MLA config (warned: SGLang serves only Eagle3DeepseekV2ForCausalLM); null
    q_lora_rank, rope_interleave false and a kv-head count are warnings naming what SGLang does instead."""
    c = DraftConfig.from_dict(dict(MLA, architectures=["LlamaForCausalLMEagle3"], q_lora_rank=None,
                                   rope_interleave=False, num_key_value_heads=8))
    assert c.mla is not None and c.mla.q_lora_rank is None and c.mla.rope_interleave is False
    text = " ".join(c.warnings)
    assert "Eagle3DeepseekV2ForCausalLM" in text and "requires q_lora_rank" in text
    assert "is_neox_style=False" in text and "num_key_value_heads=8" in text and c.num_key_value_heads == 64


@pytest.mark.parametrize("over,key", [({"kv_lora_rank": None}, "kv_lora_rank"), ({"v_head_dim": 0}, "v_head_dim"),
                                      ({"qk_rope_head_dim": 63}, "qk_rope_head_dim"),
                                      ({"q_lora_rank": "1536"}, "q_lora_rank"),
                                      ({"rope_interleave": "yes"}, "rope_interleave"),
                                      ({"rope_scaling": {"type": "yarn"}}, "rope_scaling.factor")])
def test_mla_inconsistent_values_are_config_errors(over, key):
    """A missing or bad MLA field is a ConfigError naming the file and the key."""
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as e:
        DraftConfig.from_dict(dict(MLA, **over), source="kimi/config.json")
    assert "kimi/config.json" in str(e.value)


def test_mla_config_to_dict_round_trip():
    """The SGLang- and vLLM-dialect configs of an MLA draft read back to the same sizes and layout (vLLM's with
    top-level input-of-layer ids and num_aux_hidden_states); the other dialects are refused."""
    c = DraftConfig.from_dict(MLA)
    d = config_to_dict(c, "specforge")
    assert d["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and "head_dim" not in d
    back = DraftConfig.from_dict(d)
    assert back.mla == c.mla and back.aux_layout(61) == c.aux_layout(61) and back.head_dim == 192
    v = config_to_dict(c, "vllm")
    assert v["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58] and v["num_aux_hidden_states"] == 3
    back = DraftConfig.from_dict(v)
    assert back.dialect == "vllm" and back.mla == c.mla and back.aux_layout(61) == c.aux_layout(61)
    with pytest.raises(ConfigError, match="MLA"):
        config_to_dict(c, "speculators")


def test_qwen3_layers_and_biases_from_the_speculators_layer_config():
    """transformer_layer_config.model_type 'qwen3' -> Qwen3 layers (q/k norm); attention / MLP biases are read
    where the dialect keeps them; a multi-layer draft no longer warns that only one layer is modelled."""
    raw = dict(SPECULATORS, transformer_layer_config=dict(SPECULATORS["transformer_layer_config"], model_type="qwen3",
                                                          num_hidden_layers=3, attention_bias=True))
    c = DraftConfig.from_dict(raw)
    assert (c.layer_type, c.qk_norm, c.attention_bias, c.mlp_bias, c.num_hidden_layers) == ("qwen3", True, True,
                                                                                          False, 3)
    assert not any("num_hidden_layers" in w for w in c.warnings)
    llama = DraftConfig.from_dict(dict(SPECFORGE, num_hidden_layers=2, mlp_bias=True))
    assert (llama.layer_type, llama.qk_norm, llama.attention_bias, llama.mlp_bias) == ("llama", False, False, True)
    other = DraftConfig.from_dict(dict(SPECFORGE, model_type="qwen3_next"))
    assert other.layer_type == "llama" and any("qwen3_next" in w and "not modelled" in w for w in other.warnings)
    with pytest.raises(ConfigError, match="attention_bias"):
        DraftConfig.from_dict(dict(SPECFORGE, attention_bias="yes"))


@pytest.mark.parametrize("dialect", ["specforge", "vllm", "speculators"])
def test_config_to_dict_keeps_layers_and_architecture(dialect):
    """Layer count, Qwen3 layer type and attention bias survive a round trip through every writable dialect;
    the EAGLE dialect (one Llama layer) refuses such a draft by name."""
    raw = dict(SPECULATORS, transformer_layer_config=dict(SPECULATORS["transformer_layer_config"], model_type="qwen3",
                                                          num_hidden_layers=2, attention_bias=True, head_dim=128))
    c = DraftConfig.from_dict(raw)
    out = config_to_dict(c, dialect)
    back = DraftConfig.from_dict(out)
    assert (back.num_hidden_layers, back.layer_type, back.qk_norm, back.attention_bias) == (2, "qwen3", True, True)
    if dialect == "speculators":
        assert out["transformer_layer_config"]["architectures"] == ["Qwen3ForCausalLM"]
    with pytest.raises(ConfigError, match="one Llama layer"):
        config_to_dict(c, "eagle")


# P-EAGLE: the config dialects speculators (speculators_model_type "peagle", PEagleDraftModel) and SpecForge
# (a LlamaConfig named PEagleDraftModel, mask id kept in the training config) write, and vLLM's parallel_drafting.
SPECULATORS_PEAGLE = dict(SPECULATORS, architectures=["PEagleDraftModel"], speculators_model_type="peagle",
                          speculators_config={"algorithm": "peagle", "proposal_methods": [
                              {"proposal_type": "greedy", "speculative_tokens": 8}]},
                          mask_token_id=128002, embed_requires_grad=True)
SPECFORGE_PEAGLE = {"architectures": ["PEagleDraftModel"], "model_type": "llama", **LLAMA, "draft_vocab_size": 32000,
                    "target_hidden_size": 4096, "norm_before_residual": False}


def test_speculators_peagle_is_parallel_with_its_mask_token_and_depths():
    c = DraftConfig.from_dict(SPECULATORS_PEAGLE)
    assert (c.dialect, c.parallel_drafting, c.mask_token_id, c.parallel_depths) == ("speculators", True, 128002, 8)
    assert not any("unknown fields" in w for w in c.warnings)
    assert not DraftConfig.from_dict(SPECULATORS).parallel_drafting


def test_specforge_peagle_is_parallel_without_a_mask_token_and_warns():
    c = DraftConfig.from_dict(SPECFORGE_PEAGLE)
    assert (c.dialect, c.parallel_drafting, c.mask_token_id, c.parallel_depths) == ("specforge", True, None, None)
    assert c.num_aux == 3 and any("without mask_token_id" in w for w in c.warnings)


@pytest.mark.parametrize("key", ["mask_token_id", "pard_token", "ptd_token_id"])
def test_vllm_parallel_drafting_reads_every_mask_token_alias(key):
    c = DraftConfig.from_dict({**VLLM, "parallel_drafting": True, key: 5})
    assert (c.parallel_drafting, c.mask_token_id) == (True, 5)


def test_peagle_mask_token_outside_the_vocab_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match="mask_token_id.*outside the target vocab"):
        DraftConfig.from_dict(dict(SPECULATORS_PEAGLE, mask_token_id=128256))


@pytest.mark.parametrize("dialect", ["specforge", "vllm", "speculators"])
def test_peagle_config_round_trips_through_every_dialect(dialect):
    c = DraftConfig.from_dict(SPECULATORS_PEAGLE)
    back = DraftConfig.from_dict(config_to_dict(c, dialect))
    assert (back.parallel_drafting, back.mask_token_id, back.aux_layout(61)) == (True, 128002, c.aux_layout(61))
    if dialect == "speculators":
        assert back.parallel_depths == 8


def _flag_cases():
    """(dialect's base config, flag, place, value) for every place of every flag a config of that dialect can have:
    transformer_layer_config / speculators_config only in a speculators config (their presence makes it one)."""
    from eagle3lib.model.dialects import FLAG_DEFAULTS, FLAG_PLACES
    bases = {"specforge": SPECFORGE, "vllm": VLLM, "speculators": SPECULATORS, "modelopt": MODELOPT}
    return [pytest.param(base, flag, key, not FLAG_DEFAULTS[flag], id=f"{name}-{key}")
            for name, base in bases.items() for flag, keys in FLAG_PLACES.items() for key in keys
            if name == "speculators" or key.split(".")[0] not in ("transformer_layer_config", "speculators_config")]


def _set(raw: dict, key: str, value) -> None:
    where, name = key.split(".") if "." in key else (None, key)
    (raw.setdefault(where, {}) if where else raw)[name] = value


@pytest.mark.parametrize("base,flag,key,value", _flag_cases())
def test_every_flag_is_read_where_its_writers_put_it(base, flag, key, value):
    """A flag set against its default at any place a writer puts it (the top level, eagle_config,
    transformer_layer_config, speculators_config: dialects.FLAG_PLACES) reads the same in every dialect that has
    that place; a flag two places set differently is warned and read from its first place."""
    from eagle3lib.model.dialects import FLAG_PLACES, value_at
    raw = json.loads(json.dumps(base))
    for k in FLAG_PLACES[flag]:                          # the flag nowhere but where this case puts it
        where, name = k.split(".") if "." in k else (None, k)
        if value_at(raw, k) is not None:
            del (raw[where] if where else raw)[name]
    _set(raw, key, value)
    cfg = DraftConfig.from_dict(raw)
    assert getattr(cfg, flag) is value
    other = next(k for k in FLAG_PLACES[flag] if k != key and ("." not in k or k.split(".")[0] in raw
                                                               or k.startswith("eagle_config.")))
    _set(raw, other, not value)
    both = DraftConfig.from_dict(raw)
    first = min(FLAG_PLACES[flag].index(key), FLAG_PLACES[flag].index(other))
    assert getattr(both, flag) is (value if FLAG_PLACES[flag][first] == key else not value)
    assert any(flag in x and "differs" in x for x in both.warnings)


def test_the_nested_norm_before_fc_of_nvidia_gpt_oss_drafts_builds_input_norm():
    """vllm PR#42143: NVIDIA's gpt-oss drafts keep norm_before_fc in eagle_config; the draft gets its input_norm."""
    from eagle3lib.model.checkpoint import expected_tensors
    raw = json.loads(json.dumps(MODELOPT))
    raw["eagle_config"]["norm_before_fc"] = True
    cfg = DraftConfig.from_dict(raw)
    assert cfg.norm_before_fc and "input_norm.weight" in expected_tensors(cfg)
