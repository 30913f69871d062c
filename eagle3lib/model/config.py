"""`DraftConfig`: one frozen view of an EAGLE-3 draft's config.json, whatever tool wrote it.

Dialects (eagle3-formats.md §2): EAGLE `traineagle3` (LlamaForCausalLM + draft_vocab_size, no layer ids),
SpecForge/SGLang (`LlamaForCausalLMEagle3`, ids nested in `eagle_config`, output-of-layer), vLLM (top-level
`eagle_aux_hidden_state_layer_ids`, input-of-layer), speculators (`Eagle3Speculator`, `transformer_layer_config`)
and ModelOpt exports (nested `eagle_config` with `use_last_layernorm` & co). P-EAGLE drafts (all K drafts in one
forward, model/peagle.py) are recognised in each dialect: `parallel_drafting`, `mask_token_id`, `parallel_depths`. Usage:
    cfg = load_config("path/to/draft")   # or DraftConfig.from_dict(d, source="...")
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .. import layout as _layout
from ..errors import ConfigError, MissingFileError, UnsupportedDraftError

# Keys a Llama-style config commonly carries that we read or knowingly ignore (anything else -> warning).
_KNOWN_KEYS = {
    "architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "num_hidden_layers", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "max_position_embeddings", "vocab_size", "draft_vocab_size", "target_hidden_size",
    "tie_word_embeddings", "eagle_config", "eagle_aux_hidden_state_layer_ids", "num_aux_hidden_states",
    "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output", "use_aux_norm", "hidden_act", "bias",
    "attention_bias", "mlp_bias", "attention_dropout", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "pretraining_tp", "use_cache", "transformers_version",
    "speculators_config", "speculators_model_type", "speculators_version", "transformer_layer_config",
    "embed_requires_grad", "auto_map", "_name_or_path", "parallel_drafting", "mask_token_id",
    "eagle_architecture_config", "has_lm_head", "layer_types", "output_router_logits",
    *("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "rope_interleave"),
    "pard_token", "ptd_token_id", "num_depths",
}
# SGLang's class for EAGLE-3 / EAGLE-3.1 drafts with DeepSeek-V2 multi-latent attention (Kimi-K2.x, DeepSeek-V3)
MLA_ARCHITECTURE = "Eagle3DeepseekV2ForCausalLM"
_MLA_SIZES = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_DIALECTS = ("eagle", "specforge", "vllm", "speculators", "modelopt")


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


@dataclass(frozen=True)
class DraftConfig:
    """What the draft is: sizes, aux slots and the convention of their layer ids, variant flags, RoPE."""

    dialect: str                      # one of _DIALECTS: which tool's config.json this is
    architecture: str
    hidden_size: int                  # H, the draft's width
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int          # GQA: nkv divides nh
    head_dim: int
    vocab_size: int                   # V, the TARGET vocab (t2d length, embedding rows)
    draft_vocab_size: int             # Vd, lm_head rows (== V for a full-vocab draft)
    target_hidden_size: int           # Ht, width of one aux slot
    num_aux: int                      # k, aux slots fused by fc: fc.weight is [H, k*Ht]
    aux_layer_ids: tuple[int, ...] | None   # as written in the config (None: not in the config)
    aux_ids_convention: str | None    # "output" (SGLang/SpecForge/ModelOpt) or "input" (vLLM/speculators/EAGLE)
    aux_ids_key: str | None           # where the ids were read, e.g. "eagle_config.eagle_aux_hidden_state_layer_ids"
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Mapping[str, Any] | None   # normalized: has "rope_type" (linear/dynamic/llama3/yarn)
    max_position_embeddings: int
    norm_before_residual: bool        # vLLM/speculators: residual = hidden_norm(h) instead of h
    fc_norm: bool                     # EAGLE-3.1: per-slot RMSNorm before fc (fc_norm.{i})
    norm_before_fc: bool              # gpt-oss drafts: RMSNorm over the concatenation (input_norm)
    norm_output: bool                 # EAGLE-3.1: feed back the post-norm hidden state
    hidden_act: str = "silu"
    bias: bool = False                # fc / q,k,v bias (EAGLE `bias`)
    num_hidden_layers: int = 1        # layer 0 (`midlayer`) reads 2H; layers 1.. (`layers.N`) are plain, width H
    layer_type: str = "llama"         # the decoder layers' architecture: "llama" or "qwen3" (model_type)
    qk_norm: bool = False             # derived: Qwen3 RMSNorm of each q/k head before RoPE (q_norm, k_norm)
    attention_bias: bool = False      # HF Llama / Qwen3: bias on q/k/v/o_proj
    mlp_bias: bool = False            # HF Llama: bias on gate/up/down_proj
    mla: MlaConfig | None = None      # multi-latent attention (MLA drafts); None: Llama attention
    parallel_drafting: bool = False           # P-EAGLE: positions after the first get mask_hidden + mask_token_id
    mask_token_id: int | None = None          # P-EAGLE's mask token (a TARGET id); None: not in the config (SpecForge)
    parallel_depths: int | None = None        # P-EAGLE's K (num_depths) where the config records it
    source: str = "<dict>"
    warnings: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "<dict>") -> "DraftConfig":
        """Build from a parsed config.json of any dialect; unknown or contradictory fields become warnings."""
        if not isinstance(raw, Mapping):
            raise ConfigError(source, "config is not a JSON object", expected="an object {...}",
                              found=type(raw).__name__)
        refuse_other_algorithms(raw, source)
        warnings: list[str] = []
        dialect = detect_dialect(raw)
        # speculators keeps the Llama fields in a nested transformer_layer_config
        body: Mapping[str, Any] = raw
        if dialect == "speculators":
            body = raw.get("transformer_layer_config") or {}
            if not isinstance(body, Mapping):
                raise ConfigError(source, "key 'transformer_layer_config' is not an object",
                                  expected="an object of Llama fields", found=type(body).__name__)

        def req(key: str, typ=int, where: Mapping[str, Any] = body):
            if key not in where or where[key] is None:
                prefix = "transformer_layer_config." if where is not raw and dialect == "speculators" else ""
                raise ConfigError(f"{source}, key '{prefix}{key}'", "required field missing",
                                  expected=f"a {typ.__name__}", found="nothing",
                                  cause=f"not a complete {dialect} draft config (was it truncated or hand-edited?)")
            value = where[key]
            if typ is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{source}, key '{key}'", "wrong type", expected="an integer", found=repr(value))
            if typ is int and value <= 0:
                raise ConfigError(f"{source}, key '{key}'", "must be positive", expected="an integer > 0",
                                  found=value)
            if typ is float and not isinstance(value, (int, float)):
                raise ConfigError(f"{source}, key '{key}'", "wrong type", expected="a number", found=repr(value))
            return value

        def opt(key: str, default, where: Mapping[str, Any] = raw):
            value = where.get(key, default)
            return default if value is None else value

        def opt_int(key: str, default, where: Mapping[str, Any] = raw):
            value = opt(key, default, where)    # None only when the default is None (key optional)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"{source}, key '{key}'", "wrong type or value", expected="an integer > 0",
                                  found=repr(value), cause="a hand-edited config")
            return value

        archs = raw.get("architectures") or body.get("architectures") or ["?"]
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise ConfigError(f"{source}, key 'architectures'", "wrong type", expected="a list of class names",
                              found=repr(archs)[:80])

        hidden = req("hidden_size")
        nh = req("num_attention_heads")
        nkv = opt_int("num_key_value_heads", nh, body)
        if nh % nkv:
            raise ConfigError(f"{source}, key 'num_key_value_heads'", "must divide num_attention_heads (GQA)",
                              expected=f"a divisor of {nh}", found=nkv)
        head_dim = opt_int("head_dim", max(hidden // nh, 1), body)
        mla = None
        if MLA_ARCHITECTURE in archs or any(body.get(k) is not None for k in _MLA_SIZES):
            mla = _read_mla(body, str(archs[0]), warnings, source)
            if nkv != nh:
                warnings.append(f"num_key_value_heads={nkv} in an MLA draft: multi-latent attention expands the "
                                f"latent to all {nh} heads (SGLang ignores num_key_value_heads)")
            nkv, head_dim = nh, mla.qk_head_dim          # the q/k head width of the expanded attention
        vocab = req("vocab_size")
        draft_vocab = opt_int("draft_vocab_size", opt("draft_vocab_size", None, body))
        if draft_vocab is None:
            warnings.append("no draft_vocab_size: assuming a full-vocab draft (Vd = V); SGLang then takes lm_head "
                            "from the target")
            draft_vocab = vocab
        target_hidden = opt_int("target_hidden_size", opt("target_hidden_size", hidden, body))

        ids, convention, ids_key = _read_layer_ids(raw, dialect, warnings, source)
        num_aux = opt_int("num_aux_hidden_states", None)
        if num_aux is not None and ids is not None and num_aux != len(ids):
            warnings.append(f"num_aux_hidden_states={num_aux} but {ids_key} has {len(ids)} ids {list(ids)}: "
                            "fc width follows num_aux_hidden_states in SGLang, the id count elsewhere")
        if num_aux is None:
            num_aux = len(ids) if ids else 3

        rope_theta, rope_scaling = _read_rope(raw, body, dialect, warnings, source)
        if mla is not None and rope_scaling:
            if rope_scaling.get("rope_type") != "yarn":
                warnings.append(f"rope_scaling type {rope_scaling.get('rope_type')!r} in an MLA draft: SGLang's "
                                "DeepseekV2AttentionMLA applies DeepSeek YaRN to any rope_scaling")
            if "factor" not in rope_scaling:
                raise ConfigError(f"{source}, key 'rope_scaling.factor'", "required for an MLA draft's scaled RoPE",
                                  expected="a number (YaRN factor)", found="nothing",
                                  cause="SGLang reads rope_scaling['factor'] for the MLA softmax scale")
            mla = MlaConfig(**{**mla.as_dict(), "rope_scaling": rope_scaling})
        eps = opt("rms_norm_eps", 1e-6, body)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
            raise ConfigError(f"{source}, key 'rms_norm_eps'", "wrong type or value", expected="a number in [0, 1)",
                              found=repr(eps))
        layers = opt_int("num_hidden_layers", 1, body)
        layer_type = _read_layer_type(raw, body, warnings, source)
        if opt("tie_word_embeddings", False, body):
            warnings.append("tie_word_embeddings is true: EAGLE-3 drafts have their own lm_head (expected false)")
        norm_output = bool(opt("norm_output", False))
        if norm_output:
            warnings.append("norm_output=true: SGLang/vLLM feed back the post-norm state (EAGLE-3.1); a SpecForge "
                            "draft trained before PR #879 with norm_output=true is a plain EAGLE-3 draft")
        parallel, mask_id, depths = _read_parallel(raw, vocab, warnings, source)
        if dialect == "speculators" and "norm_before_residual" not in raw:
            warnings.append("speculators config without norm_before_residual: vLLM defaults it to "
                            f"{not parallel} ({'peagle' if parallel else 'eagle3'})")
        eagle_cfg = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), Mapping) else {}
        if eagle_cfg.get("use_aux_hidden_state") is False:
            warnings.append("eagle_config.use_aux_hidden_state is false: engines then skip fc (not an EAGLE-3 draft)")
        unknown = sorted(set(raw) - _KNOWN_KEYS)
        if unknown:
            warnings.append(f"unknown fields ignored: {unknown}")

        return cls(
            dialect=dialect, architecture=str(archs[0]), hidden_size=hidden,
            intermediate_size=req("intermediate_size"), num_attention_heads=nh, num_key_value_heads=nkv,
            head_dim=head_dim, vocab_size=vocab, draft_vocab_size=int(draft_vocab),
            target_hidden_size=int(target_hidden), num_aux=int(num_aux), aux_layer_ids=ids,
            aux_ids_convention=convention, aux_ids_key=ids_key, rms_norm_eps=float(eps),
            rope_theta=rope_theta, rope_scaling=rope_scaling,
            max_position_embeddings=opt_int("max_position_embeddings", 2048, body),
            norm_before_residual=bool(opt("norm_before_residual", False)),
            fc_norm=bool(opt("fc_norm", False) or opt("use_aux_norm", False)),
            norm_before_fc=bool(opt("norm_before_fc", False)), norm_output=norm_output,
            hidden_act=str(opt("hidden_act", "silu", body)), bias=bool(opt("bias", False)),
            num_hidden_layers=int(layers), layer_type=layer_type, qk_norm=layer_type == "qwen3",
            attention_bias=_flag(body, raw, "attention_bias", source), mlp_bias=_flag(body, raw, "mlp_bias", source),
            mla=mla, parallel_drafting=parallel, mask_token_id=mask_id,
            parallel_depths=depths, source=source, warnings=tuple(warnings),
            raw=MappingProxyType(dict(raw)),
        )

    # ---- derived views ------------------------------------------------------------------------------
    @property
    def fc_in_features(self) -> int:
        """Width of fc's input: k aux slots of Ht each."""
        return self.num_aux * self.target_hidden_size

    def aux_layout(self, num_target_layers: int) -> tuple[str, ...] | None:
        """The boundaries the config's layer ids name, in config order (None when the config has no ids)."""
        if self.aux_layer_ids is None:
            return None
        return _layout.from_ids(self.aux_layer_ids, self.aux_ids_convention or "output", num_target_layers)

    def default_layout(self, num_target_layers: int) -> tuple[str, ...]:
        """Engines' default 3-slot capture (inputs of [2, L//2, L-3]) = SpecForge's outputs of [1, L//2-1, L-4]."""
        return _layout.engine_default_layout(num_target_layers)

    def summary(self) -> dict[str, Any]:
        """Flat dict for a table: the fields a user checks first."""
        return {
            "dialect": self.dialect, "architecture": self.architecture, "H": self.hidden_size,
            "Ht": self.target_hidden_size, "aux slots": self.num_aux, "fc in": self.fc_in_features,
            "layer ids": list(self.aux_layer_ids) if self.aux_layer_ids is not None else None,
            "id convention": self.aux_ids_convention, "ids read from": self.aux_ids_key,
            "V (target)": self.vocab_size, "Vd (draft)": self.draft_vocab_size,
            "heads / kv heads / head_dim": f"{self.num_attention_heads} / {self.num_key_value_heads} / {self.head_dim}",
            "intermediate": self.intermediate_size, "rope_theta": self.rope_theta,
            "rope_scaling": dict(self.rope_scaling) if self.rope_scaling else None, "eps": self.rms_norm_eps,
            "norm_before_residual": self.norm_before_residual, "fc_norm": self.fc_norm,
            "norm_before_fc": self.norm_before_fc, "norm_output": self.norm_output,
            "attention": "MLA" if self.mla else "Llama",
            **({f"mla {k}": v for k, v in self.mla.as_dict().items()} if self.mla else {}),
            "decoder layers": self.num_hidden_layers, "layer type": self.layer_type,
            "attention bias": self.attention_bias,
            "P-EAGLE (parallel drafting)": self.parallel_drafting,
            "mask token / K": f"{self.mask_token_id} / {self.parallel_depths}" if self.parallel_drafting else None,
        }


# model_type of the decoder layers -> the layer type modelled (speculators `model_classes`: llama, qwen3)
LAYER_TYPES = {"llama": "llama", "qwen3": "qwen3"}


def _read_layer_type(raw: Mapping[str, Any], body: Mapping[str, Any], warnings: list[str], source: str) -> str:
    """"llama" or "qwen3" from the layers' model_type (speculators: transformer_layer_config.model_type)."""
    mt = body.get("model_type") or raw.get("model_type") or "llama"
    if not isinstance(mt, str):
        raise ConfigError(f"{source}, key 'model_type'", "wrong type", expected="a string such as 'llama'",
                          found=repr(mt))
    if mt not in LAYER_TYPES:
        warnings.append(f"model_type {mt!r} is not modelled: the decoder layers run as Llama layers "
                        f"(modelled: {sorted(LAYER_TYPES)})")
    return LAYER_TYPES.get(mt, "llama")


def _flag(body: Mapping[str, Any], raw: Mapping[str, Any], key: str, source: str) -> bool:
    """A boolean field read from the layer config (speculators' transformer_layer_config) or the top level."""
    value = body.get(key, raw.get(key))
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"{source}, key '{key}'", "wrong type", expected="true or false", found=repr(value))
    return value


# Block drafters predict a block of tokens in parallel from the target's states: another algorithm, whose configs
# say so in these places (SGLang `_handle_dflash` / `_handle_dspark`, vLLM method names, SpecForge --strategy).
BLOCK_DRAFTERS = ("dflash", "dspark", "domino", "jetspec")
_ALGORITHM_KEYS = ("speculators_model_type", "model_type", "method", "algorithm", "speculative_algorithm")


def block_drafter(raw: Mapping[str, Any]) -> tuple[str, str] | None:
    """(algorithm, where it was seen) when `raw` is a block drafter's config, else None."""
    archs = raw.get("architectures") or []
    for a in archs if isinstance(archs, list) else []:
        hit = next((b for b in BLOCK_DRAFTERS if isinstance(a, str) and b in a.lower()), None)
        if hit:
            return hit, f"architectures {archs}"
    for key in _ALGORITHM_KEYS:
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
    """Which tool wrote this config: eagle, specforge, vllm, speculators or modelopt."""
    archs = raw.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    eagle_cfg = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), Mapping) else {}
    if "speculators_config" in raw or "transformer_layer_config" in raw or arch == "Eagle3Speculator":
        return "speculators"
    if "eagle_architecture_config" in raw or any(
            k in eagle_cfg for k in ("use_last_layernorm", "use_input_layernorm_in_first_layer", "use_mtp_layernorm")):
        return "modelopt"
    if raw.get("eagle_aux_hidden_state_layer_ids") is not None:
        return "vllm"
    if arch.endswith("Eagle3") or arch.startswith("Eagle3") or eagle_cfg or arch == "PEagleDraftModel":
        return "specforge"
    return "eagle"


def _read_parallel(raw: Mapping[str, Any], vocab: int, warnings: list[str], source: str = "<dict>"):
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


def _read_layer_ids(raw: Mapping[str, Any], dialect: str, warnings: list[str], source: str = "<dict>"):
    """(ids, convention, key) from wherever this dialect writes them; warns when two places disagree."""
    eagle_cfg = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), Mapping) else {}
    nested = eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    for key, value in (("eagle_config.eagle_aux_hidden_state_layer_ids", nested),
                       ("eagle_aux_hidden_state_layer_ids", top)):
        if value is not None and (not isinstance(value, list) or
                                  not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise ConfigError(f"{source}, key '{key}'", "layer ids must be a list of integers", expected="[int, ...]",
                              found=repr(value))
    for key, value in (("eagle_config.eagle_aux_hidden_state_layer_ids", nested),
                       ("eagle_aux_hidden_state_layer_ids", top)):
        if value is not None and list(value) != sorted(value):
            warnings.append(f"{key} {list(value)} is not ascending: engines concatenate captured states in "
                            "ascending layer order, SpecForge's HF hook in config order")
    if nested is not None and top is not None:
        # nested = output-of-layer (SGLang), top = input-of-layer (vLLM): same tensors iff top == nested + 1
        if [v + 1 for v in nested] != list(top):
            warnings.append(f"eagle_config ids {nested} (SGLang, output-of-layer) and top-level ids {top} (vLLM, "
                            "input-of-layer) name different tensors: SGLang and vLLM will feed different layers")
    if dialect in ("vllm", "speculators") and top is not None:
        return tuple(top), "input", "eagle_aux_hidden_state_layer_ids"
    if nested is not None:
        return tuple(nested), "output", "eagle_config.eagle_aux_hidden_state_layer_ids"
    if top is not None:
        return tuple(top), "input", "eagle_aux_hidden_state_layer_ids"
    if dialect == "eagle":
        warnings.append("EAGLE (SafeAILab) configs carry no layer ids: its target wrapper captures the inputs of "
                        "layers [2, L//2, L-3]")
        return None, "input", None
    warnings.append("no aux layer ids in the config: each engine falls back to its default "
                    "(inputs of [2, L//2, L-3]); pin them explicitly")
    return None, None, None


def _read_mla(body: Mapping[str, Any], arch: str, warnings: list[str], source: str = "<dict>") -> MlaConfig:
    """The MLA fields of a multi-latent-attention draft; ConfigError naming the key for a missing or bad one."""
    def size(key: str, optional: bool = False) -> int | None:
        value = body.get(key)
        if value is None and optional:
            return None
        if value is None:
            raise ConfigError(f"{source}, key '{key}'", "required field of an MLA draft missing",
                              expected="a positive integer", found="nothing",
                              cause=f"an {MLA_ARCHITECTURE} config needs all of {list(_MLA_SIZES)} (truncated or "
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
    if arch != MLA_ARCHITECTURE:
        warnings.append(f"MLA fields in a {arch} config: modelled as multi-latent attention; SGLang serves MLA "
                        f"EAGLE-3 drafts only as {MLA_ARCHITECTURE}")
    if q_lora is None:
        warnings.append("q_lora_rank is null (q_proj, no query LoRA): SGLang's kimi_k25_eagle3.py refuses this "
                        "draft ('Eagle3 MLA layer requires q_lora_rank')")
    if not interleave:
        warnings.append("rope_interleave is false: SGLang's DeepseekV2AttentionMLA always rotates interleaved "
                        "pairs (is_neox_style=False) and ignores the key; served RoPE differs from this config's")
    if body.get("attention_bias"):
        warnings.append("attention_bias is true in an MLA draft: SGLang builds its MLA projections without bias "
                        "(modelled bias-free)")
    return MlaConfig(q_lora_rank=q_lora, kv_lora_rank=kv_lora, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                     v_head_dim=v, rope_interleave=interleave)


def _read_rope(raw, body, dialect: str, warnings: list[str], source: str = "<dict>"):
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
        if dialect == "eagle":
            warnings.append("no rope_theta: EAGLE's training code uses 10000 whatever the target's theta; keep it")
        else:
            warnings.append("no rope_theta: assuming 10000 (the LlamaConfig default)")
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


def read_config_json(path: str | Path, what: str = "model") -> tuple[dict, Path]:
    """(raw dict, file) of a config.json given as the file or the folder holding it; errors name file and line."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise MissingFileError(str(file), f"{what} config.json not found", expected=f"a {what} folder or its "
                               "config.json", found="no such file", cause="wrong path, or a hub id (not a local folder)")
    text = file.read_text(encoding="utf-8", errors="replace")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{file}, line {e.lineno} column {e.colno}", "not valid JSON", expected="JSON",
                          found=repr(text[max(0, e.pos - 20): e.pos + 20]),
                          cause="a truncated or hand-edited file") from None
    if not isinstance(raw, dict):
        raise ConfigError(str(file), "not a JSON object", expected="{...}", found=type(raw).__name__)
    return raw, file


def load_config(path: str | Path) -> DraftConfig:
    """Read `path` (a config.json or a directory holding one) into a DraftConfig."""
    raw, file = read_config_json(path, "draft")
    return DraftConfig.from_dict(raw, source=str(file))


_HF_CLASS = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def config_to_dict(cfg: DraftConfig, dialect: str = "specforge") -> dict[str, Any]:
    """A config.json dict for `dialect` (specforge, vllm, speculators, eagle) describing the same draft."""
    llama = {
        "model_type": cfg.layer_type, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim, "num_hidden_layers": cfg.num_hidden_layers, "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta, "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": cfg.vocab_size, "hidden_act": cfg.hidden_act, "tie_word_embeddings": False,
        "attention_bias": cfg.attention_bias, "mlp_bias": cfg.mlp_bias,
    }
    if cfg.rope_scaling:
        llama["rope_scaling"] = dict(cfg.rope_scaling)
    flags = {"norm_before_residual": cfg.norm_before_residual, "fc_norm": cfg.fc_norm,
             "norm_before_fc": cfg.norm_before_fc, "norm_output": cfg.norm_output}
    if cfg.parallel_drafting:     # P-EAGLE: vLLM reads mask_token_id at the top level of every dialect
        flags.update(mask_token_id=cfg.mask_token_id, parallel_drafting=True)
    ids = list(cfg.aux_layer_ids) if cfg.aux_layer_ids is not None else None
    if ids is not None:      # express the ids in the dialect's own convention
        out_conv = "output" if dialect == "specforge" else "input"
        if cfg.aux_ids_convention != out_conv:
            ids = [i + 1 for i in ids] if out_conv == "input" else [i - 1 for i in ids]
    if cfg.mla is not None:
        if dialect != "specforge":
            raise ConfigError("config_to_dict", f"an MLA draft has no {dialect} config", expected="specforge (the "
                              f"SGLang dialect, {MLA_ARCHITECTURE})", found=dialect,
                              cause="only SGLang serves EAGLE-3 drafts with multi-latent attention")
        llama.pop("head_dim")                          # HF DeepseekV3Config derives its own (= qk_rope_head_dim)
        llama.update(model_type="deepseek_v3", **cfg.mla.as_dict())
    if dialect == "specforge":
        arch = MLA_ARCHITECTURE if cfg.mla else "PEagleDraftModel" if cfg.parallel_drafting else "LlamaForCausalLMEagle3"
        d = {"architectures": [arch], **llama, "draft_vocab_size": cfg.draft_vocab_size,
             "target_hidden_size": cfg.target_hidden_size, "num_aux_hidden_states": cfg.num_aux, **flags}
        if ids is not None:
            d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
        return d
    if dialect == "vllm":
        return {"architectures": ["LlamaForCausalLMEagle3"], **llama, "draft_vocab_size": cfg.draft_vocab_size,
                "target_hidden_size": cfg.target_hidden_size, "eagle_aux_hidden_state_layer_ids": ids, **flags}
    if dialect == "speculators":
        algo = "peagle" if cfg.parallel_drafting else "eagle3"
        steps = (cfg.parallel_depths or 8) if cfg.parallel_drafting else 3      # speculators' num_depths default: 8
        return {"architectures": ["PEagleDraftModel" if cfg.parallel_drafting else "Eagle3Speculator"],
                "speculators_model_type": algo,
                "speculators_config": {"algorithm": algo, "default_proposal_method": "greedy",
                                       "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": steps}]},
                "transformer_layer_config": {**llama, "architectures": [_HF_CLASS[cfg.layer_type]]},
                "draft_vocab_size": cfg.draft_vocab_size, "target_hidden_size": cfg.target_hidden_size,
                "eagle_aux_hidden_state_layer_ids": ids, "embed_requires_grad": cfg.parallel_drafting, **flags}
    if dialect == "eagle":
        if cfg.layer_type != "llama" or cfg.num_hidden_layers != 1:
            raise ConfigError("config_to_dict", "EAGLE (SafeAILab) drafts are one Llama layer",
                              expected="layer_type 'llama', num_hidden_layers 1",
                              found=f"{cfg.layer_type!r}, {cfg.num_hidden_layers}",
                              cause="write this draft in the speculators or specforge dialect")
        if cfg.num_aux != 3:
            raise ConfigError("config_to_dict", "EAGLE (SafeAILab) drafts have exactly 3 aux slots",
                              expected=3, found=cfg.num_aux, cause="EAGLE's fc is target_hidden_size * 3")
        return {"architectures": ["LlamaForCausalLM"], **llama, "draft_vocab_size": cfg.draft_vocab_size}
    raise ConfigError("config_to_dict", "unknown dialect", expected=("specforge", "vllm", "speculators", "eagle"),
                      found=dialect)
