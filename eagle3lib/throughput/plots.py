"""Throughput charts from RunRecords and cost-model results; every function returns a matplotlib ``Figure``.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state, nothing shown); plots only read data.
Each chart carries a title, axis units and a footer with the run conditions (engine, hardware, batch, tok/s scope).
Usage: ``fig = tok_s_vs_accept_length(records, fit=costmodel.fit_cost(records)); fig.savefig("x.png")``.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from . import costmodel
from ..engine_kit.records import RunRecord

TAU_LABEL = "accept length τ (tokens per verify round, bonus included)"
TOK_S_LABEL = "throughput (generated tokens/s)"


def _conditions(records) -> str:
    """Footer text: engines, hardware, batch sizes, tok/s scope of the plotted runs."""
    def uniq(vals):
        vals = sorted({str(v) for v in vals if v not in (None, "")})
        return ", ".join(vals) if vals else "?"
    recs = list(records)
    return (f"engine: {uniq(f'{r.engine} {r.engine_version}'.strip() for r in recs)} | hardware: "
            f"{uniq(r.hardware for r in recs)} | batch: {uniq(r.batch_size for r in recs)} | tok/s: "
            f"{uniq(r.tok_s_scope for r in recs)}")


def _new(title: str, records, size=(8.0, 5.0), ncols: int = 1):
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(1, ncols)
    fig.suptitle(title)
    fig.text(0.01, 0.005, _conditions(records), fontsize=7, color="0.35", ha="left", va="bottom")
    fig.get_layout_engine().set(h_pad=0.25)
    return fig, axes


def _baseline(records, baseline, fit) -> float | None:
    if baseline:
        return float(baseline)
    if fit is not None:
        return fit.baseline_tok_s
    return costmodel.baseline_tok_s(records) if any(r.is_baseline and r.tok_s for r in records) else None


def _by_series(records):
    out = {}
    for r in records:
        out.setdefault(r.series or r.engine, []).append(r)
    return out


def tok_s_vs_accept_length(records, fit: costmodel.CostFit | None = None, baseline: float | None = None,
                           title: str = "Throughput vs accept length") -> Figure:
    """Measured runs (tok/s vs tau), the baseline line, and per-K model lines with their break-even tau."""
    records = list(records)
    base = _baseline(records, baseline, fit)
    fig, ax = _new(title, records)
    spec = [r for r in records if r.num_steps and r.accept_length and r.tok_s]
    for name, group in _by_series(spec).items():
        ax.scatter([r.accept_length for r in group], [r.tok_s for r in group], label=name, zorder=3)
        for r in group:
            ax.annotate(f"K={r.num_steps}", (r.accept_length, r.tok_s), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    tau_max = max([r.accept_length for r in spec] + [2.0]) * 1.15
    if base:
        ax.axhline(base, color="black", linestyle="--", label=f"baseline {base:.1f} tok/s (no speculation)")
    if fit is not None and base:
        for k in sorted({r.num_steps for r in spec}):
            tau_star, cap = fit.break_even(k), k + 1.0  # a chain of K drafts emits at most K+1 tokens per round
            xs = [1.0 + i * (cap - 1.0) / 50 for i in range(51)]
            reach = "" if tau_star <= cap else f" (unreachable: τ ≤ {cap:.0f})"
            line = ax.plot(xs, [fit.predict_tok_s(t, k) for t in xs], linewidth=1, alpha=0.8,
                           label=f"model K={k}: break-even τ*={tau_star:.2f}{reach}")[0]
            if tau_star <= cap:
                ax.plot([tau_star], [base], marker="x", markersize=9, color=line.get_color())
            tau_max = max(tau_max, min(tau_star, cap) * 1.05)
        ax.text(0.99, 0.01, f"fit: c={fit.c:.3f}, overhead v={fit.overhead:.2f}, RMSE {fit.rmse_tok_s:.1f} tok/s",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=8)
    ax.set_xlim(1.0, tau_max)
    ax.set_ylim(0, max([r.tok_s for r in spec] + [base or 0.0, 1.0]) * 1.5)
    ax.set_xlabel(TAU_LABEL)
    ax.set_ylabel(TOK_S_LABEL)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    return fig


def speedup_vs_num_steps(records, choice: costmodel.StepsChoice | None = None, baseline: float | None = None,
                         title: str = "Speedup vs draft steps per round") -> Figure:
    """Measured speedup (tok/s over baseline) per series vs num_steps, with the model's predicted curve."""
    records = list(records)
    base = _baseline(records, baseline, None)
    fig, ax = _new(title, records)
    ax.axhline(1.0, color="black", linestyle="--", label="baseline (speedup 1)")
    if base:
        spec = [r for r in records if r.num_steps and r.tok_s]
        for name, group in _by_series(spec).items():
            group = sorted(group, key=lambda r: r.num_steps)
            ax.plot([r.num_steps for r in group], [r.tok_s / base for r in group], marker="o",
                    label=f"measured: {name}")
    if choice is not None:
        t = choice.table
        ax.plot(t["num_steps"], t["speedup"], linestyle=":", marker=".", label=f"predicted ({choice.basis})")
        ax.plot([choice.best_num_steps], [choice.best_speedup], marker="*", markersize=14, linestyle="none",
                label=f"predicted best: num_steps={choice.best_num_steps} ({choice.best_speedup:.2f}x)")
    ax.set_xlabel("num_steps K (draft tokens per round, chain)")
    ax.set_ylabel("speedup over no speculation (x)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if not base:
        ax.text(0.5, 0.5, "no baseline run: measured speedup unknown", transform=ax.transAxes, ha="center")
    return fig


def per_position_bars(records, deepest_only: bool = True, title: str = "Per-position acceptance") -> Figure:
    """Bars of unconditional a_i = P(drafts 1..i all accepted) and conditional r_i = a_i / a_(i-1), per run.

    With ``deepest_only`` each series shows only its run with the most positions."""
    records = [r for r in records if isinstance(r, RunRecord)]
    have = [r for r in records if r.per_position]
    if deepest_only:
        have = [max(g, key=lambda r: len(r.per_position)) for g in _by_series(have).values()]
    fig, (ax_u, ax_c) = _new(title, have or records, size=(11.0, 4.5), ncols=2)
    if not have:
        for ax in (ax_u, ax_c):
            ax.text(0.5, 0.5, "no per-position acceptance in these runs\n(SGLang logs do not report it; "
                    "vLLM metrics and the demo engine do)", transform=ax.transAxes, ha="center", va="center")
    width = 0.8 / max(len(have), 1)
    for j, r in enumerate(have):
        xs = [i + 1 + (j - (len(have) - 1) / 2) * width for i in range(len(r.per_position))]
        name = r.label or f"{r.series} K={r.num_steps}"
        ax_u.bar(xs, r.per_position, width=width, label=name)
        ax_c.bar(xs, costmodel.conditional_rates(r.per_position), width=width, label=name)
    ax_u.set_title("unconditional: P(first i drafts all accepted)", fontsize=10)
    n_pos = max((len(r.per_position) for r in have), default=0)
    ax_c.set_title("conditional: P(draft i accepted | drafts before it accepted)", fontsize=10)
    for ax in (ax_u, ax_c):
        ax.set_xlabel("draft position i (1 = first drafted token)")
        ax.set_ylabel("acceptance probability")
        ax.set_ylim(0, 1.05)
        ax.set_xticks(range(1, n_pos + 1))
        ax.grid(alpha=0.3, axis="y")
        if have:
            ax.legend(fontsize=7)
    return fig


def trajectory(records, baseline: float | None = None,
               title: str = "The served runs, in the order measured") -> Figure:
    """Runs in the order given as a labelled path of tok/s, each annotated with its settings and tau."""
    records = [r for r in records if r.tok_s]
    base = _baseline(records, baseline, None)
    fig, ax = _new(title, records, size=(9.0, 5.0))
    xs, ys = list(range(1, len(records) + 1)), [r.tok_s for r in records]
    ax.plot(xs, ys, color="0.6", zorder=1)
    colors = ["tab:green" if base and y >= base else "tab:red" for y in ys]
    ax.scatter(xs, ys, c=colors, s=60, zorder=3)
    for x, r in zip(xs, records):
        what = ("no speculation" if r.is_baseline else
                f"K={r.num_steps}, NDT={r.num_draft_tokens}, τ=" + (f"{r.accept_length:.2f}" if r.accept_length
                                                                   else "?"))
        ax.annotate(f"{r.label}\n{what}\n{r.tok_s:.1f} tok/s", (x, r.tok_s), textcoords="offset points",
                    xytext=(0, 10), ha="center", fontsize=7)
    if base:
        ax.axhline(base, color="black", linestyle="--", label=f"baseline {base:.1f} tok/s")
        ax.legend(fontsize=8, loc="lower left")
    ax.set_xticks(xs, [f"step {x}" for x in xs])
    ax.set_xlim(0.4, len(xs) + 0.6)
    ax.set_ylim(0, max(ys + [base or 0]) * 1.3 if ys else 1)
    ax.set_xlabel("run, in the order measured")
    ax.set_ylabel(TOK_S_LABEL)
    ax.grid(alpha=0.3, axis="y")
    return fig



def tree_vs_chain_figure(choice, measured=(), title: str = "Chain vs tree: predicted accept length and throughput") -> Figure:
    """Per setting of a treecost.TreeChoice: predicted accept length with its break-even τ*, and predicted tok/s
    (speedup when no baseline is known), chains and trees side by side; measured runs of the same settings
    (RunRecords, or a treecost.time_settings table) are drawn as black dots."""
    t = choice.table
    rows = list(measured.itertuples()) if hasattr(measured, "itertuples") else list(measured)
    measured = [r for r in rows if r.num_steps and r.tok_s and r.accept_length]
    fig, (ax_t, ax_s) = _new(title, [r for r in measured if isinstance(r, RunRecord)], size=(11.0, 4.8), ncols=2)
    xs = list(range(len(t)))
    colors = ["tab:blue" if k == "chain" else "tab:orange" for k in t.kind]
    base = float(t.tok_s[0] / t.speedup[0]) if t.tok_s.notna().all() else None
    ax_t.bar(xs, t.accept_length, color=colors)
    ax_t.scatter(xs, t.break_even, marker="_", s=300, color="black", zorder=3, label="break-even τ* (= round cost)")
    ax_s.bar(xs, t.tok_s if base else t.speedup, color=colors)
    ax_s.axhline(base or 1.0, color="black", linestyle="--",
                 label=f"no speculation {base:.1f} tok/s" if base else "no speculation (speedup 1)")
    i = next(j for j, row in enumerate(t.itertuples())
             if (row.num_steps, row.topk, row.num_draft_tokens) == tuple(choice.best))
    ax_s.scatter([i], [(t.tok_s if base else t.speedup)[i]], marker="*", s=220, color="black", zorder=4,
                 label=f"predicted best: {t.setting[i]}")
    key = {(r.num_steps, r.topk or 1, r.num_draft_tokens or r.num_steps + 1): r for r in measured}
    hits = [(j, key[s]) for j, s in enumerate(zip(t.num_steps, t.topk, t.num_draft_tokens)) if s in key]
    if hits:
        ax_t.scatter([j for j, _ in hits], [r.accept_length for _, r in hits], color="black", zorder=4,
                     label="measured accept length")
        if base:
            ax_s.scatter([j for j, _ in hits], [r.tok_s for _, r in hits], color="black", zorder=4,
                         label="measured tok/s")
    ax_t.set_ylabel(TAU_LABEL)
    ax_s.set_ylabel(f"predicted {TOK_S_LABEL}" if base else "predicted speedup over no speculation (x)")
    for ax in (ax_t, ax_s):
        ax.bar([0], [0], color="tab:blue", label="chain (topk 1)")
        ax.bar([0], [0], color="tab:orange", label="tree (topk > 1)")
        ax.set_xticks(xs, t.setting, rotation=45, ha="right", fontsize=7)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3, axis="y")
        ax.set_ylim(bottom=0)
    return fig
