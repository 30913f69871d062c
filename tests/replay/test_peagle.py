"""replay() on a P-EAGLE draft: per-depth accuracy on the rows COD sampling keeps, counted against drafts made the
way a server makes them (KV-cached `step`: the context, then K-1 mask slots appended, causal)."""
from __future__ import annotations


import pytest
import torch

from eagle3lib.errors import ConfigError
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.peagle import PEagleDraft
from eagle3lib.replay import loop as L, run as R
from eagle3lib.replay.stats import ReplaySetup
from eagle3lib.samples.sample import Sample
from tests.replay.test_run import make_setup as make_eagle3_setup

LAYOUT = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")   # TINY_SPECFORGE ids [-1,1,3,5] of an 8-layer target
K = 3


def make_setup(tmp_path, mask_token_id=5, layers=1) -> ReplaySetup:
    """A random tiny P-EAGLE draft (Vd=40 of V=120) and a target dir with config, embedding and lm_head."""
    over = {"architectures": ["PEagleDraftModel"], "num_hidden_layers": layers}
    if mask_token_id is not None:
        over["mask_token_id"] = mask_token_id
    return make_eagle3_setup(tmp_path, over=over, cls=PEagleDraft)


def served_drafts(model: PEagleDraft, aux: torch.Tensor, ids: torch.Tensor, a: int) -> list[int]:
    """The K target ids a server drafts from anchor a: the context 0..a (aux, token t+1) through the KV-cached step,
    then K-1 slots of (fc(mask_hidden), mask token) at positions a+1.. appended, each seeing the slots before it."""
    hot = L.draft_target_ids(model)
    cache = model.new_cache(1, a + K + 1)
    with torch.inference_mode():
        ctx, _ = model.step(aux[None, :a + 1], ids[None, 1:a + 2], torch.arange(a + 1)[None], cache, fuse=True)
        masks = model.fuse(model.mask_hidden).expand(1, K - 1, -1)                     # (1, 1, H) -> (1, K-1, H)
        tail, _ = model.step(masks, torch.full((1, K - 1), model.mask_token_id), torch.arange(a + 1, a + K)[None],
                             cache)
    return [int(hot[x.argmax()]) for x in torch.cat([ctx[0, -1:], tail[0]])]


def make_samples(model, n=3, T=26, seed=0):
    """Samples whose tokens follow the served drafts of every (K+1)-th anchor for all K depths (the rest random),
    so every depth has hits; the mask holds on [4, T-3)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        aux = torch.randn(T, 4, 32, generator=g)
        ids = torch.randint(0, 120, (T,), generator=g)
        for a in range(2, T - K - 1, K + 1):
            ids[a + 2:a + 2 + K] = torch.tensor(served_drafts(model, aux.flatten(1), ids, a))
        mask = torch.zeros(T, dtype=torch.long)
        mask[4:T - 3] = 1
        out.append(Sample(f"s{i}", ids, mask, aux, LAYOUT, None, f"mem:{i}"))
    return out


def expected(model, samples, mask_mode):
    """(valid, correct) per depth and the mean accepted length of full-horizon anchors, from the served drafts:
    depth d >= 1 at anchor a is counted where the masks of depths 1..d all hold (P-EAGLE's COD pool)."""
    valid, correct, accepted = [0] * K, [0] * K, []
    for s in samples:
        T, lm = len(s.input_ids), s.loss_mask.bool().tolist()
        m = lambda a, d: (a + d + (mask_mode == "next")) < T and lm[a + d + (mask_mode == "next")]  # noqa: E731
        for a in range(T - 2):
            drafts = served_drafts(model, s.aux.flatten(1), s.input_ids, a)
            ok = [(a + 2 + d < T) and (m(a, 0) if d == 0 else all(m(a, j) for j in range(1, d + 1)))
                  for d in range(K)]
            hit = [ok[d] and drafts[d] == int(s.input_ids[a + 2 + d]) for d in range(K)]
            for d in range(K):
                valid[d] += ok[d]
                correct[d] += hit[d]
            if all(ok):
                run = next((d for d in range(K) if not hit[d]), K)
                accepted.append(1 + run)
    return valid, correct, sum(accepted) / len(accepted)


@pytest.mark.parametrize("mask,layers", [("token", 1), ("next", 1), ("token", 2)])
def test_replay_reports_p_eagle_per_depth_accuracy(tmp_path, mask, layers):
    setup = make_setup(tmp_path, layers=layers)
    assert isinstance(setup.model, PEagleDraft) and any("P-EAGLE" in n for n in setup.notes)
    samples = make_samples(setup.model)
    valid, correct, accept = expected(setup.model, samples, mask)
    r = R.replay(setup, samples, num_steps=K, mask=mask, progress=False)
    assert r.reference == "data" and not r.skipped
    assert r.per_step.positions.tolist() == valid
    assert r.per_step.acc.tolist() == pytest.approx([c / v for c, v in zip(correct, valid)])
    assert all(c > 0 for c in correct)                           # every depth has hits: the case is not degenerate
    assert r.simulated_accept_length == pytest.approx(accept)
    small = R.replay(setup, samples, num_steps=K, mask=mask, batch_tokens=30, only_scored=False, progress=False)
    assert small.per_step.acc.tolist() == pytest.approx(r.per_step.acc.tolist())
    assert small.simulated_accept_length == pytest.approx(accept)


def test_untrained_depths_are_noted_and_an_unknown_mask_token_is_an_error(tmp_path):
    setup = make_setup(tmp_path / "a")
    object.__setattr__(setup, "cfg", DraftConfig.from_dict({**setup.cfg.raw, "num_depths": 2}))
    r = R.replay(setup, make_samples(setup.model, n=1), num_steps=K, progress=False)
    assert any("never trained" in n for n in r.notes)
    bare = make_setup(tmp_path / "b", mask_token_id=None)             # SpecForge: no mask id, no tokenizer here
    assert bare.model.mask_token_id is None and any("mask token unknown" in n for n in bare.notes)
    with pytest.raises(ConfigError, match="mask_token_id"):
        R.replay(bare, make_samples(setup.model, n=1), num_steps=K, progress=False)


def test_token_view_shows_the_parallel_drafts_and_tree_replay_refuses_p_eagle(tmp_path):
    from eagle3lib.errors import UnsupportedDraftError
    from eagle3lib.replay.tokenview import collect
    from eagle3lib.replay.tree_acceptance import replay_tree
    setup = make_setup(tmp_path)
    samples = make_samples(setup.model, n=1)
    (detail,) = collect(setup, samples, n=1, num_steps=K)
    s = samples[0]
    for a in (2, 7):                                             # served-way drafts, depth by depth
        assert detail.chain_ids[:, a].tolist() == served_drafts(setup.model, s.aux.flatten(1), s.input_ids, a)
    with pytest.raises(UnsupportedDraftError, match="P-EAGLE"):
        replay_tree(setup, samples, [(3, 2, 4)], progress=False)
