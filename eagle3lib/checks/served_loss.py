"""What a served τ decides, judged on the replays beside it (replay.served, replay.as_served compute them):
- `served_findings`: a served τ against the replay under the setting it ran. Within the tolerance the serving path
  reproduces the draft's offline acceptance (`engine_regression` ruled out); below, the server loses acceptance the
  draft has offline (`served_loss_unexplained` suspected: a served layout or prompts unlike the replayed data, which
  notebooks 02 and 03 tell apart; `engine_regression` not checked: it needs the same artifacts served on another
  engine version); above, greedy verification on this data cannot reach it (`measurement_artefact` suspected).
- `as_served_findings`: a served τ beside the draft replayed as trained and as the engine loads it, aspect by aspect:
  what it says about each wiring cause.
The tolerance is max(0.2, 10% of the prediction) accepted tokens: served prompts are not the replayed samples.
Usage: ``served_findings(served_vs_replay(setup, data, 3.9, (5, 4, 8)))``;
``as_served_findings(3.2, "server.log:10", replay_as_served(...), num_layers=61)``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..causes import Finding, not_checked
from ..hidden.explain import causes_of, explain
from ..layout import ZERO
from ..replay.as_served import ASPECT_CAUSE, CONFIG_ROPE
from ..replay.served import ServedVsPredicted
from ..replay.tree_acceptance import label_of

WHERE = "served accept length vs replay under the served setting"


def tau_tolerance(predicted: float) -> float:
    """Accepted tokens by which served and predicted τ may differ and still agree: max(0.2, 10% of predicted)."""
    return max(0.2, 0.1 * predicted)


def served_findings(c: ServedVsPredicted) -> list[Finding]:
    """The gap as findings about `engine_regression` (and `measurement_artefact` when served is above)."""
    tol = tau_tolerance(c.predicted)
    lab, ev = label_of(c.setting), {**c.evidence(), "tolerance": round(tol, 3)}
    head = (f"served τ {c.served:.2f} under {lab} vs {c.predicted:.2f} replayed under the same "
            f"{c.kind} ({c.positions} positions)")
    if c.kind == "tree":
        head += f"; a chain of the same depth would predict {c.chain:.2f}"
    if abs(c.gap) <= tol:
        return [Finding("engine_regression", "ruled out", f"{head}: the serving path reproduces the "
                        "draft's offline acceptance", ev, WHERE, measured=True)]
    if c.gap < 0:
        return [Finding("served_loss_unexplained", "suspected", f"{head}: the server accepts {-c.gap:.2f} "
                        "fewer tokens per round than the draft does offline (a served layout / prompts unlike "
                        "the replayed data, which notebooks 02 and 03 tell apart, or the engine itself)", ev,
                        WHERE, fix="replay in the layout the server feeds and on served prompts (02); if both "
                        "stay high, serve the same artifacts on another engine version", measured=True),
                not_checked("engine_regression", WHERE, VERSION_EVIDENCE)]
    return [Finding("engine_regression", "ruled out", f"{head}: the server accepts more, not less", ev, WHERE,
                    measured=True),
            Finding("measurement_artefact", "suspected", f"{head}: greedy verification on the replayed data "
                    f"reaches {c.gap:.2f} fewer tokens than served (repetitive outputs, a lossy accept "
                    "threshold, or a counter convention)", ev, WHERE,
                    fix="recompute τ from the raw counters (accepted / rounds + 1) on the served prompts")]


AS_SERVED = "served accept length vs the draft replayed as the engine loads it"
# engine_regression means the same artifacts serve better on another version: only that evidence decides it
VERSION_EVIDENCE = ("the same artifacts served on another engine version (its server log or /metrics), or an engine "
                    "fact placing a regression in the served version")
WIRING_CAUSES = ("missing_layer_ids", "layer_id_off_by_one", "aux_layout_mismatch", "final_norm_slot",
                 "d2t_mapping", "wrong_embedding", "lm_head_missing", "rope_mismatch", "draft_config_differs")


def distinct_floor(tau: float) -> float:
    """Accepted tokens by which two replays must differ before a served τ can tell them apart: max(0.1, 3%)."""
    return max(0.1, 0.03 * tau)


def aspect_causes(aspect: str, as_served, num_layers: int | None, ids_read: bool = True) -> tuple[str, ...]:
    """The catalogue causes an aspect served differently stands for: the kind of layout difference (hidden.explain),
    `missing_layer_ids` when the engine read no ids and fell back to its default; the cause of every other aspect."""
    if aspect == "config":
        fields = set(as_served.trained.get("config") or {})
        return tuple(c for c, hit in (("rope_mismatch", fields & set(CONFIG_ROPE)),
                                      ("draft_config_differs", fields - set(CONFIG_ROPE))) if hit)
    if aspect != "layout":
        return (ASPECT_CAUSE[aspect],)
    expl = explain(tuple(as_served.trained["layout"]),
                   tuple(b if b is not None else ZERO for b in as_served.served["layout"]), num_layers=num_layers)
    found = causes_of(expl) or ("aux_layout_mismatch",)
    return (("missing_layer_ids",) if not ids_read else ()) + tuple(found)


# the aspects (causes.ASPECTS) a missing tensor is about
UNKNOWN_ASPECTS = {"lm_head_missing": ("present",)}


def as_served_findings(served: float, source: str, as_served, *, num_layers: int | None, ids_read: bool = True,
                       engine_per_position=None, replayed_on: str = "") -> list[Finding]:
    """What a served τ measured by the real engine says about each wiring cause, beside the draft replayed as
    trained and as the engine loads it (replay.as_served). Every finding rests on that measurement:
    - served ≈ as trained: the engine runs the draft as trained; every wiring cause is ruled out, whatever a table
      or the view predicted (the view is then wrong where it differs, and the finding says so);
    - served ≈ as served < as trained: the aspects whose own replay drops are confirmed, the others ruled out, and
      the loss is explained (no engine regression);
    - served below both, or between them: the loss is not (fully) explained: the differing aspects and an engine
      regression stay suspected.
    """
    tr, sv = as_served.get("as trained"), as_served.get("as served") or as_served.get("as trained")
    if math.isnan(tr.tau) or math.isnan(sv.tau):          # a replay scored nothing: it measures nothing
        return [not_checked("engine_regression", AS_SERVED, "a replay of the served setting that scores positions "
                            f"(as trained: {tr.tau}, as the engine loads it: {sv.tau})")]
    tol = tau_tolerance(tr.tau)
    ev = {"served": round(served, 3), "served_source": source, "tau_as_trained": round(tr.tau, 3),
          "tau_as_served": round(sv.tau, 3), "tolerance": round(tol, 3), "num_steps": as_served.num_steps,
          "differing": list(as_served.differing), "sources": dict(as_served.sources),
          "trained_layout": list(as_served.trained["layout"]),
          "served_layout": [b or "nothing" for b in as_served.served["layout"]], "positions": tr.positions,
          "drafts": tr.drafts, "tau_as_trained_every_position": round(tr.tau_every_position, 3),
          "per_position_as_trained": [round(x, 3) for x in tr.per_position],
          "per_position_as_served": [round(x, 3) for x in sv.per_position],
          "per_position_served": [round(float(x), 3) for x in engine_per_position or ()],
          "acc0_as_trained": round(tr.acc0, 4), "acc0_as_served": round(sv.acc0, 4), "replayed_on": replayed_on}
    where = f" (at the {tr.drafts} drafts of the engine's verification walk)" if tr.drafts else ""
    head = (f"served τ {served:.2f} ({source}); replayed as trained {tr.tau:.2f}, as the engine loads it "
            f"{sv.tau:.2f}{where}")
    diff = as_served.differing
    blamed = {a: aspect_causes(a, as_served, num_layers, ids_read) for a in diff}
    out = _decided(served, as_served, tr, sv, tol, ev, head, diff, blamed)
    # a cause whose tensors the checkpoint lacks: 'as trained' is the loader's stand-in, so no replay rules it out;
    # the served τ matching that stand-in's replay measures what the engine serves in its place
    unknown = set(as_served.unknown)
    out = [f for f in out if not (f.cause in unknown and f.status == "ruled out")]
    out = [f for f in out if not (f.cause in as_served.unseen and f.status == "ruled out")]   # never seen, never ruled out
    if as_served.unseen:
        out = [replace(f, evidence={**f.evidence, "not_replayed": dict(as_served.unseen)})
               if f.cause == "served_loss_unexplained" else f for f in out]
    for c in sorted(unknown):
        same = abs(served - tr.tau) <= tol
        out.append(Finding(c, "confirmed" if same else "suspected",
                           f"{head}: the checkpoint lacks the tensors {c} is about, so 'as trained' replays the "
                           "stand-in an engine loads in their place"
                           + (", and the served τ reproduces it: the engine serves the draft without them"
                              if same else "; the served τ differs from that replay (the engine's stand-in may "
                              "differ)"), {**ev, "unknown": sorted(unknown)}, AS_SERVED,
                           fix="ship the trained tensors (re-export the checkpoint from the training run)",
                           measured=True, aspects=UNKNOWN_ASPECTS.get(c, ())))
    return out


def _decided(served, as_served, tr, sv, tol, ev, head, diff, blamed) -> list[Finding]:
    """Each hypothesis by how well it explains the served τ: its distance from the replay as trained and from the
    replay as served (the margin between them in the evidence). As served explains it when the two replays are
    far enough apart to tell (`distinct_floor`), the served τ is nearer that one, and within the tolerance."""
    out: list[Finding] = []
    d_tr, d_sv, floor = abs(served - tr.tau), abs(served - sv.tau), distinct_floor(tr.tau)
    distinct = bool(diff) and abs(tr.tau - sv.tau) > floor
    ev = {**ev, "distance_as_trained": round(d_tr, 3), "distance_as_served": round(d_sv, 3),
          "margin": round(abs(d_tr - d_sv), 3), "distinct_floor": round(floor, 3)}
    explained = distinct and d_sv < d_tr and d_sv <= tol
    if not explained and d_tr <= tol:
        for c in WIRING_CAUSES:
            why = next((a for a, cs in blamed.items() if c in cs), None)
            text = f"{head}: the engine serves the draft as trained"
            if why is not None and sv.tau < tr.tau - tol:
                text += (f" although its {as_served.sources.get(why, '?')} view loads {why} as "
                         f"{_short(as_served.served[why])}, which would replay at {sv.tau:.2f}: that view is wrong")
            out.append(Finding(c, "ruled out", text, ev, AS_SERVED, measured=True))
        out.append(Finding("engine_regression", "ruled out", f"{head}: no acceptance is lost in serving", ev,
                           AS_SERVED, measured=True))
        return out
    for a in diff:
        alone = as_served.get(f"{a} as served") or sv
        drop = alone.tau < tr.tau - floor and abs(served - alone.tau) < d_tr
        for c in blamed[a]:
            if explained:
                status = "confirmed" if drop else "ruled out"
                text = (f"{head}: serving {a} as {_short(as_served.served[a])} (from the "
                        f"{as_served.sources.get(a, '?')}) alone replays at {alone.tau:.2f}"
                        + (f", which explains the served τ (off by {abs(served - alone.tau):.2f}, as trained by "
                           f"{d_tr:.2f})" if drop else ": not what loses acceptance"))
            else:
                status = "suspected" if drop else "ruled out"
                text = (f"{head}: serving {a} as {_short(as_served.served[a])} replays at {alone.tau:.2f}; the "
                        f"served τ is off both replays by more than {tol:.2f} (as trained by {d_tr:.2f}, as "
                        f"served by {d_sv:.2f})")
            fix = {"d2t_mapping": "store the map under the name the engine reads ('d2t')",
                   "wrong_embedding": "ship no embed_tokens (engines share the target's) or the target's own",
                   "lm_head_missing": "ship the trained lm_head.weight",
                   "rope_mismatch": "serve with the RoPE the draft was trained with",
                   "draft_config_differs": "write the trained values into config.json: " + ", ".join(
                       f"{k} {v!r}" for k, v in (as_served.trained.get("config") or {}).items())}.get(
                c, f"make the engine feed [{', '.join(as_served.trained['layout'])}]") if status != "ruled out" else ""
            out.append(Finding(c, status, text, {**ev, "aspect": a, "tau_aspect_alone": round(alone.tau, 3)},
                               AS_SERVED, fix=fix, measured=True))
    named = {c for cs in blamed.values() for c in cs}
    if explained or not diff:
        for c in WIRING_CAUSES:
            if c not in named:
                out.append(Finding(c, "ruled out", f"{head}: nothing the engine loads differently touches it", ev,
                                   AS_SERVED, measured=True))
    if explained:
        out.append(Finding("engine_regression", "ruled out", f"{head}: the loss is what the engine loads "
                           f"({', '.join(diff)}), not the serving path", ev, AS_SERVED, measured=True))
    elif served < min(tr.tau, sv.tau) - tol:
        out.append(Finding("served_loss_unexplained", "suspected", f"{head}: the server accepts less than the draft "
                           "does even as the engine loads it (prompts unlike the replayed data, an aspect this view "
                           "does not model, or the engine itself); no other version was seen serving these "
                           "artifacts", ev, AS_SERVED, fix="replay on the served traffic; serve the same artifacts on "
                           "another engine version", measured=True))
        out.append(not_checked("engine_regression", AS_SERVED, VERSION_EVIDENCE))
    elif served > tr.tau + tol:
        out.append(Finding("measurement_artefact", "suspected", f"{head}: the server accepts more than greedy "
                           "verification on the replayed data reaches (repetitive outputs, a lossy threshold, a "
                           "counter convention)", ev, AS_SERVED, measured=True))
    return out


def _short(v) -> str:
    return "[" + ", ".join(str(x) for x in v) + "]" if isinstance(v, tuple) else str(v)
