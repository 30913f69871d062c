"""Check 6 (target drift): training states recaptured through the current target: same / scaled / fine-tuned."""
from __future__ import annotations

import pytest
import torch
import transformers

from eagle3lib.hidden.capture import capture
from eagle3lib.checks.drift import check_drift, classify
from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.samples.readers import Sample
from eagle3lib.samples.writers import write_seed_dataset

LAYOUT = ("embed", "layer_in.2", "layer_in.4")
L = 6


def tiny_llama(seed: int = 0) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=L,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Target A saved, training data captured from A (and a copy scaled by 1.5), target B = A fine-tuned deep."""
    root = tmp_path_factory.mktemp("drift")
    a = tiny_llama()
    a.save_pretrained(root / "target_a")
    b = tiny_llama()
    with torch.no_grad():
        for i, layer in enumerate(b.model.layers):
            for p in layer.parameters():
                p.add_(torch.randn_like(p) * 0.05 * i)     # fine-tuning that grows with depth
    b.save_pretrained(root / "target_b")
    g = torch.Generator().manual_seed(1)
    for name, scale in (("data", 1.0), ("data_scaled", 1.5)):
        samples = []
        for i in range(3):
            ids = torch.randint(0, 100, (12,), generator=g)
            with torch.no_grad():
                aux = capture(a, ids, only=list(LAYOUT)).stack(LAYOUT) * scale
            samples.append(Sample(f"s{i}", ids, torch.ones(12, dtype=torch.long), aux, LAYOUT, None, f"mem:{i}"))
        write_seed_dataset(root / name, samples, layout=LAYOUT, info={"num_target_layers": L})
    return root


def _f(world, target, data="data"):
    return check_drift(read_artifacts(target=world / target, data=world / data), n=3)


def test_same_target_is_ruled_out(world):
    f = _f(world, "target_a")
    assert [x.status for x in f] == ["ruled out"] and f[0].evidence["kind"] == "same"
    assert all(s["cosine"] > 0.999 for s in f[0].evidence["slots"])


def test_fine_tuned_target_is_confirmed_with_error_growing_by_depth(world):
    f = _f(world, "target_b")
    assert [x.status for x in f] == ["confirmed"] and f[0].evidence["kind"] == "different"
    cos = [s["cosine"] for s in f[0].evidence["slots"]]
    assert cos[0] > cos[-1]


def test_scale_error_is_seen_by_the_norm_ratio(world):
    """Stored states x1.5: cosine 1 everywhere, norm ratio 1.5 -> confirmed as a scale error."""
    f = _f(world, "target_a", "data_scaled")
    assert [x.status for x in f] == ["confirmed"] and f[0].evidence["kind"] == "scaled"
    assert all(abs(s["norm_ratio"] - 1.5) < 1e-3 for s in f[0].evidence["slots"])


def test_classify_cast_and_missing_inputs(tmp_path):
    """A small uniform error is a cast; without data the check says which input it needs."""
    import pandas as pd
    t = pd.DataFrame({"boundary": LAYOUT, "depth": [0, 2, 4], "cosine": [0.995, 0.994, 0.995],
                      "norm_ratio": [1.01, 0.99, 1.0]})
    assert classify(t) == "cast"
    f = check_drift(read_artifacts())
    assert [x.status for x in f] == ["not checked"] and f[0].needs


def test_undeclared_data_is_read_at_its_identified_boundaries_not_the_configs_claim(world, tmp_path):
    """A shard that declares no layout, a draft config whose ids (vLLM's input-of-layer ids in eagle_config) read
    as output-of-layer name other boundaries: the slots are identified by recapture, so the same target is not
    reported as drift (it was, when the config's claim labelled the slots)."""
    from eagle3lib.checks.judge import run_checks
    from eagle3lib.samples.readers import open_dataset
    from eagle3lib.samples.writers import specforge_sample_path, write_specforge_sample
    from tests.checks.world import draft_raw
    import json
    for i, s in enumerate(open_dataset(world / "data")):
        write_specforge_sample(specforge_sample_path(tmp_path / "sf", i), s.input_ids, s.loss_mask,
                               torch.zeros(s.num_tokens, 32), s.aux.reshape(s.num_tokens, -1))
    raw = draft_raw(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4], "use_aux_hidden_state": True})
    raw["vocab_size"] = 100
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(raw))
    found = run_checks(draft=tmp_path / "draft", target=world / "target_a", data=tmp_path / "sf", only=("drift",),
                       replay_n=3)
    assert [(f.cause, f.status) for f in found] == [("target_drift", "ruled out")]
    assert found[0].evidence["layout_from"] == "identified"
    assert [s["boundary"] for s in found[0].evidence["slots"]] == list(LAYOUT)


def test_a_small_uniform_error_is_named_by_what_is_declared_never_quantization_by_default(world, tmp_path):
    """The cast verdict names the declared quantization, else the declared dtype, else says neither is declared."""
    import json
    from eagle3lib.checks.drift import numerics
    art = read_artifacts(target=world / "target_a")
    assert "no quantization or reduced dtype is declared" in numerics(art) or "dtype" in numerics(art)
    d = tmp_path / "t"
    d.mkdir()
    cfg = json.loads((world / "target_a" / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "float32"}))
    assert "not their numerics" in numerics(read_artifacts(target=d))
    (d / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "fp8"}}))
    assert "declared quantization (fp8)" in numerics(read_artifacts(target=d))
    (d / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    assert "declared dtype (bfloat16" in numerics(read_artifacts(target=d))
