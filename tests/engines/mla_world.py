"""A tiny random DeepSeek-V3 world the CPU build of vLLM 0.32 runs: the probe behind tests/engines/test_vllm_mla.py.

The target is the MLA demo target's architecture (transformers' `DeepseekV3ForCausalLM`: hidden 128, 8 layers, a
dense first layer then 4 routed experts, top-2, 1 shared) with DeepSeek-V3's real attention shape, the only one
vLLM's CPU MLA backend takes (kv_lora_rank 512 + qk_rope_head_dim 64 = latent 576, cpu_mla.py:62-64), and the
router fields vLLM needs to build `e_score_correction_bias` (topk_method noaux_tc, scoring_func sigmoid,
deepseek_v2.py:328-332). Random weights (~4M parameters, the demo tokenizer); the draft is an MLA EAGLE-3 draft of
the same latent shape with random weights (`random_init`, Kaiming-uniform: large enough that RoPE moves its
attention), saved by eagle3lib's `save_draft(format="vllm")`. Built in ~15 s.
    target, draft = build(tmp_path)          # draft ids: vLLM's input-of-layer [1, 2, 4, 6] (no 0: see the test)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "data" / "demo_artifacts_mla" / "target"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
LAYOUT = ("layer_in.1", "layer_in.2", "layer_in.4", "layer_in.6")     # vLLM ids [1, 2, 4, 6]
DEEPSEEK_V3_ATTENTION = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "topk_method": "noaux_tc",
                         "scoring_func": "sigmoid"}


def build(root: Path, ids: list[int] | None = None, attention: dict | None = None) -> tuple[Path, Path]:
    """(target dir, draft dir) under `root`; `ids`: the draft's top-level aux ids (default [1, 2, 4, 6]);
    `attention`: the fields set on the demo target's config (default DEEPSEEK_V3_ATTENTION, which the demo target
    config carries itself since issue 27; a test sets others to see vLLM refuse them)."""
    from transformers import DeepseekV3ForCausalLM

    from eagle3demo.train_draft import draft_config_dict
    from eagle3demo.train_target import target_config
    from eagle3lib.model.checkpoint import random_init, save_draft
    from eagle3lib.model.config import DraftConfig
    from eagle3lib.model.peagle import draft_for

    torch.manual_seed(0)
    tc = target_config(2685, kind="mla")
    for key, value in (DEEPSEEK_V3_ATTENTION if attention is None else attention).items():
        setattr(tc, key, value)
    tc.head_dim, tc.qk_head_dim = tc.qk_rope_head_dim, tc.qk_nope_head_dim + tc.qk_rope_head_dim
    target = DeepseekV3ForCausalLM(tc).eval()
    target.save_pretrained(root / "target")
    for f in TOKENIZER_FILES:
        shutil.copy(TOKENIZER / f, root / "target" / f)
    cfg = DraftConfig.from_dict(draft_config_dict(tc, 671, LAYOUT))
    draft = draft_for(cfg)
    draft.load_state_dict({k: random_init(k, tuple(v.shape)) if v.is_floating_point() else v
                           for k, v in draft.state_dict().items()})
    out = save_draft(draft, cfg, root / "draft", format="vllm")
    raw = json.loads((out / "config.json").read_text())
    raw["eagle_aux_hidden_state_layer_ids"] = list(ids or [1, 2, 4, 6])
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    return root / "target", out


def greedy_texts(target: Path, prompts: list[dict], max_new_tokens: int) -> list[str]:
    """transformers' greedy continuation of each {"prompt_token_ids": [...]} prompt, decoded (the reference a greedy
    speculative server must reproduce whatever its draft proposes)."""
    from transformers import AutoTokenizer, DeepseekV3ForCausalLM
    tok = AutoTokenizer.from_pretrained(target)
    model = DeepseekV3ForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    out = []
    for p in prompts:
        ids = torch.tensor([p["prompt_token_ids"]])
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False)
        out.append(tok.decode(gen[0, ids.shape[1]:]))
    return out
