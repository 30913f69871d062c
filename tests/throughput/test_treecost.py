"""Tree cost model: chain consistency with costmodel, recovery of known coefficients, setting choice, the chart,
and tree runs kept out of the chain fit."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from eagle3lib.throughput import costmodel, plots
from eagle3lib.errors import DataError
from eagle3lib.engine_kit.records import RunRecord
from eagle3lib.throughput.treecost import DEFAULT_GRID, TreeCost, choose_setting, fit_tree_cost

TRUE = TreeCost(c=0.08, w=0.04, r=0.5, overhead=0.3, baseline_tok_s=100.0)
TAUS = {(1, 1, 2): 1.7, (2, 1, 3): 2.2, (3, 1, 4): 2.5, (4, 1, 5): 2.7, (3, 2, 8): 2.9, (5, 4, 8): 3.3,
        (5, 2, 16): 3.4, (3, 4, 6): 2.8}


def records(cost: TreeCost, settings) -> list[RunRecord]:
    """Runs whose tok/s the given cost model explains exactly, plus the baseline."""
    out = [RunRecord("demo", tok_s=cost.baseline_tok_s, num_steps=0, label="baseline")]
    for s in settings:
        out.append(RunRecord("demo", tok_s=cost.tok_s(TAUS[s], *s), accept_length=TAUS[s], num_steps=s[0], topk=s[1],
                             num_draft_tokens=s[2], label=str(s)))
    return out


def test_a_chain_costs_what_costmodel_says():
    for k in (1, 3, 6):
        assert TRUE.round_cost(k, 1, k + 1) == pytest.approx(costmodel.step_cost(k, TRUE.c + TRUE.w, TRUE.overhead))
        assert TRUE.speedup(2.0, k, 1, k + 1) == pytest.approx(costmodel.speedup(2.0, k, TRUE.c + TRUE.w,
                                                                                 TRUE.overhead))
    assert TRUE.round_cost(5, 4, 8) - TRUE.round_cost(5, 4, 6) == pytest.approx(2 * TRUE.w)   # verify width


def test_fit_recovers_known_coefficients_from_chains_and_trees():
    fit = fit_tree_cost(records(TRUE, TAUS))
    for name in ("c", "w", "r", "overhead"):
        assert getattr(fit, name) == pytest.approx(getattr(TRUE, name), abs=1e-9), name
    assert fit.baseline_tok_s == 100.0 and not fit.notes


def test_chains_only_fit_equals_the_chain_model():
    chains = records(TRUE, [s for s in TAUS if s[1] == 1])
    fit, ref = fit_tree_cost(chains), costmodel.fit_cost(chains)
    assert fit.w == 0.0 and fit.r == 0.0 and len(fit.notes) == 2
    assert fit.c == pytest.approx(ref.c) and fit.overhead == pytest.approx(ref.overhead)
    with pytest.raises(DataError, match="baseline"):
        fit_tree_cost(chains[1:])


def test_chain_fit_ignores_tree_runs():
    recs = records(TRUE, TAUS)
    only = [r for r in recs if (r.topk or 1) == 1]
    assert costmodel.fit_cost(recs).c == pytest.approx(costmodel.fit_cost(only).c)
    assert len(costmodel.fit_cost(recs).table) == len(only) - 1


def test_choice_follows_the_model_and_the_chart_draws_it():
    cheap_verify = TreeCost(c=0.05, w=0.0, r=0.0, overhead=0.1, baseline_tok_s=50.0)
    costly_verify = TreeCost(c=0.05, w=0.5, r=0.0, overhead=0.1, baseline_tok_s=50.0)
    for cost in (cheap_verify, costly_verify):
        ch = choose_setting(cost, TAUS)
        want = max(TAUS, key=lambda s: TAUS[s] / cost.round_cost(*s))
        assert ch.best == want and ch.break_even == pytest.approx(cost.round_cost(*want))
        assert ch.best_tok_s == pytest.approx(50.0 * TAUS[want] / cost.round_cost(*want))
        assert list(ch.table.break_even) == pytest.approx([cost.round_cost(*s) for s in sorted(TAUS)])
    assert choose_setting(cheap_verify, TAUS).best[1] > 1 and choose_setting(costly_verify, TAUS).best[1] == 1
    with pytest.raises(DataError, match="accept length"):
        choose_setting(cheap_verify, TAUS, settings=DEFAULT_GRID)
    before = plt.get_fignums()
    fig = plots.tree_vs_chain_figure(choose_setting(TRUE, TAUS), measured=records(TRUE, [(3, 1, 4), (5, 4, 8)]))
    assert isinstance(fig, Figure) and plt.get_fignums() == before
    ax_t, ax_s = fig.axes[:2]
    assert len(ax_t.get_xticklabels()) == len(TAUS)
    assert [p.get_height() for p in ax_t.patches[:len(TAUS)]] == pytest.approx([TAUS[s] for s in sorted(TAUS)])
    assert [p.get_height() for p in ax_s.patches[:len(TAUS)]] == pytest.approx(
        [TRUE.tok_s(TAUS[s], *s) for s in sorted(TAUS)])


def test_step_cost_fit_recovers_timings_and_engine_timings_add_up():
    """fit_step_costs inverts per-round seconds built from known coefficients; time_settings on a tiny engine
    reports the engine's own accept length and round = draft + verify + other."""
    import pandas as pd
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from eagle3lib.engine_kit.capturespec import CaptureSpec
    from eagle3lib.sglang_engine.emulator import SpecEngine
    from eagle3lib.sglang_engine.emulator_settings import SpecSettings
    from eagle3lib.throughput.treecost import fit_step_costs, time_settings
    from tests.sglang_engine.test_tree import LAYOUT, draft_cfg, random_draft

    step, a, b = 0.002, 1.1, 0.05
    rows = [{"num_steps": 0, "topk": 0, "num_draft_tokens": 1, "round_s": step, "draft_s": 0.0, "verify_s": 0.0,
             "other_s": step, "tok_s": 1 / step}]
    for s, k, n in TAUS:
        d = step * (b + TRUE.c * s * (1 + TRUE.r * (k - 1)))
        v = step * (a + TRUE.w * (n - 1))
        rows.append({"num_steps": s, "topk": k, "num_draft_tokens": n, "round_s": d + v + 0.01 * step,
                     "draft_s": d, "verify_s": v, "other_s": 0.01 * step, "tok_s": 0.0})
    fit = fit_step_costs(pd.DataFrame(rows))
    assert (fit.c, fit.w, fit.r) == pytest.approx((TRUE.c, TRUE.w, TRUE.r))
    assert fit.overhead == pytest.approx(a - 1 + b + 0.01) and fit.baseline_tok_s == pytest.approx(1 / step)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8, max_position_embeddings=512, eos_token_id=None)
    eng = SpecEngine(LlamaForCausalLM(cfg).double().eval(), random_draft(draft_cfg()), CaptureSpec.from_layout(LAYOUT))
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    threads, clock = torch.get_num_threads(), eng.clock
    tim = time_settings(eng, prompts, [(2, 1, 3), (2, 2, 4)], max_new_tokens=6, repeats=1, clock="cpu")
    assert torch.get_num_threads() == threads and eng.clock is clock          # restored after timing
    with pytest.raises(DataError, match="clock"):
        time_settings(eng, prompts, [(2, 1, 3)], clock="gpu")
    assert list(tim.num_steps) == [0, 2, 2] and list(tim.topk) == [0, 1, 2]
    want = [eng.generate(p, 6, SpecSettings(2, 2, 4)) for p in prompts]
    assert tim.accept_length[2] == pytest.approx(sum(sum(r.accept_lengths) for r in want) / sum(r.rounds for r in want))
    assert (tim.draft_s + tim.verify_s + tim.other_s - tim.round_s).abs().max() < 1e-12
    fig = plots.tree_vs_chain_figure(choose_setting(fit, {(2, 1, 3): 2.0, (2, 2, 4): 2.2}), measured=tim)
    dots = [c for c in fig.axes[0].collections if c.get_label() == "measured accept length"]
    assert len(dots) == 1 and list(dots[0].get_offsets()[:, 1]) == pytest.approx(list(tim.accept_length[1:]))
