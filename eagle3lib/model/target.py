"""Target-model facts and the two target tensors a draft needs: the embedding and (sometimes) the lm_head.

Only `model.embed_tokens.weight` (and `lm_head.weight`) are read from the target's (sharded) safetensors:
a 1T-parameter target costs only its embedding. Usage:
    info = load_target_info(target_dir); emb = load_target_tensor(target_dir, "embed")
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import torch

from .config import read_config_json
from ..once import kept
from ..errors import CheckpointError, ConfigError, Eagle3Error, MissingFileError
from .safefiles import INDEX_NAMES, load_state_dict, read_safetensors_header, shard_map, weight_files

# Where architectures keep the tensors, first match wins.
EMBED_KEYS = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
              "language_model.model.embed_tokens.weight", "transformer.wte.weight", "embed_tokens.weight")
LM_HEAD_KEYS = ("lm_head.weight", "language_model.lm_head.weight", "model.lm_head.weight")


@dataclass(frozen=True)
class TargetInfo:
    """The facts of a target config.json the workbook needs."""
    path: str
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def text_config(self) -> Mapping[str, Any]:
        """The decoder's config: `text_config` of a VLM (Kimi-K2.5), else the config itself."""
        return self.raw["text_config"] if isinstance(self.raw.get("text_config"), Mapping) else self.raw

    @property
    def attention(self) -> str:
        """"mla" (DeepSeek-V3 / Kimi-K2: kv_lora_rank set), "sliding+full" (gpt-oss layer_types) or "full"."""
        if self.text_config.get("kv_lora_rank"):
            return "mla"
        return "sliding+full" if "sliding_attention" in (self.text_config.get("layer_types") or ()) else "full"

    @property
    def moe(self) -> bool:
        """True when the decoder has routed experts (n_routed_experts, num_experts or num_local_experts > 0)."""
        return any(int(self.text_config.get(k) or 0) > 0 for k in ("n_routed_experts", "num_experts", "num_local_experts"))

    @property
    def first_k_dense_replace(self) -> int | None:
        """DeepSeek-V3 / Kimi-K2: the leading dense layers before the MoE ones (None when the config has no such key)."""
        v = self.text_config.get("first_k_dense_replace")
        return int(v) if v is not None else None


def load_target_info(path: str | Path) -> TargetInfo:
    """TargetInfo from a target dir (or its config.json); VLM configs use their `text_config`."""
    raw, file = read_config_json(path, "target")
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    missing = [k for k in ("num_hidden_layers", "hidden_size", "vocab_size") if k not in text]
    if missing:
        raise ConfigError(f"{file}, key '{missing[0]}'", "required target field missing",
                          expected="num_hidden_layers, hidden_size, vocab_size", found=f"missing {missing}",
                          cause="not a causal-LM config")
    for k in ("num_hidden_layers", "hidden_size", "vocab_size"):
        if isinstance(text[k], bool) or not isinstance(text[k], int) or text[k] <= 0:
            raise ConfigError(f"{file}, key '{k}'", "wrong type or value", expected="an integer > 0",
                              found=repr(text[k]))
    archs = raw.get("architectures") or ["?"]
    return TargetInfo(str(path), str(archs[0]), str(text.get("model_type", raw.get("model_type", "?"))),
                      int(text["num_hidden_layers"]), int(text["hidden_size"]), int(text["vocab_size"]),
                      bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
                      MappingProxyType(raw))


def _tensor_names(path: Path) -> dict[str, Path]:
    """{tensor name: file} for a target dir, from the shard index or the safetensors headers (no data read)."""
    for name in INDEX_NAMES:
        if (path / name).exists():
            return shard_map(path / name)
    out = {}
    for f in weight_files(path):
        if f.suffix == ".safetensors":
            out.update({k: f for k in read_safetensors_header(f) if k != "__metadata__"})
        else:
            out.update({k: f for k in load_state_dict(f)})
    return out


def load_target_tensor(path: str | Path, which: str = "embed", dtype: torch.dtype | None = None) -> torch.Tensor:
    """The target's embedding (`which="embed"`) or lm_head (`"lm_head"`, the embedding when tied) only."""
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(str(path), "target directory not found", expected="a model directory",
                               found="nothing", cause="the draft needs the target's embedding (drafts ship without)")
    names = _tensor_names(path)
    keys = EMBED_KEYS if which == "embed" else LM_HEAD_KEYS
    key = next((k for k in keys if k in names), None)
    if key is None and which == "lm_head":
        try:
            tied = load_target_info(path).tie_word_embeddings
        except Eagle3Error:
            tied = False
        if tied:
            return load_target_tensor(path, "embed", dtype)
    if key is None:
        raise CheckpointError(str(path), f"no {which} tensor in the target checkpoint", expected=list(keys),
                              found=sorted(names)[:6], cause="a target saved without its embedding, or an "
                              "architecture whose key names eagle3lib does not know")
    t = load_state_dict(names[key], keys=[key])[key]
    return t.to(dtype) if dtype is not None else t


def transformers_config(path: str | Path):
    """The target's transformers config as AutoConfig builds it, from the case's one parse of its config.json
    (`read_config_json`); None when transformers does not know its model_type (AutoConfig then decides)."""
    from transformers import CONFIG_MAPPING
    raw, _ = read_config_json(path, "target")
    if not isinstance(raw, dict) or raw.get("model_type") not in CONFIG_MAPPING:
        return None
    config = CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
    config.name_or_path = str(path)
    return config


def load_tokenizer(path: str | Path):
    """The target's tokenizer through transformers, or None when the directory has none. It is handed the config
    the case has read (`transformers_config`), so transformers does not open config.json again."""
    path = Path(path)
    if not any((path / n).exists() for n in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    def load():
        try:
            config = {"config": c} if (c := transformers_config(path)) is not None else {}
        except (Eagle3Error, ValueError):    # no or unbuildable config.json: transformers reads what it can
            config = {}
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False, local_files_only=True, **config)
    return kept(("tokenizer", str(path.resolve())), load)     # once per case (`once.kept`): one shared tokenizer

