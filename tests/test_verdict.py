"""Tests for eagle3lib.verdict: decision rules, training-log reading, layout candidates and search, and (slow) the
verdicts the demo world was built to show."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from eagle3lib import replay as R
from eagle3lib import verdict as V
from eagle3lib.datasets import Sample
from eagle3lib.errors import DataError, MissingFileError
from tests.test_replay import LAYOUT, make_samples, make_setup

SERVED = ("layer_in.2", "layer_in.4", "layer_in.6")


def fake(acc0: float, label: str = "x", reference: str = "target") -> R.ReplayResult:
    """A ReplayResult with a given step-0 accuracy (tables reduced to what decide() reads)."""
    per_step = pd.DataFrame({"step": [0], "positions": [100], "acc": [acc0], "oov_rate": [0.0], "cond_acc": [acc0]})
    return R.ReplayResult(label, LAYOUT, LAYOUT, "offsets", 0, "error", reference, "token", 1, per_step,
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
    line = V.headline(vs)
    assert line.startswith("serving layout: wiring") and "0.020" in line and "recorded 0.700" in line
    s = V.LayoutSearch(pd.DataFrame({"acc_0": [0.69]}), "add embedding slot", True, 0.7, 0.5, "")
    assert V.headline(vs, s).endswith("fix: add embedding slot -> acc_0 0.690")
    assert V.headline({"training": vs["training"]}).startswith("training layout: healthy")


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


# ---------------------------------------------------------------- candidates and search

def test_layout_candidates_cover_the_known_wirings():
    """Missing embedding, ids ±1 (with and without the embedding), 23 orders, final-norm swap; no duplicates."""
    cands = V.layout_candidates(SERVED, 4, 8, training_layout=LAYOUT)
    by = {c.name: c.layout for c in cands}
    assert by["as served"] == SERVED and by["add embedding slot"] == LAYOUT
    assert by["layer ids +1"] == ("layer_in.3", "layer_in.5", "layer_in.7")
    assert by["layer ids -1 + embedding"] == ("embed", "layer_in.1", "layer_in.3", "layer_in.5")
    assert sum(n.startswith("order") for n in by) == 23
    assert "training layout" not in by                        # same as "add embedding slot"
    assert len({(c.layout, c.d2t, c.align) for c in cands}) == len(cands)
    fin = {c.name: c.layout for c in V.layout_candidates(("embed", "layer_in.4", "final_prenorm"), 3, 8)}
    assert fin["other final norm"] == ("embed", "layer_in.4", "final_postnorm")
    assert fin["layer ids -1"] == ("embed", "layer_in.3", "layer_in.7") and "layer ids +1" not in fin
    assert V._shift(("layer_in.7",), 1, 8) == ("final_prenorm",) and V._shift(("final_prenorm",), 1, 8) is None


def test_search_names_the_missing_embedding(tmp_path):
    """Data where the draft is right 60% of the time under the training layout; served without the embedding,
    the search ranks 'add embedding slot' first and says it restores the accuracy."""
    setup = make_setup(tmp_path)
    samples, acc, _ = make_samples(setup, n=2)
    served = R.replay(setup, samples, layout=SERVED, fill="zeros", progress=False)
    assert V.decide(served, recorded_acc=acc).verdict == "wiring"
    s = V.search_layouts(setup, samples, SERVED, target_acc=acc, progress=False)
    assert s.best == "add embedding slot" and s.restored
    assert s.table.acc_0[0] == pytest.approx(acc) and "missing embedding" in s.message
    assert s.table.restores.sum() == 1
    untestable = s.table[s.table.acc_0.isna()]
    assert len(untestable) == 4 and untestable.note.str.contains("give a target").all()


def test_search_finds_a_d2t_misreading(tmp_path):
    """Data whose tokens follow the draft's ids read without d2t: the search names 'd2t ignored'."""
    setup = make_setup(tmp_path)
    samples, acc, _ = make_samples(setup, n=2, d2t="identity")
    s = V.search_layouts(setup, samples, LAYOUT, target_acc=acc, max_permutations=1, progress=False)
    assert s.best == "d2t ignored" and s.restored and s.table.acc_0[0] == pytest.approx(acc)


def test_search_recaptures_boundaries_the_samples_lack(tmp_path):
    """With a real (tiny) HF target, candidates naming other layers are recaptured; the draft driven by
    [embed, L3, L5, L7] is found from a served [L2, L4, L6] and samples carrying [embed, L2, L4, L6]."""
    transformers = pytest.importorskip("transformers")
    from eagle3lib.capture import capture
    from eagle3lib.checkpoint import save_draft
    from eagle3lib.config import DraftConfig
    from eagle3lib.draft import Eagle3Draft
    from tests.conftest import TINY_SPECFORGE
    cfg = transformers.LlamaConfig(vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    target = transformers.LlamaForCausalLM(cfg).eval()
    target.save_pretrained(tmp_path / "target")
    draft = Eagle3Draft(DraftConfig.from_dict(TINY_SPECFORGE))
    for p in draft.parameters():
        torch.nn.init.normal_(p, std=0.3)
    save_draft(draft, TINY_SPECFORGE, tmp_path / "draft")
    setup = R.load_setup(tmp_path / "draft", tmp_path / "target")
    true = ("embed", "layer_in.3", "layer_in.5", "layer_in.7")
    T, ids = 18, torch.tensor([3, 9] + [0] * 16)
    with torch.inference_mode():
        for t in range(T - 2):                                # x_{t+2} = the draft's step-0 guess under `true`
            aux = capture(target, ids[:t + 2], only=true).concat(true)          # (t+2, 4*32)
            ids[t + 2] = int(setup.model.ttt_forward(aux[None], ids[None, :t + 2], 1)[0][0, t].argmax())
        cap = capture(target, ids)
    sample = Sample("r0", ids, torch.ones(T, dtype=torch.long), cap.stack(LAYOUT), LAYOUT, None, "mem")
    s = V.search_layouts(setup, [sample], SERVED, target_acc=1.0, recapture=V.Recapture(tmp_path / "target"),
                         max_permutations=1, progress=False)
    assert s.best == "layer ids +1 + embedding" and s.restored and s.table.acc_0[0] == pytest.approx(1.0)
    assert s.table.note[0].startswith("recaptured")


# ---------------------------------------------------------------- helpers for the notebook

def test_compare_layouts_and_resolve_inputs(tmp_path):
    """'training' / 'serving' (default: without embed) / explicit names; explicit inputs need no demo world."""
    setup = make_setup(tmp_path)
    lays = V.compare_layouts(["training", "serving", "embed,layer_in.3"], setup)
    assert lays == {"training": LAYOUT, "serving": SERVED, "embed,layer_in.3": ("embed", "layer_in.3")}
    assert V.compare_layouts(["serving"], setup, serving=("layer_in.4",))["serving"] == ("layer_in.4",)
    (tmp_path / "log.jsonl").write_text('{"val_acc_step0": 0.5}\n')
    inp = V.resolve_inputs(str(tmp_path / "draft"), str(tmp_path / "target"), "data/x",
                           training_log_path=str(tmp_path / "log.jsonl"), heldout_data_path="data/h")
    assert not inp.demo and inp.recorded_acc == 0.5 and inp.heldout == {"held-out": "data/h"}
    inp = V.resolve_inputs("d", "t", "x", recorded_val_acc=0.7, serving_layout="layer_in.2,layer_in.4")
    assert inp.recorded_acc == 0.7 and inp.recorded_from == "parameter" and len(inp.serving_layout) == 2
    with pytest.raises(DataError):
        V.resolve_inputs("d", "t", "")


def test_replay_table_and_plot(tmp_path):
    """One table row per replay; the figure has the step chart and the histogram."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=1)
    rs = {"a": R.replay(setup, samples, label="train", progress=False),
          "b": R.replay(setup, samples, layout=SERVED, fill="zeros", label="served", progress=False)}
    t = V.replay_table(rs)
    assert list(t.label) == ["train", "served"] and {"acc_0", "acc_2", "simulated accept"} <= set(t.columns)
    fig = V.plot_replay(rs)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 4


# ---------------------------------------------------------------- the demo world (slow)

@pytest.fixture(scope="session")
def demo_world():
    """The demo world, built once per session (skips if the builder is not there)."""
    try:
        from eagle3lib import demo
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
    s = V.search_layouts(setup, world.seed_data, served, target_acc=recorded, n=16, progress=False)
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
