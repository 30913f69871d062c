"""Draft forward: parity with transformers' Llama components, TTT vs cached chain drafting, variants."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as ml

from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft, _attend, top1
from eagle3lib.model.layers import DraftMLP, RMSNorm, Rotary, apply_rope


def rel_err(a, b):
    return float((a - b).detach().norm() / b.detach().norm().clamp_min(1e-12))


def _cfg(d, **over):
    d = dict(d, **over)
    return DraftConfig.from_dict(d)


def _random_draft(cfg):
    draft = Eagle3Draft(cfg)
    with torch.no_grad():
        for p in draft.parameters():
            p.normal_(0, 0.2)
        for name, p in draft.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name or "fc_norm" in name:
                p.uniform_(0.5, 1.5)
    return draft.eval()


def test_rmsnorm_matches_transformers():
    """RMSNorm equals LlamaRMSNorm (fp32, rel err < 1e-5)."""
    x = torch.randn(2, 5, 32)
    ours, ref = RMSNorm(32, 1e-6), ml.LlamaRMSNorm(32, eps=1e-6)
    w = torch.rand(32) + 0.5
    ours.weight.data.copy_(w), ref.weight.data.copy_(w)
    assert rel_err(ours(x), ref(x)) < 1e-5


@pytest.mark.parametrize("scaling", [
    None,
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
])
def test_rotary_matches_transformers(tiny_cfg_dict, scaling):
    """cos/sin equal LlamaRotaryEmbedding for default, linear, llama3 and yarn scaling."""
    d = dict(tiny_cfg_dict, rope_theta=500000.0, max_position_embeddings=256)
    if scaling:
        d["rope_scaling"] = scaling
    cfg = DraftConfig.from_dict(d)
    hf_cfg = LlamaConfig(hidden_size=32, num_attention_heads=4, head_dim=8, max_position_embeddings=256,
                         rope_theta=500000.0, rope_scaling=dict(scaling) if scaling else None)
    ref = ml.LlamaRotaryEmbedding(hf_cfg)
    pos = torch.arange(0, 200, 3)[None]
    cos_r, sin_r = ref(torch.zeros(1, 1, dtype=torch.float32), pos)
    cos, sin = Rotary(cfg)(pos, torch.float32)
    assert rel_err(cos, cos_r) < 1e-5 and rel_err(sin, sin_r) < 1e-5


def test_rotary_angles_stay_fp32_in_a_bf16_draft(tiny_cfg_dict):
    """Casting the draft to bf16 leaves the RoPE frequencies in fp32 (as HF and the engines compute the angles):
    cos/sin at position 4000 are the fp32 tables rounded once, not tables of rounded frequencies (an angle off by
    up to 2**-9 of itself: radians at positions in the thousands). Moving to the meta device and back keeps working."""
    d = _random_draft(DraftConfig.from_dict(dict(tiny_cfg_dict, rope_theta=500000.0)))
    pos = torch.arange(3990, 4000)[None]
    cos32, sin32 = d.rotary(pos, torch.float32)
    d = d.to(torch.bfloat16)
    assert d.rotary.inv_freq.dtype == torch.float32 and d.fc.weight.dtype == torch.bfloat16
    cos, sin = d.rotary(pos, torch.bfloat16)
    assert torch.equal(cos, cos32.bfloat16()) and torch.equal(sin, sin32.bfloat16())
    inv = d.rotary.inv_freq                     # the bug this guards against: angles of rounded frequencies
    assert float((pos.float()[..., None] * (inv.bfloat16().float() - inv)).abs().max()) > 0.01   # radians
    assert d.to("meta").rotary.inv_freq.dtype == torch.float32


def test_attention_gqa_matches_transformers(tiny_cfg_dict):
    """Our q/k/v + RoPE + causal GQA attention equals LlamaAttention with the same weights."""
    cfg = DraftConfig.from_dict(tiny_cfg_dict)
    hf_cfg = LlamaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         intermediate_size=64, attn_implementation="eager")
    ref = ml.LlamaAttention(hf_cfg, layer_idx=0).eval()
    ours = Eagle3Draft(cfg).midlayer.self_attn
    # our attention reads 2H; feed u = [x, 0] and copy HF weights into the first H input columns
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            w = getattr(ref, name).weight
            getattr(ours, name).weight.zero_()[:, :32] = w
        ours.o_proj.weight.copy_(ref.o_proj.weight)
    x = torch.randn(2, 7, 32)
    pos = torch.arange(7)[None].expand(2, 7)
    cos, sin = Rotary(cfg)(pos, torch.float32)
    mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
    ref_out, _ = ref(x, position_embeddings=(cos, sin), attention_mask=mask)
    q, k, v = ours.qkv(torch.cat([x, torch.zeros_like(x)], -1), cos, sin)
    out = ours.out(_attend(q, k, v, torch.ones(7, 7, dtype=torch.bool).tril()[None, None]))
    assert rel_err(out, ref_out) < 1e-5


def test_mlp_matches_transformers(tiny_cfg_dict):
    """SwiGLU MLP equals LlamaMLP."""
    cfg = DraftConfig.from_dict(tiny_cfg_dict)
    ref = ml.LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=64))
    ours = DraftMLP(cfg)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 4, 32)
    assert rel_err(ours(x), ref(x)) < 1e-5


def test_ttt_step0_matches_manual_math(tiny_cfg_dict):
    """Step 0 equals the EAGLE-3 equations written out by hand (embedding first, residual = fused h)."""
    cfg = DraftConfig.from_dict(tiny_cfg_dict)
    d = _random_draft(cfg)
    B, T = 2, 9
    aux, ids = torch.randn(B, T, 4 * 32), torch.randint(0, 120, (B, T))
    logits = d.ttt_forward(aux, ids, num_steps=1)[0]
    m = d.midlayer
    g = aux @ d.fc.weight.T
    nxt = torch.cat([ids[:, 1:], torch.zeros(B, 1, dtype=torch.long)], 1)
    u = torch.cat([m.input_layernorm(d.embed_tokens(nxt)), m.hidden_norm(g)], -1)
    a = m.self_attn
    cos, sin = d.rotary(torch.arange(T)[None].expand(B, T), torch.float32)
    q = apply_rope((u @ a.q_proj.weight.T).view(B, T, 4, 8).transpose(1, 2), cos, sin)
    k = apply_rope((u @ a.k_proj.weight.T).view(B, T, 2, 8).transpose(1, 2), cos, sin).repeat_interleave(2, 1)
    v = (u @ a.v_proj.weight.T).view(B, T, 2, 8).transpose(1, 2).repeat_interleave(2, 1)
    s = (q @ k.transpose(-1, -2)) / 8 ** 0.5 + torch.full((T, T), float("-inf")).triu(1)
    o = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, 32) @ a.o_proj.weight.T
    h1 = g + o
    h2 = h1 + m.mlp(m.post_attention_layernorm(h1))
    assert rel_err(logits, d.lm_head(d.norm(h2))) < 1e-5


@pytest.mark.parametrize("variant", [{}, {"norm_output": True}, {"norm_before_residual": True},
                                     {"fc_norm": True}, {"norm_before_fc": True}, {"num_hidden_layers": 3},
                                     {"model_type": "qwen3", "attention_bias": True, "num_hidden_layers": 2}])
def test_ttt_equals_cached_chain_drafting(tiny_cfg_dict, variant):
    """TTT (all positions at once) equals incremental chain drafting with the KV cache, step by step."""
    cfg = DraftConfig.from_dict(dict(tiny_cfg_dict, **variant))
    d = _random_draft(cfg)
    T, K = 10, 4
    aux, ids = torch.randn(1, T, 4 * 32), torch.randint(0, 120, (1, T))
    with torch.no_grad():
        ttt = d.ttt_forward(aux, ids, num_steps=K, feed="teacher")
        padded = torch.nn.functional.pad(ids, (0, K + 1))
        for t in (0, 3, T - 1):
            cache = d.new_cache(1, 64)
            logits, h = d.step(aux[:, :t + 1], padded[:, 1:t + 2], torch.arange(t + 1)[None], cache, fuse=True)
            assert rel_err(logits[:, -1], ttt[0][:, t]) < 1e-5
            h = h[:, -1:]
            for k in range(1, K):
                logits, h = d.step(h, padded[:, t + 1 + k:t + 2 + k], torch.tensor([[t + k]]), cache)
                assert rel_err(logits[:, -1], ttt[k][:, t]) < 1e-4, (t, k)


def test_draft_feed_uses_own_tokens(tiny_cfg_dict):
    """feed='draft' at step 1 equals teacher feed with token t+2 replaced by the draft's own mapped guess."""
    cfg = DraftConfig.from_dict(tiny_cfg_dict)
    d = _random_draft(cfg)
    d.d2t.copy_(torch.arange(40) * 2)                        # draft id i -> target id 3i
    assert torch.equal(d.to_target_ids(torch.tensor([5])), torch.tensor([15]))
    aux, ids = torch.randn(1, 8, 128), torch.randint(0, 120, (1, 8))
    with torch.no_grad():
        teach = d.ttt_forward(aux, ids, 2)
        own = d.ttt_forward(aux, ids, 2, feed="draft")
        assert torch.equal(teach[0], own[0])
        guess = d.to_target_ids(own[0].argmax(-1))           # (1, 8) target ids guessed for token t+2
        for t in range(5):
            forced = ids.clone()
            forced[0, t + 2] = guess[0, t]
            ref = d.ttt_forward(aux, forced, 2)
            assert rel_err(own[1][:, t], ref[1][:, t]) < 1e-5, t


def test_fc_width_mismatch_is_explained(tiny_cfg_dict):
    """Feeding 3 slots to a 4-slot draft says how many slots arrived."""
    d = Eagle3Draft(DraftConfig.from_dict(tiny_cfg_dict))
    with pytest.raises(ValueError, match="3 slots"):
        d.fuse(torch.randn(1, 4, 96))


def test_bf16_forward_runs_and_is_close(tiny_cfg_dict):
    """The forward runs in bf16 and stays close to fp32."""
    d = _random_draft(DraftConfig.from_dict(tiny_cfg_dict))
    aux, ids = torch.randn(1, 6, 128), torch.randint(0, 120, (1, 6))
    with torch.no_grad():
        ref = d.ttt_forward(aux, ids, 2)
        out = d.to(torch.bfloat16).ttt_forward(aux.bfloat16(), ids, 2)
    assert out[0].dtype == torch.bfloat16
    assert rel_err(out[1].float(), ref[1]) < 0.05


@pytest.mark.parametrize("V", [32000, 4096, 384, 1000, 96])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top1_equals_argmax_with_ties(V, dtype):
    """Blockwise top1 returns exactly argmax's first index of the max, ties across and within blocks included."""
    x = torch.randn(3, 7, V).to(dtype)
    big = float(x.float().max()) + 1
    x[0, 0, [V - 1, 3]] = big                       # tie across blocks: the first one wins
    x[0, 1, [5, 6]] = big                           # tie inside a block
    x[1, 2] = float("-inf")                         # all equal: index 0
    x[2, 3, V - 1] = big                            # the very last column
    assert torch.equal(top1(x), x.argmax(-1))


def test_ttt_top1_ids_equal_logits_argmax(tiny_cfg_dict):
    """return_logits=False gives argmax of the logits at every step (draft vocab large enough for blocks)."""
    d = _random_draft(DraftConfig.from_dict(dict(tiny_cfg_dict, draft_vocab_size=512, vocab_size=600)))
    aux, ids = torch.randn(2, 9, 128), torch.randint(0, 600, (2, 9))
    with torch.no_grad():
        for feed in ("teacher", "draft"):
            logits = d.ttt_forward(aux, ids, 3, feed=feed)
            top = d.ttt_forward(aux, ids, 3, feed=feed, return_logits=False)
            assert all(torch.equal(t, lg.argmax(-1)) for t, lg in zip(top, logits))
