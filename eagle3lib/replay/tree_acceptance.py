"""Simulated tree acceptance on training samples: SGLang tree drafting from every position, scored on the reference.

At each position t the draft runs as a server would after verifying token t+1: step 0 from the target's features
(teacher-forced, as replay's chain), then `steps - 1` beam steps of `topk` slots (each slot its own keys, the true
parent's hidden state: `sglang_engine.tree`'s SGLang rules), and the num_draft_tokens - 1 best candidates are kept. The
accept length at t is 1 + the depth of the deepest kept node whose path spells the reference tokens t+2, t+3, ...
(greedy verification against the reference continuation, as replay's chain simulation). Positions are those where
every step up to the deepest setting is scored (mask and reference present), the same for every setting, so a
setting's number sits next to the chain of the same depth (added to every table). topk 1 equals replay's chain.
Usage: ``replay_tree(setup, data, [(5, 4, 8), (3, 1, 4)]).table``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from ..model.draft import Eagle3Draft
from ..errors import DataError, ServingArgsError, UnsupportedDraftError
from .loop import d2t_reading
from .items import as_samples, prepared, requested_layout
from .stats import ReplayItem, ReplayOptions, ReplaySetup, json_number, score
from ..sglang_engine.tree import TreeBuilder, num_candidates, select_tree, top_children
from ..progress import bar


def check_setting(setting) -> tuple[int, int, int]:
    """(num_steps, topk, num_draft_tokens) as ints, or ServingArgsError naming what SGLang would refuse."""
    try:
        if isinstance(setting, (str, bytes)):
            raise TypeError("a string")
        steps, topk, ndt = (int(x) for x in setting)
    except (TypeError, ValueError):
        raise ServingArgsError(f"tree setting {setting!r}", "not a (num_steps, topk, num_draft_tokens) triple",
                               expected="three integers, e.g. (5, 4, 8)", found=repr(setting)) from None
    if steps < 1 or topk < 1 or not 2 <= ndt <= num_candidates(steps, topk) + 1:
        raise ServingArgsError(f"tree setting {setting!r}", "no tree SGLang could run",
                               expected="num_steps, topk >= 1 and num_draft_tokens in 2..topk + (steps-1)*topk^2 + 1",
                               found=(steps, topk, ndt), cause="SGLang fails in torch.topk (organize_draft_results)")
    return steps, topk, ndt


def label_of(setting) -> str:
    steps, topk, ndt = setting
    return f"chain K={steps}" if topk == 1 and ndt == steps + 1 else f"tree ({steps}, {topk}, {ndt})"


def _attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, diag: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Attention over causal context keys plus per-position 'diagonal' keys (the slot's own earlier steps).

    The same arithmetic, in the same order, as the draft's TTT attention, so a topk-1 tree replays bit for bit
    what replay's chain simulation does. q (B, nh, T, hd); k, v (B, nkv, T, hd); diag: (B, nkv, T, hd) pairs.
    """
    rep = q.shape[1] // k.shape[1]                          # GQA: nkv -> nh
    if not diag:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=rep > 1)
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale              # (B, nh, T, hd) x (B, nh, hd, T) -> (B, nh, T, T)
    scores = scores.masked_fill(~allowed, float("-inf"))
    dk = [kd.repeat_interleave(rep, dim=1) for kd, _ in diag]
    dv = [vd.repeat_interleave(rep, dim=1) for _, vd in diag]
    d_scores = torch.stack([(q * kd).sum(-1) for kd in dk], dim=-1) * scale   # (B, nh, T, j)
    probs = torch.cat([scores, d_scores], dim=-1).float().softmax(-1).to(q.dtype)   # (B, nh, T, T + j)
    S = k.shape[2]
    out = probs[..., :S] @ v                                # (B, nh, T, T) x (B, nh, T, hd) -> (B, nh, T, hd)
    for j, vd in enumerate(dv):
        out = out + probs[..., S + j, None] * vd            # (B, nh, T, 1) * (B, nh, T, hd)
    return out


def tree_candidates(model: Eagle3Draft, aux: Tensor, input_ids: Tensor, steps: int, topk: int) -> TreeBuilder:
    """Every position's round of candidates: aux (B, T, k*Ht), ids (B, T) -> a TreeBuilder with leading (B, T)."""
    B, T = input_ids.shape
    S, layers = topk, model.decoder_layers
    h = model.fuse(aux)                                                      # (B, T, k*Ht) -> (B, T, H)
    H = h.shape[-1]
    pos = torch.arange(T, device=input_ids.device)[None].expand(B, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()[None, None]   # (1, 1, T, T)
    tokens = F.pad(input_ids, (0, 1))[:, 1:T + 1]                            # step 0: token t+1
    cos, sin = model.rotary(pos, h.dtype)
    emb, out, k0, v0 = model.embed_tokens(tokens), h, [], []                  # k0 / v0: per layer
    for layer in layers:                                                     # every layer; the last one's output
        u, residual = layer.inputs(emb, out)
        q, k, v = layer.self_attn.qkv(u, cos, sin)
        k0.append(k)
        v0.append(v)
        out = layer.finish(layer.self_attn.out(_attend(q, k, v, causal, [])), residual)
    logits, h = model.head(out)                                              # (B, T, Vd), (B, T, H)
    tree = TreeBuilder(topk)
    p, idx = top_children(logits, topk)                                      # (B, T, S)
    tok = tree.expand_root(p, model.to_target_ids(idx))
    hs = h[:, :, None].expand(B, T, S, H)                                    # (B, T, H) -> (B, T, S, H)
    k0 = [k.repeat_interleave(S, dim=0) for k in k0]                         # (B, nkv, T, hd) -> (B*S, ...)
    v0 = [v.repeat_interleave(S, dim=0) for v in v0]
    pos = pos.repeat_interleave(S, dim=0)                                    # (B, T) -> (B*S, T)
    diag: list[list[tuple[Tensor, Tensor]]] = [[] for _ in layers]           # per layer
    for i in range(1, steps):
        cos, sin = model.rotary(pos + i, h.dtype)
        slot_tok = tok.permute(0, 2, 1).reshape(B * S, T)                    # (B, T, S) -> (B*S, T)
        slot_h = hs.permute(0, 2, 1, 3).reshape(B * S, T, H)                 # (B, T, S, H) -> (B*S, T, H)
        emb, out = model.embed_tokens(slot_tok), slot_h
        for j, layer in enumerate(layers):
            u, residual = layer.inputs(emb, out)
            q, k, v = layer.self_attn.qkv(u, cos, sin)
            diag[j].append((k, v))                                           # slot r keeps slot r's keys (SGLang)
            out = layer.finish(layer.self_attn.out(_attend(q, k0[j], v0[j], causal, diag[j])), residual)
        lg, hn = model.head(out)                                             # (B*S, T, Vd), (B*S, T, H)
        p, idx = top_children(lg, topk)                                      # (B*S, T, topk)
        p = p.view(B, S, T, topk).permute(0, 2, 1, 3)                        # -> (B, T, S, topk)
        idx = idx.view(B, S, T, topk).permute(0, 2, 1, 3)
        tok, parent = tree.expand(p, model.to_target_ids(idx))               # (B, T, S) each
        hn = hn.view(B, S, T, H).permute(0, 2, 1, 3)                         # (B*S, T, H) -> (B, T, S, H)
        hs = hn.gather(2, parent[..., None].expand(B, T, S, H))              # the true parent's state per slot
    return tree


class TreeCounts:
    """Accept-length histograms per setting (integer counts; `merge` adds another shard's exactly)."""

    def __init__(self, settings):
        want = [check_setting(s) for s in settings]
        want += [(s, 1, s + 1) for s, _, _ in want]                          # the chain of the same depth
        self.settings = tuple(dict.fromkeys(sorted(want, key=lambda x: (x[0], x[1], x[2]))))
        self.K = max(s for s, _, _ in self.settings)
        self.hist = {st: torch.zeros(st[0] + 2, dtype=torch.long) for st in self.settings}
        self.kinds, self.notes, self.skipped, self.layout = set(), set(), [], None

    def merge(self, other: "TreeCounts") -> "TreeCounts":
        if other.settings != self.settings:
            raise DataError("TreeCounts.merge", "counts of different settings", expected=self.settings,
                            found=other.settings)
        for st in self.settings:
            self.hist[st] += other.hist[st]
        self.kinds, self.notes = self.kinds | other.kinds, self.notes | other.notes
        self.skipped += other.skipped
        self.layout = self.layout or other.layout
        return self

    def count_batch(self, model: Eagle3Draft, batch: list[ReplayItem], mask_mode: str = "token"):
        """One padded batch: every setting's accept length at every fully scored position."""
        B, T = len(batch), max(len(b.ids) for b in batch)
        dev, dt = model.fc.weight.device, model.fc.weight.dtype
        ids = torch.zeros(B, T, dtype=torch.long)
        aux = torch.zeros(B, T, batch[0].aux.shape[1], dtype=dt)
        want = torch.full((B, T, self.K), -2, dtype=torch.long)              # reference of depth d at t, -2: none
        full = torch.zeros(B, T, dtype=torch.bool)
        for i, b in enumerate(batch):                                        # right padding: causal, never seen
            t = len(b.ids)
            ids[i, :t], aux[i, :t] = b.ids, b.aux.to(dt)
            sc = score(torch.zeros(self.K, t, dtype=torch.long), b.ref, b.mask,
                       torch.ones(model.cfg.vocab_size, dtype=torch.bool), None, mask_mode)
            want[i, :t] = torch.where(sc.valid, sc.reference, torch.full_like(sc.reference, -2)).T   # (K, t) -> (t, K)
            full[i, :t] = sc.horizon >= self.K
            self.kinds.add(b.kind)
            self.notes.update([b.note] if b.note else [])
            self.layout = self.layout or b.layout
        ids, aux, want = ids.to(dev), aux.to(dev), want.to(dev)
        for topk in sorted({k for _, k, _ in self.settings}):
            mine = [st for st in self.settings if st[1] == topk]
            built = tree_candidates(model, aux, ids, max(s for s, _, _ in mine), topk)
            for steps, _, ndt in mine:
                scores, tokens, parents, depths = built.candidates(steps)
                tree = select_tree(scores, tokens, parents, depths, ndt, torch.zeros(B, T, dtype=torch.long,
                                                                                      device=dev))
                node_want = want.gather(-1, (tree.depths - 1).clamp(min=0))   # (B, T, K) -> (B, T, n)
                acc = tree.accept_length(node_want).cpu()                     # (B, T)
                self.hist[(steps, topk, ndt)] += torch.bincount(acc[full], minlength=steps + 2)[:steps + 2]

    def result(self, label: str | None = None) -> "TreeReplayResult":
        rows, depth_rows, hist_rows = [], [], []
        chain = {}
        for st in self.settings:
            h = self.hist[st].tolist()
            tot = sum(h)
            tau = sum(a * c for a, c in enumerate(h)) / tot if tot else float("nan")
            if st[1] == 1 and st[2] == st[0] + 1:
                chain[st[0]] = tau
            for d in range(1, st[0] + 1):
                depth_rows.append({"setting": label_of(st), "num_steps": st[0], "topk": st[1],
                                   "num_draft_tokens": st[2], "depth": d,
                                   "rate": sum(h[d + 1:]) / tot if tot else float("nan")})
            for a in range(1, st[0] + 2):
                hist_rows.append({"setting": label_of(st), "accepted": a, "count": h[a],
                                  "fraction": h[a] / tot if tot else float("nan")})
            rows.append({"setting": label_of(st), "num_steps": st[0], "topk": st[1], "num_draft_tokens": st[2],
                         "kind": "chain" if st[1] == 1 else "tree", "positions": tot, "accept_length": tau})
        table = pd.DataFrame(rows)
        table["chain_accept_length"] = [chain.get(s, float("nan")) for s in table.num_steps]
        table["gain_over_chain"] = table.accept_length - table.chain_accept_length
        ref = "mixed" if len(self.kinds) > 1 else next(iter(self.kinds), "none")
        return TreeReplayResult(label or ",".join(self.layout or ()), tuple(self.layout or ()), self.settings,
                                table, pd.DataFrame(depth_rows), pd.DataFrame(hist_rows),
                                int(table.positions.iloc[0]) if len(table) else 0, ref,
                                tuple((w, r) for _, w, r in sorted(self.skipped, key=lambda x: x[0])),
                                tuple(sorted(self.notes)))


@dataclass(frozen=True, eq=False)
class TreeReplayResult:
    """Simulated acceptance of tree (and chain) settings on the same positions: tables are DataFrames."""
    label: str
    layout: tuple[str, ...]
    settings: tuple[tuple[int, int, int], ...]
    table: pd.DataFrame        # setting, num_steps, topk, num_draft_tokens, kind, positions, accept_length, chain_...
    per_depth: pd.DataFrame    # setting, ..., depth, rate = P(drafts up to this depth accepted), unconditional
    histogram: pd.DataFrame    # setting, accepted (incl. the bonus), count, fraction
    positions: int
    reference: str             # "target", "data" or "mixed"
    skipped: tuple[tuple[str, str], ...]
    notes: tuple[str, ...] = ()

    def accept_length(self, num_steps: int, topk: int, num_draft_tokens: int) -> float:
        """Simulated accept length (bonus included) of one replayed setting."""
        t = self.table
        row = t[(t.num_steps == num_steps) & (t.topk == topk) & (t.num_draft_tokens == num_draft_tokens)]
        if row.empty:
            raise ServingArgsError(f"tree replay {self.label!r}", "setting not replayed",
                                   expected=[tuple(s) for s in self.settings],
                                   found=(num_steps, topk, num_draft_tokens))
        return float(row.accept_length.iloc[0])

    def summary(self) -> dict:
        """Flat JSON-able dict: accept length per setting and the positions behind them."""
        return {"label": self.label, "positions": self.positions, "reference": self.reference,
                "skipped": len(self.skipped),
                "accept_length": {r.setting: json_number(r.accept_length) for r in self.table.itertuples()}}


def replay_tree(setup: ReplaySetup, data, settings=((5, 4, 8),), *, layout=None, label: str | None = None,
                n: int | None = None, seed: int = 0, data_format: str | None = None, fill: str = "error",
                d2t: str = "offsets", align: int = 0, mask: str = "token", reference: str = "auto",
                batch_tokens: int = 8192, recapture=None, progress: bool = True) -> TreeReplayResult:
    """Simulated accept length of each (num_steps, topk, num_draft_tokens) setting (and its chain) on samples.

    Inputs, layout, d2t, reference and skips as `replay.replay`; `batch_tokens` bounds B x T x topk per forward.
    """
    ReplayOptions(fill=fill, d2t=d2t, align=align, mask=mask, reference=reference)   # checked once, as replay()
    if setup.cfg.parallel_drafting:
        raise UnsupportedDraftError(setup.draft_path, "tree replay of a P-EAGLE draft", expected="an EAGLE-3 draft",
                                    found="P-EAGLE (parallel drafting)", cause="P-EAGLE drafts one chain of K tokens "
                                    "in one forward (vLLM parallel_drafting has no tree): replay() scores that chain")
    want = requested_layout(setup, layout)
    counts = TreeCounts(settings)
    widest = max(k for _, k, _ in counts.settings)
    samples, ds, total = as_samples(data, n, seed, data_format)
    skipped0 = len(ds.skipped) if ds is not None else 0
    model = setup.model
    with torch.inference_mode(), d2t_reading(model, d2t), \
            bar(total=total, desc=f"tree replay {label or ''}".strip(), progress=progress,
                unit="sample") as meter:
        batch: list[ReplayItem] = []
        skipped: list = []
        for item in prepared(setup, enumerate(samples), want, skipped=skipped, bar=meter, fill=fill,
                             recapture=recapture, align=align, reference=reference):
            longest = max([len(item.ids)] + [len(b.ids) for b in batch])
            if batch and (len(batch) + 1) * longest * widest > batch_tokens:
                counts.count_batch(model, batch, mask)
                batch = []
            batch.append(item)
        if batch:
            counts.count_batch(model, batch, mask)
    counts.skipped += [(key, f"sample '{s.id}' ({s.source})", str(e)) for key, s, e in skipped]
    if ds is not None:
        counts.skipped += [(-1 - i, *x) for i, x in enumerate(ds.skipped[skipped0:])]
    return counts.result(label)
