"""Check 2, variant flags: `norm_before_fc`, `fc_norm`, `norm_output`, `norm_before_residual` — where the config sets
them (every place a writer puts them: `model.dialects.FLAG_PLACES`, the top level, `eagle_config`,
`transformer_layer_config`, `speculators_config`), which of them the named engine version reads
(`engines.facts`, with sources), weights that only a flag would use, and the replay accuracy with the flag on vs off.

Cause: dropped_variant_flags. Usage: ``check_flags(art, engine="vllm", engine_version=None, replay_n=8)``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..engines import facts as engine_facts
from ..engines.versions import SERVING_ENGINES, engine_title
from ..model.dialects import FLAG_PLACES, value_at
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.flags"
FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
ABSENT_TRUE = "norm_before_residual@speculators:absent"   # the fact row: an engine runs the missing key as True
# tensors that only exist for a flag (canonical or speculators names)
FLAG_TENSORS = {"norm_before_fc": ("input_norm.weight",), "fc_norm": ("fc_norm.0.weight", "aux_norm_low.weight")}


def flag_places(raw) -> dict[str, list[str]]:
    """{flag: places it is set true}, from the places its writers put it (`model.dialects.FLAG_PLACES`): 'top',
    'speculators' (a speculators config's top level, which vLLM reads through update_eagle3), or the object it is
    nested in ('eagle_config', 'transformer_layer_config', 'speculators_config')."""
    spec = "speculators_config" in raw or "transformer_layer_config" in raw
    out: dict[str, list[str]] = {}
    for flag in FLAGS:
        places = []
        for key in FLAG_PLACES[flag]:
            place = key.split(".")[0] if "." in key else ("speculators" if spec else "top")
            if value_at(raw, key) is True and place not in places:
                places.append(place)
        if places:
            out[flag] = places
    return out


def _tensor_without_flag(art: Artifacts, places: dict) -> dict[str, str]:
    """{flag: tensor} for flag-only tensors present in the weights while the config leaves the flag off."""
    if art.tensors is None:
        return {}
    names = {k.removeprefix("model.").replace("layers.0.", "midlayer.") for k in art.tensors}
    return {flag: t for flag, keys in FLAG_TENSORS.items() for t in keys if t in names and flag not in places}


def _replay_evidence(art: Artifacts, flags, n: int) -> dict:
    """Step-0/1 accuracy with the flags as configured and with each one off (empty without draft/target/data)."""
    if n <= 0 or art.missing("draft", "target", "data") or not art.draft_path or not art.target_path:
        return {}
    from ..replay.evidence import acc_steps
    try:
        setup = art.replay_setup
        on = acc_steps(setup, art.data, n)               # step 1 shows norm_output (fed-back state) too
        ev = {"acc_0_flags_on": on[0], "acc_1_flags_on": on[-1]}
        for flag in flags:
            if getattr(setup.cfg, flag):
                off = acc_steps(setup, art.data, n, **{flag: False})
                ev[f"acc_0_{flag}_off"], ev[f"acc_1_{flag}_off"] = off[0], off[-1]
        return ev
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}


# the causes check_flags reports (checks.judge: what a broken check reports as not checked)
FLAGS_CAUSES = ('dropped_variant_flags',)


def check_flags(art: Artifacts, engine: str | None = None, engine_version: str | None = None,
                replay_n: int = 0) -> list[Finding]:
    """One finding about dropped variant flags (and one about flag weights the config does not switch on)."""
    need = art.missing("draft")
    if need:
        return [not_checked("dropped_variant_flags", WHERE, need)]
    raw, out = dict(art.draft_raw), []
    places = flag_places(raw)
    orphan = _tensor_without_flag(art, places)
    if orphan:
        out.append(Finding("dropped_variant_flags", "confirmed", "the weights hold "
                           + ", ".join(f"{t} (used only with {f})" for f, t in orphan.items())
                           + " but the config does not switch the flag on: every engine skips that norm",
                           {"tensors": orphan, "flags_set": places}, f"{WHERE}.weights",
                           fix="; ".join(f"set \"{f}\": true in config.json" for f in orphan),
                           source="checkpoint.py canonical names; vllm PR#38111 (gpt-oss norm_before_fc)"))
    spec_default = ("speculators_config" in raw or "transformer_layer_config" in raw) and \
        "norm_before_residual" not in raw
    absent = engine_facts.fact(engine.lower(), "flag", ABSENT_TRUE) if spec_default and engine else None
    absent = absent if absent is not None and absent.reads else None     # the engine runs the missing key True
    if not places and absent is None:
        out.append(Finding("dropped_variant_flags", "ruled out", "no variant flag is set: nothing to drop",
                           {"flags_set": {}}, WHERE))
        return out
    if engine is None:
        readers = {f"{flag}@{p}": {e: engine_facts.reads(e, "flag", f"{flag}@{p}", None)
                                   for e in SERVING_ENGINES} for flag, ps in places.items() for p in ps}
        out.append(Finding("dropped_variant_flags", "not checked", f"flags set: {places}; whether they are read "
                           "depends on the engine and its version", {"flags_set": places, "readers": readers},
                           WHERE, needs=NEEDS["engine"]))
        return out
    eng = engine.lower()
    rows, dropped, unknown, sources = {}, [], [], []
    for flag, ps in places.items():
        for p in ps:
            subject = f"{flag}@{p}"
            r = engine_facts.reads(eng, "flag", subject, engine_version)
            f = engine_facts.fact(eng, "flag", subject)
            rows[subject] = {True: "read", False: "dropped", None: "unknown"}[r]
            if f is not None:
                sources.append(f.source)
            (dropped if r is False else unknown if r is None else []).append(subject)
    if absent is not None:
        rows["norm_before_residual@speculators"] = f"missing key: {engine_title(eng)} sets it True"
        dropped.append("norm_before_residual (absent -> True)")
        sources.append(absent.source)
    ev = {"engine": eng, "engine_version": engine_version, "flags_set": places, "reading": rows,
          **_replay_evidence(art, list(places), replay_n)}
    if dropped:
        out.append(Finding("dropped_variant_flags", "confirmed", f"{eng} {engine_version or ''} drops "
                           f"{', '.join(dropped)}".replace("  ", " "), ev, WHERE,
                           fix="move the flag where this engine reads it, or upgrade the engine",
                           source="; ".join(dict.fromkeys(sources))))
    elif unknown:
        ver = engine_version or "(version not given)"
        out.append(Finding("dropped_variant_flags", "suspected", f"whether {eng} {ver} reads "
                           f"{', '.join(unknown)} depends on its version", ev, WHERE,
                           fix="check the engine includes the PRs in `source`", needs="the engine version",
                           source="; ".join(dict.fromkeys(sources)) or "no engine fact known"))
    else:
        out.append(Finding("dropped_variant_flags", "ruled out", f"{eng} reads every flag set", ev, WHERE,
                           source="; ".join(dict.fromkeys(sources))))
    return out


# --- causes 31 / 32: what the norm flags of the config mean, and whether they can mean anything at all ---

MARGIN = 0.05     # step-1 accuracy gain with norm_output off that shows the weights were trained without it
FC_NORM_SOURCE = "speculators src/speculators/models/eagle3/config.py _check_norm_flags (PR#670)"


def _present(art: Artifacts, flag: str) -> bool:
    """Does the checkpoint hold the weights only `flag` uses (canonical or speculators names)?"""
    names = {k.removeprefix("model.").replace("layers.0.", "midlayer.") for k in art.tensors or {}}
    return any(t in names for t in FLAG_TENSORS[flag])


def _fc_norm_conflict(art: Artifacts) -> Finding:
    w = f"{WHERE}.fc_norm_conflict"
    places = flag_places(dict(art.draft_raw))
    both = "fc_norm" in places and "norm_before_fc" in places
    ev = {"flags_set": {k: v for k, v in places.items() if k in ("fc_norm", "norm_before_fc")}}
    if not both:
        return Finding("fc_norm_conflict", "ruled out", "at most one fc normalization is set (fc_norm / "
                       "norm_before_fc)", ev, w)
    if art.tensors is not None:
        ev["weights"] = {f: _present(art, f) for f in ("fc_norm", "norm_before_fc")}
        missing = [f for f, there in ev["weights"].items() if not there]
        if missing:
            return Finding("fc_norm_conflict", "confirmed", "the config sets both fc_norm and norm_before_fc, and "
                           f"the weights hold none for {', '.join(missing)}: the draft was trained with one mode, and "
                           "an engine that builds both runs the other at its initial weights (or refuses the load)",
                           ev, w, fix=f"set {' and '.join(missing)} false in config.json", source=FC_NORM_SOURCE)
    return Finding("fc_norm_conflict", "suspected", "the config sets both fc_norm (a norm per aux state) and "
                   "norm_before_fc (one norm over their concatenation): speculators refuses such a config as "
                   "mutually exclusive, and the engines' order for applying both is unverified", ev, w,
                   fix="keep the one mode the draft was trained with", needs="the draft's training config",
                   source=FC_NORM_SOURCE)


def _norm_output_key(raw) -> tuple[bool | None, str]:
    """(norm_output as written, where): top level, eagle_config, or (None, '') when the config does not set it."""
    if "norm_output" in raw:
        return raw["norm_output"], "top"
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    return (ec["norm_output"], "eagle_config") if "norm_output" in ec else (None, "")


def _norm_output_meaning(art: Artifacts, replay_n: int) -> Finding:
    c, w = "specforge_norm_output", f"{WHERE}.norm_output_meaning"
    raw = dict(art.draft_raw)
    value, where = _norm_output_key(raw)
    src = "SpecForge PR#879 (2026-09-15; before it, norm_output true trained EAGLE-3, false fed neither variant)"
    if where == "":
        return Finding(c, "ruled out", "the config does not set norm_output: a SpecForge draft trained before PR#879 "
                       "then ran as EAGLE-3 (its default normed only the lm_head input), which is what engines run "
                       "without the key", {"norm_output": None}, w, source=src)
    ev = {"norm_output": value, "set_in": where}
    if "speculators_config" in raw or "transformer_layer_config" in raw:
        return Finding(c, "ruled out", "a speculators config: norm_output has its EAGLE-3.1 meaning (not a SpecForge "
                       "draft)", ev, w)
    rep = _replay_evidence(art, ["norm_output"], replay_n) if value is True else {}
    ev.update(rep)
    on, off = rep.get("acc_1_flags_on"), rep.get("acc_1_norm_output_off")
    if on is not None and off is not None:
        if off > on + MARGIN:
            return Finding(c, "confirmed", f"norm_output true, but the weights predict better without it (step-1 "
                           f"accuracy {on:.3f} on, {off:.3f} off): trained as EAGLE-3, which SpecForge before PR#879 "
                           "did under norm_output true", ev, w, fix="set norm_output false (EAGLE-3) in config.json",
                           source=src, measured=True)
        return Finding(c, "ruled out", f"the weights fit norm_output true (step-1 accuracy {on:.3f} on, {off:.3f} off)",
                       ev, w, source=src, measured=True)
    specforge = art.tensors is not None and any(k.startswith("midlayer.") for k in art.tensors)
    needs = ("the SpecForge commit the draft was trained with (before PR#879 norm_output meant something else), or "
             "replay evidence (replay_n > 0 with the training data)")
    if specforge:
        return Finding(c, "suspected", f"norm_output {value} in a SpecForge-style checkpoint (midlayer.* keys): "
                       "before PR#879 SpecForge trained norm_output true as EAGLE-3 and false as neither variant, "
                       "so the flag may not mean what the engine reads", ev, w,
                       fix="check the training commit; retrain or set the flag to what was trained", needs=needs,
                       source=src)
    return Finding(c, "not checked", f"not checked: norm_output {value} is set; which trainer wrote it decides its "
                   "meaning", ev, w, needs=needs, source=src)


# the causes check_norm_meaning reports (checks.judge: what a broken check reports as not checked)
NORM_MEANING_CAUSES = ('fc_norm_conflict', 'specforge_norm_output')


def check_norm_meaning(art: Artifacts, replay_n: int = 0) -> list[Finding]:
    """Findings on fc_norm + norm_before_fc together (32) and on what a SpecForge norm_output means (31)."""
    need = art.missing("draft")
    if need:
        return [not_checked("fc_norm_conflict", WHERE, need), not_checked("specforge_norm_output", WHERE, need)]
    return [_fc_norm_conflict(art), _norm_output_meaning(art, replay_n)]


@contract("flags", FLAGS_CAUSES, parts=("artifacts", "serving"))
def judge_flags(art: Artifacts, opts: Options) -> list[Finding]:
    """The variant flags for the engine asked about."""
    return check_flags(art, opts.engine, opts.engine_version, opts.replay_n)


@contract("norm_meaning", NORM_MEANING_CAUSES, part_of="flags")
def judge_norm_meaning(art: Artifacts, opts: Options) -> list[Finding]:
    """What the norm flags mean together and as SpecForge wrote them."""
    return check_norm_meaning(art, opts.replay_n)
