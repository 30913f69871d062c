"""Check 7, launch vs draft: the speculative algorithm against the draft's architecture, as the launch's home picks
it (`EngineHome.method_rule`: SGLang EAGLE vs EAGLE3; vLLM `method` and its path auto-detection), lossy accept
thresholds (`crossengine.lint`), sampling settings that make a benchmark greedy, a quantized target, and draft/target
hidden-size bridging.

Causes: wrong_method, lossy_threshold, sampling_settings, quantized_target, hidden_size_mismatch.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..serving.crossengine import lint
from ..serving.homes import homes
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.launch"
LOSSY_VLLM = ("typical_acceptance_sampler",)


def is_eagle3(raw, cfg) -> bool:
    """An EAGLE-3 draft (fc over aux states) rather than an EAGLE-1/2 head: by architecture or EAGLE-3-only keys."""
    arch = cfg.architecture if cfg is not None else ""
    return ("eagle3" in arch.lower() or "eagle_config" in raw or raw.get("speculators_model_type") == "eagle3"
            or "draft_vocab_size" in raw or "target_hidden_size" in raw)


def _method(art: Artifacts) -> Finding:
    w = f"{WHERE}.method"
    need = art.missing("launch", "draft")
    if need:
        return not_checked("wrong_method", w, need)
    la, raw = art.launch, dict(art.draft_raw)
    if la.speculation_unread:        # a setting that did not parse is never evidence of the method
        bad = [f for f in la.unread if f in la.speculative]
        flags = ", ".join("--" + f.replace("_", "-") for f in bad)
        return Finding("wrong_method", "not checked", f"not checked: {flags} could not be read", {"unread": bad}, w,
                       needs=f"the launch command with a valid value ({flags})")
    e3 = is_eagle3(raw, art.draft_cfg)
    ev = {"engine": la.engine, "draft_architecture": art.draft_cfg.architecture, "eagle3_draft": e3}
    rule = getattr(homes().get(la.engine), "method_rule", None)
    if rule is None:
        return Finding("wrong_method", "not checked", f"not checked: {la.engine}'s home has no method rule", ev, w,
                       needs=f"a method rule in {la.engine}'s home (method_rule)")
    return rule(la, e3, ev, w)


def _lossy(art: Artifacts) -> Finding:
    w = f"{WHERE}.thresholds"
    if art.launch is None:
        return not_checked("lossy_threshold", w, NEEDS["launch"])
    la = art.launch
    hits = [x.message for x in lint(la) if x.code == "lossy_threshold"]
    spec = la.speculative_config or {}
    if spec.get("acceptance_method") in LOSSY_VLLM:
        hits.append(f"acceptance_method {spec['acceptance_method']}: lossy (typical acceptance)")
    ev = {k: la.flags.get(k) for k in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
          if la.flags.get(k) is not None}
    if hits:
        return Finding("lossy_threshold", "confirmed", "; ".join(hits), ev, w, fix="set the thresholds to 1 "
                       "(greedy-exact verification) before comparing accept lengths",
                       source="crossengine.lint (lossy_threshold)")
    return Finding("lossy_threshold", "ruled out", "verification is exact (no threshold below 1)", ev, w)


def _sampling(art: Artifacts) -> Finding:
    """A benchmark / launch whose top_k=1 makes a temperature run greedy (or the reverse)."""
    w = f"{WHERE}.sampling"
    if art.launch is None:
        return not_checked("sampling_settings", w, NEEDS["launch"] + " or the benchmark command")
    argv = list(art.launch.argv)
    val = {}
    for i, tok in enumerate(argv):
        name = tok.split("=", 1)[0].lstrip("-").replace("-", "_")
        if name in ("top_k", "temperature"):
            raw = tok.split("=", 1)[1] if "=" in tok else (argv[i + 1] if i + 1 < len(argv) else "")
            try:
                val[name] = float(raw)
            except ValueError:
                pass
    if not val:
        return not_checked("sampling_settings", w, "the benchmark command (its --temperature / --top-k)",
                           "the launch command sets no sampling defaults")
    if val.get("top_k") == 1 and val.get("temperature", 0) > 0:
        return Finding("sampling_settings", "confirmed", f"top_k 1 with temperature {val['temperature']:g}: the run "
                       "is greedy whatever the temperature says", val, w, fix="unset top_k (or -1) for sampled runs",
                       source="vllm PR#40269; EAGLE#329")
    return Finding("sampling_settings", "ruled out", "sampling settings are consistent", val, w)


def _quantized(art: Artifacts) -> Finding:
    w = f"{WHERE}.quantization"
    if art.target_info is None:
        return not_checked("quantized_target", w, NEEDS["target"])
    raw = dict(art.target_info.raw)
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    if not q:
        return Finding("quantized_target", "ruled out", "the target config declares no quantization", {}, w)
    ev = {"quant_method": q.get("quant_method") if isinstance(q, dict) else str(q)}
    if art.data is not None and len(art.data):
        ev["training_states_dtype"] = str(art.data[0].aux.dtype).replace("torch.", "")
    return Finding("quantized_target", "suspected", f"the target is quantized ({ev['quant_method']}) while drafts "
                   "are trained on bf16 states: compare a recapture with the training data (checks.drift)", ev, w,
                   fix="train (or fine-tune) the draft on the quantized target's hidden states",
                   source="vllm#9534; vllm-ascend#5974")


def _hidden(art: Artifacts) -> Finding:
    w = f"{WHERE}.hidden_size"
    need = art.missing("draft", "target")
    if need:
        return not_checked("hidden_size_mismatch", w, need)
    cfg, t = art.draft_cfg, art.target_info
    ev = {"draft_hidden_size": cfg.hidden_size, "draft_target_hidden_size": cfg.target_hidden_size,
          "target_hidden_size": t.hidden_size}
    if cfg.target_hidden_size != t.hidden_size:
        return Finding("hidden_size_mismatch", "confirmed", f"the draft's fc takes slots of {cfg.target_hidden_size}, "
                       f"the target's hidden size is {t.hidden_size}", ev, w,
                       fix="a draft trained for this target (or set target_hidden_size if only the config is wrong)",
                       source="sglang PR#4716; vllm#18906")
    note = "" if cfg.hidden_size == t.hidden_size else f" (fc bridges {t.hidden_size} -> {cfg.hidden_size})"
    return Finding("hidden_size_mismatch", "ruled out", "the draft's slot width matches the target" + note, ev, w)


# the causes check_launch reports (checks.judge: what a broken check reports as not checked)
LAUNCH_CAUSES = ('wrong_method', 'lossy_threshold', 'sampling_settings', 'quantized_target', 'hidden_size_mismatch')


def check_launch(art: Artifacts) -> list[Finding]:
    """Findings on the launch command and the draft/target pairing."""
    return [_method(art), _lossy(art), _sampling(art), _quantized(art), _hidden(art)]


@contract("launch", LAUNCH_CAUSES, parts=("serving", "engine-free"))
def judge_launch(art: Artifacts, opts: Options) -> list[Finding]:
    """The launch command's method, thresholds, sampling and sizes."""
    return check_launch(art)
