"""The one draft-run loop: prepared samples through the draft, yielding per-position predictions and their scores.

EAGLE-3 drafts run their K TTT steps (`ttt_forward`, teacher-forced, and draft-fed for the chain), a P-EAGLE draft
its K depths from one `parallel_forward` (its chain is that same forward); MLA attention lives inside either.
Every caller runs the draft through `draft_run`: the replay (counts), the token view (top-k), the accuracy by
position and the audit's forward preview. Usage:
    for r in draft_run(setup.model, items, num_steps=3): r.scored.correct   # (K, T) per item
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import LayoutError
from ..model.draft import Eagle3Draft
from ..model.peagle import PEagleDraft, resolve_mask_token_id
from .stats import D2T_MODES, ReplayItem, Scored, score, scored_positions, walk_rows


@dataclass(frozen=True, eq=False)
class DraftRun:
    """One item as the draft ran it: the teacher-forced (and chain) predictions as target ids, and their score."""
    item: ReplayItem
    teacher: Tensor                   # (K, T) target ids, teacher-forced top-1 (-1: not computed)
    chain: Tensor | None              # (K, T) target ids the chain drafted from t (None: not simulated)
    scored: Scored
    topk_ids: Tensor | None = None    # (K, T, topk) target ids, teacher-forced (with topk)
    topk_probs: Tensor | None = None  # (K, T, topk)


def draft_target_ids(model: Eagle3Draft, mode: str = "offsets") -> Tensor:
    """Target id of each draft id under a d2t reading: offsets (i + d2t[i]), absolute (d2t[i]) or identity (i)."""
    if mode not in D2T_MODES:
        raise LayoutError("d2t interpretation", "unknown mode", expected=D2T_MODES, found=mode)
    ar = torch.arange(model.d2t.numel(), device=model.d2t.device)
    ids = {"offsets": ar + model.d2t, "absolute": model.d2t, "identity": ar}[mode]
    return ids.clamp(0, model.cfg.vocab_size - 1)


@contextlib.contextmanager
def d2t_reading(model: Eagle3Draft, mode: str):
    """Temporarily make the model's d2t buffer mean `mode` (so chain drafting feeds those target ids)."""
    old = model.d2t
    model.d2t = draft_target_ids(model, mode) - torch.arange(old.numel(), device=old.device)
    try:
        yield model.d2t + torch.arange(old.numel(), device=old.device)
    finally:
        model.d2t = old


def draft_steps(model: Eagle3Draft, aux: Tensor, ids: Tensor, K: int, *, feed: str = "teacher",
                return_logits: bool = True, scored: Tensor | None = None, mask_token_id: int | None = None
                ) -> list[Tensor]:
    """The K outputs a replay scores: `ttt_forward` (TTT steps) for EAGLE-3, `parallel_forward` (depths) for a
    P-EAGLE draft, whose drafts are the same whichever `feed` (it feeds nothing back)."""
    if isinstance(model, PEagleDraft):
        return model.parallel_forward(aux, ids, K, return_logits=return_logits, scored=scored,
                                      mask_token_id=mask_token_id)
    return model.ttt_forward(aux, ids, K, feed=feed, return_logits=return_logits, scored=scored)


def draft_run(model: Eagle3Draft, items: Iterable[ReplayItem], *, num_steps: int = 3, d2t: str = "offsets",
              mask: str = "token", simulate: bool = True, topk: int = 0, only_scored: bool = True,
              batch_tokens: int = 8192, tokenizer=None, past_stop: bool = False) -> Iterator[DraftRun]:
    """Run `items` through the draft in right-padded batches of at most `batch_tokens` (B x T_max; 0: one at a
    time) and yield one `DraftRun` per item, in order.

    only_scored: the lm_head and the steps >= 1 run only where an output is scored (teacher: the scored positions
    of each step; chain: those whose earlier steps are all scored), -1 elsewhere; topk > 0 keeps the draft's top-k
    (full logits, so every output is computed). A P-EAGLE draft without a mask token gets the one its config or
    `tokenizer` names (model.peagle.resolve_mask_token_id). past_stop: the verification walk also verifies the token
    after an answer's last one (`stats.walk_rows`)."""
    mask_id = None
    if isinstance(model, PEagleDraft) and model.mask_token_id is None:
        mask_id = resolve_mask_token_id(model.cfg, tokenizer)[0]
    hot = draft_target_ids(model, d2t)
    in_vocab = torch.zeros(model.cfg.vocab_size, dtype=torch.bool)
    in_vocab[hot.cpu()] = True
    run = dict(K=num_steps, d2t=d2t, mask=mask, simulate=simulate, topk=topk, only_scored=only_scored,
               mask_id=mask_id, past_stop=past_stop)
    batch = []
    for item in items:
        padded = (len(batch) + 1) * max([len(item.ids)] + [len(b.ids) for b in batch])   # B x T_max
        if batch and padded > batch_tokens:
            yield from _batch(model, batch, hot, in_vocab, **run)
            batch = []
        batch.append(item)
    if batch:
        yield from _batch(model, batch, hot, in_vocab, **run)


def _batch(model, batch, hot, in_vocab, *, K, d2t, mask, simulate, topk, only_scored, mask_id,
           past_stop=False) -> list[DraftRun]:
    """One padded batch through the draft (under inference mode and the d2t reading), scored item by item."""
    B, T = len(batch), max(len(b.ids) for b in batch)
    dev, dt = model.fc.weight.device, model.fc.weight.dtype
    parallel = isinstance(model, PEagleDraft)
    with torch.inference_mode(), d2t_reading(model, d2t):
        if B == 1:                                              # nothing to pad: the item's own tensors
            ids, aux = batch[0].ids[None], batch[0].aux[None].to(dt)   # (T,) -> (1, T), (T, k*Ht) -> (1, T, k*Ht)
        else:
            ids = torch.zeros(B, T, dtype=torch.long)
            aux = torch.zeros(B, T, batch[0].aux.shape[1], dtype=dt)
            for i, b in enumerate(batch):                       # right padding: causal attention never sees it
                ids[i, :len(b.ids)], aux[i, :len(b.ids)] = b.ids, b.aux.to(dt)
        ids, aux = ids.to(dev), aux.to(dev)
        used = chain_used = None
        if only_scored and not topk:
            used = torch.zeros(K, B, T, dtype=torch.bool)
            walk = torch.zeros(K, B, T, dtype=torch.bool)          # the rows a serving engine verifies
            for i, b in enumerate(batch):
                used[:, i, :len(b.ids)] = scored_positions(b.ref, b.mask, K, mask, parallel)[1]
                walk[:, i, :len(b.ids)] = walk_rows(b.ref, b.mask, K, past_stop)
            chain_used = (used.long().cumprod(0).bool() | walk.long().cumprod(0).bool()).to(dev)   # (K, B, T)
            used = (used | walk).to(dev) if parallel else used.to(dev)   # P-EAGLE: its chain is the teacher run
        top_p = top_i = None
        if topk:
            logits = draft_steps(model, aux, ids, K, feed="teacher", mask_token_id=mask_id)   # K x (B, T, Vd)
            probs = torch.stack([lg.float().softmax(-1) for lg in logits])                    # (K, B, T, Vd)
            top_p, top_i = probs.topk(min(topk, probs.shape[-1]), dim=-1)                     # (K, B, T, topk)
            teach = top_i[..., 0]
        else:
            teach = torch.stack(draft_steps(model, aux, ids, K, feed="teacher", return_logits=False, scored=used,
                                            mask_token_id=mask_id))                          # (K, B, T)
        if not simulate:
            chain = None
        elif parallel:                 # one forward drafts all K: the chain is the teacher-forced run (used >= chain)
            chain = teach
        else:
            chain = torch.stack(model.ttt_forward(aux, ids, K, feed="draft", return_logits=False,
                                                  scored=chain_used))                       # (K, B, T)
    hot = torch.cat([hot, hot.new_full((1,), -1)]).to(dev)          # draft id -1 (not computed) -> target -1
    out = []
    for i, b in enumerate(batch):
        t = len(b.ids)
        pred, drafted = hot[teach[:, i, :t]].cpu(), hot[chain[:, i, :t]].cpu() if chain is not None else None
        sc = score(pred, b.ref, b.mask, in_vocab, drafted, mask, parallel, past_stop)
        out.append(DraftRun(b, pred, drafted, sc, hot[top_i[:, i, :t]].cpu() if topk else None,
                            top_p[:, i, :t].cpu() if topk else None))
    return out
