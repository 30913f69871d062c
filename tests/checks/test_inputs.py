"""Tests for eagle3lib.checks.inputs: one reader per input kind, and `steps.given` reading through the same ones
(a bad draft, target, data or launch says the same thing in both layers)."""
from __future__ import annotations

import torch

from eagle3lib.checks import inputs as I
from eagle3lib.steps.given import check_input
from tests.checks.world import TARGET, canonical_tensors, draft_raw, write_data, write_draft, write_target

SG = "python -m sglang.launch_server --model-path t --speculative-algorithm EAGLE3 --speculative-num-steps 3"


def test_the_readers_read_what_read_artifacts_holds(tmp_path):
    raw = draft_raw()
    d, t = write_draft(tmp_path, raw, canonical_tensors(raw)), write_target(tmp_path, TARGET, torch.zeros(4, 32))
    art = I.read_artifacts(draft=d, target=t, data=write_data(tmp_path), launch=SG)
    assert not art.problems
    assert I.read_draft_config(d)[1] == art.draft_cfg and dict(art.draft_raw) == I.read_draft_json(d)[0]
    assert dict(art.tensors) == I.tensor_headers(d)
    info, text = I.read_target_config(t)
    assert info == art.target_info and text == dict(art.target_raw)
    assert set(I.read_target_weights(t)) == {"model.safetensors"}
    assert I.read_target_weights(write_target(tmp_path, name="config_only")) == {}
    assert art.launch == I.read_launch(SG) and len(I.read_data(write_data(tmp_path))) == len(art.data)


def test_an_unreadable_draft_says_the_same_in_both_layers(tmp_path):
    """An MLA draft missing its MLA fields: read_artifacts keeps the raw config (the checks read it) and records
    the error; steps.given reports the same message, naming the parameter."""
    d = write_draft(tmp_path, draft_raw(architectures=["Eagle3DeepseekV2ForCausalLM"], kv_lora_rank=16),
                    canonical_tensors(draft_raw()))
    art = I.read_artifacts(draft=d)
    assert art.draft_cfg is None and art.draft_raw["kv_lora_rank"] == 16
    p = check_input("--draft", str(d), "draft")
    assert p is not None and art.problems["draft"] == f"{p.error}: {p.message}"


def test_a_bad_launch_reads_leniently_for_the_checks_and_strictly_for_given():
    bad = SG + " --speculative-num-steps three"
    p = check_input("--launch", bad, "launch")
    assert p is not None and p.param == "--launch"
    try:
        I.read_launch(bad, strict=True)
    except Exception as e:      # noqa: BLE001 - the same reader raises the same error
        assert type(e).__name__ == p.error
    else:
        raise AssertionError("strict read_launch accepted a bad value")
