"""model.layers: RoPE with a partial rotary factor, as vLLM's RotaryEmbedding applies it (rotary_dim =
int(head_dim * partial_rotary_factor): the first rotary_dim dims of each head rotated neox-style, the rest passed)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from eagle3lib.errors import ConfigError
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.layers import Rotary, apply_rope

RAW = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
       "draft_vocab_size": 50, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 256}


def reference(x, positions, theta, rd):
    """vLLM's forward_native for neox style, written out: rotate x[..., :rd] by rotate-half, pass the rest."""
    inv = 1.0 / theta ** (torch.arange(0, rd, 2, dtype=torch.float) / rd)                 # (rd/2,)
    ang = positions.float()[:, None] * inv                                                  # (T, rd/2)
    cos, sin = ang.cos(), ang.sin()
    rot, rest = x[..., :rd], x[..., rd:]
    a, b = rot[..., : rd // 2], rot[..., rd // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)


@pytest.mark.parametrize("factor", [1.0, 0.5, 0.25])
def test_partial_rotary_rotates_the_first_part_of_each_head_as_vllm(factor):
    cfg = DraftConfig.from_dict({**RAW, "partial_rotary_factor": factor})
    assert cfg.partial_rotary_factor == factor
    rot = Rotary(cfg)
    pos = torch.arange(7)[None]                                                             # (1, T)
    cos, sin = rot(pos, torch.float32)
    rd = int(16 * factor)
    assert cos.shape == (1, 7, rd)
    x = torch.randn(1, 4, 7, 16)                                                            # (B, nh, T, hd)
    got = apply_rope(x, cos, sin)
    assert torch.allclose(got, reference(x, pos[0], 10000.0, rd), atol=1e-6)
    if factor < 1:
        assert torch.equal(got[..., rd:], x[..., rd:])


def test_partial_rotary_factor_is_read_where_engines_read_it_and_bounded():
    nested = DraftConfig.from_dict({**RAW, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                               "partial_rotary_factor": 0.5}})
    assert nested.partial_rotary_factor == 0.5 and DraftConfig.from_dict(RAW).partial_rotary_factor == 1.0
    assert replace(nested, partial_rotary_factor=1.0).partial_rotary_factor == 1.0
    for bad in (0, 1.5, "half"):
        with pytest.raises(ConfigError, match="partial_rotary_factor"):
            DraftConfig.from_dict({**RAW, "partial_rotary_factor": bad})
