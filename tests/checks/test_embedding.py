"""Check 5 (embedding / lm_head): own embeddings compared row by row; missing lm_head; vocab padding."""
from __future__ import annotations

import torch

from eagle3lib.checks.embedding import check_embedding, compare_rows
from eagle3lib.checks.inputs import read_artifacts
from tests.checks.world import TARGET, canonical_tensors, draft_raw, statuses, write_draft, write_target

EMB = torch.randn(120, 32, generator=torch.Generator().manual_seed(3))


def _f(tmp_path, raw=None, extra=None, drop=(), engine=None, target=None):
    raw = raw or draft_raw()
    t = {k: v for k, v in canonical_tensors(raw).items() if k not in drop} | (extra or {})
    art = read_artifacts(draft=write_draft(tmp_path, raw, t), target=write_target(tmp_path, target, EMB))
    return check_embedding(art, engine=engine)


def test_clean_draft_without_embedding_rules_everything_out(tmp_path):
    """No embed_tokens, own lm_head, same vocab: nothing raised."""
    f = _f(tmp_path)
    assert {x.status for x in f} == {"ruled out"}


def test_compare_rows_tells_the_four_cases_apart():
    """identical / scaled / permuted / different, with the scale factor."""
    assert compare_rows(EMB, EMB.clone())["relation"] == "identical"
    r = compare_rows(EMB * 5.0, EMB)
    assert r["relation"] == "scaled" and abs(r["norm_ratio"] - 5.0) < 1e-4
    assert compare_rows(EMB[torch.randperm(120)], EMB)["relation"] == "permuted"
    assert compare_rows(torch.randn(120, 32), EMB)["relation"] == "different"


def combined(findings, cause):
    from eagle3lib.diagnose.combine import combine_aspects
    return combine_aspects(cause, [f for f in findings if f.cause == cause])[0]


def test_random_own_embedding_is_confirmed_on_vllm_and_ruled_out_on_sglang(tmp_path):
    """A random embed_tokens: vLLM keeps it (confirmed), SGLang replaces it (ruled out), no engine: suspected."""
    extra = {"embed_tokens.weight": torch.randn(120, 32)}
    assert statuses(_f(tmp_path, extra=extra, engine="vllm"), "wrong_embedding") == {"confirmed", "ruled out"}
    assert combined(_f(tmp_path, extra=extra, engine="vllm"), "wrong_embedding") == "confirmed"   # the tokenizer
    assert statuses(_f(tmp_path, extra=extra, engine="sglang"), "wrong_embedding") == {"ruled out"}   # agrees
    f = _f(tmp_path, extra={"embed_tokens.weight": EMB * 2})
    hit = [x for x in f if x.cause == "wrong_embedding"]
    assert hit[0].status == "suspected" and hit[0].evidence["relation"] == "scaled"


def test_missing_lm_head(tmp_path):
    """No lm_head with a reduced vocab: confirmed; full vocab with draft_vocab_size written: SGLang keeps random."""
    assert "confirmed" in statuses(_f(tmp_path, drop=("lm_head.weight",)), "lm_head_missing")
    full = draft_raw(draft_vocab_size=120)
    f = _f(tmp_path, full, drop=("lm_head.weight",), engine="sglang")
    assert "confirmed" in statuses(f, "lm_head_missing")
    f = _f(tmp_path, full, drop=("lm_head.weight",), engine="vllm")
    assert statuses(f, "lm_head_missing") == {"ruled out"}


def test_vocab_padding_is_suspected(tmp_path):
    """Draft vocab 128 (padded) vs target 120: suspected under lm_head_missing."""
    emb = torch.randn(128, 32)
    raw = draft_raw(vocab_size=128)
    t = canonical_tensors(raw)
    art = read_artifacts(draft=write_draft(tmp_path, raw, t), target=write_target(tmp_path, TARGET, EMB))
    f = [x for x in check_embedding(art) if x.where == "checks.embedding.vocab"]
    assert [(x.cause, x.status, x.aspects) for x in f] == [("lm_head_missing", "suspected", ("padded vocab",)),
                                                          ("wrong_embedding", "ruled out", ("vocab / tokenizer",))]
    assert emb.shape[0] == 128


def test_a_missing_head_for_a_reduced_vocab_is_confirmed_though_the_vocab_sizes_agree(tmp_path):
    """Issue 25: 'draft and target vocab sizes agree' is about the padded-vocab aspect, never evidence against a
    head that is absent: lm_head_missing is confirmed alone (no conflict), the finding names file, key, expected,
    found and what each engine runs instead."""
    f = _f(tmp_path, drop=("lm_head.weight",))
    assert combined(f, "lm_head_missing") == "confirmed"
    hit = next(x for x in f if x.cause == "lm_head_missing" and x.status == "confirmed")
    assert hit.evidence["key"] == "lm_head.weight" and hit.evidence["found"] is None
    assert hit.evidence["file"].endswith("model.safetensors") and hit.evidence["expected"] == [40, 32]
    assert "SGLang keeps a random head" in hit.summary and "vLLM the target's first 40 rows" in hit.summary


def test_a_draft_of_another_width_without_embedding_runs_one_never_loaded(tmp_path, monkeypatch):
    """H 16 against the target's 32 and no embed_tokens: each engine's fact row says it shares no embedding with a
    draft of another width (vLLM's proposer, SGLang's set_embed), so the draft runs its own, never loaded: confirmed
    on either engine and with none given; a serving engine without a row: suspected, naming what is not known."""
    raw = draft_raw(hidden_size=16, num_attention_heads=2, num_key_value_heads=1, intermediate_size=32)
    for engine in ("vllm", "sglang", None):
        f = next(x for x in _f(tmp_path, raw, engine=engine) if x.cause == "wrong_embedding")
        assert f.status == "confirmed" and f.evidence["ships_embed"] is False, engine
        assert f.evidence["unshared_by"] == ([engine] if engine else ["sglang", "vllm"])
    assert "set_embed" in f.source and "1471-1496" in f.source and "SGLang and vLLM" in f.summary
    from eagle3lib.checks import embedding
    monkeypatch.setattr(embedding, "SERVING_ENGINES", (*embedding.SERVING_ENGINES, "toy"))
    f = next(x for x in _f(tmp_path, raw, engine="toy") if x.cause == "wrong_embedding")
    assert f.status == "suspected" and f.evidence["unshared_by"] == [] and "toy" in f.needs


def test_each_engines_choice_is_read_from_its_rows_and_an_engine_without_rows_is_not_checked(tmp_path, monkeypatch):
    """What each engine does with an own embedding or a missing head comes from its fact rows (`embed`, `lm_head`),
    never from its name: a serving engine with no row is "not checked" on its own launch, naming the row, and leaves
    no verdict borrowed from another engine; with no engine given the rows of the engines that have them speak."""
    from eagle3lib.checks import embedding
    monkeypatch.setattr(embedding, "SERVING_ENGINES", (*embedding.SERVING_ENGINES, "toy"))
    extra = {"embed_tokens.weight": torch.randn(120, 32)}
    f = next(x for x in _f(tmp_path, extra=extra, engine="toy") if x.cause == "wrong_embedding")
    assert f.status == "not checked" and "own_embed_used" in f.needs and "toy" in f.needs
    f = next(x for x in _f(tmp_path, extra=extra) if x.cause == "wrong_embedding")
    assert f.status == "suspected" and f.summary.endswith("SGLang would replace it, vLLM would use it")
    assert f.evidence["engines"]["toy"].startswith("not known")
    full = draft_raw(draft_vocab_size=120)
    f = next(x for x in _f(tmp_path, full, drop=("lm_head.weight",), engine="toy") if x.cause == "lm_head_missing")
    assert f.status == "not checked" and "lm_head borrow row" in f.needs
    f = next(x for x in _f(tmp_path, full, drop=("lm_head.weight",)) if x.cause == "lm_head_missing")
    assert f.status == "suspected" and f.evidence["borrowed_by"] == {"sglang": False, "vllm": True, "toy": None}
    assert "SGLang borrows the target's only when draft_vocab_size is unset" in f.summary
