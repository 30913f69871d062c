"""Replay a draft on training samples: per-step accuracy, conditional rates, accept length, simulated acceptance.

Step k at position t consumes token t+1+k and is scored against the reference for token t+2+k where
loss_mask[t+k] = 1 (SpecForge, training-and-eval.md §1.3; ``mask="next"``: loss_mask[t+1+k], speculators/ModelOpt).
Reference: the target's greedy token argmax(lm_head(final_hidden[t+1+k])) when the sample stores the final post-norm
state and the lm_head is loaded (SpecForge: OOV is a miss), else the data token. E[accept] = 1 + Σ_k Π_{j<k} p_j.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import tqdm
from torch import Tensor

from .checkpoint import load_draft
from .config import DraftConfig
from .datasets import Dataset, Sample, open_dataset
from .draft import Eagle3Draft
from .errors import Eagle3Error, LayoutError
from .layout import parse_layout
from .target import load_target_info, load_target_tensor, load_tokenizer

ZERO = "zeros"                       # a slot name meaning "fed zeros" (what a server feeds for a slot it lacks)
D2T_MODES = ("offsets", "absolute", "identity")
REFERENCES = ("auto", "target", "data")


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


def conditional_from_joint(joint) -> list[float]:
    """Conditional rates p_k = J_k / J_{k-1} from joint rates J_k = P(steps 0..k all right)."""
    out, prev = [], 1.0
    for j in joint:
        out.append(float(j) / prev if prev > 0 else float("nan"))
        prev = float(j)
    return out


# ---------------------------------------------------------------- what the draft is run with

@dataclass(frozen=True, eq=False)
class ReplaySetup:
    """A loaded draft plus what replay needs from the target: lm_head (reference), tokenizer, layer count."""
    model: Eagle3Draft
    cfg: DraftConfig
    draft_path: str
    target_path: str | None
    num_layers: int | None                       # target decoder layers (None without a target)
    training_layout: tuple[str, ...] | None      # the boundaries the draft's config says its fc was trained on
    lm_head: Tensor | None                       # (V, Ht) target lm_head, for the SpecForge reference
    tokenizer: object | None
    notes: tuple[str, ...] = ()

    @property
    def device(self) -> torch.device:
        return self.model.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.fc.weight.dtype


def resolve_dtype(dtype, device: str) -> torch.dtype:
    """"auto" -> bf16 on CUDA, fp32 elsewhere; strings like "bfloat16" -> torch dtypes."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "", "auto"):
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    got = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(got, torch.dtype):
        raise LayoutError("replay dtype", "unknown dtype", expected="float32, bfloat16, float16 or auto", found=dtype)
    return got


def load_setup(draft_path, target_path=None, device: str = "cpu", dtype="auto") -> ReplaySetup:
    """Load the draft (embedding from the target) and the target's lm_head, tokenizer and layer count."""
    dt = resolve_dtype(dtype, device)
    loaded = load_draft(draft_path, target=target_path or None, device=device, dtype=dt)
    notes, lm_head, tok, L, lay = [], None, None, None, None
    if target_path:
        L = load_target_info(target_path).num_layers
        lay = loaded.cfg.aux_layout(L)
        tok = load_tokenizer(target_path)
        try:
            lm_head = load_target_tensor(target_path, "lm_head").to(device=device, dtype=dt)
        except Eagle3Error as e:
            notes.append(f"no target lm_head ({e}): the reference is the data's next token")
    else:
        notes.append("no target given: the reference is the data's next token, the layout is the data's own")
    if lay is None and target_path:
        notes.append("the draft config names no aux layer ids: the training layout is the data's declared layout")
    return ReplaySetup(loaded.model, loaded.cfg, str(draft_path), str(target_path) if target_path else None, L,
                       lay, lm_head, tok, tuple(notes))


# ---------------------------------------------------------------- sample -> draft inputs

def apply_layout(sample: Sample, layout, num_slots: int, *, sample_layout=None, fill: str = "error",
                 recapture=None, num_layers: int | None = None) -> tuple[Tensor, tuple[str, ...]]:
    """The (T, k, Ht) aux a draft gets under `layout`: the sample's slots picked by boundary name.

    A boundary the sample lacks comes from `recapture` (anything with `.states(sample, names)`, e.g.
    verdict.Recapture), else from fill="zeros" (a zero slot, shown as "zeros" in the returned effective layout).
    A layout shorter than the draft's k slots is completed with zero slots at the end under fill="zeros" (the
    served states first, as a server padding its capture to fc's width would).
    """
    where = f"sample '{sample.id}' ({sample.source})"
    have = sample.layout or (tuple(sample_layout) if sample_layout is not None else None)
    if have is None or len(have) != sample.num_slots:
        raise LayoutError(where, "cannot tell which boundary each aux slot holds",
                          expected=f"a layout of {sample.num_slots} names (declared, in the data or the draft "
                          "config)", found=have, cause="data without layout metadata and no layout declared")
    want = [n if n == ZERO else parse_layout([n], num_layers)[0] for n in layout]
    if len(want) > num_slots or (len(want) < num_slots and fill != "zeros"):
        raise LayoutError(where, "layout length does not fit the draft's fc", expected=f"{num_slots} slots",
                          found=f"{len(want)} {want}", cause="a serving layout with fewer slots needs fill='zeros'"
                          " to emulate what the server feeds")
    want += [ZERO] * (num_slots - len(want))
    missing = [n for n in want if n != ZERO and n not in have]
    captured = recapture.states(sample, missing) if (missing and recapture is not None) else {}
    T, _, Ht = sample.aux.shape
    slots, effective = [], []
    for n in want:
        if n in have:
            slots.append(sample.aux[:, have.index(n)])
        elif n in captured:
            slots.append(captured[n].to(sample.aux.dtype))
        elif n == ZERO or fill == "zeros":
            slots.append(torch.zeros(T, Ht, dtype=sample.aux.dtype))
            n = ZERO
        else:
            raise LayoutError(where, f"the sample does not carry boundary '{n}'", expected=f"one of {list(have)}",
                              found=n, cause="give a target (recapture) or fill='zeros' to emulate a missing slot")
        effective.append(n)
    return torch.stack(slots, dim=1), tuple(effective)  # k x (T, Ht) -> (T, k, Ht)


def shift_positions(aux: Tensor, align: int) -> Tensor:
    """Aux of position t+align fed at t (zeros past the ends): a token/hidden-state off-by-one, for the search."""
    if align == 0:
        return aux
    out = torch.zeros_like(aux)
    if align > 0:
        out[:-align] = aux[align:]
    else:
        out[-align:] = aux[:align]
    return out


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


def next_token_reference(sample: Sample, lm_head: Tensor | None, want: str = "auto",
                         chunk: int = 512) -> tuple[Tensor, str, str]:
    """(ref (T,), kind, note): ref[p] = reference for token p+1 (-1 where none), kind "target" or "data"."""
    T = sample.num_tokens
    data = torch.full((T,), -1, dtype=torch.long)
    data[:-1] = sample.input_ids[1:]
    if want == "data":
        return data, "data", ""
    why = ("no final hidden state in the sample" if sample.final_hidden is None else
           "no target lm_head loaded" if lm_head is None else
           "the stored final state is pre-norm (speculators)" if sample.final_boundary == "final_prenorm" else
           f"final hidden width {sample.hidden_size} != lm_head width {lm_head.shape[1]}"
           if lm_head.shape[1] != sample.final_hidden.shape[1] else "")
    if why:
        if want == "target":
            return data, "data", f"target reference impossible ({why}): data token used"
        return data, "data", f"data reference where {why}"
    fh = sample.final_hidden
    out = torch.empty(T, dtype=torch.long)
    for s in range(0, T, chunk):
        h = fh[s:s + chunk].to(device=lm_head.device, dtype=lm_head.dtype)
        out[s:s + chunk] = (h @ lm_head.T).argmax(-1).cpu()  # (c, Ht) x (Ht, V) -> (c, V) -> (c,)
    return out, "target", ""


# ---------------------------------------------------------------- scoring one sample

@dataclass(frozen=True, eq=False)
class Scored:
    """Per-step (K, T) bookkeeping of one sample; `accepted` (T,) is 1 + leading chain matches (0: no valid step)."""
    reference: Tensor      # (K, T) target ids, -1 where none
    valid: Tensor          # (K, T) scored positions (mask and reference exist)
    correct: Tensor        # (K, T) teacher-forced top-1 == reference
    oov: Tensor            # (K, T) reference outside the draft vocab
    horizon: Tensor        # (T,) leading valid steps
    accepted: Tensor | None


def score(pred: Tensor, next_ref: Tensor, loss_mask: Tensor, in_vocab: Tensor, chain: Tensor | None = None,
          mask: str = "token") -> Scored:
    """Score target-id predictions pred (K, T) (and chain drafts (K, T)) against next_ref (T,)."""
    K, T = pred.shape
    ref = torch.full((K, T), -1, dtype=torch.long)
    m = torch.zeros(K, T, dtype=torch.bool)
    lm = loss_mask.bool()
    for k in range(min(K, T - 1)):
        ref[k, :T - 1 - k] = next_ref[1 + k:]                  # step k at t -> reference of token t+2+k
        if mask == "token":
            m[k, :T - k] = lm[k:]                             # mask of token x_{t+k} (SpecForge)
        else:
            m[k, :T - 1 - k] = lm[1 + k:]                     # mask of token x_{t+1+k} (speculators/ModelOpt)
    valid = m & (ref >= 0)
    correct = valid & (pred.cpu() == ref)
    oov = valid & ~in_vocab[ref.clamp(min=0)]
    horizon = valid.long().cumprod(0).sum(0)
    accepted = None
    if chain is not None:
        run = (valid & (chain.cpu() == ref)).long().cumprod(0).sum(0)
        accepted = torch.where(horizon > 0, 1 + run, torch.zeros_like(run))
    return Scored(ref, valid, correct, oov, horizon, accepted)


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
                "target_agreement": nan(self.target_agreement)}


def as_samples(data, n=None, seed: int = 0, data_format: str | None = None):
    """(iterable of Samples, dataset or None, total for the progress bar) from a Dataset, path or iterable."""
    if isinstance(data, (str, os.PathLike)):
        data = open_dataset(Path(data), format=data_format or None, hidden_size=None)
    if isinstance(data, Dataset):
        it = data.sample(n, seed) if n else iter(data)
        return it, data, (min(n, len(data)) if n else len(data))
    data = list(data)
    return data[:n] if n else data, None, len(data[:n] if n else data)


def replay(setup: ReplaySetup, data, *, layout=None, label: str | None = None, n: int | None = None, seed: int = 0,
           data_format: str | None = None, num_steps: int = 3, fill: str = "error", d2t: str = "offsets",
           align: int = 0, mask: str = "token", reference: str = "auto", simulate: bool = True,
           batch_tokens: int = 8192, recapture=None, progress: bool = True) -> ReplayResult:
    """Run the draft on samples (Dataset, path or list) under `layout` (default: the training layout) and score it.

    Per step k: teacher-forced top-1 (SpecForge accuracy), joint and conditional rates, OOV rate; with
    `simulate`, chain drafting from every position (draft's own tokens and states fed back) scored like a greedy
    verifier whose continuation is the reference. Bad samples are skipped with a reason naming them.
    """
    counts = ReplayCounts(setup, layout, num_steps=num_steps, fill=fill, d2t=d2t, align=align, mask=mask,
                          reference=reference, simulate=simulate)
    samples, ds, total = as_samples(data, n, seed, data_format)
    skipped0 = len(ds.skipped) if ds is not None else 0
    with tqdm.tqdm(total=total, desc=f"replay {label or ''}".strip(), disable=not progress) as bar:
        count(setup, enumerate(samples), counts, batch_tokens=batch_tokens, recapture=recapture, bar=bar)
    if ds is not None:
        counts.read_skipped += [(i, *x) for i, x in enumerate(ds.skipped[skipped0:])]
    return counts.result(label)


def count(setup: ReplaySetup, items, counts: "ReplayCounts", *, batch_tokens: int = 8192, recapture=None,
          bar=None) -> "ReplayCounts":
    """Prepare, run and add (key, Sample) pairs into `counts` (keys order the merged per-sample rows and skips)."""
    model, o = setup.model, counts.opts
    with torch.inference_mode(), d2t_reading(model, o["d2t"]) as hot:
        in_vocab = torch.zeros(setup.cfg.vocab_size, dtype=torch.bool)
        in_vocab[hot.cpu()] = True
        hot, batch = hot.to(setup.device), []
        for key, s in items:
            if bar is not None:
                bar.update(1)
            try:
                item = prepare_sample(s, setup, counts.requested, fill=o["fill"], recapture=recapture,
                                      align=o["align"], reference=o["reference"])
            except Eagle3Error as e:
                counts.skipped.append((key, f"sample '{s.id}' ({s.source})", str(e)))
                continue
            item["key"] = key
            padded = (len(batch) + 1) * max([len(item["ids"])] + [len(b["ids"]) for b in batch])   # B x T_max
            if batch and padded > batch_tokens:
                _run(batch, model, hot, in_vocab, counts)
                batch = []
            batch.append(item)
        if batch:
            _run(batch, model, hot, in_vocab, counts)
    return counts


def prepare_sample(s: Sample, setup: ReplaySetup, layout, *, fill: str = "error", recapture=None, align: int = 0,
                   reference: str = "auto") -> dict:
    """Check one sample against the draft (width, layout, ids) and build its inputs and reference."""
    cfg, where = setup.cfg, f"sample '{s.id}' ({s.source})"
    if s.hidden_size != cfg.target_hidden_size:
        raise LayoutError(where, "hidden states of the wrong width for the draft", expected=cfg.target_hidden_size,
                          found=s.hidden_size, cause="data captured from another target than the draft's")
    if int(s.input_ids.max()) >= cfg.vocab_size or int(s.input_ids.min()) < 0:
        raise LayoutError(where, "token id outside the target vocab", expected=f"0..{cfg.vocab_size - 1}",
                          found=int(s.input_ids.max()), cause="data tokenized for another target")
    if not bool(s.loss_mask.any()):
        raise LayoutError(where, "loss mask is all zero", expected="at least one supervised position",
                          found=f"{s.num_tokens} positions, none with mask 1", cause="no assistant turn in the sample")
    lay = layout if layout is not None else s.layout
    if lay is None:
        raise LayoutError(where, "no layout to apply", expected="a layout argument, a draft config with layer ids"
                          " and a target, or data that declares its layout", found=None)
    aux, eff = apply_layout(s, lay, cfg.num_aux, sample_layout=setup.training_layout, fill=fill,
                            recapture=recapture, num_layers=setup.num_layers)
    if aux.dtype.is_floating_point and not bool(torch.isfinite(aux).all()):
        raise LayoutError(where, "NaN/inf in the aux hidden states", expected="finite", found="non-finite values")
    ref, kind, note = next_token_reference(s, setup.lm_head, reference)
    return {"id": s.id, "source": s.source, "ids": s.input_ids, "mask": s.loss_mask, "layout": eff,
            "aux": shift_positions(aux, align).flatten(1), "ref": ref, "kind": kind, "note": note}


def _run(batch, model, hot, in_vocab, counts):
    """One padded batch through ttt_forward (teacher, and draft-fed chain), scored sample by sample."""
    B, T = len(batch), max(len(b["ids"]) for b in batch)
    dev, dt = hot.device, model.fc.weight.dtype
    ids = torch.zeros(B, T, dtype=torch.long)
    aux = torch.zeros(B, T, batch[0]["aux"].shape[1], dtype=dt)
    for i, b in enumerate(batch):                               # right padding: causal attention never sees it
        ids[i, :len(b["ids"])], aux[i, :len(b["ids"])] = b["ids"], b["aux"].to(dt)
    ids, aux = ids.to(dev), aux.to(dev)
    K, simulate = counts.K, counts.opts["simulate"]
    teach = torch.stack(model.ttt_forward(aux, ids, K, feed="teacher", return_logits=False))   # (K, B, T)
    chain = torch.stack(model.ttt_forward(aux, ids, K, feed="draft", return_logits=False)) if simulate else None
    for i, b in enumerate(batch):
        t = len(b["ids"])
        sc = score(hot[teach[:, i, :t]].cpu(), b["ref"], b["mask"], in_vocab,
                   hot[chain[:, i, :t]].cpu() if simulate else None, counts.opts["mask"])
        counts.add(b, sc)


class ReplayCounts:
    """Raw integer counts of a replay: `merge` adds another shard's (exact), `result` builds the ReplayResult."""

    def __init__(self, setup: ReplaySetup, layout=None, *, num_steps: int = 3, fill: str = "error",
                 d2t: str = "offsets", align: int = 0, mask: str = "token", reference: str = "auto",
                 simulate: bool = True):
        if reference not in REFERENCES or mask not in ("token", "next") or fill not in ("error", "zeros"):
            raise LayoutError("replay()", "bad option", expected=f"reference in {REFERENCES}, mask token|next, "
                              "fill error|zeros", found=(reference, mask, fill))
        want = tuple(layout) if layout is not None else setup.training_layout
        if want is not None:                             # a bad layout argument raises here, not per sample
            want = tuple(n if n == ZERO else parse_layout([n], setup.num_layers)[0] for n in want)
        self.requested, self.K = want, num_steps
        self.opts = {"d2t": d2t, "align": align, "fill": fill, "mask": mask, "reference": reference,
                     "simulate": simulate}
        self.valid, self.correct, self.oov, self.prefix, self.joint, self.cond_den = (
            torch.zeros(num_steps, dtype=torch.long) for _ in range(6))
        self.hist = torch.zeros(num_steps + 2, dtype=torch.long)
        self.agree, self.agree_n, self.kinds, self.notes = 0, 0, set(), set(setup.notes)
        self.rows, self.skipped, self.read_skipped = [], [], []    # (key, row) / (key, where, reason)
        self.effective = None                                      # (key, layout fed) of the first replayed sample

    def merge(self, other: "ReplayCounts") -> "ReplayCounts":
        """Add another shard's counts (same draft options) into these; integer sums, so the merge is exact."""
        if (other.requested, other.K, other.opts) != (self.requested, self.K, self.opts):
            raise ValueError("ReplayCounts.merge: counts of replays with different options")
        for name in ("valid", "correct", "oov", "prefix", "joint", "cond_den", "hist"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.agree, self.agree_n = self.agree + other.agree, self.agree_n + other.agree_n
        self.kinds, self.notes = self.kinds | other.kinds, self.notes | other.notes
        self.rows, self.skipped = self.rows + other.rows, self.skipped + other.skipped
        self.read_skipped = self.read_skipped + other.read_skipped
        if other.effective is not None and (self.effective is None or other.effective[0] < self.effective[0]):
            self.effective = other.effective
        return self

    def add(self, b: dict, sc: Scored):
        """Count one scored sample (`b`: its prepare_sample item, with the "key" that orders it)."""
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
        self.kinds.add(b["kind"])
        self.notes.update([b["note"]] if b["note"] else [])
        if self.effective is None or b["key"] < self.effective[0]:
            self.effective = (b["key"], b["layout"])
        if b["kind"] == "target":                                 # does the target's greedy token equal the data?
            data = torch.full_like(b["ref"], -1)
            data[:-1] = b["ids"][1:]
            sel = v[0].nonzero().flatten() + 1
            self.agree += int((b["ref"][sel] == data[sel]).sum())
            self.agree_n += int(sel.numel())
        n0 = int(v[0].sum())
        acc = (c.sum(1).float() / v.sum(1).clamp(min=1)).tolist()
        rate = lambda x, d: float(x) / d if d else float("nan")  # noqa: E731
        self.rows.append((b["key"], {
            "id": b["id"], "source": b["source"], "tokens": len(b["ids"]), "positions": n0, "reference": b["kind"],
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
        sim = sum(a * c for a, c in zip(hist.accepted, h)) / tot if (o["simulate"] and tot) else float("nan")
        ref = "mixed" if len(self.kinds) > 1 else next(iter(self.kinds), "none")
        return ReplayResult(label or ",".join(eff), eff, want, o["d2t"], o["align"], o["fill"], ref, o["mask"],
                            self.K, per_step, pd.DataFrame([r for _, r in sorted(self.rows, key=first)]), hist,
                            float(per_step.accept_length_if_steps.iloc[-1]), float(sim),
                            self.agree / self.agree_n if self.agree_n else float("nan"), skipped,
                            tuple(sorted(self.notes)))
