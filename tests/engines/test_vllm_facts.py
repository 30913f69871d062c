"""eagle3lib's vLLM tables against the running engine: a table row that disagrees with vLLM's own answer fails.

Every variant of the demo draft (tests/engines/vllm_variants.py) is probed once per session in the vLLM venv
(`vllm_engine.probe`); each test reads one family of rows (`engines.facts`, `serving.layer_reading`,
`engines.capture_rules`, `vllm_engine.method`) at the version running and compares it with what vLLM built,
loaded or refused. Skipped, with the reason, where no vLLM venv exists (`make vllm`).
"""
from __future__ import annotations

import json

import pytest

from eagle3lib.engines import facts
from eagle3lib.engines.capture_rules import draft_rules, served_fc_slots
from eagle3lib.vllm_engine.ids import vllm_ids
from eagle3lib.vllm_engine.method import infer_method
from eagle3lib.vllm_engine.env import unavailable_reason
from eagle3lib.vllm_engine.method import vllm_effective
from eagle3lib.serving.launch import parse_launch

from .vllm_variants import L, V, probes

pytestmark = [pytest.mark.engine, pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason())]


@pytest.fixture(scope="module")
def P():
    got = probes()
    version = got["shipped"].vllm_version
    assert version.split("+")[0] == "0.32.0", f"the tables were checked against 0.32.0, this venv runs {version}"
    return got


def cfg(P, name: str) -> dict:
    return json.loads((P["root"] / "v" / name / "config.json").read_text())


def reads(topic: str, subject: str, version: str = "0.32.0"):
    r = facts.reads("vllm", topic, subject, version)
    assert r is not None, f"no vLLM row answers {topic}/{subject} at {version}"
    return r


@pytest.mark.parametrize("name", ["shipped", "ids_top", "ids_both", "ids_layer_ids", "ids_none"])
def test_ids_reading_matches_both_runners(P, name):
    """layer_reading's per-runner keys give the ids (and key) each vLLM runner reads; none -> the target's default."""
    p, raw = P[name], cfg(P, name)
    for runner, got, key in (("v1", p.ids_v1, p.ids_v1_key), ("v2", p.ids_v2, p.ids_v2_key)):
        ids, where = vllm_ids(raw, runner, p.vllm_version)
        assert ids == got, (runner, name)
        assert (where in key) if ids else key == ()
    assert p.ids_default == facts.default_ids("vllm", L, p.vllm_version)
    assert p.runner == "v1" and "Triton" in p.runner_why        # the CPU build: the runner whose ids are used
    assert p.ids_used == tuple(sorted(set(p.ids_v1 or p.ids_default)))


@pytest.mark.parametrize("name", ["shipped", "fc_top_only", "fc_nested_only", "fc_qwen3_top_only"])
def test_fc_sizing_matches_vllm(P, name):
    """DRAFT_RULES' fc sizing at 0.32.0 (num_aux_hidden_states, else eagle_config ids, else 3; the Qwen3 file also
    counts top-level ids) is the fc vLLM builds; a 4-slot checkpoint under a 3-slot fc fails to load."""
    p, raw = P[name], cfg(P, name)
    (rule,) = draft_rules("vllm", raw["architectures"][0], p.vllm_version)
    assert rule.model_file == p.draft_module.rsplit(".", 1)[-1] + ".py"      # the row is the file vLLM built
    assert served_fc_slots(rule, raw) == p.fc_slots
    assert p.fc_input_size == 128 * p.fc_slots
    if p.fc_slots != 4:
        assert p.load_error and "[128, 512]" in p.load_error["message"].replace("torch.Size(", "").replace(")", "")


def test_flags_as_built(P):
    """The flag rows say where vLLM reads each flag; the model it built has exactly those switches on."""
    nested, top, off, shipped = P["flags_nested"], P["flags_top"], P["aux_off"], P["shipped"]
    assert reads("flag", "norm_before_fc@eagle_config") is nested.norm_before_fc is True
    assert reads("flag", "norm_before_fc@top") is top.norm_before_fc is True
    assert reads("flag", "fc_norm@top") is True and nested.fc_norm == 4
    assert reads("flag", "fc_norm@use_aux_norm") is False and top.fc_norm is None      # use_aux_norm: no norms
    assert reads("flag", "norm_output@top") is nested.norm_output is True
    assert reads("flag", "norm_before_residual@top") is nested.norm_before_residual is True
    assert reads("flag", "use_aux_hidden_state@eagle_config") is True and off.use_aux_hidden_state is False
    assert off.fc_slots is None and "fc.weight" in off.keys_dropped
    assert (shipped.norm_before_fc, shipped.fc_norm, shipped.norm_output, shipped.norm_before_residual) == \
        (False, None, False, False)
    assert "input_norm.weight" in nested.keys_loaded and "fc_norm.0.weight" in nested.keys_loaded


def test_aux_opt_out_as_served(P):
    """use_aux_hidden_state false: the V1 runner row says it is honoured; vLLM's own proposer answers no aux states,
    no aux layer is set on the target and no fc is built; serving.loaded_view predicts exactly that (the target's
    last hidden state, fc 0, served), and the shipped draft keeps its aux states."""
    off, shipped = P["aux_off"], P["shipped"]
    assert reads("flag", "use_aux_hidden_state@v1_runner") is True and off.runner == "v1"
    assert off.aux_states_v1 is False and off.ids_used == () and off.fc_slots is None and off.ok
    assert shipped.aux_states_v1 is True and shipped.ids_used
    from eagle3lib.engine_kit.view import LAST_HIDDEN
    from eagle3lib.serving.loaded_view import engine_view
    from eagle3lib.model.target import load_target_info
    from eagle3lib.checks.inputs import tensor_headers
    view = engine_view("vllm", draft_raw=cfg(P, "aux_off"), tensors=tensor_headers(P["root"] / "v" / "aux_off"),
                       target_info=load_target_info(off.target), version=off.vllm_version.split("+")[0],
                       runner=off.runner)
    assert view.value("layout") == LAST_HIDDEN and view.fc_slots == 0 and view.refused is None


def test_key_handling(P):
    """The key rows: midlayer. and layers.0. load into layers.0; t2d, .bias and (without norm_before_fc)
    input_norm are dropped silently; an unknown name and an already model.-prefixed one fail the load, naming it;
    a later layer's input_layernorm and hidden_norm load into that layer."""
    shipped, extra, l0 = P["shipped"], P["keys_extra"], P["keys_layers0"]
    assert reads("keys", "midlayer.*") and shipped.keys_loaded["midlayer.input_layernorm.weight"] == \
        "model.layers.0.input_layernorm.weight"
    assert reads("keys", "layers.0.*") and l0.ok and l0.keys_loaded["layers.0.self_attn.q_proj.weight"] == \
        "model.layers.0.self_attn.qkv_proj.weight"
    assert reads("keys", "t2d dropped") and "t2d" in shipped.keys_dropped and shipped.ok
    assert reads("keys", ".bias dropped silently") and "fc.bias" in extra.keys_dropped and extra.ok
    assert reads("keys", "input_norm.* dropped without norm_before_fc") and "input_norm.weight" in extra.keys_dropped
    assert reads("keys", "unknown_dropped_silently") is False
    err = P["keys_unknown"].load_error
    assert err["type"] == "ValueError" and "no module or parameter named 'foo'" in err["message"]
    assert reads("keys", "model.* prefix") is False
    err = P["keys_model_prefix"].load_error
    assert err and "no module or parameter named 'model'" in err["message"]    # model.model.fc: refused
    two = P["two_layers"]
    assert reads("keys", "layers.N.input_layernorm") and two.ok
    assert two.keys_loaded["layers.1.input_layernorm.weight"] == "model.layers.1.input_layernorm.weight"
    assert two.keys_loaded["layers.1.hidden_norm.weight"] == "model.layers.1.hidden_norm.weight"   # built, unused


def test_d2t_handling(P):
    """d2t loads into draft_id_to_target_id; a tensor already named draft_id_to_target_id is dropped silently and
    the parameter stays unfilled (zeros); a full-vocab draft has no such parameter, so its d2t fails the load."""
    shipped, long_name, full = P["shipped"], P["d2t_long_name"], P["d2t_full_vocab"]
    assert shipped.d2t_param and shipped.d2t_filled and shipped.keys_loaded["d2t"] == "draft_id_to_target_id"
    assert reads("keys", "draft_id_to_target_id dropped silently") is True
    assert long_name.ok and "draft_id_to_target_id" in long_name.keys_dropped
    assert long_name.d2t_param and long_name.d2t_filled is False
    assert "draft_id_to_target_id" in long_name.params_unfilled
    assert reads("keys", "d2t with a full-vocab draft") is False
    assert full.d2t_param is False and "draft_id_to_target_id" in full.load_error["message"]


def test_embed_and_lm_head_ownership(P):
    """Embedding / lm_head rows: no embed_tokens -> the target's is shared; an own copy is kept for a by-value
    decision; widths that differ -> not shared; no lm_head -> the target's head, sliced to the draft vocab."""
    shipped, own, narrow, nolm = P["shipped"], P["own_embed"], P["narrow"], P["no_lm_head"]
    assert reads("embed", "own_embed_used") is True and own.has_own_embed_tokens is True
    assert shipped.has_own_embed_tokens is False and shipped.embed_shared is True
    assert reads("embed", "shared_when_widths_differ") is False and narrow.embed_shared is False
    assert reads("lm_head", "borrow_when_absent") is True
    assert nolm.has_own_lm_head is False and nolm.lm_head_shared is True and nolm.share_error is None
    assert shipped.has_own_lm_head is True and shipped.lm_head_vocab == shipped.draft_vocab == 671
    assert reads("lm_head", "borrowed_head_sliced_to_draft_vocab") is True
    assert (nolm.lm_head_vocab, nolm.logit_columns, nolm.target_vocab) == (V, 671, V)
    assert "first 671 columns" in nolm.head_used


def test_max_positions_raised(P):
    """The context rows: a draft max_position_embeddings below the target's max_model_len is raised to it, the
    draft's own max_model_len is not (the V1 runner stops drafting past it; the served effect is in the notes)."""
    p = P["mpe64"]
    assert reads("context", "max_position_embeddings raised to the target's") is True
    assert reads("context", "stops_drafting_past_max_position_embeddings@v1") is True
    assert p.config_max_position_embeddings == 64
    assert p.draft_max_position_embeddings == p.target_max_model_len == 512
    assert p.draft_max_model_len == 64 and p.ok and p.runner == "v1"
    assert any("Overriding draft model max_position_embeddings from 64" in ln for ln in p.log)
    assert P["shipped"].draft_max_model_len == 512 and "stops drafting past 64" in p.frame().iloc[-1, 1]


@pytest.mark.parametrize("name, given", [("EAGLE3-demo", None), ("eagle-runs_eagle3", None),
                                         ("plain_checkpoint", None), ("given_draft_model_eagle3", "draft_model")])
def test_method_inference_matches_vllm(P, name, given):
    """vllm_engine.method (and its vllm_effective) infer the method vLLM resolves from the path:
    'eagle-' before 'eagle3'; an explicit draft_model is overridden by the path too."""
    p = P[name]
    spec = {k: v for k, v in {"method": given, "model": p.draft, "num_speculative_tokens": 3}.items() if v}
    launch = parse_launch(f"vllm serve m --speculative-config '{json.dumps(spec)}'")
    method = vllm_effective(launch, p.vllm_version)["method"]
    assert method == infer_method(given, p.draft, p.vllm_version)[0]
    assert reads("method", "method inferred from the path") is True
    if p.error is None:
        assert method == p.method
    else:        # 'eagle': vLLM names the draft EagleLlama...Eagle3 (eagle method naming) and refuses it
        assert method == "eagle" and "EagleLlamaForCausalLMEagle3" in p.error["message"]


def test_mla_rope_as_built(P):
    """The MLA rope row and model/mla_vllm's warnings: vLLM 0.32.0 rotates with the config's rope_theta, runs
    deepseek_llama_scaling only when attention_factor == 1.0 (else deepseek_yarn, softmax scale x mscale^2) and
    does not read apply_yarn_scaling; a deepseek_v3 model_type is refused (turned into deepseek_mtp)."""
    from eagle3lib.model.mla_vllm import config_warnings
    assert reads("rope", "deepseek rope type from attention_factor") is True
    theta, yarn, af1, no_apply = (P[n] for n in ("mla_theta", "mla_yarn", "mla_yarn_af1", "mla_yarn_no_apply"))
    assert (theta.rope["class"], theta.rope["base"], theta.rope["rope_type"]) == ("RotaryEmbedding", 50000.0, "default")
    assert theta.rope["is_neox_style"] is False                          # MLA RoPE is interleaved
    assert (yarn.rope["rope_type"], af1.rope["rope_type"], no_apply.rope["rope_type"]) == \
        ("deepseek_yarn", "deepseek_llama_scaling", "deepseek_yarn")
    assert yarn.rope["softmax_scale"] > af1.rope["softmax_scale"] == theta.rope["softmax_scale"]
    for name in ("mla_theta", "mla_yarn", "mla_yarn_af1", "mla_yarn_no_apply"):
        raw = cfg(P, name)
        said = config_warnings(raw, raw, float(raw.get("rope_theta", 10000.0)), 4)
        warned = [w for w in said if "vLLM uses deepseek_llama_scaling" in w]
        assert bool(warned) == (P[name].rope["rope_type"] == "deepseek_llama_scaling"), name
        assert not any("θ=10000" in w for w in said)
        assert any("does not read" in w for w in said) == (name == "mla_yarn_no_apply")
    shipped = P["mla_shipped"]
    assert shipped.error and "Eagle3DeepSeekMTPModel" in shipped.error["message"]


@pytest.mark.parametrize("name", ["saved_vllm", "saved_vllm_mla"])
def test_drafts_written_in_vllm_format_load_in_vllm(P, name):
    """save_draft(format="vllm") writes what vLLM 0.32.0 serves: it loads every tensor but t2d, sizes fc for all
    4 trained slots (num_aux_hidden_states) and reads the top-level input-of-layer ids on both runners."""
    p = P[name]
    assert p.ok, p.error or p.load_error
    assert p.fc_slots == 4 and p.keys_dropped == ("t2d",)
    assert p.ids_v1 == p.ids_v2 == p.ids_used == (0, 2, 4, 6)


def test_the_advised_snippet_serves_the_training_layout(P):
    """engines.advice's vLLM snippet for the demo's training layout [embed, in 2, 4, 6], written into a config with
    neither ids nor slot count: vLLM reads those ids on both runners and builds the 4-slot fc the checkpoint has."""
    p = P["advised"]
    assert p.ok and p.fc_slots == 4 and p.ids_v1 == p.ids_v2 == (0, 2, 4, 6)


def test_rope_parameters_read(P):
    """The rope_parameters row: a Llama draft whose theta sits only in rope_parameters (transformers 5) is rotated
    with it; the shipped draft's legacy rope_theta gives the same default rope."""
    assert reads("rope", "rope_parameters") is True
    p, shipped = P["rope_parameters_only"], P["shipped"]
    assert (p.rope["class"], p.rope["base"], p.rope["rope_type"]) == ("RotaryEmbedding", 50000.0, "default")
    assert shipped.rope["base"] == 10000.0 and shipped.rope["is_neox_style"] is True
