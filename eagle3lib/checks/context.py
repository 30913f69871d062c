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


def check_context(art: Artifacts, n: int = 32, replay_n: int = 0) -> list[Finding]:
    """One finding: is the draft's declared context shorter than what it is trained on / served with?"""
    need = art.missing("draft")
    if need:
        return [not_checked("short_context", WHERE, need)]
    draft_mp = max_position(dict(art.draft_raw))
    target_mp = max_position(dict(art.target_raw)) if art.target_raw is not None else None
    data = data_lengths(art, n)
    served = served_lengths(art.served_prompts, _tokenizer(art)) if art.served_prompts else None
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
