"""Wiring bug or generalization gap: the verdict from replays.

`decide(train, heldout, recorded_acc)` compares step-0 accuracy on the draft's own training samples with the
recorded validation accuracy (`wiring` when far below) and with held-out / new-prompt samples (`generalization`
when training is fine but held-out falls by more than a gap), else `healthy`. The search that names the fix for a
wiring verdict is `layoutsearch.search_layouts`. Also: the replay table and plot, and notebook 02's inputs.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from ..errors import DataError, MissingFileError
from .stats import ReplayResult, json_number

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


def replay_headline(verdicts: Mapping[str, Verdict], search=None) -> str:
    """One line for the report index: the serving layout's verdict (else the last one) and the restoring fix."""
    key = "serving" if "serving" in verdicts else list(verdicts)[-1]
    v = verdicts[key]
    rec = "no recorded accuracy" if v.recorded_acc is None else f"recorded {v.recorded_acc:.3f}"
    line = f"{key} layout: {v.verdict} (training-sample acc_0 {v.train_acc:.3f}, {rec})"
    if search is not None and search.restored:
        line += f"; fix: {search.best} -> acc_0 {float(search.table.acc_0[0]):.3f}"
    return line


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
    from matplotlib.figure import Figure      # no pyplot: nothing is left open or shown twice

    res = list(results.values()) if isinstance(results, Mapping) else list(results)
    fig = Figure(figsize=(11, 3.8))
    a1, a2 = fig.subplots(1, 2)
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
