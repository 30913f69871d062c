"""Samples -> ReplayItems: each sample checked against the draft, its slots picked by boundary name, its reference
tokens built; the one place a replay's inputs are prepared (the replay, the tree replay, the token view and the
accuracy by position all read samples through here, then run them through `loop.draft_run`).

`requested_layout` parses a replay's layout once; `prepare_sample` builds one `ReplayItem` (`pick_slots`: the
sample's slots by name, zeros or a recapture for missing ones; `next_token_reference`: the target's greedy token,
else the data's); `prepared` streams keyed samples as items, read ahead in a background thread, the samples that
do not prepare set aside as skips. Usage:
    items = prepared(setup, enumerate(samples), requested_layout(setup), skipped=skips)
"""
from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch import Tensor

from ..errors import Eagle3Error, LayoutError
from ..layout import ZERO, parse_layout
from ..samples.prefetch import ahead
from ..samples.readers import Dataset, open_dataset
from ..samples.sample import Sample
from .stats import ReplayItem, ReplaySetup


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


def requested_layout(setup: ReplaySetup, layout=None) -> tuple[str, ...] | None:
    """The layout a replay asks for, as boundary names (default: the training layout); a bad name raises here."""
    want = tuple(layout) if layout is not None else setup.training_layout
    if want is None:
        return None
    return _parsed(want, setup.num_layers)


def _parsed(names, num_layers: int | None) -> tuple[str, ...]:
    """Layout names or ids -> boundary names (ZERO kept); a bad name raises here."""
    return tuple(n if n == ZERO else parse_layout([n], num_layers)[0] for n in names)


def apply_layout(sample: Sample, layout, num_slots: int, *, sample_layout=None, fill: str = "error",
                 recapture=None, num_layers: int | None = None) -> tuple[Tensor, tuple[str, ...]]:
    """The (T, k, Ht) aux a draft gets under `layout` (names parsed here): the sample's slots picked by boundary name.

    A boundary the sample lacks comes from `recapture` (anything with `.states(sample, names)`, e.g.
    layoutsearch.Recapture), else from fill="zeros" (a zero slot, shown as "zeros" in the returned effective layout).
    A layout shorter than the draft's k slots is completed with zero slots at the end under fill="zeros" (the
    served states first, as a server padding its capture to fc's width would).
    """
    want = _parsed(layout, num_layers)
    return pick_slots(sample, want, num_slots, sample_layout=sample_layout, fill=fill, recapture=recapture)


def pick_slots(sample: Sample, want: tuple[str, ...], num_slots: int, *, sample_layout=None, fill: str = "error",
               recapture=None) -> tuple[Tensor, tuple[str, ...]]:
    """`apply_layout` for a layout already parsed (`requested_layout`, once per replay)."""
    where = f"sample '{sample.id}' ({sample.source})"
    have = sample.layout or (tuple(sample_layout) if sample_layout is not None else None)
    # the target's final state the sample stores apart (SpecForge hidden_state, ModelOpt hidden_states): what a
    # draft fed the final state (use_aux_hidden_state false) takes, whatever the aux slots hold
    final = {sample.final_boundary: sample.final_hidden} if sample.final_hidden is not None else {}
    if (have is None or len(have) != sample.num_slots) and all(n in final or n == ZERO for n in want):
        have = ()
    if have != () and (have is None or len(have) != sample.num_slots):
        raise LayoutError(where, "cannot tell which boundary each aux slot holds",
                          expected=f"a layout of {sample.num_slots} names (declared, in the data or the draft "
                          "config)", found=have, cause="data without layout metadata and no layout declared")
    want = list(want)
    if len(want) > num_slots or (len(want) < num_slots and fill != "zeros"):
        raise LayoutError(where, "layout length does not fit the draft's fc", expected=f"{num_slots} slots",
                          found=f"{len(want)} {want}", cause="a serving layout with fewer slots needs fill='zeros'"
                          " to emulate what the server feeds")
    want += [ZERO] * (num_slots - len(want))
    missing = [n for n in want if n != ZERO and n not in have and n not in final]
    captured = recapture.states(sample, missing) if (missing and recapture is not None) else {}
    T, _, Ht = sample.aux.shape
    slots, effective = [], []
    for n in want:
        if n in have:
            slots.append(sample.aux[:, have.index(n)])
        elif n in final:
            slots.append(final[n].to(sample.aux.dtype))
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


def prepared(setup: ReplaySetup, keyed: Iterable, layout, *, skipped: list | None = None, bar=None,
             ahead_tokens: int = 0, **kw) -> Iterator[ReplayItem]:
    """The `ReplayItem` of each (key, Sample) under the parsed `layout` (`kw`: `prepare_sample`'s options), read
    and prepared `ahead_tokens` tokens ahead in a background thread (0: in line). A sample that does not prepare
    goes to `skipped` as (key, Sample, error) (None: it is left out); `bar` counts every sample read."""
    def prepare_all():                               # reading + prepare_sample; runs in the prefetch thread
        for key, s in keyed:
            try:
                with torch.inference_mode():
                    item = prepare_sample(s, setup, layout, key=key, **kw)
            except Eagle3Error as e:
                item = e
            yield key, s, item

    for key, s, item in ahead(prepare_all(), ahead_tokens, weight=_tokens_of):
        if bar is not None:
            bar.update(1)
        if not isinstance(item, Eagle3Error):
            yield item         # outside inference mode: the caller runs between items
        elif skipped is not None:
            skipped.append((key, s, item))


def prepared_items(samples, setup: ReplaySetup, layout, **kw) -> Iterator[ReplayItem]:
    """`prepare_sample` of each sample under the parsed `layout` (`kw`: its options); a sample that does not
    prepare is left out (the token view and the accuracy by position show only what ran)."""
    return prepared(setup, ((None, s) for s in samples), layout, **kw)


def _tokens_of(entry: tuple) -> int:
    """What a (key, Sample, ReplayItem | error) from `prepared`'s reader weighs in the read-ahead budget: its tokens."""
    item = entry[2]
    return len(item.ids) if isinstance(item, ReplayItem) else 1
