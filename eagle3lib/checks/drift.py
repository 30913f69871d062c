"""Check 6, target drift: the stored training hidden states against the current target's own recapture of the same
tokens, per slot: cosine and norm ratio (cosine alone is blind to a scale error). Tells apart the same model, the same
model in another dtype / quantization (small uniform error) and a different or fine-tuned model (large error,
growing with depth). Runs the target on `n` samples (`capture.capture`), so it is not a config-level check.

Measure, then decide: with the draft at hand, the same samples are replayed on their stored states and on the
recaptured ones (the states the current target serves, its own greedy tokens the reference), and the verdict
follows the accuracy change, not a cosine threshold: a drift the draft does not notice is ruled out, one that costs
it accuracy confirmed. A small uniform error is named as the numerics of the declared quantization, or of the
declared dtype, and never called quantization when none is declared. A shard whose slots match no boundary of the
target (and no layout names them) is compared slot by slot with the boundary it resembles most.

Causes: target_drift, quantized_target. Usage: ``check_drift(art, n=4)`` (the measurement: hidden.drift).
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from ..hidden.drift import best_boundaries, drift_table, recaptured
from ..hidden.recapture import recapture_command
from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

# a target that computes other states makes the served traffic (captured by it) score lower than the training
# samples (captured by the target trained on): that gap is the drift's consequence, not the prompts'
DRIFT_EXPLAINS = ("generalization_gap",)
WHERE = "checks.drift"
SAME = (0.999, 0.01)        # (min cosine, max |norm ratio - 1|): the same model, recomputed
CAST = (0.98, 0.05)         # the same model in another dtype / quantization
COSTS = 0.05                # step-0 accuracy lost on the recaptured states that counts as the drift mattering
MEASUREMENT = "replay of the training samples on their stored states vs the target's recapture of them"


def _replayed(art: Artifacts, model, samples, layout) -> dict:
    """Step-0 accuracy on the stored and on the recaptured states (empty without the draft; the error when it
    cannot run)."""
    if not art.draft_path:
        return {}
    from ..replay.evidence import step0_acc
    try:
        setup = dataclasses.replace(art.replay_setup, training_layout=tuple(layout))
        a = step0_acc(setup, [dataclasses.replace(s, layout=tuple(layout)) for s in samples], layout=tuple(layout))
        b = step0_acc(setup, recaptured(model, samples, layout), layout=tuple(layout))
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}
    return {"acc_0_stored_states": float(a), "acc_0_recaptured_states": float(b), "measurement": MEASUREMENT}


def numerics(art: Artifacts) -> str:
    """What a small uniform error is named as: the declared quantization, else the declared dtype, else neither."""
    raw = dict(art.target_info.raw)
    quant = raw.get("quantization_config") or {}
    if quant:
        return f"the numerics of the declared quantization ({quant.get('quant_method', 'quantization_config')})"
    dtype = raw.get("torch_dtype") or raw.get("dtype")
    if dtype and str(dtype) not in ("float32", "torch.float32"):
        return f"the numerics of the declared dtype ({dtype}, against float32 capture or training)"
    return "a small uniform error (no quantization or reduced dtype is declared: not their numerics)"


def classify(table: pd.DataFrame) -> str:
    """"same", "cast" (small uniform error), "scaled" (cosine fine, norms off) or "different" (large or growing)."""
    cos, ratio = table.cosine.to_numpy(), table.norm_ratio.to_numpy()
    off = abs(ratio - 1)
    if cos.min() >= SAME[0] and off.max() <= SAME[1]:
        return "same"
    if cos.min() >= SAME[0]:
        return "scaled"
    err = 1 - cos[table.depth.to_numpy().argsort()]                       # error by depth, shallow first
    growing = len(err) > 1 and err[-1] > 2 * max(err[0], 1e-6)
    if cos.min() >= CAST[0] and off.max() <= CAST[1] and not growing:
        return "cast"
    return "different"


def _command(art: Artifacts, layout) -> str:
    return recapture_command(art.target_path, art.data.root, layout)


# the causes check_drift reports (checks.judge: what a broken check reports as not checked)
DRIFT_CAUSES = ('target_drift',)


def check_drift(art: Artifacts, n: int = 4, progress: bool = False) -> list[Finding]:
    """Recapture `n` training samples through the target and say which of same / cast / scaled / different.

    Each slot is compared with the boundary it holds: the one identified by recapture (`art.trained`), else the
    data's declared layout, else the config's claim; a slot that matched no boundary is compared with its claim,
    which is where drift shows. The target is the artifacts' (`Artifacts.target_model`, loaded once)."""
    need = art.missing("target", "data")
    if need or not art.target_path:
        return [not_checked("target_drift", WHERE, need or NEEDS["target"])]
    L = art.target_info.num_layers
    tl = art.trained
    layout = tl.layout if tl is not None else art.data.layout
    samples = [s for s in art.data.sample(min(n, len(art.data)), 0)]
    if not samples:
        return [not_checked("target_drift", WHERE, NEEDS["data"] + " (no readable sample)")]
    try:
        model = art.target_model
        if samples[0].hidden_size != model.config.hidden_size:
            return [Finding("target_drift", "confirmed", f"the stored states are {samples[0].hidden_size} wide, the "
                            f"target's are {model.config.hidden_size}: data from another model",
                            {"file": str(art.data.root), "expected": model.config.hidden_size,
                             "found": samples[0].hidden_size}, WHERE,
                            fix=f"recapture the training data from this target ({_command(art, layout)}) and retrain",
                            measured=True)]
        layout_from = tl.source if tl is not None and tl.layout is not None else "declared"
        if layout is None or len(layout) != samples[0].num_slots:
            layout, layout_from = best_boundaries(model, samples), "the boundary each slot resembles most"
        table = drift_table(model, samples, layout, L, progress)
        rep = _replayed(art, model, samples, layout)
    except Eagle3Error as e:
        return [not_checked("target_drift", WHERE, "a target transformers can run on these tokens", str(e)[:200])]
    kind = classify(table)
    slots = table[["boundary", "cosine", "norm_ratio"]].to_dict("records")
    ev = {"samples": len(samples), "kind": kind, "slots": slots, "layout_from": layout_from,
          "file": str(art.data.root), "unmatched_slots": list(tl.unmatched) if tl is not None else [], **rep}
    by_depth = ", ".join(f"{b} {c:.3f}" for b, c in zip(table.boundary, table.cosine))
    quant = (dict(art.target_info.raw).get("quantization_config") or {})
    a, b = rep.get("acc_0_stored_states"), rep.get("acc_0_recaptured_states")
    if a is not None and b is not None and a == a and b == b:        # measured: the accuracy change decides
        lost = a - b
        acc = f"step-0 accuracy {a:.3f} on the stored states, {b:.3f} on the target's recapture"
        named = {"same": "the same model", "cast": numerics(art), "scaled": "the same directions at other norms",
                 "different": "a different or since fine-tuned model"}[kind]
        if lost <= COSTS:
            out = [Finding("target_drift", "ruled out", f"{acc}: the draft predicts as well on what the target "
                           f"computes now ({named}; cosine by slot {by_depth})", ev, WHERE, measured=True)]
        else:
            out = [Finding("target_drift", "confirmed", f"{acc} ({named}; cosine by slot {by_depth}): the target "
                           "no longer computes the states the draft was trained on", ev, WHERE,
                           fix="recapture the training data from the current target and retrain the draft",
                           source="field-causes.md #14; SpecForge#192; speculators#751", measured=True,
                           explains=DRIFT_EXPLAINS)]
        if quant and kind == "cast":
            out.append(Finding("quantized_target", "confirmed" if lost > COSTS else "ruled out", f"{acc}: "
                               f"{numerics(art)}", ev, WHERE, source="vllm#9534", measured=True))
        return out
    if kind == "same":
        return [Finding("target_drift", "ruled out", "the target recomputes the stored training states (same model)",
                        ev, WHERE, measured=True)]
    if kind == "cast":
        out = [Finding("target_drift", "ruled out", f"{numerics(art)} (min cosine {table.cosine.min():.4f}): the "
                       "same model", ev, WHERE, measured=True)]
        if quant:
            out.append(Finding("quantized_target", "suspected", "the quantized target's states differ a little from "
                               "the training states", ev, WHERE, source="vllm#9534",
                               needs="the draft (a replay on the recaptured states)", measured=True))
        return out
    if kind == "scaled":
        return [Finding("target_drift", "confirmed", "same directions, other norms (norm ratio "
                        f"{table.norm_ratio.min():.3g}..{table.norm_ratio.max():.3g}): a scale error cosine alone "
                        "would miss", ev, WHERE, fix="find the rescaling between capture and training (or recapture)",
                        source="ModelOpt debug/README.md (norm ratios beside cosine)", measured=True)]
    return [Finding("target_drift", "confirmed", f"the target no longer computes the training states (cosine by "
                    f"depth {by_depth}): a different or since fine-tuned model", ev, WHERE,
                    fix=f"recapture the training data from the current target ({_command(art, layout)}) and retrain "
                    "the draft on it",
                    source="field-causes.md #14; SpecForge#192; speculators#751", measured=True,
                    explains=DRIFT_EXPLAINS)]


@contract("drift", DRIFT_CAUSES, parts=("diffing",), trained_layout=True)
def judge_drift(art: Artifacts, opts: Options) -> list[Finding]:
    """The recapture runs the whole target: only when replay evidence is asked for (replay_n > 0)."""
    if opts.replay_n <= 0:
        return [not_checked("target_drift", "checks.drift", "replay_n > 0 (a recapture of training samples "
                            "through the target)")]
    return check_drift(art, n=opts.replay_n)
