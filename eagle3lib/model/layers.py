"""The draft's building blocks in plain PyTorch: RMSNorm, RoPE, attention, MLP and its decoder layers.

Two kinds of decoder layer (eagle3-formats.md §3; SGLang `llama_eagle3.py` after PR #24663, vLLM PR #26164,
speculators `Eagle3FirstLayerMixin`):
- `DraftLayer`, the first (EAGLE-3) layer `midlayer`: q/k/v read [input_layernorm(E[x]), hidden_norm(h)] (2H);
- `DecoderLayer`, every later layer `layers.N` (N >= 1): a plain pre-norm decoder layer of width H that never
  sees the embedding (input_layernorm(h) -> attention; the residual stream carries on from the layer before).
Both share one interface, so the forward runs any stack of them the same way:
    u, residual = layer.inputs(emb, h)             # (B, T, 2H | H), (B, T, H)
    q, k, v = layer.self_attn.qkv(u, cos, sin)     # RoPE'd (B, nh | nkv, T, hd)
    h = layer.finish(layer.self_attn.out(o), residual)
The attention is Llama's, or Qwen3's (`cfg.qk_norm`: RMSNorm over head_dim of each q and k head before RoPE) with
`attention_bias` on q/k/v/o. Parameter names are the checkpoint's, so loading is a direct copy.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import ConfigError
from .config import DraftConfig
from .mla import MlaAttention


class RMSNorm(nn.Module):
    """Llama RMSNorm: normalise in fp32, scale in the input dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = eps
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The init an engine's loader leaves a norm the checkpoint lacks: a weight of ones."""
        nn.init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x32 = x.float()
        y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)   # a new tensor
        if torch.is_grad_enabled() or y.dtype != self.weight.dtype:
            return self.weight * y
        return y.mul_(self.weight)            # no autograd: scale in place (the same product, one pass less)


def rope_inv_freq(head_dim: int, theta: float, scaling, max_pos: int) -> tuple[Tensor, float]:
    """Inverse frequencies (head_dim/2,) and the attention scaling for default/linear/llama3/yarn RoPE."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if not scaling:
        return inv, 1.0
    rtype, factor = scaling.get("rope_type", "default"), float(scaling.get("factor", 1.0))
    if rtype == "linear":
        return inv / factor, 1.0
    if rtype == "llama3":
        lo_f, hi_f = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        old = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > old / lo_f, inv / factor, inv)     # long waves: fully interpolated
        smooth = (old / wavelen - lo_f) / (hi_f - lo_f)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = (wavelen >= old / hi_f) & (wavelen <= old / lo_f)
        return torch.where(medium, smoothed, inv_l), 1.0
    if rtype == "yarn":
        old = float(scaling.get("original_max_position_embeddings") or max_pos)
        mscale, mscale_all = scaling.get("mscale"), scaling.get("mscale_all_dim")

        def get_mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0

        attn = scaling.get("attention_factor")
        if attn is None:
            attn = (get_mscale(factor, mscale) / get_mscale(factor, mscale_all)) if mscale and mscale_all \
                else get_mscale(factor)
        beta_fast, beta_slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)

        def corr_dim(rot):
            return (head_dim * math.log(old / (rot * 2 * math.pi))) / (2 * math.log(theta))

        low, high = corr_dim(beta_fast), corr_dim(beta_slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, head_dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        extrap = 1 - ramp                                   # 1 = keep the original (high) frequency
        return (inv / factor) * (1 - extrap) + inv * extrap, float(attn)
    return inv, 1.0                                         # dynamic NTK equals default within max_pos


class Rotary(nn.Module):
    """cos/sin tables for given absolute positions (MLA: of the qk_rope_head_dim part, DeepSeek YaRN magnitude)."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        # vLLM's get_rope: rotary_dim = int(head_size * partial_rotary_factor), the rest of each head passes through
        dim = cfg.mla.qk_rope_head_dim if cfg.mla else int(cfg.head_dim * cfg.partial_rotary_factor)
        inv, self.scale = rope_inv_freq(dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_position_embeddings)
        if cfg.mla:                                                    # DeepSeek YaRN magnitude (MlaConfig)
            self.scale = cfg.mla.rope_mscale
        self.register_buffer("inv_freq", inv, persistent=False)

    def _apply(self, fn, recurse: bool = True):
        """Moves with the model but stays fp32 when the model is cast (`.to(torch.bfloat16)`): a bf16 frequency is off
        by up to 2**-9 of itself, and so is every angle: up to ~0.5 rad at position 256 and ~8 rad at 4096 for the
        frequencies near 1, where the engines and HF compute the angles in fp32 and round only cos/sin."""
        inv = self.inv_freq
        super()._apply(fn, recurse)
        moved = self.inv_freq                          # on the new device, in the new dtype
        self.inv_freq = moved.float() if inv.is_meta else inv.to(device=moved.device, dtype=torch.float32)
        return self

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq.float()   # (B, T) -> (B, T, hd/2)
        emb = torch.cat([freqs, freqs], dim=-1)                        # (B, T, hd)
        return (emb.cos() * self.scale).to(dtype), (emb.sin() * self.scale).to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE on (B, nh, T, hd) with cos/sin (B, T, hd): x * cos + cat(-x2, x1) * sin, written as
    x * cos with x2 * sin taken from its first half and x1 * sin added to its second (the same sums: a + (-b)
    is a - b exactly), without building the rotated copy. cos/sin narrower than the head (rd < hd, a partial
    rotary factor): the first rd dims of each head are rotated, the rest pass unchanged (vLLM's RotaryEmbedding)."""
    rd = cos.shape[-1]
    if rd < x.shape[-1]:
        rot, rest = x[..., :rd], x[..., rd:]                # (B, nh, T, rd), (B, nh, T, hd - rd)
        return torch.cat([apply_rope(rot, cos, sin), rest], dim=-1)
    cos, sin = cos[:, None], sin[:, None]                   # (B, T, hd) -> (B, 1, T, hd)
    x1, x2 = x.chunk(2, dim=-1)
    s1, s2 = sin.chunk(2, dim=-1)
    out = x * cos                                           # (B, nh, T, hd)
    if torch.is_grad_enabled() and (x.requires_grad or sin.requires_grad):
        return out + torch.cat([-x2, x1], dim=-1) * sin
    o1, o2 = out.chunk(2, dim=-1)                           # views of out: (B, nh, T, hd/2) each
    o1.sub_(x2 * s1)
    o2.add_(x1 * s2)
    return out


class DraftAttention(nn.Module):
    """Llama / Qwen3 attention whose q/k/v read `in_features` (2H in the first layer, H later) and o_proj writes H.

    Qwen3 (`cfg.qk_norm`): q_norm / k_norm, RMSNorms over head_dim, on every head of q and k before RoPE.
    Bias: q/k/v under `bias` (EAGLE) or `attention_bias` (HF Llama / Qwen3), o_proj under `attention_bias`.
    """

    def __init__(self, cfg: DraftConfig, in_features: int):
        super().__init__()
        nh, nkv, hd, H = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.hidden_size
        self.nh, self.nkv, self.hd, self.vd, self.scale = nh, nkv, hd, hd, hd ** -0.5
        qkv_bias = cfg.bias or cfg.attention_bias
        self.q_proj = nn.Linear(in_features, nh * hd, bias=qkv_bias)
        self.k_proj = nn.Linear(in_features, nkv * hd, bias=qkv_bias)
        self.v_proj = nn.Linear(in_features, nkv * hd, bias=qkv_bias)
        self.o_proj = nn.Linear(nh * hd, H, bias=cfg.attention_bias)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def qkv(self, u: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Projected (q/k-normed under Qwen3), RoPE'd q (B, nh, T, hd) and k, v (B, nkv, T, hd)."""
        B, T, _ = u.shape
        q = self.q_proj(u).view(B, T, self.nh, self.hd)                    # (B, T, 2H|H) -> (B, T, nh, hd)
        k = self.k_proj(u).view(B, T, self.nkv, self.hd)                   # (B, T, 2H|H) -> (B, T, nkv, hd)
        v = self.v_proj(u).view(B, T, self.nkv, self.hd).transpose(1, 2)   # (B, T, 2H|H) -> (B, nkv, T, hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)                          # per head, over hd
        q, k = q.transpose(1, 2), k.transpose(1, 2)                        # (B, T, n, hd) -> (B, n, T, hd)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def out(self, o: Tensor) -> Tensor:
        B, _, T, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.nh * self.hd))   # (B, nh, T, hd) -> (B, T, H)


def activation(name: str):
    """The gate activation a config's `hidden_act` names (transformers' ACT2FN, as HF Llama and SpecForge run it);
    ConfigError naming the field when transformers knows no such activation. silu needs no import of transformers
    (about 1 s: the draft is built on every load)."""
    if name == "silu":
        return F.silu
    from transformers.activations import ACT2FN

    try:
        return ACT2FN[name]
    except KeyError:
        raise ConfigError("config.json, key 'hidden_act'", "unknown activation", expected="silu, gelu, ... "
                          "(transformers ACT2FN)", found=repr(name), cause="a typo or a converter's value") from None


class DraftMLP(nn.Module):
    """Gated MLP (gate_proj, up_proj, down_proj; biases under `mlp_bias`): act(gate) * up, act = `hidden_act`
    (SwiGLU for the usual silu)."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, I, b = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_proj = nn.Linear(H, I, bias=b)
        self.up_proj = nn.Linear(H, I, bias=b)
        self.down_proj = nn.Linear(I, H, bias=b)
        self.act = activation(cfg.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))   # (B, T, H) -> (B, T, I) -> (B, T, H)


class ResidualLayer(nn.Module):
    """What every decoder layer does after its attention: residual add, post-attention norm, MLP, residual add."""

    norm_before_residual = False

    def finish(self, attn_out: Tensor, residual: Tensor) -> Tensor:
        h1 = residual + attn_out
        return h1 + self.mlp(self.post_attention_layernorm(h1))


class DraftLayer(ResidualLayer):
    """The first, EAGLE-3 decoder layer (`midlayer` in EAGLE/SpecForge, `layers.0` in speculators/vLLM/SGLang):
    q/k/v read [input_layernorm(embedding), hidden_norm(h)] (2H)."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.hidden_norm = RMSNorm(H, eps)
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = MlaAttention(cfg, 2 * H, RMSNorm) if cfg.mla else DraftAttention(cfg, 2 * H)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = DraftMLP(cfg)
        self.norm_before_residual = cfg.norm_before_residual

    def inputs(self, emb: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """(attention input u (B, T, 2H), residual (B, T, H))."""
        hn = self.hidden_norm(h)
        u = torch.cat([self.input_layernorm(emb), hn], dim=-1)   # (B, T, H) + (B, T, H) -> (B, T, 2H)
        return u, (hn if self.norm_before_residual else h)


class DecoderLayer(ResidualLayer):
    """A later decoder layer (`layers.N`, N >= 1): a plain pre-norm Llama / Qwen3 layer of width H.

    It never reads the embedding; its residual is the incoming hidden state (vLLM / speculators / SGLang >= #24663).
    """

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        H, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = RMSNorm(H, eps)
        self.self_attn = MlaAttention(cfg, H, RMSNorm) if cfg.mla else DraftAttention(cfg, H)
        self.post_attention_layernorm = RMSNorm(H, eps)
        self.mlp = DraftMLP(cfg)

    def inputs(self, emb: Tensor | None, h: Tensor) -> tuple[Tensor, Tensor]:
        """(attention input u (B, T, H), residual (B, T, H)); `emb` is not read (only the first layer sees it)."""
        return self.input_layernorm(h), h
