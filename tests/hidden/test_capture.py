"""Reference captures from a tiny random Llama; Slots from any tensors (dumps: tests/test_dumps.py)."""
from __future__ import annotations


import pytest
import torch
import transformers

from eagle3lib.hidden.capture import as_slots, capture, capture_batch, capture_for_layout, load_target_model
from eagle3lib.errors import LayoutError, MissingFileError

L, H = 6, 32


def tiny_llama(seed: int = 0) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=H, intermediate_size=64, num_hidden_layers=L,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 100, (16,), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def hf_states(model, ids):
    with torch.no_grad():
        return model(ids[None], output_hidden_states=True).hidden_states


def test_names_match_hf_hidden_states(model, ids, hf_states):
    """embed = hs[0], layer_in.i = hs[i], final_postnorm = hs[L]; final_prenorm is the raw last-layer output."""
    cap = capture(model, ids)
    assert cap.names == ["embed"] + [f"layer_in.{i}" for i in range(1, L)] + ["final_prenorm", "final_postnorm"]
    assert len(hf_states) == L + 1 and cap.num_layers == L and cap.dtype == torch.float32
    assert torch.equal(cap["embed"], hf_states[0][0])
    for i in range(1, L):
        assert torch.equal(cap[f"layer_in.{i}"], hf_states[i][0])
    assert torch.equal(cap["final_postnorm"], hf_states[L][0])
    assert not torch.allclose(cap["final_prenorm"], cap["final_postnorm"], atol=1e-3)
    assert torch.allclose(model.model.norm(cap["final_prenorm"]), cap["final_postnorm"], atol=1e-6)
    assert torch.equal(cap["layer_out.2"], cap["layer_in.3"]) and torch.equal(cap["layer_in.0"], cap["embed"])
    assert cap.stack(["embed", "layer_in.3"]).shape == (16, 2, H)


def test_only_subset_stops_early(model, ids):
    """only= keeps just what is asked and does not run the layers after the deepest one."""
    ran = []
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i))
             for i, layer in enumerate(model.model.layers)]
    hooks.append(model.model.norm.register_forward_hook(lambda m, a, o: ran.append("norm")))
    try:
        cap = capture(model, ids, only=["layer_in.2", "embed"])
    finally:
        for h in hooks:
            h.remove()
    assert sorted(cap.states) == ["embed", "layer_in.2"]
    assert ran == [0, 1]
    full = capture(model, ids)
    assert torch.equal(cap["layer_in.2"], full["layer_in.2"])
    fin = capture(model, ids, only=["final_prenorm"])
    assert set(fin.states) == {"final_prenorm", "final_postnorm"}   # one hook gives both
    with pytest.raises(LayoutError, match="not captured"):
        cap["layer_in.3"]


def test_batched_and_ragged_batches_match_single_runs(model, ids):
    """A (B, T) batch and right-padded ragged batches give the per-sequence states."""
    one = capture(model, ids)
    two = capture(model, torch.stack([ids, ids.flip(0)]))
    assert two.batched and two["layer_in.4"].shape == (2, 16, H)
    assert torch.allclose(two.sequence(0)["layer_in.4"], one["layer_in.4"], atol=1e-5)
    caps = capture_batch(model, [ids, ids[:7], ids[3:12]], batch_size=2, only=["layer_in.3", "final_prenorm"])
    assert [c["layer_in.3"].shape[0] for c in caps] == [16, 7, 9]
    for c, s in zip(caps, [ids, ids[:7], ids[3:12]]):
        ref = capture(model, s, only=["layer_in.3", "final_prenorm"])
        assert torch.equal(c.input_ids, s)
        assert torch.allclose(c["layer_in.3"], ref["layer_in.3"], atol=1e-5)
        assert torch.allclose(c["final_prenorm"], ref["final_prenorm"], atol=1e-5)


def test_capture_for_layout_concatenates_in_layout_order(model, ids):
    """(T, k*H) in the order given, accepting output-of-layer aliases."""
    full = capture(model, ids)
    aux = capture_for_layout(model, ids, "final_prenorm, layer_out.0, embed")
    assert aux.shape == (16, 3 * H)
    assert torch.equal(aux[:, :H], full["final_prenorm"])
    assert torch.equal(aux[:, H:2 * H], full["layer_in.1"])
    assert torch.equal(aux[:, 2 * H:], full["embed"])


def test_dtype_and_progress(ids):
    """dtype= casts the model and the states keep the compute dtype; progress= runs headless."""
    m = tiny_llama()
    cap = capture(m, ids, dtype=torch.bfloat16, only=["layer_in.5"], progress=True)
    assert cap.dtype == torch.bfloat16 and cap["layer_in.5"].dtype == torch.bfloat16


def test_a_bf16_capture_keeps_the_rope_frequencies_fp32(tmp_path, ids):
    """Casting the target for a bf16 capture (and loading it in bf16) leaves transformers' rotary inv_freq in fp32,
    with the fp32 values: the engines compute RoPE angles in fp32. Without the guard, `.to(bfloat16)` rounds it."""
    m = tiny_llama()
    inv32 = m.model.rotary_emb.inv_freq.clone()
    assert inv32.dtype == torch.float32 and not torch.equal(inv32.bfloat16().float(), inv32)   # rounding would show
    capture(m, ids, dtype=torch.bfloat16, only=["layer_in.2"])
    assert m.model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert torch.equal(m.model.rotary_emb.inv_freq, inv32)
    m.save_pretrained(tmp_path / "t")
    assert torch.equal(load_target_model(tmp_path / "t", dtype="bfloat16").model.rotary_emb.inv_freq, inv32)


def test_bad_requests_raise_layout_errors(model, ids):
    """Unknown names, layers beyond the target and modules without a decoder stack fail with LayoutError."""
    with pytest.raises(LayoutError, match="unknown boundary"):
        capture(model, ids, only=["layer7"])
    with pytest.raises(LayoutError, match="beyond"):
        capture(model, ids, only=["layer_in.9"])
    with pytest.raises(LayoutError, match="no decoder stack"):
        capture(torch.nn.Linear(2, 2), ids)
    with pytest.raises(LayoutError, match="non-empty"):
        capture(model, torch.zeros(0, dtype=torch.long))


def test_load_target_model_roundtrip_and_errors(tmp_path, model, ids):
    """A saved tiny target loads back (no remote code) and captures the same states; bad paths are explained."""
    model.save_pretrained(tmp_path / "t")
    back = load_target_model(tmp_path / "t", dtype="float32")
    assert torch.allclose(capture(back, ids)["layer_in.3"], capture(model, ids)["layer_in.3"], atol=1e-6)
    with pytest.raises(MissingFileError, match="no such directory"):
        load_target_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingFileError, match="config.json"):
        load_target_model(tmp_path / "empty")


def test_as_slots_shapes_and_sample(ids):
    """(T, k, H), (T, k*H), (1, T, k*H), lists and datasets.Sample all give k (T, H) slots."""
    from eagle3lib.samples.readers import Sample

    aux = torch.randn(16, 3, H)
    flat = aux.reshape(16, 3 * H)
    for x, kw in [(aux, {}), (flat, {"k": 3}), (flat[None], {"hidden_size": H}), (list(aux.unbind(1)), {})]:
        s = as_slots(x, **kw)
        assert s.k == 3 and s.num_tokens == 16 and torch.equal(s.tensors[2], aux[:, 2])
    s = as_slots(Sample("a", ids, torch.ones_like(ids), aux, ("embed", "layer_in.2", "layer_in.4"), source="f.ckpt"))
    assert s.layout == ("embed", "layer_in.2", "layer_in.4") and s.source == "f.ckpt" and torch.equal(s.input_ids, ids)
    with pytest.raises(LayoutError, match="cannot split"):
        as_slots(torch.randn(16, 50), k=3)
    with pytest.raises(LayoutError, match="cannot split"):
        as_slots(flat)
    bad = as_slots(aux, ["embed", "layer_in.2"])
    assert bad.layout is None and "declaration ignored" in bad.notes[0]
