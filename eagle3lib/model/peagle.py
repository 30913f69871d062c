"""`PEagleDraft`: P-EAGLE (parallel drafting), all K drafts of an EAGLE-3 draft in ONE forward, in plain PyTorch.

speculators `speculators_model_type: "peagle"`, SpecForge `PEagleDraftModel`, vLLM `parallel_drafting`. From
anchor t (a position with a real target state; same alignment as EAGLE-3, docs/architecture.md):

    depth 0:  hidden fc(aux[t]),         token x_{t+1},          RoPE t      -> predicts x_{t+2}
    depth d:  hidden fc(mask_hidden),    token mask_token_id,    RoPE t + d  -> predicts x_{t+2+d}

Attention: depth 0 is causal over depth 0; depth d at anchor t sees the depth-0 keys of positions <= t and its own
anchor's depths 1..d (speculators / SpecForge `create_peagle_mask_mod`; vLLM appends K-1 mask slots after the last
accepted token, causal). `mask_hidden` (1, 1, k*Ht) lives in the aux space and goes through fc (and fc_norm /
input_norm) like a capture (vLLM `combine_hidden_states(mask_hidden)`). Nothing is fed back between depths, so the
forward from every anchor is also what a server drafts: teacher-forced and draft-fed are the same here.
Every layer runs the same P-EAGLE attention pattern over the K depth streams (speculators / SpecForge use one
mask for all layers): `midlayer` (the EAGLE-3 layer, 2H input) then the plain `layers.N` (SpecForge's default is 4).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import DraftConfig
from .draft import ROW_ELEMENTS, Eagle3Draft, top1
from ..errors import ConfigError
from .ttt_attention import causal_attention, chain_attention


class PEagleDraft(Eagle3Draft):
    """An EAGLE-3 draft plus P-EAGLE's learnable `mask_hidden` (checkpoint name kept) and its mask token id."""

    def __init__(self, cfg: DraftConfig):
        super().__init__(cfg)
        self.mask_hidden = nn.Parameter(torch.zeros(1, 1, cfg.fc_in_features))
        self.mask_token_id: int | None = cfg.mask_token_id     # a TARGET id; None until resolved (SpecForge)

    def parallel_forward(self, aux: Tensor, input_ids: Tensor, num_depths: int, *, mask_token_id: int | None = None,
                         position_offset: int = 0, return_logits: bool = True,
                         scored: Tensor | None = None) -> list[Tensor]:
        """The K = num_depths drafts from every anchor t at once, as P-EAGLE trains them (every anchor, every depth;
        COD sampling only picks a subset of these rows, and a row's value does not depend on which others exist).

        aux (B, T, k*Ht), input_ids (B, T) target ids (right padding is never seen by real rows). Depth d at t
        predicts token t+2+d. scored (K, B, T) bool: where the lm_head runs (None: everywhere); elsewhere the
        outputs are NaN logits / id -1. Returns K tensors: logits (B, T, Vd), or draft top-1 ids (B, T).
        """
        mask_id = self.mask_token_id if mask_token_id is None else mask_token_id
        if mask_id is None:
            raise ConfigError(f"{self.cfg.source}, key 'mask_token_id'", "P-EAGLE mask token id unknown",
                              expected="a target token id", found=None, cause="SpecForge keeps it in its training "
                              "config: pass mask_token_id= or give replay a target whose tokenizer resolves it")
        stack = self.decoder_layers
        B, T = input_ids.shape
        K, dev = num_depths, input_ids.device
        if scored is None:
            scored = torch.ones(K, B, T, dtype=torch.bool, device=dev)
        elif tuple(scored.shape) != (K, B, T):
            raise ValueError(f"scored must be (num_depths, B, T) = {(K, B, T)}, got {tuple(scored.shape)}")
        scored = scored.to(device=dev, dtype=torch.bool)
        dtype = self.fc.weight.dtype
        anchors = torch.arange(T, device=dev)[None].expand(B, T)              # (B, T) key index of each anchor
        rope = [self.rotary(anchors[:1] + position_offset + d, dtype) for d in range(K)]   # K x (1, T, hd)
        # depth inputs: every anchor feeds depth d >= 1 the same (fc(mask_hidden), mask token), so the first layer
        # projects ONE row for it and RoPE broadcasts it over the T anchors
        mask_tok = torch.full((1, 1), mask_id, dtype=torch.long, device=dev)
        embs = [self.embed_tokens(F.pad(input_ids[:, 1:], (0, 1)))]            # (B, T) token t+1 -> (B, T, H)
        embs += [self.embed_tokens(mask_tok)] * (K - 1)                        # (1, 1) -> (1, 1, H)
        hs = [self.fuse(aux)]                                                  # (B, T, k*Ht) -> (B, T, H)
        hs += [self.fuse(self.mask_hidden.to(dtype))] * (K - 1)                # (1, 1, k*Ht) -> (1, 1, H)
        for layer in stack:
            attn, k0, v0, diag, nxt = layer.self_attn, None, None, [], []
            for d in range(K):
                u, residual = layer.inputs(embs[d], hs[d])                     # (B|1, T|1, 2H), (B|1, T|1, H)
                q, k, v = attn.qkv(u, *rope[d])                                # (B|1, nh|nkv, T, hd); v: T|1
                if d == 0:
                    k0, v0 = k, v
                    o = causal_attention(q, k0, v0)                            # (B, nh, T, hd)
                else:
                    q = q.expand(B, -1, T, -1)                                 # (1, nh, T, hd) -> (B, nh, T, hd)
                    diag.append((k.expand(B, -1, T, -1), v.expand(B, -1, T, -1)))   # -> (B, nkv, T, hd)
                    o = chain_attention(q, anchors, k0, v0, diag)              # (B, nh, T, hd)
                nxt.append(layer.finish(attn.out(o), residual))                # (B, nh, T, hd) -> (B, T, H)
            hs = nxt
        outs = [self._depth_head(h, scored[d], return_logits) for d, h in enumerate(hs)]
        return outs

    def _depth_head(self, out: Tensor, scored: Tensor, return_logits: bool) -> Tensor:
        """lm_head over the scored rows of one depth (out (B, T, H), scored (B, T)), in chunks of rows:
        logits (B, T, Vd) NaN elsewhere, or top-1 draft ids (B, T) -1 elsewhere."""
        B, T, H = out.shape
        Vd = self.cfg.draft_vocab_size
        flat = out.reshape(B * T, H)                                           # (B, T, H) -> (B*T, H)
        rows = scored.flatten().nonzero().flatten()
        if return_logits:
            res = flat.new_full((B * T, Vd), float("nan"))
        else:
            res = torch.full((B * T,), -1, dtype=torch.long, device=out.device)
        chunk = max(1, ROW_ELEMENTS // max(Vd, H))
        for s in range(0, rows.numel(), chunk):
            r = rows[s:s + chunk]
            logits, _ = self.head(flat[r])                                     # (c, H) -> (c, Vd)
            res[r] = logits if return_logits else top1(logits)
        return res.view(B, T, Vd) if return_logits else res.view(B, T)


def draft_for(cfg: DraftConfig) -> Eagle3Draft:
    """The model a config describes: `PEagleDraft` for a P-EAGLE config, else `Eagle3Draft` (on the current device)."""
    return PEagleDraft(cfg) if cfg.parallel_drafting else Eagle3Draft(cfg)


def resolve_mask_token_id(cfg: DraftConfig, tokenizer=None) -> tuple[int | None, str]:
    """(mask token id, where it came from): the config's, else SpecForge's fallback order over the tokenizer (its
    mask token, the first id past the tokenizer inside the embedding, pad, eos, unk); (None, why) when none fits."""
    if cfg.mask_token_id is not None:
        return cfg.mask_token_id, "config"
    if tokenizer is None:
        return None, "no mask_token_id in the config and no tokenizer to resolve it"
    try:
        size = len(tokenizer)
    except TypeError:
        size = cfg.vocab_size
    candidates = [("tokenizer mask token", getattr(tokenizer, "mask_token_id", None))]
    if size < cfg.vocab_size:
        candidates.append(("first unused embedding row", size))
    candidates += [(f"tokenizer {n} token", getattr(tokenizer, f"{n}_token_id", None)) for n in ("pad", "eos", "unk")]
    for name, cand in candidates:
        if isinstance(cand, int) and not isinstance(cand, bool) and 0 <= cand < cfg.vocab_size:
            return cand, f"{name} (SpecForge's fallback order; the config records none)"
    return None, "no mask_token_id in the config and none of SpecForge's fallbacks fits the vocab"
