"""The checkpoint formats, one row each: name, how its keys are recognised, how canonical names are saved in it,
which config dialect reads it and which one is written with it.

`detect_format` (here), `checkpoint.save_draft` (save map, config written with it), `DIALECTS` (what a config
can read as) and `WRITERS` (what `config.config_to_dict` is asked to write) all read this table; a new format is one
row here (plus its key renames in `checkpoint.TO_CANONICAL` when its names differ on the way in). The dialects
themselves (detection, fields, writer) are rows of `dialects.CONFIG_DIALECTS`: a format whose config.json is a new
dialect adds one row there too. Usage:
    FORMATS["speculators"].save_rules   # midlayer.* saved as layers.0.*
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .mla_vllm import is_vllm_checkpoint

Rules = tuple[tuple[str, str], ...]     # (pattern, replacement) applied in order: canonical -> on-disk names


@dataclass(frozen=True)
class Format:
    """One checkpoint format: every role filled, or the reason it has none."""
    name: str
    writer: str                                  # who writes it
    detect: Callable[[Sequence[str], bool], bool] | None   # (keys, mla) -> these keys are this format
    detect_example: tuple[str, ...] | str        # keys detect_format names this format; str: why none
    save_rules: Rules | None                     # canonical -> on-disk names (None: never written, see no_save)
    save_drops: tuple[str, ...]                  # canonical keys the format does not store
    dialect: str                                 # the config dialect its config.json reads as (a dialects row)
    config_writer: str | None                    # the dialect config_to_dict writes with it (MLA: MLA_WRITER)
    save_rules_parallel: Rules | None = None     # a P-EAGLE draft's names, where they differ
    no_save: str = ""                            # why save_rules is None


def _any_prefix(prefix: str) -> Callable[[Sequence[str], bool], bool]:
    return lambda keys, mla: any(k.startswith(prefix) for k in keys)


def _modelopt(keys, mla) -> bool:
    """ModelOpt's internal prefix, or its Dec-2025 names when no layers.0.* / model.midlayer.* says otherwise."""
    return any(k.startswith("eagle_module.") for k in keys) or (
        "input_embeds_norm.weight" in keys and not any(k.startswith(("layers.0.", "model.midlayer.")) for k in keys))


_LAYERS0: Rules = ((r"^midlayer\.", "layers.0."),)

# in detection order: the first whose `detect` holds names the keys; specforge is the default
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("vllm", "vLLM (its own module names; MLA: deepseek_eagle3.py, model/mla_vllm.py)",
           lambda keys, mla: mla and is_vllm_checkpoint(keys), "an MLA draft with vLLM-only names (mla=True)",
           _LAYERS0, (), "vllm", "vllm"),
    Format("modelopt", "NVIDIA ModelOpt", _modelopt, ("eagle_module.fc.weight",), _LAYERS0, ("t2d",), "modelopt",
           "specforge"),
    Format("speculators", "vLLM speculators (and ModelOpt 2026)", _any_prefix("layers.0."),
           ("layers.0.mlp.up_proj.weight",), _LAYERS0, (), "speculators", "speculators"),
    Format("sglang", "SGLang in memory / HF-prefixed", _any_prefix("model.midlayer."),
           ("model.midlayer.mlp.up_proj.weight",), None, (), "specforge", "specforge",
           no_save="SGLang writes no draft checkpoint: it reads SpecForge's (save as specforge)"),
    Format("specforge", "SpecForge (and SGLang's loader)", lambda keys, mla: True, ("midlayer.mlp.up_proj.weight",),
           (), (), "specforge", "specforge", save_rules_parallel=_LAYERS0),   # SpecForge's PEagleDraftModel: layers
    Format("eagle", "EAGLE (SafeAILab)", None, "the same keys as specforge (midlayer.*): told apart by its config",
           (), (), "eagle", "eagle"),
)}
MLA_WRITER = {"vllm": "vllm"}      # an MLA draft's config: vLLM's for vllm weights, else SGLang's (specforge)
DIALECTS = tuple(dict.fromkeys(f.dialect for f in FORMATS.values()))
WRITERS = tuple(dict.fromkeys(f.config_writer for f in FORMATS.values() if f.config_writer))


def detect_format(keys, mla: bool = False) -> str:
    """Which writer produced these keys (FORMATS in order; later layers are layers.N.* in all of them)."""
    keys = list(keys)
    return next(f.name for f in FORMATS.values() if f.detect is not None and f.detect(keys, mla))
