"""Tests for eagle3lib.throughput.plots: each chart is a Figure with the expected artists, labels and annotations."""
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from eagle3lib.throughput import costmodel as cm
from eagle3lib.throughput import plots
from eagle3lib.engine_kit.records import RunRecord, read_jsonl

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


@pytest.fixture(scope="module")
def seed():
    return read_jsonl(SAMPLES / "seed_runs.jsonl")


@pytest.fixture(scope="module")
def sweep():
    recs = [RunRecord(engine="demo", tok_s=20.0, num_steps=0, series="baseline", hardware="cpu", batch_size=1)]
    for series, a in (("correct capture", [0.8, 0.6, 0.45, 0.3]), ("seed capture", [0.2, 0.05, 0.01, 0.0])):
        for k in (1, 2, 4):
            tau = cm.tau_from_positions(a[:k])
            recs.append(RunRecord(engine="demo", tok_s=20.0 * tau / (1 + 0.1 * k), accept_length=tau, num_steps=k,
                                  topk=1, num_draft_tokens=k + 1, per_position=a[:k], series=series,
                                  label=f"{series} K={k}", hardware="cpu", batch_size=1))
    return recs


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [t.get_text() for t in fig.texts]


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_tok_s_vs_accept_length_has_points_baseline_and_break_even(sweep):
    """Scatter per series, a dashed baseline at 20 tok/s, one model line per K with its break-even in the legend."""
    fit = cm.fit_cost(sweep)
    fig = plots.tok_s_vs_accept_length(sweep, fit=fit)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.collections) == 2  # two series
    assert "accept length" in ax.get_xlabel() and "tokens/s" in ax.get_ylabel()
    legend = _legend(ax)
    assert any(t.startswith("baseline 20.0") for t in legend)
    assert sum(t.startswith("model K=") for t in legend) == 3
    assert any(f"τ*={fit.break_even(4):.2f}" in t for t in legend)
    assert any(ln.get_linestyle() == "--" and list(ln.get_ydata()) == [20.0, 20.0] for ln in ax.lines)
    assert any("engine: demo" in t and "hardware: cpu" in t for t in _texts(fig))
    assert fig._suptitle.get_text() == "Throughput vs accept length"


def test_speedup_vs_num_steps_measured_and_predicted(sweep):
    """Measured curves per series plus the predicted curve and its best point."""
    choice = cm.best_num_steps(0.1, per_position=[0.8, 0.6, 0.45, 0.3])
    fig = plots.speedup_vs_num_steps(sweep, choice=choice)
    ax = fig.axes[0]
    legend = _legend(ax)
    assert "measured: correct capture" in legend and "measured: seed capture" in legend
    assert any(t.startswith("predicted best: num_steps=") for t in legend)
    measured = [ln for ln in ax.lines if ln.get_label() == "measured: correct capture"][0]
    assert list(measured.get_xdata()) == [1, 2, 4]
    assert measured.get_ydata()[0] == pytest.approx(1.8 / 1.1)
    assert "num_steps" in ax.get_xlabel() and "speedup" in ax.get_ylabel()


def test_per_position_bars_two_panels(sweep):
    """Unconditional and conditional panels with one bar per (run, position)."""
    recs = [r for r in sweep if r.num_steps == 4]
    fig = plots.per_position_bars(recs)
    ax_u, ax_c = fig.axes
    assert len(ax_u.patches) == 8 and len(ax_c.patches) == 8
    assert [p.get_height() for p in ax_u.patches[:4]] == pytest.approx([0.8, 0.6, 0.45, 0.3])
    assert ax_c.patches[1].get_height() == pytest.approx(0.6 / 0.8)
    assert "draft position" in ax_u.get_xlabel()
    deepest = plots.per_position_bars(sweep)  # every K of both series given: only K=4 of each is drawn
    assert len(deepest.axes[0].patches) == 8
    assert len(plots.per_position_bars(sweep, deepest_only=False).axes[0].patches) == 2 * (1 + 2 + 4)


def test_per_position_bars_without_data_says_so(seed):
    """Runs without per-position rates give a Figure with a plain message instead of an error."""
    fig = plots.per_position_bars(seed)
    assert isinstance(fig, Figure)
    assert any("no per-position acceptance" in t for t in _texts(fig))


def test_trajectory_of_the_seed_runs(seed):
    """Four labelled points in order, tau shown where known, the baseline line at 90 tok/s."""
    fig = plots.trajectory(seed)
    ax = fig.axes[0]
    notes = [t.get_text() for t in ax.texts]
    assert len(notes) == 4
    assert notes[0].startswith("baseline") and "no speculation" in notes[0]
    assert "K=1, NDT=2, τ=1.60" in notes[1] and "τ=?" in notes[3] and "54.8 tok/s" in notes[3]
    assert _legend(ax) == ["baseline 90.0 tok/s"]
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["step 1", "step 2", "step 3", "step 4"]
    assert fig._suptitle.get_text() == "The served runs, in the order measured"   # no story of the seed's


def test_charts_accept_the_seed_records(seed):
    """tok/s-vs-tau and speedup charts work on the seed runs (one with unknown tau)."""
    fig = plots.tok_s_vs_accept_length(seed)
    assert len(fig.axes[0].collections) == 1
    fig = plots.speedup_vs_num_steps(seed)
    assert len(fig.axes[0].lines) == 2  # baseline line + the seed series
