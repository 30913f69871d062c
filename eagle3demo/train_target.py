"""Train the demo world's target: a small transformers model on the chat corpus — `LlamaForCausalLM` (the llama
world) or `DeepseekV3ForCausalLM` (the mla world: multi-latent attention, a dense first layer then MoE layers).

Plain next-token loss over whole conversations (prompt and answer), right-padded length-bucketed batches,
AdamW with warmup + cosine. ``model, stats = train_target(encoded, target_config(V), steps=220)``; then
``greedy_reply(model, tokenizer, "How do I make pancakes?")`` shows whether it is fluent.
"""
from __future__ import annotations

import math
import random
import time

import torch
from torch import Tensor

from eagle3lib.demo.corpus import BOS, EOT, PAD
from eagle3lib.progress import bar


MLA_ATTENTION = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}     # DeepSeek-V3's and Kimi-K2's values
MLA_ROUTER = {"topk_method": "noaux_tc", "scoring_func": "sigmoid", "n_group": 1, "topk_group": 1,
              "routed_scaling_factor": 2.5, "norm_topk_prob": True, "first_k_dense_replace": 1, "moe_layer_freq": 1,
              "n_shared_experts": 1}      # as DeepSeek-V3 / Kimi-K2 config.json carry them (Kimi-K2's groups: 1, 1)
MLA_RMS_NORM_EPS = 1e-6   # DeepSeek-V3's and Kimi-K2's; the engines' latent norms read it, transformers' use 1e-6


def target_config(vocab_size: int, tokenizer=None, kind: str = "llama"):
    """The demo target's config: 8 layers, hidden 128, 4 heads, rope_theta 10000.

    llama: LlamaConfig, 2 KV heads (GQA), head_dim 32. mla: DeepseekV3Config with DeepSeek-V3's real attention
    shape (kv_lora_rank 512 + qk_rope_head_dim 64 = the latent 576, the only one vLLM's CPU MLA backend takes;
    q LoRA 64, qk_nope 32, v 32: the width stays small; interleaved RoPE as DeepSeek-V3 ships) and MoE after one
    dense layer (4 routed experts, top-2, 1 shared) routed as DeepSeek-V3 / Kimi-K2 route (MLA_ROUTER: noaux_tc,
    sigmoid scores with a correction bias, which vLLM builds only for noaux_tc).
    """
    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    if tokenizer is not None:
        ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in
               (("bos_token_id", BOS), ("eos_token_id", EOT), ("pad_token_id", PAD))}
    common = dict(vocab_size=vocab_size, hidden_size=128, intermediate_size=344, num_hidden_layers=8,
                  num_attention_heads=4, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  hidden_act="silu", attn_implementation="sdpa", **ids)
    if kind == "mla":
        from transformers import DeepseekV3Config
        common["rms_norm_eps"] = MLA_RMS_NORM_EPS
        cfg = DeepseekV3Config(**common, num_key_value_heads=4, q_lora_rank=64, qk_nope_head_dim=32, v_head_dim=32,
                               rope_interleave=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                               moe_intermediate_size=96, n_routed_experts=4, num_experts_per_tok=2,
                               **MLA_ATTENTION, **MLA_ROUTER)
        for key, value in MLA_ROUTER.items():     # fields DeepseekV3Config does not declare: kept on the config
            setattr(cfg, key, value)
        return cfg
    from transformers import LlamaConfig
    return LlamaConfig(**common, num_key_value_heads=2, head_dim=32, rope_theta=10000.0)


def pad_batch(seqs: list[list[int]], pad_id: int = 0) -> tuple[Tensor, Tensor]:
    """Right-padded (input_ids (B, T), attention_mask (B, T)) of token lists."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


def length_batches(lengths: list[int], batch_size: int, rng: random.Random):
    """Endless shuffled batches of indices, similar lengths together (less padding)."""
    while True:
        order = list(range(len(lengths)))
        rng.shuffle(order)
        pool = batch_size * 16
        batches = []
        for i in range(0, len(order), pool):
            chunk = sorted(order[i:i + pool], key=lambda j: lengths[j])
            batches += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        yield from batches


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train_target(encoded: list[list[int]], config, steps: int, batch_size: int = 32, lr: float = 3e-3,
                 seed: int = 0, progress: bool = False):
    """(trained causal LM in eval mode, stats dict) after `steps` AdamW steps on the token lists."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    batches = length_batches([len(s) for s in encoded], batch_size, random.Random(seed))
    losses, n_tok, t0 = [], 0, time.perf_counter()
    meter = bar(total=steps, desc="target", progress=progress, unit="step", mininterval=2.0)
    model.train()
    for step in range(steps):
        ids, mask = pad_batch([encoded[i] for i in next(batches)], config.pad_token_id)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=max(1, steps // 12))
        out = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(out.loss.item())
        n_tok += int(mask.sum())
        meter.set_postfix(loss=f"{losses[-1]:.3f}")
        meter.update(1)
    meter.close()
    model.eval()
    tail = losses[-max(1, steps // 10):]
    stats = {"steps": steps, "batch_size": batch_size, "peak_lr": lr, "tokens_seen": n_tok,
             "epochs": round(steps * batch_size / len(encoded), 2), "first_loss": round(losses[0], 4),
             "final_loss": round(sum(tail) / len(tail), 4), "seconds": round(time.perf_counter() - t0, 1)}
    return model, stats


@torch.no_grad()
def rescale_residual(model, c: float, scale_eps: bool = True) -> None:
    """Scale the residual stream by `c` exactly: embedding, every o_proj and down_proj (dense, shared and routed
    experts) x c, the eps of every residual-stream RMSNorm (input / post-attention layernorms, the final norm) x c**2.

    RMSNorm(c*x) with eps*c**2 equals RMSNorm(x) with eps, so every logit is unchanged (up to rounding) while
    every hidden state is c times larger. Norms inside attention (DeepSeek-V3's kv_a / q_a layernorms) read
    unscaled latents and keep their eps (transformers builds them with its default 1e-6, not `rms_norm_eps`).
    `scale_eps=False` (the mla world) leaves every eps and the config's `rms_norm_eps` alone: vLLM and SGLang build
    those latent norms with the config's `rms_norm_eps` (vllm 0.32.0 deepseek_v2.py:1082, 1098), so it must stay
    the 1e-6 transformers uses for them; the residual norms then see eps 1e-6 against c**2-times larger states, a
    change of order eps / mean(x**2) (build_world records the largest logit change).
    """
    model.model.embed_tokens.weight.mul_(c)
    norms = [model.model.norm]
    for layer in model.model.layers:
        norms += [layer.input_layernorm, layer.post_attention_layernorm]
        for name, prm in [*layer.self_attn.o_proj.named_parameters(prefix="o_proj"),
                          *layer.mlp.named_parameters()]:
            if name.split(".")[-1] == "down_proj" or ".down_proj." in f".{name}" or name.startswith("o_proj"):
                prm.mul_(c)                                   # (E, H, I) routed experts or (H, I) / (H,) linears
    if not scale_eps:
        return
    for norm in norms:
        norm.variance_epsilon *= c * c
    model.config.rms_norm_eps *= c * c


@torch.no_grad()
def greedy_reply(model, tokenizer, question: str, max_new_tokens: int = 60) -> str:
    """The target's greedy answer to a one-turn chat (decoded, special tokens kept)."""
    enc = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)
    eot = tokenizer.convert_tokens_to_ids(EOT)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eot,
                         pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:])


@torch.no_grad()
def eval_loss(model, encoded: list[list[int]], batch_size: int = 64) -> float:
    """Mean next-token loss (nats/token) of the target on token lists."""
    tot, n = 0.0, 0
    for i in range(0, len(encoded), batch_size):
        ids, mask = pad_batch(encoded[i:i + batch_size], model.config.pad_token_id)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]     # (B, T, V) -> (B, T-1, V)
        tgt = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                                 ignore_index=-100, reduction="sum")
        tot, n = tot + float(loss), n + int((tgt != -100).sum())
    return tot / max(n, 1)
