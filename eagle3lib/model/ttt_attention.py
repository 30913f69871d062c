"""TTT attention with memory linear in T: causal attention over the step-0 keys plus each query's own
"diagonal" keys (TTT steps 1..k at its position), one exact softmax over both, through SDPA.

Step 0 is square causal SDPA (no mask tensor). For steps >= 1 the j diagonal keys join the SAME softmax as j
"null" keys put in front of the context: null key i is zero in the head dims and 1 in an extra dim hd+i, and the
query carries its (unscaled) dot product with diagonal key i in that extra dim, so SDPA gives null key i exactly
the diagonal key's score; its value, a one in output dim vd+i (vd: the value width, hd but for MLA), makes SDPA
return that key's softmax weight p_i there, and the diagonal value is added as p_i * v_i. Queries run in blocks
whose (block x key prefix) mask stays under `block_elements`, so no (T, T) matrix is ever built and keys past a
block's last position are never read.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

BLOCK_ELEMENTS = 1 << 24          # query rows x keys of one SDPA call of chain_attention (its mask is this big)


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """q (B, nh, T, hd) over k (B, nkv, T, hd) / v (B, nkv, T, vd), query t seeing keys <= t, scores x scale
    (default hd**-0.5): (B, nh, T, vd)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def chain_attention(q: Tensor, positions: Tensor, k: Tensor, v: Tensor, diag: list[tuple[Tensor, Tensor]],
                    block_elements: int | None = None, scale: float | None = None) -> Tensor:
    """Queries q (B, nh, n, hd) at key positions (B, n) over the context k (B, nkv, S, hd) / v (B, nkv, S, vd)
    (a query at position t sees keys 0..t) plus diagonal keys [(kd (B, nkv, n, hd), vd (B, nkv, n, vd))] that
    query row r sees only in row r. Returns (B, nh, n, vd). Padding rows may hold any position in 0..S-1; their
    output means nothing. block_elements: query rows x keys per SDPA call (default BLOCK_ELEMENTS); scale: of the
    scores (default hd**-0.5)."""
    B, nh, n, hd = q.shape
    nkv, S, j, dv = k.shape[1], k.shape[2], len(diag), v.shape[-1]
    rep = nh // nkv
    extra = -(-j // 8) * 8                                   # extra dims, a multiple of 8 (fused kernels like it)
    nulls = q.new_zeros(B, nkv, j, hd + extra)               # null key i: one in dim hd + i
    nulls[:, :, torch.arange(j), hd + torch.arange(j)] = 1
    nulls_v = q.new_zeros(B, nkv, j, dv + extra)             # its value: one in output dim dv + i
    nulls_v[:, :, torch.arange(j), dv + torch.arange(j)] = 1
    kx = torch.cat([nulls, F.pad(k, (0, extra))], dim=2)     # (B, nkv, S, hd) -> (B, nkv, j + S, hd + extra)
    vx = torch.cat([nulls_v, F.pad(v, (0, extra))], dim=2)   # (B, nkv, S, vd) -> (B, nkv, j + S, vd + extra)
    qg = q.unflatten(1, (nkv, rep))                          # (B, nh, n, hd) -> (B, nkv, rep, n, hd)
    dots = [(qg * kd[:, :, None]).sum(-1).flatten(1, 2) for kd, _ in diag]   # j x (B, nkv, rep, n) -> (B, nh, n)
    out = q.new_empty(B, nh, n, dv)
    rows = max(1, min(n, (block_elements or BLOCK_ELEMENTS) // (j + S)))
    for a in range(0, n, rows):
        b = min(n, a + rows)
        pos = positions[:, a:b]                              # (B, bq)
        e = int(pos.max()) + 1                               # keys past the block's last position: never seen
        parts = [q[:, :, a:b]] + [d[:, :, a:b, None] for d in dots]
        if extra > j:
            parts.append(q.new_zeros(B, nh, b - a, extra - j))
        qb = torch.cat(parts, dim=-1)                        # (B, nh, bq, hd) -> (B, nh, bq, hd + extra)
        seen = torch.arange(e, device=pos.device)[None, None, :] <= pos[:, :, None]      # (B, bq, e)
        mask = torch.cat([seen.new_ones(B, b - a, j), seen], dim=-1)[:, None]           # (B, 1, bq, j + e)
        ob = F.scaled_dot_product_attention(qb, kx[:, :, :j + e], vx[:, :, :j + e], attn_mask=mask,
                                            scale=1.0 / math.sqrt(hd) if scale is None else scale,
                                            enable_gqa=rep > 1)   # (B, nh, bq, vd + extra)
        o = ob[..., :dv].unflatten(1, (nkv, rep))            # (B, nh, bq, vd) -> (B, nkv, rep, bq, vd)
        for i, (_, vd) in enumerate(diag):
            p = ob[..., dv + i, None].unflatten(1, (nkv, rep))   # (B, nh, bq, 1) -> (B, nkv, rep, bq, 1)
            o = o + p * vd[:, :, None, a:b]                  # (B, nkv, rep, bq, 1) * (B, nkv, 1, bq, vd)
        out[:, :, a:b] = o.flatten(1, 2)                     # (B, nkv, rep, bq, vd) -> (B, nh, bq, vd)
    return out
