"""Target helpers: facts from config.json, embedding/lm_head only, tokenizer."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.errors import CheckpointError, ConfigError
from eagle3lib.model.target import load_target_info, load_target_tensor, load_tokenizer


def _sharded_target(d, tied=False, text_config=False):
    cfg = {"num_hidden_layers": 4, "hidden_size": 8, "vocab_size": 10, "model_type": "llama",
           "tie_word_embeddings": tied}
    raw = {"architectures": ["LlamaForCausalLM"], **({"text_config": cfg} if text_config else cfg)}
    (d / "config.json").write_text(json.dumps(raw))
    save_file({"model.embed_tokens.weight": torch.arange(80.).view(10, 8)}, str(d / "m-1.safetensors"))
    big = {f"model.layers.{i}.mlp.up_proj.weight": torch.zeros(8, 8) for i in range(4)}
    if not tied:
        big["lm_head.weight"] = torch.ones(10, 8)
    save_file(big, str(d / "m-2.safetensors"))
    wm = {"model.embed_tokens.weight": "m-1.safetensors", **{k: "m-2.safetensors" for k in big}}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))


def test_info_and_embedding_only(tmp_path):
    """Facts come from config.json; the embedding is read without touching the other shard."""
    _sharded_target(tmp_path)
    info = load_target_info(tmp_path)
    assert (info.num_layers, info.hidden_size, info.vocab_size, info.architecture) == (4, 8, 10, "LlamaForCausalLM")
    (tmp_path / "m-2.safetensors").write_bytes(b"x" * 64)        # would fail if read
    assert torch.equal(load_target_tensor(tmp_path, "embed"), torch.arange(80.).view(10, 8))


def test_tied_lm_head_and_vlm_text_config(tmp_path):
    """A tied target's lm_head is its embedding; VLM configs read text_config."""
    _sharded_target(tmp_path, tied=True, text_config=True)
    assert load_target_info(tmp_path).num_layers == 4
    assert torch.equal(load_target_tensor(tmp_path, "lm_head"), torch.arange(80.).view(10, 8))


def test_missing_fields_and_embedding(tmp_path):
    """A config without layer count, and weights without an embedding, are named."""
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        load_target_info(tmp_path)
    save_file({"lm_head.weight": torch.ones(2, 2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="no embed tensor.*lm_head.weight"):
        load_target_tensor(tmp_path, "embed")


def test_no_tokenizer_is_none(tmp_path):
    """A directory without tokenizer files gives None, not an exception."""
    assert load_tokenizer(tmp_path) is None
