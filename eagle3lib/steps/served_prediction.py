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

from dataclasses import dataclass, field

import pandas as pd

from ..causes import Finding, not_checked
from ..demo import sweep as demo_sweep
from ..errors import Eagle3Error
from ..replay.served import WHERE, ServedVsPredicted, compare
from ..throughput.records import RunRecord
from .discovery import Discovery
from . import sample_replay
from .throughput_runs import read_runs


@dataclass(frozen=True, eq=False)
class ServedPrediction:
    """The comparisons made, and what could not be compared (with the reason)."""

    comparisons: tuple[ServedVsPredicted, ...] = ()
    problems: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()       # inputs that would let the check run
    notes: tuple[str, ...] = field(default_factory=tuple)

    def frame(self) -> pd.DataFrame:
        """One block of rows per served run: served, replay under the same setting, chain of the same depth."""
        if not self.comparisons:
            return pd.DataFrame(columns=["what", "setting", "accept_length", "source"])
        return pd.concat([c.frame() for c in self.comparisons], ignore_index=True)

    def findings(self) -> list[Finding]:
        if self.comparisons:
            return [f for c in self.comparisons for f in c.findings()]
        need = " and ".join(self.missing) or "a served run with an accept length"
        why = "; ".join(self.problems)
        return [not_checked("engine_regression", WHERE + (f" ({why})" if why else ""), need)]


def setting_of(record: RunRecord, d: Discovery | None) -> tuple[int, int, int] | None:
    """(num_steps, topk, num_draft_tokens) a served run ran: its own record's, else the launch's resolution."""
    if record.num_steps:
        topk = record.topk or 1
        return record.num_steps, topk, record.num_draft_tokens or (record.num_steps + 1 if topk == 1 else None)
    eff = d.resolution.effective if d is not None and d.resolution is not None else {}
    steps, topk, ndt = (eff.get(k) for k in ("speculative_num_steps", "speculative_eagle_topk",
                                               "speculative_num_draft_tokens"))
    return (steps, topk, ndt) if all(isinstance(x, int) for x in (steps, topk, ndt)) else None


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
        runs += [r for r in res.records if r.accept_length is not None and r.num_steps]
    return runs, problems


def demo_served(d: Discovery, n_prompts: int = 4) -> list[RunRecord]:
    """The demo world's server: its engine under the seed launch's effective settings with the seed's capture."""
    st = setting_of(RunRecord(engine="demo"), d)
    if st is None:
        return []
    recs = demo_sweep.run_demo_sweep([st], captures=("seed",), repeats=1, num_prompts=n_prompts, prompts="train")
    return [r for r in recs if r.num_steps]


def served_vs_predicted(d: Discovery, *, draft_path: str = "", target_path: str = "", data_path: str = "",
                        served_paths=(), server_url: str = "", serving_dump: str = "", serving_layout: str = "",
                        n: int = 16, device: str = "cpu", progress: bool = True) -> ServedPrediction:
    """Every served run (from `served_paths` / `server_url`; on the demo world, its engine) beside the replay of the
    draft on `data_path` under that run's setting, in the layout the server feeds: from the serving dump, the typed
    `serving_layout`, or the launch engine's capture rules, in that order (notebook 02's evidence order)."""
    notes, problems, missing, runs = [], [], [], []
    if draft_path:
        if not data_path:
            missing.append("training samples to replay (train_data_path)")
        runs, problems = served_runs(served_paths, server_url)
        if not runs:
            missing.append("a decode log or benchmark output with accept lengths (served_log_path)")
        if missing:
            return ServedPrediction((), tuple(problems), tuple(missing))
    else:
        notes.append("demo world: the served runs are the demo engine's, under the seed launch's effective settings "
                     "with the seed's capture, on training prompts")
    ri = sample_replay.resolve_inputs(draft_path, target_path, data_path, serving_dump=serving_dump, device=device)
    if ri.demo:
        try:
            runs = demo_served(d)
        except Eagle3Error as e:
            problems.append(f"demo engine: {e}")
        if not runs:
            return ServedPrediction((), tuple(problems), (), tuple(notes))
    try:
        setup = sample_replay.load_replay_setup(ri, device=device)
        engine = d.launch.engine if d.launch is not None else ""
        served = sample_replay.serving_layout(ri, setup.num_layers, typed=serving_layout, engine=engine,
                                              engine_version=d.version if engine == "sglang" else "", device=device)
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
            out.append(compare(setup, ri.train_data, r.accept_length, st, source=r.source or r.label,
                               layout=layout, n=n, progress=progress))
        except Eagle3Error as e:
            problems.append(f"{r.label or r.source}: {e}")
    return ServedPrediction(tuple(out), tuple(problems), (), tuple(notes))
