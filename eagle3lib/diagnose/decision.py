"""The seed's decision, first, on every deployment: what the training samples say against what was served.

"If accept rate is high on training data but low on new data, it's a generalization issue. If it's also low on
training data, we have a wiring/loading bug." The training samples are the record of training (the shipped config,
d2t, lm_head and embedding are only evidence about it), the served traffic the record of what was served. So the
decision sets side by side, from numbers the checks already measured (each finding's evidence; nothing is
replayed here): the step-0 accuracy on the training samples as training recorded it, as replayed with the shipped
artifacts and as restored where a search restores it (replay.counterfactual, replay.artifacts), on the held-out
samples (checks.replayed_layout), on the served traffic (checks.generalization), and the served τ beside the
replay's prediction (replay.served). Its verdict, with the numbers that decided it:
- **wiring/loading**: the draft fails its own training samples (more than THRESHOLDS["wiring_drop"] below the
  recorded accuracy, or under THRESHOLDS["wiring_floor"] without one), the engine refused it, a wiring cause is
  confirmed (the engine serves the draft otherwise than replayed), or the served τ falls short of the replay on the
  very traffic served;
- **generalization gap**: its own samples pass, the served prompts (or held-out ones) score lower, the engine
  serves it as replayed;
- **ceiling**: its own samples pass and it is served as replayed, but the launch caps τ (K + 1 tokens a round: a
  small K, SGLang's num_draft_tokens rewrite) and the replay reaches CEILING_GAIN more at a deeper K (from the
  launch's K and the replay alone when nothing was served);
- **healthy**: its own samples pass and the served τ is what the replay predicts;
- or **not checked: <input> not given** where the input that decides is missing.
`seed_decision(findings)` -> `SeedDecision`; `decision_lines` / `decision_html` / `decision_markdown` render it
(the terminal, the index, a notebook). Usage: ``d = seed_decision(part.findings); d.frame(); d.verdict``.
"""
from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import pandas as pd

from ..causes import STATUSES, Finding
from ..checks.engine_said import WHERE as ENGINE_SAID
from ..replay.artifacts import fails_own_samples
from ..replay.counterfactual import WHERE as COUNTERFACTUAL
from ..checks.generalization import WHERE as TRAFFIC
from ..checks.served_loss import AS_SERVED, tau_tolerance

VERDICTS = ("wiring/loading", "generalization gap", "ceiling", "healthy")
CEILING_GAIN = 0.5      # accepted tokens a deeper K must add to the replay's τ for the launch's K to be a ceiling
# causes about what the draft is fed or how it is loaded: one confirmed is the engine serving it otherwise
WIRING = ("missing_layer_ids", "layer_id_off_by_one", "final_norm_slot", "dropped_variant_flags", "rope_mismatch",
          "wrong_embedding", "lm_head_missing", "d2t_mapping", "weights_dropped", "wrong_method",
          "hidden_size_mismatch", "aux_layout_mismatch", "aux_opt_out", "specforge_norm_output", "fc_norm_conflict",
          "layer_id_count", "draft_config_differs", "engine_cannot_run", "target_drift")
TRAIN_INPUT = "the training samples (train_data / --train-data)"
SERVED_INPUT = "the served τ (served_log / --served-log)"
TRAFFIC_INPUT = "the served traffic (served_traffic / --served-traffic)"


@dataclass(frozen=True)
class Row:
    """One line of the seed's table: what was measured, its value (None: not measured) and where, or why not."""
    what: str
    value: float | None
    note: str

    def measured_text(self) -> str:
        return "-" if self.value is None else f"{self.value:.2f}"


@dataclass(frozen=True)
class SeedDecision:
    """The seed's table and its verdict (module docstring); `numbers` are those that decided it."""
    verdict: str                       # one of VERDICTS, or "not checked: <input> not given"
    reason: str                        # one sentence with the numbers that decided it
    rows: tuple[Row, ...]
    numbers: dict = field(default_factory=dict)
    causes: tuple[str, ...] = ()       # the catalogue causes it rests on

    @property
    def checked(self) -> bool:
        return self.verdict in VERDICTS

    def frame(self) -> pd.DataFrame:
        """One row per measurement: what, the value, where it was measured (or the input that would measure it)."""
        return pd.DataFrame([{"measured": r.what, "value": r.value, "where / why not": r.note} for r in self.rows],
                            columns=["measured", "value", "where / why not"])

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "reason": self.reason, "causes": list(self.causes),
                "numbers": dict(self.numbers),
                "rows": [{"what": r.what, "value": r.value, "note": r.note} for r in self.rows]}


# ---------------------------------------------------------------- reading the findings

def _first(findings, test) -> Finding | None:
    return next((f for f in findings if test(f)), None)


def _num(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def _training(fs) -> tuple[float | None, float | None, str, str]:
    """(replayed with the shipped artifacts, recorded, where the recorded number was read, why not replayed)."""
    cf = _first(fs, lambda f: f.where.startswith(COUNTERFACTUAL) and "acc0_as_shipped" in f.evidence)
    held = _first(fs, lambda f: f.cause == "generalization_gap" and "acc_0_training" in f.evidence)
    replayed = _num(cf.evidence["acc0_as_shipped"]) if cf else _num(held.evidence["acc_0_training"]) if held else None
    rec = _first(fs, lambda f: _num(f.evidence.get("recorded")) is not None and f.where.startswith(COUNTERFACTUAL))
    recorded = _num(rec.evidence["recorded"]) if rec else (
        _num(held.evidence.get("recorded_val_acc")) if held else None)
    src = str(rec.evidence.get("recorded_from") or "") if rec else "the recorded_acc parameter" if recorded else ""
    why = next((f.needs for f in fs if f.status == "not checked" and f.where.startswith(COUNTERFACTUAL)
                and f.needs), "") or TRAIN_INPUT
    return replayed, recorded, src, why


def _restored(fs) -> Finding | None:
    """The confirmed finding of a search that restores the most accuracy on the training samples."""
    cands = [f for f in fs if f.status == "confirmed" and _num(f.evidence.get("acc0_restored")) is not None]
    return max(cands, key=lambda f: _num(f.evidence["acc0_restored"]), default=None)


def _served(fs) -> dict:
    """The first served τ with its replays: {served, predicted, as_trained, tolerance, k, source, per_position...}."""
    f = _first(fs, lambda f: f.where == AS_SERVED and "tau_as_trained" in f.evidence)
    if f is not None:
        e = f.evidence
        served, tr, sv = _num(e["served"]), _num(e["tau_as_trained"]), _num(e["tau_as_served"])
        ran = [t for t in (tr, sv) if t is not None]          # a replay that could not run has no τ
        near = min(ran, key=lambda t: abs(t - served)) if ran and served is not None else None
        return {"served": served, "predicted": near, "as_trained": tr, "as_served": sv, "k": e.get("num_steps"),
                "tolerance": _num(e.get("tolerance")) or (tau_tolerance(near) if near is not None else None),
                "source": e.get("served_source", ""),
                "replayed_on": e.get("replayed_on") or "the replayed samples",
                "acc0_replayed": _num(e.get("acc0_as_trained")),
                "per_position_served": e.get("per_position_served") or [],
                "per_position_replayed": e.get("per_position_as_trained") or []}
    f = _first(fs, lambda f: "predicted" in f.evidence and "served" in f.evidence and "num_steps" in f.evidence)
    if f is not None:
        e = f.evidence
        p = _num(e["predicted"])
        return {"served": _num(e["served"]), "predicted": p, "as_trained": p, "k": e.get("num_steps"),
                "tolerance": _num(e.get("tolerance")) or tau_tolerance(p), "source": e.get("served_source", ""),
                "replayed_on": "the training samples, in the layout the server feeds", "per_position_served": [],
                "per_position_replayed": []}
    return {}


# ---------------------------------------------------------------- the decision

def seed_decision(findings: Iterable[Finding], status: Mapping[str, str] | None = None) -> SeedDecision:
    """The seed's table and verdict from the findings of one diagnosis (every part's, or one notebook's).
    `status`: each cause's combined status (diagnose.combine: what a measurement settles); a cause counts as
    confirmed only where it is (without it, where one of its findings is)."""
    fs = list(findings)
    if status is not None:            # a finding whose cause the diagnosis did not confirm confirms nothing here
        fs = [f if f.status != "confirmed" or status.get(f.cause) == "confirmed" else   # a conflict: suspected
              replace(f, status=status.get(f.cause) if status.get(f.cause) in STATUSES else "suspected") for f in fs]
    replayed, recorded, rec_src, why_train = _training(fs)
    restored = _restored(fs)
    held_f = _first(fs, lambda f: f.cause == "generalization_gap" and "heldout_acc0" in f.evidence)
    held = {k: _num(v) for k, v in (held_f.evidence["heldout_acc0"] if held_f else {}).items() if _num(v) is not None}
    traffic = _first(fs, lambda f: f.where == TRAFFIC and "acc0_served_traffic" in f.evidence)
    served = _served(fs)
    train_ev = held_f.evidence if held_f else {}
    rows = [Row("training samples: recorded", recorded, rec_src or "not checked: the recorded accuracy "
                "(--recorded-acc or --training-log) not given"),
            Row("training samples: replayed as shipped", replayed,
                "step-0 accuracy under the shipped config, d2t, lm_head and embedding" if replayed is not None
                else f"not checked: {why_train} not given"),
            Row("training samples: restored", _num(restored.evidence["acc0_restored"]) if restored else None,
                f"{restored.cause}: {restored.fix}" if restored else "no search restores more" if replayed is not None
                else f"not checked: {why_train} not given")]
    held_need = held_f.needs if held_f is not None and held_f.needs else "held-out data (--heldout-data)"
    rows += [Row(f"held-out samples: {k}", v, "step-0 accuracy, training layout") for k, v in held.items()] or [
        Row("held-out samples", None, f"not checked: {held_need} not given")]
    t_acc = _num(traffic.evidence["acc0_served_traffic"]) if traffic else (
        served.get("acc0_replayed") if served.get("replayed_on") == "the served traffic" else None)
    rows.append(Row("served traffic", t_acc, f"step-0 accuracy, the draft as trained, {traffic.evidence['answers']} "
                    "served answers" if traffic else f"not checked: {TRAFFIC_INPUT} not given"))
    k = served.get("k")
    rows.append(Row("served τ", served.get("served"), (f"{served['source']}" + (f", K = {k}" if k else ""))
                    if served else f"not checked: {SERVED_INPUT} not given"))
    rows.append(Row("predicted τ (replay)", served.get("predicted"), f"the replay nearest it, on "
                    f"{served['replayed_on']}" if served else f"not checked: {SERVED_INPUT} not given"))
    by_k = {int(a): _num(b) for a, b in (train_ev.get("tau_by_k_training") or {}).items() if _num(b) is not None}
    verdict, reason, causes, nums = _verdict(fs, replayed, recorded, restored, held, traffic, served, by_k)
    nums.update(acc0_recorded=recorded, acc0_replayed=replayed, acc0_heldout=held, acc0_served_traffic=t_acc,
                served_tau=served.get("served"), predicted_tau=served.get("predicted"), k=k,
                tau_by_k_training={str(a): b for a, b in by_k.items()})
    return SeedDecision(verdict, reason, tuple(rows), nums, tuple(causes))


def _verdict(fs, replayed, recorded, restored, held, traffic, served, by_k) -> tuple[str, str, list, dict]:
    if replayed is None:
        return f"not checked: {TRAIN_INPUT} not given", "nothing to decide from without the training samples " \
            "replayed: they are the record of training", [], {}
    base = f"its own training samples replay at {replayed:.2f}" + (
        f" (recorded {recorded:.2f})" if recorded is not None else " (no recorded accuracy to hold them against)")
    if fails_own_samples(replayed, recorded):
        fix = (f"; what restores them ({restored.cause}): {restored.fix}" if restored else
               "; no searched config field or tensor restores it: the checkpoint is not what was "
               "trained, or the samples are not its own")
        return "wiring/loading", f"the draft fails its own training samples: {base}{fix}", \
            [restored.cause] if restored else [], {"fails_own_samples": True}
    refused = _first(fs, lambda f: f.status == "confirmed" and f.where == ENGINE_SAID and "error" in f.evidence)
    if refused is not None:
        return "wiring/loading", f"{base}, but the engine does not load it: {refused.summary[:240]}", \
            [refused.cause], {"refused": True}
    wired = [f for f in fs if f.status == "confirmed" and f.cause in WIRING]
    if wired:
        names = list(dict.fromkeys(f.cause for f in wired))
        tau = (f"; served τ {served['served']:.2f}, replayed as trained {served['as_trained']:.2f}, as the engine "
               f"loads it {served['as_served']:.2f}" if served.get("as_served") is not None else "")
        return "wiring/loading", f"{base}: its own samples pass, but the engine serves it otherwise than trained " \
            f"({', '.join(names)}: {wired[0].summary[:200]}){tau}", names, {}
    gap = [f for f in fs if f.cause == "generalization_gap" and f.status == "confirmed"
           and (traffic is None or f.where == TRAFFIC)]        # the traffic served, when replayed, decides
    if not served:
        if gap:
            return "generalization gap", f"{base}; {gap[0].summary}", ["generalization_gap"], {}
        cap = _ceiling(fs, served, by_k)
        if cap:
            return "ceiling", f"{base}; {cap[0]}", cap[1], cap[2]
        return f"not checked: {SERVED_INPUT} not given", f"{base}: its own samples pass" + (
            "; held-out samples: " + ", ".join(f"{k} {v:.2f}" for k, v in held.items()) if held else "") + \
            "; nothing served to hold them against", [], {}
    s, p, tol = served["served"], served["as_trained"], served["tolerance"]
    if p is None:
        p = served["predicted"]
    if s is None or p is None or tol is None:           # served, but no replay of its setting could run
        return ("not checked: the replay of the served setting did not run", f"{base}; served τ "
                f"{'unknown' if s is None else f'{s:.2f}'} and no replay to set beside it", [], {})
    on_traffic = served["replayed_on"] == "the served traffic"
    tau = f"served τ {s:.2f}, the replay predicts {p:.2f} on {served['replayed_on']}"
    if gap:
        return "generalization gap", f"{base}; {gap[0].summary}", ["generalization_gap"], {}
    if s < p - tol:
        if on_traffic:
            return "wiring/loading", f"{base}; {tau}: the engine accepts {p - s:.2f} fewer tokens a round than the " \
                "draft does on the very traffic it served, so it serves the draft otherwise than replayed (no " \
                "modelled aspect explains it)", ["served_loss_unexplained"], {}
        return f"not checked: {TRAFFIC_INPUT} not given", f"{base}; {tau}, and those are not the prompts that " \
            "were served: the served traffic decides between a generalization gap and the serving path", [], {}
    cap = _ceiling(fs, served, by_k)
    if cap:
        return "ceiling", f"{base}; {cap[0]}", cap[1], cap[2]
    return "healthy", f"{base}; {tau} (within {tol:.2f})" + (
        "; held-out samples: " + ", ".join(f"{k} {v:.2f}" for k, v in held.items()) if held else ""), [], {}


def launch_k(fs) -> tuple[int | None, int | None]:
    """(K, the τ cap) the launch runs, from the serving-settings finding: SGLang's effective num_draft_tokens (a
    rewrite confirmed) or num_steps, vLLM's num_speculative_tokens; (None, None) when the launch was not read."""
    for f in fs:
        if f.cause != "ndt_override":
            continue
        e = f.evidence
        ndt = e.get("num_draft_tokens_effective") if f.status == "confirmed" else None
        if isinstance(ndt, int) and e.get("eagle_topk_effective", 1) in (1, None):
            return ndt - 1, ndt                          # a chain of ndt tokens: ndt - 1 drafts and the bonus
        k = e.get("num_steps_effective") if f.status == "confirmed" else e.get("num_steps",
                                                                               e.get("num_speculative_tokens"))
        if isinstance(k, int):
            return k, k + 1
    return None, None


def _ceiling(fs, served, by_k) -> tuple[str, list, dict] | None:
    """A launch that caps τ: SGLang's rewrite confirmed, or a K whose deeper replay reaches CEILING_GAIN more
    (than the served τ, or than the replay at K when nothing was served)."""
    k = served.get("k") if served else None
    lk, cap = launch_k(fs)
    k = k if isinstance(k, int) else lk
    if not isinstance(k, int):
        return None
    cap = cap if lk == k and cap else k + 1
    s = served.get("served") if served else None
    at_k = s if s is not None else by_k.get(k)
    ndt = _first(fs, lambda f: f.cause == "ndt_override" and f.status == "confirmed")
    deeper = {j: t for j, t in by_k.items() if at_k is not None and j > k and t - at_k > CEILING_GAIN}
    if ndt is None and not deeper:
        return None
    text = f"the launch caps τ at {cap} (K = {k}: at most {k} drafted tokens and the bonus a round)"
    if s is not None:
        text += f"; served τ {s:.2f} is {s / cap:.0%} of the cap"
    elif at_k is not None:
        text += f"; the replay predicts τ {at_k:.2f} at K = {k} (nothing served to measure it)"
    pos_s, pos_r = (served.get("per_position_served") or [], served.get("per_position_replayed") or []) \
        if served else ([], [])
    if pos_s or pos_r:
        text += ("; per-position acceptance " + (f"{', '.join(f'{x:.2f}' for x in pos_s)} served against " if pos_s
                                                 else "") + f"{', '.join(f'{x:.2f}' for x in pos_r)} replayed as trained")
    if deeper:
        text += "; the replay predicts τ " + ", ".join(f"{t:.2f} at K = {j}" for j, t in sorted(deeper.items())) + \
            " on the training samples"
    if ndt is not None:
        text += f"; {ndt.summary[:200]}"
    return text, ["ndt_override"] if ndt is not None else [], {"cap": cap, "k": k, "deeper": {
        str(a): b for a, b in deeper.items()}}


# ---------------------------------------------------------------- rendering

def decision_lines(d: SeedDecision, width: int = 110) -> list[str]:
    """The seed's table as the terminal prints it, before the ranked causes."""
    out = textwrap.wrap(f"THE SEED'S DECISION: {d.verdict.upper()}", width, subsequent_indent="  ",
                        break_long_words=False)
    out += textwrap.wrap(d.reason, width, initial_indent="  ", subsequent_indent="  ", break_long_words=False)
    for r in d.rows:
        head = f"  {r.what:<38} {r.measured_text():>5}  "
        note = textwrap.wrap(r.note, max(20, width - len(head)), break_long_words=False, break_on_hyphens=False)
        out.append(head + (note[0] if note else ""))
        out += [" " * len(head) + line for line in note[1:]]           # the whole note, wrapped, never cut
    return out + [""]


def with_decision(text: str, d: SeedDecision, problems: int = 0, width: int = 110) -> str:
    """A diagnosis' terminal text (`answer.answer_text`) opened by the seed's decision wrapped to `width`: first,
    or, when given inputs could not be read (`problems`), right after the headline and the problems that say so
    (those come first)."""
    seed = "\n".join(decision_lines(d, width))
    if not problems:
        return seed + "\n" + text
    parts = text.split("\n\n", 2)                    # headline, the problems block, the ranked causes
    return "\n\n".join(parts[:2]) + "\n\n" + seed + ("\n" + parts[2] if len(parts) > 2 else "")


def decision_markdown(d: SeedDecision) -> str:
    """The seed's table as markdown (a notebook cell, a report)."""
    lines = [f"**The seed's decision: {d.verdict}.** {d.reason}", "", "| measured | value | where / why not |",
             "|---|---|---|"]
    lines += [f"| {r.what} | {r.measured_text()} | {r.note.replace('|', '/')} |" for r in d.rows]
    return "\n".join(lines) + "\n"


def decision_html(d: SeedDecision) -> str:
    """The seed's table as the index shows it, first."""
    esc = html.escape
    cls = "healthy" if d.verdict == "healthy" else "notchecked" if not d.checked else "confirmed"
    rows = "".join(f"<tr class='seed'><td>{esc(r.what)}</td><td>{esc(r.measured_text())}</td>"
                   f"<td>{esc(r.note)}</td></tr>" for r in d.rows)
    return (f"<h2>The seed's decision</h2><p class='{cls}'>{esc(d.verdict)}</p><p>{esc(d.reason)}</p>"
            f"<table class='small'><tr><th>measured</th><th>value</th><th>where / why not</th></tr>{rows}</table>")

