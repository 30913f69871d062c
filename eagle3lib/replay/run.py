"""Replay a draft on training samples: per-step accuracy, conditional rates, accept length, simulated acceptance.

Step k at position t consumes token t+1+k and is scored against the reference for token t+2+k where
loss_mask[t+k] = 1 (SpecForge, training-and-eval.md §1.3; ``mask="next"``: loss_mask[t+1+k], speculators/ModelOpt).
Reference: the target's greedy token argmax(lm_head(final_hidden[t+1+k])) when the sample stores the final post-norm
state and the lm_head is loaded (SpecForge: OOV is a miss), else the data token. E[accept] = 1 + Σ_k Π_{j<k} p_j.
A P-EAGLE draft (model.peagle) runs its one parallel forward instead of the TTT steps: step k is its depth k, scored
on the rows its COD sampling can keep, and the chain simulation is that same forward (nothing is fed back).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..model.checkpoint import load_draft
from ..model.config import DraftConfig
from ..samples.readers import Dataset, open_dataset
from ..samples.sample import Sample
from ..model.draft import Eagle3Draft
from ..model.peagle import PEagleDraft, resolve_mask_token_id
from ..errors import Eagle3Error, LayoutError
from ..layout import ZERO, parse_layout
from .loop import draft_run
from .stats import ReplayCounts, ReplayItem, ReplayOptions, ReplayResult
from ..samples.prefetch import ahead
from ..model.target import load_target_info, load_target_tensor, load_tokenizer
from ..hidden.capture import load_target_model
from ..hidden.identify import trained_layout
from ..progress import bar

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


def replay_dtype(dtype, device: str) -> torch.dtype:
    """"auto" -> bf16 on CUDA, fp32 elsewhere; strings like "bfloat16" -> torch dtypes."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "", "auto"):
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    got = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(got, torch.dtype):
        raise LayoutError("replay dtype", "unknown dtype", expected="float32, bfloat16, float16 or auto", found=dtype)
    return got


def load_setup(draft_path, target_path=None, device: str = "cpu", dtype="auto", *, missing: str = "fill",
               head_fill: str = "random") -> ReplaySetup:
    """Load the draft (embedding from the target) and the target's lm_head, tokenizer and layer count. A tensor
    the checkpoint lacks (or holds in the wrong shape) is, by default, replayed as an engine that loads the draft
    anyway would run it (`model.checkpoint.load_draft(missing="fill", lm_head=head_fill)`): `filled` and the notes
    say which; ``missing="raise"`` refuses such a draft."""
    dt = replay_dtype(dtype, device)
    loaded = load_draft(draft_path, target=target_path or None, device=device, dtype=dt, missing=missing,
                        lm_head=head_fill)
    notes, lm_head, tok, L, lay = [f.sentence() for f in loaded.filled], None, None, None, None
    if target_path:
        L = load_target_info(target_path).num_layers
        try:
            lay = loaded.cfg.aux_layout(L)
        except LayoutError as e:      # the config's ids are only a claim; the data's slots are identified apart
            notes.append(f"the draft config's layer ids are no layout of this target ({e}): the training layout is "
                         "the data's")
        tok = load_tokenizer(target_path)
        try:
            lm_head = load_target_tensor(target_path, "lm_head").to(device=device, dtype=dt)
        except Eagle3Error as e:
            notes.append(f"no target lm_head ({e}): the reference is the data's next token")
    else:
        notes.append("no target given: the reference is the data's next token, the layout is the data's own")
    if lay is None and target_path and loaded.cfg.aux_layer_ids is None:
        notes.append("the draft config names no aux layer ids: the training layout is the data's declared layout")
    if isinstance(loaded.model, PEagleDraft):
        notes += peagle_notes(loaded.model, tok)
    return ReplaySetup(loaded.model, loaded.cfg, str(draft_path), str(target_path) if target_path else None, L,
                       lay, lm_head, tok, tuple(notes), filled=loaded.filled)


def with_trained_layout(setup: ReplaySetup, trained) -> ReplaySetup:
    """The setup with the trained layout a `hidden.identify.TrainedLayout` established (unchanged when it names
    none): replays default to it, and samples that declare no layout are read as holding it."""
    if trained is None or trained.layout is None:
        return setup
    return dataclasses.replace(setup, training_layout=tuple(trained.layout), training_layout_source=trained.source,
                               notes=setup.notes + (f"training layout {trained.detail}",))


def identify_training_layout(setup: ReplaySetup, data, *, model=None, recapture: bool = True, n: int = 3,
                             data_format: str | None = None, device: str = "cpu"):
    """`hidden.identify.trained_layout` for this setup's draft and target on `data`. With `recapture`, the target
    (`model`, else loaded here from the setup's target path) recaptures `n` samples to identify the slots;
    without it (or without a target) the answer is the data's declared layout or the config's claim."""
    ds = data if isinstance(data, Dataset) else open_dataset(Path(data), format=data_format or None,
                                                            hidden_size=None)
    if recapture and model is None and setup.target_path:
        model = load_target_model(setup.target_path, device=device)
    return trained_layout(ds, setup.cfg, setup.num_layers, model=model if recapture else None, n=n)


def peagle_notes(model: PEagleDraft, tokenizer=None) -> list[str]:
    """Resolve a P-EAGLE draft's mask token when its config has none (SpecForge) and say how it is replayed."""
    notes = ["P-EAGLE draft: the K drafts come from ONE forward (mask_hidden and the mask token at depths >= 1); "
             "acc per step is its position_{d}_acc on the rows its COD sampling keeps; SpecForge leaves out rows "
             "whose target is outside the draft vocab (acc / (1 - oov_rate)), here they are misses"]
    if model.mask_token_id is None:
        mask_id, where = resolve_mask_token_id(model.cfg, tokenizer)
        model.mask_token_id = mask_id
        notes.append(f"P-EAGLE mask token {mask_id}: {where}" if mask_id is not None else
                     f"P-EAGLE mask token unknown ({where}): replay needs mask_token_id in the config")
    return notes


# ---------------------------------------------------------------- sample -> draft inputs

def apply_layout(sample: Sample, layout, num_slots: int, *, sample_layout=None, fill: str = "error",
                 recapture=None, num_layers: int | None = None) -> tuple[Tensor, tuple[str, ...]]:
    """The (T, k, Ht) aux a draft gets under `layout` (names parsed here): the sample's slots picked by boundary name.

    A boundary the sample lacks comes from `recapture` (anything with `.states(sample, names)`, e.g.
    layoutsearch.Recapture), else from fill="zeros" (a zero slot, shown as "zeros" in the returned effective layout).
    A layout shorter than the draft's k slots is completed with zero slots at the end under fill="zeros" (the
    served states first, as a server padding its capture to fc's width would).
    """
    want = tuple(n if n == ZERO else parse_layout([n], num_layers)[0] for n in layout)
    return pick_slots(sample, want, num_slots, sample_layout=sample_layout, fill=fill, recapture=recapture)


def pick_slots(sample: Sample, want: tuple[str, ...], num_slots: int, *, sample_layout=None, fill: str = "error",
               recapture=None) -> tuple[Tensor, tuple[str, ...]]:
    """`apply_layout` for a layout already parsed (`requested_layout`, once per replay)."""
    where = f"sample '{sample.id}' ({sample.source})"
    have = sample.layout or (tuple(sample_layout) if sample_layout is not None else None)
    if have is None or len(have) != sample.num_slots:
        raise LayoutError(where, "cannot tell which boundary each aux slot holds",
                          expected=f"a layout of {sample.num_slots} names (declared, in the data or the draft "
                          "config)", found=have, cause="data without layout metadata and no layout declared")
    want = list(want)
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

def as_samples(data, n=None, seed: int = 0, data_format: str | None = None):
    """(iterable of Samples, dataset or None, total for the progress bar) from a Dataset, path or iterable. An
    iterator (a generator of Samples: a capture loop, a custom reader) is consumed lazily, `n` first items, total
    unknown; other iterables are taken as a list."""
    if isinstance(data, (str, os.PathLike)):
        data = open_dataset(Path(data), format=data_format or None, hidden_size=None)
    if isinstance(data, Dataset):
        it = data.sample(n, seed) if n else iter(data)
        return it, data, (min(n, len(data)) if n else len(data))
    if isinstance(data, Iterator):
        return (itertools.islice(data, n) if n else data), None, None
    data = list(data)
    return data[:n] if n else data, None, len(data[:n] if n else data)


def replay(setup: ReplaySetup, data, *, layout=None, label: str | None = None, n: int | None = None, seed: int = 0,
           data_format: str | None = None, num_steps: int = 3, fill: str = "error", d2t: str = "offsets",
           align: int = 0, mask: str = "token", reference: str = "auto", simulate: bool = True,
           batch_tokens: int = 8192, recapture=None, only_scored: bool = True,
           prefetch_tokens: int | None = None, progress: bool = True) -> ReplayResult:
    """Run the draft on samples (Dataset, path or list) under `layout` (default: the training layout) and score it.

    Per step k: teacher-forced top-1 (SpecForge accuracy), joint and conditional rates, OOV rate; with
    `simulate`, chain drafting from every position (draft's own tokens and states fed back) scored like a greedy
    verifier whose continuation is the reference. Bad samples are skipped with a reason naming them.
    only_scored: run the lm_head and the steps >= 1 only where an output is scored (same numbers, less work);
    prefetch_tokens: tokens of samples read and prepared ahead in a background thread, overlapping the forward
    (None: one batch, `batch_tokens`, so the next batch is read while this one runs; 0: in line).
    """
    options = ReplayOptions(num_steps=num_steps, fill=fill, d2t=d2t, align=align, mask=mask, reference=reference,
                             simulate=simulate)
    counts = ReplayCounts(setup, requested_layout(setup, layout), options)
    depths = setup.cfg.parallel_depths
    if setup.cfg.parallel_drafting and depths and num_steps > depths:
        counts.note(f"num_steps={num_steps} but the P-EAGLE draft was trained for {depths} depths: the depths "
                    f"past {depths - 1} were never trained")
    samples, ds, total = as_samples(data, n, seed, data_format)
    skipped0 = len(ds.skipped) if ds is not None else 0
    with bar(total=total, desc=f"replay {label or ''}".strip(), progress=progress, unit="sample") as meter:
        count(setup, enumerate(samples), counts, batch_tokens=batch_tokens, recapture=recapture, bar=meter,
              only_scored=only_scored, prefetch_tokens=prefetch_tokens)
    if ds is not None:
        counts.skip_read((i, *x) for i, x in enumerate(ds.skipped[skipped0:]))
    return counts.result(label)


def requested_layout(setup: ReplaySetup, layout=None) -> tuple[str, ...] | None:
    """The layout a replay asks for, as boundary names (default: the training layout); a bad name raises here."""
    want = tuple(layout) if layout is not None else setup.training_layout
    if want is None:
        return None
    return tuple(n if n == ZERO else parse_layout([n], setup.num_layers)[0] for n in want)


def count(setup: ReplaySetup, items, counts: "ReplayCounts", *, batch_tokens: int = 8192, recapture=None,
          bar=None, only_scored: bool = True, prefetch_tokens: int | None = None) -> "ReplayCounts":
    """Prepare, run and add (key, Sample) pairs into `counts` (keys order the merged per-sample rows and skips).
    prefetch_tokens: tokens of samples read and prepared ahead in a background thread while the draft runs
    (None: `batch_tokens`, the next batch; 0: in line). Counted in tokens, not samples: a batch holds tens of
    samples, and a reader two samples ahead would wait through most of every forward (benchmarks/NOTES.md 9.3)."""
    model, o = setup.model, counts.opts

    def prepared():                                  # reading + prepare_sample; runs in the prefetch thread
        for key, s in items:
            try:
                with torch.inference_mode():
                    item = prepare_sample(s, setup, counts.requested, fill=o.fill, recapture=recapture,
                                          align=o.align, reference=o.reference, key=key)
            except Eagle3Error as e:
                item = e
            yield key, s, item

    def good(prepared_items):                        # the items to run; a sample that failed is counted skipped
        for key, s, item in prepared_items:
            if bar is not None:
                bar.update(1)
            if isinstance(item, Eagle3Error):
                counts.skip(key, s, item)
            else:
                yield item

    depth = batch_tokens if prefetch_tokens is None else prefetch_tokens
    for r in draft_run(model, good(ahead(prepared(), depth, weight=_tokens_of)), num_steps=counts.K, d2t=o.d2t,
                       mask=o.mask, simulate=o.simulate, only_scored=only_scored, batch_tokens=batch_tokens):
        counts.add(r.item, r.scored)
    return counts


def stored_layout(k: int) -> tuple[str, ...]:
    """The effective layout of a replay fed a training sample's slots as stored (no layout names them: the config
    has no ids, the data declares none, no recapture identified them): the fc's trained input, unnamed."""
    return tuple(f"stored slot {j}" for j in range(k))


def prepare_sample(s: Sample, setup: ReplaySetup, layout, *, fill: str = "error", recapture=None, align: int = 0,
                   reference: str = "auto", key=None) -> ReplayItem:
    """Check one sample against the draft (width, layout, ids) and build its inputs and reference; `layout` is
    parsed (`requested_layout`, once per replay), None: the sample's declared one."""
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
    if lay is None and setup.training_layout is None and s.num_slots == cfg.num_aux:
        aux, eff = s.aux, stored_layout(cfg.num_aux)   # the trained slots, in the fc's order, whatever they are
    elif lay is None:
        raise LayoutError(where, "no layout to apply", expected="a layout argument, a draft config with layer ids"
                          " and a target, or data that declares its layout", found=None)
    else:
        aux, eff = pick_slots(s, tuple(lay), cfg.num_aux, sample_layout=setup.training_layout, fill=fill,
                              recapture=recapture)
    if aux.dtype.is_floating_point and not bool(torch.isfinite(aux).all()):
        raise LayoutError(where, "NaN/inf in the aux hidden states", expected="finite", found="non-finite values")
    ref, kind, note = next_token_reference(s, setup.lm_head, reference)
    return ReplayItem(key, s.id, s.source, s.input_ids, s.loss_mask, eff,
                      shift_positions(aux, align).flatten(1), ref, kind, note)   # (T, k, Ht) -> (T, k*Ht)


def prepared_items(samples, setup: ReplaySetup, layout, **kw) -> Iterator[ReplayItem]:
    """`prepare_sample` of each sample under the parsed `layout` (`kw`: its options); a sample that does not
    prepare is left out (the token view and the accuracy by position show only what ran)."""
    for s in samples:
        try:
            with torch.inference_mode():
                item = prepare_sample(s, setup, layout, **kw)
        except Eagle3Error:
            continue
        yield item         # outside inference mode: the caller runs between items


def _tokens_of(prepared: tuple) -> int:
    """What a (key, Sample, ReplayItem | error) from `count`'s reader weighs in the read-ahead budget: its tokens."""
    item = prepared[2]
    return len(item.ids) if isinstance(item, ReplayItem) else 1
