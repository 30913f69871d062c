"""MLA drafts (SGLang `Eagle3DeepseekV2ForCausalLM`, Kimi-K2.x) against a reference built from the engine's math.

SGLang's MLA draft cannot run on CPU, so the reference below re-writes the forward of
python/sglang/srt/models/kimi_k25_eagle3.py (`Eagle3MLAModel` / `Eagle3MLADecoderLayer`, sgl-project/sglang) on
transformers' DeepSeek-V3 blocks: `DeepseekV3Attention` (its q / kv down-projections replaced by 2H-input ones, as
SGLang replaces `fused_qkv_a_proj_with_mqa`), `DeepseekV3RotaryEmbedding` (YaRN with mscale / mscale_all_dim),
`DeepseekV3RMSNorm`, `DeepseekV3MLP`, with a DeepseekV3Config of tiny sizes and the same weights copied in by
name. The EAGLE-3 parts follow SGLang's order: per-slot fc_norm, fc, residual = h, u = [input_layernorm(emb),
hidden_norm(h)], the fused add-norms, and aux = post-norm state under norm_output, pre-norm otherwise. TTT step k
runs the attention over the concatenated rows of steps 0..k with SpecForge's mask (step-0 keys <= t plus the
query's own chain keys), so the HF attention sees every key the draft's ttt_forward sees.
"""
from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as dv3

from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.model.mla import MlaAttention, rope_pairs

H, NH, V, VD, HT, K_AUX = 32, 4, 120, 40, 24, 3
YARN = {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.707, "beta_fast": 32.0,
        "beta_slow": 1.0, "original_max_position_embeddings": 16}


def rel_err(a, b):
    return float((a - b).detach().norm() / b.detach().norm().clamp_min(1e-12))


def mla_dict(q_lora=16, interleave=True, scaling=None, fc_norm=False, norm_output=False):
    d = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": H,
         "intermediate_size": 64, "num_attention_heads": NH, "num_key_value_heads": NH, "vocab_size": V,
         "draft_vocab_size": VD, "target_hidden_size": HT, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "max_position_embeddings": 64, "num_hidden_layers": 1, "q_lora_rank": q_lora, "kv_lora_rank": 12,
         "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 6, "rope_interleave": interleave,
         "fc_norm": fc_norm, "norm_output": norm_output,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": True}}
    if scaling:
        d["rope_scaling"] = dict(scaling)
    return d


def random_draft(cfg: DraftConfig) -> Eagle3Draft:
    d = Eagle3Draft(cfg)
    with torch.no_grad():
        for name, p in d.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.25)
        d.d2t.copy_(torch.arange(VD) * 2)                 # draft id i -> target id 3i
    return d.eval()


def hf_config(raw: dict, layers: int = 1) -> DeepseekV3Config:
    """A tiny DeepseekV3Config with the draft config's sizes and RoPE; its first `layers` layers dense (MLP)."""
    rope = {"rope_type": "default", "rope_theta": raw["rope_theta"]}
    if raw.get("rope_scaling"):
        rope = {**raw["rope_scaling"], "rope_theta": raw["rope_theta"]}
    hf = DeepseekV3Config(
        hidden_size=H, intermediate_size=raw["intermediate_size"], num_attention_heads=NH,
        num_key_value_heads=NH, q_lora_rank=raw["q_lora_rank"], kv_lora_rank=raw["kv_lora_rank"],
        qk_rope_head_dim=raw["qk_rope_head_dim"], qk_nope_head_dim=raw["qk_nope_head_dim"],
        v_head_dim=raw["v_head_dim"], rope_parameters=rope, rope_interleave=raw["rope_interleave"],
        max_position_embeddings=raw["max_position_embeddings"], rms_norm_eps=raw["rms_norm_eps"],
        vocab_size=V, num_hidden_layers=layers, first_k_dense_replace=layers)
    hf._attn_implementation = "eager"
    return hf


def ttt_mask(T: int, k: int) -> torch.Tensor:
    """Additive mask (1, 1, (k+1)T, (k+1)T) over the rows of TTT steps 0..k (step-major): a step-j query at t sees
    the step-0 keys <= t and its own chain's keys of steps 1..j (SpecForge's TTT mask)."""
    t = torch.arange(T)
    seen = torch.zeros((k + 1) * T, (k + 1) * T, dtype=torch.bool)
    for j in range(k + 1):
        seen[j * T:(j + 1) * T, :T] = t[None, :] <= t[:, None]          # step-0 keys <= t
        for i in range(1, j + 1):
            seen[j * T + t, i * T + t] = True                           # own chain's step-i key
    return torch.zeros(seen.shape).masked_fill(~seen, float("-inf"))[None, None]


class SglangMlaDraft(nn.Module):
    """kimi_k25_eagle3's Eagle3MLAModel + lm_head, on transformers' DeepSeek-V3 blocks (see the module docstring)."""

    def __init__(self, raw: dict):
        super().__init__()
        hf = hf_config(raw)
        eps, self.norm_output = raw["rms_norm_eps"], raw["norm_output"]
        self.embed_tokens = nn.Embedding(V, H)
        self.fc_norm = nn.ModuleList(dv3.DeepseekV3RMSNorm(HT, eps) for _ in range(K_AUX)) if raw["fc_norm"] \
            else None
        self.fc = nn.Linear(K_AUX * HT, H, bias=False)
        self.input_layernorm, self.hidden_norm = dv3.DeepseekV3RMSNorm(H, eps), dv3.DeepseekV3RMSNorm(H, eps)
        self.post_attention_layernorm, self.norm = dv3.DeepseekV3RMSNorm(H, eps), dv3.DeepseekV3RMSNorm(H, eps)
        self.self_attn = dv3.DeepseekV3Attention(hf, layer_idx=0)
        a = self.self_attn                                 # SGLang: the qkv-down projections read 2H
        if a.q_lora_rank is None:
            a.q_proj = nn.Linear(2 * H, NH * a.qk_head_dim, bias=False)
        else:
            a.q_a_proj = nn.Linear(2 * H, a.q_lora_rank, bias=False)
        a.kv_a_proj_with_mqa = nn.Linear(2 * H, a.kv_lora_rank + a.qk_rope_head_dim, bias=False)
        self.mlp = dv3.DeepseekV3MLP(hf)
        self.rotary = dv3.DeepseekV3RotaryEmbedding(hf)
        self.lm_head = nn.Linear(H, VD, bias=False)
        self.register_buffer("d2t", torch.zeros(VD, dtype=torch.long))

    def copy_from(self, draft: Eagle3Draft):
        """The draft's weights by their checkpoint names: a direct copy (names equal HF's DeepSeek-V3 ones)."""
        sd = draft.state_dict()
        mine = {k.replace("midlayer.", ""): v for k, v in sd.items() if k not in ("t2d",)}
        missing, unexpected = self.load_state_dict(mine, strict=False)
        assert not unexpected and all(m.startswith("rotary.") for m in missing), (missing, unexpected)
        return self

    def fuse(self, aux):
        if self.fc_norm is not None:
            aux = torch.cat([n(c) for n, c in zip(self.fc_norm, aux.chunk(K_AUX, dim=-1))], dim=-1)
        return self.fc(aux)

    def ttt(self, aux, ids, steps: int, feed: str = "teacher"):
        """Logits of TTT steps 0..steps-1 at every position: step k sees step-0 keys <= t and its chain's keys."""
        B, T = ids.shape
        padded = torch.nn.functional.pad(ids, (0, steps + 1))
        h, inputs, out = self.fuse(aux), [], []
        for k in range(steps):
            tok = padded[:, 1 + k:T + 1 + k] if k == 0 or feed == "teacher" else \
                (lambda i: i + self.d2t[i])(out[-1].argmax(-1))
            u = torch.cat([self.input_layernorm(self.embed_tokens(tok)), self.hidden_norm(h)], dim=-1)
            inputs.append(u)
            rows = torch.cat(inputs, dim=1)                                   # (B, (k+1)T, 2H)
            pos = torch.cat([torch.arange(T) + j for j in range(k + 1)])[None].expand(B, -1)
            cos_sin = self.rotary(rows, pos)
            attn = self.self_attn(rows, cos_sin, ttt_mask(T, k))[0][:, k * T:]           # step k's rows
            residual = attn + h                                                 # fused add-norm 1
            mlp_out = self.mlp(self.post_attention_layernorm(residual))
            residual = mlp_out + residual                                       # fused add-norm 2
            normed = self.norm(residual)
            out.append(self.lm_head(normed))
            h = normed if self.norm_output else residual
        return out


CASES = list(itertools.product([16, None], [True, False], [None, YARN], [(False, False), (True, True)]))


@pytest.mark.parametrize("q_lora,interleave,scaling,eagle31", CASES)
def test_ttt_logits_equal_sglang_reference(q_lora, interleave, scaling, eagle31):
    """Every TTT step's logits equal the reference (fp32, rel err < 1e-5): q_lora_rank set / null, interleaved /
    split-half RoPE, plain / YaRN RoPE, EAGLE-3 / EAGLE-3.1 (fc_norm + norm_output)."""
    raw = mla_dict(q_lora, interleave, scaling, *eagle31)
    draft = random_draft(DraftConfig.from_dict(raw))
    ref = SglangMlaDraft(raw).copy_from(draft).eval()
    B, T, K = 2, 9, 3
    aux, ids = torch.randn(B, T, K_AUX * HT), torch.randint(0, V, (B, T))
    with torch.no_grad():
        ours, theirs = draft.ttt_forward(aux, ids, K), ref.ttt(aux, ids, K)
    for k in range(K):
        assert rel_err(ours[k], theirs[k]) < 1e-5, k


@pytest.mark.parametrize("eagle31", [False, True])
def test_draft_feed_and_scored_equal_reference(eagle31):
    """feed='draft' (each step eats the draft's own mapped top-1) equals the reference chain; with scored= the
    scored outputs are the same logits, and the last step's unscored ones (no later step eats them) NaN."""
    raw = mla_dict(scaling=YARN, fc_norm=eagle31, norm_output=eagle31)
    draft = random_draft(DraftConfig.from_dict(raw))
    ref = SglangMlaDraft(raw).copy_from(draft).eval()
    B, T, K = 2, 10, 3
    aux, ids = torch.randn(B, T, K_AUX * HT), torch.randint(0, V, (B, T))
    scored = torch.rand(K, B, T) < 0.5
    with torch.no_grad():
        ours, theirs = draft.ttt_forward(aux, ids, K, feed="draft"), ref.ttt(aux, ids, K, feed="draft")
        part = draft.ttt_forward(aux, ids, K, feed="draft", scored=scored)
    for k in range(K):
        assert rel_err(ours[k], theirs[k]) < 1e-5, k
        assert torch.allclose(part[k][scored[k]], ours[k][scored[k]], rtol=1e-5, atol=1e-6)
    assert bool(part[-1][~scored[-1]].isnan().all()) and bool((~scored[-1]).any())


@pytest.mark.parametrize("q_lora,eagle31", [(16, False), (None, True)])
def test_ttt_equals_cached_chain_drafting(q_lora, eagle31):
    """TTT at step 0 equals `step()` over the prefix, and each later TTT step equals KV-cached chain drafting."""
    raw = mla_dict(q_lora, scaling=YARN, fc_norm=eagle31, norm_output=eagle31)
    d = random_draft(DraftConfig.from_dict(raw))
    T, K = 10, 4
    aux, ids = torch.randn(1, T, K_AUX * HT), torch.randint(0, V, (1, T))
    with torch.no_grad():
        ttt = d.ttt_forward(aux, ids, num_steps=K)
        padded = torch.nn.functional.pad(ids, (0, K + 1))
        cache = d.new_cache(1, 32)
        assert cache.layers[0].k.shape[-1] == 16 and cache.layers[0].v.shape[-1] == 6   # qk_head_dim, v_head_dim
        logits, _ = d.step(aux, padded[:, 1:T + 1], torch.arange(T)[None], cache, fuse=True)
        assert rel_err(logits, ttt[0]) < 1e-5                               # step 0 at every position
        for t in (0, 4, T - 1):
            cache = d.new_cache(1, 32)
            logits, h = d.step(aux[:, :t + 1], padded[:, 1:t + 2], torch.arange(t + 1)[None], cache, fuse=True)
            h = h[:, -1:]
            for k in range(1, K):
                logits, h = d.step(h, padded[:, t + 1 + k:t + 2 + k], torch.tensor([[t + k]]), cache)
                assert rel_err(logits[:, -1], ttt[k][:, t]) < 1e-5, (t, k)


def test_rope_pairs_rotates_the_right_pairs():
    """Interleaved RoPE rotates (x0, x1) by angle 0 and (x2, x3) by angle 1; split-half rotates (x0, x2), (x1, x3)."""
    x = torch.arange(1.0, 5.0).view(1, 1, 1, 4)
    ang = torch.tensor([0.5, 1.25])
    cos, sin = torch.cat([ang, ang]).cos().view(1, 1, 4), torch.cat([ang, ang]).sin().view(1, 1, 4)

    def rot(a, b, th):
        return a * torch.cos(th) - b * torch.sin(th), b * torch.cos(th) + a * torch.sin(th)

    inter = rope_pairs(x, cos, sin, interleaved=True).flatten()
    (a0, b0), (a1, b1) = rot(x[..., 0], x[..., 1], ang[0]), rot(x[..., 2], x[..., 3], ang[1])
    assert torch.allclose(inter, torch.stack([a0, b0, a1, b1]).flatten())
    half = rope_pairs(x, cos, sin, interleaved=False).flatten()
    (a0, b0), (a1, b1) = rot(x[..., 0], x[..., 2], ang[0]), rot(x[..., 1], x[..., 3], ang[1])
    assert torch.allclose(half, torch.stack([a0, a1, b0, b1]).flatten())


def test_mla_attention_needs_an_mla_config(tiny_cfg_dict):
    from eagle3lib.model.layers import RMSNorm
    with pytest.raises(ValueError, match="MLA config"):
        MlaAttention(DraftConfig.from_dict(tiny_cfg_dict), 64, RMSNorm)


def test_bf16_forward_runs_and_is_close():
    """An MLA draft runs TTT and cached steps in bf16 (the served dtype) and stays close to fp32."""
    d = random_draft(DraftConfig.from_dict(mla_dict(scaling=YARN, fc_norm=True, norm_output=True)))
    aux, ids = torch.randn(1, 8, K_AUX * HT), torch.randint(0, V, (1, 8))
    with torch.no_grad():
        ref = d.ttt_forward(aux, ids, 2)
        d = d.to(torch.bfloat16)
        out = d.ttt_forward(aux.bfloat16(), ids, 2)
        step, _ = d.step(aux.bfloat16(), torch.nn.functional.pad(ids, (0, 1))[:, 1:], torch.arange(8)[None],
                         d.new_cache(1, 16), fuse=True)
    assert out[0].dtype == step.dtype == torch.bfloat16
    assert rel_err(out[1].float(), ref[1]) < 0.05 and rel_err(step.float(), ref[0]) < 0.05
