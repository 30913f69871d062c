"""Tests for eagle3lib.hidden.identify: a training shard's slots named by recapture, never by a config's ids."""
from __future__ import annotations

import json

import torch

from eagle3lib.hidden.capture import capture
from eagle3lib.hidden.identify import identify_slots, trained_layout
from eagle3lib.model.config import DraftConfig
from eagle3lib.samples.readers import open_dataset
from eagle3lib.samples.sample import Sample
from eagle3lib.samples.writers import specforge_sample_path, write_seed_dataset, write_specforge_sample
from tests.tiny_targets import tiny_target

L = 3
TRAINED = ("embed", "layer_in.1", "layer_in.2")     # what the shard really holds


def draft_cfg(ids, nested: bool) -> DraftConfig:
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
           "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 8, "vocab_size": 96, "draft_vocab_size": 96, "target_hidden_size": 32,
           "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "num_aux_hidden_states": 3}
    if nested:
        raw["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    else:
        raw["eagle_aux_hidden_state_layer_ids"] = ids
    return DraftConfig.from_dict(raw, source="<test>")


def samples(model, layout=TRAINED, n=3, scale=1.0):
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(0, 96, (12 + i,), generator=g)
        cap = capture(model, ids, only=list(layout))
        out.append(Sample(f"s{i}", ids, torch.ones_like(ids), cap.stack(layout) * scale, None, source=f"s{i}"))
    return out


def specforge_dir(tmp_path, items):
    for i, s in enumerate(items):
        write_specforge_sample(specforge_sample_path(tmp_path / "sf", i), s.input_ids, s.loss_mask,
                               torch.zeros(s.num_tokens, 32), s.aux.reshape(s.num_tokens, -1))
    return open_dataset(tmp_path / "sf", hidden_size=32)


def test_identified_layout_wins_over_a_config_in_another_convention(tmp_path):
    """vLLM input-of-layer ids [0, 1, 2] written into eagle_config: SpecForge's place, whose first id other than 1
    leaves the convention open (sglang PR #25454). Read as output-of-layer they name [layer_in.1, layer_in.2,
    final_prenorm], as input-of-layer [embed, layer_in.1, layer_in.2]: the config claims neither, the recapture says
    what the shard holds and which reading that is."""
    model = tiny_target("llama")
    ds = specforge_dir(tmp_path, samples(model))
    cfg = draft_cfg([0, 1, 2], nested=True)
    assert cfg.aux_readings(L) == {"output": ("layer_in.1", "layer_in.2", "final_prenorm"), "input": TRAINED}
    tl = trained_layout(ds, cfg, L, model=model)
    assert tl.source == "identified" and tl.measured
    assert tl.layout == TRAINED and tl.config is None and set(tl.readings) == {"output", "input"}
    assert "read as input-of-layer name it" in tl.detail
    claim = trained_layout(ds, cfg, L)                       # no model: both readings named, none taken
    assert claim.layout is None and claim.source == "none" and "two readings" in claim.detail


def test_a_reading_the_target_lacks_leaves_the_other(tmp_path):
    """Open ids [1, 2, 3] of a 3-layer target: output-of-layer 3 is no boundary, so the input reading is the one."""
    cfg = draft_cfg([1, 2, 3], nested=True)
    cfg = DraftConfig.from_dict({**cfg.raw, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 3]}})
    assert cfg.aux_readings(L) == {"input": ("layer_in.2", "final_prenorm", "final_prenorm")}
    assert cfg.aux_layout_or_none(L) == ("layer_in.2", "final_prenorm", "final_prenorm")


def test_without_a_model_the_answer_is_a_claim(tmp_path):
    model = tiny_target("llama")
    ds = specforge_dir(tmp_path, samples(model))
    tl = trained_layout(ds, draft_cfg([-1, 0, 1], nested=True), L)
    assert tl.source == "config" and not tl.measured and tl.layout == TRAINED
    assert "claim" in tl.detail and "no target model" in tl.detail


def test_declared_layout_beats_the_config_and_identification_checks_it(tmp_path):
    model = tiny_target("llama")
    write_seed_dataset(tmp_path / "seed", samples(model), layout=("layer_in.1", "layer_in.2", "final_prenorm"),
                       info={"num_target_layers": L})
    ds = open_dataset(tmp_path / "seed")
    assert trained_layout(ds, None, L).source == "declared"
    tl = trained_layout(ds, draft_cfg([-1, 0, 1], nested=True), L, model=model)
    assert tl.source == "identified" and tl.layout == TRAINED
    assert tl.declared == ("layer_in.1", "layer_in.2", "final_prenorm") and tl.claims_disagree


def test_a_different_target_matches_nothing_and_keeps_the_claim(tmp_path):
    """States from another model (a since fine-tuned target): no slot matches, the claim stands and the
    unmatched slots are named (the drift check then measures how far off they are)."""
    ds = specforge_dir(tmp_path, samples(tiny_target("llama", seed=1)))
    tl = trained_layout(ds, draft_cfg([-1, 0, 1], nested=True), L, model=tiny_target("llama", seed=0))
    assert tl.source == "config" and tl.unmatched == (0, 1, 2) and tl.samples == 3
    assert "match no boundary" in tl.detail


def test_identify_slots_needs_every_sample_to_agree():
    model = tiny_target("llama")
    good = samples(model)
    bad = samples(model, layout=("embed", "layer_in.2", "layer_in.1"), n=1)
    ident, rows = identify_slots(model, good + bad)
    assert ident == ("embed", None, None)
    assert len(rows) == 3 * 4 and {r["slot"] for r in rows} == {0, 1, 2}


def test_nothing_to_go_on():
    tl = trained_layout(None, None, L)
    assert tl.layout is None and tl.source == "none"
    assert json.dumps(tl.to_dict())
