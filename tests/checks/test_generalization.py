"""Tests for eagle3lib.checks.generalization: generalization_gap on the served traffic."""
from __future__ import annotations

from eagle3lib.checks.generalization import ASPECT, not_served, traffic_finding, without_traffic


def test_the_served_traffic_scoring_lower_than_the_training_samples_confirms_the_gap():
    f = traffic_finding(0.91, "the training samples as shipped", 0.42, 700, served=1.29, predicted=1.19,
                        tolerance=0.2, answers=16)
    assert (f.status, f.aspects, f.measured) == ("confirmed", ASPECT, True)
    assert f.evidence["gap"] == 0.49 and "the engine serves the draft as replayed" in f.summary
    assert f.fix.startswith("train")
    ok = traffic_finding(0.91, "as shipped", 0.88, 700, served=3.2, predicted=3.1, tolerance=0.31)
    assert ok.status == "ruled out" and "within 0.10" in ok.summary


def test_without_the_traffic_a_low_served_tau_is_not_ruled_out_but_names_the_traffic():
    low = without_traffic(1.29, 3.2, 0.32, "the training samples")
    assert low.status == "not checked" and "--served-traffic" in low.needs and low.aspects == ASPECT
    agree = without_traffic(3.1, 3.2, 0.32, "the training samples")
    assert agree.status == "ruled out" and agree.measured
    none = not_served()
    assert none.status == "not checked" and "--served-log" in none.needs
