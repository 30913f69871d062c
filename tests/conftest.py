"""Shared fixtures: tiny draft configs in each dialect, written by the tests themselves."""
from __future__ import annotations

import copy

import pytest
import torch

# A SpecForge/SGLang-dialect config of a tiny 4-slot draft (the seed's [embed, low, mid, high] layout).
TINY_SPECFORGE = {
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 32,
    "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
    "vocab_size": 120, "draft_vocab_size": 40, "target_hidden_size": 32, "tie_word_embeddings": False,
    "num_aux_hidden_states": 4,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 1, 3, 5], "use_aux_hidden_state": True},
}


@pytest.fixture
def tiny_cfg_dict():
    """A fresh copy of the tiny SpecForge-dialect config dict."""
    return copy.deepcopy(TINY_SPECFORGE)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
