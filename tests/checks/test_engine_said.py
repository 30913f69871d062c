"""checks.engine_said: the engine's own refusal becomes a finding naming the cause, the file, the key and the row."""
from __future__ import annotations

from eagle3lib.checks.engine_said import refusal_findings, view_findings
from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.engine_kit.view import EngineView


def _refused(text: str, source: str = "log") -> EngineView:
    return EngineView("vllm", "0.32.0", "v1", {}, refused=text, refused_source=source)


def test_a_refusal_the_table_explains_is_its_rows_cause_with_the_fact_it_rests_on(tmp_path):
    from tests.checks.world import canonical_tensors, draft_raw, write_draft
    draft = write_draft(tmp_path, draft_raw(), canonical_tensors(draft_raw()))
    text = ("IndexError: index 2700 is out of bounds for dimension 1 with size 2685 (server.log:88; raised at "
            "vllm/model_executor/models/llama_eagle3.py:394)")
    [f] = refusal_findings(_refused(text), None, art=read_artifacts(draft=draft))
    assert (f.cause, f.status, f.measured) == ("d2t_mapping", "confirmed", True)
    assert f.evidence["file"] == f"{draft}/config.json" and f.evidence["key"] == "d2t"
    assert "llama_eagle3.py:338-345" in f.evidence["fact"] and "offsets" in f.fix
    assert "arange(draft_vocab_size) + d2t" in f.summary          # the row's note says what the refusal means


def test_a_refusal_no_row_explains_is_the_engines_own_words_never_a_regression():
    [f] = refusal_findings(_refused("RuntimeError: something new (server.log:3)"), None)
    assert (f.cause, f.status) == ("engine_cannot_run", "confirmed") and "something new" in f.summary


def test_a_table_prediction_of_a_refusal_is_not_the_engine_saying_it():
    """A refusal the table predicts (source "table") makes no finding here: only the engine's own answer counts."""
    assert view_findings(_refused("IndexError: out of bounds", source="table"), None) == []


def test_a_refusal_of_a_config_the_weights_contradict_names_the_key_its_value_and_the_shape(tmp_path):
    """vLLM's weight loader refuses num_key_value_heads 4 over weights for 2 ("start (0) + length (128) exceeds
    dimension size (64)"): the finding names the config key, not "weights silently dropped"."""
    from tests.checks.world import canonical_tensors, draft_raw, write_draft
    raw = draft_raw()
    draft = write_draft(tmp_path, {**raw, "num_key_value_heads": 2 * raw["num_key_value_heads"]},
                        canonical_tensors(raw))
    text = ("RuntimeError: start (0) + length (128) exceeds dimension size (64). (server.log:140; raised at "
            "vllm/model_executor/layers/linear.py:1247)")
    [f] = refusal_findings(_refused(text), None, art=read_artifacts(draft=draft))
    assert (f.cause, f.status, f.measured) == ("draft_config_differs", "confirmed", True)
    assert f.evidence["key"] == "num_key_value_heads" and f.evidence["implied"] == raw["num_key_value_heads"]
    assert "exceeds dimension size" in f.summary and "k_proj.weight" in f.summary
    assert f.explains == ("weights_dropped",)
