"""What a serving dump shows the server feeds the draft, identified against the target's own boundaries, held
against the trained layout: the layout causes (`LAYOUT_CAUSES`) confirmed, ruled out, or not checked (no dump, or
training slots that match no boundary of the target). Notebook 03 and the diagnosis call it through
`steps.diffing.diffing_findings`.
"""
from __future__ import annotations

import dataclasses
import math

from ..causes import LAYOUT_CAUSES, Finding, not_checked
from ..hidden.compare import Comparison
from ..hidden.explain import LayoutExplanation, causes_of, layout_text, unidentified_slots
from .layer_ids import layout_fix

WHERE = "serving dump vs the target's boundaries"


def unmatched_slots_text(layout) -> str:
    """The sentence for training slots that match no boundary of the target (drift evidence), "" when none."""
    j = unidentified_slots(layout)
    return (f"training slot(s) {list(j)} match no boundary of the target (train_data against target): the "
            "data was captured from another or a since changed target (see target_drift), so the trained layout "
            "is not identified there") if j else ""


def _num(x) -> float | None:
    """A number, or None where it is missing (None, NaN, not a number)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def dump_findings(training: Comparison, serving: Comparison | None, explanation: LayoutExplanation | None,
                  dump: str, *, missing: str = "", accuracy: dict | None = None) -> list[Finding]:
    """The layout causes from the training slots' and the dump's comparisons and how they differ (`explanation`,
    None: no dump, `missing` says why); `accuracy`: {replay: step-0 accuracy} of the proof of fix (as served, with
    the trained layout), cited as evidence."""
    if explanation is None:
        needs = "a serving dump (serving_dump: SGLang --debug-tensor-dump-output-folder or an eagle3lib dump)"
        return [not_checked(c, WHERE, needs, missing) for c in LAYOUT_CAUSES]
    trained, served = training.identified, serving.identified
    min_cos = _num(serving.slots["cos_mean"].min()) if len(serving.slots) else None
    evidence = {"trained_layout": [layout_text([x]) for x in trained],
                "served_layout": [layout_text([x]) for x in served], "dump": dump, "min_cos_serving": min_cos}
    acc = list((accuracy or {}).values())
    if len(acc) == 2:
        evidence.update({"acc_0_as_served": acc[0], "acc_0_trained_layout": acc[1]})
    if explanation.clean:
        return [Finding(c, "ruled out", f"the serving dump feeds the trained layout [{layout_text(trained)}]",
                        evidence, WHERE, measured=True) for c in LAYOUT_CAUSES]
    unmatched = unmatched_slots_text(trained)
    # training slots that match nothing leave the layout undecided there: only what serving itself gets wrong
    # (an error of the serving side: a slot missing, extra, padded, unidentified) confirms a cause
    found = causes_of(explanation) if not unmatched else causes_of(dataclasses.replace(
        explanation, findings=tuple(f for f in explanation.findings if f.severity == "error")))
    kinds = sorted(explanation.kinds)
    fix = layout_fix(trained, training.num_layers)
    out = [Finding(c, "confirmed", f"serving feeds [{layout_text(served)}] where training used "
                   f"[{layout_text(trained)}] ({', '.join(kinds)})", {**evidence, "kinds": kinds}, WHERE,
                   fix=fix, measured=True) for c in found]
    if unmatched:
        needs = "training slots identified against the target (training_data captured from this target)"
        return out + [not_checked(c, WHERE, needs, f"not checked: {unmatched}") for c in LAYOUT_CAUSES
                      if c not in found]
    return out + [Finding(c, "ruled out", f"no {c} difference between served and trained slots", evidence, WHERE,
                          measured=True) for c in LAYOUT_CAUSES if c not in found]
