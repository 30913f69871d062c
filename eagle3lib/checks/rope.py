"""Check 3, RoPE: the draft's `rope_theta` / `rope_scaling` / `partial_rotary_factor` against the target's, read
from the Transformers 4 keys and Transformers 5's `rope_parameters`; against the training config when given. A
draft-vs-target difference is decided by measurement whenever the draft's weights, the target and the training
data are given: the training samples replayed under the draft config's RoPE and under the target's (`REPLAY_N`
samples by default), confirmed when the target's restores step-0 accuracy, ruled out when it does not; without
the data it stays suspected, naming the data as the missing input.

Cause: rope_mismatch. Usage: ``check_rope(art)`` (``replay_n=0``: config-level only).
"""
from __future__ import annotations

import math

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.rope"
DEFAULT_THETA = 10000.0    # LlamaConfig's default, and what a reader that finds no theta uses
MARGIN = 0.05              # step-0 accuracy gain that counts as "restored" under the target's RoPE
REPLAY_N = 4               # training samples replayed under each RoPE by default (two short replays, CPU seconds)
MEASUREMENT = "replay of the training samples under the draft config's RoPE and under the target's"


def rope_fields(raw) -> dict:
    """RoPE as written: theta (effective for a Transformers 5 reader), the legacy-key theta, where each was read,
    scaling (None for default RoPE) and partial_rotary_factor. Speculators' transformer_layer_config is read."""
    body = raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict) else raw
    params = body.get("rope_parameters") if isinstance(body.get("rope_parameters"), dict) else None
    legacy = body.get("rope_theta")
    theta, key = (legacy, "rope_theta") if legacy is not None else (None, "")
    if params is not None and params.get("rope_theta") is not None:
        theta, key = params["rope_theta"], "rope_parameters.rope_theta"
    scaling = body.get("rope_scaling") if isinstance(body.get("rope_scaling"), dict) else None
    if params is not None and params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if scaling is not None:
        scaling = dict(scaling)
        scaling["rope_type"] = scaling.pop("type", scaling.get("rope_type", "default"))
        if scaling["rope_type"] == "default":
            scaling = None
    prf = body.get("partial_rotary_factor", (params or {}).get("partial_rotary_factor"))
    return {"theta": float(theta) if theta is not None else DEFAULT_THETA, "theta_key": key or "default (absent)",
            "legacy_theta": float(legacy) if legacy is not None else None, "has_rope_parameters": params is not None,
            "scaling": scaling, "partial_rotary_factor": float(prf) if prf is not None else 1.0}


def _differences(a: dict, b: dict) -> list[str]:
    out = []
    if not math.isclose(a["theta"], b["theta"], rel_tol=1e-6):
        out.append(f"rope_theta {a['theta']:g} vs {b['theta']:g}")
    sa, sb = a["scaling"] or {}, b["scaling"] or {}
    for k in ("rope_type", "factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"):
        if sa.get(k) != sb.get(k):
            out.append(f"rope_scaling.{k} {sa.get(k)} vs {sb.get(k)}")
    if not math.isclose(a["partial_rotary_factor"], b["partial_rotary_factor"]):
        out.append(f"partial_rotary_factor {a['partial_rotary_factor']:g} vs {b['partial_rotary_factor']:g}")
    return out


def _replay(art: Artifacts, target: dict, n: int, draft: dict | None = None) -> dict:
    """Step-0 accuracy under the draft config's RoPE and under the target's (empty when it cannot run)."""
    if n <= 0 or art.missing("data") or not art.draft_path or not art.target_path or not art.tensors:
        return {}
    from ..replay.evidence import acc0
    try:
        setup = art.replay_setup
        return {"acc_0_draft_rope": acc0(setup, art.data, n),
                "acc_0_target_rope": acc0(setup, art.data, n, rope_theta=target["theta"],
                                          rope_scaling=target["scaling"],
                                          partial_rotary_factor=target["partial_rotary_factor"]),
                "replayed_samples": min(n, len(art.data)), "measurement": MEASUREMENT}
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}


# the causes check_rope reports (checks.judge: what a broken check reports as not checked)
ROPE_CAUSES = ('rope_mismatch',)


def check_rope(art: Artifacts, replay_n: int = REPLAY_N) -> list[Finding]:
    """Findings on the draft's RoPE against the target's (decided by a replay on `replay_n` training samples when
    the data is given), the training config's, and what legacy readers see."""
    need = art.missing("draft", "target")
    if need:
        return [not_checked("rope_mismatch", WHERE, need)]
    d, t = rope_fields(dict(art.draft_raw)), rope_fields(dict(art.target_raw))
    ev = {"draft": {k: d[k] for k in ("theta", "theta_key", "scaling", "partial_rotary_factor")},
          "target": {k: t[k] for k in ("theta", "theta_key", "scaling", "partial_rotary_factor")}}
    out = []
    if art.training_raw is not None:
        tr = rope_fields(dict(art.training_raw))
        diff = _differences(d, tr)
        ev_t = {**ev, "training": {k: tr[k] for k in ("theta", "theta_key", "scaling", "partial_rotary_factor")}}
        out.append(Finding("rope_mismatch", "confirmed" if diff else "ruled out",
                           ("the served draft config's RoPE differs from the training config's: " + "; ".join(diff))
                           if diff else "the draft config keeps the training config's RoPE", ev_t,
                           f"{WHERE}.training_config", fix="copy the training config's rope fields into the draft "
                           "config" if diff else "", source="speculators PR#574 (converter dropped rope_scaling)"
                           if diff else ""))
    if d["has_rope_parameters"] and d["legacy_theta"] is None and d["theta"] != DEFAULT_THETA:
        out.append(Finding("rope_mismatch", "suspected", f"the draft config has only Transformers 5 "
                           f"rope_parameters (theta {d['theta']:g}): a reader on Transformers 4 sees no rope_theta "
                           f"and uses {DEFAULT_THETA:g}", ev, f"{WHERE}.legacy_keys",
                           fix=f"also write \"rope_theta\": {d['theta']:g} (and rope_scaling) at the top level",
                           source="SpecForge apply_legacy_rope_scaling; sfllm PR#32"))
    diff = _differences(d, t)
    if not diff:
        out.append(Finding("rope_mismatch", "ruled out", "draft and target RoPE agree", ev, WHERE))
        return out
    rep = _replay(art, t, replay_n, d)
    ev = {**ev, "differences": diff, **rep}
    a, b = rep.get("acc_0_draft_rope"), rep.get("acc_0_target_rope")
    if a is not None and b is not None and not (math.isnan(a) or math.isnan(b)):
        if b > a + MARGIN:
            out.append(Finding("rope_mismatch", "confirmed", f"{'; '.join(diff)} (draft vs target); replay under the "
                               f"target's RoPE restores step-0 accuracy {a:.3f} -> {b:.3f}", ev, WHERE,
                               fix="write the target's rope fields into the draft config (the draft was trained "
                                   "with them)", source="field-causes.md #5", measured=True))
        else:
            out.append(Finding("rope_mismatch", "ruled out", f"{'; '.join(diff)}, but the draft was trained with its "
                               f"own RoPE (step-0 accuracy {a:.3f} with it, {b:.3f} with the target's)", ev, WHERE,
                               measured=True))
        return out
    out.append(Finding("rope_mismatch", "suspected", f"draft vs target RoPE differ: {'; '.join(diff)}", ev, WHERE,
                       fix="give the training data: a replay under both tells which one the draft was trained with",
                       needs="" if rep else NEEDS["data"] + " (for the replay under both RoPEs)",
                       source="field-causes.md #5; EAGLE trains at theta 10000 whatever the target's"))
    return out


@contract("rope", ROPE_CAUSES, parts=("artifacts", "serving data", "engine-free"))
def judge_rope(art: Artifacts, opts: Options) -> list[Finding]:
    """RoPE, replayed on `REPLAY_N` samples or `replay_n`, whichever is more."""
    return check_rope(art, max(opts.replay_n, REPLAY_N))
