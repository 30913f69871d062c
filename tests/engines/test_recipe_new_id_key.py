"""Recipe (a) of docs/architecture.md, "a new vLLM version reads the aux ids from a new key", applied to a copy of
the engine table: one added `id_key` row, and the package answers for the new key: the layer reading, the key the
vLLM probe reports, the advice text and check 1 (layer ids), each at the new version only, and check 13's id
count (`draft_feed.config_ids`), which finds the ids under the new key."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from eagle3lib.checks.draft_feed import config_ids
from eagle3lib.checks.layer_ids import check_layer_ids
from eagle3lib.engines import facts as EF
from eagle3lib.engines.advice import key_text
from eagle3lib.serving.layer_reading import layer_reading
from eagle3lib.vllm_engine.ids import vllm_ids
from eagle3lib.vllm_engine.inside.probe import keys_holding
from eagle3lib.checks.inputs import read_artifacts
from tests.checks.world import LAYOUT, draft_raw, statuses, write_data, write_draft, write_target

NEW_KEY = "eagle_config.aux_layer_ids"
NEW = "0.33.0"          # the (made-up) release that reads it
# the draft's ids, input-of-layer, only under the new key: they capture layer_in.2/4/6, as tests.checks.world's
# training data was captured
CFG = {"eagle_config": {"use_aux_hidden_state": True, "aux_layer_ids": [2, 4, 6]}}


@pytest.fixture
def new_key_table(monkeypatch):
    """The recipe on a copy of the table: one row, placed after V2's last key (the order V2 tries them in)."""
    rows = list(EF.FACTS)
    last = max(i for i, f in enumerate(rows) if f.topic == "id_key" and f.subject.endswith("@v2"))
    row = replace(rows[last], subject=f"{NEW_KEY}@v2", since=NEW, date="2026-12",
                  source="vllm PR#00000 (the recipe's example)", note="", checked="")
    monkeypatch.setattr(EF, "FACTS", (*rows[:last + 1], row, *rows[last + 1:]))
    return row


def test_the_new_row_is_one_row_of_the_table_and_bounded_by_its_version(new_key_table):
    assert EF.reads("vllm", "id_key", new_key_table.subject, NEW) is True
    assert EF.reads("vllm", "id_key", new_key_table.subject, "0.32.0") is False
    assert EF.id_keys("vllm", "v2", NEW)[-1] == NEW_KEY and NEW_KEY not in EF.id_keys("vllm", "v2", "0.32.0")
    assert NEW_KEY not in EF.id_keys("vllm", "v1", NEW)


def test_the_layer_reading_takes_the_ids_from_the_new_key_at_the_new_version(new_key_table):
    assert vllm_ids(CFG, "v2", NEW) == ((2, 4, 6), NEW_KEY)
    assert vllm_ids(CFG, "v2", "0.32.0") == (None, None)
    (r,) = [r for r in layer_reading(CFG, 8, vllm_version=NEW, vllm_runner="v2") if r.engine == "vllm"]
    assert (r.ids, r.boundaries) == ((2, 4, 6), ("layer_in.2", "layer_in.4", "layer_in.6"))
    assert r.key.startswith(NEW_KEY)


def test_the_probe_reports_the_new_key_and_advice_names_it(new_key_table):
    hf = SimpleNamespace(eagle_config=CFG["eagle_config"])
    assert keys_holding(hf, [2, 4, 6], EF.id_key_names("vllm")) == [NEW_KEY]
    assert f"{NEW_KEY} is read by V2 only" in key_text("vllm", NEW) and NEW_KEY not in key_text("vllm", "0.32.0")


def test_check_1_reads_the_new_key_at_the_new_version(tmp_path, new_key_table):
    art = read_artifacts(draft=write_draft(tmp_path, draft_raw(eagle_config=CFG["eagle_config"])),
                         target=write_target(tmp_path), data=write_data(tmp_path, LAYOUT))
    new = check_layer_ids(art, engine="vllm", engine_version=NEW, engine_runner="v2")
    assert statuses(new, "missing_layer_ids") == {"ruled out"}, [f for f in new if f.cause == "missing_layer_ids"]
    old = check_layer_ids(art, engine="vllm", engine_version="0.32.0", engine_runner="v2")
    assert statuses(old, "missing_layer_ids") == {"confirmed"}


def test_check_13_counts_the_ids_under_the_new_key(new_key_table):
    assert config_ids(CFG) == ([2, 4, 6], NEW_KEY)


def test_without_the_row_the_package_does_not_know_the_key():
    assert vllm_ids(CFG, "v2", NEW) == (None, None) and NEW_KEY not in EF.id_key_names()
    assert config_ids(CFG) == (None, None)
