"""Throughput cost model of chain speculative decoding, fitted to measured runs.

tau(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha) (Leviathan et al. 2023), or 1 + sum(a_i) from per-position rates.
A round costs 1 + v + K*c target steps: speedup = tau / (1 + v + K*c), break-even tau* = 1 + v + K*c; c = cost of
a draft step (and one more verified token) relative to a target step, v = per-round overhead.
Runs with topk > 1 (trees) are left out of these fits (treecost.py models them).
Usage: ``fit = fit_cost(records); best_num_steps(fit.c, fit.overhead, alpha=0.7).best_num_steps``.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import DataError
from ..engine_kit.records import RunRecord


def tau_from_alpha(alpha: float, k: int) -> float:
    """Expected tokens per round with K drafts at i.i.d. acceptance alpha (bonus token included)."""
    if not 0.0 <= alpha <= 1.0:
        raise DataError("tau_from_alpha", "alpha outside [0, 1]", expected="a probability", found=alpha)
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def tau_from_positions(per_position, conditional: bool = False) -> float:
    """tau = 1 + sum of unconditional per-position rates a_i (conditional r_i are multiplied up first)."""
    rates = [float(x) for x in per_position]
    if conditional:
        rates = list(np.cumprod(rates)) if rates else []
    return 1.0 + float(sum(rates))


def conditional_rates(per_position) -> tuple[float, ...]:
    """r_i = a_i / a_(i-1): acceptance at position i given every earlier draft was accepted (nan after a 0)."""
    out, prev = [], 1.0
    for a in per_position:
        out.append(float(a) / prev if prev > 0 else float("nan"))
        prev = float(a)
    return tuple(out)


def alpha_from_tau(tau: float, k: int) -> float:
    """The i.i.d. alpha whose chain of K drafts gives this tau (bisection; clipped to [0, 1])."""
    if k < 1:
        raise DataError("alpha_from_tau", "needs at least one draft step", expected="K >= 1", found=k)
    if tau <= 1.0:
        return 0.0
    if tau >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # tau is increasing in alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tau_from_alpha(mid, k) < tau else (lo, mid)
    return (lo + hi) / 2


def step_cost(k: int, c: float, overhead: float = 0.0) -> float:
    """Cost of one speculative round in target decode steps: 1 + v + K*c."""
    return 1.0 + overhead + k * c


def speedup(tau: float, k: int, c: float, overhead: float = 0.0) -> float:
    """Predicted throughput relative to no speculation: tau / (1 + v + K*c)."""
    return tau / step_cost(k, c, overhead)


def break_even_accept_length(k: int, c: float, overhead: float = 0.0) -> float:
    """Accept length at which K draft steps per round exactly match the baseline: 1 + v + K*c."""
    return step_cost(k, c, overhead)


def baseline_tok_s(records) -> float:
    """Median tok/s of the baseline (num_steps == 0) records; DataError when there is none."""
    vals = [r.tok_s for r in records if r.is_baseline and r.tok_s]
    if not vals:
        raise DataError("baseline tok/s", "no baseline run among the records",
                        expected="a record with num_steps == 0 and tok_s, or an explicit baseline_tok_s",
                        found=f"{len(list(records))} records", cause="the run without speculation was not "
                        "measured or not loaded")
    return float(statistics.median(vals))


def _spec(records) -> list[RunRecord]:
    """Measured chain runs (topk 1 or unknown); trees (topk > 1) follow treecost's model, not this one."""
    return [r for r in records if r.num_steps and r.accept_length and r.tok_s and (r.topk or 1) == 1]


@dataclass(frozen=True)
class CostFit:
    """Fitted cost model: c, overhead v, the baseline it is relative to, and per-record errors."""

    c: float
    overhead: float
    baseline_tok_s: float
    table: pd.DataFrame            # per record: label, num_steps, accept_length, tok_s, predicted_tok_s, rel_error
    rmse_tok_s: float
    max_rel_error: float
    notes: tuple[str, ...] = ()

    def predict_tok_s(self, tau: float, k: int) -> float:
        """Predicted tok/s for accept length tau at K draft steps."""
        return self.baseline_tok_s * speedup(tau, k, self.c, self.overhead)

    def break_even(self, k: int) -> float:
        """Break-even accept length at K draft steps under this fit."""
        return break_even_accept_length(k, self.c, self.overhead)


def _nonneg_lstsq(k: np.ndarray, y: np.ndarray, fit_overhead: bool) -> tuple[float, float]:
    """Least squares y = v + c*k with c, v >= 0 (two unknowns: try the interior, then each boundary)."""
    cands = []
    if fit_overhead:
        A = np.stack([np.ones_like(k), k], axis=1)  # (N, 2): columns [1, K]
        v, c = np.linalg.lstsq(A, y, rcond=None)[0]
        if v >= 0 and c >= 0:
            cands.append((float(c), float(v)))
    if fit_overhead:
        cands.append((0.0, max(float(y.mean()), 0.0)))  # c = 0
    cands.append((max(float((k @ y) / (k @ k)), 0.0), 0.0))  # v = 0
    return min(cands, key=lambda cv: float(((cv[1] + cv[0] * k - y) ** 2).sum()))


def fit_cost(records, baseline: float | None = None, fit_overhead: bool = True) -> CostFit:
    """Fit c (and overhead v) by least squares on the per-round cost tau*baseline/tok_s = 1 + v + K*c."""
    records = list(records)
    base = float(baseline) if baseline else baseline_tok_s(records)
    spec = _spec(records)
    if not spec:
        raise DataError("fit_cost", "no speculative run with accept length and tok/s",
                        expected="records with num_steps >= 1, accept_length and tok_s", found=f"{len(records)} "
                        "records", cause="only baseline runs, or logs without accept len")
    notes = []
    ks = np.array([float(r.num_steps) for r in spec])
    y = np.array([r.accept_length * base / r.tok_s - 1.0 for r in spec])  # measured (T_step / T_AR) - 1
    if fit_overhead and len(set(ks.tolist())) < 2:
        notes.append(f"all runs use num_steps={int(ks[0])}: c and the overhead cannot be separated; overhead "
                     "fixed at 0")
        fit_overhead = False
    c, v = _nonneg_lstsq(ks, y, fit_overhead)
    pred = [base * speedup(r.accept_length, r.num_steps, c, v) for r in spec]
    table = pd.DataFrame({
        "label": [r.label for r in spec], "series": [r.series for r in spec],
        "num_steps": [r.num_steps for r in spec], "accept_length": [r.accept_length for r in spec],
        "tok_s": [r.tok_s for r in spec], "predicted_tok_s": pred,
        "break_even": [break_even_accept_length(r.num_steps, c, v) for r in spec]})
    table["rel_error"] = (table["predicted_tok_s"] - table["tok_s"]) / table["tok_s"]
    rmse = float(np.sqrt(((table["predicted_tok_s"] - table["tok_s"]) ** 2).mean()))
    if len(spec) <= (2 if fit_overhead else 1):
        notes.append(f"{len(spec)} speculative runs for {2 if fit_overhead else 1} parameters: the fit is exact "
                     "by construction, its error says nothing")
    return CostFit(c=c, overhead=v, baseline_tok_s=base, table=table, rmse_tok_s=rmse,
                   max_rel_error=float(table["rel_error"].abs().max()), notes=tuple(notes))


def fit_alpha(records) -> float:
    """One i.i.d. alpha that best explains the records' (num_steps, accept_length) pairs (least squares on tau)."""
    pts = [(r.num_steps, r.accept_length) for r in records if r.num_steps and r.accept_length]
    if not pts:
        raise DataError("fit_alpha", "no speculative run with an accept length", expected="num_steps >= 1 and "
                        "accept_length", found=f"{len(list(records))} records")
    grid = np.linspace(0.0, 1.0, 2001)
    err = [sum((tau_from_alpha(a, k) - t) ** 2 for k, t in pts) for a in grid]
    return float(grid[int(np.argmin(err))])


def pooled_per_position(records) -> tuple[float, ...] | None:
    """Unconditional per-position rates pooled over records (weighted by rounds; a_i does not depend on K)."""
    have = [r for r in records if r.per_position]
    if not have:
        return None
    out = []
    for i in range(max(len(r.per_position) for r in have)):
        pairs = [(r.per_position[i], r.rounds or 1) for r in have if len(r.per_position) > i]
        out.append(sum(a * w for a, w in pairs) / sum(w for _, w in pairs))
    return tuple(out)


@dataclass(frozen=True)
class StepsChoice:
    """Predicted best num_steps and the whole curve it was chosen from."""

    best_num_steps: int
    best_speedup: float
    break_even: float                # accept length needed at best_num_steps to beat the baseline
    table: pd.DataFrame              # num_steps, accept_length (predicted), speedup, break_even
    basis: str                       # "alpha=0.62" or "per-position rates (4 positions)"


def best_num_steps(c: float, overhead: float = 0.0, alpha: float | None = None, per_position=None,
                   max_steps: int = 16) -> StepsChoice:
    """The K maximising tau(K) / (1 + v + K*c), tau from measured per-position rates or from alpha."""
    if per_position:
        rates = list(per_position)[:max_steps]
        taus = [tau_from_positions(rates[:k]) for k in range(1, len(rates) + 1)]
        basis = f"per-position rates ({len(rates)} positions; deeper K not predicted)"
    elif alpha is not None:
        taus = [tau_from_alpha(alpha, k) for k in range(1, max_steps + 1)]
        basis = f"alpha={alpha:.3f} (i.i.d. chain)"
    else:
        raise DataError("best_num_steps", "needs acceptance to predict from", expected="alpha or per_position",
                        found="neither")
    ks = list(range(1, len(taus) + 1))
    table = pd.DataFrame({"num_steps": ks, "accept_length": taus,
                          "speedup": [speedup(t, k, c, overhead) for t, k in zip(taus, ks)],
                          "break_even": [break_even_accept_length(k, c, overhead) for k in ks]})
    best = int(table["speedup"].idxmax())
    return StepsChoice(best_num_steps=ks[best], best_speedup=float(table["speedup"][best]),
                       break_even=float(table["break_even"][best]), table=table, basis=basis)


@dataclass(frozen=True)
class Recommendation:
    """Cost-model fit plus the predicted best setting and the one-line headline."""

    fit: CostFit
    choice: StepsChoice
    alpha: float | None
    headline: str


def fit_problem(records, baseline: float | None = None) -> str | None:
    """Why ``fit_cost`` cannot run on these records (no baseline, no speculative run), or None when it can."""
    records = list(records)
    if not baseline and not any(r.is_baseline and r.tok_s for r in records):
        return "no baseline run (num_steps == 0) and no baseline tok/s given"
    if not _spec(records):
        return "no speculative run with num_steps, accept length and tok/s"
    return None


def recommend(records, baseline: float | None = None, series: str | None = None,
              max_steps: int = 16) -> Recommendation:
    """Fit the cost on all `records`, take acceptance from `series` (all when None), predict the best num_steps."""
    records = list(records)
    fit = fit_cost(records, baseline=baseline)
    own = [r for r in _spec(records) if series is None or r.series == series]
    if not own:
        raise DataError(f"recommend(series={series!r})", "no speculative run in this series",
                        expected=sorted({r.series for r in _spec(records)}), found=series)
    pos = pooled_per_position(own)
    alpha = None if pos else fit_alpha(own)
    choice = best_num_steps(fit.c, fit.overhead, alpha=alpha, per_position=pos, max_steps=max_steps)
    headline = (f"needs accept length ≥ {choice.break_even:.2f} to beat baseline; "
                f"best num_steps = {choice.best_num_steps}")
    return Recommendation(fit=fit, choice=choice, alpha=alpha, headline=headline)
