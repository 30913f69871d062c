"""Capture of every residual boundary on tiny random Llama, Qwen3, Qwen3-MoE, DeepSeek-V3 (MLA + MoE) and gpt-oss.

Each target is saved with save_pretrained and loaded back through `load_target_model`. HF defines embed and
layer_in.i (hidden_states[i]) and final_postnorm (hidden_states[L]); the raw last-layer output (final_prenorm) is
what HF records as hidden_states[L] when the config's `tie_last_hidden_states` is off. All comparisons are exact
in float32.
"""
from __future__ import annotations

import pytest
import torch

from eagle3lib.hidden.capture import capture, capture_batch, capture_for_layout, load_target_model
from eagle3lib.hidden.decoders import decoder_stack
from tests.tiny_targets import ARCHS, H, V, save_tiny_target

T = 11


@pytest.fixture(scope="module", params=ARCHS)
def loaded(request, tmp_path_factory):
    """(arch, model loaded through eagle3lib) for each architecture."""
    folder = save_tiny_target(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, load_target_model(folder)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, V, (T,), generator=torch.Generator().manual_seed(5))


def _hf_states(model, ids, tie_last: bool):
    model.config.tie_last_hidden_states = tie_last
    try:
        with torch.no_grad():
            return model(ids[None], output_hidden_states=True).hidden_states
    finally:
        del model.config.tie_last_hidden_states


def test_every_boundary_equals_hf_hidden_states(loaded, ids):
    """embed / layer_in.i / final_postnorm = HF hidden_states[0 / i / L]; final_prenorm = the untied hidden_states[L]."""
    arch, model = loaded
    L = model.config.num_hidden_layers
    cap = capture(model, ids)
    hs, raw = _hf_states(model, ids, True), _hf_states(model, ids, False)
    assert cap.num_layers == L and cap.dtype == torch.float32 and cap.hidden_size == H
    assert cap.names == ["embed"] + [f"layer_in.{i}" for i in range(1, L)] + ["final_prenorm", "final_postnorm"]
    assert len(hs) == L + 1
    assert torch.equal(cap["embed"], hs[0][0])
    for i in range(1, L):
        assert torch.equal(cap[f"layer_in.{i}"], hs[i][0]), f"{arch} layer_in.{i}"
    assert torch.equal(cap["final_postnorm"], hs[L][0])
    assert torch.equal(cap["final_prenorm"], raw[L][0])
    assert not torch.allclose(cap["final_prenorm"], cap["final_postnorm"], atol=1e-2)
    _, _, norm = decoder_stack(model)
    assert torch.equal(norm(cap["final_prenorm"][None])[0], cap["final_postnorm"])


def test_subset_batches_and_layout_concat(loaded, ids):
    """only= stops early with the same states; ragged batches give the single-run states; fc input is the concat."""
    arch, model = loaded
    L = model.config.num_hidden_layers
    full = capture(model, ids)
    part = capture(model, ids, only=["layer_in.1"])
    assert sorted(part.states) == ["layer_in.1"] and torch.equal(part["layer_in.1"], full["layer_in.1"])
    layout = ("embed", f"layer_in.{L - 1}", "final_prenorm")
    aux = capture_for_layout(model, ids, layout)
    assert aux.shape == (T, 3 * H)
    assert torch.equal(aux, torch.cat([full[n] for n in layout], dim=-1))
    caps = capture_batch(model, [ids, ids[:6]], batch_size=2, only=["layer_in.1", "final_postnorm"])
    one = capture(model, ids[:6], only=["final_postnorm"])
    assert torch.allclose(caps[1]["final_postnorm"], one["final_postnorm"], atol=1e-5)
    assert torch.allclose(caps[0]["layer_in.1"], full["layer_in.1"], atol=1e-5)


def test_decoder_found_inside_a_vlm_wrapper(ids):
    """A Kimi-K2.5-style wrapper (`model.language_model` = the decoder) captures the decoder's own states."""
    from tests.tiny_targets import tiny_target

    lm = tiny_target("deepseek_v3")
    wrapper = torch.nn.Module()
    wrapper.model = torch.nn.Module()
    wrapper.model.language_model = lm.model
    base, layers, norm = decoder_stack(wrapper)
    assert base is lm.model and layers is lm.model.layers and norm is lm.model.norm
    a, b = capture(wrapper, ids), capture(lm, ids)
    assert a.names == b.names and all(torch.equal(a[n], b[n]) for n in a.names)


def test_kimi_k2_model_type_loads_as_its_deepseek_v3_architecture(tmp_path, ids):
    """Kimi-K2's config says model_type kimi_k2 (remote code) over a DeepseekV3ForCausalLM stack: loaded natively."""
    import json

    folder = save_tiny_target("deepseek_v3", tmp_path / "k2")
    raw = json.loads((folder / "config.json").read_text())
    raw.update(model_type="kimi_k2", auto_map={"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"})
    (folder / "config.json").write_text(json.dumps(raw))
    model = load_target_model(folder)
    assert type(model).__name__ == "DeepseekV3ForCausalLM" and model.config.first_k_dense_replace == 1
    ref = load_target_model(save_tiny_target("deepseek_v3", tmp_path / "v3"))
    a, b = capture(model, ids), capture(ref, ids)
    assert all(torch.equal(a[n], b[n]) for n in b.names)


def test_unknown_model_type_without_a_known_architecture_is_a_config_error(tmp_path):
    """Remote-code-only configs (no transformers architecture to fall back on) are refused with the cause."""
    import json

    from eagle3lib.errors import ConfigError

    folder = save_tiny_target("llama", tmp_path / "x")
    raw = json.loads((folder / "config.json").read_text())
    raw.update(model_type="my_remote_model", architectures=["MyRemoteForCausalLM"])
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="remote code"):
        load_target_model(folder)


@pytest.mark.parametrize("arch", ["deepseek_v3", "gpt_oss"])
def test_replay_recapture_fills_missing_slots_from_the_saved_target(tmp_path, ids, arch):
    """replay's Recapture loads the saved MLA / sliding-window target and returns the boundaries a sample lacks."""
    from eagle3lib.replay.layoutsearch import Recapture
    from eagle3lib.samples.sample import Sample

    folder = save_tiny_target(arch, tmp_path / arch)
    ref = capture(load_target_model(folder), ids)
    s = Sample("s0", ids, torch.ones(T, dtype=torch.long), ref.stack(["embed"]), ("embed",))
    got = Recapture(folder).states(s, ["layer_in.1", "final_prenorm"])
    assert sorted(got) == ["final_prenorm", "layer_in.1"]
    assert torch.equal(got["layer_in.1"], ref["layer_in.1"]) and torch.equal(got["final_prenorm"], ref["final_prenorm"])


def test_deepseek_checkpoint_with_an_mtp_layer_loads_without_it(tmp_path, ids):
    """DeepSeek-V3 / Kimi-K2 checkpoints carry their MTP layer as model.layers.<L>.* (num_nextn_predict_layers):
    the target loads without it and captures its L decoder layers exactly as before."""
    import json

    from safetensors.torch import load_file, save_file

    folder = save_tiny_target("deepseek_v3", tmp_path / "mtp")
    ref = capture(load_target_model(folder), ids)
    weights = load_file(str(folder / "model.safetensors"))
    L = ref.num_layers
    weights.update({k.replace("model.layers.0.", f"model.layers.{L}."): v.clone()
                    for k, v in weights.items() if k.startswith("model.layers.0.")})
    weights[f"model.layers.{L}.eh_proj.weight"] = torch.zeros(H, 2 * H)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "num_nextn_predict_layers": 1}))
    model = load_target_model(folder)
    got = capture(model, ids)
    assert len(model.model.layers) == L and got.names == ref.names
    assert all(torch.equal(got[n], ref[n]) for n in ref.names)
