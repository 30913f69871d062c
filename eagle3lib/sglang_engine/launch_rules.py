"""How SGLang's launch decides the serving causes a launch command can decide (`RULES`: cause -> rule(la, where,
version=None) -> Finding), read from its flags and environment; the checks (`checks.launch_flags`,
`checks.draft_serving`, `checks.draft_feed`) ask the launch's home for the rule and never branch on the engine's
name. Each rule cites the "serving" row of `engines.facts` it rests on.
    RULES["dp_attention"](la, "checks.launch_flags.dp_attention") -> Finding("dp_attention", "ruled out", ...)
"""
from __future__ import annotations

from ..causes import Finding
from ..engine_kit.flag_values import garbled, integer, switch
from ..engine_kit.launch_evidence import LaunchEvidence
from ..engine_kit.launch_reading import LaunchArgs
from ..engines.facts import fact

NEEDS_OVER_TIME = ("served accept lengths over time (served_log_path) against the replay: a decay over hours that "
                   "a restart resets points at stale prefix-cache KV")
NEEDS_ASYNC = "served accept length with async scheduling off against on (same traffic)"
NEEDS_PD = "served accept length by prompt length against a colocated (non-disaggregated) deployment"
K_SOURCES = "ModelOpt PR#2313; tokenspeed PR#54; serving-and-throughput.md section 0"
OFF_CUDA = ("cpu", "npu", "xpu", "hpu", "rocm", "hip", "musa")      # platforms whose verify was greedy


def speculating(la: LaunchArgs) -> bool:
    """SGLang speculates only with --speculative-algorithm (a draft path alone serves nothing)."""
    return bool(la.algorithm)


def _prefix_cache(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, race = "prefix_cache_stale_kv", fact("vllm", "serving", "prefix_cache_stale_kv")
    off, bad = switch(la, "disable_radix_cache")
    if bad:
        return garbled(c, w, bad)
    if off:
        return Finding(c, "ruled out", "--disable-radix-cache: no request reuses another's KV", {"radix_cache":
                       "off"}, w)
    return Finding(c, "not checked", "not checked: SGLang's radix cache is on (its default); the stale-KV race "
                   f"was reported in vLLM's prefix cache ({race.source}), and only served accept lengths over "
                   "time show it", {"radix_cache": "on (default)"}, w, needs=NEEDS_OVER_TIME, source=race.source)


def _dp_attention(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "dp_attention"
    dpa, bad = switch(la, "enable_dp_attention")
    if bad:
        return garbled(c, w, bad)
    ev = {"enable_dp_attention": bool(dpa), "dp_size": la.flags.get("dp_size"), "tp_size": la.flags.get("tp_size"),
          "SGLANG_ENABLE_SPEC_V2": la.env.get("SGLANG_ENABLE_SPEC_V2")}
    if dpa:
        f = fact("sglang", "serving", "dp_attention_draft_extend")
        return Finding(c, "suspected", f"--enable-dp-attention with --speculative-algorithm {la.algorithm}: "
                       + f.note, ev, w,
                       fix="compare the served accept length without --enable-dp-attention (same TP), or use a "
                           "version with sglang PR#16310", needs="served accept length with and without DP "
                       "attention", source=f.source)
    return Finding(c, "ruled out", "the launch sets no --enable-dp-attention: the draft runs in the target's TP "
                   "group", ev, w)


def _hicache(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "hicache_draft_kv"
    on, bad = switch(la, "enable_hierarchical_cache")
    if bad:
        return garbled(c, w, bad)
    ev = {"enable_hierarchical_cache": bool(on), "hicache_ratio": la.flags.get("hicache_ratio"),
          "hicache_storage_backend": la.flags.get("hicache_storage_backend")}
    if not on:
        return Finding(c, "ruled out", "the launch sets no --enable-hierarchical-cache: no KV is loaded back from "
                       "host memory", ev, w)
    f = fact("sglang", "serving", "hicache_restores_draft_kv")
    return Finding(c, "suspected", f"--enable-hierarchical-cache with --speculative-algorithm {la.algorithm}: "
                   "HiCache loadback restored the target's KV but not the draft's KV (nor DSA index buffers), a "
                   "silent collapse over hours (AL 4.49 -> 1.59) that /flush_cache resets; the fixing release is "
                   "not placed", ev, w, fix="compare the served accept length before and after POST /flush_cache, "
                   "or serve without --enable-hierarchical-cache", needs="served accept lengths over time "
                   "(served_log_path) and the SGLang version", source=f.source)


def _pd(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, src = "pd_disaggregation", fact("sglang", "serving", "pd_transfers_draft_state").source
    mode = la.flags.get("disaggregation_mode")
    ev = {"disaggregation_mode": mode}
    if mode in (None, "null", "none", ""):
        return Finding(c, "ruled out", "no --disaggregation-mode: prefill and decode run in one server, the "
                       "draft's state never crosses workers", ev, w)
    return Finding(c, "suspected", f"--disaggregation-mode {mode}: the draft's KV / hidden states are not handed "
                   "from the prefill to the decode worker the way the target's KV is (AL -4% on short prompts, "
                   "-13% at 1K, about -25% at 30K)", ev, w, fix="compare with a colocated server on the same "
                   "prompts, by prompt length", needs=NEEDS_PD, source=src)


def _async_scheduling(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, cost = "async_scheduling", fact("vllm", "serving", "async_scheduling_costs_acceptance")
    off, bad = switch(la, "disable_overlap_schedule")
    if bad:
        return garbled(c, w, bad)
    ev = {"disable_overlap_schedule": off, "SGLANG_ENABLE_SPEC_V2": la.env.get("SGLANG_ENABLE_SPEC_V2")}
    if off:
        return Finding(c, "ruled out", "--disable-overlap-schedule: SGLang schedules each step after the last", ev, w)
    return Finding(c, "not checked", "not checked: SGLang's overlap scheduler (spec v2) is on by default; the "
                   "acceptance loss of async scheduling was measured on vLLM", ev, w, needs=NEEDS_ASYNC,
                   source=f"{cost.source}; vllm-ascend PR#8230")


def _rejection(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, sim = "rejection_method", la.env.get("SGLANG_SIMULATE_ACC_LEN")
    ev = {"engine": "sglang", "SGLANG_SIMULATE_ACC_LEN": sim}
    if sim not in (None, ""):
        try:
            val = float(sim)
        except ValueError:
            return Finding(c, "not checked", f"not checked: SGLANG_SIMULATE_ACC_LEN={sim!r} is not a number", ev,
                           w, needs="the launch's SGLANG_SIMULATE_ACC_LEN as a number (or unset)")
        if val > 0:
            f = fact("sglang", "serving", "simulated_acceptance_env")
            return Finding(c, "confirmed", f"SGLANG_SIMULATE_ACC_LEN={sim}: {f.note}", ev, w,
                           fix="unset SGLANG_SIMULATE_ACC_LEN before measuring the draft",
                           source=f"{f.source}; ROCm/ATOM#555")
    return Finding(c, "ruled out", "SGLang launch without simulated acceptance: accepted tokens are verified "
                   "against the target (the vLLM runners' strict / probabilistic choice does not apply)", ev, w)


def _depth(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "adaptive_depth"
    on, bad = switch(la, "speculative_adaptive")
    ev = {"speculative_adaptive": on, "speculative_adaptive_config": la.flags.get("speculative_adaptive_config"),
          "speculative_num_steps": la.num_steps}
    if bad:
        return Finding(c, "not checked", f"not checked: {bad}", ev, w,
                       needs="the launch command with a valid value (--speculative-adaptive)")
    if on:
        f = fact("sglang", "serving", "adaptive_num_steps")
        return Finding(c, "suspected", f.note, ev, w, fix="compare accept lengths with --speculative-adaptive off "
                       "(a fixed --speculative-num-steps)", source=f.source)
    steps = la.num_steps if la.num_steps is not None else "as the engine sets it"
    return Finding(c, "ruled out", f"fixed depth (speculative_num_steps {steps}), no adaptive steps", ev, w)


def _greedy_platform(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, device = "greedy_verify_platform", la.flags.get("device")
    f = fact("sglang", "serving", "sampled_verify_off_cuda")
    needs = ("served outputs at temperature > 0 against temperature 0 (identical or looping outputs mean a greedy "
             "verify) and the SGLang version")
    ev = {"engine": la.engine, "device": device}
    if device is None:
        return Finding(c, "not checked", "not checked: no --device (SGLang's default is cuda, which ROCm builds "
                       "also report); the verify step was greedy on ROCm / CPU / NPU / XPU", ev, w, needs=needs,
                       source=f.source)
    if str(device).lower() in OFF_CUDA:
        return Finding(c, "suspected", f"--device {device}: SGLang's verify step was silently greedy off CUDA "
                       "(temperature ignored, looping output); the fixing release is not placed", ev, w,
                       fix="compare served outputs at temperature 0 and > 0", needs=needs, source=f.source)
    return Finding(c, "ruled out", f"--device {device}: the greedy verify was reported off CUDA only", ev, w)


def _k_meaning(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "k_meaning"
    steps, topk, ndt = la.num_steps, la.topk, la.num_draft_tokens
    ev = {"speculative_num_steps": steps, "speculative_eagle_topk": topk, "speculative_num_draft_tokens": ndt}
    if topk == 1 and steps is not None and ndt is not None and ndt == steps:
        return Finding(c, "suspected", f"--speculative-num-draft-tokens {ndt} equals --speculative-num-steps: "
                       "the launch reads NDT as K, but SGLang counts the root in NDT (K drafts = NDT - 1, "
                       "vLLM's K); at topk 1 SGLang rewrites NDT to steps + 1 (see ndt_override)", ev, w,
                       fix=f"compare with vLLM K = {steps} as --speculative-num-steps {steps}, "
                           f"--speculative-num-draft-tokens {steps + 1}", source=K_SOURCES)
    return Finding(c, "ruled out", "SGLang's K is --speculative-num-steps"
                   + (f" ({steps})" if steps is not None else "") + "; its accept len counts the bonus token "
                   "(τ, like vLLM's mean acceptance length): compare it with vLLM at K = num_steps", ev, w,
                   source=K_SOURCES)


def method_rule(la: LaunchArgs, eagle3: bool, ev: dict, w: str) -> Finding:
    """wrong_method as SGLang picks the method: --speculative-algorithm, which must be EAGLE3 for an EAGLE-3 draft
    (EAGLE skips its fc over aux states); `eagle3` whether the draft is one, `ev` the check's evidence so far."""
    algo = (la.algorithm or "").upper()
    ev = {**ev, "speculative_algorithm": la.algorithm}
    src = fact("sglang", "method", "EAGLE with an EAGLE-3 draft").source
    if not algo:
        return Finding("wrong_method", "confirmed", "the launch command sets no --speculative-algorithm: the "
                       "server runs without speculation", ev, w, fix="--speculative-algorithm EAGLE3")
    if eagle3 and algo != "EAGLE3":
        return Finding("wrong_method", "confirmed", f"--speculative-algorithm {la.algorithm} with an EAGLE-3 "
                       "draft: the fc over aux states is skipped (accept length exactly 1.0, no warning)", ev, w,
                       fix="--speculative-algorithm EAGLE3", source=src)
    return Finding("wrong_method", "ruled out", f"--speculative-algorithm {la.algorithm} fits the draft", ev, w)


def evidence(la: LaunchArgs) -> LaunchEvidence:
    """What SGLang's flags say of how the draft runs: every worker gets the same ServerArgs, so the draft inherits
    --quantization unless --speculative-draft-model-quantization says otherwise (facts: draft_inherits_quantization);
    a --chunked-prefill-size of 0 or less turns chunking off."""
    off, bad_graphs = switch(la, "disable_cuda_graph")
    size, bad_size = integer(la, "chunked_prefill_size")
    grammar = la.flags.get("grammar_backend")
    return LaunchEvidence(
        "sglang", graphs_off=bool(off), graphs="off (--disable-cuda-graph)" if off else "on (default)",
        quantization=la.flags.get("speculative_draft_model_quantization"),
        quantization_flag="--speculative-draft-model-quantization", inherited_quantization=la.flags.get("quantization"),
        inherited_flag="--quantization",
        chunking_off=None if size is None else size <= 0,
        grammar_off=isinstance(grammar, str) and grammar.lower() == "none",
        structured={"grammar_backend": grammar, "disaggregation_mode": la.flags.get("disaggregation_mode")},
        problems={k: v for k, v in (("graphs", bad_graphs), ("chunking", bad_size)) if v})


RULES = {"prefix_cache_stale_kv": _prefix_cache, "dp_attention": _dp_attention, "hicache_draft_kv": _hicache,
         "pd_disaggregation": _pd, "async_scheduling": _async_scheduling, "rejection_method": _rejection,
         "adaptive_depth": _depth, "greedy_verify_platform": _greedy_platform, "k_meaning": _k_meaning}
