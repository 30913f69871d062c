"""Wiring bug or generalization gap: the verdict from replays, and the layout search that names the fix.

`decide(train, heldout, recorded_acc)` compares step-0 accuracy on the draft's own training samples with the
recorded validation accuracy (`wiring` when far below) and with held-out / new-prompt samples (`generalization`
when training is fine but held-out falls by more than a gap), else `healthy`. `search_layouts` replays the
plausible wirings (missing embedding, ids ±1, permutations, pre/post-norm last slot, d2t readings, token shift).
"""
from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd
from torch import Tensor

from .datasets import Dataset, Sample, open_dataset
from .errors import DataError, MissingFileError
from .layout import boundary_names, parse_layout
from .replay import ZERO, ReplayResult, ReplaySetup, json_number, replay

THRESHOLDS = {
    # wiring: training-sample acc_0 more than this below the recorded validation acc. The draft saw these samples,
    # so they should score at least the validation number; sampling noise is 1-2 points at a few thousand positions
    "wiring_drop": 0.10,
    "wiring_floor": 0.30,        # wiring without a recorded number: training-sample acc_0 below this
    "generalization_gap": 0.10,  # generalization: a held-out acc_0 more than this below the training-sample acc_0
    "match_tol": 0.05,           # "consistent with the recorded accuracy" band (reported, does not decide)
}
LOG_KEYS = ("val_acc_step0", "eval/acc_0", "eval/avg_acc", "val/full_acc_0", "test/epochacc_0")


def read_recorded_accuracy(path, keys: Iterable[str] = LOG_KEYS) -> tuple[float, str]:
    """(value, "file:line key") of the LAST record in a training-log jsonl holding one of `keys`."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(str(path), "training log not found", expected="a jsonl written during training",
                               found="no such file", cause="wrong path, or pass the recorded accuracy directly")
    found = None
    for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):   # garbage lines are skipped
        try:
            rec = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue
        for k in keys if isinstance(rec, dict) else ():
            if isinstance(rec.get(k), (int, float)) and not isinstance(rec.get(k), bool):
                found = (float(rec[k]), f"{path}:{lineno} {k}")
                break
    if found is None:
        raise DataError(str(path), "no validation accuracy in the training log", expected=list(keys),
                        found="none of these keys", cause="another trainer's key names: pass the number directly")
    return found


# ---------------------------------------------------------------- the verdict

@dataclass(frozen=True)
class Verdict:
    """`wiring`, `generalization` or `healthy`, the sentence that says why, and the numbers that decided it."""
    verdict: str
    reason: str
    train_acc: float
    recorded_acc: float | None
    heldout_acc: Mapping[str, float]
    thresholds: Mapping[str, float]
    evidence: pd.DataFrame

    def summary(self) -> dict:
        """JSON-able: verdict, reason, numbers, thresholds."""
        r = json_number
        return {"verdict": self.verdict, "reason": self.reason, "train_acc0": r(self.train_acc),
                "recorded_val_acc": r(self.recorded_acc),
                "heldout_acc0": {k: r(v) for k, v in self.heldout_acc.items()},
                "thresholds": dict(self.thresholds)}


def decide(train: ReplayResult, heldout: Mapping[str, ReplayResult] | ReplayResult | None = None,
           recorded_acc: float | None = None, **thresholds) -> Verdict:
    """Verdict from training-sample replay (+ held-out replays, + the recorded validation accuracy)."""
    th = {**THRESHOLDS, **thresholds}
    unknown = set(thresholds) - set(THRESHOLDS)
    if unknown:
        raise DataError("decide()", "unknown threshold", expected=sorted(THRESHOLDS), found=sorted(unknown))
    held = {heldout.label: heldout} if isinstance(heldout, ReplayResult) else dict(heldout or {})
    a = train.acc0
    rows = [{"data": f"training samples ({train.label})", "acc_0": a, "positions": int(train.per_step.positions[0]),
             "reference": train.reference, "E[accept]": train.expected_accept_length,
             "simulated accept": train.simulated_accept_length}]
    if recorded_acc is not None:
        rows.append({"data": "recorded validation accuracy", "acc_0": recorded_acc})
    rows += [{"data": f"held-out: {k}", "acc_0": r.acc0, "positions": int(r.per_step.positions[0]),
              "reference": r.reference, "E[accept]": r.expected_accept_length,
              "simulated accept": r.simulated_accept_length}
             for k, r in held.items()]
    evidence = pd.DataFrame(rows)
    held_acc = {k: r.acc0 for k, r in held.items()}
    rec = "" if recorded_acc is None else (
        f" ({'consistent with' if abs(a - recorded_acc) <= th['match_tol'] else 'vs'} the recorded "
        f"{recorded_acc:.3f})")
    worst = min(held_acc.items(), key=lambda kv: kv[1] if not math.isnan(kv[1]) else 9.0, default=None)
    if math.isnan(a):
        kind, why = "inconclusive", "no scored position in the training samples (all skipped?)"
    elif recorded_acc is not None and a < recorded_acc - th["wiring_drop"]:
        kind, why = "wiring", (
            f"step-0 accuracy on its own training samples is {a:.3f}, {recorded_acc - a:.3f} below the recorded "
            f"validation accuracy {recorded_acc:.3f} (wiring when more than {th['wiring_drop']:.2f} below): the "
            "draft is not fed what it was trained on, or is loaded wrong")
    elif recorded_acc is None and a < th["wiring_floor"]:
        kind, why = "wiring", (
            f"step-0 accuracy on its own training samples is {a:.3f} (< {th['wiring_floor']:.2f}; no recorded "
            "validation accuracy to compare with): a draft cannot be this wrong on data it was trained on")
    elif worst is not None and worst[1] < a - th["generalization_gap"]:
        kind, why = "generalization", (
            f"training samples give {a:.3f}{rec} but '{worst[0]}' gives {worst[1]:.3f}, {a - worst[1]:.3f} lower "
            f"(generalization when more than {th['generalization_gap']:.2f} lower): the wiring is right, the "
            "draft does not carry over to these prompts")
    else:
        kind, why = "healthy", f"training samples give {a:.3f}{rec}" + (
            f"; held-out within {th['generalization_gap']:.2f} ("
            + ", ".join(f"{k} {v:.3f}" for k, v in held_acc.items()) + ")" if held_acc else
            "; no held-out data compared")
    if train.reference in ("data", "mixed") and kind != "inconclusive":
        why += (f". Caveat: reference = {train.reference} (the data's next token where no final state is stored); "
                "training logs count agreement with the TARGET's greedy token, so data that is not the target's own "
                "output scores lower without any wiring bug (store the final hidden state, give the target lm_head)")
    return Verdict(kind, why, a, recorded_acc, held_acc, th, evidence)


def headline(verdicts: Mapping[str, Verdict], search: LayoutSearch | None = None) -> str:
    """One line for the report index: the serving layout's verdict (else the last one) and the restoring fix."""
    key = "serving" if "serving" in verdicts else list(verdicts)[-1]
    v = verdicts[key]
    rec = "no recorded accuracy" if v.recorded_acc is None else f"recorded {v.recorded_acc:.3f}"
    line = f"{key} layout: {v.verdict} (training-sample acc_0 {v.train_acc:.3f}, {rec})"
    if search is not None and search.restored:
        line += f"; fix: {search.best} -> acc_0 {float(search.table.acc_0[0]):.3f}"
    return line


# ---------------------------------------------------------------- the layout search

class Recapture:
    """Boundaries a sample does not carry, captured from the HF target on the sample's tokens (cached per sample)."""

    def __init__(self, target_path, device: str = "cpu", dtype=None):
        self.target_path, self.device, self.dtype = str(target_path), device, dtype
        self._model, self._cache = None, {}

    def states(self, sample: Sample, names) -> dict[str, Tensor]:
        """{boundary: (T, Ht)} for `names`, capturing only the ones not cached yet."""
        from .capture import capture, load_target_model
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
                               "embedding slot, the seed's bug)", full))
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
    import tqdm
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
    for c in tqdm.tqdm(stage1, desc="layout search", disable=not progress):
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
        msg = (f"'{name}' restores step-0 accuracy from {base:.3f} to {acc:.3f} (target {target_acc:.3f}, "
               f"restored when >= {threshold:.3f}): {fixes}; layout [{top['layout']}]{how}{also}")
    elif bool(top["restores"]):
        msg = f"the served layout already reaches {base:.3f} (>= {threshold:.3f}): no rewiring needed"
    else:
        msg = (f"no candidate restores the accuracy (best '{name}' {acc:.3f} < {threshold:.3f}); suspect the "
               "weights/loading, or boundaries this search cannot reach"
               + ("" if recapture is not None else " (give a target to recapture other boundaries)"))
    return LayoutSearch(table, str(name), restored, float(target_acc), float(threshold), msg)


# ---------------------------------------------------------------- views of several replays

def replay_table(results: Iterable[ReplayResult] | Mapping[str, ReplayResult]) -> pd.DataFrame:
    """One row per replay: layout, reference, step accuracies, OOV, expected and simulated accept length."""
    res = list(results.values()) if isinstance(results, Mapping) else list(results)
    rows = []
    for r in res:
        row = {"label": r.label, "layout": ",".join(r.layout), "d2t": r.d2t, "reference": r.reference,
               "samples": len(r.per_sample), "skipped": len(r.skipped)}
        row.update({f"acc_{k}": a for k, a in enumerate(r.per_step.acc)})
        row.update({"oov_rate": r.per_step.oov_rate.iloc[0], "E[accept] (cond.)": r.expected_accept_length,
                    "simulated accept": r.simulated_accept_length})
        rows.append(row)
    return pd.DataFrame(rows)


def plot_replay(results: Iterable[ReplayResult] | Mapping[str, ReplayResult]):
    """Figure: per-step accuracy (solid) and conditional rate (dashed) per replay, and accept-length histograms."""
    import matplotlib.pyplot as plt
    res = list(results.values()) if isinstance(results, Mapping) else list(results)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / max(len(res), 1)
    for i, r in enumerate(res):
        line, = a1.plot(r.per_step.step, r.per_step.acc, marker="o", label=f"{r.label} acc")
        a1.plot(r.per_step.step, r.per_step.cond_acc, ls="--", marker="x", color=line.get_color(),
                label=f"{r.label} cond.")
        a2.bar(r.histogram.accepted + (i - (len(res) - 1) / 2) * width, r.histogram.fraction, width=width,
               color=line.get_color(), label=f"{r.label} (mean {r.simulated_accept_length:.2f})")
    if res:                                                  # integer ticks: steps and accepted counts
        a1.set_xticks(list(res[0].per_step.step))
        a2.set_xticks(list(res[0].histogram.accepted))
    a1.set(xlabel="TTT step k", ylabel="accuracy", ylim=(0, 1.02), title="per-step top-1 vs reference")
    a2.set(xlabel="accepted tokens per round (bonus counted)", ylabel="fraction of positions",
           title="simulated chain acceptance")
    for a in (a1, a2):
        a.legend(fontsize=7)
        a.grid(alpha=0.3)
    fig.tight_layout()
    return fig



# ---------------------------------------------------------------- the notebook's inputs (demo world when empty)

@dataclass(frozen=True)
class ReplayInputs:
    """Resolved paths and numbers for notebook 02 (the demo world fills whatever was left empty)."""
    draft_path: str
    target_path: str
    train_data: str
    train_format: str | None
    heldout: Mapping[str, str]           # name -> data path (held-out / new-prompt samples)
    recorded_acc: float | None
    recorded_from: str
    serving_layout: tuple[str, ...] | None
    demo: bool


def resolve_inputs(draft_path: str = "", target_path: str = "", train_data_path: str = "",
                   train_data_format: str = "", heldout_data_path: str = "", new_prompt_data_path: str = "",
                   recorded_val_acc: float = -1.0, training_log_path: str = "",
                   serving_layout: str = "") -> ReplayInputs:
    """Fill empty parameters: no draft path -> the demo world (built if missing); accuracy from the training log."""
    demo = not draft_path
    if demo:
        from . import demo as demo_mod
        demo_mod.ensure_world()
        w = demo_mod.paths()
        draft_path, target_path = str(w.draft), target_path or str(w.target)
        train_data_path = train_data_path or str(w.seed_data)
        heldout_data_path = heldout_data_path or str(w.heldout_data)
        new_prompt_data_path = new_prompt_data_path or str(w.shifted_data)
        training_log_path = training_log_path or str(w.training_log)
        if not serving_layout and w.world_json.is_file():
            world = json.loads(w.world_json.read_text())
            lay = world.get("serving_layout") or (world.get("layouts") or {}).get("serving")
            serving_layout = ",".join(lay) if isinstance(lay, list) else (lay or "")
    if not train_data_path:
        raise DataError("train_data_path", "no training data given", expected="the draft's training samples",
                        found="''", cause="the verdict needs samples the draft was trained on")
    held = {k: p for k, p in (("held-out", heldout_data_path), ("new prompts", new_prompt_data_path)) if p}
    rec, src = (float(recorded_val_acc), "parameter") if recorded_val_acc >= 0 else (None, "not given")
    if rec is None and training_log_path:
        rec, src = read_recorded_accuracy(training_log_path)
    return ReplayInputs(draft_path, target_path, train_data_path, train_data_format or None, held, rec, src,
                        parse_layout(serving_layout) if serving_layout else None, demo)


def compare_layouts(specs, setup: ReplaySetup, serving=None) -> dict[str, tuple[str, ...]]:
    """{label: layout} from specs: "training", "serving" (default: training without `embed`) or "a,b,c" names."""
    out = {}
    for spec in specs:
        if spec in ("training", "serving"):
            if setup.training_layout is None:
                raise DataError(f"layout '{spec}'", "the draft config names no layer ids", expected="explicit "
                                "layouts like 'embed,layer_in.2,...'", found=None)
            lay = setup.training_layout if spec == "training" else (
                tuple(serving) if serving else tuple(n for n in setup.training_layout if n != "embed"))
        else:
            lay = parse_layout(spec, setup.num_layers)
        out[spec] = lay
    return out
