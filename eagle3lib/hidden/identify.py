"""Which boundaries the draft was trained on: a training shard's slots identified against the target's own
boundaries (recaptured on the same tokens), as serving dumps are; never labelled from config ids read in one
engine's convention.

`trained_layout(data, cfg, num_layers, model=...)` picks the best evidence there is, in this order:
1. **identified**: a few samples recaptured through the target and every slot matched to one boundary within the
   dtype's tolerance, the same on every sample (a measurement);
2. **declared**: the layout the data's own metadata names (the capture tool's claim);
3. **config**: the draft config's ids read in its dialect's convention (a claim that may be in another engine's
   convention: nested `eagle_config` ids are output-of-layer for SpecForge / SGLang, but some writers put vLLM's
   input-of-layer ids there). Where the writer leaves the convention open (`DraftConfig.aux_readings`: ModelOpt's
   collectors, TorchSpec's kimi_k2 vLLM export, SpecForge's SGLang backend) the config claims no layout: its
   readings are kept (`readings`), an identification says which one the data holds, and without one the answer is
   "none" naming both.
Each answer says where it came from, how sure it is, and, when the recapture matched nothing for some slot, which
slots: the target no longer computes those states (target drift, checks.drift), so the claim is kept.
Usage: ``tl = trained_layout(ds, cfg, 8, model=load_target_model(t)); tl.layout, tl.source, tl.detail``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .capture import as_slots, capture
from .layerwise import capture_layerwise
from .stream import streamed
from .compare import compare
from ..errors import Eagle3Error

SOURCES = ("identified", "declared", "config", "none")


@dataclass(frozen=True)
class TrainedLayout:
    """The boundaries the draft's fc was trained on, where that was read, and how sure."""
    layout: tuple[str, ...] | None       # boundary names in fc order; None: nothing tells
    source: str                          # one of SOURCES
    detail: str                          # one sentence for a report
    measured: bool = False               # True only for an identification by recapture
    declared: tuple[str, ...] | None = None    # the data's own claim
    config: tuple[str, ...] | None = None      # the config's claim, in its dialect's convention
    config_key: str = ""                       # where the config's ids sit
    unmatched: tuple[int, ...] = ()            # slots the recapture matched to no boundary (drift evidence)
    readings: dict = field(default_factory=dict)   # {convention: layout} of config ids whose convention is open
    samples: int = 0                           # samples recaptured
    evidence: dict = field(default_factory=dict)

    @property
    def claims_disagree(self) -> bool:
        """The identified layout differs from a claim (declared or config): that claim is wrong."""
        return self.source == "identified" and any(c is not None and tuple(c) != self.layout
                                                   for c in (self.declared, self.config))

    def to_dict(self) -> dict:
        return {"layout": list(self.layout) if self.layout else None, "source": self.source, "detail": self.detail,
                "measured": self.measured, "declared": list(self.declared) if self.declared else None,
                "config": list(self.config) if self.config else None, "config_key": self.config_key,
                "readings": {c: list(v) for c, v in self.readings.items()},
                "unmatched": list(self.unmatched), "samples": self.samples}


def identify_slots(model, samples) -> tuple[tuple[str | None, ...], list[dict]]:
    """Each slot's boundary where every sample agrees (None where a sample matched nothing or samples disagree),
    and one row per (sample, slot): best boundary, status, cosine."""
    per, rows = [], []
    samples = list(samples)
    if streamed(model) is not None:        # a streamed target: every layer read once for all the samples
        caps = capture_layerwise(model, [s.input_ids for s in samples])
    else:
        caps = [capture(model, s.input_ids, progress=False) for s in samples]
    for s, cap in zip(samples, caps):
        cmp = compare(as_slots(s), cap)
        per.append(cmp.identified)
        for r in cmp.slots.itertuples():
            rows.append({"sample": s.id, "slot": int(r.slot), "best": r.best, "status": r.status,
                         "cos_mean": float(getattr(r, "cos_mean", float("nan")))})
    if not per:
        return (), rows
    k = min(len(p) for p in per)
    out = tuple(per[0][j] if all(p[j] is not None and p[j] == per[0][j] for p in per) else None for j in range(k))
    return out, rows


def trained_layout(data, cfg, num_layers: int | None, *, model=None, n: int = 3, seed: int = 0) -> TrainedLayout:
    """The trained layout from the best evidence (module docstring); never raises on a bad sample or model."""
    declared = tuple(data.layout) if data is not None and getattr(data, "layout", None) else None
    config, key = None, ""
    if cfg is not None and num_layers:
        config = cfg.aux_layout_or_none(num_layers)
        key = f"{cfg.aux_ids_key} ({cfg.aux_ids_convention}-of-layer)" if config is not None else ""
    readings = cfg.aux_readings(num_layers) if cfg is not None and num_layers else {}
    readings = readings if len(readings) > 1 else {}
    claims = dict(declared=declared, config=tuple(config) if config else None, config_key=key, readings=readings)
    notes = [cfg.ids_readings_text(num_layers)] if readings else []
    if model is not None and data is not None:
        try:
            samples = list(data.sample(min(n, len(data)), seed))
            ident, rows = identify_slots(model, samples)
        except Eagle3Error as e:
            samples, ident, rows = [], (), []
            notes.append(f"recapture failed: {e}")
        ev = {"per_sample": rows, "notes": notes}
        if ident and all(x is not None for x in ident) and all(x != "zeros" for x in ident):
            lay = tuple(ident)
            text = (f"identified on {len(samples)} training sample(s) against the target's own boundaries: "
                    f"[{', '.join(lay)}]")
            wrong = [f"{what} claims [{', '.join(c)}]" for what, c in (("the data", declared), ("the config "
                     f"({key})", claims["config"])) if c is not None and tuple(c) != lay]
            if wrong:
                text += " (" + "; ".join(wrong) + ": not what the shard holds)"
            which = next((c for c, r in readings.items() if tuple(r) == lay), None)
            if readings:
                text += (f"; the config's ids read as {which}-of-layer name it" if which else
                         f"; neither reading of the config's ids ({', '.join(readings)}-of-layer) names it")
            return TrainedLayout(lay, "identified", text, True, samples=len(samples), evidence=ev, **claims)
        unmatched = tuple(j for j, x in enumerate(ident) if x is None)
        if samples:
            notes.append(f"recapture of {len(samples)} sample(s): slot(s) {list(unmatched)} match no boundary of "
                         "this target (a different or since fine-tuned target, or states saved in another way)")
        fallback = _claimed(declared, claims, notes)
        return TrainedLayout(**{**fallback.__dict__, "unmatched": unmatched, "samples": len(samples),
                                "evidence": ev})
    if model is None:
        notes.append("no target model to recapture with: the layout is a claim, not identified")
    return _claimed(declared, claims, notes)


def _claimed(declared, claims: dict, notes: list[str]) -> TrainedLayout:
    tail = f" ({'; '.join(notes)})" if notes else ""
    if declared is not None:
        return TrainedLayout(declared, "declared", f"declared by the training data: [{', '.join(declared)}]{tail}",
                             **claims)
    if claims["config"] is not None:
        return TrainedLayout(claims["config"], "config", f"read from the draft config's {claims['config_key']}: "
                             f"[{', '.join(claims['config'])}] — a claim in one convention{tail}", **claims)
    what = "its ids have two readings" if claims["readings"] else "has no ids"
    return TrainedLayout(None, "none", "nothing names the trained layout: the data declares none, the config "
                         f"{what}{tail}", **claims)
