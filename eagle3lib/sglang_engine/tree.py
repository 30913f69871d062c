"""SGLang-style draft trees (EAGLE-2/3, topk > 1): top-k expansion per step, num_draft_tokens nodes kept by
cumulative score, the tree attention mask, greedy acceptance of the longest matching path.

Node selection follows SGLang's rules as of v0.5.x (read in python/sglang/srt/speculative/ at commit 009db01
of build_eagle_tree.py and the eagle/spec utils of the same era; unchanged in substance since v0.4.x):

- `select_top_k_tokens`: step 0 keeps the root's top-k draft tokens (softmax probabilities) as k beams; each later
  step expands every beam by ITS top-k, scores a child by beam score x child probability and keeps the k best of
  the k*k children as the next beams (sorted best first: beam slot 0 is the best). The step's k*k children are all
  candidates, kept or not as beams.
- candidate index (SGLang's flattened score_list / token_list): block 0 = the root's k children (0..k-1); block
  i >= 1 = the k*k children of step i's beams, at k + (i-1)*k^2 + slot*k + child.
- `build_tree_kernel_efficient_preprocess` (formerly organize_draft_results): the num_draft_tokens - 1 candidates
  of highest cumulative score are kept and sorted by candidate index; node 0 is the verified token (the root).
  SGLang's torch.topk breaks score ties arbitrarily; here ties go to the lower index, so a kept node's parent
  (score >= the child's, lower index) is always kept too.
- the sgl-kernel `build_tree_kernel_efficient`: node positions are seq_len + depth; a node attends to the prefix,
  its ancestors and itself. `verify_tree_greedy`: from the root, accept the child whose token equals the target's
  greedy token at the current node, then its children, ...; the target's token at the last accepted node is the
  bonus. Siblings carry distinct tokens, so the path is unique.
- draft-side attention: SGLang gives beam SLOT r the prefix plus the keys slot r wrote at earlier steps
  (generate_draft_decode_kv_indices), not the keys of the beam's true ancestors; the hidden state fed is the true
  parent's. `SlotCache` and `replay.tree_acceptance` reproduce exactly that.

Everything is batched over leading dims (...): the engine uses one tree, replay one per (sample, position).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..model.draft import DraftCache, top1
from ..errors import DataError, ServingArgsError


def num_candidates(steps: int, topk: int) -> int:
    """Candidates a round drafts: topk + (steps - 1) * topk^2 (the most nodes SGLang can keep, root excluded)."""
    return topk + (steps - 1) * topk * topk


def top_children(logits: Tensor, topk: int) -> tuple[Tensor, Tensor]:
    """(probabilities, draft ids) of the top-k draft tokens, best first: (..., Vd) -> (..., topk) each.

    Ranked on the logits (the same order as the softmax, with fewer float ties); topk 1 uses the first-index
    argmax of the chain (`draft.top1`), so a topk-1 tree drafts exactly the chain's tokens.
    """
    probs = logits.to(torch.promote_types(logits.dtype, torch.float32)).softmax(-1)
    idx = top1(logits)[..., None] if topk == 1 else logits.topk(topk, dim=-1).indices   # (..., topk)
    return probs.gather(-1, idx), idx


def best_first(scores: Tensor, k: int) -> Tensor:
    """Indices of the k highest scores on the last dim, best first, ties to the lower index: (..., N) -> (..., k)."""
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]


class TreeBuilder:
    """Collects one round's candidates step by step (SGLang's score_list / token_list / parents_list).

    `root(p, tokens)` takes the root's top-k (..., k); `expand(p, tokens)` the beams' top-k (..., k, k) (beam slot,
    child) and returns which slot each new beam's parent sits in (..., k), for the caller to gather hidden states.
    """

    def __init__(self, topk: int):
        self.topk = topk
        self.scores: list[Tensor] = []      # per block (..., n_block) cumulative probabilities
        self.tokens: list[Tensor] = []      # per block (..., n_block) target ids
        self.parents: list[Tensor] = []     # per block (..., n_block) candidate index of the parent, -1 = root
        self.beam_scores = self.beam_index = None     # (..., k) score and candidate index of each beam slot
        self.offset = 0

    def expand_root(self, p: Tensor, tokens: Tensor) -> Tensor:
        """Block 0: the root's children are the first beams (slot r = candidate r). Returns the beam tokens."""
        self.scores.append(p)
        self.tokens.append(tokens)
        self.parents.append(torch.full_like(tokens, -1))
        self.beam_scores = p
        self.beam_index = torch.arange(self.topk, device=p.device).expand_as(tokens)
        self.offset = self.topk
        return tokens

    def expand(self, p: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Add the beams' children (..., k, k); pick the next beams. Returns (beam tokens, parent slot), (..., k)."""
        k = self.topk
        scores = (self.beam_scores[..., None] * p).flatten(-2)            # (..., k, 1) x (..., k, k) -> (..., k*k)
        flat_tokens = tokens.flatten(-2)                                  # (..., k, k) -> (..., k*k)
        parent = self.beam_index[..., None].expand_as(p).flatten(-2)      # (..., k) -> (..., k*k)
        self.scores.append(scores)
        self.tokens.append(flat_tokens)
        self.parents.append(parent)
        chosen = best_first(scores, k)                                    # (..., k) indices into the block
        self.beam_scores = scores.gather(-1, chosen)
        self.beam_index = chosen + self.offset
        self.offset += k * k
        return flat_tokens.gather(-1, chosen), torch.div(chosen, k, rounding_mode="floor")

    def candidates(self, steps: int | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(scores, tokens, parents, depths) of the first `steps` blocks: (..., N) x 3 and (N,) depths >= 1."""
        n = len(self.scores) if steps is None else steps
        depth = torch.cat([torch.full((b.shape[-1],), i + 1, dtype=torch.long, device=b.device)
                           for i, b in enumerate(self.scores[:n])])
        return (torch.cat(self.scores[:n], -1), torch.cat(self.tokens[:n], -1), torch.cat(self.parents[:n], -1),
                depth)


@dataclass(frozen=True, eq=False)
class DraftTree:
    """Verify tree(s): node 0 is the root (the last verified token), nodes 1.. the kept candidates by index."""

    tokens: Tensor      # (..., n) target ids; node 0 = the root token
    parents: Tensor     # (..., n) parent node, -1 for the root
    depths: Tensor      # (..., n) 0 for the root
    scores: Tensor      # (..., n) cumulative draft probability (1 for the root)
    index: Tensor       # (..., n-1) kept candidates' indices (SGLang's top_scores_index, sorted)

    @property
    def size(self) -> int:
        return self.tokens.shape[-1]

    def mask(self) -> Tensor:
        """(..., n, n) bool: node i attends to node j iff j is i or an ancestor of i."""
        n = self.size
        anc = torch.eye(n, dtype=torch.bool, device=self.tokens.device).expand(*self.tokens.shape, n).clone()
        cur = self.parents
        for _ in range(int(self.depths.max())):
            hit = cur >= 0                                                     # (..., n): an ancestor is left
            anc |= torch.nn.functional.one_hot(cur.clamp(min=0), n).bool() & hit[..., None]   # (..., n, n)
            cur = torch.where(hit, self.parents.gather(-1, cur.clamp(min=0)), cur)
        return anc

    def on_path(self, want: Tensor) -> Tensor:
        """(..., n) bool: node j and all its ancestors carry the token wanted there (`want` (..., n); root: True)."""
        ok = torch.zeros(self.tokens.shape, dtype=torch.bool, device=self.tokens.device)
        ok[..., 0] = True
        match = self.tokens == want
        for j in range(1, self.size):           # parents come before children (lower candidate index)
            up = ok.gather(-1, self.parents[..., j:j + 1].clamp(min=0))[..., 0]
            ok[..., j] = up & match[..., j]
        return ok

    def accept_length(self, want: Tensor) -> Tensor:
        """1 + depth of the deepest node on the wanted path (the bonus token included), (...,)."""
        return 1 + torch.where(self.on_path(want), self.depths, torch.zeros_like(self.depths)).amax(-1)


def select_tree(scores: Tensor, tokens: Tensor, parents: Tensor, depths: Tensor, num_draft_tokens: int,
                root: Tensor) -> DraftTree:
    """Keep the num_draft_tokens - 1 best candidates (..., N) under `root` tokens (...,) (SGLang's rule)."""
    N = scores.shape[-1]
    m = num_draft_tokens - 1
    if not 1 <= m <= N:
        raise ServingArgsError("setting speculative_num_draft_tokens", "verify nodes outside what a round drafts",
                               expected=f"2..{N + 1}", found=num_draft_tokens,
                               cause="SGLang fails the same way in torch.topk (organize_draft_results)")
    kept = torch.sort(best_first(scores, m), dim=-1).values                  # (..., m) candidate indices, sorted
    node_of = torch.full_like(tokens, -1).scatter(-1, kept, torch.arange(1, m + 1, device=kept.device)
                                                  .expand_as(kept).contiguous())   # candidate -> node (-1: dropped)
    par_cand = parents.gather(-1, kept)                                       # (..., m)
    par_node = torch.where(par_cand < 0, torch.zeros_like(par_cand), node_of.gather(-1, par_cand.clamp(min=0)))
    if bool((par_node < 0).any()):
        raise DataError("select_tree", "a kept candidate's parent was dropped", expected="scores that never rise "
                        "from a parent to its child", found=f"{int((par_node < 0).sum())} orphan nodes",
                        cause="candidate scores that are not cumulative probabilities")
    lead = tokens.shape[:-1]
    one = torch.ones(*lead, 1, dtype=scores.dtype, device=scores.device)
    return DraftTree(tokens=torch.cat([root[..., None].to(tokens.dtype), tokens.gather(-1, kept)], -1),
                     parents=torch.cat([torch.full((*lead, 1), -1, dtype=torch.long, device=kept.device), par_node],
                                       -1),
                     depths=torch.cat([torch.zeros(*lead, 1, dtype=torch.long, device=kept.device),
                                       depths[kept]], -1),
                     scores=torch.cat([one, scores.gather(-1, kept)], -1), index=kept)


def greedy_path(tree: DraftTree, target_next: Tensor) -> list[int]:
    """Accepted nodes of one tree, root first: each child's token equals the target's greedy token at its parent.

    target_next (n,): the target's argmax at every node; the bonus token is target_next[path[-1]].
    """
    want = target_next.gather(-1, tree.parents.clamp(min=0))                   # (n,) token wanted at each node
    ok = tree.on_path(want)
    deepest = int(torch.where(ok, tree.depths, torch.full_like(tree.depths, -1)).argmax())
    path = [deepest]
    while path[-1] != 0:
        path.append(int(tree.parents[path[-1]]))
    return path[::-1]


def verify_inputs(tree: DraftTree, prefix_len: int, dtype: torch.dtype, sliding_window: int | None = None) -> dict:
    """position_ids (1, n) and an additive 4D attention mask (1, 1, n, prefix_len + n) for an HF verify forward.

    sliding_window: the target also has sliding-window layers (gpt-oss): the mask is a dict, `full_attention` as
    above and `sliding_attention` also hiding keys `sliding_window` or more positions behind the query (HF's
    sliding rule, q_pos - k_pos < window), which models with layer_types take in place of their own masks."""
    dev = tree.tokens.device
    allowed = torch.cat([torch.ones(tree.size, prefix_len, dtype=torch.bool, device=dev),
                         tree.mask()], dim=-1)                                 # (n, L) + (n, n) -> (n, L + n)

    def additive(ok):
        return torch.zeros(ok.shape, dtype=dtype, device=dev).masked_fill(~ok, torch.finfo(dtype).min)[None, None]

    q_pos = prefix_len + tree.depths                                           # (n,)
    out = {"position_ids": q_pos[None], "attention_mask": additive(allowed)}
    if sliding_window:
        k_pos = torch.cat([torch.arange(prefix_len, device=dev), q_pos])       # (L + n,)
        near = (q_pos[:, None] - k_pos[None, :]) < int(sliding_window)         # (n, 1) - (1, L + n) -> (n, L + n)
        out["attention_mask"] = {"full_attention": out["attention_mask"],
                                 "sliding_attention": additive(allowed & near)}
    return out


def keep_cache_rows(cache, start: int, nodes: list[int]):
    """Keep an HF cache's rows start + nodes (the accepted path) at start.., drop everything after them."""
    idx = torch.tensor(nodes, dtype=torch.long)
    layers = getattr(cache, "layers", None)
    pairs = ([(ly, "keys", "values") for ly in layers] if layers is not None else          # transformers >= 4.56
             [(cache, ("key_cache", i), ("value_cache", i)) for i in range(len(cache.key_cache))])
    for obj, kname, vname in pairs:
        for name in (kname, vname):
            t = getattr(obj, name) if isinstance(name, str) else getattr(obj, name[0])[name[1]]
            rows = t[:, :, start + idx.to(t.device)]                           # (B, nkv, a+1, hd)
            t[:, :, start:start + len(nodes)] = rows
    extra = cache.get_seq_length() - (start + len(nodes))
    if extra > 0:
        cache.crop(-extra)


class SlotCache:
    """The draft KV cache of a tree round (every layer's): one row per beam slot, sharing the prefix (SGLang's
    per-slot KV).

    `lead` is a batch-1 view of row 0 for the prefill / draft extend; `share(lo, hi)` copies its positions lo..hi-1
    into every slot row. `cache` (topk rows) is what the beam steps read and write.
    """

    def __init__(self, cache: DraftCache):
        self.cache = cache
        self.lead = cache.rows(slice(0, 1))

    def share(self, lo: int, hi: int):
        for c in self.cache.layers:                                           # every decoder layer's cache
            c.k[1:, :, lo:hi] = c.k[:1, :, lo:hi]
            c.v[1:, :, lo:hi] = c.v[:1, :, lo:hi]


def draft_tree(draft, logits: Tensor, hidden: Tensor, position: int, slots: SlotCache, steps: int, topk: int,
               num_draft_tokens: int, root: int) -> DraftTree:
    """One round's tree from the draft: step-0 logits (1, Vd) and hidden (1, 1, H) of the root's row.

    Beam step i (1..steps-1) runs the k beams at draft position `position` + i - 1 (each slot its own cache row);
    the tree keeps num_draft_tokens - 1 of the topk + (steps-1)*topk^2 candidates.
    """
    dev = logits.device
    b = TreeBuilder(topk)
    p, ids = top_children(logits[0], topk)                                   # (Vd,) -> (k,), (k,)
    tok = b.expand_root(p, draft.to_target_ids(ids))
    h = hidden[0].expand(topk, 1, hidden.shape[-1])                           # (1, 1, H) -> (k, 1, H)
    for i in range(1, steps):
        pos = torch.full((topk, 1), position + i - 1, dtype=torch.long, device=dev)
        lg, h_new = draft.step(h, tok[:, None], pos, slots.cache)             # (k, 1, Vd), (k, 1, H)
        p, ids = top_children(lg[:, 0], topk)                                 # (k, Vd) -> (k, k)
        tok, parent = b.expand(p, draft.to_target_ids(ids))
        h = h_new[parent]                                                     # true parent's state per new slot
    scores, tokens, parents, depths = b.candidates()
    return select_tree(scores, tokens, parents, depths, num_draft_tokens,
                       torch.tensor(root, dtype=torch.long, device=dev))
