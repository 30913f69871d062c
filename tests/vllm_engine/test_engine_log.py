"""vllm_engine.engine_log on real vLLM 0.32 logs (data/samples/vllm_*.log; data/samples/README.md says how each was made)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3lib.errors import LogParseError, MissingFileError
from eagle3lib.vllm_engine.engine_log import read_vllm_log

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _read(name: str, **kw):
    return read_vllm_log(SAMPLES / name, **kw)


def test_healthy_server_log_says_what_vllm_did_with_the_draft():
    """The healthy demo deployment: V1 runner (no Triton), ids (0, 2, 4, 6), shared embedding, own lm_head."""
    r = _read("vllm_demo_serve.log")
    assert (r.version, r.runner) == ("0.32.0", "V1")
    assert "requires Triton" in r.runner_reason
    assert (r.target_architecture, r.draft_architecture) == ("LlamaForCausalLM", "LlamaForCausalLMEagle3")
    assert r.aux_layer_ids == (0, 2, 4, 6) and r.aux_layer_ids_from == "speculative config"
    assert r.embedding == "shared (no own embed_tokens)" and r.lm_head == "own (distinct)"
    assert r.max_model_len == 512 and (r.method, r.num_speculative_tokens) == ("eagle3", 3)
    assert r.draft_loaded and r.ok and r.root_error is None and not r.warnings


def test_offline_log_reads_the_same_facts():
    """An offline vllm.LLM log (process tag MainProcess) gives the same start-up facts."""
    r = _read("vllm_demo_offline.log")
    assert (r.version, r.runner, r.aux_layer_ids, r.embedding, r.lm_head) == (
        "0.32.0", "V1", (0, 2, 4, 6), "shared (no own embed_tokens)", "own (distinct)")
    assert r.speculative_config["num_speculative_tokens"] == 3


def test_unknown_weight_key_is_the_root_error_not_vllms_reraises():
    """The worker's ValueError names the key; EngineCore's and the API server's re-raises come after it."""
    r = _read("vllm_refused_unknown_key.log")
    e = r.root_error
    assert (e.exception, e.kind, e.key, e.phase) == ("ValueError", "unknown weight", "layers.0.self_attn.rotary_bogus",
                                                     "startup")
    assert e.process.startswith("Worker pid=")
    assert [x.wrapper for x in r.errors] == [False, True, True, True]
    assert "Engine core initialization failed" in r.errors[-1].message
    assert r.lines and all(1 <= x.line_no <= r.lines for x in r.errors)
    text = (SAMPLES / "vllm_refused_unknown_key.log").read_text().split("\n")
    assert "rotary_bogus" in text[e.line_no - 1]          # the line number is the file's (editor numbering)
    assert r.aux_layer_ids is None and r.embedding is None  # the drafter never finished loading


def test_fc_shape_error_at_the_first_request():
    """fc for 3 slots, ids for 4: healthy start, then the first request dies in fc, in the serving phase."""
    r = _read("vllm_crash_fc_shape.log")
    e = r.root_error
    assert e.kind == "shape" and e.shape == "view [-1, 384] of 2560 values" and e.phase == "serving"
    assert r.aux_layer_ids == (0, 2, 4, 6)


def test_heap_corruption_without_traceback_is_the_root_error():
    """A glibc abort line (no Python traceback) outranks the 'cancelled' and EngineDeadError that follow it."""
    r = _read("vllm_crash_fc_heap.log")
    e = r.root_error
    assert (e.exception, e.kind, e.message) == ("native crash", "native crash", "corrupted double-linked list")
    kinds = [x.kind for x in r.errors]
    assert kinds[:2] == ["native crash", "worker died"] and all(x.wrapper for x in r.errors[1:])


def test_not_supported_reads_the_multi_line_pydantic_message():
    """The API server refuses a deepseek_v3-typed draft: 'not supported' and the architecture it names."""
    r = _read("vllm_refused_not_supported.log")
    e = r.root_error
    assert e.kind == "not supported" and e.key == "Eagle3DeepSeekMTPModel" and "not supported for now" in e.message
    assert r.draft_architecture == "DeepSeekMTPModel" and r.method == "eagle3"   # from the non-default args line


def test_default_ids_when_the_draft_loaded_without_an_ids_line():
    """No 'Using auxiliary layers' line after a loaded draft: the target default (2, L//2, L-3)."""
    lines = [ln for ln in (SAMPLES / "vllm_demo_offline.log").read_text().split("\n")
             if "Using auxiliary layers" not in ln]
    assert read_vllm_log(lines).aux_layer_ids is None
    r = read_vllm_log(lines, num_target_layers=8)
    assert r.aux_layer_ids == (2, 4, 5) and r.aux_layer_ids_from.startswith("target default")


def test_frame_and_to_dict():
    """frame() has one row per fact and per error with its line; to_dict() is JSON."""
    r = _read("vllm_refused_unknown_key.log")
    f = r.frame()
    assert list(f.columns) == ["what", "value", "line", "log"]
    assert f[f.what == "error"].line.tolist() == [r.root_error.line_no]
    d = json.loads(json.dumps(r.to_dict()))
    assert d["root_error"]["key"] == "layers.0.self_attn.rotary_bogus"


def test_garbage_never_raises_and_empty_does():
    """Binary junk gives a reading with a warning; an empty log is a LogParseError; a missing file says so."""
    r = read_vllm_log(["\x00\x01garbage", "Traceback (most recent call last):", "not an exception line", "??"])
    assert r.version is None and r.errors == () and r.warnings
    with pytest.raises(LogParseError):
        read_vllm_log(["", "  "])
    with pytest.raises(MissingFileError):
        read_vllm_log("/nonexistent/server.log")


def test_a_config_line_gives_the_speculative_config_and_the_version():
    """vLLM's `Initializing a V1 LLM engine (v...) with config: ... SpeculativeConfig(...)` line (num_spec_tokens
    read as num_speculative_tokens); a traceback's `return SpeculativeConfig(**self.speculative_config)` code line
    (real 0.32 log) keeps the config the non-default args line gave."""
    line = ("(APIServer pid=1) INFO 07-01 10:00:00 [core.py:12] Initializing a V1 LLM engine (v0.10.1) with config: "
            "model='m', speculative_config=SpeculativeConfig(method='eagle3', model='/d', num_spec_tokens=3), "
            "tokenizer='m'")
    r = read_vllm_log([line])
    assert r.speculative_config == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    assert r.version == "0.10.1" and r.own_lines == 1       # version, method and K, all from that one line
    refused = _read("vllm_refused_not_supported.log").speculative_config
    assert refused["method"] == "eagle3" and refused["num_speculative_tokens"] == 3


def test_summary_and_proof_say_what_the_log_names():
    """The home's `startup_log` protocol: a summary naming version, runner and failure; the proof is every fact."""
    r = _read("vllm_refused_unknown_key.log")
    assert r.engine == "vllm" and f"line {r.root_error.line_no}" in r.summary()
    assert r.proof({"speculative_num_draft_tokens"}).equals(r.frame())
