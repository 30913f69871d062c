"""vllm_engine.probe: vLLM's own answers about a draft, as a typed, JSON-able, cached record; without a vLLM venv
it says why. The engine tests (marker `engine`) ask the running vLLM; the rest need no engine."""
from __future__ import annotations

import json
import sys

import pytest

from eagle3lib.vllm_engine import probe as vllm_probe
from eagle3lib.vllm_engine.env import PYTHON_ENV, unavailable_reason
from eagle3lib.errors import EngineError, MissingFileError

from tests.engines.vllm_variants import DRAFT, TARGET, probes

engine = [pytest.mark.engine, pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason())]


def test_no_vllm_venv_raises_with_the_reason(monkeypatch, tmp_path):
    """Without a vLLM venv `available()` is False and `probe` raises EngineError carrying unavailable_reason()."""
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "no-python"))
    assert vllm_probe.vllm_available() is False
    with pytest.raises(EngineError, match="not an executable") as e:
        vllm_probe.probe(DRAFT, TARGET)
    assert "make vllm" in str(e.value)


def test_a_path_without_config_fails_before_any_engine(tmp_path):
    """A draft folder without config.json is refused naming the path (whether or not vLLM is installed)."""
    with pytest.raises(MissingFileError, match="config.json"):
        vllm_probe.probe(tmp_path, TARGET)


def test_cache_key_follows_path_config_header_and_request(tmp_path):
    """The cache key changes with the draft's path, config, weights header and the request, not otherwise."""
    from eagle3lib.engines.draft_edit import edited_copy
    a, b = edited_copy(DRAFT, tmp_path / "a"), edited_copy(DRAFT, tmp_path / "b")
    def key(d, **kw):
        return vllm_probe.cache_key(d, TARGET, method=kw.get("m", "eagle3"), num_speculative_tokens=kw.get("k", 3))
    assert key(a) == key(a) and key(a) != key(b)                          # the path is read by vLLM (method)
    assert key(a) != key(a, k=2) and key(a) != key(a, m=None)
    before = key(a)
    edited_copy(a, a, config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4, 6]})
    assert key(a) != before
    mid = key(a)
    edited_copy(a, a, rename={"d2t": "draft_id_to_target_id"})
    assert key(a) != mid


@pytest.mark.parametrize("_", [0], ids=["demo"])
@pytest.mark.engine
@pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason())
def test_probe_of_the_demo_draft(_):
    """The shipped demo draft: V1 (CPU) reads its eagle_config ids as they are, fc has 4 slots, every key but t2d
    loads, d2t is filled, the target's embedding is shared; the record round-trips through JSON and a frame."""
    p = probes()["shipped"]
    assert p.vllm_version.startswith("0.32.0") and p.ok and p.runner == "v1"
    assert (p.method, p.num_speculative_tokens, p.draft_class) == ("eagle3", 3, "Eagle3LlamaForCausalLM")
    assert p.ids_v1 == (-1, 1, 3, 5) and p.ids_v2 is None
    assert p.ids_key == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert (p.fc_slots, p.fc_input_size, p.keys_dropped, p.d2t_filled) == (4, 512, ("t2d",), True)
    assert p.has_own_embed_tokens is False and p.embed_shared is True and p.has_own_lm_head is True
    assert (p.draft_vocab, p.target_vocab) == (671, 2685)
    assert json.loads(json.dumps(p.to_dict()))["ids_v1"] == [-1, 1, 3, 5]
    frame = p.frame()
    assert len(frame) >= 15 and frame.set_index("question").loc["keys dropped silently"].iloc[0] == "t2d"
    assert "vllm" not in sys.modules                                       # the project venv never imports vLLM


@pytest.mark.engine
@pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason())
def test_a_refused_config_is_an_answer():
    """A config vLLM refuses (method 'eagle' inferred from an 'eagle-' path, no such architecture) comes back with
    the stage, exception type and message, not as an exception."""
    p = probes()["eagle-runs_eagle3"]
    assert not p.ok and p.error["stage"] == "config" and p.error["type"] == "ValidationError"
    assert "not supported" in p.error["message"] and p.frame().iloc[1, 1].startswith("config: ValidationError")


@pytest.mark.engine
@pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason())
def test_answers_are_cached_on_disk(tmp_path, monkeypatch):
    """A second probe of the same request is read from $EAGLE3LIB_CACHE without starting vLLM."""
    monkeypatch.setenv(vllm_probe.CACHE_ENV, str(tmp_path))
    first = vllm_probe.probe(DRAFT, TARGET)
    assert len(list((tmp_path / "vllm_probe").glob("*.json"))) == 1

    def no_engine(*a, **k):
        raise AssertionError("vLLM was started for a cached answer")
    monkeypatch.setattr(vllm_probe, "run_script", no_engine)
    assert vllm_probe.probe(DRAFT, TARGET) == first
    with pytest.raises(AssertionError, match="cached answer"):
        vllm_probe.probe(DRAFT, TARGET, num_speculative_tokens=2)
