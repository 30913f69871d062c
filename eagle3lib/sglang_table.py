"""The rule table: how SGLang rewrites or refuses speculative settings at startup, one `Rule` row per rewrite.

Each row holds the SGLang version range where it holds (min inclusive, max exclusive), its source (PR / commit
from serving-and-throughput.md Part A), its condition, its effect and the line SGLang logs. eagle3lib.sglang_rules
resolves a launch against it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from packaging.version import InvalidVersion, Version

from .errors import ServingArgsError

DEFAULT_VERSION = "0.5.6"     # the version the shipped samples and the demo engine's log imitate
LATEST_TRACED = "0.5.15"      # the reference read SGLang up to just after the v0.5.15 cut (2026-07-20)
CHECKED_AGAINST = "0.5.23"    # newest SGLang whose own ServerArgs resolution was compared with this table (grid)
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE", "NEXTN")
KNOBS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
_DEEPSEEK = ("DeepseekV2", "DeepseekV3")                       # prefixes; DeepseekV32 included
_MOE_314 = ("Glm4Moe", "GlmMoeDsa", "BailingMoe", "MistralLarge3", "Pixtral", "MiMoV2")
_MTP = ("DeepseekV3", "DeepseekV4", "Glm4Moe", "GlmMoeDsa", "BailingMoe", "MistralLarge3", "Pixtral", "HYV3")
_TOPK1_MSG = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
# union of candidate_steps over DEFAULT_ADAPTIVE_CONFIG's batch-size slots, by first version (read from the wheels)
_ADAPTIVE_CANDIDATES = (("0.5.13", (1, 3, 7)), ("0.5.14", (0, 1, 3, 7)), ("0.5.20", (0, 1, 3, 5, 7)))
_ADAPTIVE_OFF_MSG = None   # "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
_DUMP_MSG = "Cuda graph and server warmup are disabled because of using tensor dump mode"
_MRR_MSG = ("Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
            "setting --max-running-requests.")


class _Reject(Exception):
    def __init__(self, field: str, value, allowed: str, problem: str):
        super().__init__(problem)
        self.field, self.value, self.allowed, self.problem = field, value, allowed, problem


class _Ctx:
    """Settings being resolved (SGLang ServerArgs field names), plus what rules may look at."""

    def __init__(self, settings: dict, arch: str | None, env: Mapping[str, str], version: Version):
        self.s, self.arch, self.env, self.version = settings, arch, env, version

    steps = property(lambda self: self.s.get("speculative_num_steps"))
    topk = property(lambda self: self.s.get("speculative_eagle_topk"))
    ndt = property(lambda self: self.s.get("speculative_num_draft_tokens"))
    page = property(lambda self: self.s.get("page_size") or 1)
    algo = property(lambda self: (self.s.get("speculative_algorithm") or "").upper() or None)
    adaptive = property(lambda self: bool(self.s.get("speculative_adaptive")))
    # >= 0.5.14 adaptive is settled before _handle_eagle_family, which then skips its auto-choice and assert
    adaptive_first = property(lambda self: self.adaptive and self.version >= Version("0.5.14"))

    def adaptive_candidates(self) -> tuple[int, ...] | None:
        """Steps the default adaptive config allows in this version (None: a custom config file was given)."""
        if self.s.get("speculative_adaptive_config"):
            return None
        return [steps for first, steps in _ADAPTIVE_CANDIDATES if self.version >= Version(first)][-1]

    def adaptive_unsupported(self) -> bool:
        """adaptive_unsupported_reason(): only EAGLE/EAGLE3 chains, no DP attention / multi-layer / TBO / PDMux."""
        return (self.algo not in ("EAGLE", "EAGLE3") or (self.topk is not None and self.topk != 1)
                or any(self.s.get(k) for k in ("enable_dp_attention", "enable_multi_layer_eagle",
                                                "enable_two_batch_overlap", "enable_pdmux"))
                or (self.s.get("attn_dp_size") or 1) > 1)

    def arch_in(self, prefixes) -> bool:
        return bool(self.arch) and self.arch.startswith(tuple(prefixes))

    def backends(self) -> set:
        return {self.s.get(k) for k in ("attention_backend", "decode_attention_backend",
                                        "prefill_attention_backend")} - {None}


@dataclass(frozen=True)
class Rule:
    """One documented SGLang startup rewrite / default / rejection, with where and when it holds."""

    id: str
    label: str                 # short name for headlines, e.g. "topk=1 rule"
    min_version: str | None    # inclusive; None = from the first version with EAGLE
    max_version: str | None    # exclusive; None = still at the reference HEAD
    source: str                # PR / commit / file in the reference
    kind: str                  # "rewrite" (changes a requested value), "default", "reject" or "note"
    logged: str                # how SGLang reports it: "warning", "info", "silent", "error" or "not traced"
    message: str | None        # the exact line SGLang prints (None when the reference does not quote it)
    condition: str
    effect: str
    fields: tuple[str, ...]
    when: Callable[[_Ctx], bool] = field(repr=False, compare=False)
    apply: Callable[[_Ctx], dict] = field(repr=False, compare=False)
    algos: tuple[str, ...] = EAGLE_FAMILY   # () = any server, speculative or not
    traced: bool = True        # False: known at the reference HEAD only; the first version is not traced

    def holds_in(self, version: str | Version) -> bool:
        """Whether this rule applies to that SGLang version."""
        v = parse_version(version)
        return ((self.min_version is None or v >= parse_version(self.min_version))
                and (self.max_version is None or v < parse_version(self.max_version)))


def _rej(field_, value, allowed, problem):
    raise _Reject(field_, value, allowed, problem)


def _adaptive_chain(c: _Ctx) -> dict:
    """_init_adaptive_speculative_params: topk 1, steps the middle default candidate when unset, ndt = steps + 1."""
    steps, candidates = c.steps, c.adaptive_candidates()
    if steps is None and candidates is not None:      # a custom --speculative-adaptive-config is not read offline
        steps = candidates[len(candidates) // 2]
    return {"speculative_eagle_topk": 1 if c.topk is None else c.topk, "speculative_num_steps": steps,
            "speculative_num_draft_tokens": None if steps is None else steps + 1}


def _tree_backend(c: _Ctx) -> str | None:
    """The attention backend SGLang checks a page>1 tree against (None: a CUDA GPU's default, flashinfer/triton)."""
    if c.s.get("attention_backend"):
        return c.s["attention_backend"]
    return "intel_amx or torch_native (CPU default)" if c.s.get("device") == "cpu" else None


def _graph_max_bs(c: _Ctx) -> int:
    """The decode CUDA-graph batch-size ceiling asked for (0 when unset or unreadable)."""
    value = c.s.get("cuda_graph_max_bs_decode") or c.s.get("cuda_graph_max_bs")
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _auto(rule_id, label, lo, hi, src, cond_text, triple, match, traced=True):
    steps, topk, ndt = triple
    return Rule(rule_id, label, lo, hi, src, "default", "silent", None,
                f"all three knobs unset, not adaptive, {cond_text}", f"(steps, topk, ndt) := {triple}", KNOBS,
                lambda c: c.steps is None and not c.adaptive_first and match(c),
                lambda c: dict(zip(KNOBS, triple)), traced=traced)


def _hard(rule_id, lo, hi, src, triple):
    return Rule(rule_id, f"argparse defaults {triple}", lo, hi, src, "default", "silent", None,
                "a knob is unset", f"unset knobs take (steps, topk, ndt) = {triple}", KNOBS,
                lambda c: None in (c.steps, c.topk, c.ndt),
                lambda c: {k: d for k, d in zip(KNOBS, triple) if c.s.get(k) is None})


# Application order matters (it is SGLang's): aliases and refusals, defaults / auto-choice, then rewrites of topk and
# ndt, then what depends on the final topk. Releases after v0.5.6 use setuptools-scm, so the 2026 version edges
# (0.5.7 … 0.5.15) are the reference's approximate release mapping of each commit date.
RULES: tuple[Rule, ...] = (
    Rule("eagle_not_available", "no EAGLE before v0.4.1", None, "0.4.1", "#2684 b0524c378 (2024-12-31)", "reject",
         "error", None, "a speculative algorithm is set", "argparse refuses the speculative flags",
         ("speculative_algorithm",), lambda c: True,
         lambda c: _rej("speculative_algorithm", c.algo, "SGLang >= 0.4.1", "EAGLE arguments do not exist yet")),
    Rule("standalone_not_available", "STANDALONE from v0.5.2", "0.4.1", "0.5.2", "#10090 8cda5a622 (2025-09-07)",
         "reject", "error", None, "algorithm STANDALONE", "refused", ("speculative_algorithm",),
         lambda c: c.algo == "STANDALONE",
         lambda c: _rej("speculative_algorithm", "STANDALONE", "EAGLE, EAGLE3 or NEXTN before v0.5.2",
                        "STANDALONE was added in v0.5.2")),
    Rule("adaptive_not_available", "--speculative-adaptive from v0.5.13", "0.4.1", "0.5.13",
         "#27493 3600a9ac5 (2026-06-11)", "reject", "error", None, "--speculative-adaptive given",
         "argparse: unrecognized arguments", ("speculative_adaptive",), lambda c: bool(c.s.get("speculative_adaptive")),
         lambda c: _rej("speculative_adaptive", True, "SGLang >= 0.5.13", "the flag does not exist before v0.5.13")),
    Rule("rejection_sampling_not_available", "--speculative-use-rejection-sampling from v0.5.13", "0.4.1", "0.5.13",
         "#26312 (2026-05-25)", "reject", "error", None, "--speculative-use-rejection-sampling given",
         "argparse: unrecognized arguments", ("speculative_use_rejection_sampling",),
         lambda c: bool(c.s.get("speculative_use_rejection_sampling")),
         lambda c: _rej("speculative_use_rejection_sampling", True, "SGLang >= 0.5.13 (added 2026-05-25)",
                        "the flag does not exist in this version")),
    Rule("cuda_graph_max_bs_alias", "--cuda-graph-max-bs is an alias", "0.5.14", "0.5.20",
         "DeprecatedAliasStoreAction in the 0.5.14-0.5.19 wheels", "rewrite", "warning",
         "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. Use "
         "'--cuda-graph-max-bs-decode' instead.", "--cuda-graph-max-bs given",
         "cuda_graph_max_bs_decode := cuda_graph_max_bs", ("cuda_graph_max_bs_decode",),
         lambda c: c.s.get("cuda_graph_max_bs") is not None,
         lambda c: {"cuda_graph_max_bs_decode": c.s.get("cuda_graph_max_bs")}, algos=()),
    Rule("cuda_graph_max_bs_removed", "--cuda-graph-max-bs removed", "0.5.20", None,
         "absent from the 0.5.20 wheel's argparse; SGLang 0.5.23 run", "reject", "error", None,
         "--cuda-graph-max-bs given", "argparse error: ambiguous option (could match --cuda-graph-max-bs-decode, "
         "--cuda-graph-max-bs-prefill)", ("cuda_graph_max_bs",),
         lambda c: c.s.get("cuda_graph_max_bs") is not None,
         lambda c: _rej("cuda_graph_max_bs", c.s.get("cuda_graph_max_bs"), "--cuda-graph-max-bs-decode",
                        "the flag was removed in 0.5.20"), algos=()),
    Rule("topk_choices", "topk in {1,2,4,8}", "0.4.1", "0.4.5", "#2684; choices removed 2025-03-13 #4329",
         "reject", "error", None, "topk not in (1, 2, 4, 8)", "argparse: invalid choice", ("speculative_eagle_topk",),
         lambda c: c.topk is not None and c.topk not in (1, 2, 4, 8),
         lambda c: _rej("speculative_eagle_topk", c.topk, "one of 1, 2, 4, 8", "invalid choice"), traced=False),
    Rule("nextn_alias", "NEXTN is EAGLE", "0.4.4", None, "#3986 d3d4d7675 (2025-03-05)", "rewrite", "silent", None,
         "algorithm NEXTN", "speculative_algorithm := EAGLE", ("speculative_algorithm",),
         lambda c: c.algo == "NEXTN", lambda c: {"speculative_algorithm": "EAGLE"}),
    Rule("v043_eagle_disables", "v0.4.3 EAGLE restrictions", "0.4.3", "0.4.4", "v0.4.3 server_args.py", "rewrite",
         "warning", "The radix cache, chunked prefill, and overlap scheduler are disabled because of using eagle "
         "speculative decoding.", "algorithm EAGLE",
         "prefill_only_one_req, disable_cuda_graph_padding, disable_radix_cache, disable_overlap_schedule := True; "
         "chunked_prefill_size := -1",
         ("disable_radix_cache", "disable_overlap_schedule", "chunked_prefill_size"), lambda c: c.algo == "EAGLE",
         lambda c: {"prefill_only_one_req": True, "disable_cuda_graph_padding": True, "disable_radix_cache": True,
                    "disable_overlap_schedule": True, "chunked_prefill_size": -1}),
    _hard("hard_defaults_5_8_64", "0.4.1", "0.4.4", "#2684 b0524c378", (5, 8, 64)),
    _hard("hard_defaults_5_4_8", "0.4.4", "0.4.5", "#3986 d3d4d7675", (5, 4, 8)),
    Rule("adaptive_unsupported", "--speculative-adaptive falls back to static", "0.5.14", None,
         "0.5.14 wheel: _maybe_disable_adaptive runs before _handle_eagle_family; SGLang 0.5.23 checked", "rewrite",
         "warning", _ADAPTIVE_OFF_MSG, "--speculative-adaptive with topk set and != 1, an algorithm other than "
         "EAGLE/EAGLE3, DP attention, multi-layer EAGLE, two-batch overlap or PDMux",
         "speculative_adaptive := False; the knobs resolve as without it", ("speculative_adaptive",),
         lambda c: c.adaptive and c.adaptive_unsupported(), lambda c: {"speculative_adaptive": False}),
    Rule("adaptive_chain", "--speculative-adaptive chain", "0.5.14", None,
         "#27493 3600a9ac5; _init_adaptive_speculative_params from the 0.5.14 wheel; SGLang 0.5.23 checked",
         "rewrite", "silent", None, "--speculative-adaptive (still on)",
         "topk := 1 if unset; steps := middle default candidate (3) if unset; ndt := steps + 1", KNOBS,
         lambda c: c.adaptive, lambda c: _adaptive_chain(c)),
    Rule("adaptive_steps_not_candidate", "adaptive steps must be a candidate", "0.5.14", None,
         "_init_adaptive_speculative_params (0.5.14 wheel); SGLang 0.5.23 checked", "reject", "error", None,
         "--speculative-adaptive with num_steps outside the default config's candidate_steps",
         "ValueError '--speculative-num-steps=N is not in the adaptive config candidate_steps [...]'",
         ("speculative_num_steps",),
         lambda c: c.adaptive and c.adaptive_candidates() is not None and c.steps not in c.adaptive_candidates(),
         lambda c: _rej("speculative_num_steps", c.steps, f"one of {list(c.adaptive_candidates())}",
                        "not in the adaptive config candidate_steps")),
    Rule("partial_knobs_assert", "set all three knobs or none", "0.4.5", None, "#4908 b26bc86b3 (auto-choose assert)",
         "reject", "error", None, "num_steps unset but topk or num_draft_tokens set, not adaptive",
         "AssertionError at startup", KNOBS,
         lambda c: c.steps is None and not c.adaptive_first and (c.topk, c.ndt) != (None, None),
         lambda c: _rej("speculative_num_steps", None, "set with topk and num_draft_tokens, or all three unset",
                        "speculative_eagle_topk / speculative_num_draft_tokens given without speculative_num_steps")),
    Rule("steps_without_topk", "topk unset with steps set", "0.4.5", None, "speculative_hook.py / v0.4.6 page check "
         "(analysis)", "reject", "error", None, "num_steps set, topk unset, not adaptive",
         "TypeError comparing None > 1", KNOBS,
         lambda c: c.steps is not None and c.topk is None and not c.adaptive_first,
         lambda c: _rej("speculative_eagle_topk", None, "an integer >= 1 (set all three knobs, or none)",
                        "speculative_num_steps is set but speculative_eagle_topk is not")),
    Rule("mtp_draft_path_default", "MTP draft path := target", "0.4.9", None, "#7643 78700893e (DeepSeek-V3); other "
         "architectures from the HEAD list", "default", "silent", None, "MTP architecture, no draft path",
         "speculative_draft_model_path := model_path", ("speculative_draft_model_path",),
         lambda c: c.arch_in(_MTP) and not c.s.get("speculative_draft_model_path"),
         lambda c: {"speculative_draft_model_path": c.s.get("model_path")}),
    Rule("mtp_draft_path_warning", "MTP ignores draft path", "0.4.9", None, "#7643 78700893e", "note", "warning",
         "DeepSeek MTP does not require setting speculative_draft_model_path.", "MTP architecture with a draft path",
         "warning only", ("speculative_draft_model_path",),
         lambda c: c.arch_in(_MTP) and bool(c.s.get("speculative_draft_model_path")), lambda c: {}),
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
    Rule("max_running_requests_32", "max_running_requests 32", "0.4.4", "0.4.5", "#3986 d3d4d7675", "default",
         "silent", None, "max_running_requests unset", "max_running_requests := 32", ("max_running_requests",),
         lambda c: c.s.get("max_running_requests") is None, lambda c: {"max_running_requests": 32}),
    Rule("max_running_requests_deepseek_v4", "DeepSeek-V4 hook 256", LATEST_TRACED, None, "issue #33199",
         "default", "silent", None, "DeepseekV4 target, max_running_requests unset",
         "model hook sets 256 first, so the reset to 48 never fires", ("max_running_requests",),
         lambda c: c.arch_in(("DeepseekV4",)) and c.s.get("max_running_requests") is None,
         lambda c: {"max_running_requests": 256}, traced=False),
    Rule("max_running_requests_48_silent", "max_running_requests 48 (silent)", "0.4.5", "0.5.4", "#4908 b26bc86b3",
         "default", "silent", None, "max_running_requests unset", "max_running_requests := 48",
         ("max_running_requests",), lambda c: c.s.get("max_running_requests") is None,
         lambda c: {"max_running_requests": 48}),
    Rule("max_running_requests_48", "max_running_requests 48", "0.5.4", None, "#11835 cbb5fc2ed (first warning)",
         "default", "warning", _MRR_MSG, "max_running_requests unset", "max_running_requests := 48",
         ("max_running_requests",), lambda c: c.s.get("max_running_requests") is None,
         lambda c: {"max_running_requests": 48}),
    Rule("mixed_chunk_off", "mixed chunked prefill off", "0.4.7", "0.5.19", "#6874 e1ce44cdb (2025-06-07); last in "
         "the 0.5.18 wheel", "rewrite", "warning",
         "Mixed chunked prefill is disabled because of using eagle speculative decoding.",
         "--enable-mixed-chunk", "enable_mixed_chunk := False", ("enable_mixed_chunk",),
         lambda c: bool(c.s.get("enable_mixed_chunk")), lambda c: {"enable_mixed_chunk": False}),
    Rule("mixed_chunk_off_standalone", "mixed chunked prefill off (STANDALONE only)", "0.5.19", None,
         "0.5.19 wheel: _handle_eagle_family asks SpeculativeAlgorithm.supports_mixed_chunk() (EAGLE, EAGLE3, DFLASH, "
         "DSPARK keep it); SGLang 0.5.23 checked", "rewrite", "warning",
         "Mixed chunked prefill is disabled: STANDALONE speculative decoding does not support it.",
         "--enable-mixed-chunk with STANDALONE", "enable_mixed_chunk := False", ("enable_mixed_chunk",),
         lambda c: bool(c.s.get("enable_mixed_chunk")), lambda c: {"enable_mixed_chunk": False},
         algos=("STANDALONE",)),
    Rule("page_size_topk_to_1_info", "page>1 forces topk 1", "0.4.5", "0.4.6", "#4908 b26bc86b3", "rewrite", "info",
         "speculative_eagle_topk is changed to 1 when page_size > 1", "topk > 1 and page_size > 1",
         "speculative_eagle_topk := 1", ("speculative_eagle_topk",), lambda c: (c.topk or 0) > 1 and c.page > 1,
         lambda c: {"speculative_eagle_topk": 1}),
    Rule("page_size_topk_to_1", "page>1 forces topk 1", "0.4.6", "0.4.9", "#5318 188f0955f; removed by #7643",
         "rewrite", "warning", "speculative_eagle_topk is adjusted to 1 when page_size > 1",
         "topk > 1 and page_size > 1", "speculative_eagle_topk := 1", ("speculative_eagle_topk",),
         lambda c: (c.topk or 0) > 1 and c.page > 1, lambda c: {"speculative_eagle_topk": 1}),
    Rule("trtllm_mha_topk1", "trtllm_mha needs topk 1", "0.5.1", None, "#9331 9ec314c6a (2025-08-21)", "reject",
         "error", "trtllm_mha backend only supports topk = 1 for speculative decoding.",
         "trtllm_mha backend and topk > 1", "ValueError", ("speculative_eagle_topk",),
         lambda c: "trtllm_mha" in c.backends() and (c.topk or 0) > 1,
         lambda c: _rej("speculative_eagle_topk", c.topk, "1 with the trtllm_mha backend",
                        "trtllm_mha backend only supports topk = 1 for speculative decoding")),
    Rule("rejection_sampling_constraints", "rejection sampling constraints", "0.5.13", None, "#26312 (2026-05-25)",
         "reject", "error", None, "--speculative-use-rejection-sampling with topk != 1, thresholds != 1.0, "
         "deterministic inference or a non-EAGLE algorithm", "ValueError", ("speculative_use_rejection_sampling",),
         lambda c: bool(c.s.get("speculative_use_rejection_sampling")) and (
             c.algo not in ("EAGLE", "EAGLE3") or c.topk != 1 or bool(c.s.get("enable_deterministic_inference"))
             or c.s.get("speculative_accept_threshold_single", 1.0) != 1.0
             or c.s.get("speculative_accept_threshold_acc", 1.0) != 1.0),
         lambda c: _rej("speculative_use_rejection_sampling", True, "EAGLE/EAGLE3, topk 1, both thresholds 1.0, no "
                        "deterministic inference", "rejection sampling needs a lossless topk-1 chain")),
    Rule("topk1_ndt", "topk=1 rule", "0.4.6", None, "#5318 188f0955f (2025-04-20, info); warning since #5769",
         "rewrite", "warning", _TOPK1_MSG, "topk == 1 and num_draft_tokens != num_steps + 1",
         "speculative_num_draft_tokens := speculative_num_steps + 1", ("speculative_num_draft_tokens",),
         lambda c: c.topk == 1 and c.steps is not None and c.ndt != c.steps + 1,
         lambda c: {"speculative_num_draft_tokens": c.steps + 1}),
    Rule("adaptive_unsupported_0513", "--speculative-adaptive falls back to static", "0.5.13", "0.5.14",
         "0.5.13 wheel: _maybe_disable_adaptive runs after _handle_eagle_family (its auto-choice included)",
         "rewrite", "warning", _ADAPTIVE_OFF_MSG, "--speculative-adaptive and the resolved topk != 1, an algorithm "
         "other than EAGLE/EAGLE3, DP attention, multi-layer EAGLE, two-batch overlap or PDMux",
         "speculative_adaptive := False", ("speculative_adaptive",),
         lambda c: c.adaptive and (c.topk != 1 or c.adaptive_unsupported()),
         lambda c: {"speculative_adaptive": False}),
    Rule("adaptive_steps_not_candidate_0513", "adaptive steps must be a candidate", "0.5.13", "0.5.14",
         "validate_adaptive_initial_steps (0.5.13 wheel)", "reject", "error", None,
         "--speculative-adaptive on a chain whose num_steps is not in (1, 3, 7)", "ValueError",
         ("speculative_num_steps",),
         lambda c: c.adaptive and c.adaptive_candidates() is not None and c.steps not in c.adaptive_candidates(),
         lambda c: _rej("speculative_num_steps", c.steps, f"one of {list(c.adaptive_candidates())}",
                        "not in the adaptive config candidate_steps")),
    Rule("page_tree_flashinfer_only", "topk>1 & page>1 needs flashinfer", "0.5.2", "0.5.13",
         "#9784 a23c30205 (2025-08-29); widened to fa3 at a version not traced", "reject", "error", None,
         "topk > 1, page_size > 1, attention_backend set and not flashinfer", "ValueError", ("speculative_eagle_topk",),
         lambda c: (c.topk or 0) > 1 and c.page > 1 and bool(c.s.get("attention_backend"))
         and c.s.get("attention_backend") not in ("flashinfer",),
         lambda c: _rej("speculative_eagle_topk", c.topk, "1 when page_size > 1, or attention_backend flashinfer",
                        f"speculative_eagle_topk > 1 with page_size {c.page} on {c.s.get('attention_backend')}")),
    Rule("page_tree_backends", "topk>1 & page>1 backends", "0.5.13", None, "#26972 84ca0ffb8 (2026-06-06); the check "
         "reads the resolved backend (0.5.13 wheel; SGLang 0.5.23 run on --device cpu)", "reject", "error", None,
         "topk > 1, page_size > 1 and the backend SGLang ends up with is not flashinfer/fa3/triton: the one given, "
         "or on --device cpu the CPU default (intel_amx, torch_native without AMX); a CUDA GPU's default for a tree "
         "(flashinfer or triton) passes", "ValueError", ("speculative_eagle_topk",),
         lambda c: (c.topk or 0) > 1 and c.page > 1 and _tree_backend(c) not in (None, "flashinfer", "fa3", "triton"),
         lambda c: _rej("speculative_eagle_topk", c.topk, "1 when page_size > 1, or a flashinfer/fa3/triton backend",
                        f"speculative_eagle_topk > 1 with page_size {c.page} on {_tree_backend(c)}")),
    Rule("overlap_off_v1", "overlap scheduler off", "0.4.4", "0.5.4", "#3986 era server_args.py (spec v1)",
         "rewrite", "not traced", None, "EAGLE family", "disable_overlap_schedule := True",
         ("disable_overlap_schedule",), lambda c: not c.s.get("disable_overlap_schedule"),
         lambda c: {"disable_overlap_schedule": True}),
    Rule("overlap_off_without_spec_v2", "overlap off without SGLANG_ENABLE_SPEC_V2", "0.5.4", "0.5.11",
         "#12113 8491c794a (2025-10-26)", "rewrite", "warning",
         "Overlap scheduler is disabled because of using eagle3 or standalone speculative decoding.",
         "SGLANG_ENABLE_SPEC_V2 not set", "disable_overlap_schedule := True", ("disable_overlap_schedule",),
         lambda c: not c.s.get("disable_overlap_schedule")
         and str(c.env.get("SGLANG_ENABLE_SPEC_V2", "")).lower() not in ("1", "true", "yes", "on"),
         lambda c: {"disable_overlap_schedule": True}),
    Rule("spec_v1_for_tree", "topk>1 runs spec v1 (no overlap)", "0.5.11", "0.5.13", "#21062 79dbfe450 (2026-04-30)",
         "rewrite", "warning", None, "topk > 1", "disable_overlap_schedule := True (spec v2 supports topk = 1 only)",
         ("disable_overlap_schedule",), lambda c: (c.topk or 0) > 1 and not c.s.get("disable_overlap_schedule"),
         lambda c: {"disable_overlap_schedule": True}),
    Rule("spec_v2_env_removed", "SGLANG_ENABLE_SPEC_V2 removed", "0.5.13", None, "#27964 c0480a88b (2026-06-11)",
         "note", "warning", None, "SGLANG_ENABLE_SPEC_V2 set", "warning 'has been removed'; no effect",
         ("disable_overlap_schedule",), lambda c: "SGLANG_ENABLE_SPEC_V2" in c.env, lambda c: {}),
    Rule("sync_spec_v2", "non-overlap spec v2", "0.5.13", None, "speculative_hook.py::_handle_eagle_family", "note",
         "warning", "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.",
         "disable_overlap_schedule", "synchronous v2 worker", ("disable_overlap_schedule",),
         lambda c: bool(c.s.get("disable_overlap_schedule")), lambda c: {}),
    Rule("cpu_overlap_off", "CPU disables overlap", LATEST_TRACED, None, "speculative_hook.py::"
         "_disable_overlap_schedule_for_cpu", "rewrite", "not traced", None, "device cpu",
         "disable_overlap_schedule := True", ("disable_overlap_schedule",),
         lambda c: c.s.get("device") == "cpu" and not c.s.get("disable_overlap_schedule"),
         lambda c: {"disable_overlap_schedule": True}, traced=False),
    Rule("draft_quant_inherits", "draft quantization inherits target", "0.5.12", None, "server_args.py ~l.3376; "
         "already in the 0.5.12 wheel", "default", "silent", None, "--quantization set, draft quantization unset",
         "speculative_draft_model_quantization := quantization ('unquant' opts out)",
         ("speculative_draft_model_quantization",),
         lambda c: bool(c.s.get("quantization")) and c.s.get("speculative_draft_model_quantization") is None,
         lambda c: {"speculative_draft_model_quantization": c.s.get("quantization")}, traced=False),
    Rule("draft_unquant_is_none", "draft 'unquant' means no quantization", "0.5.12", None,
         "_handle_missing_default_values (0.5.12-0.5.22 wheels); SGLang 0.5.23 run", "rewrite", "silent", None,
         "--speculative-draft-model-quantization unquant", "speculative_draft_model_quantization := None",
         ("speculative_draft_model_quantization",),
         lambda c: c.s.get("speculative_draft_model_quantization") == "unquant",
         lambda c: {"speculative_draft_model_quantization": None}, traced=False),
    Rule("tensor_dump_disables_graphs", "tensor dump disables CUDA graphs", "0.4.4", "0.5.14", "#3988 (2025-03-03); "
         "last in the 0.5.13 wheel", "rewrite", "warning", _DUMP_MSG, "--debug-tensor-dump-output-folder",
         "disable_cuda_graph, skip_server_warmup := True",
         ("disable_cuda_graph", "skip_server_warmup"), lambda c: bool(c.s.get("debug_tensor_dump_output_folder")),
         lambda c: {"disable_cuda_graph": True, "skip_server_warmup": True}, algos=()),
    Rule("tensor_dump_disables_graph_backends", "tensor dump disables CUDA graphs", "0.5.14", None,
         "0.5.14 wheel (cuda_graph_config phases); SGLang 0.5.23 run", "rewrite", "warning", _DUMP_MSG,
         "--debug-tensor-dump-output-folder",
         "cuda_graph_config decode and prefill backend := disabled (disable_cuda_graph is left alone); "
         "skip_server_warmup := True", ("cuda_graph_config", "skip_server_warmup"),
         lambda c: bool(c.s.get("debug_tensor_dump_output_folder")), lambda c: {"skip_server_warmup": True},
         algos=()),
    Rule("cuda_graph_bs_clipped", "graph batch sizes follow max_running_requests", "0.5.1", None,
         "cuda_graph_runner.get_batch_sizes_to_capture (v0.5.1)", "note", "silent", None,
         "cuda_graph_max_bs (_decode from 0.5.14) > max_running_requests",
         "batches above max_running_requests are never captured", ("cuda_graph_max_bs",),
         lambda c: _graph_max_bs(c) > (c.s.get("max_running_requests") or 10 ** 9), lambda c: {}),
    Rule("mem_reserve_draft", "memory heuristic reserves draft room", "0.5.3", "0.5.7", "#10975 a17e70f5c",
         "note", "silent", None, "mem_fraction_static unset",
         "the auto mem_fraction_static reserves +2 GB (+6 GB for STANDALONE)", ("mem_fraction_static",),
         lambda c: c.s.get("mem_fraction_static") is None, lambda c: {}),
    Rule("attn_backend_by_shape", "default backend depends on topk", "0.5.4", None, "#12136 (2025-10-25), #14291",
         "note", "silent", None, "attention_backend unset",
         "Hopper: fa3 only when topk == 1 and page 1, else flashinfer; SM100: trtllm_mha only when topk == 1",
         ("attention_backend",), lambda c: not c.s.get("attention_backend"), lambda c: {}),
)


def parse_version(version: str | Version) -> Version:
    """An SGLang version string (``0.5.3.post3``, ``v0.5.6``, ``head``) as a comparable Version."""
    if isinstance(version, Version):
        return version
    text = str(version).strip().lstrip("vV")
    if text.lower() in ("head", "latest", "main"):
        text = LATEST_TRACED
    try:
        return Version(text)
    except InvalidVersion:
        raise ServingArgsError("SGLang version", "cannot be read as a version", expected="e.g. 0.5.6 or 0.4.6.post1",
                               found=repr(version)[:60]) from None
