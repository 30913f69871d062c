"""How vLLM's launch decides the serving causes a launch command can decide (`RULES`: cause -> rule(la, where,
version=None) -> Finding), read from its top-level flags and `--speculative-config`; the checks
(`checks.launch_flags`, `checks.draft_serving`, `checks.draft_feed`) ask the launch's home for the rule and never
branch on the engine's name. Each rule cites the "serving" row of `engines.facts` (or the metric row) it rests on.
An engine default alone never raises a cause (prefix caching and async scheduling are on by default: what decides
them is the served accept length).
    RULES["async_scheduling"](la, "checks.launch_flags.async_scheduling") -> Finding("async_scheduling", ...)
"""
from __future__ import annotations

from ..causes import Finding
from ..engine_kit.flag_values import garbled, integer, spec_config, switch
from ..engine_kit.launch_evidence import LaunchEvidence
from ..engine_kit.launch_reading import LaunchArgs
from ..engines.facts import fact, reads
from .method import vllm_effective

NEEDS_OVER_TIME = ("served accept lengths over time (served_log_path) against the replay: a decay over hours that "
                   "a restart resets points at stale prefix-cache KV")
NEEDS_ASYNC = "served accept length with async scheduling off against on (same traffic)"
NEEDS_PD = "served accept length by prompt length against a colocated (non-disaggregated) deployment"
NEEDS_SAMPLED = ("served accept lengths at temperature 0 and at the served temperature (greedy vs sampled), and the "
                 "vLLM model runner (VLLM_USE_V2_MODEL_RUNNER, or the startup log)")
SCHEDULE_KEYS = ("num_speculative_tokens_per_batch_size", "draft_len_schedule")   # K picked per batch size
SYNTHETIC_KEYS = ("synthetic_acceptance_rates", "synthetic_acceptance_length", "synthetic_acceptance_rate")


def speculating(la: LaunchArgs) -> bool | None:
    """vLLM speculates with a --speculative-config that names a method or a draft model (None: it cannot be read)."""
    spec, bad = spec_config(la)
    return None if bad else bool(spec.get("method") or spec.get("model"))


def _unreadable(c: str, w: str, bad: str) -> Finding:
    """A cause --speculative-config decides, not checked: the config is not a JSON object (`bad` says what it is)."""
    return Finding(c, "not checked", f"not checked: {bad}", {}, w, needs="--speculative-config as a JSON object")


def _prefix_cache(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, race = "prefix_cache_stale_kv", fact("vllm", "serving", "prefix_cache_stale_kv")
    on, bad = switch(la, "enable_prefix_caching")
    if bad:
        return garbled(c, w, bad)
    if on is False:
        return Finding(c, "ruled out", "--no-enable-prefix-caching: no request reuses another's KV blocks",
                       {"prefix_caching": "off"}, w)
    spec, bad = spec_config(la)
    if bad:
        return garbled(c, w, bad)
    ev = {"prefix_caching": "on (--enable-prefix-caching)" if on else "on (vLLM default)",
          "disable_eagle_block_drop": spec.get("disable_eagle_block_drop")}
    if spec.get("disable_eagle_block_drop") is True:
        f = fact("vllm", "serving", "eagle_block_drop_off_reuses_draft_kv")
        return Finding(c, "suspected", f.note, ev, w,
                       fix="drop disable_eagle_block_drop, or compare served accept lengths with it on and off",
                       needs=NEEDS_OVER_TIME, source=f.source)
    return Finding(c, "not checked", "not checked: prefix caching is on, which by itself shows nothing; "
                   + race.note, ev, w, needs=NEEDS_OVER_TIME, source=race.source)


def _dp_attention(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "dp_attention"
    dp, bad = integer(la, "data_parallel_size")
    if bad:
        return garbled(c, w, bad)
    ev = {"data_parallel_size": dp, "tensor_parallel_size": la.flags.get("tensor_parallel_size")}
    if dp is not None and dp > 1:
        return Finding(c, "not checked", f"not checked: data_parallel_size {dp}; the accept-length loss under DP "
                       "was reported on SGLang (sglang#16274) and tokenspeed (#298), no vLLM thread", ev, w,
                       needs="served accept length at data_parallel_size 1 against the served one",
                       source="sglang#16274; tokenspeed#298")
    return Finding(c, "ruled out", "no data parallelism (data_parallel_size 1 or unset): no DP group around the draft",
                   ev, w)


def _hicache(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, kt = "hicache_draft_kv", la.flags.get("kv_transfer_config")
    conn = str(kt.get("kv_connector", "")) if isinstance(kt, dict) else ""
    ev = {"engine": la.engine, "kv_transfer_config": kt}
    if any(k in conn.lower() for k in ("offload", "lmcache")):
        return Finding(c, "not checked", f"not checked: {conn} loads KV back from outside the GPU; the draft "
                       "KV missing on loadback was reported on SGLang's HiCache, no vLLM thread", ev, w,
                       needs="served accept lengths over time (served_log_path) against the replay",
                       source="sglang#32176")
    return Finding(c, "ruled out", "HiCache is SGLang's and the launch names no KV-offloading connector: no KV "
                   "is loaded back from host memory", ev, w)


def _pd(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, src = "pd_disaggregation", fact("sglang", "serving", "pd_transfers_draft_state").source
    kt = la.flags.get("kv_transfer_config")
    ev = {"kv_transfer_config": kt}
    if kt is None:
        return Finding(c, "ruled out", "no --kv-transfer-config: prefill and decode run in one vLLM engine", ev, w)
    if not isinstance(kt, dict):
        return garbled(c, w, f"--kv-transfer-config is not a JSON object ({str(kt)[:60]!r})")
    return Finding(c, "not checked", f"not checked: a KV connector ({kt.get('kv_connector')}, role "
                   f"{kt.get('kv_role')}) moves the target's KV between engines; the lost draft state was reported "
                   "on SGLang, TRT-LLM and ATOM, no vLLM thread", ev, w, needs=NEEDS_PD, source=src)


def _async_scheduling(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, cost = "async_scheduling", fact("vllm", "serving", "async_scheduling_costs_acceptance")
    src = f"{cost.source}; vllm-ascend PR#8230"
    on, bad = switch(la, "async_scheduling")
    if bad:
        return garbled(c, w, bad)
    ev = {"async_scheduling": on}
    if on is False:
        return Finding(c, "ruled out", "--no-async-scheduling: each step is scheduled after the previous one's "
                       "accepted tokens are known", ev, w)
    if on:
        return Finding(c, "suspected", f"{cost.note} ({cost.source})", ev, w,
                       fix="compare the served accept length with --no-async-scheduling", needs=NEEDS_ASYNC, source=src)
    f = fact("vllm", "serving", "async_scheduling_default")
    return Finding(c, "not checked", f"not checked: async scheduling is left to vLLM's default (on for EAGLE in "
                   f"{f.since}, the release read: {f.source}); a default alone is not evidence", ev, w,
                   needs=NEEDS_ASYNC, source=f"{src}; {f.source}")


def _rejection(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "rejection_method"
    spec, bad = spec_config(la)
    if bad:
        return _unreadable(c, w, bad)
    method = spec.get("rejection_sample_method")
    ev = {"rejection_sample_method": method, "VLLM_USE_V2_MODEL_RUNNER": la.env.get("VLLM_USE_V2_MODEL_RUNNER"),
          **{k: spec[k] for k in SYNTHETIC_KEYS + ("draft_sample_method",) if k in spec}}
    strict = fact("vllm", "serving", "rejection_strict")
    if method == "synthetic":
        f = fact("vllm", "serving", "rejection_synthetic")
        return Finding(c, "confirmed", f.note, ev, w, fix="use rejection_sample_method standard when measuring the "
                       "draft", source=f.source)
    if method == "strict":
        return Finding(c, "suspected", f"{strict.note} ({strict.source})", ev, w,
                       fix="rejection_sample_method standard (probabilistic)", needs=NEEDS_SAMPLED,
                       source=strict.source)
    if method in ("standard", "probabilistic"):
        return Finding(c, "ruled out", f"rejection_sample_method {method}: probabilistic rejection sampling, set "
                       "explicitly", ev, w, source=strict.source)
    if method == "fly":
        return Finding(c, "ruled out", "rejection_sample_method fly, set explicitly (its lossy acceptance is reported "
                       "as adaptive_depth)", ev, w)
    if method is not None:
        return Finding(c, "not checked", f"not checked: rejection_sample_method {method!r} is none of standard / "
                       "strict / synthetic / fly", ev, w, needs="a rejection_sample_method this workbook knows")
    return Finding(c, "not checked", "not checked: the launch leaves the rejection-sampling method to the vLLM "
                   "version and model runner", ev, w, needs=NEEDS_SAMPLED,
                   source=fact("vllm", "serving", "rejection_method_default").source)


def _depth(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "adaptive_depth"
    spec, bad = spec_config(la)
    if bad:
        return _unreadable(c, w, bad)
    ev = {"rejection_sample_method": spec.get("rejection_sample_method"),
          "num_speculative_tokens": spec.get("num_speculative_tokens")}
    if spec.get("rejection_sample_method") == "fly":
        f = fact("vllm", "serving", "rejection_fly_lossy")
        return Finding(c, "confirmed", f.note, ev, w, fix="measure with rejection_sample_method standard",
                       source=f.source)
    k = spec.get("num_speculative_tokens", "as the engine sets it")
    return Finding(c, "ruled out", f"fixed depth (num_speculative_tokens {k}), no lossy verification method", ev, w)


def _greedy_platform(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c, f = "greedy_verify_platform", fact("sglang", "serving", "sampled_verify_off_cuda")
    return Finding(c, "not checked", "not checked: vLLM takes its platform from the build, not the launch; the "
                   "greedy verify was reported on SGLang", {"engine": la.engine, "device": la.flags.get("device")}, w,
                   needs="the platform (the vLLM build) and served outputs at temperature > 0 against temperature 0 "
                         "(identical or looping outputs mean a greedy verify)", source=f.source)


def _k_meaning(la: LaunchArgs, w: str, version: str | None = None) -> Finding:
    c = "k_meaning"
    spec, bad = spec_config(la)
    if bad:
        return _unreadable(c, w, bad)
    k = spec.get("num_speculative_tokens")
    ev = {"num_speculative_tokens": k, "engine_version": version}
    f = fact("vllm", "metric", "mean_acceptance_length_counts_bonus")
    if not version:
        return Finding(c, "not checked", f"not checked: K = num_speculative_tokens ({k}); vLLM's mean acceptance "
                       f"length left out the bonus token in {f.since} (2025-04-24 to 2025-05-09), so the version "
                       "decides what the served number means", ev, w, needs="the vLLM version", source=f.source)
    counts = reads("vllm", "metric", f.subject, version)   # False inside the window without the bonus
    if counts is None:
        return Finding(c, "not checked", f"not checked: vLLM version {version!r} cannot be placed against the "
                       f"{f.since} window", ev, w, needs="the vLLM version as a release number", source=f.source)
    if counts:
        return Finding(c, "ruled out", f"vLLM {version}: K = num_speculative_tokens ({k}) drafts per step; the mean "
                       "acceptance length counts the bonus token (τ, at most K + 1), as SGLang's accept len does",
                       ev, w, source=f.source)
    return Finding(c, "confirmed", f"vLLM {version}: its mean acceptance length left out the bonus token, so the "
                   "served number is τ - 1 against every other engine's τ", ev, w,
                   fix="add 1 to the served mean acceptance length, or recompute τ from the counters",
                   source=f.source)


def method_rule(la: LaunchArgs, eagle3: bool, ev: dict, w: str) -> Finding:
    """wrong_method as vLLM picks the method: --speculative-config's method, else what it infers from the draft's
    path (`method.vllm_effective`); `eagle3` whether the draft is an EAGLE-3 one, `ev` the check's evidence so far."""
    eff = vllm_effective(la)
    ev = {**ev, "method": eff["method"], "method_given": (la.speculative_config or {}).get("method"),
          "notes": eff["notes"]}
    src = fact("vllm", "method", "method inferred from the path").source
    want = "eagle3" if eagle3 else "eagle"
    if eff["method"] != want:
        return Finding("wrong_method", "confirmed", f"vLLM runs method {eff['method']!r} for an "
                       f"{'EAGLE-3' if eagle3 else 'EAGLE'} draft" + (" (inferred from the path)" if eff["notes"]
                                                                       else ""),
                       ev, w, fix=f"--speculative-config '{{\"method\": \"{want}\", ...}}'", source=src)
    if ev["method_given"] is None:
        return Finding("wrong_method", "suspected", f"no method given: vLLM infers {want!r} from the path, and "
                       "detection has overridden users before", ev, w, fix=f"give \"method\": \"{want}\" explicitly",
                       source=src)
    return Finding("wrong_method", "ruled out", f"method {want!r} given explicitly", ev, w, source=src)


def evidence(la: LaunchArgs) -> LaunchEvidence:
    """What vLLM's flags say of how the draft runs: graphs off with --enforce-eager or cudagraph_mode NONE; an
    external draft stays unquantized unless speculative_config.quantization (facts: draft_inherits_quantization) and
    keeps the target's KV dtype unless speculative_config.kv_cache_dtype; K per batch size from the speculative
    config (or a top-level flag of that name)."""
    off, bad_graphs = switch(la, "enforce_eager")
    cc = la.flags.get("compilation_config")
    if not off and isinstance(cc, dict) and str(cc.get("cudagraph_mode", "")).upper() == "NONE":
        off = True
    spec, bad_spec = spec_config(la)
    spec = spec or {}
    chunking, bad_chunking = switch(la, "enable_chunked_prefill")
    schedule = {k: spec.get(k, la.flags.get(k)) for k in SCHEDULE_KEYS}
    return LaunchEvidence(
        "vllm", graphs_off=bool(off), graphs="off (--enforce-eager / cudagraph_mode NONE)" if off else "on (default)",
        quantization=spec.get("quantization"), quantization_flag="speculative_config.quantization",
        kv_cache_dtype=spec.get("kv_cache_dtype"),
        k_schedule={k: v for k, v in schedule.items() if v not in (None, False, [], {})},
        chunking_off=None if chunking is None else not chunking,
        structured={"structured_outputs_config": la.flags.get("structured_outputs_config"),
                    "enable_auto_tool_choice": la.flags.get("enable_auto_tool_choice")},
        problems={k: v for k, v in (("graphs", bad_graphs), ("draft", bad_spec), ("chunking", bad_chunking)) if v})


RULES = {"prefix_cache_stale_kv": _prefix_cache, "dp_attention": _dp_attention, "hicache_draft_kv": _hicache,
         "pd_disaggregation": _pd, "async_scheduling": _async_scheduling, "rejection_method": _rejection,
         "adaptive_depth": _depth, "greedy_verify_platform": _greedy_platform, "k_meaning": _k_meaning}
