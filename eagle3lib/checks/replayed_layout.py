"""What the replay of the training samples says about the serving layout: the served layout (from a dump, typed,
or an engine's capture rules; `steps.sample_replay.serving_layout`) replayed against the trained one decides the
layout causes, a config without ids replayed under the engines' default decides `missing_layer_ids`, the held-out
replays decide `generalization_gap`, and a d2t reading the layout search finds restoring decides `d2t_mapping`.
Notebook 02 and the diagnosis call it through `steps.sample_replay.run`.
"""
from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from ..causes import CAPTURE_CAUSES, LAYOUT_CAUSES, Finding, not_checked
from ..hidden.explain import causes_of, explain, layout_text
from ..replay.items import stored_layout
from ..replay.stats import ReplayResult
from ..replay.verdict import THRESHOLDS, Verdict
from .layer_ids import layout_fix

SERVING_INPUTS = "serving_dump (SGLang --debug-tensor-dump-output-folder or an eagle3lib dump), serving_layout, " \
                 "or serving_engine + serving_version"
ENGINE_DEFAULT = "engine default"      # ServingLayout.source of a config without ids: what every engine falls back to


def replay_findings(verdicts: Mapping[str, Verdict], train: Mapping[str, ReplayResult], serving,
                   num_layers: int | None, search=None) -> list[Finding]:
    """The causes notebook 02 can confirm or rule out, as findings: the serving layout (with the replay as
    evidence), a generalization gap, and a d2t misreading (when the layout search ran)."""
    out: list[Finding] = []
    where_s = f"replay of training samples, serving layout from {serving.source}"
    tr = train.get("training")
    if serving.source == ENGINE_DEFAULT and tr is not None:
        out += _missing_ids(tr, train.get("serving"), serving, where_s, num_layers)
    elif serving.layout is None:
        out += [not_checked(c, "replay of training samples", SERVING_INPUTS, serving.detail) for c in LAYOUT_CAUSES]
    elif tr is None:        # no replay under the trained layout: nothing to hold the served one against
        causes = CAPTURE_CAUSES if serving.source == ENGINE_DEFAULT else LAYOUT_CAUSES
        out += [not_checked(c, where_s, "a replay of the training samples under the trained layout "
                            "(train_data)") for c in causes]
    elif _unnamed(tr.layout):
        out += [not_checked(c, where_s, "a trained layout by name (training data that declares its layout, layer "
                            "ids in the draft config, or a target to identify the slots: target)",
                            f"not checked: the training samples were replayed as stored ({', '.join(tr.layout)}): "
                            f"nothing names the trained layout to hold the served [{layout_text(serving.layout)}] "
                            "against") for c in LAYOUT_CAUSES]
    else:
        sv = train.get("serving", tr)
        ev = {"trained_layout": list(tr.layout), "served_layout": list(serving.layout), "layout_source":
              serving.source, "acc_0_trained_layout": _acc0(tr), "acc_0_served_layout": _acc0(sv)}
        expl = explain(tuple(tr.layout), tuple(serving.layout), num_layers=num_layers)
        drop = _acc0(tr) - _acc0(sv) if None not in (_acc0(tr), _acc0(sv)) else None   # None: not measured
        status = "ruled out" if expl.clean else ("confirmed" if serving.source != "engine rules" and drop is not None
                                                 and drop > THRESHOLDS["wiring_drop"] else "suspected")
        found = causes_of(expl) if not expl.clean else ()
        measured = serving.source == "serving dump"       # typed or predicted layouts are not measurements
        for c in LAYOUT_CAUSES:
            if c in found:
                out.append(Finding(c, status, f"serving feeds [{', '.join(serving.layout)}], trained on "
                                   f"[{', '.join(tr.layout)}]: step-0 accuracy on {len(tr.per_sample)} training "
                                   f"samples {_acc(sv)} as served vs {_acc(tr)} with the trained layout "
                                   f"({serving.detail})", ev, where_s,
                                   fix=layout_fix(tr.layout, num_layers) if num_layers else
                                   f"feed the trained layout [{', '.join(tr.layout)}]",
                                   measured=measured))
            else:
                out.append(Finding(c, "ruled out", f"serving feeds the trained layout as far as {c} goes "
                                   f"({serving.detail})", ev, where_s, measured=measured))
    out.append(heldout_finding(verdicts.get("training"), tr))
    if search is not None:        # a d2t reading that restores the accuracy confirms; no such reading decides
        best = search.table[search.table.candidate == search.best]   # nothing (the map itself may be lost)
        acc = number_or_none(best.iloc[0]["acc_0"]) if len(best) else None    # a reading with no accuracy restores nothing
        if acc is not None and best.iloc[0]["d2t"] != "offsets" and search.restored:
            out.append(Finding("d2t_mapping", "confirmed", f"layout search: reading d2t as "
                               f"{best.iloc[0]['d2t']} restores step-0 accuracy to {acc:.3f}",
                               {"best": str(search.best), "acc_0": acc},
                               "layout search (d2t readings)", fix="store d2t as offsets (target_id = draft_id + "
                               "d2t[draft_id])", measured=True))
    return out


HELDOUT = "replay of held-out samples"
HELDOUT_ASPECT = ("held-out accuracy",)      # the served traffic is the other aspect (steps.served_prediction)


def training_numbers(tr: ReplayResult | None) -> dict:
    """What the seed's decision reads of the training-sample replay under the trained layout: its step-0 accuracy,
    the chain's acceptance per draft position and the τ each number of draft steps K up to the replay's reaches
    (from the simulated chain's histogram, on the verification walk when there is one: a chain's first K' drafts
    are accepted alike whatever follows, so the K-step histogram holds every shorter chain, up to where the walk
    drafts; from the conditional rates when nothing was simulated), or {}."""
    if tr is None or not len(tr.per_step):
        return {}
    ps, walked = tr.per_step, sum(tr.walked_histogram or ())
    h = tr.histogram if isinstance(tr.histogram, pd.DataFrame) and "count" in tr.histogram else None
    counts = list(tr.walked_histogram[1:]) if walked else list(h["count"]) if h is not None else []
    tot = float(sum(counts))        # rounds by tokens accepted, bonus included (1..K+1)
    if tot and not math.isnan(tr.simulated_accept_length):
        acc = range(1, len(counts) + 1)
        tau = {str(k): sum(min(a, k + 1) * c for a, c in zip(acc, counts)) / tot for k in range(1, tr.num_steps + 1)}
        per_pos = [sum(c for a, c in zip(acc, counts) if a > i) / tot for i in range(1, tr.num_steps + 1)]
        how = ("the simulated chain on the training samples, " +
               ("at the positions an engine's verification walk drafts at" if walked else "at every position"))
    else:
        ks = ps["accept_length_if_steps"] if "accept_length_if_steps" in ps else []
        tau = {str(k + 1): number_or_none(x) for k, x in enumerate(ks)}
        per_pos, how = [], "the conditional rates on the training samples"
    return {"acc_0_training": _acc0(tr), "positions_training": int(ps["positions"].iloc[0]) if "positions" in ps else 0,
            "tau_by_k_training": {k: round(t, 4) for k, t in tau.items() if t is not None},
            "per_position_training": [round(x, 4) for x in per_pos], "tau_by_k_from": how}


def heldout_finding(v: Verdict | None, tr: ReplayResult | None = None) -> Finding:
    """`generalization_gap` on its held-out aspect: the training samples' step-0 accuracy against each held-out
    set's (the served traffic, its other aspect, is decided beside the served τ). Every form carries the numbers
    measured (`training_numbers`), so the seed's decision reads them even where this aspect is not decided."""
    nums = {**training_numbers(tr), "recorded_val_acc": number_or_none(v.recorded_acc) if v is not None else None}
    held = {k: number_or_none(a) for k, a in (v.heldout_acc or {}).items()} if v is not None else {}
    nums.update({f"acc_0_{k}": a for k, a in held.items()}, heldout_acc0=held)
    if v is None or not v.heldout_acc:
        return Finding("generalization_gap", "not checked", "not checked: needs held-out or new-prompt data "
                       "(heldout_data / new_prompt_data_path)", nums, HELDOUT,
                       needs="held-out or new-prompt data (heldout_data / new_prompt_data_path)", aspects=HELDOUT_ASPECT)
    if number_or_none(v.train_acc) is None or None in held.values():
        gone = ["training"] * (number_or_none(v.train_acc) is None) + [k for k, a in held.items() if a is None]
        return Finding("generalization_gap", "not checked", f"not checked: no step-0 accuracy on {', '.join(gone)} "
                       "(no sample replayed)", nums, HELDOUT, needs="samples that replay (" + ", ".join(gone) +
                       ": no step-0 accuracy)", aspects=HELDOUT_ASPECT)
    if v.verdict in ("generalization", "healthy"):
        worst = min(v.heldout_acc.items(), key=lambda kv: kv[1])
        nums.update(acc_0_training=number_or_none(v.train_acc))
        return Finding("generalization_gap", "confirmed" if v.verdict == "generalization" else "ruled out",
                       f"training samples {v.train_acc:.3f} vs {worst[0]} {worst[1]:.3f} (step-0 accuracy)", nums,
                       HELDOUT + ", training layout",
                       fix="train on data like the served prompts" if v.verdict == "generalization" else "",
                       measured=True, aspects=HELDOUT_ASPECT)
    return Finding("generalization_gap", "not checked", f"not decided: the training layout's verdict is {v.verdict}",
                   nums, HELDOUT, needs="a draft that holds up on its own training samples first",
                   aspects=HELDOUT_ASPECT)


def _missing_ids(tr: ReplayResult, sv: ReplayResult | None, serving, where: str,
                 num_layers: int | None = None) -> list[Finding]:
    """missing_layer_ids measured: the draft replayed under the engines' default capture against its trained
    layout; the layout causes are about ids the config does not have (not checked)."""
    ev = {**serving.evidence, "trained_layout": list(tr.layout), "acc_0_trained_layout": _acc0(tr),
          "measurement": "replay of the training samples under the engine's default layout vs the trained layout"}
    needs = "layer ids in the draft config (without them every engine feeds its default capture)"
    out = [not_checked(c, where, needs, f"not checked: the config names no ids ({serving.detail})")
           for c in LAYOUT_CAUSES]
    if sv is None:
        return out + [not_checked("missing_layer_ids", where, "a replay under the engine's default layout")]
    if _acc0(tr) is None:
        return out + [not_checked("missing_layer_ids", where, "training samples that replay under the trained "
                                  "layout (train_data)", f"not checked: no step-0 accuracy under the trained "
                                  f"layout ({len(tr.skipped)} sample(s) skipped), nothing to hold the engine "
                                  "default's against")]
    ev["acc_0_engine_default"] = _acc0(sv)
    drop = _acc0(tr) - (_acc0(sv) if _acc0(sv) is not None else math.nan)
    fix = layout_fix(tr.layout, num_layers) if num_layers else \
        "write the trained layout's ids into the config (notebook 03 section 4 lists them per engine)"
    k = int(serving.evidence.get("fc_slots") or len(tr.layout))
    if len(serving.layout) != k:
        ev["refused_by"] = "vllm (the fc's input width does not match the captured slots: the first request fails)"
    if math.isnan(drop) or drop > THRESHOLDS["wiring_drop"]:
        return out + [Finding("missing_layer_ids", "confirmed", f"{serving.detail}: step-0 accuracy "
                              f"{_acc(sv)} under it (the missing slots fed as zeros) vs {_acc(tr)} with the "
                              "trained layout" + ("; vLLM refuses such a draft outright" if "refused_by" in ev else ""),
                              ev, where, fix=fix, source="vllm PR#50170", measured=True)]
    return out + [Finding("missing_layer_ids", "ruled out", f"{serving.detail}: the draft replays as well under it "
                          f"(step-0 accuracy {_acc(sv)} vs {_acc(tr)}): it was trained on the default", ev,
                          where, measured=True)]


def number_or_none(x):
    """A number, or None where it is missing (None, NaN, or not a number)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _acc(r: ReplayResult) -> str:
    """A replay's step-0 accuracy to print: "0.812", or "not measured (no sample replayed)"."""
    a = _acc0(r)
    return f"{a:.3f}" if a is not None else f"not measured ({len(r.skipped)} sample(s) skipped, none replayed)"


def _acc0(r: ReplayResult) -> float | None:
    """A replay's step-0 accuracy, None where it is missing (no step counted, None or NaN)."""
    return number_or_none(r.per_step["acc"].iloc[0]) if "acc" in r.per_step and len(r.per_step) else None


def _unnamed(layout) -> bool:
    """A replay layout nothing names (the slots as stored, `replay.items.stored_layout`)."""
    return tuple(layout) == stored_layout(len(layout)) and len(layout) > 0
