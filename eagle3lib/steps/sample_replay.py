"""Notebook 02's steps: its inputs, where the serving side's layout comes from, the layouts to replay, and `run`
(the part: the replays and the findings they support, decided by `checks.replayed_layout`).

An empty path means the demo world's artifact only when the notebook runs on the demo world (no draft given).
The serving layout is never presumed: it comes from evidence, in this order, and the result says which:
(a) a serving dump identified against the target's own boundaries (notebook 03's identification; on the demo
world, its server's dump), (b) a layout the user typed, (c) the boundaries the named engine and version capture
for this draft config (the capture rules of `serving.crossengine`), (d) for a draft config that names no layer ids,
the default the serving engines fall back to (their "default_ids" rows of the engine table, when they agree); with
none of these the serving side is not replayed and the result names the input that would decide it.
Nothing here stops on a defect of the draft: a trained layout nothing names is replayed as the training data stores
it (the fc's own order), and a config without ids is replayed under the engine's default against it
(`missing_layer_ids` decided by the accuracy it loses).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

import pandas as pd

from ..causes import Finding
from ..errors import DataError, Eagle3Error
from ..hidden.capture import capture, load_target_model
from ..hidden.compare import Comparison, compare
from ..hidden.dumps import load_dump
from ..hidden.explain import layout_text, unidentified_slots
from ..layout import parse_layout
from ..model.config import read_config_json
from ..model.dialects import CONFIG_DIALECTS
from ..model.target import load_target_info
from ..checks.restoring import config_findings, tensor_findings
from ..replay.run import identify_training_layout, load_setup, with_trained_layout
from ..replay.stats import ReplaySetup
from ..replay.items import stored_layout
from ..layout import ZERO
from ..replay.verdict import Verdict
from ..checks.replayed_layout import ENGINE_DEFAULT, SERVING_INPUTS, number_or_none, replay_findings
from ..engines.advice import captured_by
from ..engines.facts import default_ids_row
from ..engines.versions import SERVING_ENGINES
from ..serving.layer_reading import layer_reading
from ..engines.versions import DEFAULT_VERSION
from ..replay import evidence, layoutsearch, tokenview, verdict
from ..replay.run import replay
from . import trained_config
from .case import Case, reads_once
from .part import Inputs, Part

NAME = "02 training-sample replay"


def load_replay_setup(case: Case, *, device: str = "cpu", dtype="auto", recapture: bool = True,
                      n: int = 3) -> ReplaySetup:
    """The case's draft and target loaded for replay, with the trained layout taken from its training data: its
    slots identified against the target's own boundaries (`recapture`: `n` samples through the target), else the
    data's declared layout, else the config's ids (`hidden.identify.trained_layout`; the setup's notes say
    which). A case without training data is refused, naming it: the verdict needs samples the draft was trained on."""
    if not case.train_data:
        raise DataError("train_data", "no training data given", expected="the draft's training samples",
                        found="''", cause="the verdict needs samples the draft was trained on")
    setup = load_setup(case.draft_path, case.target_path or None, device=device, dtype=dtype)
    try:
        trained = identify_training_layout(setup, case.train_data, recapture=recapture, n=n,
                                           data_format=case.given.train_format or None, device=device)
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


def serving_layout(inp: Case, num_layers: int | None, *, typed: str = "", engine: str = "",
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
    ev = {"dump": dump, "request": request, "identified": [layout_text([x]) for x in ident], "min_cos": number_or_none(cos)}
    if not ident:
        return ServingLayout(None, "serving dump", f"serving dump {dump} (request {request}) holds no aux slot "
                             "(0 slots): the serving side is not replayed", ev)
    if unidentified_slots(ident):
        return ServingLayout(None, "serving dump", f"serving dump {dump}: slot(s) {list(unidentified_slots(ident))} "
                             "match no boundary of the target, so the served layout cannot be replayed (notebook 03 "
                             "shows the slots)", ev)
    return ServingLayout(tuple(ident), "serving dump", f"identified from the serving dump {dump} "
                         f"(request {request}) against the target's own boundaries", ev)




def _engine_default(draft_path: str, num_layers: int | None) -> ServingLayout | None:
    """The serving layout of a draft config that names no layer ids: what the serving engines capture then (the
    engine table's "default_ids" rows, `engines.advice.captured_by`); None when the config names ids, there is no
    target to count layers, or the engines' defaults differ (the serving layout then depends on the engine)."""
    if not num_layers:
        return None
    try:
        raw, file = read_config_json(draft_path, "draft")
        from ..model.config import DraftConfig
        cfg = DraftConfig.from_dict(raw, source=str(file))
    except Eagle3Error:
        return None
    if cfg.aux_layer_ids is not None or CONFIG_DIALECTS[cfg.dialect].no_ids:   # SafeAILab EAGLE: its capture is fixed
        return None
    per_engine = {e: captured_by(e, None, num_layers) for e in SERVING_ENGINES}
    if len(set(per_engine.values())) != 1:
        return None
    lay = next(iter(per_engine.values()))
    ev = {"file": str(file), "key": "eagle_aux_hidden_state_layer_ids", "expected": "the trained layout's ids",
          "found": None, "engine_default": list(lay), "engines": list(per_engine), "fc_slots": cfg.num_aux,
          "source": "; ".join(f"{e}: {default_ids_row(e).source}" for e in per_engine if default_ids_row(e))}
    return ServingLayout(lay, ENGINE_DEFAULT, f"{file} names no layer ids (eagle_aux_hidden_state_layer_ids): "
                         f"{' and '.join(per_engine)} fall back to [{', '.join(lay)}] (their default capture) "
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

@reads_once
def run(case: Case, earlier=None) -> Part:
    """Notebook 02: the draft replayed on its training samples under each layout there is evidence of, on the
    held-out samples, its verdicts, the layout search (when a replay says wiring), the trained-config search and,
    when the draft still fails its own samples, the artifact search. `results` holds the inputs, setup, serving
    layout, layouts, replays, verdicts and the searches."""
    inputs = case.given
    setup = load_replay_setup(case, device=inputs.device, dtype=inputs.dtype, recapture=inputs.recapture)
    served = serving_layout(case, setup.num_layers, typed=inputs.serving_layout, engine=inputs.serving_engine,
                            engine_version=inputs.serving_version or inputs.sglang_version, device=inputs.device)
    layouts = layouts_to_replay(setup.training_layout, served)
    steps = {"n": inputs.n, "seed": inputs.seed, "num_steps": inputs.num_steps, "progress": False}
    train = {k: replay(setup, case.train_data, layout=lay, label=k, fill="zeros",
                       data_format=inputs.train_format or None, **steps) for k, lay in layouts.items()}
    held = {k: replay(setup, p, label=k, **steps) for k, p in case.heldout.items()}
    verdicts = {k: verdict.decide(r, held, recorded_acc=case.recorded_acc) for k, r in train.items()}
    start, search = search_start(verdicts, layouts), None
    if start is not None and setup.num_layers:
        target_acc = case.recorded_acc if case.recorded_acc is not None else train["training"].acc0
        rc = layoutsearch.Recapture(case.target_path, device=inputs.device, dtype=setup.dtype) \
            if inputs.search_recapture else None
        search = layoutsearch.search_layouts(setup, case.train_data, start[1], target_acc=target_acc,
                                             n=inputs.n_search, seed=inputs.seed, recapture=rc, progress=False)
    config_search, artifacts = trained_config.trained_searches(setup, case.train_data, recorded=case.recorded_acc,
                                                               recorded_from=case.recorded_from)
    found = replay_findings(verdicts, train, served, setup.num_layers, search) + config_findings(config_search) + (
        tensor_findings(artifacts) if artifacts is not None else [])
    headline = verdict.replay_headline(verdicts, search) + f" [serving layout from {served.source}]"
    tables = {"training samples": verdict.replay_table(train),
              "held-out": verdict.replay_table({"training": train["training"], **held}),
              "config search": config_search.frame(),
              "artifact search": artifacts.frame() if artifacts is not None else "the draft does not fail its own "
                                 "training samples beyond what a config field restores: no tensor searched",
              "layout search": search.table if search is not None else "no replay says wiring: no layout search "
                                                                     "needed"}
    return Part(NAME, found, tables=tables, notes=setup.notes, results={
        "inputs": case, "setup": setup, "served": served, "layouts": layouts, "train": train, "held": held,
        "verdicts": verdicts, "start": start, "search": search, "config_search": config_search,
        "artifact_search": artifacts,
        "headline": headline})


@reads_once
def position_accuracy(case: Case, setup: ReplaySetup, n: int = 8, seed: int = 0) -> pd.DataFrame:
    """Step-0 accuracy per position bucket on the case's training samples under the training layout
    (`replay.evidence.accuracy_by_position`), inside the case's reads: the samples its part read are not read again."""
    return evidence.accuracy_by_position(setup, case.train_data, n=n, seed=seed)


@reads_once
def token_details(case: Case, setup: ReplaySetup, layouts: Mapping[str, tuple | None], n: int = 3, seed: int = 0,
                  num_steps: int = 3) -> dict[str, list]:
    """Each layout's per-token replay of `n` training samples (`replay.tokenview.collect`, a slot a sample lacks fed
    zeros), keyed by the layout's label, inside the case's reads."""
    return {label: tokenview.collect(setup, case.train_data, layout=lay, n=n, seed=seed, num_steps=num_steps,
                                     fill="zeros") for label, lay in layouts.items()}


def not_run(inputs: Inputs) -> list[Finding]:
    """The findings of the part when there are no training samples to replay (a user's draft without them)."""
    return replay_findings({}, {}, ServingLayout(None, "none", "no training data given (--train-data, YAML key "
                                                                 "train_data)"), None)


def search_start(verdicts: Mapping[str, Verdict], layouts: Mapping[str, tuple]) -> tuple[str, tuple] | None:
    """Where the layout search starts: the served layout when it replays as wiring, else the training layout when
    that does; None when nothing replays as wiring (no search needed) or the layout is not known by name."""
    for label in ("serving", "training"):
        if label in verdicts and verdicts[label].verdict == "wiring" and layouts.get(label) is not None:
            return label, tuple(layouts[label])
    return None
