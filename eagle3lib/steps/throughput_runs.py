"""Notebook 04: the served runs read from the files and server given, the cost model fitted to them
(`fit_served`), the demo engine's own sweep and its chain-vs-tree replay, and the findings the notebook records
(`headline_findings`). `run(case, earlier)` makes notebook 04's part: its tables and figures (no finding: the
throughput decides no cause, so the diagnosis does not run it, `steps.order.PARTS`).

On the demo world (no draft given) the served runs are the seed's sample log (`DEMO_LOG`) unless others are given;
with a user's draft only the files and server given are read (none: "not given"). The demo engine's sweep and
its chain-vs-tree replay (minutes on CPU) run only when asked (`run_demo_sweep`), on either."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..demo import sweep as demo_sweep_mod
from ..engine_kit import records
from ..throughput import benchparse, costmodel, plots
from ..engine_kit.log_scan import ParseResult
from ..engine_kit.records import RunRecord
from .given import resolve_path
from .case import Case, reads_once
from .part import Inputs, Part

NAME = "04 throughput"
# the columns of the run tables (the demo sweep's: the first 8 and its per-position rates and repeats)
COLUMNS = ("label", "series", "num_steps", "topk", "num_draft_tokens", "batch_size", "accept_length", "tok_s",
           "accept_rate", "accept_rate_definition", "source", "notes")
SWEEP_COLUMNS = COLUMNS[:8] + ("per_position", "repeats")
CORRECT = demo_sweep_mod.series_of("correct")     # the demo sweep's series with the training layout
DEMO_LOG = "data/samples/sglang_seed_decode.log"   # the served runs on the demo world: the seed's sample log
NOT_RUN = {"sweep": "demo sweep not run (only when asked: run_demo_sweep: true, a few minutes on CPU)",
           "tree": "chain-vs-tree replay not run (only with the demo sweep: run_demo_sweep: true)", "fit": "no fit"}
NOT_GIVEN = ("not given: no served runs (04_throughput_charts: log_paths, json_paths or server_url; "
             "the diagnosis: --served-log)")


def served_files(inputs: Inputs) -> list[str]:
    """The files of the served runs given (`served_log`, comma-separated)."""
    return [p.strip() for p in inputs.served_log.split(",") if p.strip()]


def served_inputs(inputs: Inputs) -> list[str]:
    """The served runs notebook 04 reads: those given; none given on the demo world (no draft, no server): the
    seed's sample log (`DEMO_LOG`); none given with a user's draft: none (never the demo's)."""
    given = served_files(inputs)
    return given or ([DEMO_LOG] if not inputs.draft and not inputs.server_url else [])


def read_runs(paths, server_url: str = "") -> list[ParseResult]:
    """One parse result per file (logs, /server_info dumps, bench JSON, RunRecord .jsonl), plus a live server."""
    out = [benchparse.parse_file(resolve_path(p)) for p in paths]
    return out + ([benchparse.read_server(server_url)] if server_url else [])


def demo_sweep(num_steps, repeats: int = 3, device: str = "cpu", progress=True) -> list[RunRecord]:
    """The demo engine over `num_steps` with the correct and the seed's capture, plus a baseline run."""
    return demo_sweep_mod.run_demo_sweep(list(num_steps), captures=("correct", "seed"), repeats=repeats,
                                         device=device, progress=progress)


@dataclass(frozen=True, eq=False)
class TreeVsChain:
    """The demo engine's chain and tree settings: replayed accept lengths, timed round costs, the best setting."""
    replay: object            # replay.tree_acceptance.TreeReplayResult
    timings: pd.DataFrame     # treecost.time_settings
    cost: object              # treecost.TreeCost fitted to the timings
    choice: object            # treecost.TreeChoice
    auto_tree: float          # replayed accept length of SGLang's auto-chosen (5, 4, 8)
    chain_k5: float           # ... and of the chain of the same depth

    def findings(self) -> dict:
        return {"best_setting": list(self.choice.best), "best_speedup": self.choice.best_speedup,
                "break_even_accept_length": self.choice.break_even, "auto_tree_accept_length": self.auto_tree,
                "chain_k5_accept_length": self.chain_k5}


def tree_vs_chain(n_replay: int = 8, repeats: int = 3, device: str = "cpu", settings=None,
                  progress=True) -> TreeVsChain:
    """On the demo world: SGLang's trees and the chains, replayed from every held-out position and timed on the
    demo engine (per-round draft and verify cost, CPU clock on CPU), then the best setting by the tree cost model."""
    from ..replay.run import load_setup
    from ..replay.tree_acceptance import replay_tree
    from ..sglang_engine.emulator import SpecEngine
    from ..throughput import treecost

    grid = settings or treecost.DEFAULT_GRID
    w = demo_sweep_mod.load_demo(device)
    setup = load_setup(w.paths.draft, w.paths.target, device=device)
    rep = replay_tree(setup, w.paths.heldout_data, grid, n=n_replay, progress=progress)
    engine = SpecEngine(w.target, w.draft, demo_sweep_mod.demo_capture("correct", w))
    timings = treecost.time_settings(engine, demo_sweep_mod.demo_prompts("heldout", 6, w), grid, repeats=repeats,
                                     clock="cpu" if device == "cpu" else "wall")
    cost = treecost.fit_step_costs(timings)
    return TreeVsChain(rep, timings, cost, treecost.choose_setting(cost, rep), rep.accept_length(5, 4, 8),
                       rep.accept_length(5, 1, 6))


@dataclass(frozen=True, eq=False)
class ServedFit:
    """The served runs' cost model: the baseline they are measured against, the fit or why there is none."""
    baseline: float | None       # the given tok/s without speculation (None: the records' own baseline run)
    problem: str | None          # why the cost model cannot be fitted (costmodel.fit_problem), else None
    rec: object | None           # costmodel.Recommendation, None with a problem
    notes: tuple[str, ...]       # the problem or the fit's notes, then the records' unit problems


def fit_served(served, baseline_tok_s: float = 0.0) -> ServedFit:
    """The cost model fitted to the served runs; `baseline_tok_s` 0 means the records' own baseline run."""
    base = baseline_tok_s or None
    problem = costmodel.fit_problem(served, baseline=base)
    rec = None if problem else costmodel.recommend(served, baseline=base)
    notes = ([problem] if problem else list(rec.fit.notes)) + records.unit_problems(served)
    return ServedFit(base, problem, rec, tuple(notes))


def headline_findings(fit: ServedFit, sweep_recs: dict, correct: str, tvc: TreeVsChain | None) -> dict:
    """Notebook 04's findings: the headline, the cost model it came from (the served runs when they could be
    fitted, else the demo engine's `correct` capture) and the chain-vs-tree choice when it ran."""
    chosen = fit.rec or sweep_recs.get(correct)
    if chosen is None:
        head = fit.problem if fit.problem == NOT_GIVEN else f"no cost-model fit: {fit.problem}"
    else:
        head = chosen.headline if chosen is fit.rec else f"the demo engine's sweep: {chosen.headline}"
    out = {"headline": head}
    if tvc is not None:
        out["tree_vs_chain"] = tvc.findings()
    if chosen:
        out["cost_model"] = {"c": chosen.fit.c, "overhead": chosen.fit.overhead,
                             "baseline_tok_s": chosen.fit.baseline_tok_s, "rmse_tok_s": chosen.fit.rmse_tok_s,
                             "best_num_steps": chosen.choice.best_num_steps,
                             "break_even_accept_length": chosen.choice.break_even,
                             "from": "served runs" if chosen is fit.rec else "demo sweep"}
    return out


@reads_once
def run(case: Case, earlier=None) -> Part:
    """Notebook 04's part: the served runs (`served_inputs`, `server_url`) and their cost-model fit, the demo sweep
    (`run_demo_sweep`, `sweep_num_steps`, `sweep_repeats`) and the chain-vs-tree replay (`tree_replay_samples`, 0:
    skipped) as tables and figures (a sentence where one was not run); `results` holds what they were made from
    (parsed, served, fit, sweep, sweep_recs, tvc) and `headline` (what the notebook records). No finding."""
    inputs = case.given
    parsed = read_runs(served_inputs(inputs), inputs.server_url)
    served = [r for res in parsed for r in res.records]
    fit = fit_served(served, inputs.baseline_tok_s) if parsed else ServedFit(None, NOT_GIVEN, None, (NOT_GIVEN,))
    rec = fit.rec
    sweep = (demo_sweep(list(inputs.sweep_num_steps), repeats=inputs.sweep_repeats, device=inputs.device)
             if inputs.run_demo_sweep else [])
    series = sorted({r.series for r in sweep if not r.is_baseline})
    sweep_recs = {s: costmodel.recommend(sweep, series=s) for s in series} if sweep else {}
    tvc = (tree_vs_chain(inputs.tree_replay_samples, inputs.sweep_repeats, inputs.device)
           if inputs.run_demo_sweep and inputs.tree_replay_samples > 0 else None)
    tables = {"served runs": records.to_dataframe(served)[list(COLUMNS)] if parsed else NOT_GIVEN,
              "served fit": rec.fit.table if rec else NOT_RUN["fit"],
              "best num_steps": rec.choice.table if rec else NOT_RUN["fit"],
              "demo sweep": records.to_dataframe(sweep)[list(SWEEP_COLUMNS)] if sweep else NOT_RUN["sweep"],
              "demo fit": sweep_recs[CORRECT].fit.table if CORRECT in sweep_recs else NOT_RUN["sweep"],
              "chain vs tree": tvc.replay.table if tvc is not None else NOT_RUN["tree"]}
    figures = {
        "trajectory": plots.trajectory(served, baseline=fit.baseline) if parsed else NOT_GIVEN,
        "served tok/s vs accept length": plots.tok_s_vs_accept_length(
            served, fit=rec.fit if rec else None, baseline=fit.baseline,
            title="Served runs: throughput vs accept length") if parsed else NOT_GIVEN,
        "served speedup vs num_steps": plots.speedup_vs_num_steps(
            served, choice=rec.choice if rec else None, baseline=fit.baseline,
            title="Served runs: speedup vs num_steps, measured and predicted") if parsed else NOT_GIVEN,
        "demo tok/s vs accept length": (plots.tok_s_vs_accept_length(
            sweep, fit=sweep_recs[CORRECT].fit, title="Demo engine: throughput vs accept length")
            if CORRECT in sweep_recs else NOT_RUN["sweep"]),
        "demo speedup vs num_steps": (plots.speedup_vs_num_steps(
            sweep, choice=sweep_recs[series[0]].choice,
            title=f"Demo engine: speedup vs num_steps (prediction for '{series[0]}')")
            if sweep_recs else NOT_RUN["sweep"]),
        "per-position acceptance": (plots.per_position_bars(served + sweep)     # per series, the deepest run
                                    if served or sweep else NOT_GIVEN),
        "chain vs tree": (plots.tree_vs_chain_figure(tvc.choice, measured=tvc.timings) if tvc is not None
                          else NOT_RUN["tree"])}
    return Part(NAME, [], tables, figures, notes=fit.notes, results={
        "parsed": parsed, "served": served, "fit": fit, "sweep": sweep, "sweep_recs": sweep_recs, "tvc": tvc,
        "headline": headline_findings(fit, sweep_recs, CORRECT, tvc)})
