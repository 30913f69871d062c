"""Serving dumps: SGLang tensor dumps back to boundaries (from a tiny random Llama), the eagle3lib dump format."""
from __future__ import annotations

import json

import pytest
import torch

from eagle3lib.hidden.capture import Capture, capture
from eagle3lib.hidden.dumps import load_dump, load_sglang_dump, save_dump
from eagle3lib.errors import DataError, MissingFileError
from tests.hidden.test_capture import H, L, ids, model  # noqa: F401  (module-scoped fixtures shared with test_capture)


def _write_sglang_pass(d, n, cap: Capture, norm_module, decode=False, prefix="model."):
    T, L = cap.input_ids.shape[0], cap.num_layers
    st = {"model.forward_batch_info.input_ids": cap.input_ids[:1] if decode else cap.input_ids,
          "model.forward_batch_info.seq_lens": torch.tensor([T]),
          "model.forward_batch_info.positions": torch.arange(T),
          prefix + "embed_tokens": cap["embed"], prefix + "layers.0.input_layernorm": cap["embed"] * 0.5}
    for i in range(1, L):
        st[f"{prefix}layers.{i}.input_layernorm"] = [cap[f"layer_in.{i}"] * 0.5, cap[f"layer_in.{i}"]]
    st[prefix + "norm"] = [cap["final_postnorm"], cap["final_prenorm"]]
    if decode:
        st = {k: (v[:1] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in st.items()}
    torch.save(st, d / f"Pass{n:05d}.pt")


def test_load_sglang_dump_reads_boundaries(tmp_path, model, ids):
    """SGLang leaf-module outputs map back to embed / layer_in.i / final_pre- and post-norm; decode passes skipped."""
    cap = capture(model, ids)
    rank = tmp_path / "dump" / "target" / "TP0_PP0_Rank0_pid42"
    rank.mkdir(parents=True)
    _write_sglang_pass(rank, 0, cap, model.model.norm)
    _write_sglang_pass(rank, 1, cap, model.model.norm, decode=True)
    other = tmp_path / "dump" / "target" / "TP1_PP0_Rank1_pid43"   # tensor-parallel rank 1: ignored
    other.mkdir()
    torch.save({"model.embed_tokens": torch.zeros(3)}, other / "Pass00000.pt")
    caps = load_sglang_dump(tmp_path / "dump")
    assert len(caps) == 1 and caps[0].num_layers == L
    got = caps[0]
    assert got.names == cap.names and torch.equal(got.input_ids, ids)
    for name in cap.names:
        assert torch.equal(got[name], cap[name]), name
    assert len(load_sglang_dump(tmp_path / "dump", decode=True)) == 2
    with pytest.raises(MissingFileError, match="rank folders"):
        load_sglang_dump(tmp_path)


def test_sglang_dump_of_a_vlm_wrapped_mla_target(tmp_path, ids):
    """A Kimi-K2.5-style dump (decoder under language_model.model., a vision tower beside it) of a tiny DeepSeek-V3
    capture reads back every boundary; the vision tower's layers are not taken for decoder layers."""
    from tests.tiny_targets import tiny_target

    cap = capture(tiny_target("deepseek_v3"), ids)
    rank = tmp_path / "TP0_PP0_Rank0_pid7"
    rank.mkdir()
    _write_sglang_pass(rank, 0, cap, None, prefix="language_model.model.")
    st = torch.load(rank / "Pass00000.pt", weights_only=True)
    st["vision_tower.encoder.layers.1.input_layernorm"] = [torch.zeros(3), torch.ones(3)]
    torch.save(st, rank / "Pass00000.pt")
    got = load_sglang_dump(rank)[0]
    assert got.num_layers == cap.num_layers and got.names == cap.names
    assert all(torch.equal(got[n], cap[n]) for n in cap.names)


def test_sglang_dump_without_states_is_a_data_error(tmp_path):
    """Pass files with no residual-stream keys give a DataError naming the likely cause."""
    rank = tmp_path / "TP0_PP0_Rank0_pid1"
    rank.mkdir()
    torch.save({"model.forward_batch_info.input_ids": torch.arange(4), "lm_head": torch.zeros(4, 3)},
               rank / "Pass00000.pt")
    with pytest.raises(DataError, match="debug-tensor-dump-layers"):
        load_sglang_dump(rank)


def test_dump_roundtrip_and_partial_reads(tmp_path, ids):
    """save_dump -> load_dump keeps tensors, ids and claimed slots; missing files become notes."""
    auxes = [torch.randn(16, 2, H), torch.randn(9, 2, H)]
    root = save_dump(tmp_path / "d", auxes, [ids, ids[:9]], slots=["layer_in.1", "layer_out.3"], hidden_size=H,
                     source="test", num_layers=L)
    dump = load_dump(root)
    assert len(dump) == 2 and dump.manifest["source"] == "test" and not dump.notes
    assert dump[0].layout == ("layer_in.1", "layer_in.4")
    assert torch.equal(dump[1].tensors[1], auxes[1][:, 1]) and torch.equal(dump[1].input_ids, ids[:9])
    (root / "req_00000.safetensors").unlink()
    part = load_dump(root)
    assert len(part) == 1 and "missing file" in part.notes[0]
    (root / "req_00001.safetensors").unlink()
    with pytest.raises(DataError, match="no request file"):
        load_dump(root)
    with pytest.raises(MissingFileError):
        load_dump(tmp_path / "none")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(DataError, match="not an eagle3lib dump"):
        load_dump(tmp_path / "bad")


def test_dump_keeps_the_engine_manifest_and_extras(tmp_path, ids):
    """engine= goes into the manifest and back (slots stay None); extras are per-request tensors read by name."""
    auxes, logits = [torch.randn(5, 2 * H), torch.randn(3, 2 * H)], [torch.randn(5, 7), torch.randn(3, 7)]
    engine = {"name": "vllm", "version": "0.32.0", "runner": "V1", "aux_layer_ids": (0, 2)}
    root = save_dump(tmp_path / "d", auxes, [ids[:5], ids[:3]], slots=None, hidden_size=H, source="test",
                     engine=engine, extras={"draft_logits": logits})
    d = load_dump(root)
    assert d.engine == {**engine, "aux_layer_ids": [0, 2]} and d.manifest["slots"] is None
    assert d.manifest["extras"] == ["draft_logits"] and torch.equal(d.extra(1, "draft_logits"), logits[1])
    with pytest.raises(DataError, match="no extra tensor"):
        d.extra(0, "hidden")
    with pytest.raises(DataError, match="clash"):
        save_dump(tmp_path / "e", auxes, [ids[:5], ids[:3]], slots=None, hidden_size=H, source="t",
                  extras={"aux": auxes})
    old = load_dump(save_dump(tmp_path / "f", auxes, [ids[:5], ids[:3]], slots=None, hidden_size=H, source="t"))
    assert old.engine is None and "extras" not in old.manifest
