"""Tests for eagle3lib.checks.restoring: what the training samples' searches decide, as findings (the searches
themselves: tests/replay/test_counterfactual.py, tests/replay/test_artifacts.py)."""
from __future__ import annotations

from eagle3lib.checks.restoring import tensor_findings
from eagle3lib.replay.artifacts import ArtifactSearch, Candidate, RecoveredMap


def search(*accs, shipped=0.0, recorded=0.92, tensor="lm_head", missing=()):
    m = RecoveredMap((None,), 800, True, 1.0, 0.0)
    cands = tuple(Candidate(t, how, "fix it", a, 500) for t, how, a in accs)
    return ArtifactSearch(shipped, 500, recorded, cands, m, (), missing)


def test_a_restoring_tensor_is_confirmed_with_its_fix_and_accuracies():
    s = search(("d2t", "d2t recovered", 0.91), ("lm_head", "rows reordered", 0.90), ("lm_head", "target's", 0.5))
    (f,) = tensor_findings(s)     # the two map fixes restore alike: the map points at the lm_head rows
    assert (f.cause, f.status, f.measured) == ("draft_tensor_differs", "confirmed", True)
    assert f.evidence["tensor"] == "lm_head" and f.evidence["acc0_restored"] == 0.9
    assert f.fix == "fix it: 0.00 -> 0.90" and "lm_head rows are in another order" in f.summary
    missing = search(("lm_head", "target's", 0.88), missing=("lm_head.weight",))
    assert tensor_findings(missing)[0].cause == "lm_head_missing"
    # below the margin, or no nearer the recorded accuracy: nothing restores, nothing is said
    assert tensor_findings(search(("d2t", "d2t recovered", 0.03))) == []
    assert tensor_findings(search(("d2t", "d2t recovered", 0.5), shipped=0.9, recorded=0.9)) == []
    better = search(("d2t", "d2t recovered", 0.47), shipped=0.32)
    assert tensor_findings(better) == []     # better, training not reproduced
