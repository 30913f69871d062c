"""The MLA target's config fields against what transformers, SGLang and vLLM read (engines/mla_fields.py), and the
MLA draft's config as vLLM's deepseek_eagle3 reads it.

transformers: the installed 5.24.0 (its config class and model, run); SGLang: the table's rows, read from source
(deepseek_v2.py @ 3e4a39e), checked against the shipped target's config.json; vLLM 0.32.0 (marker `engine`): every
line the table cites is read in the installed vLLM source and names its field (the served MLA deployments show the
engine loading the target: tests/engines/test_vllm_mla_world.py).
"""
from __future__ import annotations

import inspect
import json
import subprocess
from pathlib import Path

import pytest
import torch

from eagle3lib.demo.shipped import artifacts_dir
from eagle3lib.engines import mla_fields as M
from eagle3lib.vllm_engine.env import unavailable_reason, vllm_python

ART = artifacts_dir("mla")
TARGET = json.loads((ART / "target" / "config.json").read_text())


def test_transformers_declares_what_the_table_says_it_reads():
    from transformers import DeepseekV3Config
    declared = set(inspect.signature(DeepseekV3Config.__init__).parameters)
    for field, (tf, _, _) in M.TARGET_READS.items():
        assert (field in declared) == (tf is not None), field


def test_transformers_keeps_the_engine_fields_it_does_not_declare(tmp_path):
    """topk_method, scoring_func, moe_layer_freq survive transformers' load and save of the shipped target config."""
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(ART / "target")
    cfg.save_pretrained(tmp_path)
    again = json.loads((tmp_path / "config.json").read_text())
    for field in ("topk_method", "scoring_func", "moe_layer_freq"):
        assert getattr(cfg, field) == TARGET[field] and again[field] == TARGET[field], field


def test_transformers_latent_norms_ignore_rms_norm_eps_so_the_world_keeps_1e6():
    """transformers builds q_a / kv_a_layernorm with eps 1e-6 whatever rms_norm_eps says; the engines read
    rms_norm_eps there: the shipped target carries 1e-6, so all three normalise the latents alike."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention
    cfg = DeepseekV3Config(**{k: TARGET[k] for k in ("hidden_size", "num_attention_heads", "q_lora_rank",
                                                     "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                                     "v_head_dim")}, rms_norm_eps=0.5)
    attn = DeepseekV3Attention(cfg, layer_idx=0)
    assert attn.kv_a_layernorm.variance_epsilon == 1e-6 and attn.q_a_layernorm.variance_epsilon == 1e-6
    assert TARGET["rms_norm_eps"] == 1e-6


@pytest.mark.parametrize("reader", M.READERS)
def test_the_shipped_mla_target_carries_every_field_each_reader_reads(reader):
    assert M.fields_missing(TARGET, reader) == []


def test_the_shipped_mla_target_has_deepseek_v3s_attention_and_router():
    assert TARGET["kv_lora_rank"] + TARGET["qk_rope_head_dim"] == 576        # CPU_MLA's only latent width
    assert (TARGET["kv_lora_rank"], TARGET["qk_rope_head_dim"]) == (512, 64)
    assert (TARGET["topk_method"], TARGET["scoring_func"]) == ("noaux_tc", "sigmoid")
    assert (TARGET["n_group"], TARGET["topk_group"], TARGET["moe_layer_freq"]) == (1, 1, 1)   # Kimi-K2's groups


def test_the_vllm_deployments_drafts_carry_what_deepseek_eagle3_reads(tmp_path):
    """The mla world's vLLM deployments write the drafts in vLLM's MLA dialect: model_type deepseek_v2 (not
    deepseek_v3, which vLLM turns into deepseek_mtp), top-level ids in vLLM's input-of-layer convention, fc sized by
    num_aux_hidden_states, and every field deepseek_eagle3.py reads."""
    from eagle3demo import deployments
    for name, ids in (("healthy", [2, 4, 6]), ("embedding_slot", [0, 2, 4, 6])):
        shipped = ART / {"draft": "draft", "retrained_draft": "draft_retrained"}[deployments.deployment(name,
                                                                                                  "mla").source]
        out = deployments.write_deployment(name, tmp_path / name, draft=shipped, target=ART / "target", world="mla")
        cfg = json.loads((out / "config.json").read_text())
        assert [f for f in M.DRAFT_READS if f not in cfg] == [], name
        assert cfg["model_type"] == "deepseek_v2" and cfg["eagle_aux_hidden_state_layer_ids"] == ids
        assert cfg["num_aux_hidden_states"] == len(ids)
        assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]) == (512, 64)


def _vllm_root() -> Path:
    code = "import importlib.util; print(importlib.util.find_spec('vllm').submodule_search_locations[0])"
    out = subprocess.run([str(vllm_python()), "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.mark.engine
@pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "vLLM is installed")
def test_every_vllm_line_the_table_cites_reads_its_field_in_the_installed_vllm():
    root = _vllm_root()
    version = (root / "version.py").read_text() if (root / "version.py").is_file() else ""
    assert "0.32.0" in version or "0.32.0" in (root / "_version.py").read_text()
    files = {"deepseek_v2.py": root / "model_executor" / "models" / "deepseek_v2.py",
             "deepseek_eagle3.py": root / "model_executor" / "models" / "deepseek_eagle3.py",
             "gpu_model_runner.py": root / "v1" / "worker" / "gpu_model_runner.py"}
    lines = {k: p.read_text().split("\n") for k, p in files.items()}
    rows = [(f, r[2]) for f, r in M.TARGET_READS.items() if r[2] is not None] + list(M.DRAFT_READS.items())
    checked = 0
    for field, read in rows:
        if read.line is None:
            continue
        name = next(k for k in files if k in read.where)
        assert field in lines[name][read.line - 1], (field, read.where, lines[name][read.line - 1])
        checked += 1
    assert checked >= 35
