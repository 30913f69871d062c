"""Replay's types and statistics: `ReplaySetup` (the loaded draft and what replay needs from the target),
`ReplayOptions`, `ReplayItem`; per-step and conditional accuracy, accept length, and the mergeable counts behind them.

E[accept] = 1 + Σ_k Π_{j<k} p_j from the conditional per-step rates (bonus token included, as SGLang counts).
The chain simulation gives two τ: over every full-horizon position, and over the positions an engine's
verification walk drafts at (`engines.verification.verification_walk`: a request's first draft at the prompt's
last row, then at the last accepted row), which is what a served τ counts.
`ReplayCounts` sums integer counts per batch, merges exactly across ranks, and builds the `ReplayResult`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from ..engines.verification import verification_walk
from ..errors import LayoutError
from ..model.config import DraftConfig
from ..model.draft import Eagle3Draft


REFERENCES = ("auto", "target", "data")
D2T_MODES = ("offsets", "absolute", "identity")   # how d2t is read (replay.loop.draft_target_ids)
FILLS = ("error", "zeros")
MASKS = ("token", "next")


@dataclass(frozen=True, eq=False)
class ReplaySetup:
    """A loaded draft plus what replay needs from the target: lm_head (reference), tokenizer, layer count."""
    model: Eagle3Draft
    cfg: DraftConfig
    draft_path: str
    target_path: str | None
    num_layers: int | None                       # target decoder layers (None without a target)
    training_layout: tuple[str, ...] | None      # the boundaries the fc was trained on (see training_layout_source)
    lm_head: Tensor | None                       # (V, Ht) target lm_head, for the SpecForge reference
    tokenizer: object | None
    notes: tuple[str, ...] = ()
    training_layout_source: str = "config"       # hidden.identify.SOURCES: "identified", "declared", "config"
    filled: tuple = ()                           # model.checkpoint.Filled: tensors standing in for missing ones

    @property
    def device(self) -> torch.device:
        return self.model.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.fc.weight.dtype


@dataclass(frozen=True)
class ReplayOptions:
    """How a replay feeds and scores the draft; checked once, when built (where a replay starts)."""

    num_steps: int = 3            # TTT / chain steps K
    fill: str = "error"           # "zeros": a slot the sample lacks is fed zeros (as a server padding its capture)
    d2t: str = "offsets"          # how d2t is read: offsets, absolute, identity
    align: int = 0                # aux of position t+align fed at t (a token/hidden-state off-by-one)
    mask: str = "token"           # loss mask of token t+k ("token", SpecForge) or of t+k+1 ("next")
    reference: str = "auto"       # reference tokens: target lm_head over the final state, or the data
    simulate: bool = True         # also chain-draft with the draft's own tokens and count acceptance
    past_stop: bool = False       # the walk also verifies the first token past the answer's last one (the
    #                               target's own next token): an engine that counts acceptance before its stop
    #                               check (vLLM's metrics: engines.facts metric accepted_past_stop_counted)

    def __post_init__(self):
        """A bad option names itself and the allowed values (raised where a replay starts)."""
        allowed = {"fill": FILLS, "d2t": D2T_MODES, "mask": MASKS, "reference": REFERENCES}
        for name, ok in allowed.items():
            if getattr(self, name) not in ok:
                raise LayoutError("replay()", f"bad option {name}", expected=ok, found=getattr(self, name))
        if not (isinstance(self.num_steps, int) and self.num_steps >= 1):
            raise LayoutError("replay()", "bad option num_steps", expected="an int >= 1", found=self.num_steps)
        if not isinstance(self.align, int):
            raise LayoutError("replay()", "bad option align", expected="an int (token shift)", found=self.align)


@dataclass(frozen=True, eq=False)
class ReplayItem:
    """One sample made ready for the draft: its inputs, the layout it is fed, and its reference tokens."""

    key: object                   # orders per-sample rows and skips when shards merge (dataset position)
    id: str
    source: str
    ids: Tensor                   # (T,) token ids
    mask: Tensor                  # (T,) loss mask
    layout: tuple[str, ...]       # boundaries actually fed, slot by slot ("zeros" for a zero slot)
    aux: Tensor                   # (T, k*Ht) fc input, slots concatenated in layout order
    ref: Tensor                   # (T,) reference for token p+1 (-1 where none)
    kind: str                     # "target" or "data" reference
    note: str = ""


# ---------------------------------------------------------------- accept-length arithmetic

def expected_accept_length(cond_rates, num_steps: int | None = None) -> float:
    """Chain drafting: 1 + Σ_{k=1..n} Π_{j<k} p_j, p_j = P(step j right | steps < j right); bonus token counted."""
    rates = [float(p) for p in cond_rates][:num_steps]
    if num_steps is not None and len(rates) < num_steps:
        raise ValueError(f"{num_steps} steps asked, {len(rates)} conditional rates given")
    total, run = 1.0, 1.0
    for p in rates:
        if run == 0.0:
            break                              # later rates (often NaN: nothing reached them) add nothing
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a conditional acceptance rate must lie in [0, 1], got {p}")
        run *= p
        total += run
    return total


def json_number(x) -> float | None:
    """A float rounded to 4 places for findings/JSON; None for None or NaN."""
    return None if x is None or math.isnan(float(x)) else round(float(x), 4)


# ---------------------------------------------------------------- what the draft is run with

@dataclass(frozen=True, eq=False)
class Scored:
    """Per-step (K, T) bookkeeping of one sample; `accepted` (T,) is 1 + leading chain matches (0: no valid step)."""
    reference: Tensor      # (K, T) target ids, -1 where none
    valid: Tensor          # (K, T) scored positions (mask and reference exist)
    correct: Tensor        # (K, T) teacher-forced top-1 == reference
    oov: Tensor            # (K, T) reference outside the draft vocab
    horizon: Tensor        # (T,) leading valid steps
    accepted: Tensor | None
    walked: Tensor | None = None          # (T,) bool: the positions the engine's verification walk drafts at
    walk_accepted: Tensor | None = None   # (T,) 1 + leading chain matches on the walk's rows (walk_rows)


def scored_positions(next_ref: Tensor, loss_mask: Tensor, K: int, mask: str = "token",
                     parallel: bool = False) -> tuple[Tensor, Tensor]:
    """(reference (K, T), valid (K, T)): the target of step k at position t (token t+2+k, -1 where none) and
    whether that output is scored (its mask is 1 and a reference exists). parallel (P-EAGLE): depth d >= 1 at t is
    scored where the masks of depths 1..d all hold, the rows COD sampling can keep (speculators / SpecForge
    `generate_cod_sample_indices`: depth d's pool is depth d-1's rows shifted by one, filtered by the mask)."""
    T = next_ref.shape[0]
    ref = torch.full((K, T), -1, dtype=torch.long)
    m = torch.zeros(K, T, dtype=torch.bool)
    lm = loss_mask.bool()
    for k in range(min(K, T - 1)):
        ref[k, :T - 1 - k] = next_ref[1 + k:]                  # step k at t -> reference of token t+2+k
        if mask == "token":
            m[k, :T - k] = lm[k:]                             # mask of token x_{t+k} (SpecForge)
        else:
            m[k, :T - 1 - k] = lm[1 + k:]                     # mask of token x_{t+1+k} (speculators/ModelOpt)
    if parallel and K > 1:
        m[1:] = m[1:].long().cumprod(0).bool()                # depth d: masks of depths 1..d (depth 0 alone)
    return ref, m & (ref >= 0)


def walk_rows(next_ref: Tensor, loss_mask: Tensor, K: int, past_stop: bool = False) -> Tensor:
    """(K, T) the rows a serving engine verifies: step k at t drafts token t+2+k after token t+1 was generated, so
    both are answer tokens (loss_mask 1) and a reference exists. Unlike `scored_positions` this does not follow a
    training convention: the prompt's last row (t+1 the first answer token) is served, though SpecForge's mask
    does not score it. `past_stop`: a sample ending in an answer also has the row of the token after its last one
    (t+2+k = T), whose reference is the target's next token there: an engine that counts acceptance before it
    stops at the answer's last token counts a draft of it (vLLM's spec-decode metrics)."""
    T = next_ref.shape[0]
    lm = loss_mask.bool()
    rows = torch.zeros(K, T, dtype=torch.bool)
    for k in range(min(K, T - 2)):
        n = T - 2 - k                                           # t = 0 .. T-3-k: token t+2+k exists
        rows[k, :n] = lm[1:1 + n] & lm[2 + k:2 + k + n] & (next_ref[1 + k:1 + k + n] >= 0)
        if past_stop and n >= 1:                                # t = T-2-k: token T, past the sample's end
            rows[k, n] = lm[1 + n] & lm[T - 1] & (next_ref[T - 1] >= 0)
    return rows


def walk_starts(loss_mask: Tensor) -> set[int]:
    """Where a request's first draft is: the row before each answer span's first token (the prompt's last row)."""
    lm = loss_mask.bool().tolist()
    return {t for t in range(len(lm) - 1) if lm[t + 1] and (t == 0 or not lm[t])}


def score(pred: Tensor, next_ref: Tensor, loss_mask: Tensor, in_vocab: Tensor, chain: Tensor | None = None,
          mask: str = "token", parallel: bool = False, past_stop: bool = False) -> Scored:
    """Score target-id predictions pred (K, T) (and chain drafts (K, T)) against next_ref (T,); predictions
    outside the scored positions (`scored_positions`, P-EAGLE's rows with `parallel`) are never read."""
    ref, valid = scored_positions(next_ref, loss_mask, pred.shape[0], mask, parallel)
    correct = valid & (pred.cpu() == ref)
    oov = valid & ~in_vocab[ref.clamp(min=0)]
    horizon = valid.long().cumprod(0).sum(0)
    accepted = walked = walk_acc = None
    if chain is not None:
        run = (valid & (chain.cpu() == ref)).long().cumprod(0).sum(0)
        accepted = torch.where(horizon > 0, 1 + run, torch.zeros_like(run))
        rows = walk_rows(next_ref, loss_mask, ref.shape[0], past_stop)
        walk_acc = 1 + (rows & (chain.cpu() == ref)).long().cumprod(0).sum(0)
        # the engine drafts at t after token t+1 was generated and the answer goes on (t+1 is not its last token)
        eligible = rows.all(0) & (torch.arange(rows.shape[1]) < rows.shape[1] - 2)
        pos = verification_walk(walk_acc.tolist(), eligible.tolist(), walk_starts(loss_mask))
        walked = torch.zeros(ref.shape[1], dtype=torch.bool)
        walked[pos] = True
    return Scored(ref, valid, correct, oov, horizon, accepted, walked, walk_acc)


# ---------------------------------------------------------------- the replay

@dataclass(frozen=True, eq=False)
class ReplayResult:
    """Replay of one draft on samples under one layout: tables are DataFrames, the rest plain values."""
    label: str
    layout: tuple[str, ...]          # what the fc got, slot by slot ("zeros" = filled)
    requested_layout: tuple[str, ...]
    d2t: str
    align: int
    fill: str
    reference: str                   # "target", "data" or "mixed" (see per_sample.reference)
    mask: str
    num_steps: int
    per_step: pd.DataFrame           # step, positions, acc, oov_rate, joint_positions, joint_acc, cond_acc, ...
    per_sample: pd.DataFrame
    histogram: pd.DataFrame          # accepted, count, fraction (full-horizon positions)
    expected_accept_length: float    # from the conditional rates, num_steps drafts
    simulated_accept_length: float   # mean of the chain simulation over full-horizon positions (nan if off)
    target_agreement: float          # P(target greedy == data token) at scored positions (nan: data reference)
    skipped: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()
    walked_accept_length: float = float("nan")   # chain τ over the positions the engine's walk drafts at (nan if off)
    walked_drafts: int = 0                       # drafts behind it
    walked_histogram: tuple[int, ...] = ()       # drafts of the walk by tokens accepted, bonus included (0..K+1)

    @property
    def walked_per_position(self) -> tuple[float, ...]:
        """P(draft position i is accepted), i = 1..K, over the walk: what vLLM's
        spec_decode_num_accepted_tokens_per_pos / num_drafts counts (() without a walk)."""
        n = sum(self.walked_histogram)
        if not n:
            return ()
        return tuple(sum(self.walked_histogram[i + 1:]) / n for i in range(1, self.num_steps + 1))

    @property
    def acc0(self) -> float:
        """Step-0 accuracy (SpecForge's acc_0 on these samples)."""
        return float(self.per_step.acc.iloc[0]) if len(self.per_step) else float("nan")

    def summary(self) -> dict:
        """Flat JSON-able dict of the headline numbers."""
        nan = json_number
        return {"label": self.label, "layout": list(self.layout), "d2t": self.d2t, "align": self.align,
                "reference": self.reference, "samples": int(len(self.per_sample)), "skipped": len(self.skipped),
                "positions": int(self.per_step.positions.iloc[0]) if len(self.per_step) else 0,
                "acc_per_step": [nan(a) for a in self.per_step.acc],
                "cond_acc": [nan(a) for a in self.per_step.cond_acc],
                "oov_rate": nan(self.per_step.oov_rate.iloc[0]) if len(self.per_step) else None,
                "expected_accept_length": nan(self.expected_accept_length),
                "simulated_accept_length": nan(self.simulated_accept_length),
                "walked_accept_length": nan(self.walked_accept_length), "walked_drafts": int(self.walked_drafts),
                "target_agreement": nan(self.target_agreement)}


class ReplayCounts:
    """Raw integer counts of a replay: `merge` adds another shard's (exact), `result` builds the ReplayResult.

    `setup` is a ReplaySetup (its training layout and layer count resolve the layout).
    """

    def __init__(self, setup: ReplaySetup, requested: tuple[str, ...] | None = None, options: ReplayOptions = ReplayOptions()):
        self.requested = tuple(requested) if requested is not None else setup.training_layout
        self.opts, self.K = options, options.num_steps
        num_steps = options.num_steps
        self.valid, self.correct, self.oov, self.prefix, self.joint, self.cond_den = (
            torch.zeros(num_steps, dtype=torch.long) for _ in range(6))
        self.hist = torch.zeros(num_steps + 2, dtype=torch.long)
        self.walk_hist = torch.zeros(num_steps + 2, dtype=torch.long)   # accepted (with bonus) on the walk
        self.agree, self.agree_n, self.kinds, self.notes = 0, 0, set(), set(setup.notes)
        self.rows, self.skipped, self.read_skipped = [], [], []    # (key, row) / (key, where, reason)
        self.effective = None                                      # (key, layout fed) of the first replayed sample

    def merge(self, other: "ReplayCounts") -> "ReplayCounts":
        """Add another shard's counts (same draft options) into these; integer sums, so the merge is exact."""
        if (other.requested, other.opts) != (self.requested, self.opts):
            raise ValueError("ReplayCounts.merge: counts of replays with different options")
        for name in ("valid", "correct", "oov", "prefix", "joint", "cond_den", "hist", "walk_hist"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.agree, self.agree_n = self.agree + other.agree, self.agree_n + other.agree_n
        self.kinds, self.notes = self.kinds | other.kinds, self.notes | other.notes
        self.rows, self.skipped = self.rows + other.rows, self.skipped + other.skipped
        self.read_skipped = self.read_skipped + other.read_skipped
        if other.effective is not None and (self.effective is None or other.effective[0] < self.effective[0]):
            self.effective = other.effective
        return self

    def skip(self, key, sample, error: Exception):
        """A sample that could not be replayed (`key` orders it among the skips): where it is and why."""
        self.skipped.append((key, f"sample '{sample.id}' ({sample.source})", str(error)))

    def skip_read(self, skips):
        """(key, where, reason) of samples the reader left out (they come first in the result's skips)."""
        self.read_skipped += list(skips)

    def note(self, text: str):
        """A note the result carries (said once however often it is noted)."""
        self.notes.add(text)

    def add(self, b: ReplayItem, sc: Scored):
        """Count one scored sample (`b`: its prepare_sample item, whose key orders it)."""
        v, c = sc.valid, sc.correct
        pv, pc = v.long().cumprod(0).bool(), c.long().cumprod(0).bool()        # valid / right at all steps <= k
        self.valid += v.sum(1)
        self.correct += c.sum(1)
        self.oov += sc.oov.sum(1)
        self.prefix += pv.sum(1)
        self.joint += pc.sum(1)
        before = torch.cat([torch.ones(1, pv.shape[1], dtype=torch.bool), pc[:-1]])  # right at steps < k
        self.cond_den += (pv & before).sum(1)
        full = sc.horizon == self.K
        if sc.accepted is not None:
            self.hist += torch.bincount(sc.accepted[full], minlength=self.K + 2)[:self.K + 2]
        if sc.walked is not None:
            self.walk_hist += torch.bincount(sc.walk_accepted[sc.walked], minlength=self.K + 2)[:self.K + 2]
        self.kinds.add(b.kind)
        self.notes.update([b.note] if b.note else [])
        if self.effective is None or b.key < self.effective[0]:
            self.effective = (b.key, b.layout)
        if b.kind == "target":                                 # does the target's greedy token equal the data?
            data = torch.full_like(b.ref, -1)
            data[:-1] = b.ids[1:]
            sel = v[0].nonzero().flatten() + 1
            sel = sel[data[sel] >= 0]                          # past the last token the data has no token to agree
            self.agree += int((b.ref[sel] == data[sel]).sum())
            self.agree_n += int(sel.numel())
        n0 = int(v[0].sum())
        acc = (c.sum(1).float() / v.sum(1).clamp(min=1)).tolist()
        rate = lambda x, d: float(x) / d if d else float("nan")  # noqa: E731
        self.rows.append((b.key, {
            "id": b.id, "source": b.source, "tokens": len(b.ids), "positions": n0, "reference": b.kind,
            "acc_0": acc[0] if n0 else float("nan"), f"acc_{self.K - 1}": acc[-1] if int(v[-1].sum()) else float("nan"),
            "oov_rate": rate(sc.oov[0].sum(), n0), "simulated_accept": float(sc.accepted[full].float().mean())
            if (sc.accepted is not None and bool(full.any())) else float("nan")}))

    def result(self, label: str | None = None) -> ReplayResult:
        """The ReplayResult of these counts: per-sample rows and skips in key order, reader skips first."""
        first = lambda x: x[0]  # noqa: E731
        div = lambda a, b: [float(x) / float(y) if y else float("nan") for x, y in zip(a, b)]  # noqa: E731
        want, o = tuple(self.requested or ()), self.opts
        eff = self.effective[1] if self.effective is not None else want
        skipped = tuple((w, r) for _, w, r in sorted(self.read_skipped, key=first) + sorted(self.skipped, key=first))
        cond = div(self.joint, self.cond_den)
        per_step = pd.DataFrame({"step": range(self.K), "positions": self.valid.tolist(),
                                 "acc": div(self.correct, self.valid), "oov_rate": div(self.oov, self.valid),
                                 "joint_positions": self.prefix.tolist(), "joint_acc": div(self.joint, self.prefix),
                                 "cond_acc": cond})
        no_nan = [0.0 if math.isnan(x) else x for x in cond]          # a step nothing reached adds nothing
        per_step["accept_length_if_steps"] = [expected_accept_length(no_nan[:k + 1]) for k in range(self.K)]
        h = self.hist[1:].tolist()
        tot = sum(h)
        hist = pd.DataFrame({"accepted": range(1, self.K + 2), "count": h,
                             "fraction": [x / tot if tot else float("nan") for x in h]})
        sim = sum(a * c for a, c in zip(hist.accepted, h)) / tot if (o.simulate and tot) else float("nan")
        ref = "mixed" if len(self.kinds) > 1 else next(iter(self.kinds), "none")
        wn = int(self.walk_hist.sum())
        walked = (float((torch.arange(self.K + 2) * self.walk_hist).sum()) / wn if (o.simulate and wn)
                  else float("nan"))
        return ReplayResult(label or ",".join(eff), eff, want, o.d2t, o.align, o.fill, ref, o.mask,
                            self.K, per_step, pd.DataFrame([r for _, r in sorted(self.rows, key=first)]), hist,
                            float(per_step.accept_length_if_steps.iloc[-1]), float(sim),
                            self.agree / self.agree_n if self.agree_n else float("nan"), skipped,
                            tuple(sorted(self.notes)), walked, wn, tuple(int(x) for x in self.walk_hist))
