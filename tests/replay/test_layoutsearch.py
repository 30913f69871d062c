"""Tests for eagle3lib.replay.layoutsearch: the candidate wirings around a served layout, and the search that names the one
restoring the accuracy (missing embedding, d2t misreading, boundaries recaptured from a tiny HF target)."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.replay import layoutsearch as S
from eagle3lib.replay import run as R
from eagle3lib.replay import verdict as V
from eagle3lib.samples.readers import Sample
from tests.replay.test_run import LAYOUT, make_samples, make_setup

SERVED = ("layer_in.2", "layer_in.4", "layer_in.6")


def test_layout_candidates_cover_the_known_wirings():
    """Missing embedding, ids ±1 (with and without the embedding), 23 orders, final-norm swap; no duplicates."""
    cands = S.layout_candidates(SERVED, 4, 8, training_layout=LAYOUT)
    by = {c.name: c.layout for c in cands}
    assert by["as served"] == SERVED and by["add embedding slot"] == LAYOUT
    assert by["layer ids +1"] == ("layer_in.3", "layer_in.5", "layer_in.7")
    assert by["layer ids -1 + embedding"] == ("embed", "layer_in.1", "layer_in.3", "layer_in.5")
    assert sum(n.startswith("order") for n in by) == 23
    assert "training layout" not in by                        # same as "add embedding slot"
    assert len({(c.layout, c.d2t, c.align) for c in cands}) == len(cands)
    fin = {c.name: c.layout for c in S.layout_candidates(("embed", "layer_in.4", "final_prenorm"), 3, 8)}
    assert fin["other final norm"] == ("embed", "layer_in.4", "final_postnorm")
    assert fin["layer ids -1"] == ("embed", "layer_in.3", "layer_in.7") and "layer ids +1" not in fin
    assert S._shift(("layer_in.7",), 1, 8) == ("final_prenorm",) and S._shift(("final_prenorm",), 1, 8) is None


def test_search_names_the_missing_embedding(tmp_path):
    """Data where the draft is right 60% of the time under the training layout; served without the embedding,
    the search ranks 'add embedding slot' first and says it restores the accuracy."""
    setup = make_setup(tmp_path)
    samples, acc, _ = make_samples(setup, n=2)
    served = R.replay(setup, samples, layout=SERVED, fill="zeros", progress=False)
    assert V.decide(served, recorded_acc=acc).verdict == "wiring"
    s = S.search_layouts(setup, samples, SERVED, target_acc=acc, progress=False)
    assert s.best == "add embedding slot" and s.restored
    assert s.table.acc_0[0] == pytest.approx(acc) and "missing embedding" in s.message
    assert s.table.restores.sum() == 1
    untestable = s.table[s.table.acc_0.isna()]
    assert len(untestable) == 4 and untestable.note.str.contains("give a target").all()


def test_search_finds_a_d2t_misreading(tmp_path):
    """Data whose tokens follow the draft's ids read without d2t: the search names 'd2t ignored'."""
    setup = make_setup(tmp_path)
    samples, acc, _ = make_samples(setup, n=2, d2t="identity")
    s = S.search_layouts(setup, samples, LAYOUT, target_acc=acc, max_permutations=1, progress=False)
    assert s.best == "d2t ignored" and s.restored and s.table.acc_0[0] == pytest.approx(acc)


def test_search_recaptures_boundaries_the_samples_lack(tmp_path):
    """With a real (tiny) HF target, candidates naming other layers are recaptured; the draft driven by
    [embed, L3, L5, L7] is found from a served [L2, L4, L6] and samples carrying [embed, L2, L4, L6]."""
    transformers = pytest.importorskip("transformers")
    from eagle3lib.hidden.capture import capture
    from eagle3lib.model.checkpoint import save_draft
    from eagle3lib.model.config import DraftConfig
    from eagle3lib.model.draft import Eagle3Draft
    from tests.conftest import TINY_SPECFORGE
    cfg = transformers.LlamaConfig(vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    target = transformers.LlamaForCausalLM(cfg).eval()
    target.save_pretrained(tmp_path / "target")
    draft = Eagle3Draft(DraftConfig.from_dict(TINY_SPECFORGE))
    for p in draft.parameters():
        torch.nn.init.normal_(p, std=0.3)
    save_draft(draft, TINY_SPECFORGE, tmp_path / "draft")
    setup = R.load_setup(tmp_path / "draft", tmp_path / "target")
    true = ("embed", "layer_in.3", "layer_in.5", "layer_in.7")
    T, ids = 18, torch.tensor([3, 9] + [0] * 16)
    with torch.inference_mode():
        for t in range(T - 2):                                # x_{t+2} = the draft's step-0 guess under `true`
            aux = capture(target, ids[:t + 2], only=true).concat(true)          # (t+2, 4*32)
            ids[t + 2] = int(setup.model.ttt_forward(aux[None], ids[None, :t + 2], 1)[0][0, t].argmax())
        cap = capture(target, ids)
    sample = Sample("r0", ids, torch.ones(T, dtype=torch.long), cap.stack(LAYOUT), LAYOUT, None, "mem")
    s = S.search_layouts(setup, [sample], SERVED, target_acc=1.0, recapture=S.Recapture(tmp_path / "target"),
                         max_permutations=1, progress=False)
    assert s.best == "layer ids +1 + embedding" and s.restored and s.table.acc_0[0] == pytest.approx(1.0)
    assert s.table.note[0].startswith("recaptured")
