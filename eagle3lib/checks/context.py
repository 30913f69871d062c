"""Check 4, context length: the draft config's `max_position_embeddings` against the target's, the lengths in the
training data and the served prompts; with replay, step-0 accuracy by position bucket (`evidence.accuracy_by_position`
gives the table, `evidence.position_plot` the figure).

Cause: short_context. Usage: ``check_context(art, n=32, replay_n=0)``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..engines import facts as engine_facts
from .inputs import NEEDS, Artifacts

WHERE = "checks.context"


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


def accuracy_falls_past(rows, draft_mp) -> dict | None:
    """{'before', 'past'} accuracies when positions past the draft's context are scored at under half the accuracy
    of those within it (None otherwise, or without the replay table)."""
    if not rows or draft_mp is None:
        return None
    def mean(sel):
        n = sum(r["positions"] for r in sel)
        return sum(r["acc"] * r["positions"] for r in sel) / n if n else None
    before = mean([r for r in rows if int(r["bucket"].split("-")[0].rstrip("+")) < draft_mp])
    past = mean([r for r in rows if int(r["bucket"].split("-")[0].rstrip("+")) >= draft_mp])
    if before is None or past is None or past >= 0.5 * before:
        return None
    return {"before": before, "past": past}


def _tokenizer(art: Artifacts):
    if not art.target_path:
        return None
    from ..model.target import load_tokenizer
    try:
        return load_tokenizer(art.target_path)
    except (Eagle3Error, OSError, ValueError):
        return None


def served_prompt_lengths(art: Artifacts) -> list[int] | None:
    """Token counts of the served prompts given (text counted with the target's tokenizer); None when none were given
    or text cannot be counted without a tokenizer."""
    return served_lengths(art.served_prompts, _tokenizer(art)) if art.served_prompts else None


def check_context(art: Artifacts, n: int = 32, replay_n: int = 0) -> list[Finding]:
    """One finding: is the draft's declared context shorter than what it is trained on / served with?"""
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
    if replay_n > 0 and art.draft_path and art.target_path and art.data is not None:
        from .evidence import accuracy_by_position, load_replay
        try:
            table = accuracy_by_position(load_replay(art.draft_path, art.target_path), art.data, n=replay_n)
            ev["accuracy_by_position"] = table[["bucket", "positions", "acc"]].to_dict("records")
        except Eagle3Error as e:
            ev["replay_error"] = str(e)[:200]
    falls = accuracy_falls_past(ev.get("accuracy_by_position"), draft_mp)
    if falls:
        ev["accuracy_past_context"] = falls
        return [Finding("short_context", "confirmed", f"step-0 accuracy falls from {falls['before']:.3f} to "
                        f"{falls['past']:.3f} past the draft's {draft_mp} positions", ev, WHERE,
                        fix="train on longer samples and raise max_position_embeddings", source="SpecForge PR#271")]
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
                        fix="set max_position_embeddings to at least the served context", source=src)]
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

WINDOW_SOURCE = ("speculators PR#684 (vLLM ignored the draft's layer_types / sliding_window and fell through to the "
                 "verifier's cache_config.sliding_window); read for Qwen3 EAGLE-3 drafts from vllm PR#47568, "
                 "SGLang EAGLE-3 SWA drafters from sglang PR#24664")


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
                            needs="the engine version", source=WINDOW_SOURCE)]
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
                    fix="serve with an engine version that reads the draft's window "
                    "(vllm PR#47568 for Qwen3 drafts, sglang PR#24664)", needs="the engine version",
                    source=WINDOW_SOURCE)]
