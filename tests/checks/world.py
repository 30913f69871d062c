"""Tiny artifacts the check tests write: draft/target configs, header-only weights, seed-format data."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle3lib.samples.readers import Sample
from eagle3lib.samples.writers import write_seed_dataset

# an 8-layer target whose draft was trained on [out L1, out L3, out L5] = layer_in.2/4/6
TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 8, "hidden_size": 32,
          "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 120,
          "rope_theta": 10000.0, "max_position_embeddings": 256, "tie_word_embeddings": False}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 32,
         "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
         "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
         "vocab_size": 120, "draft_vocab_size": 40, "target_hidden_size": 32, "tie_word_embeddings": False,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}}
LAYOUT = ("layer_in.2", "layer_in.4", "layer_in.6")


def draft_raw(**changes) -> dict:
    """A copy of DRAFT with top-level keys changed (None deletes a key)."""
    raw = copy.deepcopy(DRAFT)
    for k, v in changes.items():
        if v is None:
            raw.pop(k, None)
        else:
            raw[k] = v
    return raw


def canonical_tensors(raw: dict, k: int = 3) -> dict[str, torch.Tensor]:
    """Small tensors under the canonical (SpecForge) names of a draft of `raw`'s sizes."""
    H, Ht, V, Vd = raw["hidden_size"], raw["target_hidden_size"], raw["vocab_size"], raw["draft_vocab_size"]
    nh, nkv, hd, inter = raw["num_attention_heads"], raw["num_key_value_heads"], raw["head_dim"], \
        raw["intermediate_size"]
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.1   # noqa: E731
    used = torch.sort(torch.randperm(V, generator=g)[:Vd]).values        # the draft vocab's target ids
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    return {"fc.weight": r(H, k * Ht), "midlayer.hidden_norm.weight": torch.ones(H),
            "midlayer.input_layernorm.weight": torch.ones(H), "midlayer.post_attention_layernorm.weight": torch.ones(H),
            "midlayer.self_attn.q_proj.weight": r(nh * hd, 2 * H),
            "midlayer.self_attn.k_proj.weight": r(nkv * hd, 2 * H),
            "midlayer.self_attn.v_proj.weight": r(nkv * hd, 2 * H), "midlayer.self_attn.o_proj.weight": r(H, nh * hd),
            "midlayer.mlp.gate_proj.weight": r(inter, H), "midlayer.mlp.up_proj.weight": r(inter, H),
            "midlayer.mlp.down_proj.weight": r(H, inter), "norm.weight": torch.ones(H), "lm_head.weight": r(Vd, H),
            "d2t": used - torch.arange(Vd), "t2d": t2d}


def write_draft(root: Path, raw: dict, tensors: dict | None = None, name: str = "draft") -> Path:
    """config.json (+ model.safetensors when tensors are given) in root/name."""
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(raw))
    if tensors is not None:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / "model.safetensors"))
    return d


def write_target(root: Path, raw: dict | None = None, embed: torch.Tensor | None = None, name: str = "target") -> Path:
    """A target folder: config.json, and the embedding (+ lm_head) when `embed` is given."""
    d = Path(root) / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(raw or TARGET))
    if embed is not None:
        save_file({"model.embed_tokens.weight": embed.contiguous(), "lm_head.weight": embed.clone()},
                  str(d / "model.safetensors"))
    return d


def write_data(root: Path, layout=LAYOUT, n: int = 2, T: int = 16, Ht: int = 32, seed: int = 0,
               num_layers: int = 8, name: str = "data") -> Path:
    """A seed-format dataset of random samples declaring `layout`."""
    g = torch.Generator().manual_seed(seed)
    samples = [Sample(f"s{i}", torch.randint(0, 120, (T,), generator=g), torch.ones(T, dtype=torch.long),
                      torch.randn(T, len(layout), Ht, generator=g), tuple(layout), None, f"mem:{i}")
               for i in range(n)]
    d = Path(root) / name
    write_seed_dataset(d, samples, layout=layout, info={"num_target_layers": num_layers})
    return d


def statuses(findings, cause: str) -> set[str]:
    """The statuses the findings give `cause`."""
    return {f.status for f in findings if f.cause == cause}
