"""Notebook 03's steps on the demo world: the seed's capture is diagnosed, the correct one is clean."""
from __future__ import annotations

import pytest

from eagle3lib.demo.sweep import demo_serving_dump
from eagle3lib.steps import diffing

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world():
    from eagle3lib.demo import world as demo
    return demo.ensure_world()


def test_seed_capture_is_diagnosed_and_fixed(world, tmp_path):
    """The demo engine's seed capture: embedding missing + padding; replay with the trained layout recovers."""
    inp = diffing.diff_inputs(serving_dump=str(demo_serving_dump(tmp_path / "seed", "seed", n=1)))
    s = diffing.sides(inp)
    assert s.training.identified == ("embed", "layer_in.2", "layer_in.4", "layer_in.6")
    assert s.serving.identified == ("layer_in.2", "layer_in.4", "layer_in.6", "zeros")
    assert s.explanation.kinds == {"missing_slot", "padding"}
    proof = diffing.proof_of_fix(inp, s.serving.identified, s.training.identified, n=8)
    acc = diffing.proof_summary(proof)
    served, fixed = list(acc.values())
    assert fixed > served + 0.05 and fixed > 0.85
    assert "missing_slot" in diffing.diff_headline(s, proof)


def test_correct_capture_is_clean(world, tmp_path):
    """The demo engine serving the training layout: no false alarm."""
    inp = diffing.diff_inputs(serving_dump=str(demo_serving_dump(tmp_path / "ok", "correct", n=1)))
    s = diffing.sides(inp)
    assert s.explanation.clean, s.explanation.summary
    assert s.serving.identified == s.training.identified
    assert "no wiring fault" in diffing.diff_headline(s)
