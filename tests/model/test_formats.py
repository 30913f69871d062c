"""Tests for eagle3lib.model.formats: every checkpoint format fills every role (detection, save map, config
dialect, config writer) or says why it has none, and detect_format, save_draft and config_to_dict all read it."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.errors import CheckpointError
from eagle3lib.model.checkpoint import load_draft, save_draft
from eagle3lib.model.config import DraftConfig, config_to_dict
from eagle3lib.model.config_fields import detect_dialect
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.model.formats import DIALECTS, FORMATS, WRITERS, detect_format


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_fills_every_role(name):
    """A format missing from a role (no detection, no save map, no config dialect or writer) fails here."""
    f = FORMATS[name]
    assert f.name == name and f.writer
    if isinstance(f.detect_example, tuple):
        assert f.detect is not None and detect_format(f.detect_example) == name
    else:
        assert f.detect_example, f"{name}: neither detected nor a reason why not"
    assert f.save_rules is not None or f.no_save, f"{name}: neither a save map nor a reason why not"
    assert f.dialect in DIALECTS and f.config_writer in WRITERS


def test_detection_of_a_vllm_mla_draft_reads_the_table():
    """vLLM's MLA names are detected only for an MLA draft (its row's detection)."""
    from eagle3lib.model.mla_vllm import is_vllm_checkpoint
    keys = ["layers.0.self_attn.fused_qkv_a_proj.weight", "layers.0.mlp.gate_up_proj.weight"]
    if is_vllm_checkpoint(keys):
        assert detect_format(keys, mla=True) == "vllm" and detect_format(keys) == "speculators"


@pytest.mark.parametrize("writer", WRITERS)
def test_every_config_writer_writes_a_config_its_dialect_reads(tiny_cfg_dict, writer):
    """config_to_dict accepts every writer the table names, and the config reads back in that dialect."""
    cfg = DraftConfig.from_dict(tiny_cfg_dict | {"num_aux_hidden_states": 3, "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}})
    assert detect_dialect(config_to_dict(cfg, writer)) == writer


@pytest.mark.parametrize("name", sorted(n for n, f in FORMATS.items() if f.save_rules is not None))
def test_every_written_format_saves_and_loads(tmp_path, tiny_cfg_dict, name):
    """save_draft writes each format the table can write; the weights load back as the format detected."""
    raw = tiny_cfg_dict | {"num_aux_hidden_states": 3, "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}}
    cfg = DraftConfig.from_dict(raw)
    d = Eagle3Draft(cfg)
    out = save_draft(d, cfg, tmp_path / name, format=name, include_embed=True)
    loaded = load_draft(out)
    # what the written keys read as: ModelOpt 2026 writes layers.0.* as speculators does (no t2d), a non-MLA vLLM
    # draft too, and EAGLE's keys are SpecForge's (its config tells them apart)
    assert loaded.format == {"modelopt": "speculators", "vllm": "speculators", "eagle": "specforge"}.get(name, name)
    assert torch.equal(loaded.model.fc.weight, d.fc.weight)


def test_a_format_without_a_save_map_is_refused_with_its_reason(tmp_path, tiny_cfg_dict):
    """sglang has no on-disk format of its own: save_draft says so and names the formats it can write."""
    with pytest.raises(CheckpointError, match="cannot be written"):
        save_draft(Eagle3Draft(DraftConfig.from_dict(tiny_cfg_dict)), tiny_cfg_dict, tmp_path / "x", format="sglang")
