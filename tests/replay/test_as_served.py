"""Tests for eagle3lib.replay.as_served: the demo draft replayed as an engine loads it, aspect by aspect (what a
served τ decides of those replays: tests/checks/test_served_loss.py)."""
from __future__ import annotations

import pytest
from safetensors.torch import load_file

from eagle3demo import deployments
from eagle3lib.demo import world as demo
from eagle3lib.engine_kit.view import Aspect, EngineView
from eagle3lib.replay.as_served import replay_as_served
from eagle3lib.replay.layoutsearch import Recapture
from eagle3lib.replay.run import identify_training_layout, load_setup, replay, with_trained_layout

TRAINED = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")


def view(**values) -> EngineView:
    base = {"layout": TRAINED, "d2t": "checkpoint", "embedding": "target", "lm_head": "own"}
    base.update(values)
    return EngineView("vllm", "0.32.0", "v1", {k: Aspect(k, v, "log" if k == "layout" else "probe", "test")
                                               for k, v in base.items()}, 4)


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


def setup_of(world, draft):
    s = load_setup(draft, world.target)
    return with_trained_layout(s, identify_training_layout(s, world.specforge_data))


@pytest.mark.slow
def test_each_planted_aspect_replays_lower_and_alone(world, tmp_path):
    healthy = setup_of(world, deployments.write_deployment("healthy", tmp_path / "h"))
    assert healthy.training_layout == TRAINED and healthy.training_layout_source == "identified"
    a = replay_as_served(healthy, world.heldout_data, view(), num_steps=3, n=12)
    assert a.differing == () and [r.label for r in a.replays] == ["as trained"]
    # vLLM 0.32 counts a draft of the token past the answer's end (row metric accepted_past_stop_counted)
    plain = replay(healthy, world.heldout_data, n=12, num_steps=3, progress=False, past_stop=True).summary()
    assert a.get("as trained").tau == pytest.approx(plain["walked_accept_length"])        # where the engine drafts
    assert a.get("as trained").tau_every_position == pytest.approx(plain["simulated_accept_length"])
    assert a.get("as trained").drafts == plain["walked_drafts"] > 12
    assert a.get("as trained").tau > 3.0

    # d2t left at zeros: draft id i served as target id i
    d = replay_as_served(healthy, world.heldout_data, view(d2t="zeros"), num_steps=3, n=12)
    assert d.differing == ("d2t",) and d.get("as served").tau < d.get("as trained").tau - 1.0
    # the shipped random embedding: it was trained with the target's, the engine keeps its own
    emb_dir = deployments.write_deployment("own_embedding", tmp_path / "e")
    own = load_file(str(emb_dir / "model.safetensors"))["embed_tokens.weight"]
    e = replay_as_served(setup_of(world, emb_dir), world.heldout_data, view(embedding="own"), num_steps=3, n=12,
                         own_embed=own, shipped={"embed_tokens.weight"})
    assert e.trained["embedding"] == "target" and any("trained with the target's" in x for x in e.notes)
    assert e.get("as served").tau < e.get("as trained").tau - 1.0
    # two aspects at once: each is replayed alone too
    both = replay_as_served(healthy, world.heldout_data, view(d2t="zeros", lm_head="target_sliced"), num_steps=3,
                            n=8, shipped={"lm_head.weight"})
    assert set(both.differing) == {"d2t", "lm_head"}
    assert {r.label for r in both.replays} == {"as trained", "as served", "d2t as served", "lm_head as served"}


@pytest.mark.slow
def test_served_layout_recaptured_and_rope_measured(world, tmp_path):
    healthy = setup_of(world, deployments.write_deployment("healthy", tmp_path / "h"))
    shifted = ("layer_in.1", "layer_in.3", "layer_in.5", "layer_in.7")
    lay = replay_as_served(healthy, world.heldout_data, view(layout=shifted), num_steps=3, n=8,
                           recapture=Recapture(world.target))
    assert lay.get("as served").layout == shifted and lay.notes == ()
    assert lay.get("as served").tau < lay.get("as trained").tau - 1.0
    zeros = replay_as_served(healthy, world.heldout_data, view(layout=shifted), num_steps=3, n=4)
    assert any("replayed as zeros" in x for x in zeros.notes)
    # the config's RoPE (1e6) against the target's (1e4): the better one is what it was trained with
    rope = setup_of(world, deployments.write_deployment("rope_theta", tmp_path / "r"))
    r = replay_as_served(rope, world.heldout_data, view(), num_steps=3, n=8, trained_rope={"rope_theta": 1e4})
    assert r.trained["rope"] == {"rope_theta": 1e4} and r.differing == ("rope",)
    assert r.get("as served").tau < r.get("as trained").tau
    clean = replay_as_served(healthy, world.heldout_data, view(), num_steps=3, n=8, trained_rope={"rope_theta": 1e6})
    assert clean.trained["rope"] == {} and clean.differing == ()


@pytest.mark.slow
def test_a_draft_loaded_with_a_stand_in_head_names_that_cause_unknown(world, tmp_path):
    d = deployments.write_deployment("no_lm_head", tmp_path / "n")
    s = load_setup(d, world.target, missing="fill")
    s = with_trained_layout(s, identify_training_layout(s, world.specforge_data))
    assert [f.cause for f in s.filled] == ["lm_head_missing"]
    a = replay_as_served(s, world.heldout_data, view(lm_head="target_sliced"), num_steps=3, n=8, shipped=set())
    assert a.unknown == ("lm_head_missing",) and a.differing == ()
    healthy = setup_of(world, deployments.write_deployment("healthy", tmp_path / "h"))
    assert replay_as_served(healthy, world.heldout_data, view(), num_steps=3, n=4).unknown == ()


@pytest.mark.slow
def test_mis_shaped_projections_are_replayed_as_the_engine_loads_them(world, tmp_path):
    """num_key_value_heads 4 over k/v trained for 2: eagle3lib's loader stands in a seeded random init; a view saying
    the engine zero-pads them (SGLang on the CPU) replays the checkpoint's rows first and zeros past them, says so,
    and gives the model its stand-in back (measured on the real SGLang: served 1.73; padded replay ~1.8, the random
    stand-in ~1.4)."""
    import torch
    from eagle3demo import faults
    fault = next(f for f in faults.singles() if f.name == "num_key_value_heads")
    d = faults.write_fault(fault, tmp_path / "kv", world=world, engine="sglang")
    s = setup_of(world, d)
    assert {f.key.rsplit(".", 2)[-2] for f in s.filled} == {"k_proj", "v_proj"}
    k = s.model.midlayer.self_attn.k_proj.weight
    before = k.detach().clone()
    plain = replay_as_served(s, world.heldout_data, view(), num_steps=3, n=16)
    padded = replay_as_served(s, world.heldout_data, view(mis_shaped="padded"), num_steps=3, n=16)
    assert torch.equal(k.detach(), before)                                   # the stand-in is back
    assert any("k_proj" in n and "zeros past them" in n for n in padded.notes)
    assert not any("zeros past them" in n for n in plain.notes)
    assert padded.get("as trained").tau > plain.get("as trained").tau + 0.2
