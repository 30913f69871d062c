"""vllm_engine.method and the vLLM branch of serving.layer_reading as pure logic (no engine): the method vLLM
resolves for a path, the ids each model runner reads. tests/engines/test_vllm_facts.py checks both against the
running vLLM."""
from __future__ import annotations

import pytest

from eagle3lib.serving.layer_reading import layer_reading
from eagle3lib.vllm_engine.ids import vllm_ids
from eagle3lib.vllm_engine.method import METHOD_RULES, infer_method, rules_at
from eagle3lib.errors import ConfigError


@pytest.mark.parametrize("method, path, want", [
    (None, "/x/EAGLE3-LLaMA3.1-Instruct-8B", "eagle3"),
    (None, "/runs/eagle-sweeps/eagle3-8b", "eagle"),          # 'eagle-' is tested first
    (None, "/ckpt/epoch_9", "draft_model"),
    ("draft_model", "/m/qwen3_eagle3", "eagle3"),             # an explicit draft_model is overridden by the path
    ("eagle3", "/m/eagle-x", "eagle3"),                       # eagle / eagle3 / dflash / dspark are kept
    (None, "ngram", "ngram"), (None, "pkg.MyProposer", "custom_class"),
    ("medusa", "/m/plain", "unsupported"), ("suffix", "/m/x", "suffix"),
])
def test_method_resolution(method, path, want):
    """The rows of METHOD_RULES, in vLLM's order, decide the method; each decision says why."""
    got, notes = infer_method(method, path, "0.32.0")
    assert got == want
    assert (notes == []) == (want in ("eagle3", "ngram", "suffix") and (method == want or path == "ngram"))


def test_method_rows_carry_their_source():
    """Every rule cites config/speculative.py at a 0.32.0 line and applies at the version checked."""
    assert rules_at("0.32.0") == METHOD_RULES
    assert all("speculative.py:" in r.source and "0.32.0" in r.source for r in METHOD_RULES)
    assert [r.match for r in METHOD_RULES[:2]] == ["eagle-", "eagle3"]
    assert infer_method(None, "/m/x", model_type="medusa")[0] == "medusa"


def test_vllm_ids_per_runner():
    """V1 reads the top level then eagle_config.eagle_aux_hidden_state_layer_ids; V2 the top level then
    eagle_config.layer_ids; an empty list counts as absent; an unknown runner is refused."""
    nested = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "layer_ids": [2, 4, 6]}}
    assert vllm_ids(nested, "v1") == ((1, 3, 5), "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert vllm_ids(nested, "v2") == ((2, 4, 6), "eagle_config.layer_ids")
    both = {**nested, "eagle_aux_hidden_state_layer_ids": [0, 4, 7]}
    assert vllm_ids(both, "v1")[0] == vllm_ids(both, "v2")[0] == (0, 4, 7)
    assert vllm_ids({"eagle_aux_hidden_state_layer_ids": []}, "v1") == (None, None)
    with pytest.raises(ConfigError, match="runner"):
        vllm_ids(nested, "v3")


def test_layer_reading_names_the_runner():
    """With the runner given there is one vLLM reading; unknown, V2's comes first (the CUDA default) and V1's
    follows only when it reads other ids; index 0 is the embedding output on a Llama target, a crash on DeepSeek."""
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}}
    (v1,) = [r for r in layer_reading(cfg, 8, vllm_runner="v1") if r.engine.startswith("vllm")]
    assert (v1.runner, v1.ids, v1.boundaries, v1.slot_problems) == ("v1", (0, 2, 4), ("embed", "layer_in.2",
                                                                                      "layer_in.4"), (None,) * 3)
    v2, v1u = [r for r in layer_reading(cfg, 8, target_arch="LlamaForCausalLM") if r.engine.startswith("vllm")]
    assert (v2.engine, v2.ids, v1u.engine, v1u.ids) == ("vllm", (2, 4, 5), "vllm-v1", (0, 2, 4))
    assert "V2's reading" in v2.problems[0]
    ds = [r for r in layer_reading(cfg, 8, target_arch="DeepseekV3ForCausalLM", vllm_runner="v1")
          if r.engine == "vllm"][0]
    assert "deepseek_v2.py adds a None residual" in ds.slot_problems[0]
    top = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    assert [r.engine for r in layer_reading(top, 8)] == ["trained", "sglang", "vllm"]
