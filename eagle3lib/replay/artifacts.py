"""The training samples decide which shipped tensor is not what was trained: the artifact half of the
counterfactual search (replay.counterfactual searches the config fields).

A draft that fails its own training samples under its shipped config may carry a tensor other than the trained
one: a d2t regenerated in another order or from another vocabulary, lm_head rows reordered, an embedding swapped,
weights tied otherwise. The training samples say what each draft id stands for: replayed with d2t read as the
identity, the draft's top-1 draft id at every scored position meets the target token training taught it there
(`recover_map`: per draft id, the target token it predicts most often on the scored samples). A map fitted to the
positions it is scored on restores anything (a random draft "scores" 0.9 with the map of its own 100 predictions),
so a map-made candidate is scored held out: every other scored position with the map fitted on the rest, and the
rest with the map fitted on those (`HeldOut`); the fix ships the map of every position. `search_artifacts` scores
the samples with each tensor set otherwise, one at a time:
- **d2t recovered** from the training targets (a draft id never predicted keeps its shipped target id);
- **lm_head rows reordered** by the recovered map, the shipped d2t kept (the same draft computation: the samples
  cannot tell the two apart, so the tensor named is the one a writer's own convention clears: writers store the
  draft vocabulary's target ids ascending (model.vocab), so a shipped map out of that order, or a recovered map
  onto other target ids, is the d2t; an ascending map onto the same ids leaves the lm_head rows);
- **the target's lm_head rows** of the draft vocabulary, and **tied** (the embedding's rows as lm_head);
- **the target's embedding** instead of the draft's own shipped embed_tokens.
A candidate restores when it gains the counterfactual search's margin (`MIN_GAIN`, `Z` standard errors) and no
longer fails the training samples (`fails_own_samples`): a map fitted to a draft broken
elsewhere betters a few positions, it does not reproduce training. The finding names the tensor, the fix and the
accuracy it restores.
Usage: ``s = search_artifacts(setup, data, recorded=0.92)``; judged by `checks.restoring.tensor_findings(s)`.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd
import torch

from ..errors import Eagle3Error
from ..model.target import load_target_tensor
from ..model.vocab import absolute_to_offsets, draft_to_target
from .counterfactual import MIN_GAIN, Z
from .items import as_samples, prepared_items
from .loop import draft_run
from .run import replay
from .stats import ReplaySetup
from .verdict import THRESHOLDS

WHERE = "replay.artifacts (the training samples under each shipped tensor set otherwise)"
SAME_IDS = 0.95        # a recovered map with this share of its ids in the shipped set maps onto the same ids
AGREES = 0.95          # ... and with this share mapped as shipped, it is the shipped map
N_FIT = 32              # training samples beyond the scored ones the map is also fitted on (never scored)
EQUAL = 0.02           # candidates within this step-0 accuracy of the best restore alike
CAUSE = {"d2t": "d2t_mapping", "lm_head": "draft_tensor_differs", "embed_tokens": "wrong_embedding"}


@dataclass(frozen=True)
class RecoveredMap:
    """What each draft id stands for on the training samples: its most frequent target token where it was the
    draft's top-1 (None: never predicted), and how the recovered map stands against the shipped d2t."""
    target_ids: tuple[int | None, ...]      # per draft id
    positions: int                          # scored positions it was recovered from
    shipped_ascending: bool                 # the shipped d2t's target ids ascend (as writers store them)
    same_ids: float                         # share of the recovered ids (by their positions) in the shipped set
    agrees: float                           # ... mapped as the shipped d2t maps them
    held_out: "HeldOut | None" = None       # the map-made candidates scored on positions their map was not fitted on
    weights: tuple[int, ...] = ()           # per draft id: the positions its target was met at (0: never predicted)

    @property
    def seen(self) -> int:
        return sum(t is not None for t in self.target_ids)

    def offsets(self, shipped: torch.Tensor) -> torch.Tensor:
        """d2t offsets of the recovered map (a draft id never predicted keeps its shipped target id)."""
        ids = draft_to_target(shipped.cpu()).clone()
        for i, t in enumerate(self.target_ids):
            if t is not None:
                ids[i] = t
        return absolute_to_offsets(ids).to(shipped)

    def tensor(self) -> str:
        """The tensor the recovered map points at: d2t, unless the shipped map is ascending onto the same ids."""
        return "lm_head" if self.shipped_ascending and self.same_ids >= SAME_IDS else "d2t"


def recover_map(setup: ReplaySetup, data, *, n: int = 16, seed: int = 0, recapture=None) -> RecoveredMap:
    """The draft's top-1 draft id against the training target at every scored step-0 position of the `n` samples the
    search scores and of up to `N_FIT` more: the map of them all, and its candidates scored held out (`HeldOut`)."""
    samples, _, _ = as_samples(data, n + N_FIT, seed)        # the first n are the search's (same seed, same order)
    scored: set[str] = set()

    def tagged():
        for i, sample in enumerate(samples):
            if i < n:
                scored.add(sample.id)
            yield sample
    got = {True: ([], []), False: ([], [])}                  # scored?: (draft ids, target ids)
    items = prepared_items(tagged(), setup, setup.training_layout, fill="zeros", recapture=recapture)
    for r in draft_run(setup.model, items, num_steps=1, d2t="identity", simulate=False):
        ok = r.scored.valid[0]
        ds, ts = got[r.item.id in scored]
        ds += r.teacher[0][ok].tolist()
        ts += r.scored.reference[0][ok].tolist()
    vd = setup.model.d2t.numel()
    shipped = draft_to_target(setup.model.d2t.cpu()).tolist()
    draft_ids, targets = got[True][0] + got[False][0], got[True][1] + got[False][1]
    best = most_frequent(draft_ids, targets, vd)
    have, weight = set(shipped), sum(c for _, c in best.values())      # each recovered id weighs its positions
    same = sum(c for t, c in best.values() if t in have) / weight if weight else float("nan")
    agree = sum(c for d, (t, c) in best.items() if shipped[d] == t) / weight if weight else float("nan")
    ids = tuple(best[i][0] if i in best else None for i in range(vd))
    return RecoveredMap(ids, len(draft_ids), all(a < b for a, b in zip(shipped, shipped[1:])), same, agree,
                        held_out(*got[True], *got[False], shipped), tuple(best[i][1] if i in best else 0
                                                                           for i in range(vd)))


def most_frequent(draft_ids: list[int], targets: list[int], vd: int) -> dict[int, tuple[int, int]]:
    """{draft id: (the target it meets most often where it is the top-1, how often)} of ids in [0, vd)."""
    pairs = Counter(zip(draft_ids, targets))
    best: dict[int, tuple[int, int]] = {}
    for (d, t), c in pairs.items():
        if 0 <= d < vd and c > best.get(d, (None, 0))[1]:
            best[d] = (t, c)
    return best


@dataclass(frozen=True)
class HeldOut:
    """Step-0 hits of the map-made candidates on positions their map was not fitted on: the search's scored
    positions in two halves (every other one), each scored with the map fitted on the other half and the samples
    beyond the scored ones; `positions` scored in all."""
    d2t_hits: int          # the recovered d2t
    rows_hits: int         # the shipped d2t with lm_head rows reordered by the recovered map
    positions: int


def held_out(draft_ids: list[int], targets: list[int], more_ids: list[int], more_targets: list[int],
             shipped: list[int]) -> HeldOut:
    """Each half of the scored positions (`draft_ids`, `targets`) predicted with the map fitted on the other half and
    on the positions of the samples beyond the scored ones (`more_*`)."""
    d, t = torch.tensor(draft_ids, dtype=torch.long), torch.tensor(targets, dtype=torch.long)
    ship = torch.tensor(shipped, dtype=torch.long)
    hits = [0, 0]
    for half in (0, 1):
        best = most_frequent(d[1 - half::2].tolist() + more_ids, t[1 - half::2].tolist() + more_targets, len(shipped))
        recovered = tuple(best[i][0] if i in best else None for i in range(len(shipped)))
        weights = tuple(best[i][1] if i in best else 0 for i in range(len(shipped)))
        as_d2t = ship.clone()                                   # draft id -> target id under the recovered d2t
        for i, x in enumerate(recovered):
            if x is not None:
                as_d2t[i] = x
        # under lm_head rows reordered: draft id -> the target id of the place its old row moved to
        rows = ship[torch.argsort(row_order(recovered, shipped, weights))]
        hits[0] += int((as_d2t[d[half::2]] == t[half::2]).sum())
        hits[1] += int((rows[d[half::2]] == t[half::2]).sum())
    return HeldOut(hits[0], hits[1], len(draft_ids))


def row_order(recovered: tuple[int | None, ...], shipped: list[int], weights=()) -> torch.Tensor:
    """perm with new lm_head row p = old row perm[p]: row i, which predicts target recovered[i], moved where the
    shipped d2t puts that target (rows claiming one place: the one seen at most positions, `weights`, wins); the
    rows nothing placed fill the rest in order."""
    pos = {int(t): i for i, t in enumerate(shipped)}
    order: dict[int, int] = {}
    claims = sorted(range(len(recovered)), key=lambda i: -weights[i] if weights else 0)
    for i in claims:
        t = recovered[i]
        if t is not None and t in pos and pos[t] not in order:
            order[pos[t]] = i
    rest = iter(sorted(set(range(len(shipped))) - set(order.values())))
    return torch.tensor([order[p] if p in order else next(rest) for p in range(len(shipped))], dtype=torch.long)


@dataclass(frozen=True)
class Candidate:
    """One tensor set otherwise: which, how, the fix it stands for, and what the training samples scored."""
    tensor: str
    how: str
    fix: str
    acc0: float = float("nan")
    positions: int = 0
    note: str = ""


@dataclass(frozen=True)
class ArtifactSearch:
    """The shipped tensors' accuracy on the training samples, every candidate's, the recovered map."""
    shipped_acc0: float
    positions: int
    recorded: float | None
    candidates: tuple[Candidate, ...]
    recovered: RecoveredMap | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    missing: tuple[str, ...] = ()        # tensors the checkpoint lacks (the loader's stand-ins: model.checkpoint)

    def cause_of(self, tensor: str) -> str:
        """The catalogue cause of a tensor that restores: a missing lm_head is lm_head_missing."""
        return "lm_head_missing" if tensor == "lm_head" and "lm_head.weight" in self.missing else CAUSE[tensor]

    def margin(self, c: Candidate) -> float:
        p = min(max((self.shipped_acc0 + c.acc0) / 2, 1e-3), 1 - 1e-3)
        return max(MIN_GAIN, Z * math.sqrt(2 * p * (1 - p) / max(min(self.positions, c.positions), 1)))

    @property
    def restoring(self) -> Candidate | None:
        """The candidate that restores the most, by the margin (ties: the tensor the recovered map points at)."""
        ok = [c for c in self.candidates if not math.isnan(c.acc0) and c.acc0 - self.shipped_acc0 > self.margin(c)
              and not fails_own_samples(c.acc0, self.recorded)]      # restored: training reproduced, not just bettered
        if not ok:
            return None
        named = self.recovered.tensor() if self.recovered is not None else "d2t"
        best = max(c.acc0 for c in ok)
        near = [c for c in ok if c.acc0 >= best - EQUAL]      # as good: the tensor the map points at is named
        return max(near, key=lambda c: (c.tensor == named, c.acc0))

    def frame(self) -> pd.DataFrame:
        rows = [{"tensor": "as shipped", "how": "", "acc step 0": round(self.shipped_acc0, 4), "gain": 0.0,
                 "margin": None, "note": ""}]
        r = self.restoring
        rows += [{"tensor": c.tensor, "how": c.how, "acc step 0": None if math.isnan(c.acc0) else round(c.acc0, 4),
                  "gain": None if math.isnan(c.acc0) else round(c.acc0 - self.shipped_acc0, 4),
                  "margin": None if math.isnan(c.acc0) else round(self.margin(c), 4),
                  "note": "; ".join(x for x in (c.note, "restores" if c is r else "") if x)} for c in self.candidates]
        return pd.DataFrame(rows)

def fails_own_samples(acc0: float, recorded: float | None) -> bool:
    """The draft scores clearly less on its own training samples than training recorded (the verdict's
    "wiring_drop"), or, with nothing recorded, under its "wiring_floor" (replay.verdict.THRESHOLDS)."""
    if math.isnan(acc0):
        return False
    return acc0 < recorded - THRESHOLDS["wiring_drop"] if recorded is not None else acc0 < THRESHOLDS["wiring_floor"]


def _acc0(setup: ReplaySetup, data, *, n: int, recapture, d2t=None, lm_head=None, embed=None) -> tuple[float, int]:
    """The training samples' step-0 accuracy with tensors of the draft replaced (swapped, never written in place:
    the setup's own tensors are put back unchanged)."""
    m = setup.model
    saved = (m.d2t, m.lm_head.weight.data, m.embed_tokens.weight.data)
    try:
        if d2t is not None:
            changed = saved[0].clone()
            changed.copy_(d2t)                  # as the buffer would take it (its dtype, broadcast)
            m.d2t = changed
        if lm_head is not None:
            m.lm_head.weight.data = lm_head.to(m.lm_head.weight)
        if embed is not None:
            m.embed_tokens.weight.data = embed.to(m.embed_tokens.weight)
        s = replay(setup, data, n=n, num_steps=1, simulate=False, fill="zeros", recapture=recapture,
                   progress=False).summary()
    finally:
        m.d2t = saved[0]
        m.lm_head.weight.data, m.embed_tokens.weight.data = saved[1], saved[2]
    a = s["acc_per_step"][0] if s["acc_per_step"] else None
    return (float(a) if a is not None else float("nan")), int(s["positions"])


def _candidates(setup: ReplaySetup, m: RecoveredMap | None, own_embed: bool, tied: bool) -> list[tuple]:
    """(tensor, how, fix, replacements, the HeldOut field scoring it: a map-made candidate; None: replayed)."""
    model, out = setup.model, []
    ids = draft_to_target(model.d2t.cpu()).clamp(0, model.cfg.vocab_size - 1)     # an absolute d2t points past V
    if m is not None and m.seen and m.agrees < AGREES:
        d2t = m.offsets(model.d2t)
        out.append(("d2t", "d2t recovered from the training targets", "write the recovered d2t (each draft id's "
                    "target id, from the training samples) with its t2d", {"d2t": d2t}, "d2t_hits"))
        perm = row_order(m.target_ids, ids.tolist(), m.weights)
        rows = model.lm_head.weight.data[perm.to(model.lm_head.weight.device)]
        out.append(("lm_head", "lm_head rows reordered by the recovered map", "reorder lm_head.weight's rows so row i "
                    "is the shipped d2t's target id of draft id i", {"lm_head": rows}, "rows_hits"))
    head = setup.lm_head
    if head is not None and head.shape[1] == model.lm_head.weight.shape[1]:
        out.append(("lm_head", "the target's lm_head rows of the draft vocabulary", "ship the target's lm_head rows "
                    "of the draft vocabulary (lm_head.weight = target lm_head[d2t's target ids])",
                    {"lm_head": head[ids.to(head.device)]}, None))
    if tied and model.embed_tokens.weight.shape[1] == model.lm_head.weight.shape[1]:
        out.append(("lm_head", "tied: the embedding's rows as lm_head", "tie lm_head to the embedding "
                    "(tie_word_embeddings) or ship the trained lm_head", {"lm_head": model.embed_tokens.weight.data[
                        ids.to(model.embed_tokens.weight.device)].clone()}, None))
    if own_embed and setup.target_path:
        try:
            out.append(("embed_tokens", "the target's embedding instead of the shipped embed_tokens",
                        "ship no embed_tokens (engines share the target's) or the target's own",
                        {"embed": load_target_tensor(setup.target_path, "embed")}, None))
        except Eagle3Error:
            pass
    return out


def search_artifacts(setup: ReplaySetup, data, *, recorded: float | None = None, shipped_acc0: float | None = None,
                     positions: int = 0, n: int = 16, recapture=None, own_embed: bool = False,
                     tied: bool = False) -> ArtifactSearch:
    """Replay `n` training samples with each candidate tensor (module docstring). `shipped_acc0` / `positions`:
    the shipped draft's accuracy on the same samples when already replayed (the config search's); `own_embed`:
    the checkpoint ships embed_tokens; `tied`: its config says tie_word_embeddings."""
    notes = []
    if shipped_acc0 is None or math.isnan(shipped_acc0):
        shipped_acc0, positions = _acc0(setup, data, n=n, recapture=recapture)
    try:
        m = recover_map(setup, data, n=n, recapture=recapture) if setup.training_layout is not None else None
    except Eagle3Error as e:
        m, notes = None, [f"the map could not be recovered: {e}"]
    done = []
    for tensor, how, fix, repl, held in _candidates(setup, m, own_embed, tied):
        if held is not None and m.held_out is not None:   # scored where its map was not fitted, not replayed
            h = m.held_out
            done.append(Candidate(tensor, how, fix, getattr(h, held) / h.positions if h.positions else float("nan"),
                                  h.positions, note="held out: each half of the positions scored with the map "
                                  "fitted on the other half"))
            continue
        try:
            a, p = _acc0(setup, data, n=n, recapture=recapture, **repl)
            done.append(Candidate(tensor, how, fix, a, p))
        except Eagle3Error as e:
            done.append(Candidate(tensor, how, fix, note=f"not replayed: {e}"))
    return ArtifactSearch(shipped_acc0, positions, recorded, tuple(done), m, tuple(notes),
                          tuple(f.key for f in setup.filled))
