"""Tests for eagle3lib.steps.throughput_runs: notebook 04's served-run fit and the findings it records."""
from __future__ import annotations

from eagle3lib.steps import throughput_runs as TR


def test_fit_served_and_headline_findings_on_the_shipped_seed_log():
    """The seed's SGLang log: a baseline of 0 means the records' own; the findings hold a headline and, with a fit,
    the cost model it came from (the served runs)."""
    served = [r for res in TR.read_runs(["data/samples/sglang_seed_decode.log"]) for r in res.records]
    fit = TR.fit_served(served, 0.0)
    assert fit.baseline is None and (fit.problem is None) == (fit.rec is not None)
    got = TR.headline_findings(fit, {}, "correct", None)
    assert got["headline"] and "tree_vs_chain" not in got
    if fit.rec is not None:
        assert got["cost_model"]["from"] == "served runs"
    else:
        assert got["headline"].startswith("no cost-model fit") and "cost_model" not in got
