"""The training samples decide which shipped tensor is not what was trained: the artifact half of the
counterfactual search (replay.counterfactual searches the config fields).

A draft that fails its own training samples under its shipped config may carry a tensor other than the trained
one: a d2t regenerated in another order or from another vocabulary, lm_head rows reordered, an embedding swapped,
weights tied otherwise. The training samples say what each draft id stands for: replayed with d2t read as the
identity, the draft's top-1 draft id at every scored position meets the target token training taught it there
(`recover_map`: per draft id, the target token it predicts most often, on samples drawn apart from those scored).
`search_artifacts` then replays the scored samples with each tensor set otherwise, one at a time:
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
Usage: ``s = search_artifacts(setup, data, recorded=0.92); s.findings()``.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd
import torch

from ..causes import Finding
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
N_FIT = 32              # training samples the map is recovered from (drawn apart from the scored ones: FIT_SEED)
FIT_SEED = 1
SAME_IDS = 0.95        # a recovered map with this share of its ids in the shipped set maps onto the same ids
AGREES = 0.95          # ... and with this share mapped as shipped, it is the shipped map
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


def recover_map(setup: ReplaySetup, data, *, n: int = N_FIT, seed: int = FIT_SEED, recapture=None) -> RecoveredMap:
    """The draft's top-1 draft id against the training target at every scored step-0 position of `n` samples."""
    samples, _, _ = as_samples(data, n, seed)
    pairs: Counter = Counter()
    items = prepared_items(samples, setup, setup.training_layout, fill="zeros", recapture=recapture)
    for r in draft_run(setup.model, items, num_steps=1, d2t="identity", simulate=False):
        ok = r.scored.valid[0]
        pairs.update(zip(r.teacher[0][ok].tolist(), r.scored.reference[0][ok].tolist()))
    vd = setup.model.d2t.numel()
    best: dict[int, tuple[int, int]] = {}
    for (d, t), c in pairs.items():
        if 0 <= d < vd and c > best.get(d, (None, 0))[1]:
            best[d] = (t, c)
    shipped = draft_to_target(setup.model.d2t.cpu()).tolist()
    have, weight = set(shipped), sum(c for _, c in best.values())      # each recovered id weighs its positions
    same = sum(c for t, c in best.values() if t in have) / weight if weight else float("nan")
    agree = sum(c for d, (t, c) in best.items() if shipped[d] == t) / weight if weight else float("nan")
    return RecoveredMap(tuple(best[i][0] if i in best else None for i in range(vd)), sum(pairs.values()),
                        all(a < b for a, b in zip(shipped, shipped[1:])), same, agree)


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
                  "note": c.note or ("restores" if c is r else "")} for c in self.candidates]
        return pd.DataFrame(rows)

    def findings(self) -> list[Finding]:
        """The tensor that restores the training samples, confirmed with its fix and both accuracies; none when
        no tensor restores them (the shortfall stays the config search's and the layout search's to explain)."""
        r = self.restoring
        if r is None:
            return []
        m = self.recovered
        ev = {"tensor": r.tensor, "how": r.how, "acc0_as_shipped": round(self.shipped_acc0, 4),
              "acc0_restored": round(r.acc0, 4), "margin": round(self.margin(r), 4), "positions": self.positions,
              "recorded": self.recorded, "candidates": {c.how: None if math.isnan(c.acc0) else round(c.acc0, 4)
                                                        for c in self.candidates}}
        if m is not None:
            ev.update(map_positions=m.positions, draft_ids_seen=m.seen, shipped_ascending=m.shipped_ascending,
                      recovered_on_shipped_ids=round(m.same_ids, 4), recovered_as_shipped=round(m.agrees, 4))
        why = ""
        if r.tensor in ("d2t", "lm_head") and m is not None:
            why = (f"; on the training targets {m.agrees:.0%} of the draft's predictions map as the shipped d2t says "
                   f"({m.seen} draft ids recovered from {m.positions} positions), "
                   + ("the shipped target ids ascend and the recovered ones are the same ids: the lm_head rows are "
                      "in another order" if r.tensor == "lm_head" else
                      "the shipped map's target ids are out of the ascending order writers store them in"
                      if not m.shipped_ascending and m.same_ids >= SAME_IDS else
                      "the recovered map points at other target ids: the d2t comes from another vocabulary"))
        rec = f", recorded {self.recorded:.2f}" if self.recorded is not None else ""
        held = (f"the stand-in for its missing {r.tensor}" if self.cause_of(r.tensor) == "lm_head_missing" else
                f"its shipped {r.tensor}")
        return [Finding(self.cause_of(r.tensor), "confirmed", f"the draft fails its own training samples with {held} "
                        f"(step-0 accuracy {self.shipped_acc0:.2f}{rec}) and scores {r.acc0:.2f} with "
                        f"{r.how}{why}", ev, WHERE, fix=f"{r.fix}: {self.shipped_acc0:.2f} -> {r.acc0:.2f}",
                        measured=True)]


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
    """(tensor, how, fix, replacements) to replay."""
    model, out = setup.model, []
    ids = draft_to_target(model.d2t.cpu()).clamp(0, model.cfg.vocab_size - 1)     # an absolute d2t points past V
    if m is not None and m.seen and m.agrees < AGREES:
        d2t = m.offsets(model.d2t)
        out.append(("d2t", "d2t recovered from the training targets", "write the recovered d2t (each draft id's "
                    "target id, from the training samples) with its t2d", {"d2t": d2t}))
        pos = {int(t): i for i, t in enumerate(ids.tolist())}
        order: dict[int, int] = {}
        for i, t in enumerate(m.target_ids):      # row i predicts target t: move it where the shipped d2t puts t
            if t is not None and t in pos and pos[t] not in order:
                order[pos[t]] = i
        rest = iter(sorted(set(range(ids.numel())) - set(order.values())))     # the rows nothing placed, in order
        perm = torch.tensor([order[p] if p in order else next(rest) for p in range(ids.numel())])
        rows = model.lm_head.weight.data.clone()[perm]
        out.append(("lm_head", "lm_head rows reordered by the recovered map", "reorder lm_head.weight's rows so row i "
                    "is the shipped d2t's target id of draft id i", {"lm_head": rows}))
    head = setup.lm_head
    if head is not None and head.shape[1] == model.lm_head.weight.shape[1]:
        out.append(("lm_head", "the target's lm_head rows of the draft vocabulary", "ship the target's lm_head rows "
                    "of the draft vocabulary (lm_head.weight = target lm_head[d2t's target ids])",
                    {"lm_head": head[ids.to(head.device)]}))
    if tied and model.embed_tokens.weight.shape[1] == model.lm_head.weight.shape[1]:
        out.append(("lm_head", "tied: the embedding's rows as lm_head", "tie lm_head to the embedding "
                    "(tie_word_embeddings) or ship the trained lm_head", {"lm_head": model.embed_tokens.weight.data[
                        ids.to(model.embed_tokens.weight.device)].clone()}))
    if own_embed and setup.target_path:
        try:
            out.append(("embed_tokens", "the target's embedding instead of the shipped embed_tokens",
                        "ship no embed_tokens (engines share the target's) or the target's own",
                        {"embed": load_target_tensor(setup.target_path, "embed")}))
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
        m = recover_map(setup, data, recapture=recapture) if setup.training_layout is not None else None
    except Eagle3Error as e:
        m, notes = None, [f"the map could not be recovered: {e}"]
    done = []
    for tensor, how, fix, repl in _candidates(setup, m, own_embed, tied):
        try:
            a, p = _acc0(setup, data, n=n, recapture=recapture, **repl)
            done.append(Candidate(tensor, how, fix, a, p))
        except Eagle3Error as e:
            done.append(Candidate(tensor, how, fix, note=f"not replayed: {e}"))
    return ArtifactSearch(shipped_acc0, positions, recorded, tuple(done), m, tuple(notes),
                          tuple(f.key for f in setup.filled))


def with_restored(setup: ReplaySetup, s: ArtifactSearch) -> dict:
    """The tensors of the restoring candidate ({} when none restores), to replay 'as trained' with."""
    r = s.restoring
    if r is None:
        return {}
    want = next((repl for tensor, how, _, repl in _candidates(setup, s.recovered, True, True)
                 if (tensor, how) == (r.tensor, r.how)), {})
    return dict(want)
