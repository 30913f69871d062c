"""Check 4 (context length): a draft context shorter than served / trained / target lengths is raised."""
from __future__ import annotations

import pandas as pd

from eagle3lib.checks.context import check_context, served_lengths
from eagle3lib.replay.evidence import position_plot
from eagle3lib.checks.inputs import read_artifacts
from tests.checks.world import TARGET, draft_raw, write_data, write_draft, write_target


def _f(tmp_path, draft_mp, target_mp=256, T=16, served=None):
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw(max_position_embeddings=draft_mp)),
                         target=write_target(tmp_path, {**TARGET, "max_position_embeddings": target_mp}),
                         data=write_data(tmp_path, T=T), served_prompts=served)
    return check_context(art)


def test_clean_context_is_ruled_out(tmp_path):
    """Draft 256 = target 256, samples of 16 tokens: ruled out."""
    f = _f(tmp_path, 256)
    assert [x.status for x in f] == ["ruled out"]
    assert f[0].evidence["data_max_len"] == 16


def test_served_prompts_past_the_draft_context_are_confirmed(tmp_path):
    """Served prompts of 300 tokens (given as ids) vs a draft declaring 64: confirmed."""
    f = _f(tmp_path, 64, served=[[1] * 300, 20])
    assert [x.status for x in f] == ["confirmed"] and f[0].evidence["served_max_len"] == 300


def test_training_samples_past_the_draft_context_are_suspected(tmp_path):
    """Training samples of 40 tokens vs a draft declaring 32: suspected."""
    assert [x.status for x in _f(tmp_path, 32, T=40)] == ["suspected"]


def test_target_longer_than_draft_is_suspected_until_served_lengths_say_otherwise(tmp_path):
    """Draft 64 vs target 4096: suspected; served prompts within 64: ruled out."""
    assert [x.status for x in _f(tmp_path, 64, 4096)] == ["suspected"]
    assert [x.status for x in _f(tmp_path, 64, 4096, served=[30, 50])] == ["ruled out"]


def test_served_lengths_and_plot():
    """Text prompts need a tokenizer (None without); the position plot is a Figure with the context marked."""
    assert served_lengths([3, [1, 2]]) == [3, 2] and served_lengths(["hello"]) is None
    table = pd.DataFrame({"bucket": ["0-64", "64-128"], "lo": [0, 64], "hi": [64, 128], "positions": [5, 5],
                          "acc": [0.9, 0.2]})
    fig = position_plot(table, max_position=64)
    assert fig.axes and "64" in fig.axes[0].get_title()


def test_accuracy_falling_past_the_draft_context():
    """Replay rows: accuracy past the declared context under half of that within it -> the fall is reported."""
    from eagle3lib.checks.context import accuracy_falls_past
    rows = [{"bucket": "0-64", "positions": 100, "acc": 0.8}, {"bucket": "64-128", "positions": 50, "acc": 0.2}]
    assert accuracy_falls_past(rows, 64) == {"before": 0.8, "past": 0.2}
    assert accuracy_falls_past(rows, 128) is None
    assert accuracy_falls_past([{**rows[0]}, {**rows[1], "acc": 0.7}], 64) is None


def _window(tmp_path, draft_changes=None, target_changes=None):
    from eagle3lib.checks.context import check_window
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw(**(draft_changes or {}))),
                         target=write_target(tmp_path, {**TARGET, **(target_changes or {})}))
    [f] = check_window(art)
    return f


def test_window_ruled_out_when_neither_or_both_declare_the_same(tmp_path):
    """No window anywhere (the demo's case), a Qwen2-style window switched off, or the same window on both: ruled
    out; an interleaved target with a full-attention draft: ruled out."""
    assert _window(tmp_path).status == "ruled out"
    assert _window(tmp_path, target_changes={"sliding_window": 64, "use_sliding_window": False}).status == \
        "ruled out"
    same = {"sliding_window": 64, "layer_types": ["sliding_attention"]}
    assert _window(tmp_path, same, {"sliding_window": 64}).status == "ruled out"
    inter = {"sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"] * 4}
    f = _window(tmp_path, target_changes=inter)
    assert f.status == "ruled out" and f.evidence["target"]["interleaved"]


def test_draft_window_differing_from_the_target_is_suspected(tmp_path):
    """A sliding-window draft (layer_types) on a full-attention target: suspected, citing speculators PR#684; a
    full-attention draft on a target windowed everywhere: suspected; missing target: not checked."""
    f = _window(tmp_path, {"sliding_window": 128, "layer_types": ["sliding_attention"]})
    assert f.status == "suspected" and "684" in f.source and f.evidence["draft"]["window"] == 128
    f = _window(tmp_path, target_changes={"sliding_window": 64})
    assert f.status == "suspected" and f.evidence["target"]["window"] == 64
    from eagle3lib.checks.context import check_window
    [f] = check_window(read_artifacts(draft=write_draft(tmp_path, draft_raw(), name="alone")))
    assert f.status == "not checked" and "target" in f.needs
