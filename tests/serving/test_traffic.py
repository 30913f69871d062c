"""serving.traffic: the requests a server answered and its answers, as token ids (vllm_engine.serve's prompts.jsonl and
responses.jsonl), on files the tests write and the demo target's real tokenizer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lib.demo import world as demo
from eagle3lib.errors import DataError, MissingFileError
from eagle3lib.model.target import load_tokenizer
from eagle3lib.serving.traffic import check_traffic, read_traffic


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(demo.ensure_world(progress=False).target)


def write(folder: Path, prompts, responses) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    (folder / "responses.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                                                    for r in responses))
    return folder


def test_answers_keep_the_engines_ids_or_are_read_from_text_when_the_count_agrees(tok, tmp_path):
    text = "Pack light clothes for your trip."
    ids = tok.encode(text, add_special_tokens=False)
    eos = tok.eos_token_id
    d = write(tmp_path / "served", [{"id": "a", "prompt_token_ids": [1, 3, 46]}, {"id": "b", "prompt_token_ids": [1, 5]},
                                    {"id": "c", "prompt_token_ids": [1, 7]}, {"id": "d", "prompt": text}],
              [{"id": "a", "text": "x", "token_ids": [9, 8, eos], "completion_tokens": 3, "finish_reason": "stop"},
               {"id": "b", "text": text, "completion_tokens": len(ids) + 1, "finish_reason": "stop"},   # + its EOS
               {"id": "c", "text": text, "completion_tokens": len(ids), "finish_reason": "length"},
               {"id": "d", "text": text, "completion_tokens": len(ids) + 5, "finish_reason": "length"},
               {"id": "e", "error": "boom"}])
    t = read_traffic(d, tok)
    got = {e.id: e for e in t.exchanges}
    assert list(got) == ["a", "b", "c"]
    assert got["a"].answer_ids == (9, 8, eos) and got["a"].ids_from == "engine" and got["a"].prompt_ids == (1, 3, 46)
    assert got["b"].answer_ids == tuple(ids) + (eos,) and got["b"].ids_from == "tokenizer"
    assert got["c"].answer_ids == tuple(ids) and got["c"].source.endswith("responses.jsonl:3")
    (w4, why4), (w5, why5) = t.skipped
    assert w4.endswith("responses.jsonl:4") and f"gives {len(ids)} tokens" in why4 and f"generated {len(ids) + 5}" in why4
    assert w5.endswith("responses.jsonl:5") and "failed: boom" in why5
    assert t.answered_tokens == 3 + len(ids) + 1 + len(ids)
    assert read_traffic(d / "responses.jsonl", tok).exchanges[0].id == "a"          # the file itself works too


def test_without_a_tokenizer_only_engine_ids_are_kept(tmp_path):
    d = write(tmp_path / "s", [{"id": "a", "prompt_token_ids": [1]}, {"id": "b", "prompt_token_ids": [2]}],
              [{"id": "a", "token_ids": [4, 5], "text": "q", "completion_tokens": 2},
               {"id": "b", "text": "hello", "completion_tokens": 1}])
    t = read_traffic(d)
    assert [e.id for e in t.exchanges] == ["a"] and "no tokenizer" in t.skipped[0][1]
    assert check_traffic(d) == 2


def test_bad_traffic_names_the_file_and_line(tmp_path):
    with pytest.raises(MissingFileError, match="responses.jsonl"):
        read_traffic(tmp_path)
    d = write(tmp_path / "bad", [{"id": "a", "prompt_token_ids": [1]}], ['{"id": "a", "text": '])
    with pytest.raises(DataError, match=r"responses.jsonl:1.*not valid JSON"):
        read_traffic(d)
    d = write(tmp_path / "bad2", [{"id": "a", "prompt_token_ids": [1, -2]}], [{"id": "a", "token_ids": [3]}])
    with pytest.raises(DataError, match=r"prompts.jsonl:1.*prompt_token_ids must be a list of token ids"):
        check_traffic(d)
    d = write(tmp_path / "bad3", [{"id": "a", "prompt_token_ids": [1]}], [{"id": "a", "usage": 3}])
    with pytest.raises(DataError, match=r"responses.jsonl:1.*not an answer line"):
        check_traffic(d)
    d = write(tmp_path / "none", [{"id": "a", "prompt_token_ids": [1]}], [{"id": "a", "error": "engine died"}])
    with pytest.raises(DataError, match=r"no answer to replay.*1 set aside: the request failed: engine died"):
        read_traffic(d)


def test_sglang_s_counters_and_the_requests_temperature_are_read(tmp_path):
    """Answers recording SGLang's spec_verify_ct give τ as SGLang counts it over exactly them; the recorded
    temperature says whether every request was greedy (unknown when an answer does not record it)."""
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"id": i, "prompt_token_ids": [1, 2]}) + "\n"
                                                    for i in ("a", "b")))
    rows = [{"id": "a", "token_ids": [3, 4, 5], "completion_tokens": 3, "spec_verify_ct": 2, "temperature": 0.0},
            {"id": "b", "token_ids": [6, 7], "completion_tokens": 2, "spec_verify_ct": 1, "temperature": 0}]
    (tmp_path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = read_traffic(tmp_path)
    assert t.counted_tau == (5 / 3, 2) and t.greedy is True
    rows[1]["temperature"] = 0.7
    rows[0].pop("spec_verify_ct")
    (tmp_path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = read_traffic(tmp_path)
    assert t.counted_tau is None and t.greedy is False
    rows[1].pop("temperature")
    rows[0]["temperature"] = 0
    (tmp_path / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_traffic(tmp_path).greedy is None
