"""One entry point: every contract check on whatever inputs are given; a missing input narrows, never fails.

    findings = run_checks(draft="d/", target="t/", data="data/", launch="python -m sglang.launch_server ...",
                          engine="sglang", engine_version="0.5.6")
    causes.findings_frame(findings)      # one row per finding, for a notebook table
Checks that need replay evidence run it on `replay_n` training samples (0 = config-level only, the default);
the cheap measurements run whenever their inputs are given (RoPE: a draft-vs-target difference is replayed under
both on `rope.REPLAY_N` samples or `replay_n`, whichever is more; context: training samples past the draft's
max_position_embeddings on `context.REPLAY_N`).
"""
from __future__ import annotations


from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from .context import REPLAY_N as CONTEXT_REPLAY_N, check_context, check_window
from .draft_serving import check_draft_serving
from .embedding import check_embedding
from .flags import check_flags, check_norm_meaning
from .inputs import read_artifacts, with_identified_layout
from .launch import check_launch
from .launch_flags import check_launch_flags
from .layer_ids import check_layer_ids
from .rope import REPLAY_N as ROPE_REPLAY_N, check_rope
from .template import check_template
from .vocab import check_d2t
from .weights import check_weights
from ..progress import track

# check name -> (function of (artifacts, options) -> findings, the causes it reports)
CHECKS = {
    "layer_ids": (lambda a, o: check_layer_ids(a, o["engine"], o["engine_version"], o["engine_runner"]),
                  ("missing_layer_ids", "layer_id_off_by_one", "aux_layout_mismatch", "final_norm_slot")),
    "flags": (lambda a, o: check_flags(a, o["engine"], o["engine_version"], o["replay_n"]),
              ("dropped_variant_flags",)),
    "rope": (lambda a, o: check_rope(a, max(o["replay_n"], ROPE_REPLAY_N)), ("rope_mismatch",)),
    "context": (lambda a, o: check_context(a, replay_n=max(o["replay_n"], CONTEXT_REPLAY_N), engine=o["engine"],
                                           engine_version=o["engine_version"], engine_runner=o["engine_runner"]),
                ("short_context",)),
    "embedding": (lambda a, o: check_embedding(a, o["engine"]), ("wrong_embedding", "lm_head_missing")),
    "launch": (lambda a, o: check_launch(a), ("wrong_method", "lossy_threshold", "sampling_settings",
                                              "quantized_target", "hidden_size_mismatch")),
    "weights": (lambda a, o: check_weights(a, o["engine"], o["engine_version"]), ("weights_dropped",)),
    "template": (lambda a, o: check_template(a), ("chat_template_mismatch",)),
    "vocab": (lambda a, o: check_d2t(a), ("d2t_mapping",)),
    "drift": (lambda a, o: _drift(a, o["replay_n"], o["target_model"], o["device"]), ("target_drift",)),
    "norm_meaning": (lambda a, o: check_norm_meaning(a, o["replay_n"]), ("fc_norm_conflict", "specforge_norm_output")),
    "window": (lambda a, o: check_window(a), ("draft_window_ignored",)),
    "launch_flags": (lambda a, o: check_launch_flags(a), ("prefix_cache_stale_kv", "dp_attention", "lora_target",
                                                         "structured_output", "chunked_prefill_boundary",
                                                         "mrope_draft_extend", "trtllm_acceptance_gate")),
    "draft_serving": (lambda a, o: check_draft_serving(a), ("rejection_method", "adaptive_depth",
                                                           "quantized_draft_graphs", "kv_cache_dtype")),
}
# a check that runs whenever the one it is part of is asked for by name (`only=("launch",)` runs launch_flags too),
# so callers that name the older checks get the field-causes.md rows 20-33 that read the same inputs
PART_OF = {"norm_meaning": "flags", "window": "context", "launch_flags": "launch", "draft_serving": "launch"}
# the checks that read the trained layout: with replay evidence, the training data's slots are identified against
# the target's own boundaries first (one recapture, shared with the drift check)
USES_TRAINED_LAYOUT = ("layer_ids", "drift")


def _drift(art, n: int, model=None, device: str = "cpu"):
    """The recapture check runs the whole target: only when replay evidence is asked for (n > 0)."""
    if n <= 0:
        return [not_checked("target_drift", "checks.drift", "replay_n > 0 (a recapture of training samples "
                            "through the target)")]
    from .drift import check_drift
    return check_drift(art, n=n, model=model, device=device)


def _identified(art, names, replay_n: int, device: str = "cpu"):
    """(art with the trained layout identified by recapture, the loaded target model) when replay evidence is
    asked for and a check that reads the layout runs; else (art, None). A target that will not load is left to
    the drift check to report."""
    if replay_n <= 0 or not art.target_path or art.data is None or not set(names) & set(USES_TRAINED_LAYOUT):
        return art, None
    from ..hidden.capture import load_target_model
    try:
        model = load_target_model(art.target_path, device=device)
    except Eagle3Error:
        return art, None
    return with_identified_layout(art, model), model


def _engine(engine, launch):
    """The engine named, else the launch command's (none when its speculative settings could not be read: what
    the engine does with a draft it may not even load is not evidence)."""
    if engine:
        return engine.lower()
    return None if launch is None or launch.speculation_unread else launch.engine


def run_checks(draft=None, target=None, data=None, launch=None, training_config=None, engine=None,
               engine_version=None, served_prompts=None, progress=None, *, replay_n: int = 0,
               only=None, engine_runner: str | None = None, device: str = "cpu") -> list[Finding]:
    """Every check (or those named in `only`, with the checks PART_OF them) on the inputs given; each returns
    Findings, never raises. A recapture runs the target on `device` (the process's one copy of it)."""
    art = read_artifacts(draft, target, data, launch, training_config, served_prompts, engine=engine)
    names = [n for n in CHECKS if only is None or n in only or (n in PART_OF and PART_OF[n] in only)]
    art, model = _identified(art, names, int(replay_n), device)
    opts = {"engine": _engine(engine, art.launch), "engine_version": engine_version, "replay_n": int(replay_n),
            "target_model": model, "engine_runner": engine_runner, "device": device}
    out: list[Finding] = []
    for name in track(names, desc="checks", progress=progress, unit="check"):
        fn, causes = CHECKS[name]
        try:
            out.extend(fn(art, opts))
        except Exception as e:   # noqa: BLE001 - a check that breaks reports it and the others still run
            out.extend(not_checked(c, f"checks.{name}", "a check that runs on these inputs",
                                   f"the check failed: {type(e).__name__}: {str(e)[:200]}") for c in causes)
    return out
