"""Tiny random targets of the five architectures users serve EAGLE-3 drafts for, built from configs (no downloads).

`tiny_config(arch)` gives a transformers config of 2-4 layers and hidden 32; `tiny_target(arch)` the random
causal LM; `save_tiny_target(arch, dir)` writes it with `save_pretrained` so tests load it back through eagle3lib.
Each config keeps what makes the architecture differ from Llama: Qwen3's q/k norms and tied embeddings, Qwen3-MoE's
dense + sparse layers, DeepSeek-V3's MLA with `first_k_dense_replace=1` (layer 0 dense, layers 1-2 MoE, grouped
routing), gpt-oss's attention sinks, a sliding-window layer and a MoE in every layer.
"""
from __future__ import annotations

from pathlib import Path

import torch
import transformers

ARCHS = ("llama", "qwen3", "qwen3_moe", "deepseek_v3", "gpt_oss")
V, H = 96, 32


def tiny_config(arch: str, **over):
    """A tiny transformers config of `arch` (eos off, eager attention so float64 runs anywhere)."""
    common = dict(vocab_size=V, hidden_size=H, max_position_embeddings=256, eos_token_id=None, pad_token_id=None,
                  bos_token_id=None)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=8)
    elif arch == "qwen3":
        cfg = transformers.Qwen3Config(**common, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=8, tie_word_embeddings=True)
    elif arch == "qwen3_moe":
        cfg = transformers.Qwen3MoeConfig(**common, intermediate_size=64, moe_intermediate_size=16,
                                          num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                          head_dim=8, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                                          mlp_only_layers=[0], norm_topk_prob=True)
    elif arch == "deepseek_v3":
        cfg = transformers.DeepseekV3Config(**common, intermediate_size=64, moe_intermediate_size=16,
                                            num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
                                            num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
                                            num_experts_per_tok=2, n_group=2, topk_group=1, q_lora_rank=16,
                                            kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8,
                                            tie_word_embeddings=False)
    elif arch == "gpt_oss":
        cfg = transformers.GptOssConfig(**common, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8, num_local_experts=4,
                                        num_experts_per_tok=2, sliding_window=4,
                                        layer_types=["sliding_attention", "full_attention"])
        cfg.max_position_embeddings = 32 * 4096   # the YaRN factor 32 over gpt-oss's original 4096 positions
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}")
    for k, v in over.items():
        setattr(cfg, k, v)
    cfg._attn_implementation = "eager"
    return cfg


def tiny_target(arch: str, seed: int = 0, dtype=torch.float32, **over):
    """A random tiny causal LM of `arch` in eval mode (weights drawn with std 0.2 so states are not near zero)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(arch, **over))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 or "sinks" in name or "bias" in name:
                p.normal_(0, 0.2)
    return exact(model) if dtype == torch.float64 else model.to(dtype).eval()


def exact(model):
    """`model` in float64 with the experts run one by one (grouped_mm, the default kernel, has no float64), so a
    batched verify and one-token decoding pick the same argmax."""
    model.config._experts_implementation = "eager"
    return model.double().eval()


def save_tiny_target(arch: str, folder, seed: int = 0, **over) -> Path:
    """`tiny_target(arch)` written with save_pretrained into `folder` (returned)."""
    folder = Path(folder)
    tiny_target(arch, seed, **over).save_pretrained(folder)
    return folder


def quantize_fp8_blocks(w: torch.Tensor, block=(128, 128)) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) weight -> (e4m3 weight (N, K), float32 scale_inv (ceil(N/bn), ceil(K/bk))), one scale per block
    (amax / 448, as DeepSeek-V3's fp8 checkpoints are made); W ~= q * scale_inv per block."""
    N, K = w.shape
    bn, bk = block
    nN, nK = -(-N // bn), -(-K // bk)
    padded = torch.nn.functional.pad(w.float(), (0, nK * bk - K, 0, nN * bn - N))    # (N, K) -> (nN*bn, nK*bk)
    blocks = padded.reshape(nN, bn, nK, bk)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0                     # (nN, nK)
    q = (blocks / scale[:, None, :, None]).reshape(nN * bn, nK * bk)[:N, :K]
    return q.to(torch.float8_e4m3fn), scale


def save_fp8_target(src, folder, block=(128, 128)) -> Path:
    """Copy of the target at `src` with every decoder-layer projection (2-D `*_proj.weight`, the experts' too) stored
    as DeepSeek-V3 / Kimi-K2 do: e4m3 `X.weight` + float32 `X.weight_scale_inv`, and the config's
    `quantization_config` naming the block size. Embedding, norms, router and lm_head stay as they are."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    src, folder = Path(src), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, t in load_file(str(src / "model.safetensors")).items():
        if ".layers." in name and name.endswith("_proj.weight") and t.dim() == 2:
            out[name], out[name + "_scale_inv"] = quantize_fp8_blocks(t, block)
        else:
            out[name] = t
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": list(block)}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    for extra in src.iterdir():
        if extra.name not in ("model.safetensors", "config.json") and extra.is_file():
            shutil.copy(extra, folder / extra.name)
    return folder
