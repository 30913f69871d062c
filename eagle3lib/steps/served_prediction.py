"""Notebook 01's last check (and the diagnosis'): every served τ beside the replay under the setting it ran.

The setting of each served run is the one its own record carries (the server's log or benchmark output names
num_steps / topk / num_draft_tokens), else the resolved effective settings of the launch command; the layout is
the one the server feeds by the best evidence (a serving dump, a typed layout, the launch engine's capture rules:
notebook 02's order), else the training layout.
So a tree-served τ is compared with the tree's replayed τ, never with a chain's.
On the demo world (no draft given) the served runs are the demo engine's own, under the seed launch's effective
settings with the seed's capture; with a user's draft nothing is filled in: a missing input gives `not checked`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd

from ..causes import Finding, not_checked
from ..demo import sweep as demo_sweep
from ..errors import Eagle3Error
from ..engines.versions import engine_title
from ..serving.homes import homes
from ..checks.restoring import config_findings, tensor_findings
from ..checks.inputs import Artifacts
from ..checks.rope import rope_fields
from ..engine_kit.view import EngineView
from ..hidden.identify import TrainedLayout
from ..replay.as_served import AsServed, replay_as_served
from ..replay.layoutsearch import Recapture
from ..replay.served import ServedVsPredicted, served_vs_replay
from ..checks.served_loss import WHERE, as_served_findings, served_findings, tau_tolerance
from ..checks.generalization import not_served, traffic_finding, without_traffic
from ..replay.traffic_samples import served_traffic_read
from ..hidden.dumps import dump_engine
from ..samples.distance import served_distance
from ..replay.items import as_samples
from ..layout import ZERO
from ..checks.engine_said import ENGINE_SAID, view_findings
from .served_view import deployment_view
from ..engine_kit.records import RunRecord
from . import discovery
from .discovery import Discovery
from .case import Case, reads_once
from .part import Part
from . import sample_replay, trained_config
from .trained_config import unused_tensors
from .throughput_runs import read_runs, served_files

NAME = "01 served vs replay"
SERVED_SAMPLES = 16     # samples per prediction unless Inputs.served_samples says otherwise (at most Inputs.n)


@dataclass(frozen=True, eq=False)
class ServedPrediction:
    """The comparisons made, and what could not be compared (with the reason). For a vLLM deployment: the draft
    as the engine loads it (`view`), its replays as trained and as served (`as_served`) and what they decide."""

    comparisons: tuple[ServedVsPredicted, ...] = ()
    problems: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()       # inputs that would let the check run
    notes: tuple[str, ...] = field(default_factory=tuple)
    view: EngineView | None = None
    as_served: AsServed | None = None
    decided: tuple[Finding, ...] = ()   # the findings the view and the as-served replay support

    def frame(self) -> pd.DataFrame:
        """One block of rows per served run: served, replay under the same setting, chain of the same depth."""
        if not self.comparisons:
            return pd.DataFrame(columns=["what", "setting", "accept_length", "source"])
        return pd.concat([c.frame() for c in self.comparisons], ignore_index=True)

    def view_frame(self) -> pd.DataFrame | str:
        """What the engine loads, aspect by aspect, with the source that answered (vLLM deployments)."""
        if self.view is None:
            return "not shown: not a vLLM deployment with a draft given (the table above is the whole comparison)"
        return self.view.frame()

    def as_served_frame(self) -> pd.DataFrame | str:
        """The draft replayed as trained, as the engine loads it and one aspect at a time (vLLM deployments)."""
        if self.as_served is None:
            why = "; ".join(self.missing + self.problems) or "no served accept length to set beside it"
            return f"not replayed as served: {why}"
        return self.as_served.frame()

    def findings(self) -> list[Finding]:
        """What the served runs decide; every form says what the served prompts decide (`checks.generalization`):
        the vLLM path's own finding, a served τ beside the replay on the training samples, or not checked."""
        if self.decided:
            gen = [] if any(f.cause == "generalization_gap" for f in self.decided) else [not_served(
                "; ".join(self.missing + self.problems))]
            trees = [f for c in self.comparisons for f in served_findings(c)]   # SGLang trees beside the tree replay
            return list(self.decided) + trees + gen
        if self.comparisons:
            return [f for c in self.comparisons for f in served_findings(c)] + [
                without_traffic(c.served, c.predicted, tau_tolerance(c.predicted), "the training samples",
                                source=c.source)
                for c in self.comparisons]
        need = " and ".join(self.missing) or "a served run with an accept length"
        why = "; ".join(self.problems)
        return [not_checked("engine_regression", WHERE + (f" ({why})" if why else ""), need),
                not_served("; ".join(self.missing + self.problems))]


@reads_once
def run(case: Case, earlier) -> Part:
    """Notebook 01 section 11: the served runs beside the replay, for the serving settings `earlier` holds (the
    part `discovery.run` made; `results["served"]` is the ServedPrediction, its problems are notes here)."""
    d, inputs = earlier[discovery.NAME].results["discovery"], case.given
    n = inputs.served_samples if inputs.served_samples is not None else min(inputs.n, SERVED_SAMPLES)
    served = served_vs_predicted(d, case, n=n, progress=False)
    return Part(NAME, served.findings(), tables={"served vs replay": served.frame(), "as loaded": served.view_frame(),
                                                 "as served": served.as_served_frame()},
                notes=served.notes + served.problems, results={"served": served})


def setting_of(record: RunRecord, d: Discovery | None) -> tuple[int, int, int] | None:
    """(num_steps, topk, num_draft_tokens) a served run ran: its own record's, else the launch's as its engine
    resolves it (`Discovery.setting`: SGLang's rule table, vLLM's chain of num_speculative_tokens); None where a part
    is unknown."""
    if record.num_steps:
        topk = record.topk or 1
        return record.num_steps, topk, record.num_draft_tokens or (record.num_steps + 1 if topk == 1 else None)
    st = d.setting if d is not None else None
    return st if st is not None and all(isinstance(x, int) for x in st) else None


def served_runs(paths=(), server_url: str = "") -> tuple[list[RunRecord], list[str]]:
    """Speculative runs with an accept length from the logs / benchmark files given, and what could not be read."""
    runs, problems = [], []
    for one in [[p] for p in paths if p] + ([[]] if server_url else []):
        try:
            (res,) = read_runs(one, server_url if not one else "")
        except Eagle3Error as e:
            problems.append(str(e))
            continue
        problems += [f"{res.source} line {n}: {why}" for n, why in res.bad_lines] + list(res.warnings)
        runs += [r for r in res.records if r.accept_length is not None]
    return runs, problems


def demo_served(d: Discovery, n_prompts: int = 4) -> list[RunRecord]:
    """The demo world's server: its engine under the seed launch's effective settings with the seed's capture."""
    st = setting_of(RunRecord(engine="demo"), d)
    if st is None:
        return []
    recs = demo_sweep.run_demo_sweep([st], captures=("seed",), repeats=1, num_prompts=n_prompts, prompts="train")
    return [r for r in recs if r.num_steps]


def served_vs_predicted(d: Discovery, case: Case, *, n: int = 16, progress: bool = True) -> ServedPrediction:
    """Every served run (the case's `served_log` / `server_url`; on the demo world, its engine) beside the replay of
    the draft on its training data under that run's setting, in the layout the server feeds: from the serving dump,
    the typed `serving_layout`, or the launch engine's capture rules, in that order (notebook 02's evidence order).
    A vLLM deployment, and an SGLang one that drafts a chain (topk 1), is replayed as the engine loads it
    (`engine_served`: the server's log, the samples of the served prompts, the served traffic)."""
    g = case.given
    draft_path, data_path, serving_layout, device = g.draft, g.train_data, g.serving_layout, g.device
    if draft_path and chain_served(d):
        return engine_served(d.launch.engine, d, case, n=n)
    served_paths, server_url = served_files(g), g.server_url
    notes, problems, missing, runs = [], [], [], []
    if draft_path:
        if not data_path:
            missing.append("training samples to replay (train_data)")
        runs, problems = served_runs(served_paths, server_url)
        if not runs:
            missing.append("a decode log or benchmark output with accept lengths (served_log_path)")
        if missing:
            return ServedPrediction((), tuple(problems), tuple(missing))
    else:
        notes.append("demo world: the served runs are the demo engine's, under the seed launch's effective settings "
                     "with the seed's capture, on training prompts")
    if case.demo:
        try:
            runs = demo_served(d)
        except Eagle3Error as e:
            problems.append(f"demo engine: {e}")
        if not runs:
            return ServedPrediction((), tuple(problems), (), tuple(notes))
    try:
        setup = sample_replay.load_replay_setup(case, device=device)
        engine = d.launch.engine if d.launch is not None else ""
        served = sample_replay.serving_layout(case, setup.num_layers, typed=serving_layout, engine=engine,
                                              engine_version=d.launch_version or "", device=device)
    except Eagle3Error as e:
        return ServedPrediction((), tuple(problems + [f"draft/target/serving layout: {e}"]), (), tuple(notes))
    layout = served.layout
    notes.append(f"replayed layout: {served.detail}" if layout is not None else
                 f"replayed layout: the training layout (the served one is not known: {served.detail})")
    out = []
    for r in runs:
        st = setting_of(r, d)
        if st is None or None in st:
            problems.append(f"{r.label or r.source}: its setting is not known (num_steps/topk/num_draft_tokens)")
            continue
        try:
            out.append(served_vs_replay(setup, case.train_data, r.accept_length, st, source=r.source or r.label,
                               layout=layout, n=n, progress=progress))
        except Eagle3Error as e:
            problems.append(f"{r.label or r.source}: {e}")
    return ServedPrediction(tuple(out), tuple(problems), (), tuple(notes))


def served_dtype(d: Discovery) -> str:
    """The dtype the launch served in, where it names a half precision (--dtype bfloat16 / float16): the replay
    runs in it; else "auto" (the checkpoint's own dtype, as vLLM's "auto" loads it)."""
    asked = d.launch.get("dtype") if d.launch is not None else None
    return asked if asked in ("bfloat16", "float16") else "auto"


def chain_served(d: Discovery) -> bool:
    """The launch drafts a chain the as-served replay models (topk 1 as its engine resolves it: vLLM's K drafts, SGLang
    at topk 1); a tree, topk > 1, is set beside the tree replay instead (`served_vs_replay`)."""
    return d.setting is not None and d.setting[1] == 1


def engine_served(engine: str, d: Discovery, case: Case, n: int = 16) -> ServedPrediction:
    """A vLLM or SGLang deployment: the draft as the engine loads it (the tables at its version, then what the running
    engine said: vLLM's probe and log, SGLang's log and the load its hook recorded: `served_view`), what the engine
    said against the trained layout, and each served τ beside the draft replayed as trained and as the engine loads
    it (`replay.as_served`), which decides the wiring causes by measurement. The replay runs on the served traffic
    (every answer, captured by the target) when `served_traffic` is given, else on `n` samples of `served_data`
    (else `heldout_data`), else of the training data. SGLang's τ over exactly that traffic (its answers' verify rounds)
    comes first among the served runs."""
    g = case.given
    draft_path, target_path, data_path, device = case.draft_path, case.target_path, case.train_data, g.device
    served_paths, server_url, startup_log = served_files(g), g.server_url, case.server_log
    serving_dump, art = case.serving_dump, case.artifacts.scoped()     # what this part loads is let go with it
    served_data_path, served_traffic_path = g.served_data or g.heldout_data, g.served_traffic
    notes, problems, decided = [], [], []
    logs = [p for p in [startup_log, *served_paths] if p]
    if not data_path:
        return ServedPrediction((), tuple(problems), ("training samples to replay (train_data)",))
    try:
        setup = sample_replay.load_replay_setup(case, device=device, dtype=served_dtype(d))
        view, vnotes, more = deployment_view(
            engine, art, version=d.launch_version, logs=logs,
            load=dump_engine(serving_dump).get("load") if serving_dump else None,
            num_speculative_tokens=(d.vllm or {}).get("num_speculative_tokens") or 3,
            mis_shaped=tuple(f.key for f in setup.filled if f.found is not None),
            device=d.launch.get("device") if d.launch is not None else None)
        problems += more
    except Eagle3Error as e:
        return ServedPrediction((), tuple(problems + [f"draft/target: {e}"]), ())
    notes += vnotes + [f"training layout: {setup.training_layout} ({setup.training_layout_source})"]
    notes += [f"replayed in {served_dtype(d)}, the dtype the launch served in"] * (served_dtype(d) != "auto")
    if serving_dump:
        try:
            sl = sample_replay.serving_layout(case, setup.num_layers, device=device)
            if sl.layout is not None:
                view = view.overruled("layout", tuple(None if b == ZERO else b for b in sl.layout), "dump",
                                      sl.detail)
        except Eagle3Error as e:
            problems.append(f"serving dump {serving_dump}: {e}")
    trained = TrainedLayout(setup.training_layout, setup.training_layout_source, "")
    decided += view_findings(view, trained, art=art, num_layers=setup.num_layers)
    name = engine_title(engine)
    if view.refused and view.refused_source in ENGINE_SAID:
        notes.append(f"{name} does not serve this draft: {view.refused}")
        return ServedPrediction((), tuple(problems), (), tuple(notes), view, None, tuple(decided))
    runs, more = served_runs(served_paths, server_url)
    problems += more
    data = served_data_path or case.train_data
    replayed_on = "the served prompts' samples (served_data)" if served_data_path else "the training samples"
    traffic = False
    if served_traffic_path:
        try:
            data, tnote, read = served_traffic_read(served_traffic_path, target_path, setup.training_layout,
                                                    setup.tokenizer, device=device)
            n = len(data)                         # every answer: the served τ counts them all
            notes.append(tnote)
            replayed_on, traffic = "the served traffic", True
            counted = read.counted_tau
            if counted is not None:               # SGLang's own count over exactly the replayed answers: first
                runs.insert(0, RunRecord(engine=engine, accept_length=counted[0], label="served traffic",
                                         source=f"{read.responses}: Σ completion_tokens / Σ spec_verify_ct over "
                                                f"{counted[1]} answers"))
        except Eagle3Error as e:
            problems.append(f"served traffic {served_traffic_path}: {e}; replayed on {data} instead")
    if not runs:
        need = getattr(homes().get(engine), "served_tau", "") or f"a {engine_title(engine)} decode log"
        return ServedPrediction((), tuple(problems), (f"{need} with accept lengths (served_log_path)",),
                                tuple(notes), view, None, tuple(decided))
    shipped = set(art.tensors or {})
    own = art.draft_tensors("embed_tokens.weight").get("embed_tokens.weight")
    rope = trained_rope(art)
    # the training samples decide what was trained: the config fields that reproduce training are 'as trained'
    found, tensors = trained_config.trained_searches(setup, case.train_data, recorded=case.recorded_acc,
                                                     recorded_from=case.recorded_from)   # ... and a shipped tensor
    decided += config_findings(found)
    restored = tensor_findings(tensors) if tensors is not None else []
    decided += restored
    if found.trained_changes:
        notes.append("as trained: " + found.restoring.described + f" (the training samples: {found.shipped_acc0:.2f} "
                     f"as shipped, {found.restoring.acc0:.2f} so)")
    extra = unused_tensors(draft_path, setup) if found.trained_changes else None
    rec = Recapture(target_path, device=device) if target_path else None
    replays: dict[int, AsServed] = {}         # one replay per served depth K: each run is set beside its own
    trees = []
    for r in runs:
        st = setting_of(r, d)
        if st is not None and None not in st and st[1] > 1:   # a tree (SGLang topk > 1): its own replay
            try:
                lay = tuple(None if b is None else b for b in view.value("layout") or ()) or None
                trees.append(served_vs_replay(setup, data, r.accept_length, st, source=r.source or r.label,
                                              layout=lay if lay and None not in lay else None, n=n, progress=False))
            except Eagle3Error as e:
                problems.append(f"{r.label or r.source}: {e}")
            continue
        if st is None or st[1] != 1:
            problems.append(f"{r.label or r.source}: not a chain of known depth (vLLM: num_speculative_tokens; "
                            "SGLang: topk 1)")
            continue
        try:
            if st[0] not in replays:
                replays[st[0]] = replay_as_served(setup, data, view, num_steps=st[0], shipped=shipped,
                                                  own_embed=own, trained_rope=rope, n=n, recapture=rec,
                                                  trained_config=found.trained_changes or None, extra=extra)
                if restored:        # both replays read the shipped tensor: they cannot see what restoring it shows
                    replays[st[0]] = dataclasses.replace(replays[st[0]], unseen={
                        **replays[st[0]].unseen, **{f.cause: f"the training samples restore only with "
                                                    f"{f.evidence.get('how')}: both replays read the shipped "
                                                    f"{f.evidence.get('tensor')}" for f in restored}})
        except Eagle3Error as e:
            problems.append(f"replay as served: {e}")
            break
        ids_read = not (view.aspects.get("layout") and "default" in view.aspects["layout"].detail)
        decided += as_served_findings(float(r.accept_length), r.source or r.label, replays[st[0]],
                                      num_layers=setup.num_layers, ids_read=ids_read,
                                      engine_per_position=r.per_position, replayed_on=replayed_on)
        decided.append(served_prompts_finding(found, replays[st[0]], float(r.accept_length), r.source or r.label,
                                              replayed_on, traffic=data if traffic else None, train=case.train_data))
    first = next(iter(replays.values()), None)
    notes += list(first.notes) if first is not None else []
    return ServedPrediction(tuple(trees), tuple(problems), (), tuple(notes), view, first, tuple(decided))


def served_prompts_finding(found, replayed: AsServed, served: float, source: str, replayed_on: str, *,
                           traffic=None, train=None) -> Finding:
    """`generalization_gap` on the served traffic (checks.generalization): the training samples' step-0 accuracy
    (as shipped, or under the config that reproduces training) against the draft replayed as trained on the served
    traffic, with how far those sequences are from the training samples; without the traffic, the served τ
    against the replay on `replayed_on`."""
    tr = replayed.get("as trained")
    tol = tau_tolerance(tr.tau)
    if traffic is None:
        return without_traffic(served, tr.tau, tol, replayed_on, source=source)
    restored = found.restoring
    acc, how = ((restored.acc0, f"the training samples under {restored.described}") if restored is not None else
                (found.shipped_acc0, "the training samples as shipped"))
    if acc != acc:                              # NaN: the training samples did not replay
        return without_traffic(served, tr.tau, tol, replayed_on, source=source)
    samples, _, _ = as_samples(train, 16) if train else ([], None, None)
    dist = served_distance([(s.input_ids, s.loss_mask) for s in samples],
                           [(s.input_ids, s.loss_mask) for s in traffic])
    return traffic_finding(acc, how, tr.acc0, tr.positions, served=served, predicted=tr.tau, tolerance=tol,
                           distance=dist, answers=len(traffic))


def trained_rope(art: Artifacts) -> dict | None:
    """The target's RoPE theta where the draft config's differs (the draft may have been trained with either: the
    as-served replay measures both), else None (also when either config was not read)."""
    if art.draft_raw is None or art.target_info is None:
        return None
    try:
        d, t = rope_fields(dict(art.draft_raw)), rope_fields(art.target_info.text_config)
    except Eagle3Error:
        return None
    return {"rope_theta": t["theta"]} if abs(d["theta"] - t["theta"]) > 1e-6 * t["theta"] else None
