"""Tests for eagle3lib.sglang_engine.resolver: every rule fires inside its version range and not outside it."""
from __future__ import annotations

import json

import pytest
from packaging.version import Version

from eagle3lib.errors import ConfigError, MissingFileError, ServingArgsError
from eagle3lib.serving.launch import parse_launch
from eagle3lib.engines.versions import DEFAULT_VERSION, LATEST_TRACED, parse_version
from eagle3lib.sglang_engine.rule import KNOBS
from eagle3lib.sglang_engine.resolver import (accept_metrics, adjustment_warning, logged_accept_rate, resolve,
                                              sglang_rules_frame, target_arch_from_config)
from eagle3lib.sglang_engine.rules_table import RULES

SEED = ("python -m sglang.launch_server --model-path data/demo/target --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path data/demo/draft --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 16")
CHAIN = {"speculative_algorithm": "EAGLE3", "model_path": "m", "speculative_draft_model_path": "d",
         "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
TREE = {**CHAIN, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
NONE = {**CHAIN, "speculative_num_steps": None, "speculative_eagle_topk": None, "speculative_num_draft_tokens": None}

# rule id -> (requested settings, target architecture, env): a case that makes exactly this rule fire
TRIGGERS = {
    "eagle_not_available": (CHAIN, None, {}),
    "standalone_not_available": ({**CHAIN, "speculative_algorithm": "STANDALONE"}, None, {}),
    "adaptive_not_available": ({**NONE, "speculative_adaptive": True}, None, {}),
    "rejection_sampling_not_available": ({**CHAIN, "speculative_use_rejection_sampling": True}, None, {}),
    "topk_choices": ({**TREE, "speculative_eagle_topk": 3}, None, {}),
    "nextn_alias": ({**CHAIN, "speculative_algorithm": "NEXTN"}, None, {}),
    "v043_eagle_disables": ({**CHAIN, "speculative_algorithm": "EAGLE"}, None, {}),
    "hard_defaults_5_8_64": (NONE, None, {}),
    "hard_defaults_5_4_8": (NONE, None, {}),
    "partial_knobs_assert": ({**NONE, "speculative_eagle_topk": 1}, None, {}),
    "steps_without_topk": ({**NONE, "speculative_num_steps": 3}, None, {}),
    "mtp_draft_path_default": ({**CHAIN, "speculative_draft_model_path": None}, "DeepseekV3ForCausalLM", {}),
    "mtp_draft_path_warning": (CHAIN, "DeepseekV3ForCausalLM", {}),
    "auto_params_all_548": (NONE, "Qwen3ForCausalLM", {}),
    "auto_params_standalone_314": ({**NONE, "speculative_algorithm": "STANDALONE"}, None, {}),
    "auto_params_deepseek_314": (NONE, "DeepseekV3ForCausalLM", {}),
    "auto_params_gptoss_314": (NONE, "GptOssForCausalLM", {}),
    "auto_params_moe_314": (NONE, "Glm4MoeForCausalLM", {}),
    "auto_params_llama_548": (NONE, "LlamaForCausalLM", {}),
    "auto_params_grok_548": (NONE, "Grok1ForCausalLM", {}),
    "auto_params_other_548": (NONE, "Qwen3ForCausalLM", {}),
    "auto_params_other_314": (NONE, "Qwen3ForCausalLM", {}),
    "max_running_requests_32": (CHAIN, None, {}),
    "max_running_requests_deepseek_v4": (CHAIN, "DeepseekV4ForCausalLM", {}),
    "max_running_requests_48_silent": (CHAIN, None, {}),
    "max_running_requests_48": (CHAIN, None, {}),
    "mixed_chunk_off": ({**CHAIN, "enable_mixed_chunk": True}, None, {}),
    "mixed_chunk_off_standalone": ({**CHAIN, "speculative_algorithm": "STANDALONE", "enable_mixed_chunk": True}, None,
                                   {}),
    "page_size_topk_to_1_info": ({**TREE, "page_size": 16}, None, {}),
    "page_size_topk_to_1": ({**TREE, "page_size": 16}, None, {}),
    "trtllm_mha_topk1": ({**TREE, "attention_backend": "trtllm_mha"}, None, {}),
    "rejection_sampling_constraints": ({**TREE, "speculative_use_rejection_sampling": True}, None, {}),
    "adaptive_unsupported": ({**TREE, "speculative_adaptive": True}, None, {}),
    "adaptive_chain": ({**NONE, "speculative_adaptive": True, "speculative_num_steps": 3}, None, {}),
    "adaptive_steps_not_candidate": ({**CHAIN, "speculative_adaptive": True, "speculative_num_steps": 2}, None, {}),
    "adaptive_unsupported_0513": ({**TREE, "speculative_adaptive": True}, None, {}),
    "adaptive_steps_not_candidate_0513": ({**CHAIN, "speculative_adaptive": True, "speculative_num_steps": 2,
                                           "speculative_num_draft_tokens": 3}, None, {}),
    "topk1_ndt": ({**CHAIN, "speculative_num_draft_tokens": 16}, None, {}),
    "page_tree_flashinfer_only": ({**TREE, "page_size": 16, "attention_backend": "fa3"}, None, {}),
    "page_tree_backends": ({**TREE, "page_size": 16, "attention_backend": "torch_native"}, None, {}),
    "overlap_off_v1": (CHAIN, None, {}),
    "overlap_off_without_spec_v2": (CHAIN, None, {}),
    "spec_v1_for_tree": (TREE, None, {}),
    "spec_v2_env_removed": (CHAIN, None, {"SGLANG_ENABLE_SPEC_V2": "1"}),
    "sync_spec_v2": ({**CHAIN, "disable_overlap_schedule": True}, None, {}),
    "cpu_overlap_off": ({**CHAIN, "device": "cpu"}, None, {}),
    "draft_quant_inherits": ({**CHAIN, "quantization": "fp8"}, None, {}),
    "draft_unquant_is_none": ({**CHAIN, "quantization": "fp8", "speculative_draft_model_quantization": "unquant"}, None,
                              {}),
    "tensor_dump_disables_graphs": ({"model_path": "m", "debug_tensor_dump_output_folder": "/tmp/d"}, None, {}),
    "tensor_dump_disables_graph_backends": ({"model_path": "m", "debug_tensor_dump_output_folder": "/tmp/d"}, None, {}),
    "cuda_graph_bs_clipped": ({**CHAIN, "cuda_graph_max_bs_decode": "64"}, None, {}),
    "cuda_graph_max_bs_alias": ({**CHAIN, "cuda_graph_max_bs": 64}, None, {}),
    "cuda_graph_max_bs_removed": ({**CHAIN, "cuda_graph_max_bs": 64}, None, {}),
    "mem_reserve_draft": (CHAIN, None, {}),
    "attn_backend_by_shape": (CHAIN, None, {}),
}
BY_ID = {r.id: r for r in RULES}


def below(v: str) -> str:
    """The last release before v (e.g. 0.4.6 -> 0.4.5.post99, 0.5.0 -> 0.4.99.post99)."""
    major, minor, micro = Version(v).release[:3]
    return f"{major}.{minor}.{micro - 1}.post99" if micro else f"{major}.{minor - 1}.99.post99"


def fired(rule_id: str, version: str) -> bool:
    settings, arch, env = TRIGGERS[rule_id]
    res = resolve(settings, version, arch, env=env, strict=False)
    return any(h.rule_id == rule_id for h in res.hits)


def test_every_rule_has_a_trigger_and_a_unique_id():
    """The table and the trigger list cover the same rules; ids are unique; ranges are non-empty."""
    assert set(TRIGGERS) == set(BY_ID) and len(BY_ID) == len(RULES)
    for r in RULES:
        if r.min_version and r.max_version:
            assert Version(r.min_version) < Version(r.max_version), r.id
        assert r.kind in ("rewrite", "default", "reject", "note") and r.source


@pytest.mark.parametrize("rule_id", sorted(TRIGGERS))
def test_rule_fires_exactly_inside_its_version_range(rule_id):
    """Fires at min_version and just below max_version; silent just below min_version and at max_version."""
    r = BY_ID[rule_id]
    lo = r.min_version or "0.3.0"
    assert fired(rule_id, lo), f"{rule_id} should fire at {lo}"
    if r.min_version:
        assert not fired(rule_id, below(r.min_version)), f"{rule_id} fired before {r.min_version}"
    if r.max_version:
        assert fired(rule_id, below(r.max_version)), f"{rule_id} should still fire just before {r.max_version}"
        assert not fired(rule_id, r.max_version), f"{rule_id} still fires at {r.max_version}"
    else:
        assert fired(rule_id, "0.5.99"), f"{rule_id} should hold after the traced versions"


def test_seed_command_ndt_16_becomes_2_from_0_4_6():
    """The seed's ndt 16 runs as 2 on every SGLang >= 0.4.6, with SGLang's exact warning; 0.4.5 keeps 16."""
    res = resolve(parse_launch(SEED), "0.5.6", "LlamaForCausalLM")
    hit = next(h for h in res.hits if h.field == "speculative_num_draft_tokens")
    assert (hit.requested, hit.effective, hit.rule_id, hit.label) == (16, 2, "topk1_ndt", "topk=1 rule")
    assert adjustment_warning(hit) == ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                                       "when speculative_eagle_topk == 1")
    assert res.changed()["speculative_num_draft_tokens"] == (16, 2)
    assert resolve(parse_launch(SEED), "0.4.5").effective["speculative_num_draft_tokens"] == 16


def test_fixed_command_keeps_ndt():
    """With --speculative-num-steps 15 the ndt of 16 already equals steps + 1: nothing to rewrite."""
    res = resolve(parse_launch(SEED.replace("steps 1 ", "steps 15 ")), "0.5.6")
    assert res.effective["speculative_num_draft_tokens"] == 16
    assert "speculative_num_draft_tokens" not in res.changed()


def test_auto_defaults_change_for_unknown_architectures_in_0_5_7():
    """A Qwen target with no knobs: (5,4,8) up to 0.5.6, (3,1,4) from 0.5.7; Llama keeps (5,4,8)."""
    knobs = lambda v, arch: tuple(resolve(NONE, v, arch).effective[k] for k in KNOBS)  # noqa: E731
    assert knobs("0.5.6", "Qwen3ForCausalLM") == (5, 4, 8)
    assert knobs("0.5.7", "Qwen3ForCausalLM") == (3, 1, 4)
    assert knobs("0.5.7", "LlamaForCausalLM") == knobs("0.4.5", "LlamaForCausalLM") == (5, 4, 8)
    assert knobs("0.4.6", "DeepseekV3ForCausalLM") == (5, 4, 8) and knobs("0.4.7", "DeepseekV3ForCausalLM") == (3, 1, 4)


def test_unknown_architecture_is_a_stated_assumption():
    """Auto-choosing with no architecture warns that the fallback was assumed."""
    res = resolve(NONE, "0.5.7")
    assert any("architecture unknown" in w for w in res.warnings)


def test_page_size_rewrite_then_rejection_over_versions():
    """topk>1 & page>1: topk := 1 (then ndt := steps+1) in 0.4.6-0.4.8; allowed 0.4.9-0.5.1; refused off flashinfer later."""
    req = {**TREE, "page_size": 16, "attention_backend": "fa3"}
    eff = resolve(req, "0.4.6").effective
    assert (eff["speculative_eagle_topk"], eff["speculative_num_draft_tokens"]) == (1, 4)
    assert resolve(req, "0.4.9").effective["speculative_eagle_topk"] == 4
    with pytest.raises(ServingArgsError, match="speculative_eagle_topk.*found 4"):
        resolve(req, "0.5.2")
    assert resolve({**req, "attention_backend": "flashinfer"}, "0.5.2").effective["speculative_eagle_topk"] == 4
    assert resolve(req, "0.5.13").effective["speculative_eagle_topk"] == 4
    assert resolve({**req, "attention_backend": None}, "0.5.2").effective["speculative_eagle_topk"] == 4


def test_rejection_names_setting_value_and_allowed_range():
    """A refused setting raises ServingArgsError with the field, the value and what is allowed."""
    with pytest.raises(ServingArgsError) as e:
        resolve({**TREE, "attention_backend": "trtllm_mha"}, "0.5.6")
    msg = str(e.value)
    assert "speculative_eagle_topk" in msg and "found 4" in msg and "expected 1 with the trtllm_mha backend" in msg


def test_non_strict_records_the_rejection():
    """strict=False keeps the rejection in `rejected` and as a 'reject' hit."""
    res = resolve({**NONE, "speculative_eagle_topk": 1}, "0.5.6", strict=False)
    assert res.rejected and "speculative_num_steps" in res.rejected[0]
    assert res.hits[-1].kind == "reject"


def test_adaptive_forces_a_chain():
    """--speculative-adaptive (>= 0.5.14): topk 1, steps default 3 (middle candidate), ndt = steps + 1."""
    adaptive = {**NONE, "speculative_adaptive": True}
    for version in ("0.5.14", "0.5.23"):
        res = resolve(adaptive, version, "LlamaForCausalLM")
        assert [res.effective[k] for k in KNOBS] == [3, 1, 4] and res.effective["speculative_adaptive"] is True
    eff = resolve({**adaptive, "speculative_num_steps": 7}, "0.5.23").effective
    assert (eff["speculative_eagle_topk"], eff["speculative_num_draft_tokens"]) == (1, 8)


def test_adaptive_falls_back_to_static_settings():
    """A tree (topk > 1) turns adaptive off and keeps its knobs; in 0.5.13 that follows the auto-choice."""
    tree = resolve({**TREE, "speculative_adaptive": True}, "0.5.23")
    assert tree.effective["speculative_adaptive"] is False
    assert [tree.effective[k] for k in KNOBS] == [3, 4, 8]
    llama = resolve({**NONE, "speculative_adaptive": True}, "0.5.13", "LlamaForCausalLM").effective
    assert llama["speculative_adaptive"] is False and [llama[k] for k in KNOBS] == [5, 4, 8]
    qwen = resolve({**NONE, "speculative_adaptive": True}, "0.5.13", "Qwen3ForCausalLM").effective
    assert qwen["speculative_adaptive"] is True and [qwen[k] for k in KNOBS] == [3, 1, 4]


def test_adaptive_steps_must_be_a_default_candidate():
    """Steps 5 joined the default candidates in 0.5.20; before, SGLang refuses it; a custom config is not judged."""
    five = {**CHAIN, "speculative_adaptive": True, "speculative_num_steps": 5}
    with pytest.raises(ServingArgsError, match="candidate_steps"):
        resolve(five, "0.5.19")
    assert resolve(five, "0.5.20").effective["speculative_num_draft_tokens"] == 6
    custom = resolve({**NONE, "speculative_adaptive": True, "speculative_adaptive_config": "a.json"}, "0.5.23")
    assert custom.effective["speculative_num_steps"] is None and custom.effective["speculative_eagle_topk"] == 1


def test_page_tree_on_cpu_default_backend_is_refused():
    """A page>1 tree passes on a GPU's default backend but not on the CPU default; an allowed backend given passes."""
    tree = {**TREE, "page_size": 16}
    assert resolve(tree, "0.5.23").effective["speculative_eagle_topk"] == 4
    with pytest.raises(ServingArgsError, match="CPU default"):
        resolve({**tree, "device": "cpu"}, "0.5.23")
    assert resolve({**tree, "device": "cpu", "attention_backend": "triton"}, "0.5.23").effective["page_size"] == 16


def test_tensor_dump_disables_graphs_by_field_then_by_graph_config():
    """Tensor dump: disable_cuda_graph := True up to 0.5.13; from 0.5.14 the graph config's phases are disabled."""
    dump = {"model_path": "m", "debug_tensor_dump_output_folder": "/tmp/d"}
    assert resolve(dump, "0.5.13").changed() == {"disable_cuda_graph": (None, True), "skip_server_warmup": (None, True)}
    later = resolve(dump, "0.5.23")
    assert later.changed() == {"skip_server_warmup": (None, True)} and "cuda_graph_config" in later.hits[0].message


def test_cuda_graph_max_bs_alias_then_removed():
    """--cuda-graph-max-bs: the flag up to 0.5.13, an alias of --cuda-graph-max-bs-decode to 0.5.19, refused after."""
    launch = parse_launch(SEED + " --cuda-graph-max-bs 64")
    assert resolve(launch, "0.5.13").effective.get("cuda_graph_max_bs_decode") is None
    alias = resolve(launch, "0.5.19")
    assert alias.effective["cuda_graph_max_bs_decode"] == 64
    assert any(h.rule_id == "cuda_graph_bs_clipped" for h in alias.hits)      # 64 > the 48 requests it can run
    with pytest.raises(ServingArgsError, match="removed in 0.5.20"):
        resolve(launch, "0.5.20")


def test_draft_quantization_inherits_unless_unquant():
    """A quantized target gives a quantized draft; 'unquant' opts out and resolves to no quantization (None)."""
    quant = {**CHAIN, "quantization": "fp8"}
    assert resolve(quant, "0.5.23").effective["speculative_draft_model_quantization"] == "fp8"
    opt_out = resolve({**quant, "speculative_draft_model_quantization": "unquant"}, "0.5.23")
    assert opt_out.changed()["speculative_draft_model_quantization"] == ("unquant", None)


def test_mixed_chunk_kept_for_eagle3_from_0_5_19():
    """--enable-mixed-chunk is forced off for EAGLE3 up to 0.5.18 and kept from 0.5.19; STANDALONE still loses it."""
    mixed = {**CHAIN, "enable_mixed_chunk": True}
    assert resolve(mixed, "0.5.18").effective["enable_mixed_chunk"] is False
    assert resolve(mixed, "0.5.23").effective["enable_mixed_chunk"] is True
    assert resolve({**mixed, "speculative_algorithm": "NEXTN"}, "0.5.23").effective["enable_mixed_chunk"] is True
    assert resolve({**mixed, "speculative_algorithm": "STANDALONE"}, "0.5.23").effective["enable_mixed_chunk"] is False


def test_spec_v2_env_keeps_overlap_in_0_5_4():
    """SGLANG_ENABLE_SPEC_V2=1 (from the launch env) keeps the overlap scheduler in 0.5.4-0.5.10."""
    launch = parse_launch("SGLANG_ENABLE_SPEC_V2=1 " + SEED)
    assert resolve(launch, "0.5.6").effective.get("disable_overlap_schedule") is None
    assert resolve(parse_launch(SEED), "0.5.6").effective["disable_overlap_schedule"] is True


def test_the_three_knobs_and_the_hits_on_them():
    """The (steps, topk, ndt) a chain and a tree resolve to, and the rule hits on those knobs alone."""
    def knobs(steps, topk, ndt, **kw):
        res = resolve({"speculative_algorithm": "EAGLE3", "speculative_num_steps": steps,
                       "speculative_eagle_topk": topk, "speculative_num_draft_tokens": ndt}, **kw)
        return [res.effective[k] for k in KNOBS], [h for h in res.hits if h.field in KNOBS]
    eff, hits = knobs(1, 1, 16)
    assert eff == [1, 1, 2] and [h.rule_id for h in hits] == ["topk1_ndt"]
    eff, hits = knobs(3, 4, 8)
    assert eff == [3, 4, 8] and hits == []
    assert adjustment_warning(knobs(None, None, None, target_arch="LlamaForCausalLM")[1][0]) == ""
    with pytest.raises(ServingArgsError):
        knobs(None, 1, None)


def test_versions_and_engine_checks():
    """Versions parse with v/post/head; a bad version or a vLLM launch raises; newer versions warn."""
    assert parse_version("v0.5.3.post3") > parse_version("0.5.3")
    assert parse_version("head") == parse_version(LATEST_TRACED)
    with pytest.raises(ServingArgsError, match="version"):
        parse_version("banana")
    with pytest.raises(ServingArgsError, match="not an SGLang command"):
        resolve(parse_launch("vllm serve m"), DEFAULT_VERSION)
    assert any("newer than the rule table" in w for w in resolve(CHAIN, "0.6.0").warnings)
    assert any("compared with the real SGLang 0.5.23" in w for w in resolve(CHAIN, "0.5.20").warnings)
    assert not any("newer" in w for w in resolve(CHAIN, LATEST_TRACED).warnings)


def test_rules_frame_lists_the_table():
    """rules_frame has one row per rule with its range and source."""
    frame = sglang_rules_frame()
    assert len(frame) == len(RULES) and frame["id"].is_unique
    row = frame.set_index("id").loc["topk1_ndt"]
    assert row["min_version"] == "0.4.6" and "#5318" in row["source"]


def test_target_arch_from_config(tmp_path):
    """architectures[0] from a folder or file; clear errors for missing or bad files; None when absent."""
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    assert target_arch_from_config(tmp_path) == "Qwen3ForCausalLM"
    (tmp_path / "noarch.json").write_text("{}")
    assert target_arch_from_config(tmp_path / "noarch.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError):
        target_arch_from_config(tmp_path / "bad.json")
    (tmp_path / "wrong.json").write_text(json.dumps({"architectures": "Llama"}))
    with pytest.raises(ConfigError, match="architectures"):
        target_arch_from_config(tmp_path / "wrong.json")
    with pytest.raises(MissingFileError):
        target_arch_from_config(tmp_path / "nowhere")


def test_version_ranges_cut_at_every_knob_rule_edge_and_resolve_by_range_answers_each():
    """Ranges tile the table's knob-rule edges (no gap, last open); the seed command is rewritten only from 0.4.6."""
    from eagle3lib.sglang_engine.resolver import resolve_by_range, version_ranges
    from eagle3lib.serving.launch import parse_launch
    ranges = version_ranges()
    assert ranges[0][0] == "0.4.1" and ranges[-1][1] is None and "0.4.6" in [lo for lo, _ in ranges]
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    seed = parse_launch("python -m sglang.launch_server --model-path t --speculative-algorithm EAGLE3 "
                        "--speculative-draft-model-path d --speculative-num-steps 1 --speculative-eagle-topk 1 "
                        "--speculative-num-draft-tokens 16")
    rewrites = {lo: "speculative_num_draft_tokens" in r.changed() for lo, _, r in resolve_by_range(seed)}
    assert not rewrites["0.4.5"] and rewrites["0.4.6"] and rewrites[ranges[-1][0]]


def test_the_accept_rate_sglang_logs_by_version():
    """The logged accept-rate formula changes at 0.5.3.post2, 0.5.5.post3 and 0.5.11; the home's rows say each."""
    assert logged_accept_rate("0.5.3") == "not logged (only accept len)"
    assert logged_accept_rate("0.5.3.post2") == "τ / (steps + 1)"
    assert logged_accept_rate("0.5.6") == "τ / NDT"
    assert logged_accept_rate("0.5.11") == "(τ − 1) / (NDT − 1)"
    rows = accept_metrics()
    assert [r[0] for r in rows] == ["accept len / avg_spec_accept_length"] + ["accept rate"] * 4
    assert {r[1] for r in rows[1:]} == {"τ / steps", "τ / (steps + 1)", "τ / NDT", "(τ − 1) / (NDT − 1)"}
