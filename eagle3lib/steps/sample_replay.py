"""Notebook 02's steps: its inputs, where the serving side's layout comes from, the layouts to replay, and the
findings its replays support.

An empty path means the demo world's artifact only when the notebook runs on the demo world (no draft given).
The serving layout is never presumed: it comes from evidence, in this order, and the result says which:
(a) a serving dump identified against the target's own boundaries (notebook 03's identification; on the demo
world, its server's dump), (b) a layout the user typed, (c) the boundaries the named engine and version capture
for this draft config (the capture rules of `serving.crossengine`), (d) for a draft config that names no layer ids,
the default every engine falls back to (inputs of [2, L//2, L-3]); with none of these the serving side is not
replayed and the result names the input that would decide it.
Nothing here stops on a defect of the draft: a trained layout nothing names is replayed as the training data stores
it (the fc's own order), and a config without ids is replayed under the engine's default against it
(`missing_layer_ids` decided by the accuracy it loses).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Mapping

from ..causes import CAPTURE_CAUSES, LAYOUT_CAUSES, Finding, not_checked
from ..demo import world as demo_mod
from ..demo.sweep import ensure_serving_dump
from ..errors import DataError, Eagle3Error
from ..hidden.capture import capture, load_target_model
from ..hidden.compare import Comparison, compare
from ..hidden.dumps import load_dump
from ..hidden.explain import causes_of, explain, layout_text, unidentified_slots
from ..layout import engine_default_layout, parse_layout
from ..model.config import read_config_json
from ..model.target import load_target_info
from ..replay.run import identify_training_layout, load_setup, with_trained_layout
from ..replay.stats import ReplayResult, ReplaySetup
from ..replay.items import stored_layout
from ..layout import ZERO
from ..replay.verdict import THRESHOLDS, Verdict, read_recorded_accuracy
from ..engines.layer_reading import layer_reading
from ..engines.versions import DEFAULT_VERSION
from ..replay import layoutsearch, verdict
from ..replay.run import replay
from . import trained_config
from .part import Inputs, Part

NAME = "02 training-sample replay"

SERVING_INPUTS = "serving_dump (SGLang --debug-tensor-dump-output-folder or an eagle3lib dump), serving_layout, " \
                 "or serving_engine + serving_version"


@dataclass(frozen=True)
class ReplayInputs:
    """Resolved paths and numbers for notebook 02."""
    draft_path: str
    target_path: str
    train_data: str
    train_format: str | None
    heldout: Mapping[str, str]           # name -> data path (held-out / new-prompt samples)
    recorded_acc: float | None
    recorded_from: str
    serving_dump: str                    # "" when none was given (and not on the demo world)
    demo: bool


def replay_inputs(draft_path: str = "", target_path: str = "", train_data_path: str = "",
                   train_data_format: str = "", heldout_data_path: str = "", new_prompt_data_path: str = "",
                   recorded_val_acc: float = -1.0, training_log_path: str = "", serving_dump: str = "",
                   device: str = "cpu") -> ReplayInputs:
    """No draft path: the demo world (built if missing) fills every empty path, its server's dump included.
    With a user's draft, empty inputs stay empty; only the training data is required."""
    demo = not draft_path
    if demo:
        w = demo_mod.ensure_world()
        draft_path, target_path = str(w.draft), target_path or str(w.target)
        train_data_path = train_data_path or str(w.seed_data)
        heldout_data_path = heldout_data_path or str(w.heldout_data)
        new_prompt_data_path = new_prompt_data_path or str(w.shifted_data)
        training_log_path = training_log_path or str(w.training_log)
        serving_dump = serving_dump or str(ensure_serving_dump("seed", device=device))
    if not train_data_path:
        raise DataError("train_data_path", "no training data given", expected="the draft's training samples",
                        found="''", cause="the verdict needs samples the draft was trained on")
    held = {k: p for k, p in (("held-out", heldout_data_path), ("new prompts", new_prompt_data_path)) if p}
    given = _num(recorded_val_acc) if isinstance(recorded_val_acc, (int, float)) else None   # None / NaN: not given
    rec, src = (given, "parameter") if given is not None and given >= 0 else (None, "not given")
    if rec is None and training_log_path:
        rec, src = read_recorded_accuracy(training_log_path)
    return ReplayInputs(draft_path, target_path, train_data_path, train_data_format or None, held, rec, src,
                        serving_dump, demo)


def load_replay_setup(inp: ReplayInputs, *, device: str = "cpu", dtype="auto", recapture: bool = True,
                      n: int = 3) -> ReplaySetup:
    """The draft and target loaded for replay, with the trained layout taken from the training data: its slots
    identified against the target's own boundaries (`recapture`: `n` samples through the target), else the
    data's declared layout, else the config's ids (`hidden.identify.trained_layout`; the setup's notes say
    which)."""
    setup = load_setup(inp.draft_path, inp.target_path or None, device=device, dtype=dtype)
    try:
        trained = identify_training_layout(setup, inp.train_data, recapture=recapture, n=n,
                                           data_format=inp.train_format, device=device)
    except Eagle3Error as e:
        return dataclasses.replace(setup, notes=setup.notes + (f"training layout not identified ({e}): the "
                                                               "config's ids stand",))
    return with_trained_layout(setup, trained)


# ---------------------------------------------------------------- the serving side, from evidence

@dataclass(frozen=True)
class ServingLayout:
    """What the server feeds the draft's fc, slot by slot, and the evidence it comes from."""
    layout: tuple[str, ...] | None       # None: not known (nothing to decide it, or a slot matching no boundary)
    source: str                          # "serving dump", "typed", "engine rules" or "none"
    detail: str                          # one sentence: where it was read and how sure
    evidence: dict = field(default_factory=dict)


def serving_layout(inp: ReplayInputs, num_layers: int | None, *, typed: str = "", engine: str = "",
                   engine_version: str = "", request: int = 0, device: str = "cpu", dtype=None) -> ServingLayout:
    """The serving side's layout from the best evidence given (see the module docstring for the order)."""
    if inp.serving_dump:
        dump = load_dump(inp.serving_dump)
        if not 0 <= request < len(dump):
            return ServingLayout(None, "serving dump", f"serving dump {inp.serving_dump} holds {len(dump)} "
                                 f"request(s), no request {request}: the serving side is not replayed",
                                 {"dump": inp.serving_dump, "request": request, "requests": len(dump)})
        served = dump[request]
        model = load_target_model(inp.target_path, device=device, dtype=dtype)
        return dumped_layout(compare(served, capture(model, served.input_ids, progress=False)), inp.serving_dump,
                             request)
    if typed:
        lay = parse_layout(typed, num_layers)
        return ServingLayout(lay, "typed", f"typed as the serving layout: {', '.join(lay)}", {"typed": typed})
    default = _engine_default(inp.draft_path, num_layers)
    if default is not None:
        return default
    if engine and num_layers:
        raw, _ = read_config_json(inp.draft_path, "draft")
        arch = None
        try:
            arch = load_target_info(inp.target_path).architecture if inp.target_path else None
        except Eagle3Error:
            arch = None
        reading = {r.engine: r for r in layer_reading(raw, num_layers, engine_version or DEFAULT_VERSION, arch)}
        r = reading.get(engine.lower())
        if r is None:
            return ServingLayout(None, "none", f"no capture rules for engine {engine!r} (known: sglang, vllm)")
        lay = tuple(b if b is not None else ZERO for b in r.boundaries)
        return ServingLayout(lay, "engine rules", f"what {engine} {engine_version or ''} captures for this draft "
                             f"config by its rules ({r.key}); a prediction, not a measurement",
                             {"engine": engine, "version": engine_version, "key": r.key,
                              "problems": list(r.problems) + [p for p in r.slot_problems if p]})
    return ServingLayout(None, "none", f"the serving side is not replayed: give {SERVING_INPUTS}")


def dumped_layout(cmp: Comparison, dump: str, request: int = 0) -> ServingLayout:
    """The serving layout a dumped request's comparison with the target's boundaries shows: known only when every
    slot is identified (a slot matching no boundary, or a dump of no slot, is said so and not replayed)."""
    ident = cmp.identified
    cos = cmp.slots["cos_mean"].min() if len(cmp.slots) else None
    ev = {"dump": dump, "request": request, "identified": [layout_text([x]) for x in ident], "min_cos": _num(cos)}
    if not ident:
        return ServingLayout(None, "serving dump", f"serving dump {dump} (request {request}) holds no aux slot "
                             "(0 slots): the serving side is not replayed", ev)
    if unidentified_slots(ident):
        return ServingLayout(None, "serving dump", f"serving dump {dump}: slot(s) {list(unidentified_slots(ident))} "
                             "match no boundary of the target, so the served layout cannot be replayed (notebook 03 "
                             "shows the slots)", ev)
    return ServingLayout(tuple(ident), "serving dump", f"identified from the serving dump {dump} "
                         f"(request {request}) against the target's own boundaries", ev)


ENGINE_DEFAULT = "engine default"      # ServingLayout.source of a config without ids: what every engine falls back to


def _engine_default(draft_path: str, num_layers: int | None) -> ServingLayout | None:
    """The serving layout of a draft config that names no layer ids: every engine's default capture (inputs of
    [2, L//2, L-3]); None when the config names ids (or there is no target to count layers)."""
    if not num_layers:
        return None
    try:
        raw, file = read_config_json(draft_path, "draft")
        from ..model.config import DraftConfig
        cfg = DraftConfig.from_dict(raw, source=str(file))
    except Eagle3Error:
        return None
    if cfg.aux_layer_ids is not None or cfg.dialect == "eagle":   # SafeAILab EAGLE: its capture is the default
        return None
    lay = engine_default_layout(num_layers)
    ev = {"file": str(file), "key": "eagle_aux_hidden_state_layer_ids", "expected": "the trained layout's ids",
          "found": None, "engine_default": list(lay), "fc_slots": cfg.num_aux}
    return ServingLayout(lay, ENGINE_DEFAULT, f"{file} names no layer ids (eagle_aux_hidden_state_layer_ids): "
                         f"every engine falls back to inputs of [2, L//2, L-3] = [{', '.join(lay)}] "
                         f"({len(lay)} slots for a {cfg.num_aux}-slot fc)", ev)


def layouts_to_replay(training_layout, serving: ServingLayout) -> dict[str, tuple[str, ...] | None]:
    """{"training": the trained layout (None: nothing names it, so the data's slots are replayed as stored, the
    fc's own order), "serving": the evidence's layout (when known)}."""
    named = training_layout is not None and len(training_layout) and not unidentified_slots(training_layout)
    out = {"training": tuple(training_layout) if named else None}   # a slot nothing names: the slots as stored
    if serving.layout is not None and len(serving.layout) and not unidentified_slots(serving.layout):
        out["serving"] = tuple(serving.layout)
    return out


def shown(layout, k: int) -> list[str]:
    """A layout to print: its names (an unidentified slot said so), or the stored slots when nothing names them."""
    return [layout_text([x]) for x in layout] if layout is not None else list(stored_layout(k or 0))


# ---------------------------------------------------------------- the part

def run(inputs: Inputs, earlier=None) -> Part:
    """Notebook 02: the draft replayed on its training samples under each layout there is evidence of, on the
    held-out samples, its verdicts, the layout search (when a replay says wiring) and the trained-config search.
    `results` holds the inputs, setup, serving layout, layouts, replays, verdicts and both searches."""
    ri = replay_inputs(inputs.draft, inputs.target, inputs.data, inputs.train_format, inputs.heldout,
                       inputs.new_prompt_data, inputs.recorded_acc, inputs.training_log, inputs.dump, inputs.device)
    setup = load_replay_setup(ri, device=inputs.device, dtype=inputs.dtype, recapture=inputs.recapture)
    served = serving_layout(ri, setup.num_layers, typed=inputs.serving_layout, engine=inputs.serving_engine,
                            engine_version=inputs.serving_version or inputs.sglang_version, device=inputs.device)
    layouts = layouts_to_replay(setup.training_layout, served)
    steps = {"n": inputs.n, "seed": inputs.seed, "num_steps": inputs.num_steps, "progress": False}
    train = {k: replay(setup, ri.train_data, layout=lay, label=k, fill="zeros", data_format=ri.train_format, **steps)
             for k, lay in layouts.items()}
    held = {k: replay(setup, p, label=k, **steps) for k, p in ri.heldout.items()}
    verdicts = {k: verdict.decide(r, held, recorded_acc=ri.recorded_acc) for k, r in train.items()}
    start, search = search_start(verdicts, layouts), None
    if start is not None and setup.num_layers:
        target_acc = ri.recorded_acc if ri.recorded_acc is not None else train["training"].acc0
        rc = layoutsearch.Recapture(ri.target_path, device=inputs.device, dtype=setup.dtype) \
            if inputs.search_recapture else None
        search = layoutsearch.search_layouts(setup, ri.train_data, start[1], target_acc=target_acc,
                                             n=inputs.n_search, seed=inputs.seed, recapture=rc, progress=False)
    config_search = trained_config.trained_config_search(setup, ri.train_data, recorded=ri.recorded_acc,
                                                         recorded_from=ri.recorded_from)
    found = replay_findings(verdicts, train, served, setup.num_layers, search) + config_search.findings()
    headline = verdict.replay_headline(verdicts, search) + f" [serving layout from {served.source}]"
    tables = {"training samples": verdict.replay_table(train),
              "held-out": verdict.replay_table({"training": train["training"], **held}),
              "config search": config_search.frame(),
              "layout search": search.table if search is not None else "no replay says wiring: no layout search "
                                                                     "needed"}
    return Part(NAME, found, tables=tables, notes=setup.notes, results={
        "inputs": ri, "setup": setup, "served": served, "layouts": layouts, "train": train, "held": held,
        "verdicts": verdicts, "start": start, "search": search, "config_search": config_search,
        "headline": headline})


def not_run(inputs: Inputs) -> list[Finding]:
    """The findings of the part when there are no training samples to replay (a user's draft without them)."""
    return replay_findings({}, {}, ServingLayout(None, "none", "no training data given (--data)"), None)


# ---------------------------------------------------------------- findings

def replay_findings(verdicts: Mapping[str, Verdict], train: Mapping[str, ReplayResult], serving: ServingLayout,
                   num_layers: int | None, search=None) -> list[Finding]:
    """The causes notebook 02 can confirm or rule out, as findings: the serving layout (with the replay as
    evidence), a generalization gap, and a d2t misreading (when the layout search ran)."""
    out: list[Finding] = []
    where_s = f"replay of training samples, serving layout from {serving.source}"
    tr = train.get("training")
    if serving.source == ENGINE_DEFAULT and tr is not None:
        out += _missing_ids(tr, train.get("serving"), serving, where_s)
    elif serving.layout is None:
        out += [not_checked(c, "replay of training samples", SERVING_INPUTS, serving.detail) for c in LAYOUT_CAUSES]
    elif tr is None:        # no replay under the trained layout: nothing to hold the served one against
        causes = CAPTURE_CAUSES if serving.source == ENGINE_DEFAULT else LAYOUT_CAUSES
        out += [not_checked(c, where_s, "a replay of the training samples under the trained layout "
                            "(train_data_path)") for c in causes]
    elif _unnamed(tr.layout):
        out += [not_checked(c, where_s, "a trained layout by name (training data that declares its layout, layer "
                            "ids in the draft config, or a target to identify the slots: target_path)",
                            f"not checked: the training samples were replayed as stored ({', '.join(tr.layout)}): "
                            f"nothing names the trained layout to hold the served [{layout_text(serving.layout)}] "
                            "against") for c in LAYOUT_CAUSES]
    else:
        sv = train.get("serving", tr)
        ev = {"trained_layout": list(tr.layout), "served_layout": list(serving.layout), "layout_source":
              serving.source, "acc_0_trained_layout": _acc0(tr), "acc_0_served_layout": _acc0(sv)}
        expl = explain(tuple(tr.layout), tuple(serving.layout), num_layers=num_layers)
        drop = _acc0(tr) - _acc0(sv) if None not in (_acc0(tr), _acc0(sv)) else None   # None: not measured
        status = "ruled out" if expl.clean else ("confirmed" if serving.source != "engine rules" and drop is not None
                                                 and drop > THRESHOLDS["wiring_drop"] else "suspected")
        found = causes_of(expl) if not expl.clean else ()
        measured = serving.source == "serving dump"       # typed or predicted layouts are not measurements
        for c in LAYOUT_CAUSES:
            if c in found:
                out.append(Finding(c, status, f"serving feeds [{', '.join(serving.layout)}], trained on "
                                   f"[{', '.join(tr.layout)}]: step-0 accuracy {_acc(sv)} as served vs "
                                   f"{_acc(tr)} with the trained layout ({serving.detail})", ev, where_s,
                                   fix=f"feed the trained layout [{', '.join(tr.layout)}]", measured=measured))
            else:
                out.append(Finding(c, "ruled out", f"serving feeds the trained layout as far as {c} goes "
                                   f"({serving.detail})", ev, where_s, measured=measured))
    v = verdicts.get("training")
    held = {k: _num(a) for k, a in (v.heldout_acc or {}).items()} if v is not None else {}
    if v is None or not v.heldout_acc:
        out.append(not_checked("generalization_gap", "replay of held-out samples", "held-out or new-prompt data "
                               "(heldout_data_path / new_prompt_data_path)"))
    elif _num(v.train_acc) is None or None in held.values():
        gone = ["training"] * (_num(v.train_acc) is None) + [k for k, a in held.items() if a is None]
        out.append(not_checked("generalization_gap", "replay of held-out samples", "samples that replay (" +
                               ", ".join(gone) + ": no step-0 accuracy)", f"not checked: no step-0 accuracy on "
                               f"{', '.join(gone)} (no sample replayed)"))
    elif v.verdict in ("generalization", "healthy"):
        worst = min(v.heldout_acc.items(), key=lambda kv: kv[1])
        ev = {"acc_0_training": _num(v.train_acc), **{f"acc_0_{k}": _num(a) for k, a in v.heldout_acc.items()},
              "recorded_val_acc": _num(v.recorded_acc)}
        out.append(Finding("generalization_gap", "confirmed" if v.verdict == "generalization" else "ruled out",
                           f"training samples {v.train_acc:.3f} vs {worst[0]} {worst[1]:.3f} (step-0 accuracy)", ev,
                           "replay of held-out samples, training layout",
                           fix="train on data like the served prompts" if v.verdict == "generalization" else "",
                           measured=True))
    else:
        out.append(not_checked("generalization_gap", "replay of held-out samples", "a draft that holds up on its "
                               "own training samples first", f"not decided: the training layout's verdict is "
                               f"{v.verdict}"))
    if search is not None:        # a d2t reading that restores the accuracy confirms; no such reading decides
        best = search.table[search.table.candidate == search.best]   # nothing (the map itself may be lost)
        acc = _num(best.iloc[0]["acc_0"]) if len(best) else None    # a reading with no accuracy restores nothing
        if acc is not None and best.iloc[0]["d2t"] != "offsets" and search.restored:
            out.append(Finding("d2t_mapping", "confirmed", f"layout search: reading d2t as "
                               f"{best.iloc[0]['d2t']} restores step-0 accuracy to {acc:.3f}",
                               {"best": str(search.best), "acc_0": acc},
                               "layout search (d2t readings)", fix="store d2t as offsets (target_id = draft_id + "
                               "d2t[draft_id])", measured=True))
    return out


def _missing_ids(tr: ReplayResult, sv: ReplayResult | None, serving: ServingLayout, where: str) -> list[Finding]:
    """missing_layer_ids measured: the draft replayed under the engines' default capture against its trained
    layout; the layout causes are about ids the config does not have (not checked)."""
    ev = {**serving.evidence, "trained_layout": list(tr.layout), "acc_0_trained_layout": _acc0(tr),
          "measurement": "replay of the training samples under the engine's default layout vs the trained layout"}
    needs = "layer ids in the draft config (without them every engine feeds its default capture)"
    out = [not_checked(c, where, needs, f"not checked: the config names no ids ({serving.detail})")
           for c in LAYOUT_CAUSES]
    if sv is None:
        return out + [not_checked("missing_layer_ids", where, "a replay under the engine's default layout")]
    if _acc0(tr) is None:
        return out + [not_checked("missing_layer_ids", where, "training samples that replay under the trained "
                                  "layout (train_data_path)", f"not checked: no step-0 accuracy under the trained "
                                  f"layout ({len(tr.skipped)} sample(s) skipped), nothing to hold the engine "
                                  "default's against")]
    ev["acc_0_engine_default"] = _acc0(sv)
    drop = _acc0(tr) - (_acc0(sv) if _acc0(sv) is not None else math.nan)
    fix = "write the trained layout's ids into the config (notebook 03 section 4 lists them per engine)"
    k = int(serving.evidence.get("fc_slots") or len(tr.layout))
    if len(serving.layout) != k:
        ev["refused_by"] = "vllm (the fc's input width does not match the captured slots: the first request fails)"
    if math.isnan(drop) or drop > THRESHOLDS["wiring_drop"]:
        return out + [Finding("missing_layer_ids", "confirmed", f"{serving.detail}: step-0 accuracy "
                              f"{_acc(sv)} under it (the missing slots fed as zeros) vs {_acc(tr)} with the "
                              "trained layout" + ("; vLLM refuses such a draft outright" if "refused_by" in ev else ""),
                              ev, where, fix=fix, source="vllm PR#50170", measured=True)]
    return out + [Finding("missing_layer_ids", "ruled out", f"{serving.detail}: the draft replays as well under it "
                          f"(step-0 accuracy {_acc(sv)} vs {_acc(tr)}): it was trained on the default", ev,
                          where, measured=True)]


def search_start(verdicts: Mapping[str, Verdict], layouts: Mapping[str, tuple]) -> tuple[str, tuple] | None:
    """Where the layout search starts: the served layout when it replays as wiring, else the training layout when
    that does; None when nothing replays as wiring (no search needed) or the layout is not known by name."""
    for label in ("serving", "training"):
        if label in verdicts and verdicts[label].verdict == "wiring" and layouts.get(label) is not None:
            return label, tuple(layouts[label])
    return None


def _num(x):
    """A number, or None where it is missing (None, NaN, or not a number)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _acc(r: ReplayResult) -> str:
    """A replay's step-0 accuracy to print: "0.812", or "not measured (no sample replayed)"."""
    a = _acc0(r)
    return f"{a:.3f}" if a is not None else f"not measured ({len(r.skipped)} sample(s) skipped, none replayed)"


def _acc0(r: ReplayResult) -> float | None:
    """A replay's step-0 accuracy, None where it is missing (no step counted, None or NaN)."""
    return _num(r.per_step["acc"].iloc[0]) if "acc" in r.per_step and len(r.per_step) else None


def _unnamed(layout) -> bool:
    """A replay layout nothing names (the slots as stored, `replay.items.stored_layout`)."""
    return tuple(layout) == stored_layout(len(layout)) and len(layout) > 0
