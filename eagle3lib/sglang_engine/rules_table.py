"""The rule table: how SGLang rewrites or refuses speculative settings at startup, one `Rule` row per rewrite.

Each row holds the SGLang version range where it holds (min inclusive, max exclusive), its source (PR / commit
from serving-and-throughput.md Part A), its condition, its effect and the line SGLang logs. `resolver`
resolves a launch against it; `rule` says what a row is.
"""
from __future__ import annotations

from .rule import KNOBS, Rule, RuleContext, RuleRejection
from ..engines.versions import LATEST_TRACED

_DEEPSEEK = ("DeepseekV2", "DeepseekV3")                       # prefixes; DeepseekV32 included
_MOE_314 = ("Glm4Moe", "GlmMoeDsa", "BailingMoe", "MistralLarge3", "Pixtral", "MiMoV2")
_MTP = ("DeepseekV3", "DeepseekV4", "Glm4Moe", "GlmMoeDsa", "BailingMoe", "MistralLarge3", "Pixtral", "HYV3")
_TOPK1_MSG = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
_ADAPTIVE_OFF_MSG = None   # "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
_DUMP_MSG = "Cuda graph and server warmup are disabled because of using tensor dump mode"
_MRR_MSG = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
            "setting --max-running-requests.")


def _rej(field_, value, allowed, problem):
    raise RuleRejection(field_, value, allowed, problem)


def _adaptive_chain(c: RuleContext) -> dict:
    """_init_adaptive_speculative_params: topk 1, steps the middle default candidate when unset, ndt = steps + 1."""
    steps, candidates = c.steps, c.adaptive_candidates()
    if steps is None and candidates is not None:      # a custom --speculative-adaptive-config is not read offline
        steps = candidates[len(candidates) // 2]
    return {"speculative_eagle_topk": 1 if c.topk is None else c.topk, "speculative_num_steps": steps,
            "speculative_num_draft_tokens": None if steps is None else steps + 1}


def _tree_backend(c: RuleContext) -> str | None:
    """The attention backend SGLang checks a page>1 tree against (None: a CUDA GPU's default, flashinfer/triton)."""
    if c.s.get("attention_backend"):
        return c.s["attention_backend"]
    return "intel_amx or torch_native (CPU default)" if c.s.get("device") == "cpu" else None


def _graph_max_bs(c: RuleContext) -> int:
    """The decode CUDA-graph batch-size ceiling asked for (0 when unset or unreadable)."""
    value = c.s.get("cuda_graph_max_bs_decode") or c.s.get("cuda_graph_max_bs")
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _auto(rule_id, label, lo, hi, src, cond_text, triple, match, traced=True):
    return Rule(id=rule_id, label=label, min_version=lo, max_version=hi,
         source=src, kind="default", logged="silent",
         condition=f"all three knobs unset, not adaptive, {cond_text}", effect=f"(steps, topk, ndt) := {triple}",
         fields=KNOBS, traced=traced,
         when=lambda c: c.steps is None and not c.adaptive_first and match(c),
         apply=lambda c: dict(zip(KNOBS, triple)))


def _hard(rule_id, lo, hi, src, triple):
    return Rule(id=rule_id, label=f"argparse defaults {triple}", min_version=lo, max_version=hi,
         source=src, kind="default", logged="silent",
         condition="a knob is unset", effect=f"unset knobs take (steps, topk, ndt) = {triple}", fields=KNOBS,
         when=lambda c: None in (c.steps, c.topk, c.ndt),
         apply=lambda c: {k: d for k, d in zip(KNOBS, triple) if c.s.get(k) is None})


# Application order matters (it is SGLang's): aliases and refusals, defaults / auto-choice, then rewrites of topk and
# ndt, then what depends on the final topk. Releases after v0.5.6 use setuptools-scm, so the 2026 version edges
# (0.5.7 … 0.5.15) are the reference's approximate release mapping of each commit date.
RULES: tuple[Rule, ...] = (
    Rule(id="eagle_not_available", label="no EAGLE before v0.4.1", min_version=None, max_version="0.4.1",
         source="#2684 b0524c378 (2024-12-31)", kind="reject", logged="error",
         condition="a speculative algorithm is set", effect="argparse refuses the speculative flags",
         fields=("speculative_algorithm",),
         when=lambda c: True,
         apply=lambda c: _rej("speculative_algorithm", c.algo, "SGLang >= 0.4.1", "EAGLE arguments do not exist yet")),
    Rule(id="standalone_not_available", label="STANDALONE from v0.5.2", min_version="0.4.1", max_version="0.5.2",
         source="#10090 8cda5a622 (2025-09-07)", kind="reject", logged="error",
         condition="algorithm STANDALONE", effect="refused", fields=("speculative_algorithm",),
         when=lambda c: c.algo == "STANDALONE",
         apply=lambda c: _rej("speculative_algorithm", "STANDALONE", "EAGLE, EAGLE3 or NEXTN before v0.5.2",
                        "STANDALONE was added in v0.5.2")),
    Rule(id="adaptive_not_available", label="--speculative-adaptive from v0.5.13", min_version="0.4.1",
         max_version="0.5.13",
         source="#27493 3600a9ac5 (2026-06-11)", kind="reject", logged="error",
         condition="--speculative-adaptive given", effect="argparse: unrecognized arguments",
         fields=("speculative_adaptive",),
         when=lambda c: bool(c.s.get("speculative_adaptive")),
         apply=lambda c: _rej("speculative_adaptive", True, "SGLang >= 0.5.13", "the flag does not exist before v0.5.13")),
    Rule(id="rejection_sampling_not_available", label="--speculative-use-rejection-sampling from v0.5.13",
         min_version="0.4.1", max_version="0.5.13",
         source="#26312 (2026-05-25)", kind="reject", logged="error",
         condition="--speculative-use-rejection-sampling given", effect="argparse: unrecognized arguments",
         fields=("speculative_use_rejection_sampling",),
         when=lambda c: bool(c.s.get("speculative_use_rejection_sampling")),
         apply=lambda c: _rej("speculative_use_rejection_sampling", True, "SGLang >= 0.5.13 (added 2026-05-25)",
                        "the flag does not exist in this version")),
    Rule(id="cuda_graph_max_bs_alias", label="--cuda-graph-max-bs is an alias", min_version="0.5.14",
         max_version="0.5.20",
         source="DeprecatedAliasStoreAction in the 0.5.14-0.5.19 wheels", kind="rewrite", logged="warning",
         message="'--cuda-graph-max-bs' is deprecated and will be removed in a future release. Use "
         "'--cuda-graph-max-bs-decode' instead.",
         condition="--cuda-graph-max-bs given", effect="cuda_graph_max_bs_decode := cuda_graph_max_bs",
         fields=("cuda_graph_max_bs_decode",), algos=(),
         when=lambda c: c.s.get("cuda_graph_max_bs") is not None,
         apply=lambda c: {"cuda_graph_max_bs_decode": c.s.get("cuda_graph_max_bs")}),
    Rule(id="cuda_graph_max_bs_removed", label="--cuda-graph-max-bs removed", min_version="0.5.20", max_version=None,
         source="absent from the 0.5.20 wheel's argparse; SGLang 0.5.23 run", kind="reject", logged="error",
         condition="--cuda-graph-max-bs given",
         effect="argparse error: ambiguous option (could match --cuda-graph-max-bs-decode, "
         "--cuda-graph-max-bs-prefill)",
         fields=("cuda_graph_max_bs",), algos=(),
         when=lambda c: c.s.get("cuda_graph_max_bs") is not None,
         apply=lambda c: _rej("cuda_graph_max_bs", c.s.get("cuda_graph_max_bs"), "--cuda-graph-max-bs-decode",
                        "the flag was removed in 0.5.20")),
    Rule(id="topk_choices", label="topk in {1,2,4,8}", min_version="0.4.1", max_version="0.4.5",
         source="#2684; choices removed 2025-03-13 #4329", kind="reject", logged="error",
         condition="topk not in (1, 2, 4, 8)", effect="argparse: invalid choice", fields=("speculative_eagle_topk",),
         traced=False,
         when=lambda c: c.topk is not None and c.topk not in (1, 2, 4, 8),
         apply=lambda c: _rej("speculative_eagle_topk", c.topk, "one of 1, 2, 4, 8", "invalid choice")),
    Rule(id="nextn_alias", label="NEXTN is EAGLE", min_version="0.4.4", max_version=None,
         source="#3986 d3d4d7675 (2025-03-05)", kind="rewrite", logged="silent",
         condition="algorithm NEXTN", effect="speculative_algorithm := EAGLE", fields=("speculative_algorithm",),
         when=lambda c: c.algo == "NEXTN", apply=lambda c: {"speculative_algorithm": "EAGLE"}),
    Rule(id="v043_eagle_disables", label="v0.4.3 EAGLE restrictions", min_version="0.4.3", max_version="0.4.4",
         source="v0.4.3 server_args.py", kind="rewrite", logged="warning",
         message="The radix cache, chunked prefill, and overlap scheduler are disabled because of using eagle "
         "speculative decoding.",
         condition="algorithm EAGLE",
         effect="prefill_only_one_req, disable_cuda_graph_padding, disable_radix_cache, disable_overlap_schedule := True; "
         "chunked_prefill_size := -1",
         fields=("disable_radix_cache", "disable_overlap_schedule", "chunked_prefill_size"),
         when=lambda c: c.algo == "EAGLE",
         apply=lambda c: {"prefill_only_one_req": True, "disable_cuda_graph_padding": True, "disable_radix_cache": True,
                    "disable_overlap_schedule": True, "chunked_prefill_size": -1}),
    _hard("hard_defaults_5_8_64", "0.4.1", "0.4.4", "#2684 b0524c378", (5, 8, 64)),
    _hard("hard_defaults_5_4_8", "0.4.4", "0.4.5", "#3986 d3d4d7675", (5, 4, 8)),
    Rule(id="adaptive_unsupported", label="--speculative-adaptive falls back to static", min_version="0.5.14",
         max_version=None,
         source="0.5.14 wheel: _maybe_disable_adaptive runs before _handle_eagle_family; SGLang 0.5.23 checked",
         kind="rewrite", logged="warning", message=_ADAPTIVE_OFF_MSG,
         condition="--speculative-adaptive with topk set and != 1, an algorithm other than "
         "EAGLE/EAGLE3, DP attention, multi-layer EAGLE, two-batch overlap or PDMux",
         effect="speculative_adaptive := False; the knobs resolve as without it", fields=("speculative_adaptive",),
         when=lambda c: c.adaptive and c.adaptive_unsupported(), apply=lambda c: {"speculative_adaptive": False}),
    Rule(id="adaptive_chain", label="--speculative-adaptive chain", min_version="0.5.14", max_version=None,
         source="#27493 3600a9ac5; _init_adaptive_speculative_params from the 0.5.14 wheel; SGLang 0.5.23 checked",
         kind="rewrite", logged="silent",
         condition="--speculative-adaptive (still on)",
         effect="topk := 1 if unset; steps := middle default candidate (3) if unset; ndt := steps + 1", fields=KNOBS,
         when=lambda c: c.adaptive, apply=lambda c: _adaptive_chain(c)),
    Rule(id="adaptive_steps_not_candidate", label="adaptive steps must be a candidate", min_version="0.5.14",
         max_version=None,
         source="_init_adaptive_speculative_params (0.5.14 wheel); SGLang 0.5.23 checked", kind="reject",
         logged="error",
         condition="--speculative-adaptive with num_steps outside the default config's candidate_steps",
         effect="ValueError '--speculative-num-steps=N is not in the adaptive config candidate_steps [...]'",
         fields=("speculative_num_steps",),
         when=lambda c: c.adaptive and c.adaptive_candidates() is not None and c.steps not in c.adaptive_candidates(),
         apply=lambda c: _rej("speculative_num_steps", c.steps, f"one of {list(c.adaptive_candidates())}",
                        "not in the adaptive config candidate_steps")),
    Rule(id="partial_knobs_assert", label="set all three knobs or none", min_version="0.4.5", max_version=None,
         source="#4908 b26bc86b3 (auto-choose assert)", kind="reject", logged="error",
         condition="num_steps unset but topk or num_draft_tokens set, not adaptive",
         effect="AssertionError at startup", fields=KNOBS,
         when=lambda c: c.steps is None and not c.adaptive_first and (c.topk, c.ndt) != (None, None),
         apply=lambda c: _rej("speculative_num_steps", None, "set with topk and num_draft_tokens, or all three unset",
                        "speculative_eagle_topk / speculative_num_draft_tokens given without speculative_num_steps")),
    Rule(id="steps_without_topk", label="topk unset with steps set", min_version="0.4.5", max_version=None,
         source="speculative_hook.py / v0.4.6 page check "
         "(analysis)",
         kind="reject", logged="error",
         condition="num_steps set, topk unset, not adaptive", effect="TypeError comparing None > 1", fields=KNOBS,
         when=lambda c: c.steps is not None and c.topk is None and not c.adaptive_first,
         apply=lambda c: _rej("speculative_eagle_topk", None, "an integer >= 1 (set all three knobs, or none)",
                        "speculative_num_steps is set but speculative_eagle_topk is not")),
    Rule(id="mtp_draft_path_default", label="MTP draft path := target", min_version="0.4.9", max_version=None,
         source="#7643 78700893e (DeepSeek-V3); other "
         "architectures from the HEAD list",
         kind="default", logged="silent",
         condition="MTP architecture, no draft path", effect="speculative_draft_model_path := model_path",
         fields=("speculative_draft_model_path",),
         when=lambda c: c.arch_in(_MTP) and not c.s.get("speculative_draft_model_path"),
         apply=lambda c: {"speculative_draft_model_path": c.s.get("model_path")}),
    Rule(id="mtp_draft_path_warning", label="MTP ignores draft path", min_version="0.4.9", max_version=None,
         source="#7643 78700893e", kind="note", logged="warning",
         message="DeepSeek MTP does not require setting speculative_draft_model_path.",
         condition="MTP architecture with a draft path", effect="warning only",
         fields=("speculative_draft_model_path",),
         when=lambda c: c.arch_in(_MTP) and bool(c.s.get("speculative_draft_model_path")), apply=lambda c: {}),
    _auto("auto_params_all_548", "auto (5,4,8)", "0.4.5", "0.4.7", "#4908 b26bc86b3 (2025-03-30)",
          "any architecture", (5, 4, 8), lambda c: True),
    _auto("auto_params_standalone_314", "auto STANDALONE (3,1,4)", "0.5.2", None, "#10090 8cda5a622",
          "algorithm STANDALONE", (3, 1, 4), lambda c: c.algo == "STANDALONE"),
    _auto("auto_params_deepseek_314", "auto DeepSeek (3,1,4)", "0.4.7", None, "#6787 2d72fc47c (2025-05-31)",
          "DeepseekV2/V3/V32 target", (3, 1, 4), lambda c: c.arch_in(_DEEPSEEK)),
    _auto("auto_params_gptoss_314", "auto GptOss (3,1,4)", "0.5.1", None, "#9470 0f9318f7d (2025-08-21)",
          "GptOss target", (3, 1, 4), lambda c: c.arch_in(("GptOss",))),
    _auto("auto_params_moe_314", "auto MoE group (3,1,4)", "0.5.7", None, "_auto_choose_speculative_params (HEAD "
          "list; when each joined is not traced)", "Glm4Moe/GlmMoeDsa/Bailing/MistralLarge3/Pixtral/MiMoV2 target",
          (3, 1, 4), lambda c: c.arch_in(_MOE_314), traced=False),
    _auto("auto_params_llama_548", "auto Llama (5,4,8)", "0.4.7", None, "#4908; kept by #16247",
          "LlamaForCausalLM target", (5, 4, 8), lambda c: c.arch == "LlamaForCausalLM"),
    _auto("auto_params_grok_548", "auto Grok (5,4,8)", "0.4.7", None, "_auto_choose_speculative_params (HEAD)",
          "Grok1(V) target", (5, 4, 8), lambda c: c.arch_in(("Grok1",))),
    _auto("auto_params_other_548", "auto fallback (5,4,8)", "0.4.7", "0.5.7", "#4908 b26bc86b3",
          "any other architecture", (5, 4, 8), lambda c: True),
    _auto("auto_params_other_314", "auto fallback (3,1,4)", "0.5.7", None, "#16247 e4c1e441a (2025-12-31)",
          "any other architecture (e.g. Qwen2/Qwen3)", (3, 1, 4), lambda c: True),
    Rule(id="max_running_requests_32", label="max_running_requests 32", min_version="0.4.4", max_version="0.4.5",
         source="#3986 d3d4d7675", kind="default", logged="silent",
         condition="max_running_requests unset", effect="max_running_requests := 32", fields=("max_running_requests",),
         when=lambda c: c.s.get("max_running_requests") is None, apply=lambda c: {"max_running_requests": 32}),
    Rule(id="max_running_requests_deepseek_v4", label="DeepSeek-V4 hook 256", min_version=LATEST_TRACED,
         max_version=None,
         source="issue #33199", kind="default", logged="silent",
         condition="DeepseekV4 target, max_running_requests unset",
         effect="model hook sets 256 first, so the reset to 48 never fires", fields=("max_running_requests",),
         traced=False,
         when=lambda c: c.arch_in(("DeepseekV4",)) and c.s.get("max_running_requests") is None,
         apply=lambda c: {"max_running_requests": 256}),
    Rule(id="max_running_requests_48_silent", label="max_running_requests 48 (silent)", min_version="0.4.5",
         max_version="0.5.4",
         source="#4908 b26bc86b3", kind="default", logged="silent",
         condition="max_running_requests unset", effect="max_running_requests := 48", fields=("max_running_requests",),
         when=lambda c: c.s.get("max_running_requests") is None, apply=lambda c: {"max_running_requests": 48}),
    Rule(id="max_running_requests_48", label="max_running_requests 48", min_version="0.5.4", max_version=None,
         source="#11835 cbb5fc2ed (first warning)", kind="default", logged="warning", message=_MRR_MSG,
         condition="max_running_requests unset", effect="max_running_requests := 48", fields=("max_running_requests",),
         when=lambda c: c.s.get("max_running_requests") is None, apply=lambda c: {"max_running_requests": 48}),
    Rule(id="mixed_chunk_off", label="mixed chunked prefill off", min_version="0.4.7", max_version="0.5.19",
         source="#6874 e1ce44cdb (2025-06-07); last in "
         "the 0.5.18 wheel",
         kind="rewrite", logged="warning",
         message="Mixed chunked prefill is disabled because of using eagle speculative decoding.",
         condition="--enable-mixed-chunk", effect="enable_mixed_chunk := False", fields=("enable_mixed_chunk",),
         when=lambda c: bool(c.s.get("enable_mixed_chunk")), apply=lambda c: {"enable_mixed_chunk": False}),
    Rule(id="mixed_chunk_off_standalone", label="mixed chunked prefill off (STANDALONE only)", min_version="0.5.19",
         max_version=None,
         source="0.5.19 wheel: _handle_eagle_family asks SpeculativeAlgorithm.supports_mixed_chunk() (EAGLE, EAGLE3, DFLASH, "
         "DSPARK keep it); SGLang 0.5.23 checked",
         kind="rewrite", logged="warning",
         message="Mixed chunked prefill is disabled: STANDALONE speculative decoding does not support it.",
         condition="--enable-mixed-chunk with STANDALONE", effect="enable_mixed_chunk := False",
         fields=("enable_mixed_chunk",), algos=("STANDALONE",),
         when=lambda c: bool(c.s.get("enable_mixed_chunk")), apply=lambda c: {"enable_mixed_chunk": False}),
    Rule(id="page_size_topk_to_1_info", label="page>1 forces topk 1", min_version="0.4.5", max_version="0.4.6",
         source="#4908 b26bc86b3", kind="rewrite", logged="info",
         message="speculative_eagle_topk is changed to 1 when page_size > 1",
         condition="topk > 1 and page_size > 1", effect="speculative_eagle_topk := 1",
         fields=("speculative_eagle_topk",),
         when=lambda c: (c.topk or 0) > 1 and c.page > 1, apply=lambda c: {"speculative_eagle_topk": 1}),
    Rule(id="page_size_topk_to_1", label="page>1 forces topk 1", min_version="0.4.6", max_version="0.4.9",
         source="#5318 188f0955f; removed by #7643", kind="rewrite", logged="warning",
         message="speculative_eagle_topk is adjusted to 1 when page_size > 1",
         condition="topk > 1 and page_size > 1", effect="speculative_eagle_topk := 1",
         fields=("speculative_eagle_topk",),
         when=lambda c: (c.topk or 0) > 1 and c.page > 1, apply=lambda c: {"speculative_eagle_topk": 1}),
    Rule(id="trtllm_mha_topk1", label="trtllm_mha needs topk 1", min_version="0.5.1", max_version=None,
         source="#9331 9ec314c6a (2025-08-21)", kind="reject", logged="error",
         message="trtllm_mha backend only supports topk = 1 for speculative decoding.",
         condition="trtllm_mha backend and topk > 1", effect="ValueError", fields=("speculative_eagle_topk",),
         when=lambda c: "trtllm_mha" in c.backends() and (c.topk or 0) > 1,
         apply=lambda c: _rej("speculative_eagle_topk", c.topk, "1 with the trtllm_mha backend",
                        "trtllm_mha backend only supports topk = 1 for speculative decoding")),
    Rule(id="rejection_sampling_constraints", label="rejection sampling constraints", min_version="0.5.13",
         max_version=None,
         source="#26312 (2026-05-25)", kind="reject", logged="error",
         condition="--speculative-use-rejection-sampling with topk != 1, thresholds != 1.0, "
         "deterministic inference or a non-EAGLE algorithm",
         effect="ValueError", fields=("speculative_use_rejection_sampling",),
         when=lambda c: bool(c.s.get("speculative_use_rejection_sampling")) and (
             c.algo not in ("EAGLE", "EAGLE3") or c.topk != 1 or bool(c.s.get("enable_deterministic_inference"))
             or c.s.get("speculative_accept_threshold_single", 1.0) != 1.0
             or c.s.get("speculative_accept_threshold_acc", 1.0) != 1.0),
         apply=lambda c: _rej("speculative_use_rejection_sampling", True, "EAGLE/EAGLE3, topk 1, both thresholds 1.0, no "
                        "deterministic inference", "rejection sampling needs a lossless topk-1 chain")),
    Rule(id="topk1_ndt", label="topk=1 rule", min_version="0.4.6", max_version=None,
         source="#5318 188f0955f (2025-04-20, info); warning since #5769", kind="rewrite", logged="warning",
         message=_TOPK1_MSG,
         condition="topk == 1 and num_draft_tokens != num_steps + 1",
         effect="speculative_num_draft_tokens := speculative_num_steps + 1", fields=("speculative_num_draft_tokens",),
         when=lambda c: c.topk == 1 and c.steps is not None and c.ndt != c.steps + 1,
         apply=lambda c: {"speculative_num_draft_tokens": c.steps + 1}),
    Rule(id="adaptive_unsupported_0513", label="--speculative-adaptive falls back to static", min_version="0.5.13",
         max_version="0.5.14",
         source="0.5.13 wheel: _maybe_disable_adaptive runs after _handle_eagle_family (its auto-choice included)",
         kind="rewrite", logged="warning", message=_ADAPTIVE_OFF_MSG,
         condition="--speculative-adaptive and the resolved topk != 1, an algorithm "
         "other than EAGLE/EAGLE3, DP attention, multi-layer EAGLE, two-batch overlap or PDMux",
         effect="speculative_adaptive := False", fields=("speculative_adaptive",),
         when=lambda c: c.adaptive and (c.topk != 1 or c.adaptive_unsupported()),
         apply=lambda c: {"speculative_adaptive": False}),
    Rule(id="adaptive_steps_not_candidate_0513", label="adaptive steps must be a candidate", min_version="0.5.13",
         max_version="0.5.14",
         source="validate_adaptive_initial_steps (0.5.13 wheel)", kind="reject", logged="error",
         condition="--speculative-adaptive on a chain whose num_steps is not in (1, 3, 7)", effect="ValueError",
         fields=("speculative_num_steps",),
         when=lambda c: c.adaptive and c.adaptive_candidates() is not None and c.steps not in c.adaptive_candidates(),
         apply=lambda c: _rej("speculative_num_steps", c.steps, f"one of {list(c.adaptive_candidates())}",
                        "not in the adaptive config candidate_steps")),
    Rule(id="page_tree_flashinfer_only", label="topk>1 & page>1 needs flashinfer", min_version="0.5.2",
         max_version="0.5.13",
         source="#9784 a23c30205 (2025-08-29); widened to fa3 at a version not traced", kind="reject", logged="error",
         condition="topk > 1, page_size > 1, attention_backend set and not flashinfer", effect="ValueError",
         fields=("speculative_eagle_topk",),
         when=lambda c: (c.topk or 0) > 1 and c.page > 1 and bool(c.s.get("attention_backend"))
         and c.s.get("attention_backend") not in ("flashinfer",),
         apply=lambda c: _rej("speculative_eagle_topk", c.topk, "1 when page_size > 1, or attention_backend flashinfer",
                        f"speculative_eagle_topk > 1 with page_size {c.page} on {c.s.get('attention_backend')}")),
    Rule(id="page_tree_backends", label="topk>1 & page>1 backends", min_version="0.5.13", max_version=None,
         source="#26972 84ca0ffb8 (2026-06-06); the check "
         "reads the resolved backend (0.5.13 wheel; SGLang 0.5.23 run on --device cpu)",
         kind="reject", logged="error",
         condition="topk > 1, page_size > 1 and the backend SGLang ends up with is not flashinfer/fa3/triton: the one given, "
         "or on --device cpu the CPU default (intel_amx, torch_native without AMX); a CUDA GPU's default for a tree "
         "(flashinfer or triton) passes",
         effect="ValueError", fields=("speculative_eagle_topk",),
         when=lambda c: (c.topk or 0) > 1 and c.page > 1 and _tree_backend(c) not in (None, "flashinfer", "fa3", "triton"),
         apply=lambda c: _rej("speculative_eagle_topk", c.topk, "1 when page_size > 1, or a flashinfer/fa3/triton backend",
                        f"speculative_eagle_topk > 1 with page_size {c.page} on {_tree_backend(c)}")),
    Rule(id="overlap_off_v1", label="overlap scheduler off", min_version="0.4.4", max_version="0.5.4",
         source="#3986 era server_args.py (spec v1)", kind="rewrite", logged="not traced",
         condition="EAGLE family", effect="disable_overlap_schedule := True", fields=("disable_overlap_schedule",),
         when=lambda c: not c.s.get("disable_overlap_schedule"), apply=lambda c: {"disable_overlap_schedule": True}),
    Rule(id="overlap_off_without_spec_v2", label="overlap off without SGLANG_ENABLE_SPEC_V2", min_version="0.5.4",
         max_version="0.5.11",
         source="#12113 8491c794a (2025-10-26)", kind="rewrite", logged="warning",
         message="Overlap scheduler is disabled because of using eagle3 or standalone speculative decoding.",
         condition="SGLANG_ENABLE_SPEC_V2 not set", effect="disable_overlap_schedule := True",
         fields=("disable_overlap_schedule",),
         when=lambda c: not c.s.get("disable_overlap_schedule")
         and str(c.env.get("SGLANG_ENABLE_SPEC_V2", "")).lower() not in ("1", "true", "yes", "on"),
         apply=lambda c: {"disable_overlap_schedule": True}),
    Rule(id="spec_v1_for_tree", label="topk>1 runs spec v1 (no overlap)", min_version="0.5.11", max_version="0.5.13",
         source="#21062 79dbfe450 (2026-04-30)", kind="rewrite", logged="warning",
         condition="topk > 1", effect="disable_overlap_schedule := True (spec v2 supports topk = 1 only)",
         fields=("disable_overlap_schedule",),
         when=lambda c: (c.topk or 0) > 1 and not c.s.get("disable_overlap_schedule"),
         apply=lambda c: {"disable_overlap_schedule": True}),
    Rule(id="spec_v2_env_removed", label="SGLANG_ENABLE_SPEC_V2 removed", min_version="0.5.13", max_version=None,
         source="#27964 c0480a88b (2026-06-11)", kind="note", logged="warning",
         condition="SGLANG_ENABLE_SPEC_V2 set", effect="warning 'has been removed'; no effect",
         fields=("disable_overlap_schedule",),
         when=lambda c: "SGLANG_ENABLE_SPEC_V2" in c.env, apply=lambda c: {}),
    Rule(id="sync_spec_v2", label="non-overlap spec v2", min_version="0.5.13", max_version=None,
         source="speculative_hook.py::_handle_eagle_family", kind="note", logged="warning",
         message="Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.",
         condition="disable_overlap_schedule", effect="synchronous v2 worker", fields=("disable_overlap_schedule",),
         when=lambda c: bool(c.s.get("disable_overlap_schedule")), apply=lambda c: {}),
    Rule(id="cpu_overlap_off", label="CPU disables overlap", min_version=LATEST_TRACED, max_version=None,
         source="speculative_hook.py::"
         "_disable_overlap_schedule_for_cpu",
         kind="rewrite", logged="not traced",
         condition="device cpu", effect="disable_overlap_schedule := True", fields=("disable_overlap_schedule",),
         traced=False,
         when=lambda c: c.s.get("device") == "cpu" and not c.s.get("disable_overlap_schedule"),
         apply=lambda c: {"disable_overlap_schedule": True}),
    Rule(id="draft_quant_inherits", label="draft quantization inherits target", min_version="0.5.12", max_version=None,
         source="server_args.py ~l.3376; "
         "already in the 0.5.12 wheel",
         kind="default", logged="silent",
         condition="--quantization set, draft quantization unset",
         effect="speculative_draft_model_quantization := quantization ('unquant' opts out)",
         fields=("speculative_draft_model_quantization",), traced=False,
         when=lambda c: bool(c.s.get("quantization")) and c.s.get("speculative_draft_model_quantization") is None,
         apply=lambda c: {"speculative_draft_model_quantization": c.s.get("quantization")}),
    Rule(id="draft_unquant_is_none", label="draft 'unquant' means no quantization", min_version="0.5.12",
         max_version=None,
         source="_handle_missing_default_values (0.5.12-0.5.22 wheels); SGLang 0.5.23 run", kind="rewrite",
         logged="silent",
         condition="--speculative-draft-model-quantization unquant",
         effect="speculative_draft_model_quantization := None", fields=("speculative_draft_model_quantization",),
         traced=False,
         when=lambda c: c.s.get("speculative_draft_model_quantization") == "unquant",
         apply=lambda c: {"speculative_draft_model_quantization": None}),
    Rule(id="tensor_dump_disables_graphs", label="tensor dump disables CUDA graphs", min_version="0.4.4",
         max_version="0.5.14",
         source="#3988 (2025-03-03); "
         "last in the 0.5.13 wheel",
         kind="rewrite", logged="warning", message=_DUMP_MSG,
         condition="--debug-tensor-dump-output-folder", effect="disable_cuda_graph, skip_server_warmup := True",
         fields=("disable_cuda_graph", "skip_server_warmup"), algos=(),
         when=lambda c: bool(c.s.get("debug_tensor_dump_output_folder")),
         apply=lambda c: {"disable_cuda_graph": True, "skip_server_warmup": True}),
    Rule(id="tensor_dump_disables_graph_backends", label="tensor dump disables CUDA graphs", min_version="0.5.14",
         max_version=None,
         source="0.5.14 wheel (cuda_graph_config phases); SGLang 0.5.23 run", kind="rewrite", logged="warning",
         message=_DUMP_MSG,
         condition="--debug-tensor-dump-output-folder",
         effect="cuda_graph_config decode and prefill backend := disabled (disable_cuda_graph is left alone); "
         "skip_server_warmup := True",
         fields=("cuda_graph_config", "skip_server_warmup"), algos=(),
         when=lambda c: bool(c.s.get("debug_tensor_dump_output_folder")), apply=lambda c: {"skip_server_warmup": True}),
    Rule(id="cuda_graph_bs_clipped", label="graph batch sizes follow max_running_requests", min_version="0.5.1",
         max_version=None,
         source="cuda_graph_runner.get_batch_sizes_to_capture (v0.5.1)", kind="note", logged="silent",
         condition="cuda_graph_max_bs (_decode from 0.5.14) > max_running_requests",
         effect="batches above max_running_requests are never captured", fields=("cuda_graph_max_bs",),
         when=lambda c: _graph_max_bs(c) > (c.s.get("max_running_requests") or 10 ** 9), apply=lambda c: {}),
    Rule(id="mem_reserve_draft", label="memory heuristic reserves draft room", min_version="0.5.3",
         max_version="0.5.7",
         source="#10975 a17e70f5c", kind="note", logged="silent",
         condition="mem_fraction_static unset",
         effect="the auto mem_fraction_static reserves +2 GB (+6 GB for STANDALONE)", fields=("mem_fraction_static",),
         when=lambda c: c.s.get("mem_fraction_static") is None, apply=lambda c: {}),
    Rule(id="attn_backend_by_shape", label="default backend depends on topk", min_version="0.5.4", max_version=None,
         source="#12136 (2025-10-25), #14291", kind="note", logged="silent",
         condition="attention_backend unset",
         effect="Hopper: fa3 only when topk == 1 and page 1, else flashinfer; SM100: trtllm_mha only when topk == 1",
         fields=("attention_backend",),
         when=lambda c: not c.s.get("attention_backend"), apply=lambda c: {}),
)


