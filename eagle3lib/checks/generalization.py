"""`generalization_gap` on its served-traffic aspect: the draft on its own training samples against the traffic that
was served, beside the served τ.

Held-out samples are samples the draft was not trained on; they are not what was served. A draft that passes its
own training samples and its held-out ones can still fail the served prompts (another domain, another template),
so the served traffic decides this aspect (the held-out one is `checks.replayed_layout.heldout_finding`'s):
- `traffic_finding`: the step-0 accuracy on the training samples against the replay of the draft as trained on the
  served traffic (every answer, captured by the target: replay.traffic_samples); confirmed when the traffic scores more
  than THRESHOLDS["generalization_gap"] lower, with how far the served sequences are from the training samples
  (samples.distance: tokens, template, length) and whether the served τ is what that replay predicts;
- `without_traffic`: a served τ and a replay on other data: agreeing (within the served τ's tolerance), it rules
  the aspect out (the served prompts cost nothing the replayed data does not); below it, the served traffic is
  the input that decides (not checked, naming --served-traffic), never "ruled out" from held-out data alone;
- `not_served`: no served τ: not checked.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..samples.distance import distance_text
from ..replay.verdict import THRESHOLDS

WHERE = "served traffic vs training samples"
ASPECT = ("served traffic",)
TRAFFIC_INPUT = "the served traffic (served_traffic / --served-traffic: the served prompts and answers)"


def traffic_finding(training_acc0: float, training_from: str, traffic_acc0: float, traffic_positions: int, *,
                    served: float | None = None, predicted: float | None = None, tolerance: float | None = None,
                    distance: dict | None = None, answers: int = 0) -> Finding:
    """The training samples' step-0 accuracy against the served traffic's, as a finding (module docstring)."""
    gap = training_acc0 - traffic_acc0
    ev = {"acc0_training": round(training_acc0, 4), "acc0_training_from": training_from,
          "acc0_served_traffic": round(traffic_acc0, 4), "positions_served_traffic": traffic_positions,
          "answers": answers, "gap": round(gap, 4), "threshold": THRESHOLDS["generalization_gap"],
          "distance": dict(distance or {})}
    as_replayed = ""
    if served is not None and predicted is not None:
        ev.update(served=round(served, 3), predicted_on_traffic=round(predicted, 3))
        near = tolerance is not None and abs(served - predicted) <= tolerance
        as_replayed = (f"; served τ {served:.2f}, the replay on that traffic predicts {predicted:.2f}"
                       + (": the engine serves the draft as replayed" if near else ""))
    far = f"; the served sequences against the training samples: {distance_text(distance or {})}"
    if gap > THRESHOLDS["generalization_gap"]:
        return Finding("generalization_gap", "confirmed", f"the draft scores {training_acc0:.2f} on its own training "
                       f"samples and {traffic_acc0:.2f} on the served traffic ({answers} answers, {traffic_positions} "
                       f"positions), {gap:.2f} lower{as_replayed}{far}", ev, WHERE,
                       fix="train (or fine-tune) the draft on data like the served prompts: their domain, template "
                           "and lengths", measured=True, aspects=ASPECT)
    return Finding("generalization_gap", "ruled out", f"the served traffic scores {traffic_acc0:.2f} against "
                   f"{training_acc0:.2f} on the training samples (within {THRESHOLDS['generalization_gap']:.2f})"
                   f"{as_replayed}{far}", ev, WHERE, measured=True, aspects=ASPECT)


def without_traffic(served: float, predicted: float, tolerance: float, replayed_on: str, *,
                    source: str = "") -> Finding:
    """A served τ beside a replay on data other than the served traffic (module docstring)."""
    ev = {"served": round(served, 3), "predicted": round(predicted, 3), "tolerance": round(tolerance, 3),
          "replayed_on": replayed_on, "served_source": source}
    if served >= predicted - tolerance:
        return Finding("generalization_gap", "ruled out", f"served τ {served:.2f} is what the replay on "
                       f"{replayed_on} predicts ({predicted:.2f}, within {tolerance:.2f}): the served prompts cost "
                       "nothing those samples do not", ev, WHERE, measured=True, aspects=ASPECT)
    return Finding("generalization_gap", "not checked", f"not checked: served τ {served:.2f} is below the "
                   f"replay's {predicted:.2f} on {replayed_on}, and those are not the prompts that were served: the "
                   "served traffic decides between a generalization gap and the serving path", ev, WHERE,
                   needs=TRAFFIC_INPUT, aspects=ASPECT)


def not_served(why: str = "") -> Finding:
    """No served τ to hold the served prompts against."""
    return not_checked("generalization_gap", WHERE, "a served accept length (served_log / --served-log) with "
                       + TRAFFIC_INPUT, (f"not checked: {why}" if why else ""), aspects=ASPECT)
