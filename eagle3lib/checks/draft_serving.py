"""Check 11, how the engine runs and verifies the draft, from the launch command and the draft config: the
rejection-sampling method (vLLM `rejection_sample_method`, SGLang's simulated acceptance), adaptive or lossy depth,
a quantized drafter under CUDA graphs, and the KV-cache dtype the draft shares with the target; simulated acceptance
left on in the launch's environment, an fp8 KV cache on the target, the draft's attention backend and KV scheme, and
a platform whose verify step is greedy.

Causes: rejection_method, adaptive_depth, quantized_draft_graphs, kv_cache_dtype, simulated_acceptance,
fp8_kv_target, draft_attention_backend, greedy_verify_platform. Usage: ``check_draft_serving(art)``.
The rejection method, the depth and the verify platform are the engine's own flags and environment: the launch's
home decides them (`EngineHome.launch_rules`; SGLang's simulated acceptance, vLLM's rejection_sample_method and FLy);
a platform every served request asked greedy decoding of is ruled out here, by measurement.
Rests on the "serving" rows of `engines.facts` (facts_serving), which it cites: vLLM
quantized_draft_under_cuda_graphs (NVFP4 drafter under graphs), draft_inherits_quantization (SGLang: the draft
inherits --quantization; vLLM: an external draft stays unquantized); vLLM draft_kv_dtype_is_targets, SGLang
draft_shares_server_args and mla_draft_shares_target_pool (the draft's KV); vLLM fp8_kv_target_drifts,
draft_follows_attention_backend, kv_cache_scheme_read_from_draft. Measurements and threads of other projects stay
cited inline: tokenspeed PR#1012 (fp8 draft KV: AL 2.7 -> 1.8), ROCm/ATOM#555, TRT-LLM#17656, TensorRT-LLM's
forced-acceptance variable.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..engines import facts
from ..engines.versions import engine_title
from .inputs import Artifacts
from .registry import Options, contract
from ..engine_kit.launch_evidence import LaunchEvidence
from .launch_flags import engine_rule, launch_evidence, no_evidence, serving_row, speculating

WHERE = "checks.draft_serving"
PLAIN_KV = ("auto", "bfloat16", "bf16", "float16", "fp16", "half", "float32", "float")   # not a quantized cache


def draft_quantization(raw) -> str | None:
    """The quantization method the draft checkpoint's own config declares (speculators: transformer_layer_config)."""
    for body in (raw, raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict)
                 else {}):
        q = body.get("quantization_config")
        if isinstance(q, dict) and q:
            return str(q.get("quant_method") or q.get("quant_algo") or "declared")
        if isinstance(q, str) and q:
            return q
    return None


def is_mla_draft(raw) -> bool:
    """A multi-latent-attention draft (SGLang Eagle3DeepseekV2ForCausalLM: kv_lora_rank in its config)."""
    arch = " ".join(raw.get("architectures") or [])
    return "kv_lora_rank" in raw or "Deepseek" in arch


def _quantized(art: Artifacts, la, lev: LaunchEvidence | None) -> Finding:
    c, w = "quantized_draft_graphs", f"{WHERE}.quantization"
    if lev is None:
        return no_evidence(la, c, w)
    own = draft_quantization(dict(art.draft_raw)) if art.draft_raw is not None else None
    inherits = serving_row(la.engine, "draft_inherits_quantization")   # does the draft inherit the target's
    graphs_row = serving_row("vllm", "quantized_draft_under_cuda_graphs")
    given, inherited = lev.quantization, lev.inherited_quantization
    # the checkpoint's own declaration first, then what the launch gives the draft (unquant / none: unquantized),
    # then what it inherits from the target's quantization where the engine makes it inherit
    if own or given is None:
        effective = own or inherited
    else:
        effective = None if str(given).lower() in ("unquant", "none") else given
    ev = {"engine": la.engine, "draft_config_quantization": own, "draft_quantization_given": given,
          "target_quantization_flag": inherited, "draft_quantization": effective, "cuda_graphs": lev.graphs}
    bad = lev.problems.get("graphs") or lev.problems.get("draft")
    if bad:
        return Finding(c, "not checked", f"not checked: {bad}", ev, w, needs="the launch command with a valid value")
    if lev.graphs_off:
        return Finding(c, "ruled out", f"the drafter runs without CUDA graphs ({lev.graphs})", ev, w)
    sources = "; ".join(f.source for f in (graphs_row, inherits) if f is not None)
    if effective:
        how = ("its config declares" if own else lev.quantization_flag if given else
               f"inherited from {lev.inherited_flag} ({inherits.source if inherits else la.engine})")
        return Finding(c, "suspected", f"a {effective} drafter ({how}) under CUDA graphs: {graphs_row.note} "
                       f"[{graphs_row.source}]", ev, w, fix="compare the served accept length with "
                       "--enforce-eager (vLLM) / --disable-cuda-graph (SGLang), or serve the draft in bf16",
                       needs="served accept length with and without CUDA graphs", source=sources)
    if art.draft_raw is None:
        return not_checked(c, w, art.missing("draft"), "not checked: CUDA graphs are on; whether the drafter is "
                           "quantized needs its config")
    return Finding(c, "ruled out", "the drafter runs unquantized (its config declares no quantization and none is "
                   "given" + (" or inherited" if inherits is not None and inherits.reads else "") + ")", ev, w)


def _kv_dtype(art: Artifacts, la, lev: LaunchEvidence | None) -> Finding:
    c, w = "kv_cache_dtype", f"{WHERE}.kv_cache"
    if lev is None:
        return no_evidence(la, c, w)
    target = la.flags.get("kv_cache_dtype") or "auto"
    if lev.problems.get("draft"):
        return Finding(c, "not checked", f"not checked: {lev.problems['draft']}", {}, w,
                       needs="the launch command with a valid value")
    own = lev.kv_cache_dtype
    draft = str(own or target)
    mla = is_mla_draft(dict(art.draft_raw)) if art.draft_raw is not None else None
    ev = {"kv_cache_dtype": target, "draft_kv_cache_dtype": draft, "mla_draft": mla}
    shared = serving_row("vllm", "draft_kv_dtype_is_targets")
    server_args = serving_row("sglang", "draft_shares_server_args")
    if draft.lower() not in PLAIN_KV:
        return Finding(c, "suspected", f"the draft reads and writes a {draft} KV cache (the target's --kv-cache-dtype"
                       + ("" if own else ", which the draft shares") + "), while drafts are trained on bf16 attention: "
                       "a draft following the target's FP8 KV fell from AL ~2.7 to 1.79 (tokenspeed PR#1012)", ev, w,
                       fix="give the draft its own bf16 KV cache (vLLM: speculative_config.kv_cache_dtype \"auto\"), "
                           "or compare served accept lengths with --kv-cache-dtype auto",
                       source=f"tokenspeed PR#1012; {shared.source}; {server_args.source} "
                              "(every worker gets the same ServerArgs)")
    if mla:
        pool = serving_row("sglang", "mla_draft_shares_target_pool")
        return Finding(c, "not checked", f"not checked: the KV cache keeps the model dtype, but {pool.note}",
                       ev, w, needs="served accept length on a cold start against a warm one",
                       source=f"TRT-LLM#17656; {pool.source}")
    return Finding(c, "ruled out", f"the draft's KV cache keeps the model dtype ({draft})", ev, w)


SIMULATE_ENV = ("SGLANG_SIMULATE_ACC_LEN", "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS")


def _simulated(la) -> Finding:
    c, w = "simulated_acceptance", f"{WHERE}.simulated"
    ev = {k: la.env.get(k) for k in SIMULATE_ENV}
    set_ = {k: v for k, v in ev.items() if v not in (None, "", "0", "0.0")}
    if set_:
        k, v = next(iter(set_.items()))
        return Finding(c, "confirmed", f"{k}={v} in the launch's environment: the server accepts a forced / "
                       "simulated number of draft tokens, so its accept length is the knob's, not the draft's",
                       ev, w, fix=f"unset {', '.join(set_)} before measuring the draft",
                       source=f"{serving_row('sglang', 'simulated_acceptance_env').source}; ROCm/ATOM#555")
    return Finding(c, "ruled out", "the launch's environment sets neither SGLANG_SIMULATE_ACC_LEN nor "
                   "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS (a variable exported elsewhere is not seen here)", ev, w)


def kv_scheme(raw) -> dict | None:
    """A compressed-tensors kv_cache_scheme in a config's quantization_config (or its transformer_layer_config)."""
    for body in (raw, raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict)
                 else {}):
        q = body.get("quantization_config")
        if isinstance(q, dict) and isinstance(q.get("kv_cache_scheme"), dict):
            return dict(q["kv_cache_scheme"])
    return None


def _fp8_target(art: Artifacts, la) -> Finding:
    c, w = "fp8_kv_target", f"{WHERE}.fp8_kv_target"
    kv = str(la.flags.get("kv_cache_dtype") or "auto")
    scheme = kv_scheme(dict(art.target_raw)) if art.target_raw is not None else None
    ev = {"kv_cache_dtype": kv, "target_kv_cache_scheme": scheme}
    drift = serving_row("vllm", "fp8_kv_target_drifts")
    src = drift.source
    if kv.lower().startswith("fp8") or kv.lower().startswith("fp4") or scheme:
        how = f"--kv-cache-dtype {kv}" if kv.lower() not in PLAIN_KV else "its kv_cache_scheme"
        return Finding(c, "suspected", f"the target attends over a quantized KV cache ({how}): "
                       f"{drift.note} [{src}]", ev, w,
                       fix="compare the served accept length with --kv-cache-dtype auto",
                       needs="served accept length with --kv-cache-dtype auto on the same traffic", source=src)
    if art.target_raw is None and kv.lower() in PLAIN_KV:
        return Finding(c, "ruled out", f"--kv-cache-dtype {kv}: the target's KV cache keeps the model dtype (the "
                       "target config, not given, could still declare a kv_cache_scheme)", ev, w)
    return Finding(c, "ruled out", f"the target's KV cache keeps the model dtype ({kv}, no kv_cache_scheme)", ev, w)


def _attention(art: Artifacts, la) -> Finding:
    c, w = "draft_attention_backend", f"{WHERE}.attention"
    ac = la.flags.get("attention_config")
    backend = la.flags.get("attention_backend") or (ac.get("backend") if isinstance(ac, dict) else None)
    scheme = kv_scheme(dict(art.draft_raw)) if art.draft_raw is not None else None
    ev = {"engine": la.engine, "attention_backend": backend, "draft_kv_cache_scheme": scheme}
    follows = serving_row(la.engine, "draft_follows_attention_backend")
    reads_scheme = serving_row(la.engine, "kv_cache_scheme_read_from_draft")
    title = engine_title(la.engine)
    if scheme and reads_scheme is not None and reads_scheme.reads:
        return Finding(c, "suspected", f"the draft config declares a compressed-tensors kv_cache_scheme ({scheme}): "
                       f"{title} reads the draft's own quantization config, which gives the draft an fp8 KV cache "
                       "whatever --kv-cache-dtype says", ev, w, fix="drop kv_cache_scheme from the draft's "
                       "quantization_config (or serve it in bf16) and compare", needs="served accept length without "
                       "the draft's kv_cache_scheme", source=reads_scheme.source)
    if backend and follows is not None and follows.reads is False:
        return Finding(c, "suspected", f"attention backend {backend} chosen for the target: {follows.note}, so the "
                       f"EAGLE-3 draft may not follow it [{follows.source}]", ev, w,
                       needs="the startup log's attention-backend line for the draft's layers", source=follows.source)
    if art.draft_raw is None:
        return not_checked(c, w, art.missing("draft"), "not checked: whether the draft config declares a "
                           "kv_cache_scheme needs it")
    if scheme:
        seen = [f for f in facts.facts("serving") if f.subject == "kv_cache_scheme_read_from_draft" and f.reads]
        return Finding(c, "not checked", "not checked: the draft config declares a kv_cache_scheme; the fp8 draft KV "
                       "was reported on " + ", ".join(engine_title(f.engine) for f in seen) + f", no {title} "
                       "thread", ev, w, needs=f"the {title} server log's KV-cache dtype for the draft worker",
                       source="; ".join(f.source for f in seen))
    if backend and follows is None:
        return Finding(c, "not checked", f"not checked: whether {title}'s draft follows the attention backend "
                       f"{backend} is not in the engine facts", ev, w,
                       needs="the startup log's attention-backend line for the draft's layers")
    how = (f"the attention backend {backend} reaches the draft worker too ({follows.note}; {follows.source})"
           if backend else "no attention backend is forced")
    return Finding(c, "ruled out", how + " and the draft config declares no kv_cache_scheme", ev, w)


def _greedy_platform(la, traffic=None) -> Finding:
    c, w = "greedy_verify_platform", f"{WHERE}.platform"
    if traffic is not None and traffic.greedy:       # measured: a greedy verify serves what greedy requests ask
        return Finding(c, "ruled out", f"every served request asked for greedy decoding (temperature 0 on all "
                       f"{len(traffic.exchanges)} answers of {traffic.responses}): a verify step that ignores the "
                       "temperature gives them what they asked", {
                           "engine": la.engine, "device": la.flags.get("device"),
                           "greedy_answers": len(traffic.exchanges)}, w)
    return engine_rule(la, c, w)


# the causes check_draft_serving reports (checks.judge: what a broken check reports as not checked)
DRAFT_SERVING_CAUSES = ('rejection_method', 'adaptive_depth', 'quantized_draft_graphs', 'kv_cache_dtype', 'simulated_acceptance', 'fp8_kv_target', 'draft_attention_backend', 'greedy_verify_platform')


def check_draft_serving(art: Artifacts) -> list[Finding]:
    """One finding per cause above (rejection method, depth, quantized drafter, KV dtype)."""
    if art.launch is None:
        need = art.missing("launch")
        own = draft_quantization(dict(art.draft_raw)) if art.draft_raw is not None else None
        note = {"quantized_draft_graphs": f"not checked: the draft config declares {own} quantization; whether it "
                "runs under CUDA graphs needs the launch command"} if own else {}
        return [not_checked(c, WHERE, need, note.get(c, "")) for c in DRAFT_SERVING_CAUSES]
    la = art.launch
    if speculating(la) is False:
        return [Finding(c, "ruled out", "the launch runs no speculative decoding (see wrong_method)",
                        {"engine": la.engine}, WHERE) for c in DRAFT_SERVING_CAUSES]
    lev = launch_evidence(la)
    return [engine_rule(la, "rejection_method", f"{WHERE}.rejection"),
            engine_rule(la, "adaptive_depth", f"{WHERE}.depth"),
            _quantized(art, la, lev), _kv_dtype(art, la, lev), _simulated(la), _fp8_target(art, la),
            _attention(art, la), _greedy_platform(la, art.traffic)]


@contract("draft_serving", DRAFT_SERVING_CAUSES, part_of="launch")
def judge_draft_serving(art: Artifacts, opts: Options) -> list[Finding]:
    """How the engine runs and verifies the draft."""
    return check_draft_serving(art)
