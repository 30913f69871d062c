"""Check 10, serving features around the draft, from the launch command: prefix caching, DP attention / DP groups,
LoRA adapters on the target, structured output, the chunked-prefill boundary, a multimodal-RoPE target in
draft-extend, whether the deployment is TRT-LLM's at all; and the topology around the draft: a hierarchical / offloaded
KV cache, prefill/decode disaggregation, async scheduling, sequence parallelism.

Causes: prefix_cache_stale_kv, dp_attention, lora_target, structured_output, chunked_prefill_boundary,
mrope_draft_extend (an mRoPE target), trtllm_acceptance_gate, hicache_draft_kv, pd_disaggregation,
async_scheduling, sequence_parallel. The causes whose flags are the engine's own (prefix caching, DP, HiCache / KV
connectors, PD, async scheduling: `ENGINE_RULES`) are decided by the launch's home (`EngineHome.launch_rules`,
`sglang_engine.launch_rules`, `vllm_engine.launch_rules`); the rest here, by role where a flag is the engine's.
An engine default alone never raises a cause. Rests on the "serving" rows of `engines.facts` (facts_serving), which
it cites: both engines' grammar_with_drafts, SGLang lora_adapts_draft, chunk_boundary_rotation,
mrope_draft_extend_per_request. vllm-ascend#5825 (sequence parallelism) stays cited inline.
Usage: ``check_launch_flags(art)``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..engines import facts
from ..engines.versions import SERVING_ENGINES, engine_title
from ..engine_kit.flag_values import flag, garbled, integer, switch
from ..engine_kit.launch_evidence import LaunchEvidence
from ..engine_kit.launch_reading import LaunchArgs
from ..serving.homes import homes
from .context import served_prompt_lengths
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.launch_flags"
NEEDS_REQUESTS = ("the served requests' structured-output options (response_format / json_schema / regex / "
                  "tool_choice) and the server log (engine deaths, aborted requests)")


def speculating(la: LaunchArgs) -> bool | None:
    """Does the launch run speculative decoding, as its home reads it (None when its speculative setting cannot be
    read); a home without the hook: when the launch names an algorithm."""
    ask = getattr(homes().get(la.engine), "speculating", None)
    return ask(la) if ask is not None else bool(la.algorithm)


def engine_rule(la: LaunchArgs, cause: str, where: str, version: str | None = None) -> Finding:
    """The finding the launch's home decides for `cause` (its `launch_rules`, at the engine's `version` where the rule
    reads one); not checked, naming the home, where it has no rule for it."""
    rule = getattr(homes().get(la.engine), "launch_rules", {}).get(cause)
    if rule is None:
        return Finding(cause, "not checked", f"not checked: {la.engine}'s home has no launch rule for {cause}",
                       {"engine": la.engine}, where, needs=f"a rule for {cause} in {la.engine}'s home (launch_rules)")
    return rule(la, where, version)


def launch_evidence(la: LaunchArgs) -> LaunchEvidence | None:
    """What the launch's home reads of how the draft runs (`EngineHome.evidence`); None where the home has no reader."""
    read = getattr(homes().get(la.engine), "evidence", None)
    return read(la) if read is not None else None


def no_evidence(la: LaunchArgs, cause: str, where: str) -> Finding:
    """Not checked: the launch's home reads none of its flags as evidence of how the draft runs."""
    return Finding(cause, "not checked", f"not checked: {la.engine}'s home reads no evidence of how the draft runs",
                   {"engine": la.engine}, where, needs=f"an evidence reader in {la.engine}'s home (evidence)")


def serving_row(engine: str, subject: str):
    """The engine's "serving" row a launch check (this one, checks.draft_serving) rests on (engines.facts_serving)."""
    return facts.fact(engine, "serving", subject)


def _lora(la: LaunchArgs) -> Finding:
    c, w = "lora_target", f"{WHERE}.lora"
    on, bad = switch(la, "enable_lora")
    if bad:
        return garbled(c, w, bad)
    adapters = la.flags.get(la.field_for("lora_adapters") or "")
    ev = {"enable_lora": bool(on), "adapters": adapters}
    if on or adapters:
        f = serving_row("sglang", "lora_adapts_draft")
        return Finding(c, "suspected", f"LoRA adapters on the target: {f.note} ({f.source})",
                       ev, w, fix="compare the served accept length of base-model requests with adapted ones; train "
                           "a draft on the adapted target's hidden states", source=f.source)
    return Finding(c, "ruled out", "the launch sets no LoRA adapter", ev, w)


def _structured(la: LaunchArgs, lev: LaunchEvidence | None) -> Finding:
    c, w = "structured_output", f"{WHERE}.structured_output"
    if lev is None:
        return no_evidence(la, c, w)
    ev = dict(lev.structured)
    if lev.grammar_off:
        return Finding(c, "ruled out", "the grammar backend is none: no request can use a grammar", ev, w)
    return Finding(c, "not checked", "not checked: grammars are chosen per request, which the launch does not show",
                   ev, w, needs=NEEDS_REQUESTS, source="; ".join(serving_row(e, "grammar_with_drafts").source
                                                                 for e in SERVING_ENGINES))


def _chunked(art: Artifacts, la: LaunchArgs, lev: LaunchEvidence | None) -> Finding:
    c, w = "chunked_prefill_boundary", f"{WHERE}.chunked_prefill"
    name = la.field_for("chunked_prefill_tokens")
    if name is None:
        return Finding(c, "not checked", f"not checked: {la.engine}'s home names no chunked-prefill flag", {}, w,
                       needs="the engine's chunk-size flag (its home's roles)")
    size, bad = integer(la, name)
    if bad:
        return garbled(c, w, bad)
    if lev is None:
        return no_evidence(la, c, w)
    if lev.problems.get("chunking"):
        return garbled(c, w, lev.problems["chunking"])
    ev = {name: size}
    if lev.chunking_off:
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
    subject = "mrope_draft_extend_per_request"
    row = serving_row(la.engine, subject)
    if row is not None and row.reads:
        return Finding(c, "suspected", f"an mRoPE target ({art.target_info.architecture}) with the speculative "
                       f"algorithm {la.algorithm}: {row.note}", ev, w,
                       fix="use a version with the fix, and test batched multimodal traffic before serving",
                       needs="the server log under batched multimodal traffic", source=row.source)
    seen = [f for f in facts.facts("serving") if f.subject == subject and f.reads]
    return Finding(c, "not checked", "not checked: an mRoPE target; the draft-extend crash was reported on "
                   + ", ".join(f"{engine_title(f.engine)} ({f.source.split(' ')[0]})" for f in seen)
                   + f", no {engine_title(la.engine)} thread", ev, w,
                   needs="the server log under batched multimodal traffic", source="; ".join(f.source for f in seen))


def _trtllm(art: Artifacts) -> Finding:
    c, w = "trtllm_acceptance_gate", f"{WHERE}.trtllm"
    if art.launch is None:
        return not_checked(c, w, art.missing("launch") + " (for a TRT-LLM deployment: its LLM API config, "
                           "acceptance_rate_threshold and relaxed acceptance, which this workbook does not read)")
    return Finding(c, "ruled out", f"the deployment is {art.launch.engine}: TRT-LLM's acceptance_rate_threshold gate "
                   "and relaxed acceptance do not apply", {"engine": art.launch.engine}, w)


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
# the causes each engine's home decides (its launch_rules), with where their findings say they were decided
ENGINE_RULES = {"prefix_cache_stale_kv": "prefix_cache", "dp_attention": "dp_attention", "hicache_draft_kv": "hicache",
                "pd_disaggregation": "pd", "async_scheduling": "async_scheduling"}


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
    rule = {c: engine_rule(la, c, f"{WHERE}.{where}") for c, where in ENGINE_RULES.items()}
    lev = launch_evidence(la)
    return [rule["prefix_cache_stale_kv"], rule["dp_attention"], _lora(la), _structured(la, lev),
            _chunked(art, la, lev),
            _mrope(art, la), _trtllm(art), rule["hicache_draft_kv"], rule["pd_disaggregation"],
            rule["async_scheduling"], _sp(la)]


@contract("launch_flags", LAUNCH_FLAGS_CAUSES, part_of="launch")
def judge_launch_flags(art: Artifacts, opts: Options) -> list[Finding]:
    """The serving features the launch turns on."""
    return check_launch_flags(art)
