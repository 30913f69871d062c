"""Which wiring was meant? Replay the plausible wirings around a served layout and name the one that restores accuracy.

`search_layouts(setup, samples, served, target_acc=...)` replays, on a few training samples, the candidates of
`layout_candidates` (missing embedding, layer ids ±1, slot permutations, pre/post-norm last slot, the config's
training layout) and then `reading_candidates` on the best one (d2t read as absolute ids or ignored, token shift
±1), and names the simplest candidate as good as the best within sampling noise. Boundaries the samples do not
carry are captured from the HF target on the samples' tokens (`Recapture`), or listed as untestable.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

import pandas as pd
from torch import Tensor

from ..samples.readers import Dataset, open_dataset
from ..samples.sample import Sample
from ..errors import DataError
from ..layout import ZERO, boundary_names, parse_layout
from .run import replay
from .stats import ReplaySetup
from .verdict import THRESHOLDS
from ..progress import track


class Recapture:
    """Boundaries a sample does not carry, captured from the HF target on the sample's tokens (cached per sample)."""

    def __init__(self, target_path, device: str = "cpu", dtype=None):
        self.target_path, self.device, self.dtype = str(target_path), device, dtype
        self._model, self._cache = None, {}

    def states(self, sample: Sample, names) -> dict[str, Tensor]:
        """{boundary: (T, Ht)} for `names`, capturing only the ones not cached yet."""
        from ..hidden.capture import capture, load_target_model
        if self._model is None:
            self._model = load_target_model(self.target_path, device=self.device, dtype=self.dtype)
        have = self._cache.setdefault(sample.id, {})
        todo = [n for n in names if n not in have]
        if todo:
            have.update(capture(self._model, sample.input_ids, only=todo).states)
        return {n: have[n] for n in names}


@dataclass(frozen=True)
class Candidate:
    """One way the draft might have been meant to be fed."""
    name: str
    fixes: str                     # the wiring bug this candidate undoes, in words
    layout: tuple[str, ...]
    d2t: str = "offsets"
    align: int = 0


def _shift(layout, d: int, L: int) -> tuple[str, ...] | None:
    """Every layer_in.i -> layer_in.(i+d) (0 -> embed, L -> final_prenorm; embed stays); None if one falls off."""
    names = boundary_names(L)[:-1]                  # embed, layer_in.1 .. layer_in.(L-1), final_prenorm
    out = []
    for n in layout:
        if n in (ZERO, "embed", "final_postnorm"):
            out.append(n)
            continue
        i = names.index(n) + d
        if not 0 <= i < len(names):
            return None
        out.append(names[i])
    return tuple(out)


def layout_candidates(served, num_slots: int, num_layers: int, *, training_layout=None,
                      max_permutations: int = 24) -> list[Candidate]:
    """Plausible intended layouts around a served one (stage 1 of the search, d2t as stored, no token shift)."""
    served = tuple(parse_layout([n for n in served if n != ZERO], num_layers))
    cands = [Candidate("as served", "nothing (the layout the server feeds)", served)]
    full = served
    if "embed" not in served:
        full = ("embed",) + (served if len(served) < num_slots else served[1:])
        cands.append(Candidate("add embedding slot", "the server does not capture the embedding output (missing "
                               "embedding slot)", full))
    for base, tag in [(served, "")] + ([(full, " + embedding")] if full != served else []):
        for d in (-1, 1):
            s = _shift(base, d, num_layers)
            if s is not None:
                cands.append(Candidate(f"layer ids {d:+d}{tag}", "layer ids read in the other convention "
                                       "(output-of-layer vs input-of-layer: off by one)", s))
    if len(full) == num_slots:
        perms = [p for p in itertools.permutations(range(num_slots)) if list(p) != list(range(num_slots))]
        if len(perms) > max_permutations:
            perms = [tuple(reversed(range(num_slots)))]
        for p in perms:
            cands.append(Candidate(f"order {p}", "slots concatenated in another order than fc was trained on",
                                   tuple(full[i] for i in p)))
    swap = {"final_prenorm": "final_postnorm", "final_postnorm": "final_prenorm"}
    if any(n in swap for n in full):
        cands.append(Candidate("other final norm", "post-norm vs pre-norm final state in the last slot",
                               tuple(swap.get(n, n) for n in full)))
    if training_layout is not None:
        cands.append(Candidate("training layout", "the layout the draft config declares", tuple(training_layout)))
    seen, out = set(), []
    for c in cands:
        if (c.layout, c.d2t, c.align) not in seen:
            seen.add((c.layout, c.d2t, c.align))
            out.append(c)
    return out


def reading_candidates(layout, tag: str = "") -> list[Candidate]:
    """Stage 2 on a layout: d2t read as absolute ids or ignored, hidden states paired one token off."""
    lay = tuple(layout)
    return [Candidate("d2t as absolute ids" + tag, "d2t holds absolute target ids, not offsets", lay, d2t="absolute"),
            Candidate("d2t ignored" + tag, "draft ids used as target ids (d2t not applied)", lay, d2t="identity"),
            Candidate("token shift +1" + tag, "hidden state of t+1 paired with token t+1 (off-by-one alignment)",
                      lay, align=1),
            Candidate("token shift -1" + tag, "hidden state of t-1 paired with token t+1 (off-by-one alignment)",
                      lay, align=-1)]


def _simplest_best(table: pd.DataFrame) -> tuple[int, pd.Series]:
    """(row of the simplest candidate as good as the best, which rows tie with the best): rows are in search
    order (simplest change first); a tie is within max(0.005, 2 standard errors) of the best accuracy."""
    acc = table.acc_0
    if acc.isna().all():
        return 0, acc.notna()
    i = int(acc.idxmax())
    p, n = float(acc[i]), max(int(table.positions[i]), 1)
    tied = acc >= p - max(0.005, 2 * math.sqrt(p * (1 - p) / n))
    return int(tied.idxmax()), tied


@dataclass(frozen=True)
class LayoutSearch:
    """Ranked candidates (a DataFrame), the best one, and whether it restores the accuracy."""
    table: pd.DataFrame        # candidate, fixes, layout, d2t, align, acc_0, gain, restores, tied_with_best, ...
    best: str
    restored: bool
    target_acc: float          # the accuracy a right wiring should reach (recorded or training-layout)
    threshold: float           # restores when acc_0 >= this (= target_acc - wiring_drop)
    message: str


def search_layouts(setup: ReplaySetup, samples, served, *, target_acc: float, n: int = 8, seed: int = 0,
                   num_steps: int = 1, recapture: Recapture | None = None, wiring_drop: float | None = None,
                   max_permutations: int = 24, progress: bool = True) -> LayoutSearch:
    """Replay every candidate wiring on `n` samples and name the simplest one as good as the best (within noise).

    Candidates need the boundaries they name: the samples' own slots, or any boundary when `recapture` (a target
    model) is given; the others are listed as untestable with the boundaries they need. Stage 2 (d2t readings,
    token shift) runs on the served layout and on the best stage-1 layout.
    """
    if isinstance(samples, (str, os.PathLike)):
        samples = open_dataset(samples)
    samples = list(samples.sample(n, seed) if isinstance(samples, Dataset) else samples)[:n]
    if not samples or setup.num_layers is None:
        raise DataError("search_layouts", "nothing to search on", expected="samples and a target (layer count)",
                        found=f"{len(samples)} samples, num_layers={setup.num_layers}")
    drop = THRESHOLDS["wiring_drop"] if wiring_drop is None else wiring_drop
    carried = set().union(*(set(s.layout or setup.training_layout or ()) for s in samples))
    rows = []

    def run(c: Candidate):
        need = sorted(set(c.layout) - carried - {ZERO})
        row = {"candidate": c.name, "fixes": c.fixes, "layout": ",".join(c.layout), "d2t": c.d2t, "align": c.align,
               "acc_0": float("nan"), "positions": 0, "note": ""}
        if need and recapture is None:
            row["note"] = f"untestable: samples lack {need}; give a target to recapture"
        else:
            r = replay(setup, samples, layout=c.layout, fill="zeros", d2t=c.d2t, align=c.align, num_steps=num_steps,
                       simulate=False, recapture=recapture, progress=False)
            row["acc_0"], row["positions"] = r.acc0, int(r.per_step.positions[0])
            row["note"] = f"recaptured {need}" if need else ""
        rows.append(row)

    stage1 = layout_candidates(served, setup.cfg.num_aux, setup.num_layers, training_layout=setup.training_layout,
                               max_permutations=max_permutations)
    for c in track(stage1, desc="layout search", progress=progress, unit="layout"):
        run(c)
    best1 = rows[_simplest_best(pd.DataFrame(rows))[0]]
    stage2 = {best1["layout"]: f" + {best1['candidate']}", rows[0]["layout"]: ""}   # best and served layouts
    for lay, tag in stage2.items():
        for c in reading_candidates(lay.split(","), tag):
            run(c)
    table = pd.DataFrame(rows)
    pick, tied = _simplest_best(table)
    base = float(table.acc_0[0])                                     # row 0 is "as served"
    table.insert(6, "gain", table.acc_0 - base)
    threshold = target_acc - drop
    table.insert(7, "restores", table.acc_0 >= threshold)
    table.insert(8, "tied_with_best", tied)
    # the pick first, then the others by accuracy (untestable last)
    order = [pick] + list(table.drop(index=pick).sort_values("acc_0", ascending=False, na_position="last",
                                                             kind="stable").index)
    table = table.loc[order].reset_index(drop=True)
    top = table.iloc[0].to_dict()
    name, acc, fixes = top["candidate"], top["acc_0"], top["fixes"]
    restored = bool(top["restores"]) and name != "as served"
    others = [c for c in table.candidate[1:][table.tied_with_best[1:]]][:3]
    also = f" (as good within noise: {', '.join(others)})" if others else ""
    if restored:
        how = (f", d2t {top['d2t']}" if top["d2t"] != "offsets" else "") + (
            f", token shift {top['align']:+d}" if top["align"] else "")
        msg = (f"'{name}' restores step-0 accuracy on the search's {n} samples from {base:.3f} to {acc:.3f} "
               f"(target {target_acc:.3f}, "
               f"restored when >= {threshold:.3f}): {fixes}; layout [{top['layout']}]{how}{also}")
    elif bool(top["restores"]):
        msg = f"the served layout already reaches {base:.3f} (>= {threshold:.3f}): no rewiring needed"
    else:
        msg = (f"no candidate restores the accuracy (best '{name}' {acc:.3f} < {threshold:.3f}); suspect the "
               "weights/loading, or boundaries this search cannot reach"
               + ("" if recapture is not None else " (give a target to recapture other boundaries)"))
    return LayoutSearch(table, str(name), restored, float(target_acc), float(threshold), msg)
