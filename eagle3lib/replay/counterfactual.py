"""The training samples decide what was trained: a counterfactual search over every field an engine reads.

The shipped config.json is evidence about training, not its record. Replayed on its own training samples, a draft
scores what training recorded; when it scores less under its shipped config, `search` replays the same samples
with each field the serving engines read (`engines.facts.read_fields`) set otherwise, one at a time and then the
best two together: a norm flag switched the other way, `rope_theta` as the target's / the training config's / a
common value, `rope_scaling` removed or the target's, `rms_norm_eps`, `hidden_act`, `max_position_embeddings`.
The candidate that restores the accuracy names the field and its fix ("remove `norm_before_residual` from
config.json: 0.33 -> 0.92").

The decision is a margin, not a band: a candidate restores when it gains more than `MIN_GAIN` and more than
`Z` standard errors of the difference of two accuracies on these positions, and (with a recorded accuracy) comes
nearer to it than the shipped config does. The search reports every candidate's accuracy, so a reader sees the
margin. Fields the search does not replay say where they are decided (`DECIDED_ELSEWHERE`).
Usage: ``s = search(setup, data, target_config=t)``; judged by `checks.restoring.config_findings(s)`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Callable

import pandas as pd

from ..engines.facts import read_fields
from ..engines.versions import SERVING_ENGINES
from ..errors import Eagle3Error
from ..model.checkpoint import expected_tensors
from ..model.variants import CHANGEABLE, rebuilt
from .run import replay
from .stats import ReplaySetup

WHERE = "replay.counterfactual (the training samples under each engine-read field set otherwise)"
MIN_GAIN = 0.05           # step-0 accuracy a restoring candidate must gain over the shipped config
Z = 3.0                   # ... and this many standard errors of the difference (unpaired: conservative for the
                          # same positions scored twice)
RECORDED_TOL = 0.10       # the shipped config "reproduces training" within this of the recorded accuracy
COMMON_THETAS = (1e4, 5e5, 1e6)
COMMON_EPS = (1e-5, 1e-6)
FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
# fields whose untrained value an engine refuses outright (engines.facts 'config' rows): the refusal is this
# finding's consequence (vLLM / SGLang: hidden_act other than silu)
REFUSED_VALUES = ("hidden_act",)

# engine-read fields the search does not replay, and what decides them instead
DECIDED_ELSEWHERE = {
    "use_aux_hidden_state": "checks (aux_opt_out): with it false vLLM feeds the last hidden state and builds no fc, "
                            "which the draft's fc weights and the training data's slots contradict",
}


@dataclass(frozen=True)
class Candidate:
    """One counterfactual config: the fields set otherwise, and what the training samples scored under it."""
    changes: dict                     # field -> value (None: removed / off)
    hows: tuple[str, ...]             # per field: "switch off", "the target's", "remove", "1e-06", ...
    shipped: dict                     # field -> the shipped value
    acc0: float = float("nan")
    positions: int = 0
    note: str = ""                    # why it was not measured

    @property
    def described(self) -> str:
        return " + ".join(f"{k}={shown_value(v)} ({h})" for (k, v), h in zip(self.changes.items(), self.hows))

    def config_fix(self) -> str:
        parts = []
        for (k, v), h in zip(self.changes.items(), self.hows):
            if h == "remove" or (v is False and k in FLAGS):       # off is every reader's default for a flag
                parts.append(f"remove `{k}` from config.json")
            else:
                parts.append(f"set `{k}` to {shown_value(v)} in config.json ({h})")
        return "; ".join(parts)


@dataclass(frozen=True)
class Search:
    """The shipped config's accuracy on the training samples, every candidate's, and the one that restores."""
    shipped_acc0: float
    positions: int
    recorded: float | None
    recorded_from: str
    candidates: tuple[Candidate, ...]
    fields: tuple[str, ...]           # the engine-read fields searched
    elsewhere: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    shipped_cfg: object = None        # the shipped DraftConfig (which tensors a restoring change makes unneeded)

    def unneeded(self, c: Candidate) -> tuple[str, ...]:
        """Tensors the shipped config asks for and the candidate's does not (a norm a flag added): the checkpoint
        never had them, so their absence is the changed field's consequence, not a dropped weight."""
        if self.shipped_cfg is None:
            return ()
        names = {f.name for f in fields(type(self.shipped_cfg))}
        ch = {k: v for k, v in c.changes.items() if k in names}
        if not ch:
            return ()
        try:
            return tuple(sorted(set(expected_tensors(self.shipped_cfg)) -
                                set(expected_tensors(replace(self.shipped_cfg, **ch)))))
        except (Eagle3Error, TypeError, ValueError):
            return ()

    def margin(self, c: Candidate) -> float:
        """The accuracy a candidate must gain to count (MIN_GAIN, or Z standard errors when larger)."""
        p = min(max((self.shipped_acc0 + c.acc0) / 2, 1e-3), 1 - 1e-3)
        n = max(min(self.positions, c.positions) if self.positions else c.positions, 1)   # shipped: none scored
        return max(MIN_GAIN, Z * math.sqrt(2 * p * (1 - p) / n))

    @property
    def reproduces_training(self) -> bool | None:
        """Does the shipped config score the recorded accuracy (None: nothing recorded)?"""
        if self.recorded is None or math.isnan(self.shipped_acc0):
            return None
        return self.shipped_acc0 >= self.recorded - RECORDED_TOL

    @property
    def best(self) -> Candidate | None:
        measured = [c for c in self.candidates if not math.isnan(c.acc0)]
        return max(measured, key=lambda c: (c.acc0, -len(c.changes)), default=None)

    @property
    def restoring(self) -> Candidate | None:
        """The fewest-field candidate that restores the accuracy, by the margin (None: none does)."""
        if math.isnan(self.shipped_acc0):
            return None
        ok = [c for c in self.candidates if not math.isnan(c.acc0) and c.acc0 - self.shipped_acc0 > self.margin(c)
              and (self.recorded is None or abs(c.acc0 - self.recorded) < abs(self.shipped_acc0 - self.recorded))]
        return min(ok, key=lambda c: (len(c.changes), -c.acc0), default=None)

    @property
    def trained_changes(self) -> dict:
        """The field values that reproduce training ({} when the shipped config does)."""
        c = self.restoring
        return dict(c.changes) if c is not None else {}

    def frame(self) -> pd.DataFrame:
        rows = [{"config": "as shipped", "acc step 0": round(self.shipped_acc0, 4), "gain": 0.0, "margin": None,
                 "positions": self.positions, "note": ""}]
        for c in sorted(self.candidates, key=lambda c: -(c.acc0 if not math.isnan(c.acc0) else -1)):
            measured = not math.isnan(c.acc0)
            rows.append({"config": c.described, "acc step 0": round(c.acc0, 4) if measured else None,
                         "gain": round(c.acc0 - self.shipped_acc0, 4) if measured else None,
                         "margin": round(self.margin(c), 4) if measured else None, "positions": c.positions,
                         "note": c.note or ("restores" if c is self.restoring else "")})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        r = self.restoring
        return {"shipped_acc0": self.shipped_acc0, "positions": self.positions, "recorded": self.recorded,
                "recorded_from": self.recorded_from, "fields": list(self.fields), "elsewhere": dict(self.elsewhere),
                "candidates": [{"changes": {k: shown_value(v) for k, v in c.changes.items()}, "hows": list(c.hows),
                                "acc0": c.acc0, "positions": c.positions, "note": c.note} for c in self.candidates],
                "restoring": r.described if r else None, "notes": list(self.notes)}

def shown_value(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return "absent" if v is None else str(v)


# ---------------------------------------------------------------- the candidates, field by field

def _numbers(field: str, target_key: str, common) -> Callable:
    """Candidates for a numeric field: the target's value, the training config's, then common ones, each only
    where it differs from the shipped value."""
    def gen(cfg, target, training):
        vals = [(target.get(target_key), "the target's"), (training.get(field), "the training config's")]
        vals += [(v, "a common value") for v in common]
        return [(float(v), h) for v, h in vals if v is not None and not math.isclose(float(v), getattr(cfg, field))]
    return gen


def _scaling(cfg, target, training):
    out = [(None, "remove")] if cfg.rope_scaling else []
    t = (target or {}).get("scaling")
    if t and t != cfg.rope_scaling:
        out.append((t, "the target's"))
    return out


def _act(cfg, target, training):
    vals = [("silu", "EAGLE-3's")] + ([(target.get("hidden_act"), "the target's")] if target else [])
    return [(v, h) for v, h in vals if v and v != cfg.hidden_act]


def _partial(cfg, target, training):
    """A partial rotary factor: the whole head rotated (the field removed), or the target's factor."""
    vals = [(1.0, "remove"), ((target or {}).get("partial_rotary_factor"), "the target's"),
            (training.get("partial_rotary_factor"), "the training config's")]
    seen, out = {cfg.partial_rotary_factor}, []
    for v, h in vals:
        if v is not None and float(v) not in seen:
            seen.add(float(v))
            out.append((float(v), h))
    return out


def _mpe(cfg, target, training):
    t = (target or {}).get("max_position_embeddings")
    return [(int(t), "the target's")] if t and int(t) != cfg.max_position_embeddings and cfg.rope_scaling else []


GENERATORS: dict[str, Callable] = {"rope_theta": _numbers("rope_theta", "theta", COMMON_THETAS),
                                   "rope_scaling": _scaling, "rms_norm_eps": _numbers("rms_norm_eps", "rms_norm_eps",
                                                                                      COMMON_EPS),
                                   "hidden_act": _act, "max_position_embeddings": _mpe,
                                   "partial_rotary_factor": _partial}
for _f in FLAGS:
    GENERATORS[_f] = (lambda name: lambda cfg, target, training:
                      [(not getattr(cfg, name), "switch off" if getattr(cfg, name) else "switch on")])(_f)


def engine_fields(engines=SERVING_ENGINES) -> tuple[str, ...]:
    """Every draft config field the engines read (the table's), in the table's order."""
    return tuple(dict.fromkeys(f for e in engines for f in read_fields(e)))


def counterfactuals(cfg, *, target: dict | None = None, training: dict | None = None,
               fields=None) -> list[Candidate]:
    """One candidate per engine-read field and value to try (`target`: the target's RoPE / eps / act / length,
    `training`: the training config's fields, each optional)."""
    out = []
    for name in fields or engine_fields():
        gen = GENERATORS.get(name)
        if gen is None or name not in CHANGEABLE:
            continue
        for value, how in gen(cfg, target or {}, training or {}):
            if name == "rope_scaling" and value is None and how == "remove" and not cfg.rope_scaling:
                continue
            out.append(Candidate({name: value}, (how,), {name: getattr(cfg, name)}))
    return out


def _acc0(setup: ReplaySetup, data, changes: dict, *, n: int, extra: dict | None, recapture) -> tuple[float, int]:
    rb = rebuilt(setup.model, extra=extra, **changes)
    s2 = replace(setup, model=rb.model, cfg=rb.model.cfg)
    r = replay(s2, data, n=n, num_steps=1, simulate=False, fill="zeros", recapture=recapture, progress=False)
    s = r.summary()
    a = s["acc_per_step"][0] if s["acc_per_step"] else None
    return (float(a) if a is not None else float("nan")), int(s["positions"])


IMPLIED = "the checkpoint's shapes"        # how a field the tensors' shapes imply is set (model.variants.shape_implied)


def search(setup: ReplaySetup, data, *, target: dict | None = None, training: dict | None = None,
           recorded: float | None = None, recorded_from: str = "", n: int = 16, extra: dict | None = None,
           recapture=None, pairs: int = 2, implied: dict | None = None) -> Search:
    """Replay `n` training samples under the shipped config and under every candidate (`candidates`), then the best
    `pairs` single changes together. `extra`: checkpoint tensors the shipped config leaves unused (an input_norm a
    config without norm_before_fc drops, a k_proj of another shape), given to a candidate that uses them;
    `implied`: {field: value} the checkpoint's tensor shapes imply where the config says otherwise (a field that
    sizes tensors: model.variants.shape_implied), a candidate of its own."""
    notes = []
    try:
        base, pos = _acc0(setup, data, {}, n=n, extra=None, recapture=recapture)
    except Eagle3Error as e:
        if not implied:
            return Search(float("nan"), 0, recorded, recorded_from, (), engine_fields(), dict(DECIDED_ELSEWHERE),
                          (f"the shipped config could not be replayed: {e}",), setup.cfg)
        # the checkpoint's tensors imply another config: the shipped one cannot read its own training samples at
        # all (step-0 accuracy 0 on them); the implied one is tried below
        base, pos = 0.0, 0
        notes.append(f"the shipped config cannot be replayed on its own training samples ({e}): counted as 0")
    if math.isnan(base) and implied:          # it runs but scores no position of its own samples (their slots do
        base = 0.0                            # not fit it): 0, and the config its tensors imply is tried below
        notes.append("the shipped config scores no position of its own training samples: counted as 0")
    done = []
    shaped = [Candidate({k: v}, (IMPLIED,), {k: getattr(setup.cfg, k)}) for k, v in (implied or {}).items()]
    for c in shaped + counterfactuals(setup.cfg, target=target, training=training):
        try:
            a, p = _acc0(setup, data, c.changes, n=n, extra=extra, recapture=recapture)
            done.append(replace(c, acc0=a, positions=p))
        except Eagle3Error as e:
            done.append(replace(c, note=f"not replayed: {e}"))
    singles = sorted((c for c in done if not math.isnan(c.acc0) and c.acc0 > base), key=lambda c: -c.acc0)
    top: list[Candidate] = []
    for c in singles:                       # the best value of each field, best fields first
        if all(set(c.changes).isdisjoint(t.changes) for t in top):
            top.append(c)
    top = top[:pairs]
    if len(top) == 2:
        a_, b_ = top
        both = Candidate({**a_.changes, **b_.changes}, a_.hows + b_.hows, {**a_.shipped, **b_.shipped})
        try:
            acc, p = _acc0(setup, data, both.changes, n=n, extra=extra, recapture=recapture)
            done.append(replace(both, acc0=acc, positions=p))
        except Eagle3Error as e:
            notes.append(f"pair {both.described} not replayed: {e}")
    return Search(base, pos, recorded, recorded_from, tuple(done), engine_fields() + tuple(implied or ()),
                  dict(DECIDED_ELSEWHERE), tuple(notes), setup.cfg)
