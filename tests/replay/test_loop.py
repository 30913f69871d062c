"""Tests for eagle3lib.replay.loop: the one draft-run loop gives each of its four callers (the replay, the token view,
the accuracy by position, the audit's forward preview) the numbers they gave before it existed (pinned from the
code of commit a5d06bf, each caller with its own loop), on the demo world and on a P-EAGLE draft."""
from __future__ import annotations

import hashlib

import pytest
import torch

from eagle3lib.model.audit import audit_draft, target_tokenizer
from eagle3lib.replay import evidence, items as I, loop as L, run as R, tokenview as TV
from eagle3lib.samples.readers import open_dataset
from tests.replay import test_peagle as TP
from tests.replay.test_run import make_samples, make_setup

# digests computed on a5d06bf (before the loop): replay summary, collect per sample, by-position rows, preview
BEFORE = {
    "demo": {"replay": [[0.9167, 0.9, 0.875], [0.9167, 0.8962, 0.8901], 3.463, 3.4695, 120],
             "collect": [[128, 147, 164, 193.3145, "9e7fd74e0de4"], [60, 63, 73, 94.067, "b34435ed9815"]],
             "by_position": [["0-64", 114, 0.921053], ["64-128", 6, 0.833333]], "preview": [12, "f2cdaaaba0e3"]},
    "peagle": {"replay": [[0.2105, 0.4561, 0.4074], [0.2105, 1.0, 1.0], 1.7059, 1.6316, 57],
               "collect": [[18, 56, 31, 16.9021, "07f6253edc43"], [21, 56, 31, 17.4668, "d96c5ec1a128"]],
               "by_position": [["0-64", 57, 0.210526]], "preview": [12, "151bb85677b8"]},
}


def _h(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()[:12]


def digest(setup, data, model, sample, tokenizer) -> dict:
    """The numbers each caller of the loop reports, in the form BEFORE pins them."""
    r = R.replay(setup, data, n=4, num_steps=3, progress=False).summary()
    det = TV.collect(setup, data, n=2, num_steps=3, topk=4)
    t = evidence.accuracy_by_position(setup, data, n=4)
    df = TV.preview_table(model, sample.input_ids, sample.aux_concat(), tokenizer, num_steps=3)
    return {"replay": [r["acc_per_step"], r["cond_acc"], r["simulated_accept_length"], r["expected_accept_length"],
                       r["positions"]],
            "collect": [[int(d.correct.sum()), int(d.valid.sum()), int(d.accepted.sum()),
                         round(float(d.topk_probs.sum()), 4), _h(str(d.topk_ids.tolist()) + str(d.chain_ids.tolist()))]
                        for d in det],
            "by_position": [[b, int(p), round(a, 6)] for b, p, a in zip(t.bucket, t.positions, t.acc)],
            "preview": [len(df), _h(df.to_csv())]}


def test_the_four_callers_give_the_p_eagle_numbers_of_before(tmp_path):
    """On a P-EAGLE draft (its depths from one forward): replay, token view, by position and preview unchanged."""
    torch.manual_seed(0)
    setup = TP.make_setup(tmp_path)
    samples = TP.make_samples(setup.model, n=3)
    a = audit_draft(tmp_path / "draft", tmp_path / "target")
    assert digest(setup, samples, a.loaded.model, samples[0], None) == BEFORE["peagle"]


@pytest.mark.slow
def test_the_four_callers_give_the_demo_numbers_of_before():
    """On the demo world's draft and seed data: replay, token view, by position and preview unchanged."""
    from eagle3lib.demo import world as demo
    w = demo.ensure_world(progress=False)
    setup = R.load_setup(w.draft, w.target)
    a = audit_draft(w.draft, w.target)
    s = next(open_dataset(w.seed_data).sample(1, seed=0))
    assert digest(setup, w.seed_data, a.loaded.model, s, target_tokenizer(w.target)) == BEFORE["demo"]


def test_batched_runs_equal_one_at_a_time(tmp_path):
    """Items padded into one batch give each the predictions and scores they get alone (right padding unseen)."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=3)
    items = [I.prepare_sample(s, setup, None) for s in samples]
    alone = list(L.draft_run(setup.model, items, batch_tokens=0))
    batched = list(L.draft_run(setup.model, items, batch_tokens=10 ** 6))
    for x, y in zip(alone, batched, strict=True):
        assert torch.equal(x.teacher, y.teacher) and torch.equal(x.chain, y.chain)
        assert torch.equal(x.scored.accepted, y.scored.accepted)


def test_accuracy_by_position_reads_data_without_a_declared_layout():
    """Data that declares no layout (SpecForge's) is fed the training layout, as the replay feeds it; before the
    loop the by-position table left every such sample out (an empty table in notebook 02 on the demo world)."""
    from eagle3lib.demo import world as demo
    w = demo.paths()
    if not w.draft.exists():
        pytest.skip("demo world not built")
    setup = R.load_setup(w.draft, w.target)
    t = evidence.accuracy_by_position(setup, w.specforge_data, n=2)
    assert len(t) and int(t.positions.sum()) > 0
