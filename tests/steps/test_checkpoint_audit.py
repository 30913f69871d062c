"""Tests for eagle3lib.steps.checkpoint_audit: notebook 00's layer table is the engines' reading, slot by slot."""
from __future__ import annotations

from eagle3lib.model.audit import audit_draft
from eagle3lib.steps import checkpoint_audit as CA
from tests.model.test_audit import _world


def test_engine_layer_table_reads_the_ids_as_each_engine_does(tmp_path, tiny_cfg_dict):
    """[-1, 1, 3, 5] (output-of-layer) of an 8-layer target: trained embed, layer_in.2/4/6; SGLang feeds the same,
    vLLM (which reads no nested ids) feeds its default capture instead."""
    draft, target = _world(tmp_path, tiny_cfg_dict)
    a = audit_draft(draft, target)
    t = CA.engine_layer_table(a, CA.AuditInputs(str(draft), str(target), "", False))
    trained = t[t.engine == "trained"].boundary.tolist()
    assert trained == ["embed", "layer_in.2", "layer_in.4", "layer_in.6"]
    assert t[t.engine == "sglang"].as_trained.all()
    assert {"vllm"} <= set(t.engine) and not t[t.engine == "vllm"].as_trained.all()
