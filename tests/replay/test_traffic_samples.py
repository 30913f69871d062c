"""replay.traffic_samples: served answers as replay samples, captured by the target. The target's own greedy answers
(generated here by transformers, as a greedy server returns them) replay with the target's reference equal to the
served tokens at every position, and the walk counts the drafts a server would make."""
from __future__ import annotations

import json

import pytest
import torch

from eagle3lib.demo import world as demo
from eagle3lib.engine_kit.prompts import read_prompts
from eagle3lib.errors import DataError
from eagle3lib.hidden.capture import capture, load_target_model
from eagle3lib.model.target import load_tokenizer
from eagle3lib.replay.run import identify_training_layout, load_setup, replay, with_trained_layout
from eagle3lib.replay.traffic_samples import served_traffic, traffic_samples
from eagle3lib.serving.traffic import read_traffic

pytestmark = pytest.mark.slow     # tens of seconds: the full suite (make test-all), not make test


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(world, served folder): 6 held-out prompts and the demo target's greedy answers (24 tokens) as token ids."""
    w = demo.ensure_world(progress=False)
    model = load_target_model(w.target)
    out = tmp_path_factory.mktemp("served")
    prompts = read_prompts(w.heldout_data, n=6)
    rows = []
    for p in prompts:
        ids = torch.tensor([p.token_ids])
        with torch.inference_mode():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
        rows.append({"id": p.id, "token_ids": gen[0, ids.shape[1]:].tolist(), "finish_reason": "length"})
    (out / "prompts.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in prompts))
    (out / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return w, out


def test_a_sample_is_the_prompt_and_its_answer_with_the_targets_own_states(served):
    w, out = served
    t = read_traffic(out)
    layout = ("embed", "layer_in.2", "layer_in.4")
    samples = traffic_samples(t, w.target, layout)
    assert len(samples) == 6
    s, e = samples[0], t.exchanges[0]
    P = len(e.prompt_ids)
    assert s.input_ids.tolist() == list(e.prompt_ids + e.answer_ids) and s.layout == layout
    assert s.loss_mask[:P].sum() == 0 and bool(s.loss_mask[P:].all())
    cap = capture(load_target_model(w.target), s.input_ids, only=list(layout) + ["final_postnorm"])
    assert torch.equal(s.aux, cap.stack(layout)) and torch.equal(s.final_hidden, cap["final_postnorm"])
    assert s.final_boundary == "final_postnorm" and "responses.jsonl:1" in s.source


def test_replayed_on_its_own_greedy_answers_the_reference_is_the_served_token(served):
    w, out = served
    setup = load_setup(w.draft, w.target)
    setup = with_trained_layout(setup, identify_training_layout(setup, w.specforge_data))
    samples, note = served_traffic(out, w.target, setup.training_layout, load_tokenizer(w.target))
    assert f"6 answers ({read_traffic(out).answered_tokens} tokens, ids from engine)" in note
    r = replay(setup, samples, num_steps=3, progress=False)
    assert r.reference == "target" and r.target_agreement == 1.0      # greedy: the target's top-1 is what it served
    assert 6 <= r.walked_drafts <= 6 * 22 and 1.0 <= r.walked_accept_length <= 4.0
    with pytest.raises(DataError, match="no target to capture it with"):
        served_traffic(out, "", setup.training_layout)
    with pytest.raises(DataError, match="no trained layout"):
        served_traffic(out, w.target, None)
