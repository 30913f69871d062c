"""Variants of the shipped demo draft (data/demo_artifacts) that the engine tests ask the real vLLM about.

`probes()` writes every variant once per test session into a temporary folder and probes them all in ONE vLLM
process (`vllm_engine.probe.probe_many`, its own empty cache), so the tests compare eagle3lib's tables with what
the running engine answered, never with a cached answer of another session. Each variant is (edits for
`engines.draft_edit.edited_copy`, probe arguments); a variant's folder name is its key (method inference reads the
path, so the names are chosen for it).
"""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch

from eagle3lib.engines.advice import config_snippet

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "data" / "demo_artifacts" / "draft"
TARGET = ROOT / "data" / "demo_artifacts" / "target"
MLA_DRAFT = ROOT / "data" / "demo_artifacts_mla" / "draft"        # Eagle3DeepseekV2ForCausalLM, model_type deepseek_v3
MLA_TARGET = ROOT / "data" / "demo_artifacts_mla" / "target"
YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128, "mscale": 1.0, "mscale_all_dim": 1.0,
        "beta_fast": 32, "beta_slow": 1}
MLA = {"src": MLA_DRAFT, "target": MLA_TARGET}
H, I, V, L = 128, 344, 2685, 8              # the demo draft's hidden / intermediate size, target vocab, target layers
NESTED = "eagle_config.eagle_aux_hidden_state_layer_ids"
TOP = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4, 6]}


def _layer(i: int) -> dict[str, torch.Tensor]:
    """A later draft layer's tensors (its attention reads H, not 2H)."""
    z = torch.zeros
    p = f"layers.{i}."
    return {p + "input_layernorm.weight": z(H), p + "hidden_norm.weight": z(H),
            p + "post_attention_layernorm.weight": z(H), p + "self_attn.q_proj.weight": z(H, H),
            p + "self_attn.k_proj.weight": z(64, H), p + "self_attn.v_proj.weight": z(64, H),
            p + "self_attn.o_proj.weight": z(H, H), p + "mlp.gate_proj.weight": z(I, H),
            p + "mlp.up_proj.weight": z(I, H), p + "mlp.down_proj.weight": z(H, I)}


# name -> (edited_copy keyword arguments, probe arguments)
VARIANTS: dict[str, tuple[dict, dict]] = {
    "shipped": ({}, {}),
    "ids_top": (dict(config=TOP, drop_config=[NESTED]), {}),
    "ids_both": (dict(config={"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 7]}), {}),
    "ids_layer_ids": (dict(config={"eagle_config.layer_ids": [0, 2, 4, 6]}, drop_config=[NESTED]), {}),
    "ids_none": (dict(drop_config=[NESTED]), {}),
    "fc_top_only": (dict(config=TOP, drop_config=[NESTED, "num_aux_hidden_states"]), {}),
    # the snippet engines.advice gives for the demo's training layout, on a config without ids or slot count
    "advised": (dict(config=config_snippet(["embed", "layer_in.2", "layer_in.4", "layer_in.6"], L, "vllm"),
                     drop_config=[NESTED, "num_aux_hidden_states"]), {}),
    "fc_nested_only": (dict(drop_config=["num_aux_hidden_states"]), {}),
    "fc_qwen3_top_only": (dict(config={**TOP, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
                               drop_config=[NESTED, "num_aux_hidden_states"]), {}),
    "flags_nested": (dict(config={"eagle_config.norm_before_fc": True, "fc_norm": True, "norm_output": True,
                                  "norm_before_residual": True},
                          add={"input_norm.weight": torch.zeros(4 * H),
                               **{f"fc_norm.{i}.weight": torch.zeros(H) for i in range(4)}}), {}),
    "flags_top": (dict(config={"norm_before_fc": True, "use_aux_norm": True},
                       add={"input_norm.weight": torch.zeros(4 * H)}), {}),
    "aux_off": (dict(config={"eagle_config.use_aux_hidden_state": False}), {}),
    "keys_extra": (dict(add={"fc.bias": torch.zeros(H), "input_norm.weight": torch.zeros(4 * H)}), {}),
    "keys_layers0": (dict(rename={k: k.replace("midlayer.", "layers.0.") for k in (
        "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight", "midlayer.mlp.down_proj.weight",
        "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight", "midlayer.post_attention_layernorm.weight",
        "midlayer.self_attn.k_proj.weight", "midlayer.self_attn.o_proj.weight", "midlayer.self_attn.q_proj.weight",
        "midlayer.self_attn.v_proj.weight")}), {}),
    "keys_unknown": (dict(add={"foo.weight": torch.zeros(H)}), {}),
    "keys_model_prefix": (dict(rename={"fc.weight": "model.fc.weight"}), {}),
    "two_layers": (dict(config={"num_hidden_layers": 2}, add=_layer(1)), {}),
    "d2t_long_name": (dict(rename={"d2t": "draft_id_to_target_id"}), {}),
    "d2t_full_vocab": (dict(config={"draft_vocab_size": V}, drop=["lm_head.weight"]), {}),
    "own_embed": (dict(add={"embed_tokens.weight": torch.zeros(V, H)}), {}),
    "no_lm_head": (dict(drop=["lm_head.weight"]), {}),
    "narrow": (dict(config={"hidden_size": 64}), {}),
    "mpe64": (dict(config={"max_position_embeddings": 64}), {"max_model_len": 512}),
    "rope_parameters_only": (dict(config={"rope_parameters": {"rope_theta": 50000.0, "rope_type": "default"}},
                                  drop_config=["rope_theta"]), {}),
    # MLA drafts (deepseek_eagle3.py) beside the MLA demo target, built on meta: the rope vLLM builds
    "mla_shipped": ({}, MLA),
    "mla_theta": (dict(config={"model_type": "deepseek_v2", "rope_theta": 50000.0}), MLA),
    "mla_yarn": (dict(config={"model_type": "deepseek_v2", "rope_scaling": YARN}), MLA),
    "mla_yarn_af1": (dict(config={"model_type": "deepseek_v2", "rope_scaling": {**YARN, "attention_factor": 1.0}}),
                     MLA),
    "mla_yarn_no_apply": (dict(config={"model_type": "deepseek_v2",
                                       "rope_scaling": {**YARN, "apply_yarn_scaling": False}}), MLA),
    # method inference: the folder names are the paths vLLM reads
    "EAGLE3-demo": ({}, {"method": None}),
    "eagle-runs_eagle3": ({}, {"method": None}),
    "plain_checkpoint": ({}, {"method": None}),
    "given_draft_model_eagle3": ({}, {"method": "draft_model"}),
}


# name -> (source draft, its target): saved by eagle3lib's save_draft(format="vllm")
SAVED = {"saved_vllm": (DRAFT, TARGET), "saved_vllm_mla": (MLA_DRAFT, MLA_TARGET)}


@functools.lru_cache(maxsize=None)
def probes() -> dict:
    """{variant name: VllmProbe} from the running vLLM, once per session (one vLLM process)."""
    from eagle3lib.vllm_engine import probe as vllm_probe
    root = Path(tempfile.mkdtemp(prefix="e3-vllm-variants-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    from eagle3lib.engines.draft_edit import edited_copy
    from eagle3lib.model.checkpoint import load_draft, save_draft
    reqs, names = [], list(VARIANTS)
    for name, (edits, args) in VARIANTS.items():
        args = {"method": "eagle3", "src": DRAFT, "target": TARGET, **args}
        folder = edited_copy(args.pop("src"), root / "v" / name, **edits)
        reqs.append({"draft": folder, **args})
    for name, (src, target) in SAVED.items():          # what eagle3lib writes in vLLM's format
        loaded = load_draft(src, target=target)
        reqs.append({"draft": save_draft(loaded.model, loaded.cfg, root / "v" / name, format="vllm"),
                     "target": target, "method": "eagle3"})
        names.append(name)
    old = vllm_probe.os.environ.get(vllm_probe.CACHE_ENV)
    vllm_probe.os.environ[vllm_probe.CACHE_ENV] = str(root / "cache")
    try:
        got = vllm_probe.probe_many(reqs)
    finally:
        if old is None:
            vllm_probe.os.environ.pop(vllm_probe.CACHE_ENV, None)
        else:
            vllm_probe.os.environ[vllm_probe.CACHE_ENV] = old
    return {"root": root, **dict(zip(names, got))}
