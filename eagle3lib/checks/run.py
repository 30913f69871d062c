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
from .context import CONTEXT_CAUSES, REPLAY_N as CONTEXT_REPLAY_N, WINDOW_CAUSES, check_context, check_window
from .draft_serving import DRAFT_SERVING_CAUSES, check_draft_serving
from .draft_feed import DRAFT_FEED_CAUSES, check_draft_feed
from .drift import DRIFT_CAUSES, check_drift
from .embedding import EMBEDDING_CAUSES, check_embedding
from .flags import FLAGS_CAUSES, NORM_MEANING_CAUSES, check_flags, check_norm_meaning
from .inputs import read_artifacts, with_identified_layout
from .launch import LAUNCH_CAUSES, check_launch
from .launch_flags import LAUNCH_FLAGS_CAUSES, check_launch_flags
from .layer_ids import LAYER_IDS_CAUSES, check_layer_ids
from .rope import REPLAY_N as ROPE_REPLAY_N, ROPE_CAUSES, check_rope
from .runnable import RUNNABLE_CAUSES, check_runnable
from .template import TEMPLATE_CAUSES, check_template
from .vocab import VOCAB_CAUSES, check_d2t
from .weights import WEIGHTS_CAUSES, check_weights
from ..progress import track

# check name -> (function of (artifacts, options) -> findings, the causes it reports: each declared beside its check)
CHECKS = {
    "layer_ids": (lambda a, o: check_layer_ids(a, o["engine"], o["engine_version"], o["engine_runner"]),
                  LAYER_IDS_CAUSES),
    "flags": (lambda a, o: check_flags(a, o["engine"], o["engine_version"], o["replay_n"]), FLAGS_CAUSES),
    "rope": (lambda a, o: check_rope(a, max(o["replay_n"], ROPE_REPLAY_N)), ROPE_CAUSES),
    "context": (lambda a, o: check_context(a, replay_n=max(o["replay_n"], CONTEXT_REPLAY_N), engine=o["engine"],
                                           engine_version=o["engine_version"], engine_runner=o["engine_runner"]),
                CONTEXT_CAUSES),
    "embedding": (lambda a, o: check_embedding(a, o["engine"]), EMBEDDING_CAUSES),
    "launch": (lambda a, o: check_launch(a), LAUNCH_CAUSES),
    "weights": (lambda a, o: check_weights(a, o["engine"], o["engine_version"]), WEIGHTS_CAUSES),
    "template": (lambda a, o: check_template(a), TEMPLATE_CAUSES),
    "vocab": (lambda a, o: check_d2t(a), VOCAB_CAUSES),
    "drift": (lambda a, o: _drift(a, o["replay_n"], o["target_model"], o["device"]), DRIFT_CAUSES),
    "norm_meaning": (lambda a, o: check_norm_meaning(a, o["replay_n"]), NORM_MEANING_CAUSES),
    "window": (lambda a, o: check_window(a), WINDOW_CAUSES),
    "launch_flags": (lambda a, o: check_launch_flags(a), LAUNCH_FLAGS_CAUSES),
    "draft_serving": (lambda a, o: check_draft_serving(a), DRAFT_SERVING_CAUSES),
    "runnable": (lambda a, o: check_runnable(a, o["engine"]), RUNNABLE_CAUSES),
    "draft_feed": (lambda a, o: check_draft_feed(a, o["engine"], o["engine_version"], o["engine_runner"]),
                   DRAFT_FEED_CAUSES),
}
# a check that runs whenever the one it is part of is asked for by name (`only=("launch",)` runs launch_flags too),
# so callers that name the older checks get the field-causes.md rows 20-47 that read the same inputs
PART_OF = {"norm_meaning": "flags", "window": "context", "launch_flags": "launch", "draft_serving": "launch",
           "draft_feed": "launch", "runnable": "launch"}
# the checks that read the trained layout: with replay evidence, the training data's slots are identified against
# the target's own boundaries first (one recapture, shared with the drift check)
USES_TRAINED_LAYOUT = ("layer_ids", "drift")


def _drift(art, n: int, model=None, device: str = "cpu"):
    """The recapture check runs the whole target: only when replay evidence is asked for (n > 0)."""
    if n <= 0:
        return [not_checked("target_drift", "checks.drift", "replay_n > 0 (a recapture of training samples "
                            "through the target)")]
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
               only=None, engine_runner: str | None = None, device: str = "cpu",
               served_traffic=None) -> list[Finding]:
    """Every check (or those named in `only`, with the checks PART_OF them) on the inputs given; each returns
    Findings, never raises. A recapture runs the target on `device` (the process's one copy of it)."""
    art = read_artifacts(draft, target, data, launch, training_config, served_prompts, engine=engine,
                         served_traffic=served_traffic)
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
