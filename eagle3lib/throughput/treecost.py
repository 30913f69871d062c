"""Throughput cost model of tree speculative decoding: (num_steps, topk, num_draft_tokens) -> round cost, speedup.

A round costs, in target decode steps (serving-and-throughput.md D.2, batch 1):
    R = 1 + v + w*(ndt - 1) + c*steps*(1 + r*(topk - 1))
w = one more verified token (0 when the verify forward is memory-bound, as on a GPU at small batch; CPU pays
nearly a full step per token), c = one draft step of one row, r = each extra beam row of a draft step relative to
the first, v = per-round overhead (extend, tree build). A chain (topk 1, ndt = steps + 1) costs 1 + v + (c + w)*K:
costmodel's c is c + w here. speedup = tau / R and the break-even accept length is tau* = R.
The coefficients come from measured runs (`fit_tree_cost`: tok/s and tau of chain and tree runs), from measured
step costs (`time_settings` on the offline engine, then `fit_step_costs`: its draft / verify timers per round), or
are given (a modelled `TreeCost(c=..., w=0.0)` for a memory-bound GPU verify).
Usage: ``cost = fit_step_costs(time_settings(engine, prompts, DEFAULT_GRID)); choose_setting(cost, replay_tree(...))``.
"""
from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DataError
from ..progress import bar

# A small grid: chains K = 1..6 and SGLang-like trees (the Llama auto choice (5, 4, 8) among them).
DEFAULT_GRID = tuple([(k, 1, k + 1) for k in range(1, 7)] +
                     [(3, 2, 6), (3, 4, 8), (5, 2, 8), (5, 4, 8), (5, 4, 16), (6, 4, 16)])


def setting_label(steps: int, topk: int, ndt: int) -> str:
    return f"chain K={steps}" if topk == 1 and ndt == steps + 1 else f"tree ({steps}, {topk}, {ndt})"


@dataclass(frozen=True)
class TreeCost:
    """Per-round cost coefficients in target decode steps (see the module docstring), and their provenance."""

    c: float                        # one draft step (one row)
    w: float = 0.0                  # one more verified token
    r: float = 0.0                  # each extra beam row of a draft step, relative to c
    overhead: float = 0.0           # v, per round
    baseline_tok_s: float | None = None
    basis: str = "given"            # "given" (modelled) or how it was fitted
    notes: tuple[str, ...] = ()

    def round_cost(self, steps: int, topk: int, ndt: int) -> float:
        """Cost of one round in target decode steps; also the break-even accept length of the setting."""
        return 1.0 + self.overhead + self.w * (ndt - 1) + self.c * steps * (1.0 + self.r * (topk - 1))

    def speedup(self, tau: float, steps: int, topk: int, ndt: int) -> float:
        return tau / self.round_cost(steps, topk, ndt)

    def tok_s(self, tau: float, steps: int, topk: int, ndt: int) -> float | None:
        return None if self.baseline_tok_s is None else self.baseline_tok_s * self.speedup(tau, steps, topk, ndt)


def _nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (few unknowns: the best feasible fit over active sets)."""
    best, best_err = np.zeros(A.shape[1]), float(((A @ np.zeros(A.shape[1]) - y) ** 2).sum())
    for n in range(1, A.shape[1] + 1):
        for cols in itertools.combinations(range(A.shape[1]), n):
            x = np.zeros(A.shape[1])
            x[list(cols)] = np.linalg.lstsq(A[:, cols], y, rcond=None)[0]
            err = float(((A @ x - y) ** 2).sum())
            if (x >= -1e-12).all() and err < best_err - 1e-15:
                best, best_err = np.clip(x, 0, None), err
    return best


def fit_tree_cost(records, baseline: float | None = None, w: float | None = None, r: float | None = None,
                  fit_overhead: bool = True) -> TreeCost:
    """Fit c, w, r, v >= 0 to measured runs: tau * baseline / tok_s = R(steps, topk, ndt) (least squares).

    Chains alone cannot separate c from w (ndt - 1 = steps): give trees, or fix `w` (and `r`) by hand.
    """
    records = list(records)
    base = float(baseline) if baseline else None
    if base is None:
        vals = [x.tok_s for x in records if x.is_baseline and x.tok_s]
        if not vals:
            raise DataError("fit_tree_cost", "no baseline run among the records", expected="a record with "
                            "num_steps == 0 and tok_s, or baseline=", found=f"{len(records)} records")
        base = float(statistics.median(vals))
    spec = [x for x in records if x.num_steps and x.accept_length and x.tok_s]
    if not spec:
        raise DataError("fit_tree_cost", "no speculative run with accept length and tok/s",
                        expected="records with num_steps >= 1, accept_length and tok_s",
                        found=f"{len(records)} records")
    rows = []
    for x in spec:
        topk, ndt = x.topk or 1, x.num_draft_tokens or x.num_steps + 1
        rows.append((x.num_steps, topk, ndt, x.accept_length * base / x.tok_s - 1.0))
    S, K, N, y = (np.array(col, dtype=float) for col in zip(*rows))
    notes = []
    if w is None and np.allclose(N - 1, S):
        notes.append("only chains measured: w (verify width) cannot be told from c; w fixed at 0")
        w = 0.0
    if r is None and np.allclose(K, 1):
        notes.append("no tree measured: r (extra beam rows) fixed at 0")
        r = 0.0
    cols = {"v": np.ones_like(S)} if fit_overhead else {}
    if w is None:
        cols["w"] = N - 1                                   # (N,) per record
    cols["c"] = S if r is None else S * (1.0 + r * (K - 1))
    if r is None:
        cols["cr"] = S * (K - 1)                            # c*r, the extra beam rows
    y_fit = y - (w or 0.0) * (N - 1)
    theta = dict(zip(cols, _nnls(np.stack(list(cols.values()), axis=1), y_fit)))   # (N, p) design matrix
    c = theta["c"]
    if len(spec) <= len(cols):
        notes.append(f"{len(spec)} runs for {len(cols)} coefficients: the fit is exact by construction")
    return TreeCost(c=c, w=theta.get("w", w), r=(theta["cr"] / c if c > 0 else 0.0) if r is None else r,
                    overhead=theta.get("v", 0.0), baseline_tok_s=base,
                    basis=f"least squares on {len(spec)} runs", notes=tuple(notes))


@dataclass(frozen=True)
class TreeChoice:
    """Predicted throughput of every setting, and the best one."""

    best: tuple[int, int, int]
    best_speedup: float
    best_tok_s: float | None
    break_even: float               # accept length the best setting needs to beat no speculation
    table: pd.DataFrame             # setting, num_steps, topk, num_draft_tokens, kind, accept_length, round_cost, ...
    headline: str


def accept_lengths(source) -> dict[tuple[int, int, int], float]:
    """{(steps, topk, ndt): tau} from a TreeReplayResult (its table), a DataFrame with those columns, or a dict."""
    table = getattr(source, "table", source)
    if isinstance(table, pd.DataFrame):
        return {(int(a), int(b), int(c)): float(t) for a, b, c, t in
                zip(table.num_steps, table.topk, table.num_draft_tokens, table.accept_length)}
    return {tuple(int(x) for x in k): float(v) for k, v in dict(table).items()}


def choose_setting(cost: TreeCost, accept, settings=None) -> TreeChoice:
    """Speedup and tok/s of each setting with a known accept length (`accept`: replay result, table or dict)."""
    taus = accept_lengths(accept)
    want = [tuple(s) for s in settings] if settings is not None else sorted(taus)
    missing = [s for s in want if s not in taus]
    if missing or not want:
        raise DataError("choose_setting", "no accept length for some settings", expected=sorted(taus),
                        found=missing or "no settings", cause="replay those settings (replay.tree_acceptance.replay_tree)")
    rows = []
    for s in want:
        cost_r = cost.round_cost(*s)
        rows.append({"setting": setting_label(*s), "num_steps": s[0], "topk": s[1], "num_draft_tokens": s[2],
                     "kind": "chain" if s[1] == 1 else "tree", "accept_length": taus[s], "round_cost": cost_r,
                     "break_even": cost_r, "speedup": taus[s] / cost_r,
                     "tok_s": cost.tok_s(taus[s], *s)})
    table = pd.DataFrame(rows)
    i = int(table.speedup.idxmax())
    best = tuple(int(x) for x in table.loc[i, ["num_steps", "topk", "num_draft_tokens"]])
    chains = table[table.kind == "chain"]
    ch = chains.loc[chains.speedup.idxmax()] if len(chains) else None
    headline = (f"best {table.setting[i]}: speedup {table.speedup[i]:.2f}x (needs accept length ≥ "
                f"{table.break_even[i]:.2f})" + (f"; best chain {ch.setting}: {ch.speedup:.2f}x" if ch is not None
                                                 and ch.setting != table.setting[i] else ""))
    return TreeChoice(best=best, best_speedup=float(table.speedup[i]),
                      best_tok_s=None if table.tok_s[i] is None else float(table.tok_s[i]),
                      break_even=float(table.break_even[i]), table=table, headline=headline)


def time_settings(engine, prompts, settings, max_new_tokens: int = 48, repeats: int = 3, clock: str = "wall",
                  progress: bool = False) -> pd.DataFrame:
    """Per-round seconds of each setting on an offline `SpecEngine` (its draft / verify timers), plus a baseline.

    Returns one row per setting (num_steps 0 = the baseline): accept_length, tok_s, and medians over `repeats`
    passes of seconds per round spent drafting (beam steps + extend), verifying, and the rest; `step_s` is the
    baseline's seconds per decode step. Passes are interleaved across settings. clock="cpu" times with this
    thread's CPU time on one torch thread (as run_demo_sweep), which other jobs on the machine inflate far less.
    """
    import time

    import torch

    if clock not in ("wall", "cpu"):
        raise DataError(f"time_settings(clock={clock!r})", "unknown clock", expected=("wall", "cpu"), found=clock)
    old = engine.clock, torch.get_num_threads()
    if clock == "cpu":
        engine.clock = time.thread_time
        torch.set_num_threads(1)
    try:
        return _time(engine, prompts, settings, max_new_tokens, repeats, progress)
    finally:
        engine.clock = old[0]
        torch.set_num_threads(old[1])


def _time(engine, prompts, settings, max_new_tokens, repeats, progress) -> pd.DataFrame:
    from ..sglang_engine.emulator_settings import SpecSettings

    plan = [SpecSettings.baseline()] + [SpecSettings(*s) for s in settings]
    runs = [[] for _ in plan]
    with bar(total=repeats * len(plan), desc="time settings", progress=progress, unit="run") as meter:
        for rep in range(repeats + 1):                           # pass 0 warms up, untimed
            for i, st in enumerate(plan):
                res = [engine.generate(p, max_new_tokens, st) for p in prompts]
                if rep:
                    runs[i].append(res)
                    meter.update(1)
    rows = []
    for st, passes in zip(plan, runs):
        def med(f):
            return statistics.median(f(res) for res in passes)
        tokens = sum(len(r.output_ids) - 1 for r in passes[0])          # emitted after the prefill's token
        rounds = sum(r.rounds for r in passes[0]) or tokens             # a baseline round is one decode step
        eff = passes[0][0].effective
        tau = sum(sum(r.accept_lengths) for r in passes[0]) / rounds if eff.speculative else 1.0   # as SGLang
        rows.append({"num_steps": eff.num_steps, "topk": eff.topk or 0, "num_draft_tokens": eff.num_draft_tokens or 1,
                     "rounds": rounds, "accept_length": tau,
                     "tok_s": med(lambda res: tokens / sum(r.decode_s for r in res)),
                     "draft_s": med(lambda res: sum(r.draft_s for r in res)) / rounds,
                     "verify_s": med(lambda res: sum(r.verify_s for r in res)) / rounds,
                     "round_s": med(lambda res: sum(r.decode_s for r in res)) / rounds})
    out = pd.DataFrame(rows)
    out["other_s"] = out.round_s - out.draft_s - out.verify_s
    out["step_s"] = float(out.round_s[0])
    return out


def fit_step_costs(timings: pd.DataFrame) -> TreeCost:
    """TreeCost from measured per-round seconds (`time_settings`): verify/step = a + w*(ndt-1), draft/step =
    b + c*steps*(1 + r*(topk-1)), v = (a - 1) + b + other/step; least squares, coefficients >= 0."""
    base = timings[timings.num_steps == 0]
    spec = timings[timings.num_steps > 0]
    if base.empty or spec.empty:
        raise DataError("fit_step_costs", "needs a baseline row and speculative rows", expected="time_settings() "
                        "output", found=f"{len(base)} baseline, {len(spec)} speculative rows")
    step = float(base.round_s.iloc[0])
    S, K, N = (spec[c].to_numpy(dtype=float) for c in ("num_steps", "topk", "num_draft_tokens"))
    a, w = _nnls(np.stack([np.ones_like(N), N - 1], axis=1), spec.verify_s.to_numpy() / step)   # (n, 2)
    b, c, cr = _nnls(np.stack([np.ones_like(S), S, S * (K - 1)], axis=1), spec.draft_s.to_numpy() / step)
    other = float(np.median(spec.other_s.to_numpy() / step))
    notes = () if len(set(N.tolist())) > 1 else ("one verify width only: w is not measured",)
    return TreeCost(c=c, w=w, r=cr / c if c > 0 else 0.0, overhead=max(a - 1.0, 0.0) + b + other,
                    baseline_tok_s=float(base.tok_s.iloc[0]), basis=f"step timings of {len(spec)} settings",
                    notes=notes)
