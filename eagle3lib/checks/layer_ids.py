"""Check 1, layer ids: are the aux layer ids there, where, and which boundaries each engine captures for them,
against the training layout (the data's declared layout, else the config's ids) and the fc's slot count.

Capture rules are the library's own (each serving engine's home: `EngineHome.id_reading`, SGLang's by version,
vLLM's by model runner; `advice.captured_by` for SpecForge / speculators / EAGLE); this module compares, and
measures one thing: when the engine reads no ids (none in the config, or none where it looks) and the draft's
weights, the target and the training data are given, the training samples are replayed under the engine's default
capture and under the trained layout, and the accuracy lost decides `missing_layer_ids`. Where the writer leaves the
ids' convention open (`model.dialects` `ids_open` rows: `DraftConfig.aux_readings` names two layouts) the training
data decides which reading they are; without data the finding is suspected with both readings (`open_ids`), never a
layout taken from one of them. A draft fed the target's final state (use_aux_hidden_state false) reads no ids: every
cause here is ruled out and what each engine feeds it is checks.draft_feed's. Causes: missing_layer_ids,
layer_id_off_by_one, aux_layout_mismatch, final_norm_slot.
"""
from __future__ import annotations

import re

from ..engines.advice import advise, captured_by
from ..causes import Finding, not_checked
from ..engines.facts import default_ids_row
from ..serving.homes import homes
from ..engines.versions import SERVING_ENGINES, VLLM_CHECKED
from ..errors import Eagle3Error
from ..layout import NOT_CAPTURED, input_index, training_default_layout
from ..model.dialects import CONFIG_DIALECTS
from .inputs import NEEDS, Artifacts
from .registry import Options, contract

WHERE = "checks.layer_ids"
REPLAY_N = 8          # training samples replayed under the engine's default capture and the trained layout
MEASUREMENT = "replay of the training samples under the engine's default layout vs the trained layout"


def reading_source(engine: str) -> str:
    """The `source` of a finding that rests on how `engine` reads the ids (its home's `id_source`: the table's
    "id_key" rows, the keys each reader tries in order, and its capture rules)."""
    found = homes().get(engine)
    return found.id_source() if found is not None and found.id_source is not None else "serving.layer_reading"


CLAIM = "draft config"        # `trained_from` of a layout read from the config's ids: a claim, not a measurement


def training_layout(art: Artifacts) -> tuple[tuple[str, ...] | None, str]:
    """(layout the fc was trained on, where it was read): the training data's slots identified against the target
    (`art.trained`, with replay evidence), else the data's declared layout, else the config's ids (a claim: nested
    ids may be in another engine's convention)."""
    L = art.target_info.num_layers
    tl = art.trained
    if tl is not None and tl.source == "identified" and tl.layout is not None:
        return tuple(tl.layout), "training data, slots identified against the target's own boundaries"
    if art.data is not None and art.data.layout is not None:
        return tuple(art.data.layout), "training data's declared layout"
    lay = art.draft_cfg.aux_layout_or_none(L)
    dialect = CONFIG_DIALECTS[art.draft_cfg.dialect]
    if lay is None and dialect.no_ids:      # a tool whose capture is fixed (SafeAILab EAGLE): no ids by design
        return tuple(captured_by(dialect.name, None, L)), dialect.no_ids
    return (tuple(lay), f"{CLAIM} {art.draft_cfg.aux_ids_key}") if lay is not None else (None, "")


def fc_slots(art: Artifacts) -> tuple[int, str]:
    """(aux slots the fc takes, where read): fc.weight's header when the weights are there, else the config."""
    ht = art.draft_cfg.target_hidden_size
    for key in ("fc.weight", "model.fc.weight", "eagle_module.fc.weight"):
        if art.tensors is not None and key in art.tensors:
            shape = art.tensors[key][0]
            if len(shape) == 2 and shape[1] % ht == 0:
                return shape[1] // ht, f"{key} {list(shape)}"
    return art.draft_cfg.num_aux, "draft config num_aux_hidden_states / id count"


def id_places(raw) -> list[str]:
    """Where the config holds aux layer ids: 'top', 'eagle_config' (nested)."""
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    return [p for p, v in (("eagle_config", ec.get("eagle_aux_hidden_state_layer_ids")),
                           ("top", raw.get("eagle_aux_hidden_state_layer_ids"))) if v is not None]


def engine_reading(raw, engine: str, num_layers: int, version: str | None, arch: str | None,
                   runner: str | None = None):
    """The EngineReading of what `engine` captures for this config (its home's `id_reading`): None where what the
    launch does not name decides (vLLM's model runner, SGLang's version: the home's `id_undecided`) or the engine's
    capture is not known."""
    found = homes().get(engine)
    return found.id_reading(dict(raw), num_layers, version, arch, runner) if found and found.id_reading else None


def per_engine(raw, cfg, L: int, version: str | None, arch: str | None,
               engine: str | None = None) -> dict[str, object]:
    """Evidence table: the boundaries each known engine captures for this config (a string when it cannot).
    `version` is the named `engine`'s: another engine is read at none (at every version it may run)."""
    out: dict[str, object] = {}
    for eng, found in homes().items():
        if found.id_reading is None:
            continue
        r = engine_reading(raw, eng, L, version if engine == eng else None, arch)
        out[eng] = [b or NOT_CAPTURED for b in r.boundaries] if r is not None else found.id_undecided.table
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    for eng, ids in (("specforge", ec.get("eagle_aux_hidden_state_layer_ids")),
                     ("speculators", raw.get("eagle_aux_hidden_state_layer_ids"))):
        try:
            out[eng] = list(captured_by(eng, ids, L))
        except Eagle3Error as e:
            out[eng] = f"cannot: {e.problem}"
    return out


def default_vs_trained(art: Artifacts, captured, trained, n: int = REPLAY_N) -> dict:
    """Step-0 accuracy of the draft on `n` training samples under the engine's capture `captured` (a slot never
    captured fed as zeros) and under the trained layout (None: the data's slots as stored); {} when it cannot run
    (no weights, target or data), {'replay_error'} when the replay refuses."""
    if n <= 0 or art.data is None or not art.draft_path or not art.target_path or not art.tensors:
        return {}
    from ..replay.evidence import step0_acc
    from ..layout import ZERO
    served = tuple(b or ZERO for b in captured)
    try:
        setup = art.replay_setup
        acc = {k: step0_acc(setup, art.data, layout=lay, n=n, fill="zeros")
               for k, lay in (("trained", trained), ("default", served))}
    except Eagle3Error as e:
        return {"replay_error": str(e)[:200]}
    return {"acc_0_trained_layout": acc["trained"], "acc_0_engine_default": acc["default"],
            "replayed_samples": min(n, len(art.data)), "measurement": MEASUREMENT}


def _layout_needs(art: Artifacts) -> str:
    """What would name the trained layout: the training data, or (data that declares none) its identification."""
    return NEEDS["data"] if art.data is None else ("the trained layout: training data that declares it, or "
                                                   "replay_n > 0 to identify its slots against the target")


def _default_finding(ev: dict, rep: dict, said: str, fix: str, source: str) -> Finding | None:
    """missing_layer_ids decided by the accuracy the engine's default capture loses (None without the replay)."""
    from ..replay.verdict import THRESHOLDS
    a, b = rep.get("acc_0_trained_layout"), rep.get("acc_0_engine_default")
    if a is None or b is None or a != a or b != b:
        return None
    ev = {**ev, **rep}
    if a - b > THRESHOLDS["wiring_drop"]:
        return Finding("missing_layer_ids", "confirmed", f"{said}: step-0 accuracy {b:.3f} under it vs {a:.3f} "
                       "with the trained layout (replayed)", ev, WHERE, fix=fix, source=source, measured=True)
    return Finding("missing_layer_ids", "ruled out", f"{said}, and the draft replays as well under it (step-0 "
                   f"accuracy {b:.3f} vs {a:.3f} with the trained layout)", ev, WHERE, measured=True)


def convention_shift(trained, captured, L: int) -> int | None:
    """The one-layer shift (+1 / -1) that fully explains what an engine captures against the trained layout: every
    captured slot is its trained slot shifted so, and every slot it does not capture (None) is one the shift moves
    off the target (the embedding one layer earlier, the last boundary one later); None otherwise."""
    if len(trained) != len(captured) or all(c is None for c in captured):
        return None
    for s in (1, -1):
        ok = True
        for t, c in zip(trained, captured):
            i = input_index(t, L) + s
            ok = ok and (c is None and not 0 <= i <= L or c is not None and input_index(c, L) == i)
        if ok:
            return s
    return None


def _shift(a, b, L: int) -> int | None:
    """The uniform index shift from layout a to b (same length, every slot captured), or None."""
    if len(a) != len(b) or None in b:
        return None
    d = {input_index(y, L) - input_index(x, L) for x, y in zip(a, b)}
    return d.pop() if len(d) == 1 and 0 not in d else None


def layout_fix(trained, L: int, engines=SERVING_ENGINES) -> str:
    """The one fix of a layout cause, with the exact ids each serving engine needs to capture the trained layout:
    "make the engine capture [embed, layer_in.2]: sglang: eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 1];
    vllm: eagle_aux_hidden_state_layer_ids = [0, 2]" (an engine that cannot capture it says why, in brief)."""
    names = ", ".join(str(x) for x in trained)
    if not names:
        return "make the engine capture the layout the draft was trained on (none identified: give train_data)"
    return f"make the engine capture [{names}]: " + "; ".join(_ids_fix(trained, L, eng) for eng in engines)


def _ids_fix(trained, L: int, eng: str) -> str:
    """The ids `eng` needs to capture the trained layout and the config key they go under (engines.advice), or
    that it cannot and why, in brief."""
    try:
        row = advise(trained, L).set_index("engine").loc[eng]
    except Eagle3Error as e:             # a layout no engine id names (e.g. a boundary past this target)
        return f"{eng}: no ids for it ({e})"
    if row["expressible"] == "no":
        why = re.split(r" \(|; ", str(row["why"]))[0]
        return f"{eng} cannot capture it ({why}): retrain on a layout it captures"
    fix = f"{eng}: {str(row['key']).split(' (')[0]} = {list(row['ids'])}"
    if row["expressible"] == "conditional" and eng == "sglang" and "residual None" in str(row["why"]):
        fix += " (capture index 0, the embedding, needs a model file that guards residual None)"
    return fix


def open_ids(art: Artifacts, base: dict, eng: str | None = None, captured=None) -> Finding:
    """The ids' convention the writer leaves open (the config's readings name different boundaries, no training
    data decided): suspected, both readings named, and which one `eng` captures when its capture is known."""
    cfg, L = art.draft_cfg, art.target_info.num_layers
    readings = cfg.aux_readings(L)
    said = cfg.ids_readings_text(L)
    if captured is not None:
        which = [c for c, lay in readings.items() if list(lay) == list(captured)]
        said += (f"; {eng} captures {[b or NOT_CAPTURED for b in captured]}: the {which[0]}-of-layer reading"
                 if which else f"; {eng} captures {[b or NOT_CAPTURED for b in captured]}, neither reading")
    return Finding("layer_id_off_by_one", "suspected", said + "; the training data decides (its slots identified "
                   "against the target)", {**base, "readings": {c: list(v) for c, v in readings.items()},
                                          **({"engine": eng, "captured": [b or NOT_CAPTURED for b in captured]}
                                             if captured is not None else {})},
                   f"{WHERE}.open_convention", needs=_layout_needs(art), source="model.dialects ids_open rows")


# the causes check_layer_ids reports (checks.judge: what a broken check reports as not checked)
LAYER_IDS_CAUSES = ('missing_layer_ids', 'layer_id_off_by_one', 'aux_layout_mismatch', 'final_norm_slot')


def check_layer_ids(art: Artifacts, engine: str | None = None, engine_version: str | None = None,
                    engine_runner: str | None = None) -> list[Finding]:
    """Findings for missing / unread ids, off-by-one and other capture mismatches, and a post-norm final slot.
    `engine_runner`: vLLM's model runner ("v1" / "v2", from its startup log), when known."""
    need = art.missing("draft", "target")
    if need:
        return [not_checked(c, WHERE, need) for c in LAYER_IDS_CAUSES]
    raw, cfg, info = dict(art.draft_raw), art.draft_cfg, art.target_info
    L, arch = info.num_layers, info.architecture
    if not cfg.use_aux_hidden_state:        # fed the target's final state: no ids, no capture, no fc slot to fill
        said = ("the draft reads no layer ids: use_aux_hidden_state false feeds it the target's final (post-norm) "
                "state with no fc; what each engine feeds such a draft is aux_opt_out's (checks.draft_feed)")
        ev = {"use_aux_hidden_state": False, "trained": list(cfg.aux_layout(L)), "num_layers": L}
        return [Finding(c, "ruled out", said, ev, WHERE, source="engines.facts use_aux_hidden_state rows")
                for c in LAYER_IDS_CAUSES]
    trained, trained_from = training_layout(art)
    k, k_from = fc_slots(art)
    places = id_places(raw)
    try:
        table = per_engine(raw, cfg, L, engine_version, arch, engine and engine.lower())
    except Eagle3Error as e:
        return [Finding("missing_layer_ids", "confirmed", f"the config's layer ids name no boundary of the "
                        f"{L}-layer target: {e}", {"ids": list(cfg.aux_layer_ids or [])}, WHERE,
                        fix="write ids for this target", source="serving.layer_reading")]
    base = {"ids": list(cfg.aux_layer_ids) if cfg.aux_layer_ids is not None else None, "ids_at": places,
            "num_layers": L, "fc_slots": k, "fc_slots_from": k_from, "trained": list(trained) if trained else None,
            "trained_from": trained_from}
    out: list[Finding] = []
    undecided = trained is None and len(cfg.aux_readings(L)) > 1       # two readings, no data to decide
    if undecided and engine is None and art.data is not None:         # the data decides once identified
        out.append(not_checked("layer_id_off_by_one", f"{WHERE}.open_convention", "the training data's slots "
                               "identified against the target (the checks that recapture it: replay_n > 0, the "
                               "serving checks and the diagnosis)", f"not checked here: {cfg.ids_readings_text(L)}"))
    elif undecided and engine is None:
        out.append(open_ids(art, base))

    # --- final slot before vs after the final norm: engines capture the raw (pre-norm) residual stream
    if trained is None:
        out.append(not_checked("final_norm_slot", f"{WHERE}.final_slot", NEEDS["data"]))
    elif "final_postnorm" in trained:
        out.append(Finding("final_norm_slot", "confirmed", "the draft was trained on the final POST-norm state; "
                           "SGLang and vLLM capture the pre-norm residual stream", base, f"{WHERE}.final_slot",
                           fix="retrain on final_prenorm, or patch the engine to apply the final norm",
                           source="advice.py (final_postnorm: no engine); speculators PR#313"))
    else:
        out.append(Finding("final_norm_slot", "ruled out", "no post-norm slot in the training layout", base,
                           f"{WHERE}.final_slot"))

    # --- the config against the data it was trained on, and against the fc
    if k != cfg.num_aux:
        out.append(Finding("aux_layout_mismatch", "confirmed", f"{k_from} takes {k} aux slots, the config declares "
                           f"{cfg.num_aux}: engines size fc from the config and refuse or misread the weights", base,
                           f"{WHERE}.fc_width", fix="set num_aux_hidden_states / the id list to the trained fc"))
    elif trained is not None and len(trained) != k:
        out.append(Finding("aux_layout_mismatch", "confirmed", f"the fc takes {k} aux slots, the training layout "
                           f"has {len(trained)}", base, f"{WHERE}.fc_width",
                           fix="make num_aux_hidden_states / the id list match fc.weight"))
    cfg_lay = cfg.aux_layout_or_none(L)
    readings = cfg.aux_readings(L)
    if len(readings) > 1 and trained is not None and trained_from.startswith("training data"):
        # the writer leaves the convention open: the data decides which reading the config's ids are
        cfg_lay = next((v for v in readings.values() if tuple(v) == tuple(trained)), next(iter(readings.values())))
    if cfg_lay is not None and trained is not None and trained_from.startswith("training data"):
        s = _shift(trained, cfg_lay, L)
        if tuple(cfg_lay) != tuple(trained):
            cid = "layer_id_off_by_one" if s in (1, -1) else "aux_layout_mismatch"
            out.append(Finding(cid, "confirmed", f"the config's ids name {list(cfg_lay)} but the data was captured at "
                               f"{list(trained)}" + (f" (shifted by {s:+d})" if s else ""),
                               {**base, "config_layout": list(cfg_lay)}, f"{WHERE}.config_vs_data",
                               fix="write the ids of the training layout in the config's convention "
                                   f"({cfg.aux_ids_convention}-of-layer)"))

    # --- what the named engine captures
    if engine is None:
        if not places:
            guess = list(captured_by("vllm", None, L))
            row = default_ids_row("vllm", VLLM_CHECKED)
            said = (f"the config has no aux layer ids: vLLM {VLLM_CHECKED} falls back to inputs of "
                    f"[{row.subject if row else '?'}] = {guess} (the engine table's default_ids row)")
            fix = "pin eagle_aux_hidden_state_layer_ids for each engine (advice.advise)"
            st = "suspected" if trained is None else "confirmed" if guess != list(trained) else "ruled out"
            if trained is None and guess == list(training_default_layout(L)):
                # nothing served and nothing trained to compare with: the engines' fallback is the training tools'
                # own default capture; whether the draft was trained on it only its data can say
                st, said = "not checked", said + (", the training tools' own default when a config names no ids "
                                                  "(SpecForge, ModelOpt, AngelSlim, TorchSpec, EAGLE)")
            out.append(_default_finding({**base, "engines": table}, default_vs_trained(art, guess, trained), said,
                                        fix, "vllm PR#50170") or
                       Finding("missing_layer_ids", st, said, {**base, "engines": table}, WHERE,
                               fix="" if st == "ruled out" else fix, needs="" if trained else _layout_needs(art),
                               source="vllm PR#50170"))
        else:
            out.append(Finding("missing_layer_ids", "not checked", f"ids at {places}; which engine reads them: see "
                               "evidence['engines']", {**base, "engines": table}, WHERE, needs=NEEDS["engine"]))
        if not any(f.cause == "layer_id_off_by_one" for f in out):
            out.append(Finding("layer_id_off_by_one", "ruled out", "the config's ids name the training layout",
                               base, f"{WHERE}.config_vs_data") if trained_from.startswith("training data") and
                       cfg_lay is not None else not_checked("layer_id_off_by_one", WHERE, NEEDS["engine"]))
        if not any(f.cause == "aux_layout_mismatch" for f in out):
            out.append(not_checked("aux_layout_mismatch", WHERE, NEEDS["engine"]))
        return out

    eng = engine.lower()
    if eng not in SERVING_ENGINES:
        return out + [not_checked(c, WHERE, f"an engine the library knows ({', '.join(SERVING_ENGINES)}), not {engine!r}")
                      for c in ("missing_layer_ids", "layer_id_off_by_one", "aux_layout_mismatch")]
    r = engine_reading(raw, eng, L, engine_version, arch, engine_runner)
    ev = {**base, "engine": eng, "engine_version": engine_version, "engine_runner": engine_runner,
          "engines": table}
    found = homes()[eng]
    if r is None and found.id_reading is None:
        return out + [not_checked(c, WHERE, f"how {eng} reads a draft's ids (its home's id_reading)")
                      for c in ("missing_layer_ids", "layer_id_off_by_one", "aux_layout_mismatch")]
    if r is None:
        und = found.id_undecided
        return out + [Finding(c, "suspected", und.summary, ev, WHERE, needs=und.needs, source=reading_source(eng))
                      for c in und.causes]
    captured = list(r.boundaries)
    ev["captured"] = [b or NOT_CAPTURED for b in captured]
    reads_ids = not r.key.startswith("default")
    if not reads_ids:
        st = "suspected" if trained is None else ("ruled out" if captured == list(trained) else "confirmed")
        said = f"{eng} reads no layer ids from this config ({'; '.join(r.problems) or 'none given'}) and falls " \
               f"back to {captured}"
        fix = f"write the ids where {eng} reads them (advice.config_snippet)"
        out.append(_default_finding(ev, default_vs_trained(art, captured, trained), said, fix, reading_source(eng)) or
                   Finding("missing_layer_ids", st, said, ev, WHERE, fix=fix,
                           needs="" if trained else _layout_needs(art), source=reading_source(eng)))
        # what it feeds instead is the fallback missing_layer_ids is about, not a misread of ids the config has
        return out + [not_checked(c, WHERE, "layer ids the engine reads (it falls back to its default capture)",
                                  f"not checked: {said}") for c in ("layer_id_off_by_one", "aux_layout_mismatch")
                      if not any(f.cause == c for f in out)]
    else:
        out.append(Finding("missing_layer_ids", "ruled out", f"{eng} reads the ids at {r.key}", ev, WHERE))
    if not reads_ids:      # the engine's default capture: its loss is missing_layer_ids', the layout causes are not
        # checked (as notebook 02 does), else one missing key would confirm two causes
        return out + [not_checked(c, WHERE, "layer ids the engine reads (without them it feeds its default capture)")
                      for c in ("layer_id_off_by_one", "aux_layout_mismatch") if not any(f.cause == c for f in out)]
    if undecided:
        out.append(open_ids(art, base, eng, r.boundaries))
    if trained is None:
        return out + [not_checked(c, WHERE, NEEDS["data"]) for c in ("layer_id_off_by_one", "aux_layout_mismatch")
                      if not any(f.cause == c for f in out)]
    bad_slots = [p for p in r.slot_problems if p]
    s = _shift(trained, captured, L)
    claimed = trained_from.startswith(CLAIM)     # compared with the config's own claim: the convention may differ
    claim_needs = ("the training data (its slots identified against the target: the config's ids may be in "
                   "another engine's convention)") if claimed else ""
    if captured == list(trained) and not bad_slots and len(captured) == k:
        # the config's ids read in the convention their place implies are not what this engine reads: it captures
        # the trained layout, so a mismatch in that convention is no fault of this deployment
        out = [f for f in out if not (f.where == f"{WHERE}.config_vs_data" and f.status == "confirmed")]
        out.append(Finding("layer_id_off_by_one", "ruled out", f"{eng} captures the training layout", ev, WHERE))
        if not any(f.cause == "aux_layout_mismatch" for f in out):
            out.append(Finding("aux_layout_mismatch", "ruled out", f"{eng} feeds {k} slots in the trained order",
                               ev, WHERE))
        return out
    conv = convention_shift(trained, captured, L) if None in captured and len(captured) == k else None
    kept = [p for p, c in zip(r.slot_problems, captured) if p and c is not None] \
        if len(r.slot_problems) == len(captured) else bad_slots        # problems of the slots it does capture
    if conv is not None and not kept:
        got = [c for c in captured if c]
        lost = [t for t, c in zip(trained, captured) if c is None]
        said = (f"{eng} captures {ev['captured']}, the draft was trained on {list(trained)} ({trained_from}): every "
                f"slot shifted by {conv:+d}, the ids written in the other convention; {', '.join(lost)} has no "
                f"boundary there, so {eng} captures {len(got)} of the fc's {k} slots: that slot-count mismatch "
                "(aux_layout_mismatch) is this convention's consequence, not a cause of its own")
        st = "suspected" if claimed else "confirmed"
        out.append(Finding("layer_id_off_by_one", st, said, {**ev, "consequences": {"aux_layout_mismatch": f"{len(got)}"
                           f" of {k} slots captured"}}, WHERE, fix=_ids_fix(trained, L, eng), needs=claim_needs,
                           source=reading_source(eng), explains=("aux_layout_mismatch",) if st == "confirmed" else ()))
        out.append(Finding("aux_layout_mismatch", "ruled out", f"as a cause of its own: every slot {eng} misses or "
                           f"shifts is the id convention's (layer_id_off_by_one, shift {conv:+d})", ev, WHERE,
                           source=reading_source(eng)))
        return out
    if s in (1, -1):
        out.append(Finding("layer_id_off_by_one", "suspected" if claimed else "confirmed", f"{eng} captures "
                           f"{captured}, the draft was trained on {list(trained)} ({trained_from}): every slot "
                           f"shifted by {s:+d}", ev, WHERE, fix=_ids_fix(trained, L, eng), needs=claim_needs,
                           source=reading_source(eng)))
    else:
        out.append(Finding("layer_id_off_by_one", "ruled out", "no uniform one-layer shift", ev, WHERE))
        why = "; ".join(bad_slots) if captured == list(trained) else \
            f"{eng} feeds {captured} ({len([c for c in captured if c])} slots), trained on {list(trained)} ({k} slots)"
        fits = len([c for c in captured if c]) == k
        st = "suspected" if (captured == list(trained) or claimed) and fits else "confirmed"
        out.append(Finding("aux_layout_mismatch", st, why, ev, WHERE,
                           fix=_ids_fix(trained, L, eng),
                           needs=claim_needs if st == "suspected" else "", source=reading_source(eng)))
    return out


@contract("layer_ids", LAYER_IDS_CAUSES, parts=("artifacts", "serving"), trained_layout=True)
def judge_layer_ids(art: Artifacts, opts: Options) -> list[Finding]:
    """The layer ids for the engine asked about (its version and vLLM model runner)."""
    return check_layer_ids(art, opts.engine, opts.engine_version, opts.engine_runner)
