"""Benchmarks 1 and 2 (issue 9): draft forward throughput vs the machine's matmul peak, and vs a reference.

1. Replay-style forward (T = 512 tokens, K = 3 TTT steps, 32k draft vocab) at Ht = 1024, 2048, 4096:
   tokens/s and achieved FLOP/s / measured matmul peak (same run, same dtype).
2. The same forward against a straightforward reference written the way EAGLE's code does it (every step
   recomputed from scratch without a cache, separate q/k/v matmuls, explicit mask matrices): speedup and
   max |diff| of the logits.
Usage: .venv/bin/python benchmarks/bench_forward.py [--sizes 1024,2048,4096] [--dtype float32|bfloat16]
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from _common import finish, timeit
from eagle3lib.config import DraftConfig
from eagle3lib.draft import Eagle3Draft, apply_rope


def make_cfg(h: int, vd: int = 32000, k: int = 3) -> DraftConfig:
    nh = h // 128
    return DraftConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": h, "intermediate_size": int(h * 3.5),
        "num_attention_heads": nh, "num_key_value_heads": max(1, nh // 4), "head_dim": 128,
        "vocab_size": vd, "draft_vocab_size": vd, "rope_theta": 500000.0, "max_position_embeddings": 4096,
        "num_aux_hidden_states": k})


def forward_flops(cfg: DraftConfig, T: int, K: int) -> float:
    """Multiply-adds x 2 of ttt_forward: fc once, then per step projections, attention, MLP, lm_head."""
    H, I, Vd = cfg.hidden_size, cfg.intermediate_size, cfg.draft_vocab_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    fc = 2 * T * cfg.fc_in_features * H
    per_step = 2 * T * (2 * H * (q + 2 * kv) + q * H + 3 * H * I + H * Vd)
    attn = sum(2 * 2 * T * (T / 2 + k) * q for k in range(K))      # causal half of QK^T and PV, + diagonal keys
    return fc + K * per_step + attn


def matmul_peak(dtype, n: int = 4096) -> float:
    """Best FLOP/s of a few large GEMMs of the shapes the forward runs."""
    best = 0.0
    for m, kk, nn in ((512, n, int(n * 3.5)), (n, n, n), (512, n, 32000)):
        a, b = torch.randn(m, kk, dtype=dtype), torch.randn(kk, nn, dtype=dtype)
        t = timeit(lambda: a @ b, repeats=3)
        best = max(best, 2 * m * kk * nn / t)
    return best


@torch.inference_mode()
def reference_ttt(d: Eagle3Draft, aux: torch.Tensor, ids: torch.Tensor, K: int) -> list[torch.Tensor]:
    """EAGLE-style: recompute every step from scratch (no cache), q/k/v separately, explicit masks."""
    m, a = d.midlayer, d.midlayer.self_attn
    B, T = ids.shape
    outs = []
    for last in range(K):
        h = aux @ d.fc.weight.T
        ks, vs = [], []
        for step in range(last + 1):
            nxt = F.pad(ids, (0, K + 1))[:, 1 + step:T + 1 + step]
            u = torch.cat([m.input_layernorm(d.embed_tokens(nxt)), m.hidden_norm(h)], -1)
            cos, sin = d.rotary(torch.arange(T)[None] + step, h.dtype)
            q = apply_rope((u @ a.q_proj.weight.T).view(B, T, a.nh, a.hd).transpose(1, 2), cos, sin)
            k = apply_rope((u @ a.k_proj.weight.T).view(B, T, a.nkv, a.hd).transpose(1, 2), cos, sin)
            v = (u @ a.v_proj.weight.T).view(B, T, a.nkv, a.hd).transpose(1, 2)
            ks.append(k.repeat_interleave(a.nh // a.nkv, 1))
            vs.append(v.repeat_interleave(a.nh // a.nkv, 1))
            keys, vals = torch.cat(ks, 2), torch.cat(vs, 2)                      # (B, nh, T*(step+1), hd)
            mask = torch.full((T, T * (step + 1)), float("-inf"))
            mask[:, :T] = torch.full((T, T), float("-inf")).triu(1)
            for j in range(1, step + 1):
                mask[:, j * T:(j + 1) * T] = torch.full((T, T), float("-inf")).fill_diagonal_(0)
            p = ((q @ keys.transpose(-1, -2)) / math.sqrt(a.hd) + mask).softmax(-1)
            o = (p @ vals).transpose(1, 2).reshape(B, T, -1) @ a.o_proj.weight.T
            h1 = h + o
            h = h1 + m.mlp(m.post_attention_layernorm(h1))
        outs.append(d.lm_head(d.norm(h)))
    return outs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    T, K = args.tokens, args.steps
    peak = matmul_peak(dtype)
    rows = []
    torch.manual_seed(0)
    for h in (int(s) for s in args.sizes.split(",")):
        cfg = make_cfg(h)
        with torch.device("meta"):
            d = Eagle3Draft(cfg)
        d = d.to_empty(device="cpu")
        with torch.no_grad():
            for p in d.parameters():
                p.normal_(0, 0.02)
            for n, p in d.named_parameters():
                if "norm" in n:
                    p.fill_(1.0)
        d.rotary = type(d.rotary)(cfg)
        d = d.to(dtype).eval()
        aux = torch.randn(1, T, cfg.fc_in_features, dtype=dtype)
        ids = torch.randint(0, cfg.vocab_size, (1, T))
        with torch.inference_mode():
            t_ours = timeit(lambda: d.ttt_forward(aux, ids, K, return_logits=False), repeats=args.repeats)
            ours = d.ttt_forward(aux, ids, K)
        t_ref = timeit(lambda: reference_ttt(d, aux, ids, K), repeats=max(1, args.repeats - 1))
        ref = reference_ttt(d, aux, ids, K)
        diff = max(float((x.float() - y.float()).abs().max()) for x, y in zip(ours, ref))
        fl = forward_flops(cfg, T, K)
        rows.append({"Ht": h, "dtype": args.dtype, "tokens/s": T / t_ours, "GFLOP/s": fl / t_ours / 1e9,
                     "peak GFLOP/s": peak / 1e9, "of peak": fl / t_ours / peak, "ref s": t_ref, "ours s": t_ours,
                     "speedup vs ref": t_ref / t_ours, "max |diff|": diff})
        del d
    big = rows[-1]
    finish("forward", rows, {"T": T, "K": K, "draft_vocab": 32000, "goal": "of peak >= 0.5 at Ht=4096",
                             "of_peak_at_largest": big["of peak"], "speedup_at_largest": big["speedup vs ref"]})


if __name__ == "__main__":
    main()
