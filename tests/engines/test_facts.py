"""Tests for eagle3lib.engines.facts: the rules that make a new engine fact one row of `FACTS` (docs/architecture.md,
"How to add a new engine fact"): each row is complete and cites its source, its versions parse and are ordered, and
no two rows answer the same question (`fact` returns the first, so a second would never be read)."""
from __future__ import annotations

import importlib
from collections import Counter

import pytest

from eagle3lib.engines import facts as EF
from eagle3lib.engines.versions import SERVING_ENGINES, parse_version

TOPICS = {"flag", "config", "embed", "lm_head", "keys", "id_key", "fc_slots", "default_ids", "method", "rope",
          "context", "window", "target", "serving", "metric", "host", "refusal"}   # Fact.topic's comment
# the row module of each topic (engines/__init__.py's map): a row in another module is out of its place
MODULE_TOPICS = {"facts_config": {"flag", "rope", "config"}, "facts_ids": {"id_key", "fc_slots", "default_ids"},
                 "facts_weights": {"embed", "lm_head", "keys"},
                 "facts_serving": {"serving", "metric", "method", "window", "context"},
                 "facts_target": {"target", "host"}, "facts_refusals": {"refusal"}}


@pytest.mark.parametrize("row", EF.FACTS, ids=lambda f: f"{f.engine}:{f.topic}:{f.subject}")
def test_every_row_is_complete_and_its_versions_are_ordered(row):
    assert row.engine in SERVING_ENGINES and row.topic in TOPICS and row.subject and row.source
    since = parse_version(row.since, row.engine) if row.since else None
    until = parse_version(row.until, row.engine) if row.until else None
    assert since is None or until is None or since < until, f"since {row.since} is not before until {row.until}"
    assert row.since is not None or row.until is not None or row.date or EF.reads(
        row.engine, row.topic, row.subject) == row.reads      # long-standing: answered without a version


def test_no_two_rows_answer_the_same_question():
    """(engine, topic, subject) names one row: a later row of the same key would be shadowed by the first."""
    twice = [k for k, n in Counter((f.engine, f.topic, f.subject) for f in EF.FACTS).items() if n > 1]
    assert not twice, f"two rows for {twice}: merge them (since / until bound one behaviour)"


def test_a_bounded_row_answers_by_version():
    """Inside [since, until) a row's `reads`, outside it the opposite, unknown without a version."""
    row = next(f for f in EF.FACTS if f.since)
    assert EF.reads(row.engine, row.topic, row.subject, row.since) is row.reads
    assert EF.reads(row.engine, row.topic, row.subject, "0.0.1") is (not row.reads)
    assert EF.reads(row.engine, row.topic, row.subject) is None
    assert EF.reads(row.engine, row.topic, "no such subject", row.since) is None


@pytest.mark.parametrize("module", sorted(MODULE_TOPICS))
def test_each_row_module_holds_its_topics_and_the_table_is_their_rows(module):
    """The table is the row modules' rows, each topic in one module (a topic split over two would be read in an
    order no module shows)."""
    rows = importlib.import_module(f"eagle3lib.engines.{module}").ROWS
    assert rows and {f.topic for f in rows} <= MODULE_TOPICS[module]
    assert set(rows) <= set(EF.FACTS)
    assert set().union(*MODULE_TOPICS.values()) == TOPICS
    assert sum(len(importlib.import_module(f"eagle3lib.engines.{m}").ROWS) for m in MODULE_TOPICS) == len(EF.FACTS)


def test_fc_slots_are_counted_from_each_model_files_rows_as_vllm_does():
    """vLLM 0.32.0: llama_eagle3 / deepseek_eagle3 count num_aux_hidden_states (0 included: only None falls
    through), else the eagle_config ids, else 3, never top-level ids; qwen3_eagle3 counts top-level ids too."""
    from eagle3lib.engines.facts import fc_slots_built
    top = {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4, 5]}
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}
    for mf in ("llama_eagle3", "deepseek_eagle3"):
        assert fc_slots_built("vllm", mf, top) == 3
        assert fc_slots_built("vllm", mf, {**top, **nested}) == 2
        assert fc_slots_built("vllm", mf, {**nested, "num_aux_hidden_states": 4}) == 4
        assert fc_slots_built("vllm", mf, {"num_aux_hidden_states": 0}) == 0
    assert fc_slots_built("vllm", "qwen3_eagle3", top) == 5
    assert fc_slots_built("vllm", "qwen3_eagle3", {**top, "num_aux_layers": 2}) == 2
    assert fc_slots_built("vllm", "no_such_file", top) is None


def test_sglangs_fc_slots_follow_its_rows_by_version():
    """SGLang's llama_eagle3 sizes fc from num_aux_hidden_states, else the ids, from 0.5.12 (PR#24663); before it
    the model file reads no key (capture_rules' fixed "3"); kimi_k25_eagle3 counts the eagle_config ids, else the
    top-level ids. capture_rules' draft verdicts ask the same rows."""
    from eagle3lib.engines.capture_rules import draft_serving
    from eagle3lib.engines.facts import fc_slots_built
    top = {"eagle_aux_hidden_state_layer_ids": [1, 2, 3, 4, 5]}
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}
    assert fc_slots_built("sglang", "llama_eagle3", {**top, "num_aux_hidden_states": 4}, "0.5.12") == 4
    assert fc_slots_built("sglang", "llama_eagle3", {**nested, **top}, "0.5.12") == 2
    assert fc_slots_built("sglang", "llama_eagle3", top, "0.5.12") == 5
    assert fc_slots_built("sglang", "llama_eagle3", {}, "0.5.12") == 3
    assert fc_slots_built("sglang", "llama_eagle3", top, "0.5.11") is None   # no row before the PR: capture_rules' "3"
    assert fc_slots_built("sglang", "kimi_k25_eagle3", {**top, **nested}) == 2
    assert fc_slots_built("sglang", "kimi_k25_eagle3", top) == 5
    four = {"architectures": ["LlamaForCausalLMEagle3"], "num_aux_hidden_states": 4}
    new = draft_serving("sglang", four, "0.5.12")
    old = draft_serving("sglang", four, "0.5.10")
    assert new and all(v.ok for v in new)
    assert old and not any(v.ok for v in old) and all("built for 3 aux slots" in " ".join(v.problems) for v in old)


def test_a_new_fc_slots_row_is_what_the_package_answers(monkeypatch):
    """Recipe: a model file that sizes fc from a new key is rows of the table; capture_rules and check 13 follow."""
    from eagle3lib.engines import capture_rules, facts
    from eagle3lib.engines.fact_row import Fact
    from eagle3lib.vllm_engine.loads import built_fc_slots
    row = Fact("vllm", "fc_slots", "eagle_config.num_fc_slots@llama_eagle3", True, None, "", "a future vLLM")
    monkeypatch.setattr(facts, "FACTS", (row,) + facts.FACTS)
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"num_fc_slots": 6}}
    rule = capture_rules.draft_rules("vllm", "LlamaForCausalLMEagle3")[-1]
    assert capture_rules.served_fc_slots(rule, raw) == 6
    assert built_fc_slots(raw)[0] == 6
