"""Check 5, embedding and lm_head: a draft that ships `embed_tokens` is compared with the target's row by row
(identical / scaled / permuted / different) and each engine's choice is named (`engines.facts` topic "embed"); a
draft without `lm_head`; vocab sizes that differ only by padding. Only the two embedding tensors are read.

Causes: wrong_embedding, lm_head_missing. Usage: ``check_embedding(art, engine="vllm")``.
"""
from __future__ import annotations

import torch

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..engines import facts as engine_facts
from ..engines.versions import SERVING_ENGINES, engine_title
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.embedding"
EMBED_KEYS = ("embed_tokens.weight", "model.embed_tokens.weight", "layers.0.embed_tokens.weight")
HEAD_KEYS = ("lm_head.weight", "model.lm_head.weight", "eagle_lm_head.weight")
ROWS = 4096      # rows compared (evenly spaced); enough to tell the four cases apart
SEARCH = 256     # rows searched for elsewhere in the target's table (the permutation test)


def compare_rows(draft: torch.Tensor, target: torch.Tensor, rows: int = ROWS) -> dict:
    """How the draft's embedding relates to the target's: relation identical / scaled / permuted / different,
    with the mean row cosine, the norm ratio (mean, spread) and the fraction of rows matched elsewhere."""
    if draft.shape != target.shape:
        return {"relation": "different", "draft_shape": list(draft.shape), "target_shape": list(target.shape)}
    idx = torch.linspace(0, draft.shape[0] - 1, min(rows, draft.shape[0])).long()
    a, b = draft[idx].float(), target[idx].float()                        # (R, H) sampled rows
    if torch.equal(a, b) or torch.allclose(a, b, rtol=1e-3, atol=1e-6):
        return {"relation": "identical", "rows_compared": len(idx), "cosine": 1.0, "norm_ratio": 1.0}
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1)           # (R,)
    ratio = a.norm(dim=-1) / b.norm(dim=-1).clamp(min=1e-12)             # (R,)
    ev = {"rows_compared": len(idx), "cosine": float(cos.mean()), "norm_ratio": float(ratio.mean()),
          "norm_ratio_spread": float(ratio.std() / ratio.mean().clamp(min=1e-12))}
    if float(cos.min()) > 0.999 and ev["norm_ratio_spread"] < 1e-2:
        return {"relation": "scaled", **ev}
    probe = idx[:SEARCH]                                                # a permutation is seen on a few rows
    an = torch.nn.functional.normalize(a[:SEARCH], dim=-1)              # (S, H)
    tn = torch.nn.functional.normalize(target.float(), dim=-1)          # (V, H)
    best = (an @ tn.T).max(dim=-1)                                      # (S, H) x (H, V) -> (S, V) -> (S,)
    moved = (best.values > 0.999) & (best.indices != probe)
    ev["rows_found_elsewhere"] = float(moved.float().mean())
    return {"relation": "permuted" if ev["rows_found_elsewhere"] > 0.5 else "different", **ev}


HEAD = ("present", "borrowable")       # lm_head_missing's aspects a draft's own head (or its absence) decides
EMBED = ("the embedding the engine feeds",)


def _present(tensors, keys) -> str | None:
    return next((k for k in keys if k in tensors), None)


def _engine_use(cfg) -> dict[str, str]:
    """Which embedding each serving engine feeds the draft when it ships its own, by its `embed` rows: its own
    (own_embed_used), or the target's unless the widths differ and it shares none then (shared_when_widths_differ)."""
    bridged = cfg.target_hidden_size != cfg.hidden_size
    out = {}
    for e in SERVING_ENGINES:
        own, wide = (engine_facts.fact(e, "embed", s) for s in ("own_embed_used", "shared_when_widths_differ"))
        out[e] = ("not known (no embed own_embed_used row)" if own is None else
                  f"the draft's own when it differs ({own.source})" if own.reads else
                  "the draft's own (target_hidden_size != hidden_size: not shared)"
                  if bridged and wide is not None and wide.reads is False else f"the target's ({own.source})")
    return out


def _bridged_without_embedding(cfg, engine: str | None, use: dict) -> Finding:
    """A draft whose width differs from the target's ships no embed_tokens: each engine's fact row says whether it
    still gets the target's embedding; the engine given (else every engine) sharing none: confirmed, it runs its own,
    never loaded; an engine whose row is unknown: suspected."""
    asked = (engine,) if engine else SERVING_ENGINES
    rows = {e: engine_facts.fact(e, "embed", "shared_when_widths_differ") for e in asked}
    unshared = [e for e, r in rows.items() if r is not None and r.reads is False]
    status = "confirmed" if len(unshared) == len(asked) else "suspected"
    who = " and ".join(engine_title(e) for e in unshared) or "the engine"
    unknown = ", ".join(e for e in asked if e not in unshared)
    return Finding("wrong_embedding", status, "the draft ships no embed_tokens but bridges widths (H "
                   f"{cfg.hidden_size} vs Ht {cfg.target_hidden_size}): {who} then share{'s' * (len(unshared) < 2)} "
                   "no embedding, the draft runs its own, never loaded", {"ships_embed": False, "engines": use,
                                                                          "unshared_by": unshared}, WHERE,
                   fix="ship the embedding the draft was trained with", aspects=EMBED,
                   needs=f"whether {unknown} shares the target's embedding with a draft of another width" if unknown
                   else "",
                   source="; ".join(r.source for r in rows.values() if r is not None))


def _embedding(art: Artifacts, engine: str | None) -> Finding:
    cfg, tensors = art.draft_cfg, art.tensors
    key = _present(tensors, EMBED_KEYS)
    use = _engine_use(cfg)
    if key is None:
        if cfg.target_hidden_size != cfg.hidden_size:
            return _bridged_without_embedding(cfg, engine, use)
        return Finding("wrong_embedding", "ruled out", "the draft ships no embed_tokens: engines share the target's",
                       {"ships_embed": False}, WHERE,
                       aspects=EMBED)
    if art.target_path is None:
        return not_checked("wrong_embedding", WHERE, NEEDS["target_weights"], f"the draft ships {key}; comparing "
                           "it needs the target's embedding", aspects=EMBED)
    try:
        own = art.draft_tensors(key)[key]
        tgt = art.target_tensor("embed")
    except Eagle3Error as e:
        return not_checked("wrong_embedding", WHERE, NEEDS["target_weights"], f"cannot read an embedding: {e}",
                           aspects=EMBED)
    rel = compare_rows(own, tgt)
    ev = {"ships_embed": True, "key": key, **rel, "engines": use}
    if rel["relation"] == "identical":
        return Finding("wrong_embedding", "ruled out", "the draft's embed_tokens equals the target's", ev, WHERE,
                       aspects=EMBED)
    what = {"scaled": f"the target's scaled by {rel.get('norm_ratio', 0):.4g}", "permuted": "the target's rows "
            "permuted", "different": "not the target's"}[rel["relation"]]
    if engine is not None and use.get(engine, "not known").startswith("not known"):
        return not_checked("wrong_embedding", WHERE, f"{engine_title(engine)}'s embed own_embed_used row (engine "
                           "facts)", f"the draft's embed_tokens is {what}; whether {engine_title(engine)} uses it is "
                           "not known", aspects=EMBED)
    used = engine is not None and "own" in use.get(engine, "")
    status = "suspected" if engine is None else ("confirmed" if used else "ruled out")
    summary = f"the draft's embed_tokens is {what}; " + (
        f"{engine} uses it" if used else f"{engine} replaces it with the target's" if engine else
        ", ".join(f"{engine_title(e)} would {'use' if 'own' in u else 'replace'} it" for e, u in use.items()
                  if not u.startswith("not known")))
    rows = [engine_facts.fact(e, "embed", "own_embed_used") for e in SERVING_ENGINES]
    return Finding("wrong_embedding", status, summary, ev, WHERE, fix="drop embed_tokens from the draft (or "
                   "replace it with the target's)" if status != "ruled out" else "",
                   source="; ".join([r.source for r in rows if r is not None] + ["TorchSpec#38"]), aspects=EMBED)


def _lm_head(art: Artifacts, engine: str | None) -> Finding:
    cfg, raw = art.draft_cfg, dict(art.draft_raw)
    key = _present(art.tensors, HEAD_KEYS)
    w = f"{WHERE}.lm_head"
    ev = {"lm_head_key": key, "draft_vocab_size": cfg.draft_vocab_size, "vocab_size": cfg.vocab_size,
          "draft_vocab_size_in_config": "draft_vocab_size" in raw}
    if key is not None:
        return Finding("lm_head_missing", "ruled out", f"the draft ships {key}: no engine borrows a head", ev, w,
                       aspects=HEAD)
    from .loaded_keys import weights_file
    file = weights_file(art)
    ev.update(file=file, key="lm_head.weight", expected=[cfg.draft_vocab_size, cfg.hidden_size], found=None)
    verdict, rows = _borrowed_by(raw)
    if cfg.draft_vocab_size < cfg.vocab_size:
        sliced = {e: engine_facts.fact(e, "lm_head", "borrowed_head_sliced_to_draft_vocab") for e in verdict}
        heads = [f"{engine_title(e)} " + ("keeps a random head" if b is False else "(not known)" if b is None else
                                          f"the target's first {cfg.draft_vocab_size} rows" if sliced[e] else
                                          "the target's head") for e, b in verdict.items()]
        return Finding("lm_head_missing", "confirmed", f"{file}: key 'lm_head.weight' expected "
                       f"[{cfg.draft_vocab_size}, {cfg.hidden_size}], found nothing: a reduced vocab "
                       f"({cfg.draft_vocab_size} of {cfg.vocab_size}) has no head to borrow: {', '.join(heads)} "
                       f"(they score target ids 0..{cfg.draft_vocab_size - 1}, not the draft vocab)", ev,
                       w, fix="ship the trained lm_head.weight", aspects=HEAD,
                       source="; ".join([r.source for r in rows] + [r.source for r in sliced.values() if r]))
    ev["borrowed_by"] = verdict
    src = "; ".join(r.source for r in rows)
    if engine is not None and verdict.get(engine) is None:
        return not_checked("lm_head_missing", w, f"{engine_title(engine)}'s lm_head borrow row (engine facts)",
                           f"no lm_head: whether {engine_title(engine)} borrows the target's is not known",
                           aspects=HEAD)
    if engine is None:
        st = "ruled out" if all(verdict.values()) else "suspected"
    else:
        st = "ruled out" if verdict[engine] else "confirmed"
    keep = [engine_title(e) for e, b in verdict.items() if b is False]
    return Finding("lm_head_missing", st, "no lm_head and a full vocab: " + (
        "every engine borrows the target's" if all(verdict.values()) else
        f"{' and '.join(keep)} borrow{'s' * (len(keep) < 2)} the target's only when draft_vocab_size is unset, else "
        f"leave{'s' * (len(keep) < 2)} a random head" if keep else "whether every engine borrows the target's is not "
        "known"), ev, w, fix="" if st == "ruled out" else "remove draft_vocab_size from the config, or ship "
        "lm_head.weight", source=src, aspects=HEAD)


def _borrowed_by(raw: dict) -> tuple[dict, list]:
    """Does each serving engine give a draft without lm_head the target's head? By its `lm_head` row: always
    (borrow_when_absent), or only when the config leaves draft_vocab_size unset (borrow_when_draft_vocab_unset);
    None where it has neither row. Returns ({engine: bool | None}, the rows)."""
    verdict, rows = {}, []
    for e in SERVING_ENGINES:
        always, unset = (engine_facts.fact(e, "lm_head", s) for s in ("borrow_when_absent",
                                                                         "borrow_when_draft_vocab_unset"))
        if always is not None and always.reads:
            verdict[e] = True
            rows.append(always)
        elif unset is not None and unset.reads:
            verdict[e] = "draft_vocab_size" not in raw
            rows.append(unset)
        else:
            verdict[e] = None
    return verdict, rows


def _vocab(art: Artifacts) -> list[Finding]:
    w = f"{WHERE}.vocab"
    if art.target_info is None:
        return [not_checked("lm_head_missing", w, NEEDS["target"], aspects=("padded vocab",)),
                not_checked("wrong_embedding", w, NEEDS["target"], aspects=("vocab / tokenizer",))]
    dv, tv = art.draft_cfg.vocab_size, art.target_info.vocab_size
    ev = {"draft_vocab_size_V": dv, "target_vocab_size": tv}
    if dv == tv:
        return [Finding("lm_head_missing", "ruled out", "draft and target vocab sizes agree: nothing padded", ev, w,
                        aspects=("padded vocab",)),
                Finding("wrong_embedding", "ruled out", f"draft and target share one vocab size ({tv})", ev, w,
                        aspects=("vocab / tokenizer",))]
    padded = abs(dv - tv) <= 1024 and (max(dv, tv) % 64 == 0)
    if padded:
        return [Finding("lm_head_missing", "suspected", f"vocab sizes {dv} (draft) vs {tv} (target) differ by "
                        "padding only: engines that share embedding / lm_head by shape will not share them", ev, w,
                        fix="write the target's vocab_size into the draft config", source="field-causes.md #7; "
                        "SpecForge PR#473", aspects=("padded vocab",)),
                Finding("wrong_embedding", "ruled out", f"vocab sizes {dv} vs {tv} differ by padding only: one "
                        "tokenizer", ev, w, aspects=("vocab / tokenizer",))]
    return [Finding("wrong_embedding", "confirmed", f"vocab sizes {dv} (draft) vs {tv} (target): the draft was built "
                    "for another tokenizer", ev, w, fix="use the draft trained for this target",
                    aspects=("vocab / tokenizer",)),
            Finding("lm_head_missing", "ruled out", f"vocab sizes {dv} vs {tv} differ by more than padding "
                    "(wrong_embedding: another tokenizer)", ev, w, aspects=("padded vocab",))]


# the causes check_embedding reports (checks.judge: what a broken check reports as not checked)
EMBEDDING_CAUSES = ('wrong_embedding', 'lm_head_missing')


def check_embedding(art: Artifacts, engine: str | None = None) -> list[Finding]:
    """Findings on the embedding the draft gets, its lm_head and the vocab sizes."""
    need = art.missing("draft", "weights")
    if need:
        return [not_checked("wrong_embedding", WHERE, need), not_checked("lm_head_missing", WHERE, need)]
    eng = engine.lower() if engine and engine.lower() in SERVING_ENGINES else None
    return [_embedding(art, eng), _lm_head(art, eng), *_vocab(art)]


@contract("embedding", EMBEDDING_CAUSES, parts=("artifacts", "serving"))
def judge_embedding(art: Artifacts, opts: Options) -> list[Finding]:
    """The embedding and lm_head for the engine asked about."""
    return check_embedding(art, opts.engine)
