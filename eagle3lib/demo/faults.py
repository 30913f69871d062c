"""A generated fault matrix: the healthy demo deployment with each field an engine reads perturbed, alone and in
pairs, instead of hand-picked plants.

The fields are the engine facts' (`engines.facts.read_fields`: flags, RoPE, eps, activation, context,
use_aux_hidden_state) plus the tensors an engine maps (d2t read as offsets, lm_head, embed_tokens). Each `Fault`
says what it changes and the names a diagnosis must mention for it (`names`): a raised verdict whose text names
the field, or, when the change leaves the draft's computation as it was, no confirmed cause at all.
`write_fault(fault, out)` writes the draft folder; `singles()` / `pairs()` list the matrix.
Usage: ``for f in singles(): write_fault(f, tmp / f.name)``.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from . import world as demo
from ..engines.draft_edit import edited_copy
from .deployments import write_deployment
from ..engines.facts import read_fields

ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class Fault:
    """One perturbation of the healthy deployment: its name, what it sets, and the words naming it."""
    name: str
    what: str
    names: tuple[str, ...]                                  # a raised verdict naming the fault mentions one of these
    config: Callable[[dict], None] | None = None
    weights: Callable[[dict, Path], None] | None = None


def _set(key: str, value) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c[key] = value
    return edit


def _eagle(key: str, value) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c.setdefault("eagle_config", {})[key] = value
    return edit


def _flip(key: str) -> Callable[[dict], None]:
    def edit(c: dict) -> None:
        c[key] = not c.get(key, False)
    return edit


# how each engine-read config field is perturbed (a value no healthy demo config carries)
CONFIG_PERTURBATIONS: dict[str, tuple[str, Callable[[dict], None]]] = {
    "norm_before_fc": ("norm_before_fc switched on", _flip("norm_before_fc")),
    "fc_norm": ("fc_norm switched on", _flip("fc_norm")),
    "norm_output": ("norm_output switched on", _flip("norm_output")),
    "norm_before_residual": ("norm_before_residual switched on", _flip("norm_before_residual")),
    "use_aux_hidden_state": ("eagle_config.use_aux_hidden_state false", _eagle("use_aux_hidden_state", False)),
    "rope_theta": ("rope_theta 1e6 (trained at 1e4)", _set("rope_theta", 1e6)),
    "rope_scaling": ("a linear rope_scaling of factor 4 added", _set("rope_scaling",
                                                                      {"rope_type": "linear", "factor": 4.0})),
    "partial_rotary_factor": ("partial_rotary_factor 0.5 added", _set("partial_rotary_factor", 0.5)),
    "rms_norm_eps": ("rms_norm_eps 1e-2 (trained at 1e-5)", _set("rms_norm_eps", 1e-2)),
    "hidden_act": ("hidden_act gelu (trained with silu)", _set("hidden_act", "gelu")),
    "max_position_embeddings": ("max_position_embeddings 64 (trained on up to 512)",
                                _set("max_position_embeddings", 64)),
}


def _d2t_absolute(w: dict, target: Path) -> None:
    w["d2t"] = w["d2t"] + torch.arange(w["d2t"].numel(), dtype=w["d2t"].dtype)    # absolute ids, not offsets


def _no_lm_head(w: dict, target: Path) -> None:
    del w["lm_head.weight"]


TENSOR_FAULTS = (
    Fault("d2t_absolute", "d2t holds absolute target ids instead of offsets", ("d2t",), weights=_d2t_absolute),
    Fault("no_lm_head", "lm_head.weight dropped from the checkpoint", ("lm_head",), weights=_no_lm_head),
)


def config_fields() -> tuple[str, ...]:
    """Every config field the engines read, in the facts' order."""
    return tuple(dict.fromkeys(f for e in ENGINES for f in read_fields(e)))


def singles() -> tuple[Fault, ...]:
    """One fault per engine-read config field (each must have a perturbation: tests check) and per tensor fault."""
    out = []
    for f in config_fields():
        what, edit = CONFIG_PERTURBATIONS[f]
        out.append(Fault(f, what, (f,), config=edit))
    return tuple(out) + TENSOR_FAULTS


def pairs() -> tuple[Fault, ...]:
    """Every two config faults together: both must be named (the diagnosis names each field it changes)."""
    cfg = [f for f in singles() if f.config is not None]
    out = []
    for a, b in itertools.combinations(cfg, 2):
        def both(c, a=a, b=b):
            a.config(c)
            b.config(c)
        out.append(Fault(f"{a.name}+{b.name}", f"{a.what}; {b.what}", a.names + b.names, config=both))
    return tuple(out)


def write_fault(fault: Fault, out, *, world=None) -> Path:
    """The healthy deployment's draft folder with `fault` applied, at `out` (replaced)."""
    out = Path(out)
    w = world or demo.ensure_world(progress=False)
    healthy = write_deployment("healthy", out.with_name(out.name + ".healthy"))
    return edited_copy(healthy, out, config=fault.config, tensors=fault.weights, target=w.target, fresh=True)


UNCHANGED = 0.03        # step-0 accuracy on the training samples within this of the healthy draft's: a no-op


def counterfactual_finding(diagnosis: dict) -> dict | None:
    """The counterfactual search's finding in a diagnosis record (`Diagnosis.to_dict()`), or None."""
    return next((f for v in diagnosis["verdicts"] for f in v["findings"]
                 if f["where"].startswith("replay.counterfactual")), None)


TAU_WITHIN = 0.10       # the replay that explains a served τ predicts it within this fraction


def predicted_tau(diagnosis: dict) -> tuple[float, float] | None:
    """(served τ, the nearer of the replays as trained / as the engine loads it) from the served-vs-replay finding
    of a diagnosis record, or None when nothing was served (or the comparison did not run)."""
    ev = next((f["evidence"] for v in diagnosis["verdicts"] for f in v["findings"]
               if "tau_as_served" in (f.get("evidence") or {}) and "served" in f["evidence"]), None)
    if ev is None:
        return None
    served = float(ev["served"])
    return served, min((float(ev["tau_as_trained"]), float(ev["tau_as_served"])), key=lambda t: abs(t - served))


def invariants(fault: Fault, diagnosis: dict, exit_code: int, healthy_acc0: float,
               served: dict | None = None) -> list[str]:
    """What the matrix demands of one diagnosis (a `Diagnosis.to_dict()` record), as sentences (none: it holds):
    no part broke and every input read; a fault that changes the training-sample accuracy is named by a raised
    verdict; every confirmed verdict names the fault (nothing else alarms; on a fault that changes nothing the engine
    or the replay sees, nothing is confirmed at all); no conflict. `served` (what a real engine measured:
    {"ok", "accept_length", "error"}): where it served, the replay that explains its τ is within `TAU_WITHIN`;
    where it refused, a raised verdict names the fault."""
    bad = []
    if served and served.get("ok"):
        got = predicted_tau(diagnosis)
        if got is None:
            bad.append(f"served τ {served['accept_length']:.2f} but no served-vs-replay finding")
        elif abs(got[1] - got[0]) > TAU_WITHIN * got[0]:
            bad.append(f"the nearer replay predicts τ {got[1]:.2f}, the engine served {got[0]:.2f} (more than "
                       f"{TAU_WITHIN:.0%} apart)")
    if exit_code == 1 or diagnosis["problems"]:
        bad.append(f"a part broke or an input was unreadable: {diagnosis['problems']}")
    raised = [v for v in diagnosis["verdicts"] if v["status"] in ("confirmed", "suspected", "conflict")]
    text = json.dumps(raised)
    acc0 = ((counterfactual_finding(diagnosis) or {}).get("evidence") or {}).get("acc0_as_shipped")
    changes = acc0 is not None and abs(acc0 - healthy_acc0) > UNCHANGED
    unnamed = [v["cause"] for v in raised if v["status"] == "confirmed"
               and not any(n in json.dumps(v) for n in fault.names)]
    if unnamed:
        bad.append(f"confirmed without naming {fault.names} (a false alarm beside the fault; acc0 {acc0} vs "
                   f"{healthy_acc0}): {unnamed}")
    refused = bool(served) and not served.get("ok")
    if (changes or refused) and not any(n in text for n in fault.names):
        what = (f"the engine refused it ({served.get('error')})" if refused and not changes else
                f"the fault changes the training-sample accuracy ({healthy_acc0:.2f} -> {acc0:.2f})")
        bad.append(f"{what} but no raised verdict names {fault.names}: {[v['cause'] for v in raised]}")
    if any(v["status"] == "conflict" for v in raised):
        bad.append(f"a conflict: {[v['cause'] for v in raised if v['status'] == 'conflict']}")
    return bad
