"""Shared fixtures: tiny draft configs in each dialect, written by the tests themselves; the demo's reports."""
from __future__ import annotations

import copy
from pathlib import Path

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


@pytest.fixture(scope="session")
def demo_reports(tmp_path_factory):
    """(exit code, output folder) of one real report run over every notebook on the embedded demo world; run
    once per test session (minutes), shared by the end-to-end test and the offline-HTML check."""
    from eagle3lib.report import runner

    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("demo") / "reports"
    rc = runner.main(["--notebooks", str(root / "notebooks"), "--out", str(out), "--cwd", str(root)])
    return rc, out
