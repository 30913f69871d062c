"""Demo sweep: records carry the engine's own counters and effective settings, baseline included.

The fast test writes a tiny world (random target and draft, seed-format prompts) into tmp_path with the demo
world's file layout; the slow test sweeps the real demo world.
"""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from eagle3lib.demo import world as demo
from eagle3lib.model.checkpoint import save_draft
from eagle3lib.model.config import DraftConfig
from eagle3lib.samples.readers import Sample
from eagle3lib.samples.writers import write_seed_dataset
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.sglang_engine.emulator import SpecEngine
from eagle3lib.sglang_engine.emulator_settings import SpecSettings
from eagle3lib.errors import DataError
from eagle3lib.engine_kit.records import read_jsonl, write_jsonl
from eagle3lib.demo.sweep import demo_capture, demo_prompts, load_demo, run_demo_sweep

V, H, L = 64, 32, 4
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
         "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
         "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
         "vocab_size": V, "draft_vocab_size": 16, "target_hidden_size": H, "tie_word_embeddings": False,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1, 2], "use_aux_hidden_state": True}}


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory):
    """A demo-shaped world: HF target dir, SpecForge draft dir, seed-format held-out prompts."""
    root = tmp_path_factory.mktemp("world")
    p = demo.paths(root)
    torch.manual_seed(0)
    tcfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=64, num_hidden_layers=L, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, max_position_embeddings=512, eos_token_id=None)
    LlamaForCausalLM(tcfg).save_pretrained(p.target)
    draft = Eagle3Draft(DraftConfig.from_dict(DRAFT))
    with torch.no_grad():
        for prm in draft.parameters():
            prm.normal_(0, 0.2)
        draft.d2t.copy_(torch.arange(16) * 3)
    save_draft(draft, DRAFT, p.draft)
    samples = []
    for i in range(3):
        ids = torch.randint(6, V, (14,), generator=torch.Generator().manual_seed(i))
        mask = torch.zeros(14, dtype=torch.long)
        mask[8 + i:] = 1                                      # prompt = the 8 + i tokens before the "assistant" span
        samples.append(Sample(f"s{i}", ids, mask, torch.randn(14, 4, H)))
    write_seed_dataset(p.heldout_data, samples, layout="embed,layer_in.1,layer_in.2,layer_in.3")
    return root


def test_prompts_end_before_the_first_assistant_token(tiny_world):
    """demo_prompts cuts each sample before its first loss_mask = 1 token; unknown sets are refused."""
    prompts = demo_prompts("heldout", 2, root=tiny_world)
    assert [len(x) for x in prompts] == [8, 9]
    with pytest.raises(DataError, match="prompt set"):
        demo_prompts("bogus", 2, root=tiny_world)


def test_seed_capture_is_the_training_layout_without_embed(tiny_world):
    """'seed' = SGLang ids of [low, mid, high] (+1 rule), zero-padded; 'correct' = the draft's training layout."""
    world = load_demo(root=tiny_world)
    assert world.training_layout == ("embed", "layer_in.1", "layer_in.2", "layer_in.3")
    seed = demo_capture("seed", world)
    assert seed.layout(L) == ("layer_in.1", "layer_in.2", "layer_in.3") and seed.pad_policy == "zeros"
    assert demo_capture("correct", world).layout(L) == world.training_layout


def test_tiny_sweep_records_match_engine_counters(tiny_world, tmp_path):
    """Each record's accept length, counters and per-position rates equal a direct engine run; baseline first."""
    recs = run_demo_sweep([1, 3], captures=("correct", "seed"), repeats=2, max_new_tokens=10, num_prompts=2,
                          root=tiny_world, clock="cpu")
    assert [(r.series, r.num_steps) for r in recs] == [("baseline", 0), ("correct capture", 1),
                                                       ("correct capture", 3), ("seed capture", 1),
                                                       ("seed capture", 3)]
    assert recs[0].accept_length is None and recs[0].tok_s > 0 and recs[0].repeats == 2
    world = load_demo(root=tiny_world)
    prompts = demo_prompts("heldout", 2, world)
    for rec in recs[1:]:
        eng = SpecEngine(world.target, world.draft, demo_capture(rec.series.split()[0], world))
        runs = [eng.generate(x, 10, SpecSettings(rec.num_steps, 1, rec.num_steps + 1)) for x in prompts]
        taus = [t for r in runs for t in r.accept_lengths]
        assert rec.rounds == len(taus) and rec.accept_length == pytest.approx(sum(taus) / len(taus))
        assert rec.accepted == sum(r.accepted for r in runs) and rec.drafted == sum(r.drafted for r in runs)
        per_pos = [sum(c) / len(taus) for c in zip(*(r.accepted_per_position for r in runs))]
        assert rec.per_position == pytest.approx(per_pos)
        assert rec.num_draft_tokens == rec.num_steps + 1 and rec.source == "eagle3lib demo engine"
        assert rec.tok_s > 0 and "draft step" in rec.notes and "thread CPU clock" in rec.notes
    assert read_jsonl(write_jsonl(recs, tmp_path / "runs.jsonl")) == recs


def test_sweep_refuses_empty_plans(tiny_world):
    """No num_steps, zero repeats or an unknown clock is a DataError, before anything is loaded."""
    with pytest.raises(DataError, match="nothing to measure"):
        run_demo_sweep([], root=tiny_world)
    with pytest.raises(DataError, match="repeats=0"):
        run_demo_sweep([1], repeats=0, root=tiny_world)
    with pytest.raises(DataError, match="unknown clock"):
        run_demo_sweep([1], clock="gpu", root=tiny_world)


@pytest.mark.slow
def test_demo_sweep_records_match_engine_counters():
    """On the demo world, a one-repeat sweep's records carry the engine's own counters for each capture."""
    if not hasattr(demo, "ensure_world"):
        pytest.skip("eagle3lib.demo.ensure_world is not available yet (demo world builder missing)")
    recs = run_demo_sweep([3], repeats=1, max_new_tokens=32, num_prompts=3)
    assert [r.series for r in recs] == ["baseline", "correct capture", "seed capture"]
    world = load_demo()
    prompts = demo_prompts("heldout", 3, world)
    for rec in recs[1:]:
        eng = SpecEngine(world.target, world.draft, demo_capture(rec.series.split()[0], world))
        taus = [t for x in prompts for t in eng.generate(x, 32, SpecSettings(3, 1, 4)).accept_lengths]
        assert rec.rounds == len(taus) and rec.accept_length == pytest.approx(sum(taus) / len(taus))
        assert rec.num_draft_tokens == 4 and rec.tok_s > 0
