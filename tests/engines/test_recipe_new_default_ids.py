"""A new engine default capture, applied to a copy of the engine table: one added "default_ids" row (and `until` on
the row it replaces), and the package answers with the new default at the new version only: the layer reading of
a config without ids, `advice.captured_by` with no ids, `capture_rules.served_capture`, and the vLLM log reader's
default ids (a caller holding its own [2, L//2, L-3] would still answer the old one)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from eagle3lib.engines import facts as EF
from eagle3lib.engines.advice import captured_by
from eagle3lib.engines.capture_rules import served_capture
from eagle3lib.serving.layer_reading import layer_reading
from eagle3lib.vllm_engine.engine_log import read_vllm_log

NEW = "0.33.0"          # the (made-up) release with another default
L = 8
CFG = {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1}     # no ids anywhere
# a vLLM log whose draft loaded and that names no aux layers (the runner then used the target's default)
LOG = ["INFO 12-01 20:00:00 [api_server.py:1] vLLM API server version {v}",
       "INFO 12-01 20:00:01 [gpu_model_runner.py:1] Loading drafter model...",
       "INFO 12-01 20:00:01 [llm_base_proposer.py:1] Detected EAGLE model without its own embed_tokens in the "
       "checkpoint. Sharing target model embedding weights with the draft model."]


@pytest.fixture
def new_default(monkeypatch):
    rows = list(EF.FACTS)
    at = next(i for i, f in enumerate(rows) if f.topic == "default_ids" and f.engine == "vllm")
    row = replace(rows[at], subject="1, L//2, L-2", since=NEW, date="2026-12", source="vllm PR#00000 (example)",
                  note="", checked="")
    rows[at] = replace(rows[at], until=NEW)
    monkeypatch.setattr(EF, "FACTS", (*rows[:at + 1], row, *rows[at + 1:]))
    return row


def test_the_new_row_answers_at_its_version_only(new_default):
    assert EF.default_ids("vllm", L, NEW) == (1, 4, 6)
    assert EF.default_ids("vllm", L, "0.32.0") == (2, 4, 5)
    assert EF.default_ids("sglang", L) == (2, 4, 5)


def test_the_layer_reading_and_the_capture_follow_the_row(new_default):
    (new,) = [r for r in layer_reading(CFG, L, vllm_version=NEW, vllm_runner="v1") if r.engine == "vllm"]
    (old,) = [r for r in layer_reading(CFG, L, vllm_version="0.32.0", vllm_runner="v1") if r.engine == "vllm"]
    assert new.ids == (1, 4, 6) and "1, L//2, L-2" in new.key and old.ids == (2, 4, 5)
    assert captured_by("vllm", None, L, NEW) == ("layer_in.1", "layer_in.4", "layer_in.6")
    assert captured_by("vllm", None, L, "0.32.0") == ("layer_in.2", "layer_in.4", "layer_in.5")
    assert served_capture("vllm", None, L, target_arch="LlamaForCausalLM", version=NEW).boundaries == (
        "layer_in.1", "layer_in.4", "layer_in.6")


def test_the_vllm_log_reader_takes_the_default_from_the_row(new_default):
    for version, want in ((NEW, (1, 4, 6)), ("0.32.0", (2, 4, 5))):
        r = read_vllm_log([line.format(v=version) for line in LOG], num_target_layers=L)
        assert r.version == version
        assert r.aux_layer_ids == want and r.aux_layer_ids_from.startswith("target default"), (version, r)
