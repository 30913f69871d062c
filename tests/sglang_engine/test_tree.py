"""SGLang-style draft trees: node selection (against SGLang's own test case), mask, greedy path, and tree drafting in
the offline engine (greedy equivalence, topk 1 == chain, the target cache after accepted side branches, logs).

Tiny random float64 Llama targets and drafts are built here, as in test_emulator.py.
"""
from __future__ import annotations

import pytest
import torch

from eagle3lib.hidden.capture import capture_for_layout
from eagle3lib.engine_kit.capturespec import CaptureSpec
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.sglang_engine.emulator import SpecEngine
from eagle3lib.errors import DataError, ServingArgsError
from eagle3lib.sglang_engine.run_log import parse_sglang_log
from eagle3lib.sglang_engine.emulator_settings import SpecSettings
from eagle3lib.sglang_engine.tree import (TreeBuilder, best_first, greedy_path, num_candidates, select_tree,
    top_children, verify_inputs)

from tests.sglang_engine.test_emulator import H, L, V, OracleDraft, prompt, random_draft, reference, target  # noqa: F401 (shared)
LAYOUT = ("embed", "layer_in.1", "layer_in.2", "layer_in.3")


def draft_cfg(draft_vocab: int = 16) -> DraftConfig:
    return DraftConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
        "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 512,
        "vocab_size": V, "draft_vocab_size": draft_vocab, "target_hidden_size": H, "num_aux_hidden_states": 4,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1, 2]}})


class SecondChoiceOracle(OracleDraft):
    """Real draft layer (caches written as usual); the row at position q ranks the true token q+2 first, except at
    `wrong` positions where a wrong token is first and the true one second (a tree with topk >= 2 still has it)."""

    def ranked(self, logits, positions):
        out = torch.full_like(logits, -1e4)
        for b, row in enumerate(positions.tolist()):
            for s, q in enumerate(row):
                t = self.truth[q + 2]
                if q + 2 in self.wrong:
                    out[b, s, (t + 1) % V], out[b, s, t] = 0.0, -1.0
                else:
                    out[b, s, t] = 0.0
        return out


# ---- node selection -------------------------------------------------------------------------------------------
def test_selection_matches_sglang_reference_case():
    """SGLang's own build_tree_kernel_efficient test (batch 0 and 1, topk 4, depth 4, 8 nodes): same kept tokens,
    positions (seq_len + depth) and parent structure (their retrive_next_token / next_sibling lists)."""
    s0 = [[7.1127e-01, 2.8292e-01, 2.2995e-03, 1.7357e-03], [9.7476e-01, 2.2219e-02, 6.5031e-04, 1.3212e-04]]
    s1 = [[[6.9142e-01, 1.2863e-02, 1.6873e-03, 1.1871e-03], [2.4787e-01, 1.8818e-02, 1.4204e-02, 9.2235e-04],
           [2.2971e-03, 1.6700e-06, 1.8737e-07, 8.3146e-08], [1.2771e-03, 2.4374e-04, 1.7832e-04, 1.1947e-05]],
          [[8.4832e-02, 6.6068e-02, 5.8304e-02, 5.7851e-02], [2.3616e-03, 1.1243e-03, 5.4368e-04, 2.7768e-04],
           [2.5286e-04, 1.5578e-04, 2.8817e-05, 1.2888e-05], [1.2834e-04, 2.5417e-06, 1.1279e-06, 1.6088e-08]]]
    s2 = [[[6.6438e-01, 2.6997e-02, 2.4236e-05, 4.0821e-06], [2.4402e-01, 2.8409e-03, 5.0935e-04, 2.9022e-04],
           [1.6178e-02, 2.0567e-03, 4.5892e-04, 3.0034e-05], [1.3023e-02, 5.0497e-04, 3.6371e-04, 8.7750e-05]],
          [[2.3263e-02, 2.0054e-02, 9.3990e-03, 2.7783e-03], [6.4156e-02, 5.5506e-04, 1.0429e-04, 9.7211e-05],
           [4.9950e-02, 5.0630e-03, 9.0068e-04, 3.3656e-04], [7.5817e-03, 8.5731e-04, 6.9972e-04, 6.0793e-04]]]
    s3 = [[[6.6420e-01, 1.0525e-04, 6.5864e-05, 1.2253e-06], [1.3019e-01, 1.0461e-01, 5.2083e-03, 1.6777e-03],
           [2.0103e-02, 6.7335e-03, 1.2625e-04, 1.0364e-05], [1.5142e-02, 7.0819e-04, 9.6595e-05, 8.7951e-05]],
          [[5.8608e-02, 1.8840e-03, 7.8535e-04, 4.4400e-04], [1.2185e-02, 2.0684e-03, 1.7418e-03, 1.4327e-03],
           [6.2455e-03, 6.1487e-03, 2.6862e-03, 1.8034e-03], [1.8590e-03, 1.6151e-03, 1.2481e-03, 3.6038e-04]]]
    t0 = [[29896, 29906, 29900, 29945], [13, 2, 29871, 28956]]
    t1 = [[29889, 29974, 29945, 29900, 29974, 29922, 29930, 29958, 29889, 29974, 29930, 29945, 29974, 29922, 29930,
           29958], [22550, 4136, 16492, 8439, 29871, 2, 3001, 13, 2, 13, 29906, 29946, 2, 13, 29871, 259]]
    t2 = [[29946, 29945, 29953, 29906, 29896, 29945, 29900, 29906, 29896, 29945, 29906, 29953, 29896, 29945, 29906,
           29946], [29871, 2, 29901, 29889, 29871, 2, 395, 259, 29901, 29871, 2, 29889, 3001, 1234, 7146, 2186]]
    t3 = [[29946, 29974, 29945, 29930, 29889, 29922, 29974, 29930, 29974, 29946, 29930, 29922, 29889, 29974, 29945,
           29922], [29941, 29906, 2, 29946, 29871, 450, 319, 14990, 29946, 29941, 2, 29906, 29871, 2, 3001, 13]]
    beams = [[[4, 8, 9, 10], [4, 5, 6, 7]], [[20, 24, 21, 28], [24, 28, 20, 21]]]   # SGLang's parents_list[1:3]
    k = 4
    blocks = [torch.tensor(s0, dtype=torch.float64)] + [torch.tensor(s, dtype=torch.float64).flatten(-2)
                                                        for s in (s1, s2, s3)]
    for i, want in enumerate(beams, start=1):                                # the beam rule picks SGLang's beams
        assert (best_first(blocks[i], k) + k + (i - 1) * k * k).tolist() == want
    scores = torch.cat(blocks, -1)
    tokens = torch.cat([torch.tensor(t) for t in (t0, t1, t2, t3)], -1)
    assert scores.shape[-1] == num_candidates(4, 4) == 52
    parent_list = torch.cat([torch.tensor([[-1, 0, 1, 2, 3]] * 2), torch.tensor(beams[0]), torch.tensor(beams[1])], 1)
    idx = torch.arange(52)
    parents = torch.where(idx < k, -1, parent_list[:, (idx // k).clamp(max=12)])   # SGLang: parent_list[idx // topk]
    depths = torch.tensor([1] * 4 + [2] * 16 + [3] * 16 + [4] * 16)
    tree = select_tree(scores, tokens, parents, depths, 8, torch.tensor([29974, 13]))
    assert tree.tokens.tolist() == [[29974, 29896, 29906, 29889, 29974, 29946, 29896, 29946],
                                    [13, 13, 22550, 4136, 16492, 8439, 29871, 29941]]
    assert (torch.tensor([[5], [10]]) + tree.depths).tolist() == [[5, 6, 6, 7, 7, 8, 8, 9],
                                                                  [10, 11, 12, 12, 12, 12, 13, 14]]
    assert tree.parents.tolist() == [[-1, 0, 0, 1, 2, 3, 4, 5], [-1, 0, 1, 1, 1, 1, 3, 6]]


def test_builder_mask_and_greedy_path_by_hand():
    """topk 2, 2 steps: beams follow cumulative scores; the mask is ancestors-or-self; the greedy path may take a
    second child; verify inputs place nodes at prefix + depth."""
    b = TreeBuilder(2)
    tok = b.expand_root(torch.tensor([0.6, 0.3]), torch.tensor([10, 20]))
    assert tok.tolist() == [10, 20]
    tok, parent = b.expand(torch.tensor([[0.5, 0.4], [0.9, 0.1]]), torch.tensor([[11, 12], [21, 22]]))
    assert tok.tolist() == [11, 21] and parent.tolist() == [0, 1]          # 0.30 and 0.27 beat 0.24
    scores, tokens, parents, depths = b.candidates()
    assert parents.tolist() == [-1, -1, 0, 0, 1, 1] and depths.tolist() == [1, 1, 2, 2, 2, 2]
    tree = select_tree(scores, tokens, parents, depths, 5, torch.tensor(7))   # keeps 0.6, 0.3, 0.30, 0.27
    assert tree.tokens.tolist() == [7, 10, 20, 11, 21] and tree.parents.tolist() == [-1, 0, 0, 1, 2]
    m = tree.mask().int().tolist()
    assert m == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]]
    # target: after 7 comes 20 (second child), after 20 comes 21, after 21 comes 5 (bonus)
    target_next = torch.tensor([20, 99, 21, 99, 5])
    assert greedy_path(tree, target_next) == [0, 2, 4]
    assert greedy_path(tree, torch.tensor([30, 0, 0, 0, 0])) == [0]
    kw = verify_inputs(tree, 9, torch.float64)
    assert kw["position_ids"].tolist() == [[9, 10, 10, 11, 11]]
    assert kw["attention_mask"].shape == (1, 1, 5, 14) and (kw["attention_mask"][0, 0, :, :9] == 0).all()
    with pytest.raises(ServingArgsError, match="num_draft_tokens"):
        select_tree(scores, tokens, parents, depths, 8, torch.tensor(7))
    rising = torch.tensor([0.6, 0.3, 0.9, 0.1, 0.2, 0.1])              # a child above its parent: not cumulative
    with pytest.raises(DataError, match="parent was dropped"):
        select_tree(rising, tokens, parents, depths, 2, torch.tensor(7))


def test_top_children_topk1_is_the_chain_argmax():
    logits = torch.tensor([[0.1, 3.0, 3.0, -1.0], [2.0, 0.0, 5.0, 5.0]])
    p, idx = top_children(logits, 1)
    assert idx[:, 0].tolist() == logits.argmax(-1).tolist() == [1, 2]
    assert torch.allclose(p[:, 0], logits.softmax(-1).amax(-1))


# ---- the engine --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings", [(5, 4, 8), (2, 4, 16), (4, 3, 30)])
def test_tree_output_equals_target_greedy(target, prompt, reference, settings):
    """Tree drafting with a random draft (d2t offsets) returns exactly the target-only greedy tokens."""
    eng = SpecEngine(target, random_draft(draft_cfg()), CaptureSpec.from_layout(LAYOUT))
    r = eng.generate(prompt, 24, SpecSettings(*settings))
    assert r.output_ids == reference[:24]
    assert (r.effective.num_steps, r.effective.topk, r.effective.num_draft_tokens) == settings
    assert len(r.accepted_per_position) == settings[0]


@pytest.mark.parametrize("steps", [1, 3])
def test_topk1_tree_equals_chain_exactly(target, prompt, steps):
    """The tree code with topk 1 drafts, accepts and logs exactly what the chain does."""
    truth = list(prompt.tolist()) + list(SpecEngine(target).generate(prompt, 48, SpecSettings.baseline()).output_ids)
    draft = random_draft(draft_cfg(V), SecondChoiceOracle, truth=truth, wrong={15, 19, 20, 26, 33})
    st = SpecSettings(steps, 1, steps + 1, decode_log_interval=2)
    chain = SpecEngine(target, draft, CaptureSpec.from_layout(LAYOUT)).generate(prompt, 30, st, keep_aux=True)
    tree = SpecEngine(target, draft, CaptureSpec.from_layout(LAYOUT)).generate(prompt, 30, st, keep_aux=True,
                                                                               tree=True)
    assert tree.output_ids == chain.output_ids and tree.accept_lengths == chain.accept_lengths
    assert tree.accepted_per_position == chain.accepted_per_position and 1 < chain.accept_length
    assert torch.equal(tree.aux, chain.aux) and torch.equal(tree.aux_ids, chain.aux_ids)
    def counters(res):         # decode lines without the timestamp and the timed throughput
        return [ln.split("] ", 1)[1].split(", cuda graph")[0] for ln in res.log_lines if "Decode" in ln]
    assert counters(chain) == counters(tree) and counters(chain)


def test_tree_finds_second_choices_and_keeps_both_caches_right(target, prompt, reference):
    """A draft whose first choice is wrong at some positions: the full topk-2 tree accepts 3 tokens every round
    (its second children), the chain less; captured states and the draft cache equal a fresh no-cache pass, so the
    accepted side branches were moved into place in the target cache."""
    truth = list(prompt.tolist()) + list(reference)
    wrong = {14, 15, 19, 24, 25, 31, 36}
    draft = random_draft(draft_cfg(V), SecondChoiceOracle, truth=truth, wrong=wrong)
    eng = SpecEngine(target, draft, CaptureSpec.from_layout(LAYOUT))
    chain = eng.generate(prompt, 30, SpecSettings(2, 1, 3))
    r = eng.generate(prompt, 30, SpecSettings(2, 2, 7), keep_aux=True)
    assert r.output_ids == chain.output_ids == reference[:30]
    assert set(r.accept_lengths) == {3} and chain.accept_length < 3
    P = r.aux.shape[0]
    seq = torch.tensor(truth[:P + 1])
    assert torch.equal(r.aux_ids, seq[:P])
    fresh = capture_for_layout(target, seq[:P], LAYOUT)
    assert torch.allclose(r.aux, fresh, atol=1e-9), (r.aux - fresh).abs().max()
    rows = draft.caches[-2]                                     # the slot cache of the last beam step
    ref_cache = draft.new_cache(1, rows.max_len)
    Eagle3Draft.step(draft, fresh[None], seq[None, 1:P + 1], torch.arange(P)[None], ref_cache, fuse=True)
    for got, ref in zip(rows.layers, ref_cache.layers, strict=True):             # one cache per decoder layer
        assert got.k.shape[0] == 2
        assert torch.allclose(got.k[:, :, :P], ref.k[:, :, :P].expand_as(got.k[:, :, :P]), atol=1e-9)


def test_tree_log_lines_parse_as_sglang(target, prompt):
    """A tree run logs topk / num_draft_tokens in server_args and decode lines whose accept len matches."""
    eng = SpecEngine(target, random_draft(draft_cfg()), CaptureSpec.from_layout(LAYOUT), model_path="/m")
    r = eng.generate(prompt, 30, SpecSettings(3, 2, 6, decode_log_interval=4))
    recs = parse_sglang_log("engine", text="\n".join(r.log_lines)).records
    assert len(recs) == 1 and (recs[0].num_steps, recs[0].topk, recs[0].num_draft_tokens) == (3, 2, 6)
    logged = sum(r.accept_lengths[:4 * (r.rounds // 4)]) / (4 * (r.rounds // 4))
    assert recs[0].accept_length == pytest.approx(logged, abs=0.006)


@pytest.mark.slow
def test_demo_auto_tree_keeps_greedy_and_accepts_more_than_the_chain():
    """The demo world unset knobs resolve to SGLang's Llama tree (5, 4, 8): output equals the baseline's, and
    it accepts more per round than the chain of the same depth."""
    from eagle3lib.demo.sweep import demo_capture, demo_prompts, load_demo

    world = load_demo("cpu")
    eng = SpecEngine(world.target, world.draft, demo_capture("correct", world))
    tree_taus, chain_taus = [], []
    for ids in demo_prompts("heldout", 3, world):
        base = eng.generate(ids, 32, SpecSettings.baseline())
        tree = eng.generate(ids, 32, SpecSettings(None, None, None))
        chain = eng.generate(ids, 32, SpecSettings(5, 1, 6))
        assert tree.output_ids == chain.output_ids == base.output_ids
        tree_taus += tree.accept_lengths
        chain_taus += chain.accept_lengths
    assert (tree.effective.num_steps, tree.effective.topk, tree.effective.num_draft_tokens) == (5, 4, 8)
    assert sum(tree_taus) / len(tree_taus) > sum(chain_taus) / len(chain_taus)
