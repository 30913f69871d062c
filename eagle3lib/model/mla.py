"""`MlaAttention`: DeepSeek-V2 multi-latent attention as the EAGLE-3 draft layer's attention (MLA drafts).

SGLang serves these drafts (Kimi-K2.x `kimi-k2.5-eagle3-mla`, EAGLE-3.1 `kimi-k2.6-eagle3.1-mla`) as
`Eagle3DeepseekV2ForCausalLM` (python/sglang/srt/models/kimi_k25_eagle3.py): the EAGLE-3 layer of draft.py with
its q/k/v projections replaced by DeepSeek-V2 MLA reading the 2H-wide u = [input_layernorm(emb), hidden_norm(h)]:

    q         = q_b_proj(q_a_layernorm(q_a_proj(u)))       (q_proj(u) when q_lora_rank is null)
                -> nh heads of [q_nope (qk_nope_head_dim), q_pe (qk_rope_head_dim)]
    [c, k_pe] = kv_a_proj_with_mqa(u)                       latent c (kv_lora_rank), k_pe: ONE head shared by all
    [k_nope, v] = kv_b_proj(kv_a_layernorm(c))              nh heads of qk_nope_head_dim + v_head_dim
    q = [q_nope, rope(q_pe)], k = [k_nope, rope(k_pe)]      RoPE on the last qk_rope_head_dim dims only
    out = o_proj(softmax(q k^T * softmax_scale) v)          softmax_scale = qk_head_dim**-0.5 * mscale_all_dim**2

This is the expanded ("MHA") form of the attention; SGLang caches the latent and absorbs kv_b_proj into q and
the output (its w_kc / w_vc split after loading), which gives the same scores: an engine detail, so the
checkpoint's tensors and names are kept as they are. RoPE pairs are interleaved (x0, x1), (x2, x3), ... as SGLang's
`is_neox_style=False` (config `rope_interleave`, default true) or split halves (x_i, x_{i+d/2}) when false.
The draft's `Rotary` gives cos/sin of width qk_rope_head_dim with the DeepSeek YaRN magnitude (`MlaConfig`).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .config import DraftConfig


def rope_pairs(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    """RoPE on x (B, heads, T, d) with cos/sin (B, T, d) in the cat(freqs, freqs) layout: pair i (angle i) is
    (x_2i, x_2i+1) when interleaved (GPT-J / DeepSeek), (x_i, x_i+d/2) otherwise (NeoX); layout is kept."""
    half = x.shape[-1] // 2
    c, s = cos[:, None, :, :half], sin[:, None, :, :half]          # (B, T, d) -> (B, 1, T, d/2)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]                        # (B, h, T, d) -> 2 x (B, h, T, d/2)
        return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)   # -> (B, h, T, d)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)   # 2 x (B, h, T, d/2) -> (B, h, T, d)


class MlaAttention(nn.Module):
    """Multi-latent attention whose q / kv down-projections read `in_features` (2H in the EAGLE-3 layer).

    Same interface as draft.DraftAttention: `qkv(u, cos, sin)` -> q, k (B, nh, T, hd) and v (B, nh, T, vd);
    `out(o)` (B, nh, T, vd) -> (B, T, H); attributes nh, nkv (= nh), hd (qk_head_dim), vd (v_head_dim), scale.
    `norm(dim, eps)` builds the latent RMSNorms (q_a_layernorm, kv_a_layernorm): the draft's RMSNorm.
    """

    def __init__(self, cfg: DraftConfig, in_features: int, norm: Callable[[int, float], nn.Module]):
        super().__init__()
        m = cfg.mla
        if m is None:
            raise ValueError(f"{cfg.source}: MlaAttention needs an MLA config (cfg.mla is None)")
        nh, H = cfg.num_attention_heads, cfg.hidden_size
        self.nh = self.nkv = nh
        self.hd, self.vd, self.scale = m.qk_head_dim, m.v_head_dim, m.softmax_scale
        self.nope, self.rope, self.kv_lora = m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank
        self.q_lora, self.interleaved = m.q_lora_rank, m.rope_interleave
        if m.q_lora_rank is None:
            self.q_proj = nn.Linear(in_features, nh * self.hd, bias=False)
        else:
            self.q_a_proj = nn.Linear(in_features, m.q_lora_rank, bias=False)
            self.q_a_layernorm = norm(m.q_lora_rank, cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(m.q_lora_rank, nh * self.hd, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(in_features, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = norm(m.kv_lora_rank, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank, nh * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        self.o_proj = nn.Linear(nh * m.v_head_dim, H, bias=False)

    def qkv(self, u: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """RoPE'd q, k (B, nh, T, qk_head_dim) and v (B, nh, T, v_head_dim) from u (B, T, 2H); cos/sin
        (B, T, qk_rope_head_dim)."""
        B, T, _ = u.shape
        if self.q_lora is None:
            q = self.q_proj(u)                                          # (B, T, 2H) -> (B, T, nh*hd)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(u)))     # (B, T, 2H) -> (B, T, rq) -> (B, T, nh*hd)
        q = q.view(B, T, self.nh, self.hd).transpose(1, 2)              # (B, T, nh*hd) -> (B, nh, T, hd)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)          # (B, nh, T, dn), (B, nh, T, dr)
        ckv = self.kv_a_proj_with_mqa(u)                                # (B, T, 2H) -> (B, T, rkv + dr)
        latent, k_pe = ckv.split([self.kv_lora, self.rope], dim=-1)     # (B, T, rkv), (B, T, dr)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent))                # (B, T, rkv) -> (B, T, nh*(dn+vd))
        kv = kv.view(B, T, self.nh, self.nope + self.vd).transpose(1, 2)   # -> (B, nh, T, dn+vd)
        k_nope, v = kv.split([self.nope, self.vd], dim=-1)              # (B, nh, T, dn), (B, nh, T, vd)
        q_pe = rope_pairs(q_pe, cos, sin, self.interleaved)
        k_pe = rope_pairs(k_pe[:, None], cos, sin, self.interleaved)    # (B, T, dr) -> (B, 1, T, dr)
        q = torch.cat([q_nope, q_pe], dim=-1)                           # -> (B, nh, T, hd)
        k = torch.cat([k_nope, k_pe.expand(-1, self.nh, -1, -1)], dim=-1)   # (B, 1, T, dr) shared -> (B, nh, T, hd)
        return q, k, v

    def out(self, o: Tensor) -> Tensor:
        B, _, T, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * self.vd))   # (B, nh, T, vd) -> (B, T, H)
