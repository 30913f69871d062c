"""Tests for eagle3lib.engines.facts: the rules that make a new engine fact one row of `FACTS` (docs/architecture.md,
"How to add a new engine fact"): each row is complete and cites its source, its versions parse and are ordered, and
no two rows answer the same question (`fact` returns the first, so a second would never be read)."""
from __future__ import annotations

import importlib
from collections import Counter

import pytest

from eagle3lib.engines import facts as EF
from eagle3lib.engines.versions import parse_version

TOPICS = {"flag", "config", "embed", "lm_head", "keys", "id_key", "fc_slots", "default_ids", "method", "rope",
          "context", "window", "target", "serving", "metric", "host"}   # Fact.topic's comment
# the row module of each topic (engines/__init__.py's map): a row in another module is out of its place
MODULE_TOPICS = {"facts_config": {"flag", "rope", "config"}, "facts_ids": {"id_key", "fc_slots", "default_ids"},
                 "facts_weights": {"embed", "lm_head", "keys"},
                 "facts_serving": {"serving", "metric", "method", "window", "context"},
                 "facts_target": {"target", "host"}}


@pytest.mark.parametrize("row", EF.FACTS, ids=lambda f: f"{f.engine}:{f.topic}:{f.subject}")
def test_every_row_is_complete_and_its_versions_are_ordered(row):
    assert row.engine in EF.SERVING_ENGINES and row.topic in TOPICS and row.subject and row.source
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
