"""Train the demo world's EAGLE-3 draft on the target's captured hidden states (SpecForge objective); its config.

Per TTT step k (training-and-eval.md §2.1): the draft at position t consumes token t+1+k and is scored against
the target's logits at t+1+k restricted to the draft vocab; position_mask = loss_mask[t+k] * t2d[target argmax];
loss = sum_k 0.8**k * soft-CE. ``records = train_draft(draft, train, val, lm_head, ...)`` (list of log dicts).
"""
from __future__ import annotations

import random
import time

import torch
from torch import Tensor

from eagle3lib.demo.restore import Captured
from eagle3lib.layout import to_ids
from eagle3lib.progress import bar

from .train_target import length_batches, lr_at

ACC_DEFINITION = (
    "SpecForge classic acc_k (training-and-eval.md 2.1), pooled over the split: at TTT step k the draft at position t "
    "consumes the ground-truth token t+1+k and its own step-(k-1) feature; correct iff argmax(draft logits) == "
    "argmax(target logits at t+1+k restricted to the draft vocab via t2d) AND the full-vocab target argmax is in the "
    "draft vocab; numerator counted where loss_mask[t+k] == 1 (last token's mask set to 0, as offline SpecForge), "
    "denominator = sum of loss_mask[t+k] (out-of-draft-vocab targets count as misses). Teacher = the target's "
    "greedy prediction, not the data label.")


def draft_config_dict(target_config, draft_vocab_size: int, layout: tuple[str, ...]) -> dict:
    """SpecForge/SGLang draft config.json for the demo target (layer ids in the output-of-layer convention).

    A DeepSeek-V3 target gets the MLA draft SGLang serves for Kimi-K2.x (`Eagle3DeepseekV2ForCausalLM`: the
    target's latent sizes, a q LoRA, which SGLang's MLA draft layer requires, interleaved RoPE)."""
    tc = target_config
    ids = to_ids(layout, "output", tc.num_hidden_layers)               # embed -> -1
    d = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
         "hidden_size": tc.hidden_size, "intermediate_size": tc.intermediate_size,
         "num_attention_heads": tc.num_attention_heads, "num_key_value_heads": tc.num_key_value_heads,
         "head_dim": getattr(tc, "head_dim", tc.hidden_size // tc.num_attention_heads),
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
         "max_position_embeddings": tc.max_position_embeddings,
         "vocab_size": tc.vocab_size, "draft_vocab_size": draft_vocab_size,
         "target_hidden_size": tc.hidden_size, "tie_word_embeddings": False,
         "torch_dtype": "float32", "num_aux_hidden_states": len(layout),
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}}
    if tc.model_type == "deepseek_v3":
        d.update(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="deepseek_v3",
                 num_key_value_heads=tc.num_attention_heads, q_lora_rank=tc.q_lora_rank or 64,
                 kv_lora_rank=tc.kv_lora_rank, qk_nope_head_dim=tc.qk_nope_head_dim,
                 qk_rope_head_dim=tc.qk_rope_head_dim, v_head_dim=tc.v_head_dim, rope_interleave=True)
        del d["head_dim"]
    return d


def _batch(samples: list[Captured]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Right-padded ids (B, T), loss_mask (B, T) (last real token zeroed), aux (B, T, k*Ht), final (B, T, Ht)."""
    B, T = len(samples), max(s.input_ids.numel() for s in samples)
    k, Ht = samples[0].aux.shape[1:]
    ids = torch.zeros(B, T, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.long)
    aux = torch.zeros(B, T, k * Ht)
    final = torch.zeros(B, T, Ht)
    for i, s in enumerate(samples):
        n = s.input_ids.numel()
        ids[i, :n], mask[i, :n - 1] = s.input_ids, s.loss_mask[:n - 1]   # offline SpecForge: loss_mask[-1] = 0
        aux[i, :n] = s.aux.reshape(n, k * Ht)                            # (T, k, Ht) -> (T, k*Ht)
        final[i, :n] = s.final
    return ids, mask, aux, final


def step_terms(logits: list[Tensor], target_logits: Tensor, mask: Tensor, t2d: Tensor):
    """Per TTT step: (soft-CE sum, correct count, denominator) with SpecForge's teacher and position mask."""
    T = mask.shape[1]
    out = []
    for k, lg in enumerate(logits):
        n = T - 1 - k                                        # positions t with a teacher at t+1+k
        tl = target_logits[:, 1 + k:]                        # (B, T, V) -> (B, n, V): target at t+1+k
        m = mask[:, k:k + n].float()                         # loss_mask[t+k]
        pos = m * t2d[tl.argmax(-1)].float()                 # drop targets outside the draft vocab
        tp = tl[..., t2d].float().softmax(-1)                # (B, n, V) -> (B, n, Vd) teacher over the draft vocab
        lg = lg[:, :n]
        ce = -(pos[..., None] * tp * lg.float().log_softmax(-1)).sum()
        correct = ((lg.argmax(-1) == tp.argmax(-1)).float() * pos).sum()
        out.append((ce, correct, m.sum()))
    return out


@torch.no_grad()
def evaluate_draft(draft, samples: list[Captured], lm_head: Tensor, num_steps: int, batch_size: int = 64) -> dict:
    """Pooled SpecForge accuracy and soft-CE per TTT step over `samples` (see ACC_DEFINITION)."""
    draft.eval()
    t2d = draft.t2d
    corr, den, ce = [0.0] * num_steps, [0.0] * num_steps, [0.0] * num_steps
    for i in range(0, len(samples), batch_size):
        ids, mask, aux, final = _batch(samples[i:i + batch_size])
        logits = draft.ttt_forward(aux, ids, num_steps=num_steps)
        for k, (c, r, d) in enumerate(step_terms(logits, final @ lm_head.T, mask, t2d)):  # (B,T,Ht)x(Ht,V)
            ce[k], corr[k], den[k] = ce[k] + float(c), corr[k] + float(r), den[k] + float(d)
    return {"acc": [round(c / max(d, 1), 4) for c, d in zip(corr, den)],
            "ploss": [round(c / max(d, 1), 4) for c, d in zip(ce, den)], "positions": int(den[0])}


def train_draft(draft, train: list[Captured], val: list[Captured], lm_head: Tensor, *, steps: int,
                num_steps: int = 4, batch_size: int = 32, lr: float = 3e-3, decay: float = 0.8,
                weight_decay: float = 0.0, eval_every: int = 100, seed: int = 0, progress: bool = False) -> list[dict]:
    """Train `draft` in place (embed_tokens frozen) with TTT over `num_steps`; returns the training-log records."""
    torch.manual_seed(seed)
    draft.embed_tokens.weight.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    batches = length_batches([s.input_ids.numel() for s in train], batch_size, random.Random(seed))
    log, run_loss, t0 = [], [], time.perf_counter()
    meter = bar(total=steps, desc="draft", progress=progress, unit="step", mininterval=2.0)
    for step in range(1, steps + 1):
        draft.train()
        ids, mask, aux, final = _batch([train[i] for i in next(batches)])
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1, steps, lr, warmup=max(1, steps // 20))
        with torch.no_grad():
            target_logits = final @ lm_head.T                # (B, T, Ht) x (Ht, V) -> (B, T, V)
        terms = step_terms(draft.ttt_forward(aux, ids, num_steps=num_steps), target_logits, mask, draft.t2d)
        loss = sum(decay ** k * ce / den.clamp(min=1) for k, (ce, _, den) in enumerate(terms))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        run_loss.append(loss.item())
        if step % eval_every == 0 or step == steps:
            ev = evaluate_draft(draft, val, lm_head, num_steps)
            rec = {"step": step, "epoch": round(step * batch_size / len(train), 2),
                   "train_loss": round(sum(run_loss) / len(run_loss), 4), "val_acc_step0": ev["acc"][0],
                   "val_acc": ev["acc"], "val_ploss": ev["ploss"], "val_positions": ev["positions"],
                   "split": "heldout (in-domain)", "seconds": round(time.perf_counter() - t0, 1),
                   "acc_definition": ACC_DEFINITION}
            log.append(rec)
            run_loss = []
            meter.set_postfix(val_acc0=rec["val_acc_step0"])
        meter.update(1)
    meter.close()
    draft.eval()
    return log
