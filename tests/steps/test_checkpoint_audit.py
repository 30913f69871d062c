"""Tests for eagle3lib.steps.checkpoint_audit: notebook 00's layer table is the engines' reading, slot by slot."""
from __future__ import annotations

from eagle3lib.model.audit import audit_draft
from eagle3lib.steps import checkpoint_audit as CA
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from tests.model.test_audit import _world


def test_engine_layer_table_reads_the_ids_as_each_engine_does(tmp_path, tiny_cfg_dict):
    """[-1, 1, 3, 5] (output-of-layer) of an 8-layer target: trained embed, layer_in.2/4/6; SGLang feeds the same,
    vLLM (which reads no nested ids) feeds its default capture instead."""
    draft, target = _world(tmp_path, tiny_cfg_dict)
    a = audit_draft(draft, target)
    t = CA.engine_layer_table(case_of(Inputs(draft=str(draft), target=str(target))), a)
    trained = t[t.engine == "trained"].boundary.tolist()
    assert trained == ["embed", "layer_in.2", "layer_in.4", "layer_in.6"]
    assert t[t.engine == "sglang"].as_trained.all()
    assert {"vllm"} <= set(t.engine) and not t[t.engine == "vllm"].as_trained.all()


def test_mla_target_fields_flag_what_a_reader_finds_absent(tmp_path, tiny_cfg_dict):
    """The shipped MLA target carries every field each stack reads; without moe_layer_freq SGLang (which reads it
    with no default) is named, vLLM (default 1) is not. A Llama target has no table, and the sentence says why."""
    import dataclasses
    from types import SimpleNamespace

    from eagle3lib.demo.shipped import artifacts_dir
    from eagle3lib.model.target import load_target_info

    info = load_target_info(artifacts_dir("mla") / "target")
    table = CA.mla_target_fields(SimpleNamespace(target=info)).set_index("field")
    assert set(table["absent for"]) == {""} and table.loc["kv_lora_rank", "in config"] == repr(info.raw["kv_lora_rank"])
    trimmed = dataclasses.replace(info, raw={k: v for k, v in info.raw.items() if k != "moe_layer_freq"})
    row = CA.mla_target_fields(SimpleNamespace(target=trimmed)).set_index("field").loc["moe_layer_freq"]
    assert row["in config"] == "absent" and row["absent for"] == "sglang"
    _, target = _world(tmp_path, tiny_cfg_dict)
    assert "not an MLA model" in CA.mla_target_fields(SimpleNamespace(target=load_target_info(target)))


def test_the_notebooks_tables_beside_the_part_read_nothing_again():
    """Notebook 00 audits the draft, reads its layer table and previews a forward after its part: each inside the
    case's reads (`reads_once`), so no input the part read is opened again (the draft's config.json was, from the
    layer table's cell), and the audit is the one the case's dtype asks for."""
    from eagle3lib import opened
    from eagle3lib.demo import world as demo
    demo.ensure_world(progress=False)
    case = case_of(Inputs())
    with opened.counting() as part:
        CA.run(case)
    with opened.counting() as opens:
        a = CA.audit_of(case)
        table = CA.engine_layer_table(case, a)
        preview = CA.forward_preview(case, a, num_steps=2)
    assert any(p.endswith("draft/config.json") for p in part)
    assert set(opens) & set(part) == set() and max(opens.values(), default=1) == 1, dict(opens)
    assert "loads cleanly" in a.findings["headline"] and a.loaded.model.fc.weight.dtype.is_floating_point
    assert set(table.engine) >= {"trained", "sglang", "vllm"} and len(preview)
    with opened.counting() as outside:          # the same table outside the case's reads opens the draft's config
        CA.layer_frame(CA.layer_reading(case.draft_path, a.target.num_layers, target_arch=a.target.architecture))
    assert any(p.endswith("draft/config.json") for p in outside)
