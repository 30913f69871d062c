"""Tests for eagle3lib.replay: accept-length arithmetic, scoring, layouts, and replay bookkeeping on tiny samples."""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.replay import loop as L, run as R
from eagle3lib.replay import stats as S
from eagle3lib.model.checkpoint import save_draft
from eagle3lib.model.config import DraftConfig
from eagle3lib.samples.readers import Sample
from eagle3lib.samples.writers import write_seed_dataset, write_specforge_sample
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.errors import LayoutError
from tests.conftest import TINY_SPECFORGE

LAYOUT = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")   # TINY_SPECFORGE ids [-1,1,3,5] of an 8-layer target
# the same draft with DeepSeek-V2 multi-latent attention (SGLang's Kimi-K2.x MLA drafts), YaRN RoPE
MLA = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3", "num_key_value_heads": 4,
       "q_lora_rank": 16, "kv_lora_rank": 12, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 6,
       "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                        "original_max_position_embeddings": 64}}


def make_setup(tmp_path, *, lm_head: torch.Tensor | None = None, mla: bool = False, over: dict | None = None,
               cls=Eagle3Draft) -> S.ReplaySetup:
    """A random tiny draft (Vd=40 of V=120; MLA attention with mla=True; `over` config fields, `cls` the model
    class, e.g. PEagleDraft) + a target dir holding only config, embedding and lm_head."""
    raw = copy.deepcopy(TINY_SPECFORGE) | (copy.deepcopy(MLA) if mla else {}) | (over or {})
    model = cls(DraftConfig.from_dict(raw))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    used = torch.sort(torch.randperm(120)[:40]).values
    model.d2t.copy_(used - torch.arange(40))
    save_draft(model, raw, tmp_path / "draft")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 8, "hidden_size": 32,
         "vocab_size": 120}))
    head = lm_head if lm_head is not None else torch.randn(120, 32)
    save_file({"model.embed_tokens.weight": model.embed_tokens.weight.detach().clone(), "lm_head.weight": head},
              str(tmp_path / "target" / "model.safetensors"))
    return R.load_setup(tmp_path / "draft", tmp_path / "target")


def generate(setup: S.ReplaySetup, aux: torch.Tensor, right: list[bool], oov: list[bool] | None = None,
             layout=LAYOUT, d2t: str = "offsets") -> torch.Tensor:
    """Token ids where x_{t+2} is the draft's own step-0 prediction from t iff right[t] (else a wrong token, OOV
    where oov[t]); built incrementally with the KV-cached `step`, independently of ttt_forward."""
    model, T = setup.model, aux.shape[0]
    hot = L.draft_target_ids(model, d2t)
    outside = sorted(set(range(120)) - set(hot.tolist()))
    ids = torch.zeros(T, dtype=torch.long)
    ids[0], ids[1] = 7, 11
    cache = model.new_cache(1, T)
    flat = aux.reshape(T, -1)                                  # (T, k, Ht) -> (T, k*Ht)
    with torch.inference_mode():
        for t in range(T - 2):
            logits, _ = model.step(flat[t][None, None], ids[t + 1][None, None], torch.tensor([[t]]), cache, fuse=True)
            pred = int(hot[logits[0, 0].argmax()])
            if right[t]:
                ids[t + 2] = pred
            elif oov is not None and oov[t]:
                ids[t + 2] = outside[t % len(outside)]
            else:
                ids[t + 2] = int(hot[(int((hot == pred).nonzero()[0]) + 1) % len(hot)])
    return ids


def make_samples(setup, n=3, T=24, seed=0, layout=LAYOUT, d2t="offsets"):
    """(samples, expected step-0 accuracy, expected OOV rate) over mask-1 positions with a reference (t+2 < T)."""
    g = torch.Generator().manual_seed(seed)
    out, right_n, oov_n, total = [], 0, 0, 0
    for i in range(n):
        aux = torch.randn(T, 4, 32, generator=g)
        right = [bool(x) for x in (torch.rand(T, generator=g) < 0.6)]
        oov = [bool(x) for x in (torch.rand(T, generator=g) < 0.5)]
        ids = generate(setup, aux, right, oov, layout, d2t)
        mask = torch.zeros(T, dtype=torch.long)
        mask[4:T - 3] = 1
        for t in range(T - 2):
            if mask[t]:
                total += 1
                right_n += right[t]
                oov_n += (not right[t]) and oov[t]
        out.append(Sample(f"s{i}", ids, mask, aux, tuple(layout), None, f"mem:{i}"))
    return out, right_n / total, oov_n / total


# ---------------------------------------------------------------- arithmetic

def test_expected_accept_length_hand_cases():
    """1 + p0 + p0 p1 + ...: bonus token counted; num_steps truncates; the doc's 0.747 geometric gives 2.72."""
    assert S.expected_accept_length([]) == 1.0
    assert S.expected_accept_length([1, 1, 1]) == 4.0
    assert S.expected_accept_length([0.5, 0.5]) == pytest.approx(1.75)
    assert S.expected_accept_length([0.5, 0.5, 0.9], num_steps=2) == pytest.approx(1.75)
    assert S.expected_accept_length([0.0, 1.0, 1.0]) == 1.0
    assert S.expected_accept_length([0.747] * 3) == pytest.approx(2.72, abs=0.005)
    with pytest.raises(ValueError):
        S.expected_accept_length([1.2])
    with pytest.raises(ValueError):
        S.expected_accept_length([0.5], num_steps=3)


# ---------------------------------------------------------------- scoring

def test_score_alignment_masks_oov_and_chain():
    """Step k at t is scored against next_ref[t+1+k] under loss_mask[t+k] (or [t+1+k]); chain run is leading."""
    next_ref = torch.tensor([10, 11, 12, 13, 14, -1])             # data: ref of token p+1 = p+10
    mask = torch.tensor([1, 1, 1, 0, 1, 1])
    in_vocab = torch.ones(20, dtype=torch.bool)
    in_vocab[13] = False
    pred = torch.tensor([[11, 0, 13, 14, 0, 0], [12, 13, 0, 0, 0, 0]])
    sc = S.score(pred, next_ref, mask, in_vocab, chain=pred.clone())
    assert sc.reference.tolist() == [[11, 12, 13, 14, -1, -1], [12, 13, 14, -1, -1, -1]]
    assert sc.valid.tolist() == [[True, True, True, False, False, False], [True, True, False, False, False, False]]
    assert sc.correct.tolist() == [[True, False, True, False, False, False], [True, True, False, False, False, False]]
    assert sc.oov[0].tolist() == [False, False, True, False, False, False]
    assert sc.horizon.tolist() == [2, 2, 1, 0, 0, 0]
    assert sc.accepted.tolist() == [3, 1, 2, 0, 0, 0]
    nxt = S.score(pred, next_ref, mask, in_vocab, mask="next")
    assert nxt.valid[0].tolist() == [True, True, False, True, False, False]


# ---------------------------------------------------------------- layouts and d2t


def test_d2t_readings(tmp_path):
    """d2t readings give offsets / absolute / identity target ids."""
    setup = make_setup(tmp_path)
    m = setup.model
    assert torch.equal(L.draft_target_ids(m, "offsets"), torch.arange(40) + m.d2t)
    assert torch.equal(L.draft_target_ids(m, "identity"), torch.arange(40))
    assert torch.equal(L.draft_target_ids(m, "absolute"), m.d2t.clamp(0, 119))
    before = m.d2t.clone()
    with L.d2t_reading(m, "identity") as hot:
        assert torch.equal(hot, torch.arange(40)) and torch.equal(m.to_target_ids(torch.arange(40)), hot)
    assert torch.equal(m.d2t, before)


# ---------------------------------------------------------------- replay bookkeeping

@pytest.mark.parametrize("mla", [False, True])
def test_replay_counts_match_the_constructed_truth(tmp_path, mla):
    """Data built so the draft is right exactly where planned: acc_0, OOV rate and positions come out exactly
    (Llama and MLA attention)."""
    setup = make_setup(tmp_path, mla=mla)
    assert (setup.model.cfg.mla is not None) == mla
    samples, acc, oov = make_samples(setup)
    r = R.replay(setup, samples, num_steps=3, progress=False)
    assert r.reference == "data" and r.layout == LAYOUT and not r.skipped
    assert r.per_step.positions[0] == 3 * len(range(4, 24 - 3))
    assert r.acc0 == pytest.approx(acc) and r.per_step.oov_rate[0] == pytest.approx(oov)
    assert 0.3 < acc < 0.9                                    # the case is not degenerate
    assert r.per_step.joint_acc[0] == pytest.approx(acc) and r.per_step.cond_acc[0] == pytest.approx(acc)
    assert (r.per_step.joint_acc.diff().dropna() <= 1e-12).all()          # joint rates can only fall
    assert r.histogram["count"].sum() > 0 and r.histogram.fraction.sum() == pytest.approx(1.0)
    assert r.expected_accept_length == pytest.approx(S.expected_accept_length(r.per_step.cond_acc))
    assert 1.0 <= r.simulated_accept_length <= 4.0
    assert len(r.per_sample) == 3 and r.per_sample.positions.sum() == r.per_step.positions[0]


def test_chain_simulation_equals_teacher_forced_leading_run(tmp_path):
    """With the data as reference, the chain accepts exactly the leading run of teacher-forced hits (per position),
    and the histogram mean is 1 + the summed joint rates over full-horizon positions."""
    from eagle3lib.replay.tokenview import collect
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=2)
    for d in collect(setup, samples, n=2, num_steps=3):
        lead = d.correct.long().cumprod(0).sum(0)
        has = d.valid[0]
        assert torch.equal(d.accepted[has], 1 + lead[has])
    r = R.replay(setup, samples, num_steps=3, progress=False)
    batch = R.replay(setup, samples, num_steps=3, batch_tokens=10_000, progress=False)
    assert r.simulated_accept_length == pytest.approx(batch.simulated_accept_length)
    assert r.per_step.acc.tolist() == pytest.approx(batch.per_step.acc.tolist())


@pytest.mark.parametrize("mla", [False, True])
def test_chain_drafts_match_incremental_drafting(tmp_path, mla):
    """The chain replay uses drafts identical to KV-cached chain drafting from that position (own tokens, states),
    Llama and MLA attention."""
    from eagle3lib.replay.tokenview import collect
    setup = make_setup(tmp_path, mla=mla)
    samples, _, _ = make_samples(setup, n=1)
    d = collect(setup, samples, n=1, num_steps=3)[0]
    m, s, hot = setup.model, samples[0], L.draft_target_ids(setup.model)
    flat = s.aux.reshape(s.num_tokens, -1)                     # (T, k, Ht) -> (T, k*Ht)
    for t in (5, 11):
        cache = m.new_cache(1, s.num_tokens + 4)
        with torch.inference_mode():
            lg, h = m.step(flat[None, :t + 1], s.input_ids[None, 1:t + 2], torch.arange(t + 1)[None], cache, fuse=True)
            tok, h = hot[lg[0, -1].argmax()], h[:, -1:]
            drafts = [int(tok)]
            for k in (1, 2):
                lg, h = m.step(h, tok.reshape(1, 1), torch.tensor([[t + k]]), cache)
                tok = hot[lg[0, 0].argmax()]
                drafts.append(int(tok))
        assert d.chain_ids[:, t].tolist() == drafts


def test_wrong_layout_lowers_accuracy_and_is_labelled(tmp_path):
    """The serving layout without the embedding (zero-filled) is replayed, labelled, and scores far lower."""
    setup = make_setup(tmp_path)
    samples, acc, _ = make_samples(setup)
    r = R.replay(setup, samples, layout=["layer_in.2", "layer_in.4", "layer_in.6"], fill="zeros", progress=False)
    assert r.layout == ("layer_in.2", "layer_in.4", "layer_in.6", "zeros") and r.fill == "zeros"
    assert r.acc0 < acc - 0.2
    with pytest.raises(LayoutError):
        R.replay(setup, samples, layout=["zz"], progress=False)


def test_bad_samples_are_skipped_with_their_names(tmp_path):
    """Wrong width, NaN, zero mask and out-of-vocab ids are skipped naming the sample; the rest is replayed."""
    setup = make_setup(tmp_path)
    good, _, _ = make_samples(setup, n=1)
    T = 12
    ones = torch.ones(T, dtype=torch.long)
    nan = torch.randn(T, 4, 32)
    nan[3, 1, 5] = float("nan")
    bad = [Sample("wide", torch.zeros(T, dtype=torch.long), ones, torch.randn(T, 4, 16), LAYOUT),
           Sample("nan", torch.zeros(T, dtype=torch.long), ones, nan, LAYOUT),
           Sample("nomask", torch.zeros(T, dtype=torch.long), torch.zeros(T, dtype=torch.long),
                  torch.randn(T, 4, 32), LAYOUT),
           Sample("bigid", torch.full((T,), 500), ones, torch.randn(T, 4, 32), LAYOUT)]
    r = R.replay(setup, bad + good, progress=False)
    assert len(r.per_sample) == 1 and r.per_sample["id"][0] == "s0"
    reasons = dict(r.skipped)
    assert set(reasons) == {f"sample '{s.id}' ()" for s in bad}
    assert "wrong width" in reasons["sample 'wide' ()"] and "NaN" in reasons["sample 'nan' ()"]
    assert "all zero" in reasons["sample 'nomask' ()"] and "outside the target vocab" in reasons["sample 'bigid' ()"]


def test_reader_skips_are_counted_in_the_result(tmp_path):
    """A missing hidden-state file and a wrong seq_len in a seed index, a code pickle in SpecForge data: counted."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=3)
    write_seed_dataset(tmp_path / "seed", samples, layout=LAYOUT, info={"num_target_layers": 8})
    (tmp_path / "seed" / "hidden_states" / "s1.safetensors").unlink()
    lines = (tmp_path / "seed" / "train.jsonl").read_text().splitlines()
    rec = json.loads(lines[2])
    rec["seq_len"] += 1
    (tmp_path / "seed" / "train.jsonl").write_text("\n".join(lines[:2] + [json.dumps(rec)]) + "\n")
    r = R.replay(setup, tmp_path / "seed", progress=False)
    assert len(r.per_sample) == 1 and len(r.skipped) == 2
    assert any("'s1'" in why and "missing" in why for _, why in r.skipped)
    assert any("seq_len" in why for _, why in r.skipped)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    s = samples[0]
    write_specforge_sample(tmp_path / "sf" / "data_0.ckpt", s.input_ids, s.loss_mask, torch.randn(24, 32),
                           s.aux.reshape(24, -1))
    torch.save({"input_ids": Evil()}, tmp_path / "sf" / "data_1.ckpt")
    r = R.replay(setup, tmp_path / "sf", data_format="specforge", progress=False)
    assert len(r.per_sample) == 1 and len(r.skipped) == 1 and "data_1" in r.skipped[0][0]


def test_target_reference_and_agreement(tmp_path):
    """With final_hidden and the target lm_head the reference is the target's argmax; agreement with data is
    reported; `reference='data'` forces the data token."""
    head = torch.nn.functional.normalize(torch.randn(120, 32), dim=-1)
    setup = make_setup(tmp_path, lm_head=head)
    samples, acc, _ = make_samples(setup, n=2)
    with_final = [Sample(s.id, s.input_ids, s.loss_mask, s.aux, s.layout,
                         head[torch.cat([s.input_ids[1:], s.input_ids[:1]])] * 5.0, s.source) for s in samples]
    r = R.replay(setup, with_final, progress=False)
    assert r.reference == "target" and r.target_agreement == pytest.approx(1.0)
    assert r.acc0 == pytest.approx(acc)
    mixed = R.replay(setup, with_final[:1] + samples[1:], progress=False)
    assert mixed.reference == "mixed" and set(mixed.per_sample.reference) == {"target", "data"}
    assert R.replay(setup, with_final, reference="data", progress=False).reference == "data"


def test_summary_is_json(tmp_path):
    """summary() is JSON-serialisable with NaN as null."""
    setup = make_setup(tmp_path)
    samples, _, _ = make_samples(setup, n=1)
    out = R.replay(setup, samples, num_steps=2, simulate=False, progress=False).summary()
    text = json.dumps(out, allow_nan=False)
    assert out["simulated_accept_length"] is None and "acc_per_step" in text
    assert not math.isnan(out["expected_accept_length"])


def test_ids_this_target_cannot_have_leave_the_layout_to_the_data(tmp_path):
    """Top-level ids [-1, 1, 3, 5] (SpecForge's output-of ids moved as they are, read input-of-layer): the setup
    still loads, says why it has no layout from the config, and a replay runs on the data's own slots."""
    ec = copy.deepcopy(TINY_SPECFORGE["eagle_config"])
    ids = ec.pop("eagle_aux_hidden_state_layer_ids")
    s = make_setup(tmp_path, over={"eagle_config": ec, "eagle_aux_hidden_state_layer_ids": ids})
    assert s.training_layout is None
    assert any("no layout of this target" in n and "-1" in n for n in s.notes)
    assert not any("names no aux layer ids" in n for n in s.notes)
    samples, acc, _ = make_samples(s, n=2)
    r = R.replay(s, samples, num_steps=1, progress=False).summary()
    assert r["acc_per_step"][0] == pytest.approx(acc, abs=1e-4)       # the summary rounds to 4 places
