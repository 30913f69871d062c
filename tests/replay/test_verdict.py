"""Tests for eagle3lib.replay.verdict: decision rules, training-log reading, notebook helpers, and (slow) the verdicts the
demo world was built to show (with the layout search that fixes the seed's wiring)."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from eagle3lib.replay import run as R
from eagle3lib.replay import layoutsearch as LS
from eagle3lib.replay import stats as S
from eagle3lib.replay import verdict as V
from eagle3lib.errors import DataError, MissingFileError
from tests.replay.test_run import LAYOUT, make_samples, make_setup

SERVED = ("layer_in.2", "layer_in.4", "layer_in.6")


def fake(acc0: float, label: str = "x", reference: str = "target") -> S.ReplayResult:
    """A ReplayResult with a given step-0 accuracy (tables reduced to what decide() reads)."""
    per_step = pd.DataFrame({"step": [0], "positions": [100], "acc": [acc0], "oov_rate": [0.0], "cond_acc": [acc0]})
    return S.ReplayResult(label, LAYOUT, LAYOUT, "offsets", 0, "error", reference, "token", 1, per_step,
                          pd.DataFrame(), pd.DataFrame(), 1 + acc0, float("nan"), float("nan"), ())


# ---------------------------------------------------------------- decision rules

def test_wiring_when_far_below_the_recorded_accuracy():
    """acc_0 more than wiring_drop below the recorded number -> wiring, with both numbers in the reason."""
    v = V.decide(fake(0.03), {"held": fake(0.02)}, recorded_acc=0.747)
    assert v.verdict == "wiring" and "0.030" in v.reason and "0.747" in v.reason
    assert V.decide(fake(0.66), recorded_acc=0.747).verdict == "healthy"          # 0.087 below: not wiring
    assert V.decide(fake(0.66), recorded_acc=0.747, wiring_drop=0.05).verdict == "wiring"


def test_wiring_floor_without_a_recorded_accuracy():
    """Without a recorded number, an accuracy under wiring_floor on training data is wiring."""
    assert V.decide(fake(0.1)).verdict == "wiring"
    assert V.decide(fake(0.5)).verdict == "healthy"


def test_data_reference_carries_a_caveat():
    """A verdict from a data-referenced replay says the data need not match the target's greedy tokens."""
    v = V.decide(fake(0.5, reference="data"), recorded_acc=0.75)
    assert v.verdict == "wiring" and "Caveat: reference = data" in v.reason
    assert "Caveat" not in V.decide(fake(0.5), recorded_acc=0.75).reason


def test_generalization_and_healthy():
    """Training fine and one held-out set more than the gap lower -> generalization naming that set."""
    v = V.decide(fake(0.72), {"in-domain": fake(0.69), "new prompts": fake(0.41)}, recorded_acc=0.70)
    assert v.verdict == "generalization" and "new prompts" in v.reason and "consistent with" in v.reason
    assert v.heldout_acc == {"in-domain": 0.69, "new prompts": 0.41}
    assert list(v.evidence.data)[:2] == ["training samples (x)", "recorded validation accuracy"]
    assert V.decide(fake(0.72), {"in-domain": fake(0.69)}, recorded_acc=0.70).verdict == "healthy"
    assert json.dumps(v.summary(), allow_nan=False)


def test_headline_names_the_serving_verdict_and_the_fix():
    """The headline reports the serving layout's verdict with its numbers, and the search's fix when restored."""
    vs = {"training": V.decide(fake(0.7), recorded_acc=0.7), "serving": V.decide(fake(0.02), recorded_acc=0.7)}
    line = V.replay_headline(vs)
    assert line.startswith("serving layout: wiring") and "0.020" in line and "recorded 0.700" in line
    s = LS.LayoutSearch(pd.DataFrame({"acc_0": [0.69]}), "add embedding slot", True, 0.7, 0.5, "")
    assert V.replay_headline(vs, s).endswith("fix: add embedding slot -> acc_0 0.690")
    assert V.replay_headline({"training": vs["training"]}).startswith("training layout: healthy")


def test_bad_threshold_and_empty_replay():
    """Unknown threshold names raise; a replay with no scored position is inconclusive."""
    with pytest.raises(DataError):
        V.decide(fake(0.5), gap=0.1)
    assert V.decide(fake(float("nan"))).verdict == "inconclusive"


def test_read_recorded_accuracy(tmp_path):
    """The last record holding a known key wins; broken lines are ignored; absent file / key raise."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "val_acc_step0": 0.41}\nnot json\n{"step": 2, "train_loss": 3}\n'
                   '{"step": 3, "val_acc_step0": 0.66}\n{"step": 4}\n')
    value, where = V.read_recorded_accuracy(log)
    assert value == 0.66 and where.endswith(":4 val_acc_step0")
    (tmp_path / "sf.jsonl").write_text('{"eval/acc_0": 0.747}\n')
    assert V.read_recorded_accuracy(tmp_path / "sf.jsonl")[0] == 0.747
    with pytest.raises(MissingFileError):
        V.read_recorded_accuracy(tmp_path / "nope.jsonl")
    with pytest.raises(DataError):
        V.read_recorded_accuracy(tmp_path / "sf.jsonl", keys=("val_acc_step0",))


def test_replay_table_and_plot(tmp_path):
    """One table row per replay; the figure has the step chart and the histogram."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=1)
    rs = {"a": R.replay(setup, samples, label="train", progress=False),
          "b": R.replay(setup, samples, layout=SERVED, fill="zeros", label="served", progress=False)}
    t = V.replay_table(rs)
    assert list(t.label) == ["train", "served"] and {"acc_0", "acc_2", "simulated accept"} <= set(t.columns)
    import matplotlib.pyplot as plt
    before = plt.get_fignums()
    fig = V.plot_replay(rs)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 4
    assert plt.get_fignums() == before          # not left open in pyplot (a notebook would show it twice)


# ---------------------------------------------------------------- the demo world (slow)

@pytest.fixture(scope="session")
def demo_world():
    """The demo world, built once per session (skips if the builder is not there)."""
    try:
        from eagle3lib.demo import world as demo
        demo.ensure_world()
        world = demo.paths()
    except (ImportError, AttributeError) as e:
        pytest.skip(f"demo world builder not available: {e}")
    setup = R.load_setup(world.draft, world.target)
    return world, setup, V.read_recorded_accuracy(world.training_log)[0]


@pytest.mark.slow
def test_demo_training_layout_matches_recorded_accuracy(demo_world):
    """Training layout on its training samples: step-0 accuracy within a few points of the recorded one."""
    world, setup, recorded = demo_world
    r = R.replay(setup, world.seed_data, n=96, num_steps=3, progress=False)
    assert r.reference == "target" and not r.skipped
    assert abs(r.acc0 - recorded) < 0.06, (r.acc0, recorded)
    assert r.simulated_accept_length > 1.8


@pytest.mark.slow
def test_demo_seed_layout_is_wiring_and_search_names_the_embedding(demo_world):
    """The seed's serving layout (no embedding, zero-filled) is a wiring verdict; the search restores it."""
    world, setup, recorded = demo_world
    served = json.loads(world.world_json.read_text())["serving_layout"]
    r = R.replay(setup, world.seed_data, layout=served, fill="zeros", n=64, progress=False)
    v = V.decide(r, recorded_acc=recorded)
    assert v.verdict == "wiring", v.reason
    s = LS.search_layouts(setup, world.seed_data, served, target_acc=recorded, n=16, progress=False)
    assert s.best == "add embedding slot" and s.restored


@pytest.mark.slow
def test_demo_shifted_domain_is_generalization(demo_world):
    """Training layout: fine on training samples, clearly lower on the shifted domain -> generalization."""
    world, setup, recorded = demo_world
    train = R.replay(setup, world.seed_data, n=96, progress=False)
    shifted = R.replay(setup, world.shifted_data, n=96, progress=False)
    v = V.decide(train, {"shifted": shifted}, recorded_acc=recorded)
    assert v.verdict == "generalization", v.reason
    assert not math.isnan(shifted.acc0)
