"""Simulated tree acceptance: topk 1 equals replay's chain, the batched tree equals the engine's incremental tree
drafting, bad settings are refused, and on the demo a tree accepts at least what the chain of its depth does."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.replay import run as R
from eagle3lib.errors import ServingArgsError
from eagle3lib.sglang_engine.tree import SlotCache, draft_tree, num_candidates, select_tree
from eagle3lib.replay.tree_acceptance import replay_tree, tree_candidates
from tests.replay.test_run import make_samples, make_setup


@pytest.mark.parametrize("mask", ["token", "next"])
def test_topk1_tree_replay_equals_the_chain_simulation(tmp_path, mask):
    """(K, 1, K+1) replays the same accept-length histogram as replay()'s chain simulation, position for position."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=3)
    chain = R.replay(setup, samples, num_steps=3, mask=mask, progress=False)
    tree = replay_tree(setup, samples, [(3, 1, 4)], mask=mask, progress=False)
    assert tree.settings == ((3, 1, 4),)
    hist = tree.histogram[tree.histogram.setting == "chain K=3"]
    assert hist["count"].tolist() == chain.histogram["count"].tolist() and hist["count"].sum() > 10
    assert tree.accept_length(3, 1, 4) == pytest.approx(chain.simulated_accept_length)
    assert 1.0 < chain.simulated_accept_length < 4.0
    d = tree.per_depth
    assert d.rate.tolist() == pytest.approx([(hist["count"][hist.accepted > k].sum()) / hist["count"].sum()
                                             for k in (1, 2, 3)])


def _same_trees(model, aux, input_ids, steps=3, topk=3, ndt=9):
    """At sampled positions, the batched candidates keep the same tree as the engine's KV-cached draft_tree."""
    with torch.inference_mode():
        built = tree_candidates(model, aux[None], input_ids[None], steps, topk)
        batched = select_tree(*built.candidates(), ndt, torch.zeros(1, len(input_ids), dtype=torch.long))
        for t in (0, 5, 11, 17):
            slots = SlotCache(model.new_cache(topk, 64))
            lg, h = model.step(aux[None, :t + 1], input_ids[None, 1:t + 2], torch.arange(t + 1)[None], slots.lead,
                               fuse=True)
            slots.share(0, t + 1)
            inc = draft_tree(model, lg[:, -1], h[:, -1:], t + 1, slots, steps, topk, ndt, 0)
            assert inc.tokens[1:].tolist() == batched.tokens[0, t, 1:].tolist(), t
            assert inc.parents.tolist() == batched.parents[0, t].tolist()
            assert torch.allclose(inc.scores, batched.scores[0, t].to(inc.scores.dtype))


def test_batched_tree_equals_incremental_engine_tree(tmp_path):
    """At sampled positions, replay's batched candidates keep the same tree as the engine's KV-cached draft_tree."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=1)
    s = samples[0]
    _same_trees(setup.model.double(), s.aux.flatten(1).double(), s.input_ids)    # aux (T, k, Ht) -> (T, k*Ht)


def test_batched_tree_equals_incremental_engine_tree_over_every_layer(tiny_cfg_dict):
    """The same for a 2-layer Qwen3 draft: both run every decoder layer, each with its own keys."""
    torch.manual_seed(0)
    model = Eagle3Draft(DraftConfig.from_dict(dict(tiny_cfg_dict, num_hidden_layers=2, model_type="qwen3"))).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0, 0.3)
        model.d2t.copy_(torch.arange(40))                            # draft id i -> target id 2i
    _same_trees(model.eval(), torch.randn(24, 4 * 32, dtype=torch.float64), torch.randint(0, 120, (24,)))


def test_bad_tree_settings_are_refused(tmp_path):
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=1)
    for bad in [(3, 2, num_candidates(3, 2) + 2), (0, 1, 2), (3, 1, 1), "548"]:
        with pytest.raises(ServingArgsError, match="tree setting"):
            replay_tree(setup, samples, [bad], progress=False)


@pytest.mark.slow
def test_demo_tree_accepts_at_least_the_chain_of_its_depth():
    """On the demo world's held-out and training samples, trees accept >= the chain of the same num_steps."""
    from eagle3lib.demo import world as demo

    p = demo.ensure_world()
    setup = R.load_setup(p.draft, p.target)
    for data in (p.heldout_data, p.seed_data):
        r = replay_tree(setup, data, [(5, 4, 8), (3, 4, 8), (5, 2, 8)], n=8, progress=False)
        trees = r.table[r.table.kind == "tree"]
        assert len(trees) == 3 and r.positions > 100
        assert (trees.accept_length >= trees.chain_accept_length).all(), r.table
        assert r.accept_length(5, 4, 8) > r.accept_length(5, 1, 6)
