"""Draft-vocab maps: `d2t` (offsets, target_id = draft_id + d2t[draft_id]) and `t2d` (bool mask over target ids).

Built as EAGLE `scandata` / SpecForge `process_token_dict_to_mappings` do: count loss-masked target tokens,
keep the top N, sort them ASCENDING by target id, d2t[i] = used[i] - i. `check_vocab` explains every planted
fault a real checkpoint has shown (absolute ids stored as offsets, arange/zeros defaults, t2d out of sync...).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from ..errors import VocabError


def build_vocab_map(counts: Tensor, draft_vocab_size: int) -> tuple[Tensor, Tensor]:
    """(d2t int64 [Vd], t2d bool [V]) from per-target-id counts [V] of loss-masked tokens."""
    counts = torch.as_tensor(counts)
    V = counts.numel()
    if draft_vocab_size > V or draft_vocab_size <= 0:
        raise VocabError("build_vocab_map", "draft vocab size out of range", expected=f"1..{V}",
                         found=draft_vocab_size)
    # stable order on ties: by count desc then id asc; pads with the lowest unseen ids like SpecForge
    order = sorted(range(V), key=lambda i: (-int(counts[i]), i))
    used = torch.tensor(sorted(order[:draft_vocab_size]), dtype=torch.long)
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    return d2t, t2d


def draft_to_target(d2t: Tensor) -> Tensor:
    """Absolute target ids of each draft id: arange(Vd) + d2t (SGLang's `hot_token_id`)."""
    return torch.arange(d2t.numel(), device=d2t.device) + d2t


def absolute_to_offsets(target_ids: Tensor) -> Tensor:
    """Offsets d2t from absolute target ids per draft id."""
    return target_ids.long() - torch.arange(target_ids.numel(), device=target_ids.device)


def t2d_from_d2t(d2t: Tensor, vocab_size: int) -> Tensor:
    """The t2d mask implied by d2t (ModelOpt exports no t2d)."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[draft_to_target(d2t.cpu())] = True
    return t2d


@dataclass(frozen=True)
class VocabFinding:
    """One check of the vocab maps: what was checked, whether it holds, what it means."""
    check: str
    ok: bool
    severity: str     # "error" (engines will map ids wrongly), "warning" (suspicious), "info"
    detail: str


def check_vocab(d2t: Tensor | None, t2d: Tensor | None, vocab_size: int, draft_vocab_size: int,
                where: str = "draft") -> list[VocabFinding]:
    """Every check on d2t/t2d, with an explanation; never raises (use `validate_vocab` to raise on errors)."""
    out: list[VocabFinding] = []

    def add(check, ok, severity, detail):
        out.append(VocabFinding(check, bool(ok), "info" if ok else severity, detail))

    if d2t is None:
        full = draft_vocab_size == vocab_size
        add("d2t present", full, "error",
            "no d2t: draft ids are used as target ids directly" + (
                " (fine: full-vocab draft)" if full else
                f"; a {draft_vocab_size}-token draft will emit target ids 0..{draft_vocab_size - 1} "
                "(NeMo Automodel #2447: acceptance collapses)"))
    else:
        add("d2t dtype", d2t.dtype == torch.int64, "error", f"d2t is {d2t.dtype}; engines expect int64")
        add("d2t shape", d2t.dim() == 1 and d2t.numel() == draft_vocab_size, "error",
            f"d2t has shape {list(d2t.shape)}; lm_head has {draft_vocab_size} rows")
        if d2t.dim() == 1 and not d2t.dtype.is_floating_point and d2t.dtype != torch.bool:
            d = d2t.long().cpu()
            tgt = draft_to_target(d)
            n = d.numel()
            zeros = bool((d == 0).all())
            add("d2t not all zeros", not zeros or n == vocab_size, "error",
                "d2t is all zeros: draft id i -> target id i (the default buffer was saved, not a mapping)")
            arange_like = n > 1 and bool((d == torch.arange(n)).all())
            add("d2t not arange", not arange_like, "error",
                "d2t == arange: draft id i -> target id 2i (an arange default used as offsets; verl-SpeCo #67)")
            absolute = n > 1 and not arange_like and bool((d >= 0).all()) and bool((d[1:] > d[:-1]).all()) \
                and int(d.max()) < vocab_size and int((d + torch.arange(n)).max()) >= vocab_size
            add("d2t holds offsets, not absolute ids", not absolute, "error",
                "d2t looks like absolute target ids (strictly increasing, < V, but d2t+arange overflows V): "
                "convert with absolute_to_offsets()")
            in_range = bool(((tgt >= 0) & (tgt < vocab_size)).all())
            bad = ((tgt < 0) | (tgt >= vocab_size)).nonzero().flatten()[:5].tolist()
            add("mapped ids in range", in_range, "error",
                f"draft_id + d2t falls outside 0..{vocab_size - 1} for draft ids {bad}")
            increasing = bool((tgt[1:] > tgt[:-1]).all())
            dup = int(n - tgt.unique().numel())
            add("mapped ids unique", dup == 0, "error", f"{dup} draft ids map to an already used target id")
            add("mapped ids ascending", increasing or dup > 0, "warning",
                "target ids are not ascending: frequency-ordered (ModelOpt calibrate_draft_vocab) — valid for "
                "serving, but not SpecForge-compatible where t2d is assumed sorted")
            if t2d is not None and t2d.dim() == 1 and t2d.numel() == vocab_size and in_range:
                same = torch.equal(t2d.bool().cpu().nonzero().flatten().sort().values, tgt.sort().values)
                add("t2d consistent with d2t", same, "error",
                    f"nonzero(t2d) != d2t + arange: t2d marks {int(t2d.sum())} ids, d2t maps {n}; the two maps come "
                    "from different vocab builds")
    if t2d is None:
        add("t2d present", True, "info", "no t2d (training-only; engines ignore it; ModelOpt never exports it)")
    else:
        add("t2d dtype", t2d.dtype == torch.bool, "warning", f"t2d is {t2d.dtype}; expected bool")
        add("t2d shape", t2d.dim() == 1 and t2d.numel() == vocab_size, "error",
            f"t2d has shape {list(t2d.shape)}; the target vocab has {vocab_size} ids")
        if t2d.dim() == 1:
            add("t2d count", int(t2d.bool().sum()) == draft_vocab_size, "error",
                f"t2d marks {int(t2d.bool().sum())} ids, the draft vocab has {draft_vocab_size}")
    return out


def vocab_report(findings: list[VocabFinding]) -> pd.DataFrame:
    """Findings as a table."""
    return pd.DataFrame([f.__dict__ for f in findings], columns=["check", "ok", "severity", "detail"])


def validate_vocab(d2t, t2d, vocab_size: int, draft_vocab_size: int, where: str = "draft") -> None:
    """Raise VocabError on the first error-level finding."""
    for f in check_vocab(d2t, t2d, vocab_size, draft_vocab_size, where):
        if not f.ok and f.severity == "error":
            raise VocabError(f"{where}: {f.check}", f.detail, cause="the vocab map was not saved or was "
                             "saved in another convention")


def coverage(counts: Tensor, d2t: Tensor) -> float:
    """Share of the counted (loss-masked) target tokens that the draft vocab contains."""
    counts = torch.as_tensor(counts).double()
    total = counts.sum()
    if total == 0:
        return float("nan")
    ids = draft_to_target(d2t.long().cpu())
    ids = ids[(ids >= 0) & (ids < counts.numel())]
    return float(counts[ids].sum() / total)
