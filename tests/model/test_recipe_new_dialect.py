"""The recipe for a new config dialect (docs/architecture.md, recipe (c)): one `Dialect` row and its writer in
model/dialects.py, nothing else. Here a made-up tool "newtool" keeps its aux layer ids under
`newtool_config.aux_layer_ids` in the input-of-layer convention; the row is added to the table for one test only.
Also: the table has a row for every dialect and writer the checkpoint formats name."""
from __future__ import annotations

import pytest

from eagle3lib.errors import ConfigError
from eagle3lib.model.config import DraftConfig, config_to_dict
from eagle3lib.model.config_fields import detect_dialect
from eagle3lib.model.dialects import CONFIG_DIALECTS, Dialect, eagle3_head, value_at
from eagle3lib.model.formats import DIALECTS, FORMATS, MLA_WRITER, WRITERS
from tests.model.test_config import MLA

LLAMA = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "max_position_embeddings": 256, "vocab_size": 120, "draft_vocab_size": 40, "target_hidden_size": 32}


def write_newtool(cfg, arch, llama, flags, ids):
    return {**eagle3_head(cfg, arch, llama), "newtool_config": {"aux_layer_ids": ids}, **flags}


NEWTOOL = Dialect("newtool", "a made-up tool", lambda raw: "newtool_config" in raw, "newtool_config.aux_layer_ids",
                  "input", ("NewToolDraftModel",), write_newtool, keys=("newtool_config",))
NEWTOOL_RAW = {"architectures": ["NewToolDraftModel"], **LLAMA, "num_aux_hidden_states": 3,
               "newtool_config": {"aux_layer_ids": [2, 4, 6]}}


@pytest.fixture
def newtool(monkeypatch):
    """The table with the newtool row appended (the most specific so far: detection tries it first)."""
    monkeypatch.setitem(CONFIG_DIALECTS, "newtool", NEWTOOL)
    return NEWTOOL


def test_a_new_dialect_row_is_read(newtool):
    """detect_dialect, read_layer_ids and the unknown-keys warning all read the row: nothing else was edited."""
    assert detect_dialect(NEWTOOL_RAW) == "newtool"
    c = DraftConfig.from_dict(NEWTOOL_RAW)
    assert (c.dialect, c.architecture, c.aux_layer_ids, c.aux_ids_convention, c.aux_ids_key) == \
        ("newtool", "NewToolDraftModel", (2, 4, 6), "input", "newtool_config.aux_layer_ids")
    assert c.aux_layout(8) == ("layer_in.2", "layer_in.4", "layer_in.6")
    assert not any("unknown fields" in w or "no aux layer ids" in w for w in c.warnings)
    with pytest.raises(ConfigError, match=r"newtool_config\.aux_layer_ids"):
        DraftConfig.from_dict(dict(NEWTOOL_RAW, newtool_config={"aux_layer_ids": ["2"]}))


def test_a_new_dialect_row_writes_a_config_that_round_trips(newtool):
    """config_to_dict(cfg, "newtool") writes the ids in the row's convention where the row keeps them; the config
    reads back as newtool naming the same boundaries, and writing it again gives the same dict."""
    specforge = DraftConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], **LLAMA,
                                       "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}})
    out = config_to_dict(specforge, "newtool")
    assert out["newtool_config"] == {"aux_layer_ids": [2, 4, 6]} and out["architectures"] == ["NewToolDraftModel"]
    back = DraftConfig.from_dict(out)
    assert back.dialect == "newtool" and back.aux_layout(8) == specforge.aux_layout(8)
    assert (back.num_aux, back.hidden_size, back.draft_vocab_size) == (3, 32, 40)
    assert config_to_dict(back, "newtool") == out
    assert DraftConfig.from_dict(config_to_dict(back, "specforge")).aux_layer_ids == (1, 3, 5)
    with pytest.raises(ConfigError, match="MLA"):        # no mla_architectures: it holds no MLA draft
        config_to_dict(DraftConfig.from_dict(MLA), "newtool")


def test_without_its_row_the_config_is_not_that_dialect():
    """The row is what makes the dialect: without it newtool_config is an unknown field and the ids are missed."""
    c = DraftConfig.from_dict(NEWTOOL_RAW)
    assert c.dialect != "newtool" and c.aux_layer_ids is None
    assert any("newtool_config" in w for w in c.warnings)
    with pytest.raises(ConfigError, match="unknown dialect"):
        config_to_dict(c, "newtool")


def test_the_rows_cover_every_dialect_and_writer_the_formats_name():
    """Every dialect a Format reads has a row, every writer it writes (MLA ones too) has a row with a writer."""
    assert all(name == row.name for name, row in CONFIG_DIALECTS.items())
    assert set(DIALECTS) <= set(CONFIG_DIALECTS)
    assert all(CONFIG_DIALECTS[w].write is not None for w in WRITERS)
    assert all(CONFIG_DIALECTS[f.config_writer].write for f in FORMATS.values() if f.config_writer)
    assert all(CONFIG_DIALECTS[w].mla_architectures for w in (*MLA_WRITER.values(), "specforge"))
    assert next(iter(CONFIG_DIALECTS.values())).detect({}), "the first row is the default: it detects anything"


@pytest.mark.parametrize("name", sorted(n for n, d in CONFIG_DIALECTS.items() if d.write))
def test_every_writer_keeps_the_ids_where_its_row_says(name):
    """A row's writer and its ids_key / ids_convention agree: the ids are written there, in that convention."""
    row = CONFIG_DIALECTS[name]
    cfg = DraftConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], **LLAMA,
                                 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}})
    out = config_to_dict(cfg, name)
    back = DraftConfig.from_dict(out)
    assert detect_dialect(out) == name and back.aux_ids_convention == row.ids_convention
    if row.ids_key:
        expect = [1, 3, 5] if row.ids_convention == "output" else [2, 4, 6]
        assert value_at(out, row.ids_key) == expect and back.aux_ids_key == row.ids_key
    else:
        assert back.aux_layer_ids is None and row.no_ids in back.warnings
