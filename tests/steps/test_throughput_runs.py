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


def test_run_makes_notebook_04s_part_without_a_finding():
    """run(inputs, earlier): the seed log's served runs as tables and figures, a sentence for each demo table or
    figure when the demo sweep is not run, the headline the notebook records, and no finding (it decides no cause)."""
    from matplotlib.figure import Figure

    from eagle3lib.steps.case import case_of
    from eagle3lib.steps.part import Inputs

    part = TR.run(case_of(Inputs(served_log="data/samples/sglang_seed_decode.log", run_demo_sweep=False)), {})
    assert part.name == TR.NAME and part.findings == [] and part.frame().empty
    assert list(part.tables["served runs"].columns) == list(TR.COLUMNS) and len(part.tables["served runs"])
    assert part.tables["demo sweep"] == TR.NOT_RUN["sweep"] and part.tables["chain vs tree"] == TR.NOT_RUN["tree"]
    assert all(isinstance(part.figures[k], Figure) for k in ("trajectory", "served tok/s vs accept length",
                                                            "served speedup vs num_steps", "per-position acceptance"))
    assert part.figures["demo speedup vs num_steps"] == TR.NOT_RUN["sweep"]
    fit = part.results["fit"]
    assert part.results["headline"] == TR.headline_findings(fit, {}, TR.CORRECT, None)
    assert part.notes == fit.notes and part.results["sweep"] == [] and part.results["tvc"] is None


def test_served_files_split_the_served_log_at_commas():
    from eagle3lib.steps.part import Inputs

    assert TR.served_files(Inputs(served_log=" a.log, ,b.json ")) == ["a.log", "b.json"]
    assert TR.served_files(Inputs()) == []
