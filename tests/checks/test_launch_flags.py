"""Check 10 (serving features from the launch): each cause raised by the flag that shows it, ruled out (or not
checked, naming the input) without it; engine defaults never raise; a garbled value names its flag."""
from __future__ import annotations

import pytest

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.launch_flags import check_launch_flags
from tests.checks.world import TARGET, draft_raw, write_draft, write_target

SG = ("python -m sglang.launch_server --model-path t --speculative-draft-model-path d "
      "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
      "--speculative-num-draft-tokens 4")
VL = ("vllm serve t --speculative-config "
      "'{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'")
VL_SPEC = "vllm serve t --speculative-config '{{\"method\": \"eagle3\", \"model\": \"d\", {extra}}}'"


def _f(tmp_path, launch, target=None, served=None) -> dict:
    """{cause: finding} of check_launch_flags on the tiny draft/target and `launch`."""
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()), target=write_target(tmp_path, target),
                         launch=launch, served_prompts=served)
    found = check_launch_flags(art)
    assert len({x.cause for x in found}) == len(found) == 11
    return {x.cause: x for x in found}


@pytest.mark.parametrize("launch", [SG, VL])
def test_clean_launch_raises_nothing_and_says_what_decides_the_rest(tmp_path, launch):
    """A plain EAGLE-3 launch on either engine: every cause ruled out or not checked, each not-checked one naming
    its input (served accept lengths over time, the requests' grammar options, the chunk size)."""
    f = _f(tmp_path, launch)
    assert {c: x.status for c, x in f.items()} == {
        "prefix_cache_stale_kv": "not checked", "dp_attention": "ruled out", "lora_target": "ruled out",
        "structured_output": "not checked", "chunked_prefill_boundary": "not checked",
        "mrope_draft_extend": "ruled out", "trtllm_acceptance_gate": "ruled out", "hicache_draft_kv": "ruled out",
        "pd_disaggregation": "ruled out", "async_scheduling": "not checked", "sequence_parallel": "ruled out"}
    assert "async scheduling off" in f["async_scheduling"].needs
    assert "over time" in f["prefix_cache_stale_kv"].needs and "served_log_path" in f["prefix_cache_stale_kv"].needs
    assert "response_format" in f["structured_output"].needs
    assert "served_prompts" in f["chunked_prefill_boundary"].needs


def test_vllm_default_prefix_caching_is_not_evidence(tmp_path):
    """Prefix caching on by default, or on explicitly: not checked; --no-enable-prefix-caching: ruled out;
    disable_eagle_block_drop with caching on: suspected (vllm PR#53388)."""
    f = _f(tmp_path, VL)["prefix_cache_stale_kv"]
    assert f.status == "not checked" and f.evidence["prefix_caching"] == "on (vLLM default)"
    assert _f(tmp_path, VL + " --enable-prefix-caching")["prefix_cache_stale_kv"].status == "not checked"
    assert _f(tmp_path, VL + " --no-enable-prefix-caching")["prefix_cache_stale_kv"].status == "ruled out"
    f = _f(tmp_path, VL_SPEC.format(extra='"disable_eagle_block_drop": true'))["prefix_cache_stale_kv"]
    assert f.status == "suspected" and "53388" in f.source
    assert _f(tmp_path, SG + " --disable-radix-cache")["prefix_cache_stale_kv"].status == "ruled out"


def test_dp_attention_with_eagle3_on_sglang_is_suspected(tmp_path):
    """--enable-dp-attention with EAGLE3: suspected (sglang#16274); vLLM data_parallel_size 2: not checked."""
    f = _f(tmp_path, SG + " --tp-size 4 --dp-size 4 --enable-dp-attention")["dp_attention"]
    assert f.status == "suspected" and "16274" in f.source and f.evidence["dp_size"] == 4
    f = _f(tmp_path, VL + " --data-parallel-size 2")["dp_attention"]
    assert f.status == "not checked" and f.needs


@pytest.mark.parametrize("launch", [SG + " --enable-lora --lora-paths a=/adapters/a",
                                    SG + " --lora-paths a=/adapters/a",
                                    VL + " --enable-lora --lora-modules a=/adapters/a"])
def test_lora_adapters_on_the_target_are_suspected(tmp_path, launch):
    """Any LoRA adapter on the target (either engine): suspected, source sglang PR#34337."""
    f = _f(tmp_path, launch)["lora_target"]
    assert f.status == "suspected" and "34337" in f.source


def test_grammar_backend_none_rules_structured_output_out(tmp_path):
    """SGLang --grammar-backend none: no request can use a grammar -> ruled out."""
    assert _f(tmp_path, SG + " --grammar-backend none")["structured_output"].status == "ruled out"


def test_chunked_prefill_decided_by_the_chunk_size_and_served_lengths(tmp_path):
    """Chunking off or prompts within one chunk: ruled out; prompts across the chunk: not checked naming the
    served accept length by prompt length."""
    assert _f(tmp_path, SG + " --chunked-prefill-size -1")["chunked_prefill_boundary"].status == "ruled out"
    assert _f(tmp_path, VL + " --no-enable-chunked-prefill")["chunked_prefill_boundary"].status == "ruled out"
    f = _f(tmp_path, SG + " --chunked-prefill-size 1024", served=[100, 900])["chunked_prefill_boundary"]
    assert f.status == "ruled out" and f.evidence["served_max_len"] == 900
    f = _f(tmp_path, VL + " --max-num-batched-tokens 1024", served=[100, 3000])["chunked_prefill_boundary"]
    assert f.status == "not checked" and "1024" in f.needs


def test_mrope_target_with_eagle3_is_suspected_on_sglang(tmp_path):
    """A Qwen3-VL-style target (rope_scaling.mrope_section): suspected on SGLang (sglang#34152), not checked on
    vLLM; without the launch, not checked naming it; a plain target is ruled out."""
    vl = {**TARGET, "architectures": ["Qwen3VLForConditionalGeneration"],
          "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True}}
    f = _f(tmp_path, SG, vl)["mrope_draft_extend"]
    assert f.status == "suspected" and "34152" in f.source and f.evidence["mrope"]["mrope_section"] == [24, 20, 20]
    assert _f(tmp_path, VL, vl)["mrope_draft_extend"].status == "not checked"
    art = read_artifacts(target=write_target(tmp_path, vl, name="vl"))
    f = {x.cause: x for x in check_launch_flags(art)}["mrope_draft_extend"]
    assert f.status == "not checked" and "launch" in f.needs
    art = read_artifacts(target=write_target(tmp_path, name="plain"))
    assert {x.cause: x for x in check_launch_flags(art)}["mrope_draft_extend"].status == "ruled out"


def test_trtllm_gate_needs_the_deployment(tmp_path):
    """No launch (or one that is not SGLang / vLLM, e.g. trtllm-serve): not checked naming the TRT-LLM config."""
    for launch in (None, "trtllm-serve /models/t --extra_llm_api_options cfg.yaml"):
        f = {x.cause: x for x in check_launch_flags(read_artifacts(launch=launch))}["trtllm_acceptance_gate"]
        assert f.status == "not checked" and "acceptance_rate_threshold" in f.needs
    art = read_artifacts(launch="trtllm-serve /models/t")
    f = {x.cause: x for x in check_launch_flags(art)}["trtllm_acceptance_gate"]
    assert "unreadable" in f.needs and "not a SGLang or vLLM launch command" in f.needs


def test_launch_without_speculation_rules_the_features_out(tmp_path):
    """No --speculative-algorithm: nothing here can lower an accept length (wrong_method reports the launch)."""
    f = _f(tmp_path, "python -m sglang.launch_server --model-path t --enable-lora --enable-dp-attention")
    assert {x.status for x in f.values()} == {"ruled out"}


@pytest.mark.parametrize("launch, flag", [
    (SG + " --enable-dp-attention=maybe", "--enable-dp-attention"),
    (SG + " --chunked-prefill-size lots", "--chunked-prefill-size"),
    (SG + " --disable-radix-cache=perhaps", "--disable-radix-cache"),
    ("vllm serve t --speculative-config '{\"method\": eagle3'", "--speculative-config"),
    (VL + " --enable-lora=sometimes", "--enable-lora"),
])
def test_garbled_flag_values_are_named_never_a_crash(tmp_path, launch, flag):
    """A value the parser could not type (kept as a string) gives a not-checked finding naming the flag."""
    f = _f(tmp_path, launch)
    named = [x for x in f.values() if flag in x.summary]
    assert named and all(x.status == "not checked" and flag in x.needs for x in named)


def test_hicache_on_sglang_is_suspected(tmp_path):
    """--enable-hierarchical-cache with EAGLE3: suspected (sglang#32176), naming served accept lengths over time;
    without it, or on vLLM: ruled out."""
    f = _f(tmp_path, SG + " --enable-hierarchical-cache --hicache-ratio 2")["hicache_draft_kv"]
    assert f.status == "suspected" and "32176" in f.source and f.evidence["hicache_ratio"] == 2.0
    assert "over time" in f.needs and "flush_cache" in f.fix
    assert _f(tmp_path, SG)["hicache_draft_kv"].status == "ruled out"
    assert _f(tmp_path, SG + " --enable-hierarchical-cache=maybe")["hicache_draft_kv"].status == "not checked"
    kt = " --kv-transfer-config '{\"kv_connector\": \"LMCacheConnectorV1\", \"kv_role\": \"kv_both\"}'"
    f = _f(tmp_path, VL + kt)["hicache_draft_kv"]
    assert f.status == "not checked" and "over time" in f.needs
    assert _f(tmp_path, VL)["hicache_draft_kv"].status == "ruled out"


def test_pd_disaggregation(tmp_path):
    """SGLang --disaggregation-mode decode: suspected (sglang PR#10801), by prompt length; a vLLM KV connector: not
    checked (no vLLM thread); neither: ruled out."""
    f = _f(tmp_path, SG + " --disaggregation-mode decode")["pd_disaggregation"]
    assert f.status == "suspected" and "10801" in f.source and "prompt length" in f.needs
    kt = " --kv-transfer-config '{\"kv_connector\": \"NixlConnector\", \"kv_role\": \"kv_both\"}'"
    f = _f(tmp_path, VL + kt)["pd_disaggregation"]
    assert f.status == "not checked" and f.evidence["kv_transfer_config"]["kv_connector"] == "NixlConnector"
    assert _f(tmp_path, SG + " --disaggregation-mode null")["pd_disaggregation"].status == "ruled out"


def test_async_scheduling(tmp_path):
    """vLLM --async-scheduling: suspected (vllm PR#29845); --no-async-scheduling: ruled out; the default (on in
    0.32.0, engines.facts) is not evidence; SGLang --disable-overlap-schedule: ruled out."""
    assert _f(tmp_path, VL + " --async-scheduling")["async_scheduling"].status == "suspected"
    assert _f(tmp_path, VL + " --no-async-scheduling")["async_scheduling"].status == "ruled out"
    f = _f(tmp_path, VL)["async_scheduling"]
    assert f.status == "not checked" and "config/vllm.py:1585" in f.source
    assert _f(tmp_path, SG + " --disable-overlap-schedule")["async_scheduling"].status == "ruled out"
    assert _f(tmp_path, SG)["async_scheduling"].status == "not checked"


def test_sequence_parallel(tmp_path):
    """compilation_config pass_config enable_sp with EAGLE-3: suspected (vllm-ascend#5825); off: ruled out."""
    cc = " -O '{\"pass_config\": {\"enable_sp\": true}}'"
    f = _f(tmp_path, VL + cc)["sequence_parallel"]
    assert f.status == "suspected" and f.evidence["sequence_parallel"] == "compilation_config.pass_config.enable_sp"
    assert _f(tmp_path, VL + " -O '{\"pass_config\": {\"enable_sp\": false}}'")["sequence_parallel"].status == \
        "ruled out"


def test_topology_causes_without_launch_name_it(tmp_path):
    """No launch: each topology cause is not checked, naming the launch command."""
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw()))
    f = {x.cause: x for x in check_launch_flags(art)}
    for c in ("hicache_draft_kv", "pd_disaggregation", "async_scheduling", "sequence_parallel"):
        assert f[c].status == "not checked" and "launch command" in f[c].needs, c


def test_a_finding_cites_its_row_of_the_table(monkeypatch, tmp_path):
    """Recipe (b): check 10's engine behaviours are rows of engines.facts; the finding cites the row's source."""
    import dataclasses

    from eagle3lib.engines import facts
    monkeypatch.setattr(facts, "FACTS", tuple(
        dataclasses.replace(f, source="sglang PR#77777") if (f.engine, f.topic, f.subject) == (
            "sglang", "serving", "lora_adapts_draft") else f for f in facts.FACTS))
    f = _f(tmp_path, SG + " --enable-lora")["lora_target"]
    assert f.status == "suspected" and f.source == "sglang PR#77777" and "(sglang PR#77777)" in f.summary
