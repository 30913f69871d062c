"""Target helpers: facts from config.json, embedding/lm_head only, tokenizer."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from eagle3lib.errors import CheckpointError, ConfigError
from eagle3lib.model.target import load_target_info, load_target_tensor, load_tokenizer
from tests.tiny_targets import ARCHS, H, V, tiny_target


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


@pytest.mark.parametrize("arch", ARCHS)
def test_saved_architectures_info_embedding_and_lm_head(tmp_path, arch):
    """Facts, embedding and lm_head of targets saved by transformers (Qwen3 tied: no lm_head key, the embedding)."""
    model = tiny_target(arch)
    model.save_pretrained(tmp_path)
    info = load_target_info(tmp_path)
    cfg = model.config
    assert (info.architecture, info.model_type) == (type(model).__name__, cfg.model_type)
    assert (info.num_layers, info.hidden_size, info.vocab_size) == (cfg.num_hidden_layers, H, V)
    assert info.tie_word_embeddings == (arch == "qwen3")
    assert info.attention == {"deepseek_v3": "mla", "gpt_oss": "sliding+full"}.get(arch, "full")
    assert info.moe == (arch in ("qwen3_moe", "deepseek_v3", "gpt_oss"))
    assert info.first_k_dense_replace == (1 if arch == "deepseek_v3" else None)
    assert torch.equal(load_target_tensor(tmp_path, "embed"), model.model.embed_tokens.weight.detach())
    assert torch.equal(load_target_tensor(tmp_path, "lm_head"), model.lm_head.weight.detach())
    if arch == "qwen3":
        from eagle3lib.model.safefiles import read_safetensors_header
        assert "lm_head.weight" not in read_safetensors_header(tmp_path / "model.safetensors")


def test_kimi_k2_and_kimi_k25_configs(tmp_path):
    """Kimi-K2 ships a DeepSeek-V3 stack under model_type kimi_k2; Kimi-K2.5 nests it in text_config."""
    k2 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "num_hidden_layers": 61,
          "first_k_dense_replace": 1, "hidden_size": 7168, "vocab_size": 163840, "tie_word_embeddings": False,
          "kv_lora_rank": 512, "n_routed_experts": 384, "auto_map": {"AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"}}
    (tmp_path / "config.json").write_text(json.dumps(k2))
    info = load_target_info(tmp_path)
    assert (info.architecture, info.model_type, info.num_layers) == ("DeepseekV3ForCausalLM", "kimi_k2", 61)
    k25 = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
           "text_config": {**k2, "model_type": "kimi_k2"}, "vision_config": {"hidden_size": 1152}}
    (tmp_path / "config.json").write_text(json.dumps(k25))
    info = load_target_info(tmp_path)
    assert (info.model_type, info.num_layers, info.hidden_size, info.tie_word_embeddings) == (
        "kimi_k2", 61, 7168, False)
    assert (info.attention, info.first_k_dense_replace, info.moe) == ("mla", 1, True)
    save_file({"language_model.model.embed_tokens.weight": torch.ones(4, 2),
               "language_model.lm_head.weight": torch.zeros(4, 2)}, str(tmp_path / "model.safetensors"))
    assert torch.equal(load_target_tensor(tmp_path, "embed"), torch.ones(4, 2))
    assert torch.equal(load_target_tensor(tmp_path, "lm_head"), torch.zeros(4, 2))
