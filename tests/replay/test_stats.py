"""eagle3lib.replay.stats on hand-built tensors: accept-length arithmetic, score(), and exact count merging."""
from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from eagle3lib.layout import ZERO
from eagle3lib.engines.verification import verification_walk
from eagle3lib.replay import stats as S

LAYOUT = ("embed", "layer_in.2")


# ---------------------------------------------------------------- arithmetic

def test_expected_accept_length():
    assert S.expected_accept_length([0.8, 0.5]) == pytest.approx(1 + 0.8 + 0.4)
    assert S.expected_accept_length(torch.tensor([0.5, 0.5])) == pytest.approx(1.75)
    assert S.expected_accept_length(np.array([1.0, 0.5, 0.5])) == pytest.approx(1 + 1 + 0.5 + 0.25)
    assert S.expected_accept_length([0.9, 0.9], num_steps=0) == 1.0
    assert S.expected_accept_length([0.5, 0.0, float("nan")]) == 1.5       # nothing reached the NaN step
    assert S.expected_accept_length([0.0, 2.0]) == 1.0                      # nor the out-of-range one
    with pytest.raises(ValueError, match="must lie in"):
        S.expected_accept_length([float("nan")])
    with pytest.raises(ValueError, match="must lie in.*-0.1"):
        S.expected_accept_length([0.5, -0.1])
    with pytest.raises(ValueError, match="4 steps asked, 2 conditional rates given"):
        S.expected_accept_length([0.5, 0.5], num_steps=4)


def test_json_number():
    assert S.json_number(1 / 3) == 0.3333 and S.json_number(2) == 2.0
    assert S.json_number(None) is None and S.json_number(float("nan")) is None
    assert S.json_number(np.float32(0.125)) == 0.125 and S.json_number(torch.tensor(2.71828)) == 2.7183
    assert S.json_number(float("inf")) == float("inf")


# ---------------------------------------------------------------- options and items

def test_replay_options_defaults_and_equality():
    o = S.ReplayOptions()
    assert dataclasses.astuple(o) == (3, "error", "offsets", 0, "token", "auto", True, False)
    assert o == S.ReplayOptions() and hash(o) == hash(S.ReplayOptions())
    assert o != S.ReplayOptions(d2t="absolute")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.num_steps = 4
    assert S.REFERENCES == ("auto", "target", "data") and ZERO == "zeros"


def item(key, T=4, kind="data", layout=LAYOUT, ref=None, ids=None, note="", mask=None):
    return S.ReplayItem(key, f"s{key}", "mem", ids if ids is not None else torch.arange(T),
                        mask if mask is not None else torch.ones(T),
                        layout, torch.zeros(T, 2 * len(layout)), ref if ref is not None else torch.arange(T), kind,
                        note)


def test_replay_item_compares_by_identity():
    a, b = item(0), item(0)
    assert a == a and a != b and a.note == "" and a.layout == LAYOUT
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.kind = "target"


# ---------------------------------------------------------------- score

def test_score_hand_case_token_mask():
    """K=2, T=5: step k at t is scored against next_ref[t+1+k] under loss_mask[t+k]."""
    next_ref = torch.tensor([-1, 3, 4, 5, 6])
    mask = torch.tensor([1, 0, 1, 1, 1])
    in_vocab = torch.tensor([True] * 6 + [False])               # token 6 is outside the draft vocab
    pred = torch.tensor([[3, 4, 0, 6, 0], [4, 0, 6, 0, 0]])
    chain = torch.tensor([[3, 4, 0, 6, 0], [9, 0, 6, 0, 0]])
    sc = S.score(pred, next_ref, mask, in_vocab, chain=chain)
    assert sc.reference.tolist() == [[3, 4, 5, 6, -1], [4, 5, 6, -1, -1]]
    assert sc.valid.tolist() == [[True, False, True, True, False], [False, True, True, False, False]]
    assert sc.correct.tolist() == [[True, False, False, True, False], [False, False, True, False, False]]
    assert sc.oov.tolist() == [[False, False, False, True, False], [False, False, True, False, False]]
    assert sc.horizon.tolist() == [1, 0, 2, 1, 0]
    # chain: t0 right at step 0 (step 1 not valid) -> 2; t2 wrong at step 0 -> 1; t3 right -> 2
    assert sc.accepted.tolist() == [2, 0, 1, 2, 0]


def test_score_next_mask_and_no_chain():
    next_ref = torch.tensor([-1, 3, 4, 5, 6])
    mask = torch.tensor([1, 0, 1, 1, 1])
    pred = torch.tensor([[3, 4, 0, 6, 0], [4, 0, 6, 0, 0]])
    sc = S.score(pred, next_ref, mask, torch.ones(7, dtype=torch.bool), mask="next")
    assert sc.valid.tolist() == [[False, True, True, True, False], [True, True, True, False, False]]
    assert sc.correct.tolist() == [[False, True, False, True, False], [True, False, True, False, False]]
    assert sc.horizon.tolist() == [0, 2, 2, 1, 0] and sc.accepted is None
    assert not sc.oov.any()


def test_score_more_steps_than_positions():
    """K >= T: steps with no reference are never valid."""
    sc = S.score(torch.zeros(3, 3, dtype=torch.long), torch.tensor([0, 1, 0]), torch.ones(3),
                 torch.ones(2, dtype=torch.bool), chain=torch.zeros(3, 3, dtype=torch.long))
    assert sc.reference.tolist() == [[1, 0, -1], [0, -1, -1], [-1, -1, -1]]
    assert sc.valid.tolist() == [[True, True, False], [True, False, False], [False, False, False]]
    assert sc.correct.tolist() == [[False, True, False], [True, False, False], [False, False, False]]
    assert sc.horizon.tolist() == [2, 1, 0] and sc.accepted.tolist() == [1, 2, 0]


def test_verification_walk_drafts_at_the_last_accepted_row_and_restarts_at_each_answer():
    """accepted counts the bonus token: from P the next draft is at P + accepted[P]; a start (the next turn's
    prompt) begins again; positions not eligible (a chain cut by the answer's end) are passed over."""
    acc = [1, 3, 1, 2, 1, 1, 4, 1, 1, 1, 2, 1]
    assert verification_walk(acc, [True] * 12, {1}) == [1, 4, 5, 6, 10]
    assert verification_walk(acc, [True] * 12, {1, 8}) == [1, 4, 5, 6, 8, 9, 10]    # a second request at 8
    assert verification_walk(acc, [p != 4 for p in range(12)], {1}) == [1, 5, 6, 10]
    assert verification_walk(acc, [True] * 12, set()) == []                        # no prompt: no request


def test_walk_rows_serve_the_prompts_last_row_and_stop_at_the_answers_end():
    """T=8, prompt 0..2, answer 3..6, then a prompt token: K=2. The engine drafts at t=2 (token 3, the first answer
    token, generated) though SpecForge's mask scores from t=3; step k at t needs tokens t+1 and t+2+k answered."""
    next_ref = torch.arange(10, 18)
    mask = torch.tensor([0, 0, 0, 1, 1, 1, 1, 0])
    rows = S.walk_rows(next_ref, mask, 2)
    assert rows.int().tolist() == [[0, 0, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0, 0]]
    assert S.walk_starts(mask) == {2} and S.walk_starts(torch.tensor([1, 1, 0, 1])) == {0, 2}
    ref, valid = S.scored_positions(next_ref, mask, 2)
    assert not valid[0, 2] and valid[0, 3]                                  # step 0 scored from t=3


def test_score_walks_the_chain_the_way_verification_does():
    """T=9, prompt 0..1, answer 2..8, K=2: rows at t=1..5 have the full horizon. The chain is right at both steps
    from t=1 (-> 3 accepted with the bonus: next draft at 4), wrong at step 0 at t=4 (-> 1: next at 5), right at
    step 0 only at t=5 (-> 2: next at 7, whose chain runs past the answer). Walked τ = (3 + 1 + 2) / 3."""
    next_ref = torch.tensor([-1, 20, 21, 22, 23, 24, 25, 26, -1])   # next_ref[p]: the token after p
    mask = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 1])
    chain = torch.full((2, 9), -7)
    chain[:, 1] = torch.tensor([21, 22])                   # step 0 at t predicts next_ref[t+1]
    chain[:, 4] = torch.tensor([0, 25])
    chain[:, 5] = torch.tensor([25, 0])
    sc = S.score(chain.clone(), next_ref, mask, torch.ones(30, dtype=torch.bool), chain=chain)
    assert sc.walked.nonzero().flatten().tolist() == [1, 4, 5]
    assert sc.walk_accepted[[1, 4, 5]].tolist() == [3, 1, 2]
    c = S.ReplayCounts(SETUP, options=S.ReplayOptions(num_steps=2))
    c.add(item(0, T=9, ref=next_ref, mask=mask), sc)
    r = c.result()
    assert r.walked_drafts == 3 and r.walked_accept_length == pytest.approx(2.0)
    assert r.summary()["walked_accept_length"] == 2.0 and r.summary()["walked_drafts"] == 3
    assert S.ReplayCounts(SETUP, options=S.ReplayOptions(num_steps=2)).merge(c).result().walked_drafts == 3
    off = S.ReplayCounts(SETUP, options=S.ReplayOptions(num_steps=2, simulate=False)).result()
    assert math.isnan(off.walked_accept_length) and off.walked_drafts == 0


# ---------------------------------------------------------------- counts

SETUP = SimpleNamespace(training_layout=LAYOUT, notes=("from setup",))
OPTS = S.ReplayOptions(num_steps=2)


def sample_a():
    """T=4: step-0 valid at t0..2 (right at 0, 2), step 1 valid at t0..1 (right at both); chain = pred."""
    b = item(1, T=4, ref=torch.tensor([5, 6, 7, 8]), layout=("zeros", "layer_in.2"), note="filled")
    pred = torch.tensor([[6, 0, 8, 0], [7, 8, 0, 0]])
    return b, S.score(pred, b.ref, b.mask, torch.ones(10, dtype=torch.bool), chain=pred.clone())


def sample_b():
    """T=3: step 0 valid at t0..1 (right at t0), step 1 valid at t0 (right); the chain misses step 1."""
    b = item(0, T=3, ref=torch.tensor([1, 2, 3]))
    pred = torch.tensor([[2, 9, 0], [3, 0, 0]])
    chain = torch.tensor([[2, 9, 0], [9, 0, 0]])
    return b, S.score(pred, b.ref, b.mask, torch.ones(10, dtype=torch.bool), chain=chain)


def counts_of(*pairs):
    c = S.ReplayCounts(SETUP, options=OPTS)
    for b, sc in pairs:
        c.add(b, sc)
    return c


def test_counts_of_one_sample():
    c = counts_of(sample_a())
    assert c.requested == LAYOUT and c.K == 2
    got = {n: getattr(c, n).tolist() for n in ("valid", "correct", "oov", "prefix", "joint", "cond_den", "hist")}
    assert got == {"valid": [3, 2], "correct": [2, 2], "oov": [0, 0], "prefix": [3, 2], "joint": [2, 1],
                   "cond_den": [3, 1], "hist": [0, 1, 0, 1]}
    assert c.kinds == {"data"} and c.notes == {"from setup", "filled"} and c.effective == (1, ("zeros", "layer_in.2"))


def test_merge_is_exact_and_result_has_the_hand_values():
    whole = counts_of(sample_b(), sample_a())
    merged = counts_of(sample_a()).merge(counts_of(sample_b()))     # shards merged out of key order
    for n in ("valid", "correct", "oov", "prefix", "joint", "cond_den", "hist"):
        assert torch.equal(getattr(merged, n), getattr(whole, n)), n
    assert merged.hist.tolist() == [0, 1, 1, 1] and merged.cond_den.tolist() == [5, 2]
    r, w = merged.result(), whole.result()
    for name in ("per_step", "per_sample", "histogram"):
        pd.testing.assert_frame_equal(getattr(r, name), getattr(w, name), check_exact=True)
    assert r.label == "embed,layer_in.2" and r.layout == LAYOUT and r.requested_layout == LAYOUT  # key 0 first
    assert r.per_step.positions.tolist() == [5, 3] and r.per_step.joint_positions.tolist() == [5, 3]
    assert r.per_step.acc.tolist() == [0.6, 1.0] and r.per_step.cond_acc.tolist() == [0.6, 1.0]
    assert r.per_step.joint_acc.tolist() == pytest.approx([0.6, 2 / 3])
    assert r.per_step.accept_length_if_steps.tolist() == pytest.approx([1.6, 2.2])
    assert r.expected_accept_length == pytest.approx(2.2) and r.acc0 == 0.6
    assert r.histogram["count"].tolist() == [1, 1, 1] and r.simulated_accept_length == 2.0
    assert r.per_sample.id.tolist() == ["s0", "s1"] and r.per_sample.tokens.tolist() == [3, 4]
    assert r.per_sample.acc_0.tolist() == pytest.approx([0.5, 2 / 3]) and r.per_sample.acc_1.tolist() == [1.0, 1.0]
    assert r.per_sample.simulated_accept.tolist() == [2.0, 2.0]
    assert r.reference == "data" and math.isnan(r.target_agreement) and r.notes == ("filled", "from setup")
    assert (r.d2t, r.align, r.fill, r.mask, r.num_steps) == ("offsets", 0, "error", "token", 2)


def test_merge_carries_skips_in_key_order():
    a, b = counts_of(sample_a()), counts_of(sample_b())
    a.skipped.append((7, "sample 'x' ()", "bad"))
    b.skipped.append((3, "sample 'y' ()", "worse"))
    b.read_skipped.append((9, "file z", "unreadable"))
    r = a.merge(b).result()
    assert r.skipped == (("file z", "unreadable"), ("sample 'y' ()", "worse"), ("sample 'x' ()", "bad"))


def test_merge_refuses_counts_of_other_options():
    for other in (S.ReplayCounts(SETUP, options=S.ReplayOptions(num_steps=3)),
                  S.ReplayCounts(SETUP, options=S.ReplayOptions(num_steps=2, d2t="absolute")),
                  S.ReplayCounts(SETUP, requested=("embed", "layer_in.3"), options=OPTS)):
        with pytest.raises(ValueError, match="different options"):
            counts_of(sample_a()).merge(other)
    c = counts_of(sample_a())
    with pytest.raises(ValueError):
        c.merge(S.ReplayCounts(SETUP))
    assert c.valid.tolist() == [3, 2]                                 # a refused merge changes nothing


def test_empty_counts_give_nan_rates():
    r = S.ReplayCounts(SETUP, options=OPTS).result()
    assert r.per_step.positions.tolist() == [0, 0] and all(math.isnan(x) for x in r.per_step.acc)
    assert r.expected_accept_length == 1.0 and math.isnan(r.simulated_accept_length)
    assert r.reference == "none" and len(r.per_sample) == 0 and r.label == "embed,layer_in.2"


def test_target_agreement_ignores_positions_without_a_data_token():
    """The target's greedy tokens equal the data wherever the data has a next token -> agreement 1.0."""
    ids = torch.tensor([0, 5, 6, 7])
    ref = torch.tensor([5, 6, 7, 8])                 # ref[p] = target token p+1; ref[3] is beyond the data
    b = item(0, T=4, kind="target", ids=ids, ref=ref)
    pred = torch.zeros(2, 4, dtype=torch.long)
    c = counts_of((b, S.score(pred, ref, b.mask, torch.ones(10, dtype=torch.bool))))
    assert c.result().target_agreement == 1.0


def test_past_stop_adds_the_row_of_the_token_after_the_answers_end_and_the_walk_drafts_there():
    """vLLM counts acceptance before its stop check (engines.facts metric accepted_past_stop_counted): a draft of the
    token after the answer's last one, verified against the target's own next token there, counts. T=8, prompt 0..1,
    answer 2..7, K=2: the row t=T-2-k (token T) exists only with past_stop, and the walk then drafts at t=5 (token 6
    generated, 7 and the one past it drafted), never at t=6 (token 7, the answer's last, ends the request)."""
    next_ref = torch.arange(10, 18)
    mask = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1])
    plain, past = S.walk_rows(next_ref, mask, 2), S.walk_rows(next_ref, mask, 2, past_stop=True)
    assert plain.int().tolist() == [[0, 1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 0, 0, 0]]
    assert past.int().tolist() == [[0, 1, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 0, 0]]
    assert not S.walk_rows(next_ref, torch.tensor([0, 0, 1, 1, 1, 1, 1, 0]), 2, past_stop=True)[:, 6].any()
    K, T = 2, 8
    ref = torch.full((K, T), -1)
    for k in range(K):
        ref[k, :T - 1 - k] = next_ref[1 + k:]
    chain = ref.clone()                                   # every draft right: the walk advances K+1 each time
    in_vocab = torch.ones(20, dtype=torch.bool)
    for past_stop, walked in ((False, [1, 4]), (True, [1, 4])):
        sc = S.score(ref.clone(), next_ref, mask, in_vocab, chain, past_stop=past_stop)
        assert sc.walked.nonzero().flatten().tolist() == walked
    wrong = chain.clone()
    wrong[:, 1:5] = -5                                    # drafts wrong up to t=4: the walk steps by one
    sc = S.score(ref.clone(), next_ref, mask, in_vocab, wrong, past_stop=True)
    assert sc.walked.nonzero().flatten().tolist() == [1, 2, 3, 4, 5] and int(sc.walk_accepted[5]) == 3
    sc = S.score(ref.clone(), next_ref, mask, in_vocab, wrong, past_stop=False)
    assert sc.walked.nonzero().flatten().tolist() == [1, 2, 3, 4]
