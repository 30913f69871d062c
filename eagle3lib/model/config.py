"""`DraftConfig`: one frozen view of an EAGLE-3 draft's config.json, whatever tool wrote it.

Dialects (eagle3-formats.md §2): EAGLE `traineagle3` (LlamaForCausalLM + draft_vocab_size, no layer ids),
SpecForge/SGLang (`LlamaForCausalLMEagle3`, ids nested in `eagle_config`, output-of-layer), vLLM (top-level
`eagle_aux_hidden_state_layer_ids`, input-of-layer), speculators (`Eagle3Speculator`, `transformer_layer_config`)
and ModelOpt exports (nested `eagle_config` with `use_last_layernorm` & co). P-EAGLE drafts (all K drafts in one
forward, model/peagle.py) are recognised in each dialect: `parallel_drafting`, `mask_token_id`, `parallel_depths`. Usage:
    cfg = load_config("path/to/draft")   # or DraftConfig.from_dict(d, source="...")
What differs per dialect (detection, where the ids and the Llama fields are, architecture names, the writer
`config_to_dict` calls) is one row each in `dialects`; the readers (`MlaConfig`, the block-drafter gate) are
`config_fields`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .. import layout as _layout
from ..once import kept
from ..errors import ConfigError, LayoutError, MissingFileError
from .formats import WRITERS
from .config_fields import (MLA_SIZES, MlaConfig, detect_dialect, ids_open, read_flag, read_flag_at, read_layer_ids,
                            read_layer_type, read_mla, read_parallel, read_partial_rotary, read_rope,
                            refuse_other_algorithms)
from .dialects import CONFIG_DIALECTS, FLAG_PLACES, MLA_ARCHITECTURE, MLA_ARCHITECTURES

FINAL_STATE = ("final_postnorm",)     # the layout of a draft fed the target's final hidden state (no fc)

# Keys a Llama-style config commonly carries that we read or knowingly ignore (anything else -> warning), with
# each dialect's own (its row's `keys`).
_KNOWN_KEYS = {
    "architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "num_hidden_layers", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "partial_rotary_factor", "max_position_embeddings", "vocab_size", "draft_vocab_size",
    "target_hidden_size",
    "tie_word_embeddings", "eagle_config", "eagle_aux_hidden_state_layer_ids", "num_aux_hidden_states",
    "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output", "use_aux_norm", "hidden_act", "bias",
    "attention_bias", "mlp_bias", "attention_dropout", "torch_dtype", "dtype", "bos_token_id", "eos_token_id",
    "pad_token_id", "initializer_range", "pretraining_tp", "use_cache", "transformers_version",
    "auto_map", "_name_or_path", "parallel_drafting", "mask_token_id", "has_lm_head", "layer_types",
    "output_router_logits",
    *("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "rope_interleave"),
    "pard_token", "ptd_token_id", "num_depths", "logit_scale",
}


@dataclass(frozen=True)
class DraftConfig:
    """What the draft is: sizes, aux slots and the convention of their layer ids, variant flags, RoPE."""

    dialect: str                      # a row of dialects.CONFIG_DIALECTS: which tool's config.json this is
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
    partial_rotary_factor: float = 1.0   # RoPE on the first int(head_dim * f) dims of each head (vLLM, SGLang)
    bias: bool = False                # fc / q,k,v bias (EAGLE `bias`)
    fc_bias: bool = False             # an fc bias the checkpoint holds though the config has no `bias` (trained)
    num_hidden_layers: int = 1        # layer 0 (`midlayer`) reads 2H; layers 1.. (`layers.N`) are plain, width H
    layer_type: str = "llama"         # the decoder layers' architecture: "llama" or "qwen3" (model_type)
    qk_norm: bool = False             # derived: Qwen3 RMSNorm of each q/k head before RoPE (q_norm, k_norm)
    attention_bias: bool = False      # HF Llama / Qwen3: bias on q/k/v/o_proj
    mlp_bias: bool = False            # HF Llama: bias on gate/up/down_proj
    mla: MlaConfig | None = None      # multi-latent attention (MLA drafts); None: Llama attention
    parallel_drafting: bool = False           # P-EAGLE: positions after the first get mask_hidden + mask_token_id
    mask_token_id: int | None = None          # P-EAGLE's mask token (a TARGET id); None: not in the config (SpecForge)
    parallel_depths: int | None = None        # P-EAGLE's K (num_depths) where the config records it
    use_aux_hidden_state: bool = True         # false (ModelOpt eagle_config): fed the target's final state, no fc
    aux_ids_ambiguity: str = ""               # why the writer may have written the ids in the other convention
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
        row = CONFIG_DIALECTS[dialect]
        # the Llama fields: the top level, or the object the dialect nests them in (speculators)
        body: Mapping[str, Any] = raw
        if row.body_key:
            body = raw.get(row.body_key) or {}
            if not isinstance(body, Mapping):
                raise ConfigError(source, f"key '{row.body_key}' is not an object",
                                  expected="an object of Llama fields", found=type(body).__name__)

        def req(key: str, typ=int, where: Mapping[str, Any] = body):
            if key not in where or where[key] is None:
                prefix = f"{row.body_key}." if where is not raw and row.body_key else ""
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
        if any(a in MLA_ARCHITECTURES for a in archs) or any(body.get(k) is not None for k in MLA_SIZES):
            mla = read_mla(body, str(archs[0]), warnings, source)
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

        use_aux, use_aux_at = read_flag_at(raw, "use_aux_hidden_state", warnings, source)
        # a draft fed the final state reads no ids: their absence is no warning
        ids, convention, ids_key = read_layer_ids(raw, dialect, warnings if use_aux else [], source)
        num_aux = opt_int("num_aux_hidden_states", None)
        if not use_aux:
            # the target's final (post-norm) hidden state fed as it is, no fc (ModelOpt plugins/hf_eagle.py; vLLM
            # llama_eagle3.py builds no fc; TensorRT-LLM applies fc only to a wider input): one slot of width H
            if target_hidden != hidden:
                raise ConfigError(f"{source}, key 'target_hidden_size'", f"{use_aux_at} is false: the target's final "
                                  "state is fed to the draft with no fc, so its width must be the draft's",
                                  expected=hidden, found=target_hidden, cause="a draft trained on aux states, or a "
                                  "config from another draft")
            if num_aux not in (None, 1):
                warnings.append(f"num_aux_hidden_states={num_aux} with {use_aux_at} false: the draft is fed one "
                                "state (the target's final one), no fc")
            num_aux = 1
        if num_aux is not None and ids is not None and num_aux != len(ids) and use_aux:
            warnings.append(f"num_aux_hidden_states={num_aux} but {ids_key} has {len(ids)} ids {list(ids)}: "
                            "fc width follows num_aux_hidden_states in SGLang, the id count elsewhere")
        if num_aux is None:
            num_aux = len(ids) if ids else 3

        rope_theta, rope_scaling = read_rope(raw, body, dialect, warnings, source)
        if mla is not None and rope_scaling:
            if rope_scaling.get("rope_type") != "yarn":
                warnings.append(f"rope_scaling type {rope_scaling.get('rope_type')!r} in an MLA draft: SGLang's "
                                "DeepseekV2AttentionMLA applies DeepSeek YaRN to any rope_scaling")
            if "factor" not in rope_scaling:
                raise ConfigError(f"{source}, key 'rope_scaling.factor'", "required for an MLA draft's scaled RoPE",
                                  expected="a number (YaRN factor)", found="nothing",
                                  cause="SGLang reads rope_scaling['factor'] for the MLA softmax scale")
            mla = MlaConfig(**{**mla.as_dict(), "rope_scaling": rope_scaling})
        if mla is not None and row.mla_warnings:       # what its engine reads differently (vLLM: deepseek_eagle3.py)
            warnings.extend(row.mla_warnings(raw, body, rope_theta, int(num_aux)))
        eps = opt("rms_norm_eps", 1e-6, body)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
            raise ConfigError(f"{source}, key 'rms_norm_eps'", "wrong type or value", expected="a number in [0, 1)",
                              found=repr(eps))
        layers = opt_int("num_hidden_layers", 1, body)
        layer_type = read_layer_type(raw, body, warnings, source, mla=mla is not None)
        if opt("tie_word_embeddings", False, body):
            warnings.append("tie_word_embeddings is true: EAGLE-3 drafts have their own lm_head (expected false)")
        flags = {f: read_flag_at(raw, f, warnings, source) for f in
                 ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")}   # where each writer puts it
        norm_output = flags["norm_output"][0]
        if norm_output:
            warnings.append("norm_output=true: SGLang/vLLM feed back the post-norm state (EAGLE-3.1); a SpecForge "
                            "draft trained before PR #879 with norm_output=true is a plain EAGLE-3 draft")
        parallel, mask_id, depths = read_parallel(raw, vocab, warnings, source)
        if row.norm_before_residual_default and flags["norm_before_residual"][1] is None:
            warnings.append(f"{dialect} config without norm_before_residual: vLLM defaults it to "
                            f"{row.norm_before_residual_default(parallel)} ({'peagle' if parallel else 'eagle3'})")
        top_flags = {p for places in FLAG_PLACES.values() for p in places if "." not in p}
        unknown = sorted(set(raw) - _KNOWN_KEYS.union(top_flags, *(d.keys for d in CONFIG_DIALECTS.values())))
        if unknown:
            warnings.append(f"unknown fields ignored: {unknown}")

        return cls(
            dialect=dialect, architecture=str(archs[0]), hidden_size=hidden,
            intermediate_size=req("intermediate_size"), num_attention_heads=nh, num_key_value_heads=nkv,
            head_dim=head_dim, vocab_size=vocab, draft_vocab_size=int(draft_vocab),
            target_hidden_size=int(target_hidden), num_aux=int(num_aux), aux_layer_ids=ids,
            aux_ids_convention=convention, aux_ids_key=ids_key, rms_norm_eps=float(eps),
            rope_theta=rope_theta, rope_scaling=rope_scaling,
            partial_rotary_factor=read_partial_rotary(raw, body, source),
            max_position_embeddings=opt_int("max_position_embeddings", 2048, body),
            norm_before_residual=flags["norm_before_residual"][0], fc_norm=flags["fc_norm"][0],
            norm_before_fc=flags["norm_before_fc"][0], norm_output=norm_output,
            hidden_act=str(opt("hidden_act", "silu", body)), bias=bool(opt("bias", False)),
            num_hidden_layers=int(layers), layer_type=layer_type, qk_norm=layer_type == "qwen3",
            attention_bias=read_flag(body, raw, "attention_bias", source), mlp_bias=read_flag(body, raw, "mlp_bias", source),
            mla=mla, parallel_drafting=parallel, mask_token_id=mask_id,
            parallel_depths=depths, use_aux_hidden_state=use_aux,
            aux_ids_ambiguity=ids_open(raw, dialect, ids, ids_key) if use_aux else "", source=source, warnings=tuple(warnings),
            raw=MappingProxyType(dict(raw)),
        )

    # ---- derived views ------------------------------------------------------------------------------
    @property
    def fc_in_features(self) -> int:
        """Width of fc's input: k aux slots of Ht each."""
        return self.num_aux * self.target_hidden_size

    def aux_readings(self, num_target_layers: int) -> dict[str, tuple[str, ...]]:
        """{convention: boundaries} of every reading of the config's ids that names boundaries of this target: the
        dialect's own convention, and the other one too where the writer leaves it open (`aux_ids_ambiguity`); of
        two open readings only the ones this target has remain (ids [24, 30, 36] of 36 layers: input-of-layer
        only). {} without ids; a draft fed the final state: {"final state": ("final_postnorm",)}."""
        if not self.use_aux_hidden_state:
            return {"final state": FINAL_STATE}
        if self.aux_layer_ids is None:
            return {}
        own = self.aux_ids_convention or "output"
        out = {}
        for conv in (own, "input" if own == "output" else "output")[:2 if self.aux_ids_ambiguity else 1]:
            try:
                out[conv] = _layout.from_ids(self.aux_layer_ids, conv, num_target_layers)
            except LayoutError:
                continue
        return out

    def aux_layout(self, num_target_layers: int) -> tuple[str, ...] | None:
        """The boundaries the config's layer ids name, in config order: the first of `aux_readings` (None when the
        config has no ids; a draft fed the final state: ("final_postnorm",)). LayoutError when no reading names
        boundaries of this target. Where the writer leaves the convention open, this is a reading, not a fact:
        `aux_layout_or_none` commits to none."""
        readings = self.aux_readings(num_target_layers)
        if readings:
            return next(iter(readings.values()))
        if self.aux_layer_ids is None:
            return None
        return _layout.from_ids(self.aux_layer_ids, self.aux_ids_convention or "output", num_target_layers)

    def aux_layout_or_none(self, num_target_layers: int) -> tuple[str, ...] | None:
        """The one layout the config's ids name for this target, or None: no ids, ids naming no boundary of it, or
        two readings the config cannot decide between (the training data does: hidden.identify)."""
        readings = self.aux_readings(num_target_layers)
        return next(iter(readings.values())) if len(readings) == 1 else None

    def ids_readings_text(self, num_target_layers: int) -> str:
        """One sentence naming each reading of the ids and why the convention is open ('' when it is not)."""
        readings = self.aux_readings(num_target_layers)
        if len(readings) < 2:
            return ""
        return (f"the config's ids {list(self.aux_layer_ids or ())} ({self.aux_ids_key}) read as "
                + " or as ".join(f"{c}-of-layer name [{', '.join(lay)}]" for c, lay in readings.items())
                + f": {self.aux_ids_ambiguity}")

    def default_layout(self, num_target_layers: int) -> tuple[str, ...]:
        """The training tools' default 3-slot capture: inputs of [2, L//2, L-3] (SpecForge's outputs of [1, L//2-1,
        L-4]); what an engine captures then is its "default_ids" rows (engines.facts)."""
        return _layout.training_default_layout(num_target_layers)

    def summary(self) -> dict[str, Any]:
        """Flat dict for a table: the fields a user checks first."""
        return {
            "dialect": self.dialect, "architecture": self.architecture, "H": self.hidden_size,
            "Ht": self.target_hidden_size, "aux slots": self.num_aux, "fc in": self.fc_in_features,
            "layer ids": list(self.aux_layer_ids) if self.aux_layer_ids is not None else None,
            "id convention": self.aux_ids_convention + " (open: see the readings)" if self.aux_ids_ambiguity
            else self.aux_ids_convention, "ids read from": self.aux_ids_key,
            "fed": "aux states through fc" if self.use_aux_hidden_state else
                   "the target's final hidden state, no fc (use_aux_hidden_state false)",
            "V (target)": self.vocab_size, "Vd (draft)": self.draft_vocab_size,
            "heads / kv heads / head_dim": f"{self.num_attention_heads} / {self.num_key_value_heads} / {self.head_dim}",
            "intermediate": self.intermediate_size, "rope_theta": self.rope_theta,
            "rope_scaling": dict(self.rope_scaling) if self.rope_scaling else None,
            "partial_rotary_factor": self.partial_rotary_factor, "eps": self.rms_norm_eps,
            "norm_before_residual": self.norm_before_residual, "fc_norm": self.fc_norm,
            "norm_before_fc": self.norm_before_fc, "norm_output": self.norm_output,
            "attention": "MLA" if self.mla else "Llama",
            **({f"mla {k}": v for k, v in self.mla.as_dict().items()} if self.mla else {}),
            "decoder layers": self.num_hidden_layers, "layer type": self.layer_type,
            "attention bias": self.attention_bias,
            "P-EAGLE (parallel drafting)": self.parallel_drafting,
            "mask token / K": f"{self.mask_token_id} / {self.parallel_depths}" if self.parallel_drafting else None,
        }


def read_config_json(path: str | Path, what: str = "model") -> tuple[dict, Path]:
    """(raw dict, file) of a config.json given as the file or the folder holding it; errors name file and line."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise MissingFileError(str(file), f"{what} config.json not found", expected=f"a {what} folder or its "
                               "config.json", found="no such file", cause="wrong path, or a hub id (not a local folder)")
    return kept(("config.json", str(file.resolve())), lambda: _parsed(file), copied=True), file


def _parsed(file: Path) -> dict:
    """The JSON object of a config file; ConfigError naming the line of bad JSON."""
    text = file.read_text(encoding="utf-8", errors="replace")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{file}, line {e.lineno} column {e.colno}", "not valid JSON", expected="JSON",
                          found=repr(text[max(0, e.pos - 20): e.pos + 20]),
                          cause="a truncated or hand-edited file") from None
    if not isinstance(raw, dict):
        raise ConfigError(str(file), "not a JSON object", expected="{...}", found=type(raw).__name__)
    return raw


def load_config(path: str | Path) -> DraftConfig:
    """Read `path` (a config.json or a directory holding one) into a DraftConfig."""
    raw, file = read_config_json(path, "draft")
    return DraftConfig.from_dict(raw, source=str(file))


def config_to_dict(cfg: DraftConfig, dialect: str = "specforge") -> dict[str, Any]:
    """A config.json dict for `dialect` (one of formats.WRITERS, or any row of dialects.CONFIG_DIALECTS with a
    writer) describing the same draft: the shared Llama block, flags and ids here, the rest its row's writer."""
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
    if cfg.partial_rotary_factor != 1.0:
        llama["partial_rotary_factor"] = cfg.partial_rotary_factor
    flags = {"norm_before_residual": cfg.norm_before_residual, "fc_norm": cfg.fc_norm,
             "norm_before_fc": cfg.norm_before_fc, "norm_output": cfg.norm_output}
    if cfg.parallel_drafting:     # P-EAGLE: vLLM reads mask_token_id at the top level of every dialect
        flags.update(mask_token_id=cfg.mask_token_id, parallel_drafting=True)
    row = CONFIG_DIALECTS.get(dialect)
    ids = list(cfg.aux_layer_ids) if cfg.aux_layer_ids is not None else None
    if ids is not None and row is not None:      # express the ids in the dialect's own convention
        if cfg.aux_ids_convention != row.ids_convention:
            ids = [i + 1 for i in ids] if row.ids_convention == "input" else [i - 1 for i in ids]
    if cfg.mla is not None:
        if row is None or not row.mla_architectures:   # the expected text names the rows with mla_architectures
            raise ConfigError("config_to_dict", f"an MLA draft has no {dialect} config", expected="specforge (the "
                              f"SGLang dialect) or vllm, both {MLA_ARCHITECTURE}", found=dialect,
                              cause="only SGLang and vLLM serve EAGLE-3 drafts with multi-latent attention")
        llama.pop("head_dim")                          # HF DeepseekV3Config derives its own (= qk_rope_head_dim)
        llama.update(model_type="deepseek_v3", **cfg.mla.as_dict())
    if row is None or row.write is None:
        raise ConfigError("config_to_dict", "unknown dialect", expected=WRITERS, found=dialect)
    out = row.write(cfg, row.architecture(cfg), llama, flags, ids)
    if not cfg.use_aux_hidden_state:         # where ModelOpt writes it and vLLM / SGLang read it
        out["eagle_config"] = {**(out.get("eagle_config") or {}), "use_aux_hidden_state": False}
    return out
