"""`Eagle3Draft`: the EAGLE-3 draft forward in plain PyTorch (eagle3-formats.md §3).

    g_t   = fc(concat(aux slots at t))                 # once, for target-produced features
    u     = concat(input_layernorm(E[x_{t+1}]), hidden_norm(h))     # embedding FIRST, hidden second
    h1    = h + o_proj(Attn(q/k/v_proj(u)))            # RoPE position t (+k at TTT / chain step k)
    h2    = h1 + MLP(post_attention_layernorm(h1))
    h2    = layer N(h2) for N = 1 .. num_hidden_layers-1          # multi-layer drafts: plain layers of width H
    logits = lm_head(norm(h2)); next h = h2 (pre-norm; post-norm under norm_output)
Parameter names are the checkpoint's (`fc`, `midlayer.*`, `layers.N.*` for N >= 1, `norm`, `lm_head`, buffers `d2t`,
`t2d`), so a SpecForge/SGLang state dict loads as a direct copy; `target_id = draft_id + d2t[draft_id]`. The layers
themselves (Llama or Qwen3 attention, MLP, norms, RoPE) are in `layers`.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import DraftConfig
from .layers import DecoderLayer, DraftLayer, ResidualLayer, RMSNorm, Rotary
from .ttt_attention import causal_attention, chain_attention

ROW_ELEMENTS = 1 << 26   # position-wise work of ttt_forward runs in chunks of rows x max(I, Vd, 2H) elements


class KVCache:
    """One decoder layer's KV cache addressed by absolute position: slot p holds the key/value of position p.

    Rolling back rejected draft tokens costs nothing: later writes overwrite them, and the mask only lets a
    query at position q see slots <= q.
    """

    def __init__(self, batch: int, max_len: int, num_kv_heads: int, head_dim: int, dtype, device,
                 v_head_dim: int | None = None):
        self.k = torch.zeros(batch, num_kv_heads, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(batch, num_kv_heads, max_len, v_head_dim or head_dim, dtype=dtype, device=device)
        self.max_len = max_len

    def store(self, positions: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k (B, nkv, S, hd) / v (B, nkv, S, vd) at positions (B, S); return the whole buffers."""
        if int(positions.max()) >= self.max_len:
            raise ValueError(f"draft KV cache holds {self.max_len} positions, asked to write {int(positions.max())}")
        self.k.scatter_(2, positions[:, None, :, None].expand_as(k), k)   # (B, S) -> (B, nkv, S, hd)
        self.v.scatter_(2, positions[:, None, :, None].expand_as(v), v)   # (B, S) -> (B, nkv, S, vd)
        return self.k, self.v

    def rows(self, rows: slice) -> "KVCache":
        """A view of some batch rows: writes through it land in this cache."""
        view = object.__new__(KVCache)
        view.k, view.v, view.max_len = self.k[rows], self.v[rows], self.max_len
        return view


class DraftCache:
    """The draft's KV cache: one `KVCache` per decoder layer (`layers[i]` for layer i), one position space."""

    def __init__(self, layers: list[KVCache]):
        self.layers = tuple(layers)
        self.max_len = self.layers[0].max_len

    def rows(self, rows: slice) -> "DraftCache":
        """A view of some batch rows of every layer's cache (writes go through)."""
        return DraftCache([c.rows(rows) for c in self.layers])


def _attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: float | None = None) -> Tensor:
    """Softmax attention of q (B, nh, S_q, hd) over keys k (B, nkv, S, hd) / values v (B, nkv, S, vd) where
    `allowed` (B|1, 1, S_q, S), scores x scale (default hd**-0.5) (the KV-cached `step`; ttt_forward attends
    through ttt_attention, memory linear in T)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale,
                                          enable_gqa=q.shape[1] != k.shape[1])


def top1(logits: Tensor) -> Tensor:
    """argmax over the last dim (first index of the max, as Tensor.argmax), computed blockwise: ATen's argmax is
    a scalar loop (4-7x slower than this on CPU, worst on bf16) while amax is vectorised (benchmarks/NOTES.md)."""
    V = logits.shape[-1]
    blk = next((b for b in (256, 128, 64, 32) if V % b == 0 and V >= 4 * b), 0)
    if not blk or logits.device.type != "cpu":                         # GPU argmax is already a fast reduction
        return logits.argmax(-1)
    blocks = logits.unflatten(-1, (V // blk, blk))                     # (..., V) -> (..., V/blk, blk)
    b = blocks.amax(-1).max(-1).indices                                # first block holding the max (...)
    inner = blocks.gather(-2, b[..., None, None].expand(*b.shape, 1, blk)).squeeze(-2)   # (..., blk)
    return b * blk + inner.max(-1).indices


class FedAsIs(nn.Module):
    """The fc a draft fed the target's final state does not have (use_aux_hidden_state false: vLLM llama_eagle3.py
    builds none, TensorRT-LLM applies fc only to a wider input): the state passes as it is. `weight` is an empty,
    non-persistent buffer that follows the module's dtype and device (nothing is loaded into it or saved)."""

    def __init__(self, width: int):
        super().__init__()
        self.in_features = self.out_features = width
        self.register_buffer("weight", torch.empty(0), persistent=False)

    def reset_parameters(self) -> None:
        """Nothing to set: the empty `weight` holds no value."""

    def forward(self, x: Tensor) -> Tensor:
        return x


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft: fc over k aux slots, the EAGLE-3 layer (`midlayer`) and any later plain layers (`layers.N`,
    N >= 1), norm, lm_head over the draft vocab, d2t/t2d.

    `embed_tokens` is the TARGET's embedding (V, H): drafts usually ship without it (load it from the target).
    """

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.cfg = cfg
        H, k, Ht = cfg.hidden_size, cfg.num_aux, cfg.target_hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        if cfg.norm_before_fc and cfg.use_aux_hidden_state:     # the fc's norms go with the fc
            self.input_norm = RMSNorm(k * Ht, cfg.rms_norm_eps)
        if cfg.fc_norm and cfg.use_aux_hidden_state:
            self.fc_norm = nn.ModuleList(RMSNorm(Ht, cfg.rms_norm_eps) for _ in range(k))
        self.fc = nn.Linear(k * Ht, H, bias=cfg.bias or cfg.fc_bias) if cfg.use_aux_hidden_state else FedAsIs(H)
        self.midlayer = DraftLayer(cfg)
        self.layers = nn.ModuleDict({str(i): DecoderLayer(cfg) for i in range(1, cfg.num_hidden_layers)})
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.rotary = Rotary(cfg)
        # OFFSETS: target_id = draft_id + d2t[draft_id]; t2d[target_id] is True iff the draft vocab has it
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool))

    # ---- pieces ---------------------------------------------------------------------------------------
    @property
    def decoder_layers(self) -> list[ResidualLayer]:
        """Every decoder layer in order: the EAGLE-3 layer, then layers 1 .. num_hidden_layers-1."""
        return [self.midlayer, *self.layers.values()]

    def fuse(self, aux: Tensor) -> Tensor:
        """Fuse concatenated aux slots: (B, T, k*Ht) -> (B, T, H)."""
        if aux.shape[-1] != self.fc.in_features:
            raise ValueError(f"aux hidden states are {aux.shape[-1]} wide but fc expects {self.fc.in_features} "
                             f"= {self.cfg.num_aux} slots x {self.cfg.target_hidden_size}: the capture has "
                             f"{aux.shape[-1] / self.cfg.target_hidden_size:g} slots")
        if not self.cfg.use_aux_hidden_state:                                # the final state, as it is
            return aux
        if self.cfg.fc_norm:
            slots = aux.unflatten(-1, (self.cfg.num_aux, -1))                # (B, T, k*Ht) -> (B, T, k, Ht)
            aux = torch.cat([n(slots[..., i, :]) for i, n in enumerate(self.fc_norm)], dim=-1)
        if self.cfg.norm_before_fc:
            aux = self.input_norm(aux)
        return self.fc(aux)                                                  # (B, T, k*Ht) -> (B, T, H)

    def to_target_ids(self, draft_ids: Tensor) -> Tensor:
        """Map draft-vocab ids to target ids: target_id = draft_id + d2t[draft_id]."""
        return draft_ids + self.d2t[draft_ids]

    def head(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """(draft-vocab logits (B, T, Vd), hidden to feed back (B, T, H))."""
        normed = self.norm(h)
        return self.lm_head(normed), (normed if self.cfg.norm_output else h)  # (B, T, H) -> (B, T, Vd)

    # ---- training-style multi-step forward (TTT) / replay ------------------------------------------------
    def ttt_forward(self, aux: Tensor, input_ids: Tensor, num_steps: int = 1, *, feed: str = "teacher",
                    position_offset: int = 0, return_logits: bool = True, scored: Tensor | None = None) -> list[Tensor]:
        """K-step forward at every position at once, as EAGLE/SpecForge train it (TTT).

        Step k at position t consumes token t+1+k and predicts token t+2+k (valid where t+2+k < T). The hidden
        input of step k >= 1 is the draft's own output of step k-1 at the same position; its query sees the
        step-0 keys of positions <= t (causal) plus its own chain's keys of steps 1..k ("diagonal").
        feed="teacher": tokens are ground truth (training, SpecForge accuracy); feed="draft": step k>=1 consumes
        the draft's own step-(k-1) prediction mapped to a target id (chain drafting from every position).
        scored (K, B, T) bool: the outputs that will be used; the lm_head runs only there, step k only at positions
        with a used output at a step >= k, and no position after the last of those runs at all (the outputs
        elsewhere are NaN logits / id -1). None: every output.
        Memory is linear in T: attention through SDPA (ttt_attention), position-wise work in chunks of rows.
        Returns K tensors: logits (B, T, Vd), or draft top-1 ids (B, T) when return_logits=False.
        """
        if feed not in ("teacher", "draft"):
            raise ValueError(f"feed must be 'teacher' or 'draft', got {feed!r}")
        B, T = input_ids.shape
        dev, K = input_ids.device, num_steps
        if scored is None:
            scored = torch.ones(K, B, T, dtype=torch.bool, device=dev)
        elif tuple(scored.shape) != (K, B, T):
            raise ValueError(f"scored must be (num_steps, B, T) = {(K, B, T)}, got {tuple(scored.shape)}")
        scored = scored.to(device=dev, dtype=torch.bool)
        live = scored.flip(0).long().cumsum(0).flip(0) > 0                  # (K, B, T): a used output at >= k
        heads = scored.clone()
        if feed == "draft":
            heads[:-1] |= live[1:]                                           # step k+1 eats step k's top-1
        ids_out = torch.full((K, B, T), -1, dtype=torch.long, device=dev)
        logits_out = [None] * K
        if return_logits:
            fill = torch.empty if bool(scored.all()) else partial(torch.full, fill_value=float("nan"))
            logits_out = [fill((B, T, self.cfg.draft_vocab_size), dtype=self.fc.weight.dtype, device=dev)
                          for _ in range(K)]
        T0 = int(live[0].any(0).nonzero().max()) + 1 if bool(live[0].any()) else 0   # last position used
        padded = F.pad(input_ids, (0, K + 1))                                # ids past the end -> 0
        layers = self.decoder_layers
        k0: list[Tensor] = []                                                # per layer: step-0 keys (B, nkv, T0, hd)
        v0: list[Tensor] = []
        diag: list[list[tuple[Tensor, Tensor]]] = [[] for _ in layers]       # per layer: steps 1..k, (n, nkv, hd|vd)
        h = prev = None
        # cos/sin once for every position this forward reads (t + step for t < T0, step < K): (T0 + K, hd)
        cos_all, sin_all = self.rotary(torch.arange(position_offset, position_offset + T0 + K, device=dev)[None],
                                       self.fc.weight.dtype)
        for step in range(K if T0 else 0):
            # rows: flat indices b * T + t of the positions this step runs (step 0: all t < T0, they are keys)
            run = live[step] if step else torch.ones(B, T, dtype=torch.bool, device=dev)
            run = run.clone()
            run[:, T0:] = False
            rows = run.flatten().nonzero().flatten()                         # (n,)
            t = rows % T
            cos, sin = cos_all[0, t + step], sin_all[0, t + step]             # (T0 + K, hd) -> (n, hd)
            if step == 0:
                h = self.fuse(aux[:, :T0]).reshape(B * T0, -1)               # (B, T0, k*Ht) -> (B*T0, H)
            elif rows.numel() < h.shape[0]:                                  # rows only shrink: else the same rows
                h = h[prev[rows]]                                            # (n_prev, H) -> (n, H)
                diag = [[(kd[prev[rows]], vd[prev[rows]]) for kd, vd in d] for d in diag]
            if step == 0 or feed == "teacher":
                tokens = padded[:, 1 + step:T + 1 + step].flatten()[rows]    # (B, T) -> (n,) token t+1+k
            else:
                tokens = self.to_target_ids(ids_out[step - 1].flatten()[rows])
            for i, layer in enumerate(layers):                               # the last layer's output is fed back
                a = layer.self_attn
                q, k, v, residual = self._rows_in(layer, h, tokens if i == 0 else None, cos, sin)
                if step == 0:                                                # dense (B, T0): square causal SDPA
                    k0.append(k.view(B, T0, a.nkv, a.hd).transpose(1, 2).contiguous())   # -> (B, nkv, T0, hd)
                    v0.append(v.view(B, T0, a.nkv, a.vd).transpose(1, 2).contiguous())   # -> (B, nkv, T0, vd)
                    o = causal_attention(q.view(B, T0, a.nh, a.hd).transpose(1, 2), k0[i], v0[i],
                                         a.scale)                            # (B, nh, T0, vd)
                    o = o.transpose(1, 2).reshape(B * T0, a.nh, a.vd)        # (B, nh, T0, vd) -> (B*T0, nh, vd)
                else:
                    diag[i].append((k, v))
                    o = self._rows_attend(q, rows, B, T, k0[i], v0[i], diag[i], a.scale)
                del q                                                        # free before the next (n, H)s
                h = self._rows_finish(layer, o, residual)
                del o, residual
            sel = heads[step].flatten()[rows].nonzero().flatten()           # rows whose output is used
            h = self._rows_head(h, sel, rows, ids_out[step].view(-1) if feed == "draft" or not return_logits
                                else None, logits_out[step].view(B * T, -1) if return_logits else None)
            prev = torch.full((B * T,), -1, dtype=torch.long, device=dev)
            prev[rows] = torch.arange(rows.numel(), device=dev)             # flat index -> row of this step
        return logits_out if return_logits else list(ids_out)

    def _chunk(self) -> int:
        """Rows per chunk of position-wise work: its widest activation (rows x max(I, Vd, 2H)) <= ROW_ELEMENTS."""
        c = self.cfg
        return max(1, ROW_ELEMENTS // max(c.intermediate_size, c.draft_vocab_size, 2 * c.hidden_size))

    def _rows_in(self, layer: ResidualLayer, h: Tensor, tokens: Tensor | None, cos: Tensor,
                 sin: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Attention inputs of `layer` for n rows (hidden (n, H), target token ids (n,) for the first layer, None
        for later ones, RoPE cos/sin (n, hd)): RoPE'd q (n, nh, hd), k (n, nkv, hd), v (n, nkv, vd) and the
        residual (n, H), in chunks of rows (one chunk: views of the chunk's outputs, nothing copied)."""
        a = layer.self_attn
        n, c = h.shape[0], self._chunk()

        def chunk(s: int, e: int):
            emb = self.embed_tokens(tokens[None, s:e]) if tokens is not None else None   # (1, c, H)
            u, r = layer.inputs(emb, h[None, s:e])                           # (1, c, 2H|H), (1, c, H)
            qc, kc, vc = a.qkv(u, cos[None, s:e], sin[None, s:e])            # (1, nh|nkv, c, hd|vd)
            return qc[0].transpose(0, 1), kc[0].transpose(0, 1), vc[0].transpose(0, 1), r[0]   # (c, nh|nkv, hd|vd)
        if n <= c:
            q, k, v, r = chunk(0, n)
            return q, k, v, (r if layer.norm_before_residual else h)
        q, k, v = h.new_empty(n, a.nh, a.hd), h.new_empty(n, a.nkv, a.hd), h.new_empty(n, a.nkv, a.vd)
        residual = h.new_empty(h.shape) if layer.norm_before_residual else h
        for s in range(0, n, c):
            e = min(n, s + c)
            q[s:e], k[s:e], v[s:e], r = chunk(s, e)
            if layer.norm_before_residual:
                residual[s:e] = r
        return q, k, v, residual

    def _rows_attend(self, q: Tensor, rows: Tensor, B: int, T: int, k0: Tensor, v0: Tensor,
                     diag: list[tuple[Tensor, Tensor]], scale: float | None = None) -> Tensor:
        """Attention of n rows (q (n, nh, hd), flat indices b * T + t) over their sample's step-0 keys and their
        diagonal keys (n, nkv, hd|vd), scores x scale: rows are laid out (B, n_max) per sample for SDPA and back.
        Returns (n, nh, vd)."""
        b, t = rows // T, rows % T
        counts = torch.bincount(b, minlength=B)                              # rows per sample
        slot = torch.arange(rows.numel(), device=rows.device) - (counts.cumsum(0) - counts)[b]
        n_max = int(counts.max())

        def batched(x: Tensor) -> Tensor:                                    # (n, heads, d) -> (B, heads, n_max, d)
            if B == 1:
                return x.transpose(0, 1)[None]
            out = x.new_zeros(B, n_max, *x.shape[1:])
            out[b, slot] = x
            return out.transpose(1, 2)
        pos = torch.zeros(B, n_max, dtype=torch.long, device=rows.device)   # padding rows: position 0
        pos[b, slot] = t
        o = chain_attention(batched(q), pos, k0, v0, [(batched(kd), batched(vd)) for kd, vd in diag], scale=scale)
        if B == 1:
            return o[0].transpose(0, 1)                                      # (1, nh, n, vd) -> (n, nh, vd) view
        return o.transpose(1, 2)[b, slot]                                    # (B, nh, n_max, vd) -> (n, nh, vd)

    def _rows_finish(self, layer: ResidualLayer, o: Tensor, residual: Tensor) -> Tensor:
        """Rest of `layer` for n rows (attention out (n, nh, vd), residual (n, H)) in chunks: its output (n, H)."""
        n = o.shape[0]
        if n <= self._chunk():                                               # one chunk: no output buffer
            return layer.finish(layer.self_attn.out(o.transpose(0, 1)[None]), residual[None])[0]   # -> (n, H)
        out = residual.new_empty(residual.shape)
        for s in range(0, n, self._chunk()):
            e = min(n, s + self._chunk())
            att = layer.self_attn.out(o[s:e].transpose(0, 1)[None])          # (c, nh, vd) -> (1, c, H)
            out[s:e] = layer.finish(att, residual[None, s:e])[0]             # (1, c, H) -> (c, H)
        return out

    def _rows_head(self, out: Tensor, sel: Tensor, rows: Tensor, ids: Tensor | None,
                   logits: Tensor | None) -> Tensor:
        """Final norm for n rows (last layer's output (n, H)) in chunks; the rows `sel` (sorted) get the lm_head,
        written at their flat index `rows[sel]` into ids (B*T,) as top-1 and/or logits (B*T, Vd). Returns the
        hidden to feed back (n, H): `out` itself, or its post-norm copy under norm_output."""
        n = out.shape[0]
        fed = out.new_empty(out.shape) if self.cfg.norm_output else out
        for s in range(0, n, self._chunk()):
            e = min(n, s + self._chunk())
            normed = self.norm(out[s:e])
            if self.cfg.norm_output:
                fed[s:e] = normed
            lo, hi = (int(i) for i in torch.searchsorted(sel, torch.tensor([s, e], device=sel.device)))
            if hi > lo:
                lg = self.lm_head(normed if hi - lo == e - s else normed[sel[lo:hi] - s])   # (m, H) -> (m, Vd)
                if ids is not None:
                    ids[rows[sel[lo:hi]]] = top1(lg)                         # (m, Vd) -> (m,)
                if logits is not None:
                    logits[rows[sel[lo:hi]]] = lg
        return fed

    # ---- incremental drafting with a KV cache (engines) ------------------------------------------------------
    def new_cache(self, batch: int, max_len: int, device=None, dtype=None) -> DraftCache:
        """An empty draft KV cache for `max_len` positions: one KVCache per decoder layer."""
        p = self.fc.weight
        return DraftCache([KVCache(batch, max_len, layer.self_attn.nkv, layer.self_attn.hd, dtype or p.dtype,
                                   device or p.device, v_head_dim=layer.self_attn.vd)
                           for layer in self.decoder_layers])

    def step(self, hidden: Tensor, token_ids: Tensor, positions: Tensor, cache: DraftCache,
             fuse: bool = False) -> tuple[Tensor, Tensor]:
        """Run S new positions through every decoder layer, reading/writing each layer's cache by absolute position.

        hidden: (B, S, H) fed-back states, or (B, S, k*Ht) aux states with fuse=True (target features);
        token_ids: (B, S) TARGET ids of the next tokens; positions: (B, S) RoPE positions.
        Returns (draft-vocab logits (B, S, Vd), hidden to feed back (B, S, H)).
        """
        h = self.fuse(hidden) if fuse else hidden
        cos, sin = self.rotary(positions, h.dtype)
        emb = self.embed_tokens(token_ids)
        slots = torch.arange(cache.max_len, device=positions.device)
        allowed = slots[None, None, None, :] <= positions[:, None, :, None]  # (B, 1, S, max_len)
        for layer, layer_cache in zip(self.decoder_layers, cache.layers, strict=True):
            u, residual = layer.inputs(emb, h)
            q, k, v = layer.self_attn.qkv(u, cos, sin)
            k_all, v_all = layer_cache.store(positions, k, v)
            o = _attend(q, k_all, v_all, allowed, layer.self_attn.scale)
            h = layer.finish(layer.self_attn.out(o), residual)
        return self.head(h)
