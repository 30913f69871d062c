"""Check 2 (variant flags): a flag the named engine drops is raised with its source; no flag set rules it out."""
from __future__ import annotations

from eagle3lib.engines import facts as engine_facts
from eagle3lib.checks.flags import check_flags, flag_places
from eagle3lib.checks.inputs import read_artifacts
from tests.checks.world import canonical_tensors, draft_raw, statuses, write_draft


def _art(tmp_path, raw, tensors=None):
    return read_artifacts(draft=write_draft(tmp_path, raw, tensors))


def test_no_flag_set_is_ruled_out(tmp_path):
    """A plain EAGLE-3 config: nothing for any engine to drop."""
    for engine in (None, "sglang", "vllm"):
        assert statuses(check_flags(_art(tmp_path, draft_raw()), engine=engine), "dropped_variant_flags") == \
            {"ruled out"}


def test_norm_before_fc_on_old_sglang_is_dropped(tmp_path):
    """SGLang reads norm_before_fc only from PR#32334 (~0.5.15): on 0.5.6 it is dropped -> confirmed, with source."""
    f = check_flags(_art(tmp_path, draft_raw(norm_before_fc=True)), engine="sglang", engine_version="0.5.6")
    assert [x.status for x in f] == ["confirmed"] and "32334" in f[0].source
    assert f[0].evidence["reading"] == {"norm_before_fc@top": "dropped"}
    f = check_flags(_art(tmp_path, draft_raw(norm_before_fc=True)), engine="sglang", engine_version="0.5.15")
    assert statuses(f, "dropped_variant_flags") == {"ruled out"}


def test_nested_norm_before_fc_on_vllm_depends_on_the_version(tmp_path):
    """norm_before_fc nested in eagle_config: vLLM reads it only after PR#42143 -> suspected without a version."""
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "norm_before_fc": True})
    assert flag_places(raw) == {"norm_before_fc": ["eagle_config"]}
    f = check_flags(_art(tmp_path, raw), engine="vllm")
    assert [x.status for x in f] == ["suspected"] and "42143" in f[0].source
    f = check_flags(_art(tmp_path, raw))
    assert [x.status for x in f] == ["not checked"] and "engine" in f[0].needs


def test_speculators_config_without_norm_before_residual_gets_true_on_vllm(tmp_path):
    """vLLM's update_eagle3 defaults a missing norm_before_residual to True: the draft runs another variant."""
    raw = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
           "speculators_config": {"algorithm": "eagle3"}, "transformer_layer_config": draft_raw(),
           "draft_vocab_size": 40, "target_hidden_size": 32, "eagle_aux_hidden_state_layer_ids": [2, 4, 6]}
    f = check_flags(_art(tmp_path, raw), engine="vllm")
    assert statuses(f, "dropped_variant_flags") == {"confirmed"}
    assert engine_facts.fact("vllm", "flag", "norm_before_residual@speculators").source in f[0].source


def test_flag_weights_without_the_flag_are_confirmed(tmp_path):
    """input_norm.weight in the checkpoint while norm_before_fc is off: no engine applies it -> confirmed."""
    raw = draft_raw()
    tensors = {**canonical_tensors(raw), "input_norm.weight": __import__("torch").ones(96)}
    f = check_flags(_art(tmp_path, raw, tensors))
    assert "confirmed" in statuses(f, "dropped_variant_flags")
    assert any("input_norm.weight" in x.summary for x in f)


def test_engine_facts_read_by_version():
    """reads(): known version -> True/False around `since`; unknown first version -> None; no row -> None."""
    assert engine_facts.reads("sglang", "flag", "norm_before_fc@top", "0.5.6") is False
    assert engine_facts.reads("sglang", "flag", "norm_before_fc@top", "head") is True
    assert engine_facts.reads("vllm", "flag", "norm_before_fc@eagle_config", "0.11.0") is None
    assert engine_facts.reads("vllm", "flag", "norm_before_residual@top") is True
    assert engine_facts.reads("vllm", "flag", "no_such_flag@top") is None
    assert all(f.source for f in engine_facts.FACTS)


def _meaning(tmp_path, raw, tensors=None, name="draft") -> dict:
    from eagle3lib.checks.flags import check_norm_meaning
    return {x.cause: x for x in check_norm_meaning(read_artifacts(draft=write_draft(tmp_path, raw, tensors, name)))}


def test_fc_norm_and_norm_before_fc_together(tmp_path):
    """Both set: suspected (speculators refuses it); both set while the weights hold only fc_norm's: confirmed;
    one of them: ruled out."""
    import torch
    raw = draft_raw(fc_norm=True, norm_before_fc=True)
    f = _meaning(tmp_path, raw)["fc_norm_conflict"]
    assert f.status == "suspected" and "_check_norm_flags" in f.source
    tensors = {**canonical_tensors(raw), **{f"fc_norm.{i}.weight": torch.ones(32) for i in range(3)}}
    f = _meaning(tmp_path, raw, tensors, "with_weights")["fc_norm_conflict"]
    assert f.status == "confirmed" and f.evidence["weights"] == {"fc_norm": True, "norm_before_fc": False}
    assert "norm_before_fc" in f.fix
    assert _meaning(tmp_path, draft_raw(fc_norm=True), name="one")["fc_norm_conflict"].status == "ruled out"
    raw = draft_raw(use_aux_norm=True, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5],
                                                     "norm_before_fc": True})
    assert _meaning(tmp_path, raw, name="nested")["fc_norm_conflict"].status == "suspected"


def test_specforge_norm_output_meaning(tmp_path):
    """No norm_output key: ruled out; set in a SpecForge-style checkpoint (midlayer.*): suspected, naming the
    training commit; set in a config alone: not checked; a speculators config: ruled out."""
    assert _meaning(tmp_path, draft_raw())["specforge_norm_output"].status == "ruled out"
    raw = draft_raw(norm_output=True)
    f = _meaning(tmp_path, raw, canonical_tensors(raw), "sf")["specforge_norm_output"]
    assert f.status == "suspected" and "879" in f.source and "SpecForge commit" in f.needs
    f = _meaning(tmp_path, draft_raw(norm_output=False), name="cfg_only")["specforge_norm_output"]
    assert f.status == "not checked" and f.needs
    spec = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "norm_output": True,
            "speculators_config": {"algorithm": "eagle3"}, "transformer_layer_config": draft_raw()}
    assert _meaning(tmp_path, spec, name="spec")["specforge_norm_output"].status == "ruled out"
    from eagle3lib.checks.flags import check_norm_meaning
    assert {x.status for x in check_norm_meaning(read_artifacts())} == {"not checked"}
