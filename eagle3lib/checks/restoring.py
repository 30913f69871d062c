"""What the training samples' searches decide, as findings: a config field that restores the draft's own training
samples (`replay.counterfactual`'s `Search`: draft_config_differs, or rope_mismatch for a RoPE field) and a shipped
tensor that restores them (`replay.artifacts`' `ArtifactSearch`: d2t_mapping, draft_tensor_differs, lm_head_missing,
wrong_embedding). The searches compute the evidence (steps.trained_config runs them once per case); these judge it.
Usage: ``config_findings(found) + tensor_findings(tensors)``.
"""
from __future__ import annotations

import math

from ..causes import Finding, not_checked
from ..model.variants import reshape_text, reshaped
from ..replay.artifacts import SAME_IDS, ArtifactSearch
from ..replay.artifacts import WHERE as TENSORS
from ..replay.as_served import CONFIG_ROPE
from ..replay.counterfactual import IMPLIED, REFUSED_VALUES, Search, shown_value
from ..replay.counterfactual import WHERE as CONFIG


def config_findings(s: Search) -> list[Finding]:
    """`draft_config_differs`: confirmed with both accuracies and the fix when a candidate restores; ruled out
    when the shipped config reproduces training, or when no field or pair restores what it falls short of
    (the shortfall is then another cause's: the evidence keeps both numbers)."""
    aspect = ("a field the engine reads",)
    if math.isnan(s.shipped_acc0):
        return [not_checked("draft_config_differs", CONFIG, "training samples the draft can be replayed on",
                            aspects=aspect)]
    ev = {"acc0_as_shipped": round(s.shipped_acc0, 4), "positions": s.positions,
          "recorded": s.recorded, "recorded_from": s.recorded_from, "fields_searched": list(s.fields),
          "candidates": len(s.candidates)}
    r = s.restoring
    if r is not None:
        ev.update(acc0_restored=round(r.acc0, 4), margin=round(s.margin(r), 4),
                  changes={k: shown_value(v) for k, v in r.changes.items()},
                  shipped={k: shown_value(v) for k, v in r.shipped.items()})
        rec = f" (recorded {s.recorded:.2f})" if s.recorded is not None else ""
        rope = set(r.changes) <= set(CONFIG_ROPE)         # a RoPE field: the catalogue's own cause for it
        unneeded = s.unneeded(r)
        if unneeded:
            ev["tensors_the_field_adds"] = list(unneeded)
        sized = reshape_text(s.shipped_cfg, r.changes) if IMPLIED in r.hows and s.shipped_cfg else ""
        if sized:
            ev["tensors_the_field_sizes"] = [[k, list(a), list(b)] for k, a, b in
                                             reshaped(s.shipped_cfg, r.changes)]
        return [Finding("rope_mismatch" if rope else "draft_config_differs", "confirmed",
                        f"the draft fails its own training samples under its shipped config (step-0 accuracy "
                        f"{s.shipped_acc0:.2f}) and scores {r.acc0:.2f} with {r.described}{rec}: the config is "
                        f"not what was trained" + (f" ({sized})" if sized else ""), ev, CONFIG,
                        fix=f"{r.config_fix()}: {s.shipped_acc0:.2f} -> {r.acc0:.2f}", measured=True,
                        aspects=("draft config vs training config",) if rope else aspect,
                        explains=(("engine_cannot_run",) if set(r.changes) & set(REFUSED_VALUES) else ()) +
                        (("weights_dropped",) if unneeded or sized else ()))]
    best = s.best
    if best is not None:
        ev.update(best=best.described, acc0_best=round(best.acc0, 4))
    if s.reproduces_training is False:     # short of training, but no config field is why
        return [Finding("draft_config_differs", "ruled out",
                        f"the shipped config scores {s.shipped_acc0:.2f} on the training samples, "
                        f"{s.recorded:.2f} recorded, and no engine-read field set otherwise restores it "
                        f"(best {best.described if best else '-'}: {best.acc0 if best else float('nan'):.2f}): "
                        "the shortfall lies in the checkpoint, its layout, its vocab map or the target, not in "
                        "a config field", ev, CONFIG, measured=True, aspects=aspect)]
    said = ("reproduces the recorded accuracy" if s.reproduces_training else
            "is not beaten by any engine-read field set otherwise")
    return [Finding("draft_config_differs", "ruled out",
                    f"the shipped config {said} on the training samples ({s.shipped_acc0:.2f}"
                    + (f", recorded {s.recorded:.2f}" if s.recorded is not None else "")
                    + f"; {len(s.candidates)} counterfactuals, best "
                    f"{best.acc0 if best else float('nan'):.2f})", ev, CONFIG, measured=True, aspects=aspect)]


def tensor_findings(s: ArtifactSearch) -> list[Finding]:
    """The tensor that restores the training samples, confirmed with its fix and both accuracies; none when
    no tensor restores them (the shortfall stays the config search's and the layout search's to explain)."""
    r = s.restoring
    if r is None:
        return []
    m = s.recovered
    ev = {"tensor": r.tensor, "how": r.how, "acc0_as_shipped": round(s.shipped_acc0, 4),
          "acc0_restored": round(r.acc0, 4), "margin": round(s.margin(r), 4), "positions": s.positions,
          "recorded": s.recorded, "candidates": {c.how: None if math.isnan(c.acc0) else round(c.acc0, 4)
                                                    for c in s.candidates}}
    if m is not None:
        ev.update(map_positions=m.positions, draft_ids_seen=m.seen, shipped_ascending=m.shipped_ascending,
                  recovered_on_shipped_ids=round(m.same_ids, 4), recovered_as_shipped=round(m.agrees, 4))
    why = ""
    if r.tensor in ("d2t", "lm_head") and m is not None:
        why = (f"; on the training targets {m.agrees:.0%} of the draft's predictions map as the shipped d2t says "
               f"({m.seen} draft ids recovered from {m.positions} positions), "
               + ("the shipped target ids ascend and the recovered ones are the same ids: the lm_head rows are "
                  "in another order" if r.tensor == "lm_head" else
                  "the shipped map's target ids are out of the ascending order writers store them in"
                  if not m.shipped_ascending and m.same_ids >= SAME_IDS else
                  "the recovered map points at other target ids: the d2t comes from another vocabulary"))
    rec = f", recorded {s.recorded:.2f}" if s.recorded is not None else ""
    held = (f"the stand-in for its missing {r.tensor}" if s.cause_of(r.tensor) == "lm_head_missing" else
            f"its shipped {r.tensor}")
    return [Finding(s.cause_of(r.tensor), "confirmed", f"the draft fails its own training samples with {held} "
                    f"(step-0 accuracy {s.shipped_acc0:.2f}{rec}) and scores {r.acc0:.2f} with "
                    f"{r.how}" + (f" ({r.note})" if r.note else "") + why, ev, TENSORS,
                    fix=f"{r.fix}: {s.shipped_acc0:.2f} -> {r.acc0:.2f}", measured=True)]
