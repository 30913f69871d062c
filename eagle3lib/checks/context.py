"""Check 4, context length: the draft config's `max_position_embeddings` against the target's, the lengths in the
training data and the served prompts. Training samples longer than the declared context are measured whenever the
draft's weights, the target and the data are given: step-0 accuracy within and past the declared context
(`evidence.accuracy_by_position`, two buckets), then served as each engine serves those positions (`served_past`,
from the engine facts: SGLang and vLLM's V2 runner draft on, vLLM 0.32's V1 runner stops drafting, every draft
rejected). The named engine's answer decides; with none named, the answer per engine, decided when they agree.

Cause: short_context. Usage: ``check_context(art, engine="vllm", engine_runner="v1")``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..engines import facts as engine_facts
from ..engines.versions import engine_title
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.context"
REPLAY_N = 8          # training samples replayed by default for the accuracy past the declared context
FALL = 0.5            # served accuracy past the context under FALL x the accuracy within it: confirmed
MEASUREMENT = ("replay of the training samples: step-0 accuracy within and past the draft's "
               "max_position_embeddings, served past it as the engine does")


def max_position(raw) -> int | None:
    """max_position_embeddings of a config (speculators: transformer_layer_config; None when absent)."""
    body = raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict) else raw
    v = body.get("max_position_embeddings")
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def data_lengths(art: Artifacts, n: int = 32) -> list[int]:
    """Token counts of up to `n` training samples (a fixed-seed sample of the data)."""
    if art.data is None:
        return []
    return [s.num_tokens for s in art.data.sample(min(n, len(art.data)), 0)]


def served_lengths(prompts, tokenizer=None) -> list[int] | None:
    """Token counts of served prompts given as ints, token-id lists or strings (strings need the tokenizer)."""
    out = []
    for p in prompts:
        if isinstance(p, int) and not isinstance(p, bool):
            out.append(int(p))
        elif isinstance(p, (list, tuple)):
            out.append(len(p))
        elif isinstance(p, str) and tokenizer is not None:
            out.append(len(tokenizer(p, add_special_tokens=False)["input_ids"]))
        else:
            return None
    return out


def accuracy_within_and_past(rows, draft_mp) -> dict:
    """{'before', 'past', 'positions_past'}: the position-weighted accuracy of the replay rows (bucket, positions,
    acc) that start within the draft's context and past it (None where no row does)."""
    def mean(sel):
        n = sum(r["positions"] for r in sel)
        return sum(r["acc"] * r["positions"] for r in sel) / n if n else None
    lo = lambda r: int(r["bucket"].split("-")[0].rstrip("+"))   # noqa: E731
    past = [r for r in rows or () if draft_mp is not None and lo(r) >= draft_mp]
    return {"before": mean([r for r in rows or () if draft_mp is not None and lo(r) < draft_mp]),
            "past": mean(past), "positions_past": sum(r["positions"] for r in past)}


STOPS = "stops_drafting_past_max_position_embeddings"     # the context rows: [@runner] where a runner decides


def servings() -> tuple[tuple[str, str | None], ...]:
    """The ways the known engines serve past the draft's context, (engine, model runner or None), in the order of
    their rows of the engine facts (topic "context", subject STOPS[@runner])."""
    return tuple((f.engine, f.subject.partition("@")[2] or None) for f in engine_facts.facts("context")
                 if f.subject.partition("@")[0] == STOPS)


def served_past(engine: str, runner: str | None = None, version: str | None = None) -> str | None:
    """How `engine` (with its model `runner` where its rows name runners: vLLM "v1" / "v2") serves positions past the
    draft's max_position_embeddings, from the engine facts: "drafts on" or "stops drafting"; None when unknown (no
    row, a runner not named where the rows name runners, or a version the row does not place).

    No third mode ("cut": the context truncated to the draft's positions) is scored: no engine fact records an
    engine that truncates (engines/facts.py, topic "context": SGLang drafts on, vLLM raises the draft's rotary
    positions to the target's and its V1 runner stops drafting past the draft's max_model_len). One is added here
    only with a fact that has a source."""
    named = [r for e, r in servings() if e == engine]      # the runners its rows name (None: a row for all)
    if runner is not None and runner in named:
        subject = f"{STOPS}@{runner}"
    elif None in named:
        subject = STOPS
    else:
        return None
    stops = engine_facts.reads(engine, "context", subject, version)
    return None if stops is None else "stops drafting" if stops else "drafts on"


def _past_context(art: Artifacts, draft_mp: int, n: int) -> dict:
    """The replay's step-0 accuracy within and past the declared context ({} when it cannot run: no weights)."""
    if n <= 0 or not art.draft_path or not art.target_path or not art.tensors or art.data is None:
        return {}
    from ..replay.evidence import accuracy_by_position
    try:
        table = accuracy_by_position(art.replay_setup, art.data, n=n,
                                     buckets=(0, draft_mp))
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}
    rows = table[["bucket", "positions", "acc"]].to_dict("records")
    return {"accuracy_by_position": rows, **accuracy_within_and_past(rows, draft_mp), "replayed_samples":
            min(n, len(art.data)), "measurement": MEASUREMENT}


def _served_answers(measured: dict, engine: str | None, version, runner) -> dict[str, dict]:
    """{'sglang' / 'vllm v1' / ...: {'serves', 'acc_0_past_served', 'falls'}} for the engine named (each vLLM
    runner when its runner is not known), else for every way the known engines serve past the context."""
    ways = [w for w in servings() if engine is None or w[0] == engine]
    if runner and any(r for _, r in ways):           # the engine's rows name runners: the one named
        ways = [(engine, runner.lower())]
    out = {}
    for eng, run in ways:
        mode = served_past(eng, run, version)
        acc = None if mode is None else 0.0 if mode == "stops drafting" else measured["past"]
        out[eng + (f" {run}" if run else "")] = {"serves": mode, "acc_0_past_served": acc, "falls": None if acc is
                                                 None else bool(acc < FALL * measured["before"])}
    return out


def _measured_finding(ev: dict, draft_mp: int, engine, answers: dict[str, dict]) -> Finding:
    """short_context decided by the replay past the declared context, served as each engine in `answers` does."""
    m = f"step-0 accuracy {ev['before']:.3f} within the draft's {draft_mp} positions, {ev['past']:.3f} past them " \
        f"(replayed, {ev['positions_past']} positions)"
    said = "; ".join(f"{k} {a['serves'] or 'unknown'}: {a['acc_0_past_served']:.3f}" if a["acc_0_past_served"]
                     is not None else f"{k}: unknown" for k, a in answers.items())
    ev = {**ev, "served_past_context": answers}
    src = "; ".join(f.source for f in engine_facts.facts("context"))
    falls = {a["falls"] for a in answers.values()}
    if falls == {True}:
        return Finding("short_context", "confirmed", f"{m}; served past them: {said}", ev, WHERE, fix="raise "
                       "max_position_embeddings in the draft config to the served context (the engine then drafts "
                       "there), and train on samples that long", source=src, measured=True)
    if falls == {False}:
        return Finding("short_context", "ruled out", f"{m}; served past them: {said} (the draft holds up past its "
                       "declared context)", ev, WHERE, source=src, measured=True)
    need = NEEDS["engine"] if engine is None else "the vLLM model runner (the server's startup log; CPU builds run V1)"
    return Finding("short_context", "suspected", f"{m}; served past them the engines differ: {said}", ev, WHERE,
                   fix="raise max_position_embeddings to the served context", needs=need, source=src, measured=True)


def _tokenizer(art: Artifacts):
    if not art.target_path:
        return None
    try:
        return art.tokenizer
    except (Eagle3Error, OSError, ValueError):
        return None


def served_prompt_lengths(art: Artifacts) -> list[int] | None:
    """Token counts of the served prompts given (text counted with the target's tokenizer); None when none were given
    or text cannot be counted without a tokenizer."""
    return served_lengths(art.served_prompts, _tokenizer(art)) if art.served_prompts else None


ALLOW_LONGER = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"    # SGLang's switch past its draft-context refusal


def _refused_at_start(art: Artifacts, engine, version, draft_mp, target_mp) -> Finding | None:
    """short_context confirmed when the serving engine, at its version, refuses a draft context below the target's
    (its context row refuses_draft_context_below_target: SGLang's) and the launch does not set the variable that
    allows it (SGLang's ALLOW_LONGER): the server does not start. None otherwise."""
    eng = (engine or (art.launch.engine if art.launch is not None else "") or "").lower()
    row = engine_facts.fact(eng, "context", "refuses_draft_context_below_target") if eng else None
    if row is None or draft_mp is None or target_mp is None or draft_mp >= target_mp:
        return None
    if art.launch is not None and str(art.launch.env.get(ALLOW_LONGER, "")).lower() in ("1", "true"):
        return None      # the switch the row's note names lets the server start
    if engine_facts.reads(eng, "context", row.subject, version) is not True:
        return None
    return Finding("short_context", "confirmed", f"the draft declares {draft_mp} positions, the target {target_mp}: "
                   f"{engine_title(eng)} {version} refuses such a draft at start-up ({row.note.split(';')[0]})",
                   {"draft_max_position_embeddings": draft_mp, "target_max_position_embeddings": target_mp,
                    "engine": eng, "version": version}, WHERE,
                   fix=f"set the draft's max_position_embeddings to {target_mp} when its RoPE was trained for it, or "
                       f"launch SGLang with {ALLOW_LONGER}=1 (it then drafts past the draft's positions)",
                   source=row.source)


# the causes check_context reports (checks.judge: what a broken check reports as not checked)
CONTEXT_CAUSES = ('short_context',)


def check_context(art: Artifacts, n: int = 32, replay_n: int = REPLAY_N, engine: str | None = None,
                  engine_version: str | None = None, engine_runner: str | None = None) -> list[Finding]:
    """One finding: is the draft's declared context shorter than what it is trained on / served with? Training
    samples past it are replayed (`replay_n` of them) and served as `engine` (each known engine when None) does."""
    need = art.missing("draft")
    if need:
        return [not_checked("short_context", WHERE, need)]
    draft_mp = max_position(dict(art.draft_raw))
    target_mp = max_position(dict(art.target_raw)) if art.target_raw is not None else None
    data = data_lengths(art, n)
    served = served_prompt_lengths(art)
    ev = {"draft_max_position_embeddings": draft_mp, "target_max_position_embeddings": target_mp,
          "data_max_len": max(data) if data else None, "data_samples": len(data),
          "served_max_len": max(served) if served else None}
    if art.served_prompts and served is None:
        ev["served_note"] = "served prompts given as text but no target tokenizer to count them"
    refused = _refused_at_start(art, engine, engine_version, draft_mp, target_mp)
    if refused is not None:
        return [refused]
    if draft_mp is not None and data and max(data) > draft_mp:    # trained past it: measure what is served there
        ev.update(_past_context(art, draft_mp, replay_n))
        if ev.get("before") is not None and ev.get("past") is not None:
            eng = (engine or "").lower() or None
            return [_measured_finding(ev, draft_mp, eng, _served_answers(ev, eng, engine_version, engine_runner))]
    if draft_mp is None:
        return [Finding("short_context", "suspected", "the draft config has no max_position_embeddings: engines use "
                        "their own default (Llama: 2048)", ev, WHERE, fix="write the target's max_position_embeddings "
                        "into the draft config", source="SpecForge PR#271")]
    src = "; ".join(f.source for f in engine_facts.facts("context"))
    if served and max(served) > draft_mp:
        return [Finding("short_context", "confirmed", f"served prompts reach {max(served)} tokens, the draft config "
                        f"declares {draft_mp} positions", ev, WHERE, fix="raise max_position_embeddings (and train "
                        "on long samples), or cap the served context", source=src)]
    if data and max(data) > draft_mp:
        return [Finding("short_context", "suspected", f"training samples reach {max(data)} tokens, the draft config "
                        f"declares only {draft_mp} positions (vLLM 0.32's V1 runner stops drafting past it, V2 "
                        "drafts on at positions it never trained)", ev, WHERE,
                        fix="set max_position_embeddings to at least the served context", source=src,
                        needs=f"{NEEDS['weights']} and {NEEDS['target']} (a replay past the declared context)")]
    if target_mp is not None and target_mp > draft_mp:
        needs = "" if served else NEEDS["served_prompts"]
        st = "ruled out" if served else "suspected"
        return [Finding("short_context", st, f"the draft declares {draft_mp} positions, the target {target_mp}"
                        + (f"; served prompts stay within ({max(served)})" if served else
                           ": prompts longer than the draft's context get few or no drafts"), ev, WHERE,
                        fix="" if served else "set the draft's max_position_embeddings to the target's",
                        needs=needs, source=src)]
    if target_mp is None and not served and not data:
        return [not_checked("short_context", WHERE, NEEDS["target"])]
    return [Finding("short_context", "ruled out", f"the draft declares {draft_mp} positions, enough for the target"
                    " and the lengths seen", ev, WHERE)]


# --- cause 23: the draft's own attention window against the target's, which engines have used instead ---

WINDOW_SUBJECT = "draft_sliding_window_read"   # the engine table's rows (topic "window") this check rests on


def window_source() -> str:
    """The check's `source`: the engine table's window rows (engines.facts, topic "window")."""
    return "; ".join(f"{f.engine}: {f.source} ({f.note})" for f in engine_facts.facts("window"))


def window_fix() -> str:
    """What to serve with: the versions (PRs) from which each engine reads the draft's own window."""
    prs = ", ".join(f.source for f in engine_facts.facts("window") if f.subject == WINDOW_SUBJECT)
    return f"serve with an engine version that reads the draft's window ({prs})"


def attention_window(raw) -> dict:
    """The sliding window a config declares: {'window': tokens or None, 'sliding_layers': [i, ...] or 'all',
    'interleaved': bool}. `use_sliding_window: false` (Qwen2) switches a given window off; speculators'
    transformer_layer_config is read."""
    body = raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict) else raw
    sw = body.get("sliding_window")
    sw = int(sw) if isinstance(sw, int) and not isinstance(sw, bool) and sw > 0 else None
    types = body.get("layer_types") if isinstance(body.get("layer_types"), list) else None
    if types:
        sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
        return {"window": sw if sliding else None, "sliding_layers": sliding,
                "interleaved": 0 < len(sliding) < len(types)}
    on = sw is not None and body.get("use_sliding_window") is not False
    return {"window": sw if on else None, "sliding_layers": "all" if on else [], "interleaved": False}


# the causes check_window reports (checks.judge: what a broken check reports as not checked)
WINDOW_CAUSES = ('draft_window_ignored',)


def check_window(art: Artifacts) -> list[Finding]:
    """One finding: does the draft's own attention window differ from the one an engine would take from the target?"""
    c, w = "draft_window_ignored", f"{WHERE}.window"
    need = art.missing("draft", "target")
    if need:
        return [not_checked(c, w, need)]
    d, t = attention_window(dict(art.draft_raw)), attention_window(dict(art.target_raw))
    target_mp = max_position(dict(art.target_raw))
    ev = {"draft": d, "target": t, "target_max_position_embeddings": target_mp}
    uniform = None if t["interleaved"] else t["window"]    # the one window a target-wide setting would carry
    if d["window"] is None:
        if uniform is not None and (target_mp is None or uniform < target_mp):
            return [Finding(c, "suspected", f"the draft declares full attention, the target a {uniform}-token "
                            "sliding window on every layer: an engine that takes the window from the target runs "
                            "the draft windowed, as it was not trained", ev, w, fix="compare the served accept length "
                            "on prompts longer than the window; give the draft config an explicit layer_types",
                            needs="the engine version", source=window_source())]
        why = ("the target's windows are per layer (interleaved)" if t["interleaved"] else
               "the target declares none either" if uniform is None else
               f"the target's window ({uniform}) covers its whole context")
        return [Finding(c, "ruled out", f"the draft declares full attention and {why}: nothing of the draft's own "
                        "for an engine to ignore", ev, w)]
    if uniform == d["window"] and not d["interleaved"]:
        return [Finding(c, "ruled out", f"draft and target share a {uniform}-token window: the draft attends as "
                        "trained whichever config the engine reads", ev, w)]
    return [Finding(c, "suspected", f"the draft declares a {d['window']}-token sliding window (layers "
                    f"{d['sliding_layers']}), the target {uniform or 'none'}"
                    + (" (per layer)" if t["interleaved"] else "") + ": an engine that ignores the draft's own "
                    "layer_types / sliding_window runs it with the target's, not as it was trained", ev, w,
                    fix=window_fix(), needs="the engine version",
                    source=window_source())]


@contract("context", CONTEXT_CAUSES, parts=("artifacts", "serving data"))
def judge_context(art: Artifacts, opts: Options) -> list[Finding]:
    """The context, replayed past the draft's on `REPLAY_N` samples or `replay_n`, as the engine asked about."""
    return check_context(art, replay_n=max(opts.replay_n, REPLAY_N), engine=opts.engine,
                         engine_version=opts.engine_version, engine_runner=opts.engine_runner)


@contract("window", WINDOW_CAUSES, part_of="context")
def judge_window(art: Artifacts, opts: Options) -> list[Finding]:
    """The draft's sliding window against the target's."""
    return check_window(art)
