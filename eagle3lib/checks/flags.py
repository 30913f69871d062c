"""Check 2, variant flags: `norm_before_fc` (top level or nested in `eagle_config`), `fc_norm`, `norm_output`,
`norm_before_residual` — where the config sets them, which of them the named engine version reads
(`engines.facts`, with sources), weights that only a flag would use, and the replay accuracy with the flag on vs off.

Cause: dropped_variant_flags. Usage: ``check_flags(art, engine="vllm", engine_version=None, replay_n=8)``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..engines import facts as engine_facts
from .inputs import NEEDS, Artifacts

WHERE = "checks.flags"
FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
# tensors that only exist for a flag (canonical or speculators names)
FLAG_TENSORS = {"norm_before_fc": ("input_norm.weight",), "fc_norm": ("fc_norm.0.weight", "aux_norm_low.weight")}


def flag_places(raw) -> dict[str, list[str]]:
    """{flag: places it is set true}: 'top', 'eagle_config', or 'speculators' (a speculators config's top level,
    which vLLM reads through update_eagle3)."""
    spec = "speculators_config" in raw or "transformer_layer_config" in raw
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    out: dict[str, list[str]] = {}
    for flag in FLAGS:
        places = []
        if raw.get(flag) is True or (flag == "fc_norm" and raw.get("use_aux_norm") is True):
            places.append("speculators" if spec else "top")
        if ec.get(flag) is True:
            places.append("eagle_config")
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
    from .evidence import acc_steps, load_replay
    try:
        setup = load_replay(art.draft_path, art.target_path)
        on = acc_steps(setup, art.data, n)               # step 1 shows norm_output (fed-back state) too
        ev = {"acc_0_flags_on": on[0], "acc_1_flags_on": on[-1]}
        for flag in flags:
            if getattr(setup.cfg, flag):
                off = acc_steps(setup, art.data, n, **{flag: False})
                ev[f"acc_0_{flag}_off"], ev[f"acc_1_{flag}_off"] = off[0], off[-1]
        return ev
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}


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
    if not places and not (spec_default and engine == "vllm"):
        out.append(Finding("dropped_variant_flags", "ruled out", "no variant flag is set: nothing to drop",
                           {"flags_set": {}}, WHERE))
        return out
    if engine is None:
        readers = {f"{flag}@{p}": {e: engine_facts.reads(e, "flag", f"{flag}@{p}", None)
                                   for e in engine_facts.SERVING_ENGINES} for flag, ps in places.items() for p in ps}
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
    if spec_default and eng == "vllm":
        rows["norm_before_residual@speculators"] = "missing key: vLLM sets it True"
        dropped.append("norm_before_residual (absent -> True)")
        sources.append(engine_facts.fact("vllm", "flag", "norm_before_residual@speculators").source)
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
