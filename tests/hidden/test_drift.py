"""hidden.drift: the stored states against the target's own recapture, per slot. States captured from the same
target read cosine 1 and norm ratio 1; the same states doubled keep cosine 1 with ratio 2 (what cosine alone would
miss); another target's states drop the cosine. A slot the shard does not name is matched to the boundary it holds,
and a rendering captured is a replayable sample of the trained layout."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.hidden.capture import capture, load_target_model
from eagle3lib.hidden.drift import best_boundaries, captured_sample, drift_table, recaptured
from eagle3lib.samples.sample import Sample
from tests.tiny_targets import V, save_tiny_target

LAYOUT = ("embed", "layer_in.1", "layer_in.2")


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("drift")
    return (load_target_model(save_tiny_target("llama", root / "a")),
            load_target_model(save_tiny_target("llama", root / "b", seed=1)))


def samples_of(model, n: int = 3, scale: float = 1.0, layout=LAYOUT) -> list[Sample]:
    out = []
    for i in range(n):
        ids = torch.randint(0, V, (8 + i,), generator=torch.Generator().manual_seed(i))
        aux = capture(model, ids, only=list(layout)).stack(layout) * scale          # (T, k, H)
        out.append(Sample(f"s{i}", ids, torch.ones(len(ids), dtype=torch.long), aux, tuple(layout), None, f"s{i}"))
    return out


def test_the_same_target_reads_cosine_one_and_ratio_one_and_a_scale_shows_in_the_ratio(targets):
    a, b = targets
    same = drift_table(a, samples_of(a), LAYOUT, num_layers=a.config.num_hidden_layers)
    assert list(same.boundary) == list(LAYOUT) and list(same.slot) == [0, 1, 2]
    assert same.cosine.min() > 0.9999 and (same.norm_ratio - 1).abs().max() < 1e-4
    doubled = drift_table(a, samples_of(a, scale=2.0), LAYOUT, num_layers=a.config.num_hidden_layers)
    assert doubled.cosine.min() > 0.9999 and (doubled.norm_ratio - 2).abs().max() < 1e-3
    other = drift_table(b, samples_of(a), LAYOUT, num_layers=b.config.num_hidden_layers)
    assert other.cosine[1:].max() < 0.99          # the layers differ; the embedding of another seed too


def test_recaptured_samples_hold_the_targets_states_and_a_rendering_is_a_replayable_sample(targets):
    a, b = targets
    stored = samples_of(a)
    fresh = recaptured(b, stored, LAYOUT)
    assert [s.id for s in fresh] == [s.id for s in stored] and all(s.layout == LAYOUT for s in fresh)
    want = capture(b, stored[0].input_ids, only=list(LAYOUT)).stack(LAYOUT)
    assert torch.allclose(fresh[0].aux.float(), want.float(), atol=1e-5)
    ids = stored[1].input_ids.tolist()
    s = captured_sample(a, ids, [1] * len(ids), LAYOUT, "r1")
    assert s.id == "r1" and s.layout == LAYOUT and torch.allclose(s.aux, stored[1].aux.float(), atol=1e-5)


def test_an_unnamed_slot_is_matched_to_the_boundary_it_holds(targets):
    a, _ = targets
    held = ("layer_in.2", "embed")
    assert best_boundaries(a, samples_of(a, layout=held)) == held
