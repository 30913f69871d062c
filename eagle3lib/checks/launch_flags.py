"""Check 10, serving features around the draft, from the launch command (SGLang flags and env; vLLM top-level
flags and `--speculative-config`): prefix caching, DP attention / DP groups, LoRA adapters on the target,
structured output, the chunked-prefill boundary, a multimodal-RoPE target in draft-extend, whether the
deployment is TRT-LLM's at all; and the topology around the draft: SGLang's hierarchical cache, prefill/decode
disaggregation, async scheduling, sequence parallelism.

Causes: prefix_cache_stale_kv, dp_attention, lora_target, structured_output, chunked_prefill_boundary,
mrope_draft_extend (an mRoPE target), trtllm_acceptance_gate, hicache_draft_kv, pd_disaggregation,
async_scheduling, sequence_parallel. An engine default alone never raises a cause (vLLM's prefix caching and
async scheduling are on by default: what decides them is the served accept length).
Rests on the "serving" rows of `engines.facts` (facts_serving), which it cites: vLLM prefix_cache_stale_kv,
eagle_block_drop_off_reuses_draft_kv, grammar_with_drafts, async_scheduling_costs_acceptance,
async_scheduling_default; SGLang dp_attention_draft_extend, lora_adapts_draft, grammar_with_drafts,
chunk_boundary_rotation, mrope_draft_extend_per_request, hicache_restores_draft_kv, pd_transfers_draft_state.
Threads of other projects stay cited inline: tokenspeed#298 (DP), vllm-ascend PR#8230 (async scheduling),
vllm-ascend#5825 (sequence parallelism).
Usage: ``check_launch_flags(art)``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..engines import facts
from ..engines.versions import SERVING_ENGINES
from ..engine_kit.launch_reading import LaunchArgs
from .context import served_prompt_lengths
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.launch_flags"
NEEDS_OVER_TIME = ("served accept lengths over time (served_log_path) against the replay: a decay over hours that "
                   "a restart resets points at stale prefix-cache KV")
NEEDS_REQUESTS = ("the served requests' structured-output options (response_format / json_schema / regex / "
                  "tool_choice) and the server log (engine deaths, aborted requests)")


def flag(field_name: str) -> str:
    """The command-line spelling of a LaunchArgs field (``enable_lora`` -> ``--enable-lora``)."""
    return "--" + field_name.replace("_", "-")


def switch(la: LaunchArgs, name: str) -> tuple[bool | None, str | None]:
    """(value, problem) of a switch: True / False / None when absent; a sentence naming the flag when the command
    gave it a value that is not true/false (parse_launch keeps such a value as a string and notes it)."""
    v = la.flags.get(name)
    if v is None or isinstance(v, bool):
        return v, None
    return None, f"{flag(name)} has the value {v!r}, not a switch (true/false)"


def integer(la: LaunchArgs, name: str) -> tuple[int | None, str | None]:
    """(value, problem) of an integer flag, like `switch`."""
    v = la.flags.get(name)
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v, None
    return None, f"{flag(name)} has the value {v!r}, not an integer"


def spec_config(la: LaunchArgs) -> tuple[dict | None, str | None]:
    """(vLLM --speculative-config as a dict ({} when absent), problem naming the flag when it is not JSON)."""
    v = la.flags.get("speculative_config")
    if v is None:
        return {}, None
    if isinstance(v, dict):
        return v, None
    return None, f"--speculative-config is not a JSON object ({str(v)[:80]!r})"


def speculating(la: LaunchArgs) -> bool | None:
    """Does the launch run speculative decoding (None when its --speculative-config cannot be read)?"""
    if la.engine == "sglang":
        return bool(la.algorithm)
    spec, bad = spec_config(la)
    return None if bad else bool(spec.get("method") or spec.get("model"))


def serving_row(engine: str, subject: str):
    """The engine's "serving" row a launch check (this one, checks.draft_serving) rests on (engines.facts_serving)."""
    return facts.fact(engine, "serving", subject)


def _bad(cause: str, where: str, problem: str, ev: dict | None = None) -> Finding:
    """The finding of a garbled flag value: not checked, naming the flag and what a valid value looks like."""
    return Finding(cause, "not checked", f"not checked: {problem}", ev or {}, where,
                   needs=f"the launch command with a valid value ({problem.split(' ', 1)[0]})")


def _prefix_cache(la: LaunchArgs) -> Finding:
    c, w = "prefix_cache_stale_kv", f"{WHERE}.prefix_cache"
    race = serving_row("vllm", "prefix_cache_stale_kv")
    if la.engine == "sglang":
        off, bad = switch(la, "disable_radix_cache")
        if bad:
            return _bad(c, w, bad)
        if off:
            return Finding(c, "ruled out", "--disable-radix-cache: no request reuses another's KV", {"radix_cache":
                           "off"}, w)
        return Finding(c, "not checked", "not checked: SGLang's radix cache is on (its default); the stale-KV race "
                       f"was reported in vLLM's prefix cache ({race.source}), and only served accept lengths over "
                       "time show it", {"radix_cache": "on (default)"}, w, needs=NEEDS_OVER_TIME, source=race.source)
    on, bad = switch(la, "enable_prefix_caching")
    if bad:
        return _bad(c, w, bad)
    if on is False:
        return Finding(c, "ruled out", "--no-enable-prefix-caching: no request reuses another's KV blocks",
                       {"prefix_caching": "off"}, w)
    spec, bad = spec_config(la)
    if bad:
        return _bad(c, w, bad)
    ev = {"prefix_caching": "on (--enable-prefix-caching)" if on else "on (vLLM default)",
          "disable_eagle_block_drop": spec.get("disable_eagle_block_drop")}
    if spec.get("disable_eagle_block_drop") is True:
        f = serving_row("vllm", "eagle_block_drop_off_reuses_draft_kv")
        return Finding(c, "suspected", f.note, ev, w,
                       fix="drop disable_eagle_block_drop, or compare served accept lengths with it on and off",
                       needs=NEEDS_OVER_TIME, source=f.source)
    return Finding(c, "not checked", "not checked: prefix caching is on, which by itself shows nothing; "
                   + race.note, ev, w, needs=NEEDS_OVER_TIME, source=race.source)


def _dp(la: LaunchArgs) -> Finding:
    c, w = "dp_attention", f"{WHERE}.dp_attention"
    if la.engine == "sglang":
        dpa, bad = switch(la, "enable_dp_attention")
        if bad:
            return _bad(c, w, bad)
        ev = {"enable_dp_attention": bool(dpa), "dp_size": la.flags.get("dp_size"), "tp_size": la.flags.get("tp_size"),
              "SGLANG_ENABLE_SPEC_V2": la.env.get("SGLANG_ENABLE_SPEC_V2")}
        if dpa:
            f = serving_row("sglang", "dp_attention_draft_extend")
            return Finding(c, "suspected", f"--enable-dp-attention with --speculative-algorithm {la.algorithm}: "
                           + f.note, ev, w,
                           fix="compare the served accept length without --enable-dp-attention (same TP), or use a "
                               "version with sglang PR#16310", needs="served accept length with and without DP "
                           "attention", source=f.source)
        return Finding(c, "ruled out", "the launch sets no --enable-dp-attention: the draft runs in the target's TP "
                       "group", ev, w)
    dp, bad = integer(la, "data_parallel_size")
    if bad:
        return _bad(c, w, bad)
    ev = {"data_parallel_size": dp, "tensor_parallel_size": la.flags.get("tensor_parallel_size")}
    if dp is not None and dp > 1:
        return Finding(c, "not checked", f"not checked: data_parallel_size {dp}; the accept-length loss under DP "
                       "was reported on SGLang (sglang#16274) and tokenspeed (#298), no vLLM thread", ev, w,
                       needs="served accept length at data_parallel_size 1 against the served one",
                       source="sglang#16274; tokenspeed#298")
    return Finding(c, "ruled out", "no data parallelism (data_parallel_size 1 or unset): no DP group around the draft",
                   ev, w)


def _lora(la: LaunchArgs) -> Finding:
    c, w = "lora_target", f"{WHERE}.lora"
    on, bad = switch(la, "enable_lora")
    if bad:
        return _bad(c, w, bad)
    adapters = la.flags.get(la.field_for("lora_adapters") or "")
    ev = {"enable_lora": bool(on), "adapters": adapters}
    if on or adapters:
        f = serving_row("sglang", "lora_adapts_draft")
        return Finding(c, "suspected", f"LoRA adapters on the target: {f.note} ({f.source})",
                       ev, w, fix="compare the served accept length of base-model requests with adapted ones; train "
                           "a draft on the adapted target's hidden states", source=f.source)
    return Finding(c, "ruled out", "the launch sets no LoRA adapter", ev, w)


def _structured(la: LaunchArgs) -> Finding:
    c, w = "structured_output", f"{WHERE}.structured_output"
    if la.engine == "sglang":
        gb = la.flags.get("grammar_backend")
        ev = {"grammar_backend": gb, "disaggregation_mode": la.flags.get("disaggregation_mode")}
        if isinstance(gb, str) and gb.lower() == "none":
            return Finding(c, "ruled out", "--grammar-backend none: no request can use a grammar", ev, w)
    else:
        ev = {"structured_outputs_config": la.flags.get("structured_outputs_config"),
              "enable_auto_tool_choice": la.flags.get("enable_auto_tool_choice")}
    return Finding(c, "not checked", "not checked: grammars are chosen per request, which the launch does not show",
                   ev, w, needs=NEEDS_REQUESTS, source="; ".join(serving_row(e, "grammar_with_drafts").source
                                                                 for e in SERVING_ENGINES))


def _chunked(art: Artifacts, la: LaunchArgs) -> Finding:
    c, w = "chunked_prefill_boundary", f"{WHERE}.chunked_prefill"
    name, switched = la.field_for("chunked_prefill_tokens"), la.field_for("chunked_prefill_switch")
    if name is None:
        return Finding(c, "not checked", f"not checked: {la.engine}'s home names no chunked-prefill flag", {}, w,
                       needs="the engine's chunk-size flag (its home's roles)")
    size, bad = integer(la, name)
    if bad:
        return _bad(c, w, bad)
    on, bad = switch(la, switched) if switched else (None, None)
    if bad:
        return _bad(c, w, bad)
    ev = {name: size}
    if on is False or (size is not None and size <= 0 and la.engine == "sglang"):
        return Finding(c, "ruled out", "chunked prefill is off: no prompt is split at a chunk boundary", ev, w)
    lengths = served_prompt_lengths(art)
    ev["served_max_len"] = max(lengths) if lengths else None
    src = serving_row("sglang", "chunk_boundary_rotation").source
    if size is None:
        return Finding(c, "not checked", f"not checked: {flag(name)} not given (the engine picks the chunk size)", ev,
                       w, needs=f"{flag(name)} and served prompt lengths (served_prompts)", source=src)
    if not lengths:
        return Finding(c, "not checked", f"not checked: chunks of {size} tokens; no served prompt lengths to compare",
                       ev, w, needs=NEEDS["served_prompts"], source=src)
    if max(lengths) <= size:
        return Finding(c, "ruled out", f"served prompts ({max(lengths)} tokens at most) fit in one {size}-token chunk",
                       ev, w)
    return Finding(c, "not checked", f"not checked: served prompts reach {max(lengths)} tokens and cross the "
                   f"{size}-token chunk boundary; whether its token is rotated wrongly shows only in served accept "
                   "lengths by prompt length", ev, w,
                   needs=f"served accept length by prompt length, around multiples of {size} tokens", source=src)


def mrope(art: Artifacts) -> dict | None:
    """How the target declares multimodal RoPE (mrope_section / rope type mrope in rope_scaling or
    rope_parameters, of the text config or the whole config), or None when it does not."""
    bodies = [dict(art.target_raw or {}), dict(art.target_info.raw) if art.target_info is not None else {}]
    for body in bodies:
        for key in ("rope_scaling", "rope_parameters"):
            rp = body.get(key)
            if isinstance(rp, dict) and ("mrope_section" in rp or "mrope" in str(rp.get("rope_type", rp.get("type")))):
                return {"key": key, "mrope_section": rp.get("mrope_section"),
                        "mrope_interleaved": rp.get("mrope_interleaved")}
    return None


def _mrope(art: Artifacts, la: LaunchArgs) -> Finding:
    c, w = "mrope_draft_extend", f"{WHERE}.mrope"
    need = art.missing("target")
    if need:
        return not_checked(c, w, need)
    m = mrope(art)
    ev = {"target_architecture": art.target_info.architecture, "mrope": m, "engine": la.engine}
    if m is None:
        return Finding(c, "ruled out", "the target declares no multimodal RoPE (no mrope_section): draft-extend "
                       "positions are plain token positions", ev, w)
    row = serving_row("sglang", "mrope_draft_extend_per_request")
    src = row.source
    if la.engine == "sglang":
        return Finding(c, "suspected", f"an mRoPE target ({art.target_info.architecture}) with --speculative-algorithm "
                       f"{la.algorithm}: {row.note}", ev, w,
                       fix="use a version with the fix, and test batched multimodal traffic before serving",
                       needs="the server log under batched multimodal traffic", source=src)
    return Finding(c, "not checked", "not checked: an mRoPE target; the draft-extend crash was reported on SGLang "
                   "(sglang#34152), no vLLM thread", ev, w, needs="the server log under batched multimodal traffic",
                   source=src)


def _trtllm(art: Artifacts) -> Finding:
    c, w = "trtllm_acceptance_gate", f"{WHERE}.trtllm"
    if art.launch is None:
        return not_checked(c, w, art.missing("launch") + " (for a TRT-LLM deployment: its LLM API config, "
                           "acceptance_rate_threshold and relaxed acceptance, which this workbook does not read)")
    return Finding(c, "ruled out", f"the deployment is {art.launch.engine}: TRT-LLM's acceptance_rate_threshold gate "
                   "and relaxed acceptance do not apply", {"engine": art.launch.engine}, w)


def _hicache(la: LaunchArgs) -> Finding:
    c, w = "hicache_draft_kv", f"{WHERE}.hicache"
    if la.engine != "sglang":
        kt = la.flags.get("kv_transfer_config")
        conn = str(kt.get("kv_connector", "")) if isinstance(kt, dict) else ""
        ev = {"engine": la.engine, "kv_transfer_config": kt}
        if any(k in conn.lower() for k in ("offload", "lmcache")):
            return Finding(c, "not checked", f"not checked: {conn} loads KV back from outside the GPU; the draft "
                           "KV missing on loadback was reported on SGLang's HiCache, no vLLM thread", ev, w,
                           needs="served accept lengths over time (served_log_path) against the replay",
                           source="sglang#32176")
        return Finding(c, "ruled out", "HiCache is SGLang's and the launch names no KV-offloading connector: no KV "
                       "is loaded back from host memory", ev, w)
    on, bad = switch(la, "enable_hierarchical_cache")
    if bad:
        return _bad(c, w, bad)
    ev = {"enable_hierarchical_cache": bool(on), "hicache_ratio": la.flags.get("hicache_ratio"),
          "hicache_storage_backend": la.flags.get("hicache_storage_backend")}
    if not on:
        return Finding(c, "ruled out", "the launch sets no --enable-hierarchical-cache: no KV is loaded back from "
                       "host memory", ev, w)
    f = facts.fact("sglang", "serving", "hicache_restores_draft_kv")
    return Finding(c, "suspected", f"--enable-hierarchical-cache with --speculative-algorithm {la.algorithm}: "
                   "HiCache loadback restored the target's KV but not the draft's KV (nor DSA index buffers), a "
                   "silent collapse over hours (AL 4.49 -> 1.59) that /flush_cache resets; the fixing release is "
                   "not placed", ev, w, fix="compare the served accept length before and after POST /flush_cache, "
                   "or serve without --enable-hierarchical-cache", needs="served accept lengths over time "
                   "(served_log_path) and the SGLang version", source=f.source)


def _pd(la: LaunchArgs) -> Finding:
    c, w = "pd_disaggregation", f"{WHERE}.pd"
    src = facts.fact("sglang", "serving", "pd_transfers_draft_state").source
    needs = "served accept length by prompt length against a colocated (non-disaggregated) deployment"
    if la.engine == "sglang":
        mode = la.flags.get("disaggregation_mode")
        ev = {"disaggregation_mode": mode}
        if mode in (None, "null", "none", ""):
            return Finding(c, "ruled out", "no --disaggregation-mode: prefill and decode run in one server, the "
                           "draft's state never crosses workers", ev, w)
        return Finding(c, "suspected", f"--disaggregation-mode {mode}: the draft's KV / hidden states are not handed "
                       "from the prefill to the decode worker the way the target's KV is (AL -4% on short prompts, "
                       "-13% at 1K, about -25% at 30K)", ev, w, fix="compare with a colocated server on the same "
                       "prompts, by prompt length", needs=needs, source=src)
    kt = la.flags.get("kv_transfer_config")
    ev = {"kv_transfer_config": kt}
    if kt is None:
        return Finding(c, "ruled out", "no --kv-transfer-config: prefill and decode run in one vLLM engine", ev, w)
    if not isinstance(kt, dict):
        return _bad(c, w, f"--kv-transfer-config is not a JSON object ({str(kt)[:60]!r})")
    return Finding(c, "not checked", f"not checked: a KV connector ({kt.get('kv_connector')}, role "
                   f"{kt.get('kv_role')}) moves the target's KV between engines; the lost draft state was reported "
                   "on SGLang, TRT-LLM and ATOM, no vLLM thread", ev, w, needs=needs, source=src)


def _async(la: LaunchArgs) -> Finding:
    c, w = "async_scheduling", f"{WHERE}.async_scheduling"
    cost = serving_row("vllm", "async_scheduling_costs_acceptance")
    src = f"{cost.source}; vllm-ascend PR#8230"
    needs = "served accept length with async scheduling off against on (same traffic)"
    if la.engine == "sglang":
        off, bad = switch(la, "disable_overlap_schedule")
        if bad:
            return _bad(c, w, bad)
        ev = {"disable_overlap_schedule": off, "SGLANG_ENABLE_SPEC_V2": la.env.get("SGLANG_ENABLE_SPEC_V2")}
        if off:
            return Finding(c, "ruled out", "--disable-overlap-schedule: SGLang schedules each step after the last",
                           ev, w)
        return Finding(c, "not checked", "not checked: SGLang's overlap scheduler (spec v2) is on by default; the "
                       "acceptance loss of async scheduling was measured on vLLM", ev, w, needs=needs, source=src)
    on, bad = switch(la, "async_scheduling")
    if bad:
        return _bad(c, w, bad)
    ev = {"async_scheduling": on}
    if on is False:
        return Finding(c, "ruled out", "--no-async-scheduling: each step is scheduled after the previous one's "
                       "accepted tokens are known", ev, w)
    if on:
        return Finding(c, "suspected", f"{cost.note} ({cost.source})", ev, w,
                       fix="compare the served accept length with --no-async-scheduling", needs=needs, source=src)
    f = facts.fact("vllm", "serving", "async_scheduling_default")
    return Finding(c, "not checked", f"not checked: async scheduling is left to vLLM's default (on for EAGLE in "
                   f"{f.since}, the release read: {f.source}); a default alone is not evidence", ev, w, needs=needs,
                   source=f"{src}; {f.source}")


def sequence_parallel(la: LaunchArgs) -> tuple[str, object] | None:
    """(where, value) of a sequence-parallelism switch the launch turns on (vLLM compilation_config pass_config
    enable_sp / enable_sequence_parallelism, or a flag of that name), None when none is on."""
    cc = la.flags.get("compilation_config")
    pc = cc.get("pass_config") if isinstance(cc, dict) and isinstance(cc.get("pass_config"), dict) else {}
    for k in ("enable_sp", "enable_sequence_parallelism"):
        if pc.get(k) is True:
            return f"compilation_config.pass_config.{k}", True
        if la.flags.get(k) not in (None, False):
            return flag(k), la.flags.get(k)
    return None


def _sp(la: LaunchArgs) -> Finding:
    c, w = "sequence_parallel", f"{WHERE}.sequence_parallel"
    sp = sequence_parallel(la)
    ev = {"sequence_parallel": sp[0] if sp else None, "compilation_config": la.flags.get("compilation_config")}
    if sp is None:
        return Finding(c, "ruled out", "the launch turns on no sequence parallelism", ev, w)
    return Finding(c, "suspected", f"sequence parallelism ({sp[0]}) with EAGLE-3: the draft's accuracy dropped "
                   "with it on (vllm-ascend#5825)", ev, w, fix="compare the served accept length with sequence "
                   "parallelism off", needs="served accept length with sequence parallelism off",
                   source="vllm-ascend#5825")


# the causes check_launch_flags reports (checks.judge: what a broken check reports as not checked)
LAUNCH_FLAGS_CAUSES = ('prefix_cache_stale_kv', 'dp_attention', 'lora_target', 'structured_output', 'chunked_prefill_boundary', 'mrope_draft_extend', 'trtllm_acceptance_gate', 'hicache_draft_kv', 'pd_disaggregation', 'async_scheduling', 'sequence_parallel')
TOPOLOGY = ('hicache_draft_kv', 'pd_disaggregation', 'async_scheduling', 'sequence_parallel')


def check_launch_flags(art: Artifacts) -> list[Finding]:
    """One finding per cause above, from the launch command (and the served prompt lengths for the chunk check)."""
    causes = LAUNCH_FLAGS_CAUSES[:6]            # trtllm_acceptance_gate: its own finding (_trtllm)
    if art.launch is None:
        need = art.missing("launch")
        out = [not_checked(c, WHERE, need) for c in causes[:-1]]
        m = mrope(art) if art.target_info is not None else None
        out.append(not_checked("mrope_draft_extend", f"{WHERE}.mrope", need) if art.target_info is None or m else
                   Finding("mrope_draft_extend", "ruled out", "the target declares no multimodal RoPE (no "
                           "mrope_section)", {"mrope": None}, f"{WHERE}.mrope"))
        return out + [_trtllm(art)] + [not_checked(c, WHERE, need) for c in TOPOLOGY]
    la = art.launch
    if speculating(la) is False:
        return [Finding(c, "ruled out", "the launch runs no speculative decoding (see wrong_method)",
                        {"engine": la.engine}, WHERE) for c in causes + TOPOLOGY] + [_trtllm(art)]
    return [_prefix_cache(la), _dp(la), _lora(la), _structured(la), _chunked(art, la), _mrope(art, la), _trtllm(art),
            _hicache(la), _pd(la), _async(la), _sp(la)]


@contract("launch_flags", LAUNCH_FLAGS_CAUSES, part_of="launch")
def judge_launch_flags(art: Artifacts, opts: Options) -> list[Finding]:
    """The serving features the launch turns on."""
    return check_launch_flags(art)
