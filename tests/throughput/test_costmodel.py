"""Tests for eagle3lib.throughput.costmodel: tau formulas, speedup and break-even, the fit, best num_steps."""
import random

import pytest

from eagle3lib.throughput import costmodel as cm
from eagle3lib.errors import DataError
from eagle3lib.engine_kit.records import RunRecord


@pytest.mark.parametrize("alpha, k, tau", [(0.5, 1, 1.50), (0.6, 3, 2.18), (0.8, 3, 2.95), (0.9, 7, 5.70),
                                           (0.7, 5, 2.94)])
def test_tau_matches_the_leviathan_table(alpha, k, tau):
    """tau(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha) reproduces the reference table (2 decimals)."""
    assert cm.tau_from_alpha(alpha, k) == pytest.approx(tau, abs=0.005)


def test_tau_edge_cases_and_positions_agree():
    """alpha = 1 gives K+1, alpha = 0 gives 1; i.i.d. per-position rates alpha^i give the same tau."""
    assert cm.tau_from_alpha(1.0, 4) == 5.0
    assert cm.tau_from_alpha(0.0, 4) == 1.0
    a = 0.65
    assert cm.tau_from_positions([a ** i for i in range(1, 6)]) == pytest.approx(cm.tau_from_alpha(a, 5))
    assert cm.tau_from_positions([a] * 5, conditional=True) == pytest.approx(cm.tau_from_alpha(a, 5))
    with pytest.raises(DataError):
        cm.tau_from_alpha(1.2, 3)


def test_alpha_from_tau_inverts_vllm_ci_reference():
    """tau 2.811 at K=3 (vLLM CI) is alpha ~0.768; the inverse round-trips."""
    assert cm.alpha_from_tau(2.811, 3) == pytest.approx(0.768, abs=0.001)
    assert cm.alpha_from_tau(cm.tau_from_alpha(0.43, 6), 6) == pytest.approx(0.43, abs=1e-6)
    assert cm.alpha_from_tau(0.9, 3) == 0.0 and cm.alpha_from_tau(4.0, 3) == 1.0


def test_conditional_rates_divide_consecutive_positions():
    """r_i = a_i / a_(i-1) with a_0 = 1."""
    assert cm.conditional_rates([0.8, 0.4, 0.1]) == pytest.approx((0.8, 0.5, 0.25))


def test_speedup_and_break_even_are_consistent():
    """speedup = tau / (1 + v + K c); at the break-even tau the speedup is exactly 1."""
    assert cm.speedup(2.4, 3, 0.1, 0.2) == pytest.approx(2.4 / 1.5)
    for k, c, v in [(1, 0.05, 0.0), (4, 0.12, 0.3), (15, 0.08, 1.45)]:
        tau_star = cm.break_even_accept_length(k, c, v)
        assert tau_star == pytest.approx(1 + v + k * c)
        assert cm.speedup(tau_star, k, c, v) == pytest.approx(1.0)


@pytest.mark.parametrize("alpha, c, best, s", [(0.8, 0.05, 8, 3.09), (0.7, 0.10, 4, 1.98), (0.8, 0.02, 11, 3.82)])
def test_best_num_steps_matches_leviathan_scan(alpha, c, best, s):
    """The predicted best K and speedup match the reference's scan over gamma = 1..15."""
    choice = cm.best_num_steps(c, alpha=alpha, max_steps=15)
    assert choice.best_num_steps == best
    assert choice.best_speedup == pytest.approx(s, abs=0.01)
    assert choice.break_even == pytest.approx(1 + best * c)


def test_best_num_steps_from_hand_made_positions():
    """a = [0.9, 0.5, 0.1], c = 0.1: speedups 1.73, 2.00, 1.92 -> K = 2; positions limit the curve."""
    choice = cm.best_num_steps(0.1, per_position=[0.9, 0.5, 0.1])
    assert choice.table["speedup"].round(3).tolist() == [1.727, 2.0, 1.923]
    assert choice.best_num_steps == 2 and len(choice.table) == 3
    with pytest.raises(DataError):
        cm.best_num_steps(0.1)


def _synthetic(c, v, base=100.0, alpha=0.7, ks=(1, 2, 3, 4, 6), noise=0.0, seed=0):
    rng = random.Random(seed)
    recs = [RunRecord(engine="demo", tok_s=base, num_steps=0)]
    for k in ks:
        tau = cm.tau_from_alpha(alpha, k)
        tok = base * tau / (1 + v + k * c) * (1 + rng.uniform(-noise, noise))
        recs.append(RunRecord(engine="demo", tok_s=tok, accept_length=tau, num_steps=k, label=f"K={k}"))
    return recs


def test_fit_recovers_known_cost_exactly():
    """Noise-free synthetic runs give back c and v, with zero error."""
    fit = cm.fit_cost(_synthetic(0.07, 0.3))
    assert fit.c == pytest.approx(0.07, abs=1e-9) and fit.overhead == pytest.approx(0.3, abs=1e-9)
    assert fit.baseline_tok_s == 100.0
    assert fit.rmse_tok_s < 1e-9 and fit.max_rel_error < 1e-9
    assert list(fit.table["num_steps"]) == [1, 2, 3, 4, 6]


def test_fit_with_noise_is_close_and_reports_error():
    """+-2% noise: c within 0.02, the table's relative errors stay under 5%."""
    fit = cm.fit_cost(_synthetic(0.1, 0.2, noise=0.02, seed=3))
    assert fit.c == pytest.approx(0.1, abs=0.02)
    assert 0 < fit.max_rel_error < 0.05 and fit.rmse_tok_s > 0


def test_fit_without_overhead_and_with_one_k():
    """fit_overhead=False fixes v=0; runs at a single K cannot separate c and v and say so."""
    fit = cm.fit_cost(_synthetic(0.09, 0.0), fit_overhead=False)
    assert fit.overhead == 0.0 and fit.c == pytest.approx(0.09)
    one = cm.fit_cost(_synthetic(0.09, 0.5, ks=(3, 3)))
    assert one.overhead == 0.0 and any("cannot be separated" in n for n in one.notes)


def test_fit_errors_without_baseline_or_speculative_runs():
    """No baseline record and no baseline given, or no speculative run: DataError."""
    recs = _synthetic(0.1, 0.1)
    with pytest.raises(DataError, match="baseline"):
        cm.fit_cost(recs[1:])
    assert cm.fit_cost(recs[1:], baseline=100.0).c == pytest.approx(0.1)
    with pytest.raises(DataError, match="no speculative run"):
        cm.fit_cost(recs[:1])


def test_seed_numbers_give_the_expected_cost_and_break_even():
    """Seed: 90 tok/s; 56.8 at (K=1, tau 1.6); 46.7 at (K=15, tau 1.9) -> c ~0.080, v ~1.45, tau*(15) ~3.66."""
    recs = [RunRecord(engine="sglang", tok_s=90.0, num_steps=0),
            RunRecord(engine="sglang", tok_s=56.8, accept_length=1.6, num_steps=1),
            RunRecord(engine="sglang", tok_s=46.7, accept_length=1.9, num_steps=15)]
    fit = cm.fit_cost(recs)
    assert fit.c == pytest.approx(0.0805, abs=5e-4) and fit.overhead == pytest.approx(1.455, abs=5e-3)
    assert fit.break_even(15) == pytest.approx(3.66, abs=0.01)
    assert any("exact by construction" in n for n in fit.notes)


def test_pooled_positions_and_recommend():
    """Per-position rates pool by rounds; recommend uses them and writes the headline from its choice."""
    recs = [RunRecord(engine="demo", tok_s=10.0, num_steps=0),
            RunRecord(engine="demo", tok_s=14.0, accept_length=1.8, num_steps=1, per_position=[0.8], rounds=100),
            RunRecord(engine="demo", tok_s=16.0, accept_length=2.2, num_steps=2, per_position=[0.7, 0.5],
                      rounds=300)]
    assert cm.pooled_per_position(recs) == pytest.approx((0.725, 0.5))
    rec = cm.recommend(recs)
    assert rec.alpha is None and rec.choice.basis.startswith("per-position")
    assert rec.headline == (f"needs accept length ≥ {rec.choice.break_even:.2f} to beat baseline; "
                            f"best num_steps = {rec.choice.best_num_steps}")
    assert rec.choice.break_even == pytest.approx(rec.fit.break_even(rec.choice.best_num_steps))


def test_recommend_per_series_shares_the_cost_fit():
    """Two series share c and v; each gets its own acceptance and best K; fit_problem explains refusals."""
    recs = _synthetic(0.1, 0.2, alpha=0.8)
    recs += [RunRecord(engine="demo", tok_s=100.0 * t / (1.2 + 0.1 * k), accept_length=t, num_steps=k,
                       series="bad") for k in (1, 2, 4) for t in [cm.tau_from_alpha(0.2, k)]]
    good, bad = cm.recommend(recs, series=""), cm.recommend(recs, series="bad")
    assert good.fit.c == pytest.approx(bad.fit.c) and good.fit.c == pytest.approx(0.1, abs=1e-6)
    assert good.alpha == pytest.approx(0.8, abs=0.001) and bad.alpha == pytest.approx(0.2, abs=0.001)
    assert good.choice.best_num_steps > bad.choice.best_num_steps
    with pytest.raises(DataError, match="no speculative run in this series"):
        cm.recommend(recs, series="missing")
    assert cm.fit_problem(recs) is None
    assert "baseline" in cm.fit_problem(recs[1:]) and cm.fit_problem(recs[1:], baseline=100.0) is None
    assert "speculative" in cm.fit_problem(recs[:1])
