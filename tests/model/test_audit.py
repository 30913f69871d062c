"""Audit: the tables notebook 00 shows, on a tiny SpecForge draft written by the test."""
from __future__ import annotations

import json

import torch
from safetensors.torch import save_file

from eagle3lib.model.audit import audit_draft
from eagle3lib.model.checkpoint import save_draft
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft


def _world(tmp_path, cfg_dict, drop_d2t=False):
    cfg = DraftConfig.from_dict(cfg_dict)
    d = Eagle3Draft(cfg)
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 8,
                                                    "hidden_size": 32, "vocab_size": 120}))
    save_file({"model.embed_tokens.weight": torch.randn(120, 32)}, str(target / "model.safetensors"))
    sd = {k: v for k, v in d.state_dict().items() if not (drop_d2t and k in ("d2t", "t2d"))}
    return save_draft(sd, cfg_dict, tmp_path / "draft"), target


def test_audit_tables_and_findings(tmp_path, tiny_cfg_dict):
    """A clean draft: headline says it loads cleanly with its 4-slot layout; every table is filled."""
    tiny_cfg_dict["draft_vocab_size"] = 120           # full vocab: zeros d2t is the identity and fine
    draft, target = _world(tmp_path, tiny_cfg_dict)
    a = audit_draft(draft, target)
    assert a.findings["layout"] == ["embed", "layer_in.2", "layer_in.4", "layer_in.6"]
    assert "loads cleanly" in a.findings["headline"] and a.findings["tensor_problems"] == 0
    assert {"dialect", "aux slots", "layer ids"} <= set(a.config_table.field)
    assert a.params.iloc[-1]["module"] == "total"


def test_audit_of_an_mla_draft(tmp_path, tiny_cfg_dict):
    """An MLA draft (Kimi-K2.x kind) audits cleanly; the headline and config table say MLA and its latent sizes."""
    tiny_cfg_dict.update(architectures=["Eagle3DeepseekV2ForCausalLM"], draft_vocab_size=120, num_key_value_heads=4,
                         q_lora_rank=16, kv_lora_rank=12, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=6)
    draft, target = _world(tmp_path, tiny_cfg_dict)
    a = audit_draft(draft, target)
    assert "(MLA attention) loads cleanly" in a.findings["headline"] and a.findings["attention"] == "MLA"
    table = dict(zip(a.config_table.field, a.config_table.value))
    assert table["attention"] == "MLA" and table["mla kv_lora_rank"] == 12 and table["mla q_lora_rank"] == 16
    assert a.findings["tensor_problems"] == 0


def test_audit_flags_missing_vocab_map(tmp_path, tiny_cfg_dict):
    """A reduced-vocab draft without d2t is reported as a vocab error in the headline."""
    draft, target = _world(tmp_path, tiny_cfg_dict, drop_d2t=True)
    a = audit_draft(draft, target)
    assert "d2t present" in a.findings["vocab_errors"] and "vocab error" in a.findings["headline"]


def test_audit_of_a_draft_missing_a_tensor_runs_and_names_it(tmp_path, tiny_cfg_dict):
    """Issue 25: the audit of a draft whose MLP tensor was renamed does not stop: the report lists the key as
    missing and the unexpected name, the headline says what stands in, the findings record file, key, expected."""
    draft, target = _world(tmp_path, tiny_cfg_dict)
    from safetensors.torch import load_file
    sd = load_file(str(draft / "model.safetensors"))
    sd["midlayer.mlp.gate.weight"] = sd.pop("midlayer.mlp.gate_proj.weight")
    save_file(sd, str(draft / "model.safetensors"))
    a = audit_draft(draft, target)
    rep = a.report.set_index("key")
    assert rep.loc["midlayer.mlp.gate_proj.weight", "status"] == "missing"
    assert rep.loc["midlayer.mlp.gate.weight", "status"] == "unexpected"
    assert "midlayer.mlp.gate_proj.weight missing: stands in as random" in a.findings["headline"]
    (f,) = a.findings["filled"]
    assert f["key"] == "midlayer.mlp.gate_proj.weight" and f["found"] is None and f["cause"] == "weights_dropped"
    assert f["file"].endswith("model.safetensors") and f["expected"] == list(rep.loc["midlayer.mlp.gate_proj.weight",
                                                                                  "expected_shape"])


def test_ids_this_target_cannot_have_are_a_finding_not_a_crash(tmp_path, tiny_cfg_dict):
    """SpecForge's output-of ids [-1, 1, 3, 5] moved as they are to the top level (read input-of-layer, as vLLM
    does): -1 is no layer of the target. The audit still runs and names the error; it never guesses a layout."""
    tiny_cfg_dict["draft_vocab_size"] = 120
    tiny_cfg_dict["eagle_aux_hidden_state_layer_ids"] = tiny_cfg_dict["eagle_config"].pop(
        "eagle_aux_hidden_state_layer_ids")
    draft, target = _world(tmp_path, tiny_cfg_dict)
    a = audit_draft(draft, target)
    assert a.findings["layout"] is None and "-1" in a.findings["layout_error"]
    assert "unreadable ids" in a.findings["headline"]
