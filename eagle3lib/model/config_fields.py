"""Readers from a parsed config.json to typed values, for `config.DraftConfig.from_dict` — the dialect
(`detect_dialect`), layer ids and their convention, RoPE, the MLA sizes (`MlaConfig`), the P-EAGLE fields, the decoder
layers' type, bias flags — and the algorithm gate (block drafters refused by name).
What differs per dialect (where the ids are, their convention, a missing rope_theta's meaning) is not here: the
readers look it up in the dialect's row, `dialects.CONFIG_DIALECTS`.
Each reader names the file and key in its ConfigError and appends what it tolerates to `warnings`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import ConfigError, UnsupportedDraftError
from .dialects import (CONFIG_DIALECTS, FLAG_DEFAULTS, FLAG_PLACES, MLA_ARCHITECTURE, MLA_ARCHITECTURES,
                       NESTED_IDS_OPEN, value_at)
from .mla_vllm import ARCHITECTURES as VLLM_MLA_ARCHITECTURES, VLLM_ONLY_ARCHITECTURES

MLA_SIZES = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """DeepSeek's YaRN magnitude factor 0.1 * mscale * ln(factor) + 1 (1 when factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class MlaConfig:
    """The multi-latent attention fields of an MLA draft (SGLang `Eagle3DeepseekV2ForCausalLM`).

    q = q_b_proj(q_a_layernorm(q_a_proj(u))) (q_proj(u) when q_lora_rank is None), nh heads of qk_head_dim =
    qk_nope_head_dim + qk_rope_head_dim; kv_a_proj_with_mqa(u) = [latent (kv_lora_rank), k_pe (qk_rope_head_dim,
    one head shared by all)]; kv_b_proj(kv_a_layernorm(latent)) = nh x [k_nope, v (v_head_dim)].
    """

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope_interleave: bool = True          # RoPE on interleaved pairs (x0, x1), (x2, x3)... (SGLang: always)
    rope_scaling: Mapping[str, Any] | None = field(default=None, repr=False)
    # derived once
    qk_head_dim: int = field(init=False)
    softmax_scale: float = field(init=False)   # qk_head_dim**-0.5 x yarn_mscale(factor, mscale_all_dim)**2
    rope_mscale: float = field(init=False)     # cos/sin factor: yarn_mscale(f, mscale) / yarn_mscale(f, mscale_all_dim)

    def __post_init__(self):
        object.__setattr__(self, "qk_head_dim", self.qk_nope_head_dim + self.qk_rope_head_dim)
        scale, rope = self.qk_head_dim ** -0.5, 1.0
        s = self.rope_scaling
        if s:                       # SGLang DeepseekV2AttentionMLA: any rope_scaling is DeepSeek YaRN
            f = float(s.get("factor", 1.0))
            scale *= yarn_mscale(f, float(s.get("mscale_all_dim") or 0.0)) ** 2
            rope = yarn_mscale(f, float(s.get("mscale") or 1.0)) / yarn_mscale(f, float(s.get("mscale_all_dim") or 0.0))
        object.__setattr__(self, "softmax_scale", scale)
        object.__setattr__(self, "rope_mscale", rope)

    def as_dict(self) -> dict[str, Any]:
        """The config.json fields (SGLang / transformers DeepseekV3Config names)."""
        return {"q_lora_rank": self.q_lora_rank, "kv_lora_rank": self.kv_lora_rank,
                "qk_nope_head_dim": self.qk_nope_head_dim, "qk_rope_head_dim": self.qk_rope_head_dim,
                "v_head_dim": self.v_head_dim, "rope_interleave": self.rope_interleave}



# model_type of the decoder layers -> the layer type modelled (speculators `model_classes`: llama, qwen3)
LAYER_TYPES = {"llama": "llama", "qwen3": "qwen3"}


# model_types that name a multi-latent-attention decoder family: an MLA draft built as MLA is modelled whatever of
# these it says (SGLang kimi_k25_eagle3.py, vLLM deepseek_eagle3.py; TorchSpec, ModelOpt and TensorRT-LLM write them)
MLA_MODEL_TYPES = ("kimi_k2", "deepseek_v3", "deepseek_v2")


def read_layer_type(raw: Mapping[str, Any], body: Mapping[str, Any], warnings: list[str], source: str,
                    mla: bool = False) -> str:
    """"llama" or "qwen3" from the layers' model_type (speculators: transformer_layer_config.model_type); an MLA
    draft's DeepSeek-family model_type names the attention it is built with (its MLP and norms are Llama's)."""
    mt = body.get("model_type") or raw.get("model_type") or "llama"
    if not isinstance(mt, str):
        raise ConfigError(f"{source}, key 'model_type'", "wrong type", expected="a string such as 'llama'",
                          found=repr(mt))
    if mla and mt in MLA_MODEL_TYPES:
        return "llama"
    if mt not in LAYER_TYPES:
        warnings.append(f"model_type {mt!r} is not modelled: the decoder layers run as Llama layers "
                        f"(modelled: {sorted(LAYER_TYPES)})")
    return LAYER_TYPES.get(mt, "llama")


def read_flag(body: Mapping[str, Any], raw: Mapping[str, Any], key: str, source: str) -> bool:
    """A boolean field read from the layer config (speculators' transformer_layer_config) or the top level."""
    value = body.get(key, raw.get(key))
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"{source}, key '{key}'", "wrong type", expected="true or false", found=repr(value))
    return value


def read_flag_at(raw: Mapping[str, Any], name: str, warnings: list[str],
                 source: str = "<dict>") -> tuple[bool, str | None]:
    """(value, key it was read at) of a flag from wherever its writers put it (`dialects.FLAG_PLACES`, first place
    first); (the default, None) when no place holds it. Two places that disagree are warned."""
    found = [(key, value_at(raw, key)) for key in FLAG_PLACES[name]]
    found = [(key, v) for key, v in found if v is not None]
    for key, v in found:
        if not isinstance(v, bool):
            raise ConfigError(f"{source}, key '{key}'", "wrong type", expected="true or false", found=repr(v))
    if len({v for _, v in found}) > 1:
        warnings.append(f"{name} differs between " + " and ".join(f"{k} ({str(v).lower()})" for k, v in found)
                        + f": read from {found[0][0]}")
    return (found[0][1], found[0][0]) if found else (FLAG_DEFAULTS[name], None)


# Block drafters predict a block of tokens in parallel from the target's states: another algorithm, whose configs
# say so in these places (SGLang `_handle_dflash` / `_handle_dspark`, vLLM method names, SpecForge --strategy).
BLOCK_DRAFTERS = ("dflash", "dspark", "domino", "jetspec")
ALGORITHM_KEYS = ("speculators_model_type", "model_type", "method", "algorithm", "speculative_algorithm")


def block_drafter(raw: Mapping[str, Any]) -> tuple[str, str] | None:
    """(algorithm, where it was seen) when `raw` is a block drafter's config, else None."""
    archs = raw.get("architectures") or []
    for a in archs if isinstance(archs, list) else []:
        hit = next((b for b in BLOCK_DRAFTERS if isinstance(a, str) and b in a.lower()), None)
        if hit:
            return hit, f"architectures {archs}"
    for key in ALGORITHM_KEYS:
        for where in (raw, raw.get("speculators_config") if isinstance(raw.get("speculators_config"), Mapping)
                      else {}):
            v = where.get(key)
            if isinstance(v, str) and v.lower() in BLOCK_DRAFTERS:
                return v.lower(), f"{key} = {v!r}"
    for b in BLOCK_DRAFTERS:
        if f"{b}_config" in raw or f"{b}_target_layer_ids" in raw:
            return b, f"key '{b}_config'" if f"{b}_config" in raw else f"key '{b}_target_layer_ids'"
    return None


def refuse_other_algorithms(raw: Mapping[str, Any], source: str = "<dict>") -> None:
    """UnsupportedDraftError for a block drafter's config (DFlash, DSpark, Domino, JetSpec), naming it."""
    hit = block_drafter(raw)
    if hit is not None:
        algo, where = hit
        raise UnsupportedDraftError(source, f"a {algo.upper()} block drafter ({where})", expected="an EAGLE-family "
                                    "draft (EAGLE-3 / EAGLE-3.1 / P-EAGLE): the workbook replays, diffs and serves "
                                    "those", found=f"{algo} config", cause=f"{algo.upper()} drafts a block of tokens "
                                    "in parallel; it is another algorithm and is never loaded as EAGLE-3")


def detect_dialect(raw: Mapping[str, Any]) -> str:
    """Which tool wrote this config (a row of dialects.CONFIG_DIALECTS: eagle, specforge, vllm, speculators or
    modelopt): the last row whose detect holds."""
    return next(d.name for d in reversed(CONFIG_DIALECTS.values()) if d.detect(raw))


def read_parallel(raw: Mapping[str, Any], vocab: int, warnings: list[str], source: str = "<dict>"):
    """(parallel_drafting, mask_token_id, K) of a P-EAGLE draft: speculators `speculators_model_type: "peagle"`,
    SpecForge / speculators `PEagleDraftModel`, vLLM `Peagle*ForCausalLM` or `parallel_drafting: true`; the mask id
    from `mask_token_id` (speculators, vLLM) or vLLM's aliases `pard_token` / `ptd_token_id`."""
    spec = raw.get("speculators_config") if isinstance(raw.get("speculators_config"), Mapping) else {}
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    parallel = (raw.get("speculators_model_type") == "peagle" or spec.get("algorithm") == "peagle"
                or raw.get("parallel_drafting") is True or any(isinstance(a, str) and "peagle" in a.lower()
                                                                for a in archs))
    if not parallel:
        return False, None, None
    key, mask_id = next(((k, raw[k]) for k in ("mask_token_id", "pard_token", "ptd_token_id")
                         if raw.get(k) is not None), (None, None))
    if mask_id is not None and (isinstance(mask_id, bool) or not isinstance(mask_id, int) or not 0 <= mask_id < vocab):
        raise ConfigError(f"{source}, key '{key}'", "P-EAGLE mask token id outside the target vocab",
                          expected=f"an integer in 0..{vocab - 1}", found=repr(mask_id),
                          cause="a mask id from another tokenizer, or a hand-edited config")
    depths = raw.get("num_depths")
    methods = spec.get("proposal_methods") if isinstance(spec.get("proposal_methods"), list) else []
    if depths is None and methods and isinstance(methods[0], Mapping):
        depths = methods[0].get("speculative_tokens")
    if depths is not None and (isinstance(depths, bool) or not isinstance(depths, int) or depths <= 0):
        raise ConfigError(f"{source}, key 'num_depths'", "wrong type or value", expected="an integer > 0",
                          found=repr(depths), cause="a hand-edited config")
    if mask_id is None:
        warnings.append("P-EAGLE draft without mask_token_id: SpecForge keeps it in its training config, vLLM "
                        "refuses the draft; replay resolves it from the tokenizer as SpecForge does")
    return True, mask_id, depths


def read_layer_ids(raw: Mapping[str, Any], dialect: str, warnings: list[str], source: str = "<dict>"):
    """(ids, convention, key) from wherever this dialect writes them (its row's ids_key first, then every other
    dialect's place); warns when two places disagree."""
    places = dict.fromkeys((d.ids_key, d.ids_convention) for d in CONFIG_DIALECTS.values() if d.ids_key)
    found = {key: value_at(raw, key) for key, _ in places}
    for key, value in found.items():
        if value is not None and (not isinstance(value, list) or
                                  not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise ConfigError(f"{source}, key '{key}'", "layer ids must be a list of integers", expected="[int, ...]",
                              found=repr(value))
    for key, value in found.items():
        if value is not None and list(value) != sorted(value):
            warnings.append(f"{key} {list(value)} is not ascending: engines concatenate captured states in "
                            "ascending layer order, SpecForge's HF hook in config order")
    # SGLang reads the specforge row's place, vLLM the vllm row's
    nested, top = found[CONFIG_DIALECTS["specforge"].ids_key], found[CONFIG_DIALECTS["vllm"].ids_key]
    if nested is not None and top is not None:
        # nested = output-of-layer (SGLang), top = input-of-layer (vLLM): same tensors iff top == nested + 1
        if [v + 1 for v in nested] != list(top):
            warnings.append(f"eagle_config ids {nested} (SGLang, output-of-layer) and top-level ids {top} (vLLM, "
                            "input-of-layer) name different tensors: SGLang and vLLM will feed different layers")
    row = CONFIG_DIALECTS[dialect]
    own = [(row.ids_key, row.ids_convention)] if row.ids_key else []
    for key, convention in (*own, *places):
        if found[key] is not None:
            return tuple(found[key]), convention, key
    return read_no_ids(dialect, warnings)


def ids_open(raw: Mapping[str, Any], dialect: str, ids: tuple | None, key: str | None) -> str:
    """Why the writer may have written `ids` (read at `key`) in the other convention, '' when it cannot have: the
    dialect's own rule for ids in its own place, and the rules for nested ids of any dialect."""
    if not ids or key is None:
        return ""
    row = CONFIG_DIALECTS[dialect]
    rules = ((row.ids_open,) if row.ids_open and key == row.ids_key else ()) + \
        (NESTED_IDS_OPEN if key == CONFIG_DIALECTS["specforge"].ids_key else ())
    return "; ".join(w for w in (rule(raw, tuple(ids)) for rule in rules) if w)


def read_no_ids(dialect: str, warnings: list[str]):
    """(None, convention, None) of a config without ids, with the dialect's sentence (or the generic one) warned."""
    row = CONFIG_DIALECTS[dialect]
    if row.no_ids:
        warnings.append(row.no_ids)
        return None, row.ids_convention, None
    warnings.append("no aux layer ids in the config: each engine falls back to its default "
                    "(inputs of [2, L//2, L-3]); pin them explicitly")
    return None, None, None


def read_mla(body: Mapping[str, Any], arch: str, warnings: list[str], source: str = "<dict>") -> MlaConfig:
    """The MLA fields of a multi-latent-attention draft; ConfigError naming the key for a missing or bad one."""
    def size(key: str, optional: bool = False) -> int | None:
        value = body.get(key)
        if value is None and optional:
            return None
        if value is None:
            raise ConfigError(f"{source}, key '{key}'", "required field of an MLA draft missing",
                              expected="a positive integer", found="nothing",
                              cause=f"an {MLA_ARCHITECTURE} config needs all of {list(MLA_SIZES)} (truncated or "
                              "hand-edited config?)")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{source}, key '{key}'", "wrong type or value", expected="a positive integer",
                              found=repr(value), cause="a hand-edited config")
        return value

    q_lora, kv_lora = size("q_lora_rank", optional=True), size("kv_lora_rank")
    nope, rope, v = size("qk_nope_head_dim"), size("qk_rope_head_dim"), size("v_head_dim")
    if rope % 2:
        raise ConfigError(f"{source}, key 'qk_rope_head_dim'", "must be even (RoPE rotates pairs of dims)",
                          expected="an even integer", found=rope, cause="a hand-edited config")
    interleave = body.get("rope_interleave", True)
    if interleave is None:
        interleave = True
    if not isinstance(interleave, bool):
        raise ConfigError(f"{source}, key 'rope_interleave'", "wrong type", expected="true or false",
                          found=repr(interleave))
    if arch not in MLA_ARCHITECTURES:
        warnings.append(f"MLA fields in a {arch} config: modelled as multi-latent attention; SGLang serves MLA "
                        f"EAGLE-3 drafts only as {MLA_ARCHITECTURE}, vLLM as {' or '.join(VLLM_MLA_ARCHITECTURES)}")
    elif arch in VLLM_ONLY_ARCHITECTURES:
        warnings.append(f"{arch} is vLLM's alias of {MLA_ARCHITECTURE} (deepseek_eagle3.py @ 03590193): SGLang has "
                        f"no class of that name; write {MLA_ARCHITECTURE} to serve this draft with both engines")
    if q_lora is None:
        warnings.append("q_lora_rank is null (q_proj, no query LoRA): SGLang's kimi_k25_eagle3.py refuses this "
                        "draft ('Eagle3 MLA layer requires q_lora_rank'); vLLM's deepseek_eagle3.py @ 03590193 "
                        "renames kv_a_proj_with_mqa to fused_qkv_a_proj, which exists only with q_lora_rank, so "
                        "its load fails")
    if not interleave:
        warnings.append("rope_interleave is false: SGLang's DeepseekV2AttentionMLA and vLLM's (deepseek_v2.py @ "
                        "002d6073) always rotate interleaved pairs (is_neox_style=False) and ignore the key; served "
                        "RoPE differs from this config's")
    if body.get("attention_bias"):
        warnings.append("attention_bias is true in an MLA draft: SGLang builds its MLA projections without bias "
                        "(modelled bias-free)")
    return MlaConfig(q_lora_rank=q_lora, kv_lora_rank=kv_lora, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                     v_head_dim=v, rope_interleave=interleave)


def read_partial_rotary(raw, body, source: str = "<dict>") -> float:
    """partial_rotary_factor (the share of each head RoPE rotates; 1.0 when absent), top level or in
    `rope_parameters`, as vLLM's get_rope reads it (0 < f <= 1, rotary_dim = int(head_dim * f))."""
    params = body.get("rope_parameters") or raw.get("rope_parameters") or {}
    f = body.get("partial_rotary_factor", raw.get("partial_rotary_factor",
                                                  params.get("partial_rotary_factor") if isinstance(params, Mapping)
                                                  else None))
    if f is None:
        return 1.0
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 < float(f) <= 1.0:
        raise ConfigError(f"{source}, key 'partial_rotary_factor'", "must be a number in (0, 1]",
                          expected="0 < f <= 1 (vLLM's get_rope refuses anything else)", found=repr(f))
    return float(f)


def read_rope(raw, body, dialect: str, warnings: list[str], source: str = "<dict>"):
    """(rope_theta, normalized rope_scaling) from legacy keys or transformers-5 `rope_parameters`."""
    params = body.get("rope_parameters") or raw.get("rope_parameters")
    theta = body.get("rope_theta", raw.get("rope_theta"))
    scaling = body.get("rope_scaling", raw.get("rope_scaling"))
    if isinstance(params, Mapping):
        theta = params.get("rope_theta", theta)
        if params.get("rope_type", "default") != "default":
            scaling = params
    if theta is None:
        theta = 10000.0
        warnings.append(CONFIG_DIALECTS[dialect].no_rope_theta)
    if not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
        raise ConfigError(f"{source}, key 'rope_theta'", "must be a positive number", expected="> 0", found=repr(theta))
    if scaling is not None:
        if not isinstance(scaling, Mapping):
            raise ConfigError(f"{source}, key 'rope_scaling'", "must be an object", expected="{rope_type, factor, ...}",
                              found=repr(scaling))
        scaling = dict(scaling)
        rtype = scaling.get("rope_type", scaling.get("type", "default"))
        scaling["rope_type"] = rtype
        if rtype not in ("default", "linear", "dynamic", "llama3", "yarn"):
            warnings.append(f"rope_scaling type {rtype!r} is not modelled: the forward uses plain RoPE")
        if rtype == "default":
            scaling = None
    return float(theta), (MappingProxyType(scaling) if scaling else None)
