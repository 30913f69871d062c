"""ttt_forward with memory linear in T (SDPA + null keys for the diagonal, row chunks, only-scored rows) gives the
logits of the former implementation, kept here as the reference: full (T, T) scores, diagonal keys concatenated."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from eagle3lib.model import draft as D
from eagle3lib.model import ttt_attention as A
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft, top1


def reference_attend(q, k, v, allowed, diag, scale=None):
    """The former draft._attend: (B, nh, T, S) scores materialised, diagonal scores concatenated, one softmax."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = ((q @ k.transpose(-1, -2)) * scale).masked_fill(~allowed, float("-inf"))   # (B, nh, T, S)
    dk = [kd.repeat_interleave(rep, dim=1) for kd, _ in diag]
    dv = [vd.repeat_interleave(rep, dim=1) for _, vd in diag]
    d_scores = [(q * kd).sum(-1, keepdim=True) * scale for kd in dk]                 # j x (B, nh, T, 1)
    probs = torch.cat([scores, *d_scores], dim=-1).float().softmax(-1).to(q.dtype)   # (B, nh, T, S + j)
    S = k.shape[2]
    out = probs[..., :S] @ v
    for j, vd in enumerate(dv):
        out = out + probs[..., S + j, None] * vd
    return out


def reference_ttt(d: Eagle3Draft, aux, input_ids, num_steps, feed="teacher"):
    """The former Eagle3Draft.ttt_forward (logits of every step at every position), over every decoder layer: each
    layer keeps its own step-0 keys and diagonal keys, the last layer's output is fed back."""
    B, T = input_ids.shape
    h = d.fuse(aux)
    pos = torch.arange(T)[None].expand(B, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    padded = F.pad(input_ids, (0, num_steps + 1))
    layers = d.decoder_layers
    outs, diag, k0, v0 = [], [[] for _ in layers], [None] * len(layers), [None] * len(layers)
    tokens = padded[:, 1:T + 1]
    for step in range(num_steps):
        if step > 0:
            tokens = padded[:, 1 + step:T + 1 + step] if feed == "teacher" else d.to_target_ids(outs[-1].argmax(-1))
        cos, sin = d.rotary(pos + step, h.dtype)
        emb, out = d.embed_tokens(tokens), h
        for i, layer in enumerate(layers):
            u, residual = layer.inputs(emb, out)
            q, k, v = layer.self_attn.qkv(u, cos, sin)
            if step == 0:
                k0[i], v0[i] = k, v
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, enable_gqa=q.shape[1] != k.shape[1])
            else:
                diag[i].append((k, v))
                o = reference_attend(q, k0[i], v0[i], causal, diag[i])
            out = layer.finish(layer.self_attn.out(o), residual)
        logits, h = d.head(out)
        outs.append(logits)
    return outs


def random_draft(cfg_dict, **over) -> Eagle3Draft:
    d = Eagle3Draft(DraftConfig.from_dict(dict(cfg_dict, **over)))
    with torch.no_grad():
        for name, p in d.named_parameters():
            p.uniform_(0.5, 1.5) if ("norm" in name) else p.normal_(0, 0.2)
        d.d2t.copy_(torch.arange(40))                        # draft id i -> target id 2i
    return d.eval()


@pytest.mark.parametrize("over", [{}, {"num_key_value_heads": 4}, {"num_key_value_heads": 1},
                                  {"norm_output": True}, {"norm_before_residual": True}, {"fc_norm": True},
                                  {"num_hidden_layers": 2}, {"num_hidden_layers": 3, "norm_before_residual": True,
                                                             "norm_output": True},
                                  {"model_type": "qwen3", "attention_bias": True, "num_hidden_layers": 2}])
@pytest.mark.parametrize("feed", ["teacher", "draft"])
def test_ttt_forward_equals_the_former_implementation(tiny_cfg_dict, monkeypatch, over, feed):
    """Every step's logits within 1e-5 x their scale (fp32) of the materialised-scores implementation, with query
    blocks and row chunks far smaller than T so that every block/chunk boundary case runs; top-1 ids are their
    argmax."""
    d = random_draft(tiny_cfg_dict, **over)
    B, T, K = 3, 23, 4
    aux, ids = torch.randn(B, T, 4 * 32), torch.randint(0, 120, (B, T))
    with torch.inference_mode():
        ref = reference_ttt(d, aux, ids, K, feed)
        full = d.ttt_forward(aux, ids, K, feed=feed)
        monkeypatch.setattr(A, "BLOCK_ELEMENTS", 7 * (T + 3))            # blocks of 7 query rows
        monkeypatch.setattr(D, "ROW_ELEMENTS", 5 * 64)                   # chunks of 5 rows (I = 64 is widest)
        small = d.ttt_forward(aux, ids, K, feed=feed)
        top = d.ttt_forward(aux, ids, K, feed=feed, return_logits=False)
    for r, a, b, t in zip(ref, full, small, top):
        tol = 1e-5 * max(1.0, float(r.abs().max()))                   # fp32 rounding grows with depth and scale
        assert float((a - r).abs().max()) <= tol and float((b - r).abs().max()) <= tol
        assert torch.equal(t, b.argmax(-1))


def test_chain_attention_equals_materialised_softmax():
    """chain_attention (null keys + SDPA, blocks of 4 rows) equals one softmax over context and diagonal keys."""
    B, nh, nkv, T = 2, 6, 2, 19
    q = torch.randn(B, nh, T, 8) * 3
    k, v = torch.randn(B, nkv, T, 8) * 3, torch.randn(B, nkv, T, 8)
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    pos = torch.arange(T)[None].expand(B, T)
    for j in (0, 1, 3):
        diag = [(torch.randn(B, nkv, T, 8) * 3, torch.randn(B, nkv, T, 8)) for _ in range(j)]
        ref = reference_attend(q, k, v, causal, diag)
        assert float((A.chain_attention(q, pos, k, v, diag, block_elements=4 * (T + 8)) - ref).abs().max()) <= 1e-5
    assert float((A.causal_attention(q, k, v) - reference_attend(q, k, v, causal, [])).abs().max()) <= 1e-5


def test_chain_attention_with_mla_head_dims_and_scale():
    """Value width != key width (MLA: qk_head_dim 12, v_head_dim 5) and a given softmax scale (YaRN mscale)."""
    B, nh, T, scale = 2, 4, 13, 0.37
    q, k, v = torch.randn(B, nh, T, 12) * 2, torch.randn(B, nh, T, 12) * 2, torch.randn(B, nh, T, 5)
    causal = torch.ones(T, T, dtype=torch.bool).tril()[None, None]
    pos = torch.arange(T)[None].expand(B, T)
    for j in (0, 2):
        diag = [(torch.randn(B, nh, T, 12) * 2, torch.randn(B, nh, T, 5)) for _ in range(j)]
        ref = reference_attend(q, k, v, causal, diag, scale)
        out = A.chain_attention(q, pos, k, v, diag, block_elements=3 * (T + 8), scale=scale)
        assert out.shape == (B, nh, T, 5) and float((out - ref).abs().max()) <= 1e-5
    ref = reference_attend(q, k, v, causal, [], scale)
    assert float((A.causal_attention(q, k, v, scale) - ref).abs().max()) <= 1e-5


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("feed", ["teacher", "draft"])
def test_only_scored_outputs_are_computed_and_equal(tiny_cfg_dict, monkeypatch, feed, layers):
    """With `scored`, the used outputs equal the full forward's; the lm_head runs only there (feed="draft": also
    where the next step eats the top-1), the rest is NaN logits / id -1, including every position after the last
    used one and a last step nobody uses."""
    d = random_draft(tiny_cfg_dict, num_hidden_layers=layers)
    B, T, K = 2, 21, 3
    aux, ids = torch.randn(B, T, 4 * 32), torch.randint(0, 120, (B, T))
    scored = torch.rand(K, B, T) < 0.4
    scored[:, 1, 15:] = False                                  # sample 1: nothing used after position 14
    scored[2, 0] = False                                       # sample 0: step 2 unused
    monkeypatch.setattr(A, "BLOCK_ELEMENTS", 5 * (T + 8))
    monkeypatch.setattr(D, "ROW_ELEMENTS", 4 * 64)
    with torch.inference_mode():
        full = d.ttt_forward(aux, ids, K, feed=feed)
        part = d.ttt_forward(aux, ids, K, feed=feed, scored=scored)
        part_ids = d.ttt_forward(aux, ids, K, feed=feed, scored=scored, return_logits=False)
    later = scored.flip(0).cumsum(0).flip(0) > 0              # (K, B, T): some step >= k used
    for k in range(K):
        want = scored[k] | (later[k + 1] if (feed == "draft" and k + 1 < K) else False)
        done = ~part[k].isnan().all(-1)                        # (B, T) positions whose lm_head ran
        assert torch.equal(done, want) and torch.equal(part_ids[k] >= 0, want)
        assert float((part[k][want] - full[k][want]).abs().max()) <= 1e-5
        assert torch.equal(part_ids[k][want], top1(full[k])[want])
    assert not bool(done[1, 15:].any()) and not bool((part_ids[2][0] >= 0).any())
    with torch.inference_mode():                               # batch of one: the rows are laid out as views
        one = d.ttt_forward(aux[1:], ids[1:], K, feed=feed, scored=scored[:, 1:])
    for k in range(K):
        s = scored[k, 1:]
        assert float((one[k][s] - full[k][1:][s]).abs().max()) <= 1e-5
    with pytest.raises(ValueError, match="scored must be"):
        d.ttt_forward(aux, ids, K, scored=scored[:2])


@pytest.mark.parametrize("over", [{}, {"num_hidden_layers": 2, "norm_output": True}])
def test_gradients_equal_the_former_implementation(tiny_cfg_dict, over):
    """Training backpropagates through the row buffers (every layer's): parameter gradients equal the reference's."""
    d = random_draft(tiny_cfg_dict, **over)
    aux, ids = torch.randn(2, 11, 4 * 32), torch.randint(0, 120, (2, 11))

    def grads(fn):
        d.zero_grad()
        sum(x.square().mean() for x in fn()).backward()
        return {n: p.grad.clone() for n, p in d.named_parameters() if p.grad is not None}
    ours, ref = grads(lambda: d.ttt_forward(aux, ids, 3)), grads(lambda: reference_ttt(d, aux, ids, 3))
    assert ours.keys() == ref.keys() and len(ours) > 10
    assert max(float((ours[n] - ref[n]).abs().max()) for n in ref) <= 1e-5
