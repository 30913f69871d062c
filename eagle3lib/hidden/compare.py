"""Which tensor is in each aux slot? Slot-vs-boundary similarity and identification.

`compare(slots, reference)` scores every slot of a `capture.Slots` (training data, a serving dump, any tensors with a
declared layout) against every boundary of a `capture.Capture` at token shifts -1..+1 and names each slot's best match
with a confidence. Bad input (token counts, widths,
NaNs) lands in `notes` and the rest is still compared. Numbers come back as DataFrames and frozen dataclasses.
`identify_fc_input` recovers the layout a server fed from a dumped fc output. The words are in `explain.py`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from .capture import Capture, Slots, capture, load_target_model
from .dumps import Dump, load_dump
from ..errors import DataError, LayoutError
from ..layout import ZERO, boundary_names, normalize
from ..progress import track

IDENTIFIED = ("match", "scaled", "rescaled", "dtype", "zeros")   # "zeros": an all-zero padding slot


@dataclass(frozen=True)
class Tolerance:
    """When two tensors count as "the same boundary" at a given precision."""
    dtype: str
    cos_mean: float   # mean per-token cosine at least this
    cos_min: float    # worst token at least this
    rel_l2: float     # ||a - b|| / ||b|| at most this (also bounds |norm_ratio - 1|)


# bf16 caveat: the same forward in bf16 with other kernels (fused add-RMSNorm, flash attention, TP all-reduce
# order) differs from an fp32 reference by rounding that ACCUMULATES over layers: deep states of real targets sit at
# rel_l2 ~1e-2 and cos ~0.999, so "same tensor" in bf16 means these loose bounds, never bit equality.
TOLERANCES = {"float32": Tolerance("float32", 1 - 1e-6, 1 - 1e-5, 2e-4),
              "float16": Tolerance("float16", 0.995, 0.98, 0.04),
              "bfloat16": Tolerance("bfloat16", 0.99, 0.95, 0.08)}


def tolerance_for(*dtypes) -> Tolerance:
    """The tolerance of the least precise of `dtypes` (float64 counts as float32; 8-bit types as bfloat16)."""
    rank = {"float32": 0, "float16": 1, "bfloat16": 2}
    names = [str(d).replace("torch.", "") for d in dtypes]
    names = ["float32" if n == "float64" else n if n in rank else "bfloat16" for n in names] or ["float32"]
    return TOLERANCES[max(names, key=rank.get)]


def similarity(a: Tensor, b: Tensor) -> dict[str, float]:
    """Numbers comparing (T, H) tensors token by token: cosine mean/min, relative L2, norm ratio, max |a-b|."""
    a, b = a.double(), b.double()
    na, nb = a.norm(dim=-1), b.norm(dim=-1)                        # (T, H) -> (T,)
    cos = (a * b).sum(-1) / (na * nb).clamp_min(1e-30)             # per-token cosine (T,)
    log_ratio = torch.log(na.clamp_min(1e-30) / nb.clamp_min(1e-30))
    out = {"cos_mean": cos.mean(), "cos_min": cos.min(), "rel_l2": (a - b).norm() / b.norm().clamp_min(1e-30),
           "norm_ratio": a.norm() / b.norm().clamp_min(1e-30), "max_abs": (a - b).abs().max(),
           "log_norm_std": log_ratio.std(unbiased=False)}   # spread of per-token norm ratios: 0 for a common scale
    out = {k: float(v) for k, v in out.items()}
    out["distance"] = (1 - out["cos_mean"]) + out["log_norm_std"]   # identification score, lower = closer
    out["n_tokens"] = int(a.shape[0])
    return out


def _align_tokens(s_ids, r_ids, n_s: int, n_r: int) -> tuple[int, int, int, list[str]]:
    """(slot start, ref start, n) of the common token prefix, trying id offsets 0, +1, -1; plus notes."""
    if s_ids is None or r_ids is None:
        n = min(n_s, n_r)
        notes = [] if n_s == n_r else [f"no token ids to check; {n_s} slot rows vs {n_r} reference rows: compared "
                                       f"on the first {n}"]
        return 0, 0, n, notes
    best = None
    for off in (0, 1, -1):   # slot row t <-> reference row t + off
        s0, r0 = max(0, -off), max(0, off)
        m = min(n_s - s0, n_r - r0, len(s_ids) - s0, len(r_ids) - r0)
        eq = (s_ids[s0:s0 + m] == r_ids[r0:r0 + m]).long() if m > 0 else torch.zeros(0, dtype=torch.long)
        p = int(eq.cumprod(0).sum())             # length of the matching prefix
        if best is None or p > best[3]:
            best = (off, s0, r0, p, m)
    off, s0, r0, p, m = best
    if p == 0:
        raise DataError("token alignment", "slot tokens and reference tokens have no common prefix",
                        expected=r_ids[:6].tolist(), found=s_ids[:6].tolist(),
                        cause="the reference was captured on other token ids than the dump/sample")
    notes = []
    if off:
        notes.append(f"row t of the slots holds token t{off:+d} of the reference ids: aligned on that")
    if p < m:
        notes.append(f"token ids differ from row {s0 + p} on (slot id {int(s_ids[s0 + p])}, reference id "
                     f"{int(r_ids[r0 + p])}): compared on the common prefix of {p} tokens")
    elif n_s != n_r:
        notes.append(f"{n_s} slot rows vs {n_r} reference rows: compared on the common prefix of {p} tokens")
    return s0, r0, p, notes


@dataclass(frozen=True)
class Comparison:
    """Slot-vs-boundary numbers (`table`), the best match per slot (`slots`), and what was left out (`notes`)."""
    slots: pd.DataFrame   # one row per slot: declared, best, shift, status, metrics, runner_up, margin, confidence
    table: pd.DataFrame   # one row per (slot, boundary, shift): cos_mean, cos_min, rel_l2, norm_ratio, ...
    notes: tuple[str, ...]
    tolerance: Tolerance
    num_layers: int
    source: str = ""

    @property
    def identified(self) -> tuple[str | None, ...]:
        """Best-matching boundary of each slot (None where nothing matches within tolerance)."""
        return tuple(r.best if r.status in IDENTIFIED else None for r in self.slots.itertuples())

    @property
    def declared(self) -> tuple[str | None, ...]:
        """The boundary each slot's writer claims it holds (None where undeclared)."""
        return tuple(self.slots["declared"])

    def heatmap(self, metric: str = "cos_mean", shift: int = 0) -> pd.DataFrame:
        """Slots x boundaries grid of `metric` at token `shift` (boundaries in stream order)."""
        t = self.table[self.table["shift"] == shift]
        grid = t.pivot(index="slot", columns="boundary", values=metric)
        return grid[[b for b in boundary_names(self.num_layers) if b in grid.columns]]


def _rounded_to(t: Tensor, dtype: torch.dtype) -> bool:
    """True when a wider-float tensor holds only values exactly representable in `dtype`."""
    if t.dtype not in (torch.float32, torch.float64) or not t.isfinite().any():
        return False
    f = t[t.isfinite()]
    return bool((f.to(dtype).to(t.dtype) == f).all())


def _status(m: dict, tol: Tolerance) -> str:
    """match / scaled (one common factor) / rescaled (per-token factors) / dtype (rounding noise) / weak / none."""
    loose = TOLERANCES["bfloat16"]
    if m["cos_mean"] >= tol.cos_mean and m["cos_min"] >= tol.cos_min:
        if m["rel_l2"] <= tol.rel_l2 and abs(m["norm_ratio"] - 1) <= tol.rel_l2:
            return "match"
        if m["log_norm_std"] > loose.rel_l2:
            return "rescaled"
        if abs(m["norm_ratio"] - 1) > loose.rel_l2:
            return "scaled"
    if m["cos_mean"] >= loose.cos_mean and m["cos_min"] >= loose.cos_min and m["rel_l2"] <= loose.rel_l2:
        return "dtype"
    return "weak" if m["cos_mean"] >= 0.5 else "none"


def compare(slots: Slots, reference: Capture, *, shifts=(-1, 0, 1), boundaries=None,
            progress: bool = False) -> Comparison:
    """Score every slot against every reference boundary at each token shift and name each slot's best match."""
    ref = reference
    if ref.batched:
        if ref.input_ids.shape[0] != 1:
            raise LayoutError(f"reference {ref.source}", "a batched capture", expected="one sequence",
                              found=tuple(ref.input_ids.shape), cause="pass reference.sequence(b)")
        ref = ref.sequence(0)
    L, H = ref.num_layers, ref.hidden_size
    names = [normalize(b, L) for b in boundaries] if boundaries is not None else ref.names
    n_r = int(ref.input_ids.shape[0])
    s0, r0, n, notes = (_align_tokens(slots.input_ids, ref.input_ids, slots.num_tokens, n_r) if slots.k else
                        (0, 0, 0, ["no slots: nothing to compare"]))
    notes = list(slots.notes) + notes
    refs = {b: ref[b][r0:r0 + n] for b in names}                           # (n, H) each; float64 per pair only
    ref_ok = {b: v.isfinite().all(-1) for b, v in refs.items()}             # (n,)
    rows, summary = [], []
    declared = slots.layout or (None,) * slots.k
    for j in track(range(slots.k), desc="compare slots", progress=progress, unit="slot"):
        x = slots.tensors[j][s0:s0 + n]
        tol = tolerance_for(x.dtype, ref.dtype)
        base = {"slot": j, "declared": declared[j], "best": None, "shift": 0, "status": "", "note": ""}
        if x.shape[-1] != H:
            notes.append(f"slot {j}: width {x.shape[-1]} vs reference hidden size {H}: not compared")
            summary.append({**base, "status": "width", "note": f"width {x.shape[-1]} != {H}"})
            continue
        ok = x.isfinite().all(-1)                                           # (n,)
        base["n_nonfinite"] = int((~ok).sum())
        if not ok.all():
            bad = int((~ok).sum())
            notes.append(f"slot {j}: {bad} of {n} tokens hold NaN/inf (first at row {s0 + int((~ok).nonzero()[0])})"
                         + ("" if ok.any() else ": nothing left to compare"))
            if not ok.any():
                summary.append({**base, "status": "nan", "note": f"all {n} tokens non-finite"})
                continue
        if not bool(x[ok].any()):            # exactly zero everywhere: padding a server added, not a boundary
            summary.append({**base, "best": ZERO, "status": "zeros", "note": "all values are 0: a padding slot"})
            continue
        for b in names:
            for d in shifts:
                lo, hi = max(0, -d), min(n, n - d)      # slot row t <-> reference row t + d
                if hi - lo < 1:
                    continue
                keep = ok[lo:hi] & ref_ok[b][lo + d:hi + d]
                if not keep.any():
                    continue
                m = similarity(x[lo:hi][keep], refs[b][lo + d:hi + d][keep])
                rows.append({"slot": j, "boundary": b, "shift": d, **m})
        cand = sorted((r for r in rows if r["slot"] == j),
                      key=lambda r: (round(r["distance"], 12), r["rel_l2"], abs(r["shift"])))
        if not cand:
            summary.append({**base, "status": "none", "note": "no finite token pairs"})
            continue
        top, run = cand[0], (cand[1] if len(cand) > 1 else None)
        rounded = _rounded_to(x, torch.bfloat16) and not _rounded_to(ref[top["boundary"]], torch.bfloat16)
        if rounded:             # computed in bf16 by whoever wrote it (a bf16 server): judged at bf16's tolerance
            tol = tolerance_for(torch.bfloat16, ref.dtype)
        status = _status(top, tol)
        dec = next((r for r in cand if r["boundary"] == declared[j] and r["shift"] == 0), None)
        note = "values are exactly bf16-representable (rounded to bf16 on the way)" if rounded else ""
        summary.append({**base, "best": top["boundary"], "shift": top["shift"], "status": status,
                        **{k: top[k] for k in ("cos_mean", "cos_min", "rel_l2", "norm_ratio", "distance")},
                        "runner_up": run and run["boundary"], "runner_up_shift": run and run["shift"],
                        "margin": run["distance"] - top["distance"] if run else float("nan"),
                        "confidence": (1 - top["distance"] / run["distance"]) if run and run["distance"] > 0 else 0.0,
                        "declared_cos_mean": dec["cos_mean"] if dec else float("nan"),
                        "declared_rel_l2": dec["rel_l2"] if dec else float("nan"),
                        "n_tokens": top["n_tokens"], "tolerance": tol.dtype, "note": note})
        if declared[j] is not None and declared[j] not in refs:
            notes.append(f"slot {j}: declared boundary '{declared[j]}' is not in the reference capture")
    return Comparison(_every_column(pd.DataFrame(summary), SLOT_FIELDS),
                      _every_column(pd.DataFrame(rows), ("slot", "boundary", "shift", "cos_mean", "cos_min", "rel_l2",
                                                         "norm_ratio", "distance")),
                      tuple(notes), tolerance_for(ref.dtype), L, slots.source)


# every column of Comparison.slots, present even when no slot got that far (no slots, all NaN, all another width):
# a missing number is NaN (a missing name None), never a missing column
SLOT_FIELDS = ("slot", "declared", "best", "shift", "status", "note", "n_nonfinite", "cos_mean", "cos_min", "rel_l2",
               "norm_ratio", "distance", "runner_up", "runner_up_shift", "margin", "confidence", "declared_cos_mean",
               "declared_rel_l2", "n_tokens", "tolerance")
_NAMED = ("declared", "best", "status", "note", "runner_up", "tolerance")


def _every_column(df: pd.DataFrame, columns) -> pd.DataFrame:
    for c in columns:
        if c not in df.columns:
            df[c] = pd.Series([None] * len(df) if c in _NAMED or c == "boundary" else [float("nan")] * len(df),
                              index=df.index, dtype=object if c in _NAMED or c == "boundary" else float)
    return df


def plot_similarity(cmp: Comparison, metric: str = "cos_mean", shift: int = 0):
    """Heatmap Figure of slots x boundaries (`metric` at token `shift`), best match of each slot boxed."""
    from matplotlib.figure import Figure      # no pyplot: nothing is left open or shown twice
    from matplotlib.patches import Rectangle

    grid = cmp.heatmap(metric, shift)
    fig = Figure(figsize=(max(4, 0.45 * grid.shape[1] + 2), 0.5 * grid.shape[0] + 1.5))
    ax = fig.subplots()
    im = ax.imshow(grid.to_numpy(), aspect="auto", cmap="viridis")
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=90)
    ax.set_yticks(range(grid.shape[0]), [f"slot {j}" for j in grid.index])
    for r in cmp.slots.itertuples():
        if r.best in grid.columns and r.shift == shift:
            ax.add_patch(Rectangle((list(grid.columns).index(r.best) - 0.5, list(grid.index).index(r.slot) - 0.5),
                                       1, 1, fill=False, edgecolor="red", linewidth=2))
    ax.set_title(f"{cmp.source}: {metric} per slot vs reference boundary (token shift {shift})")
    fig.colorbar(im, ax=ax, label=metric)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class FcMatch:
    """The boundaries (in slot order) whose fc projection best reproduces a draft's dumped fc output."""
    layout: tuple[str, ...]
    rel_l2: float            # ||fc_out - fc(concat(layout))|| / ||fc_out||
    per_slot: pd.DataFrame   # slot, boundary, rel_l2 with only that slot changed: the margin behind each choice
    notes: tuple[str, ...] = ()


def identify_fc_input(fc_out: Tensor, fc_weight: Tensor, reference: Capture, *, starts=(), boundaries=None,
                      sweeps: int = 10) -> FcMatch:
    """Find the layout b_1..b_k with fc_out ~= sum_j ref[b_j] @ W_j^T (coordinate descent over boundaries)."""
    ref = reference.sequence(0) if reference.batched else reference
    H = ref.hidden_size
    if fc_weight.shape[1] % H:
        raise LayoutError("fc.weight", "input width is not a multiple of the target hidden size",
                          expected=f"k * {H}", found=tuple(fc_weight.shape))
    k, notes = fc_weight.shape[1] // H, []
    n = min(fc_out.shape[0], ref.input_ids.shape[0])
    if fc_out.shape[0] != ref.input_ids.shape[0]:
        notes.append(f"fc output has {fc_out.shape[0]} rows, reference {ref.input_ids.shape[0]}: first {n} used")
    names = [normalize(b, ref.num_layers) for b in boundaries] if boundaries is not None else ref.names
    y = fc_out[:n].double()                                                  # (T, H_d)
    W = fc_weight.double()
    # P[b][j] = ref[b] @ W_j^T : (T, H) @ (H, H_d) -> (T, H_d), the contribution of boundary b in slot j
    P = {b: [ref[b][:n].double() @ W[:, j * H:(j + 1) * H].T for j in range(k)] for b in names}
    norm = y.norm().clamp_min(1e-30)

    def err(lay):
        return float((y - sum(P[b][j] for j, b in enumerate(lay))).norm() / norm)

    inits = [tuple(normalize(b, ref.num_layers) for b in s) for s in starts if len(s) == k]
    inits.append(tuple(min(names, key=lambda b: float((y - P[b][j]).norm())) for j in range(k)))
    best = None
    for lay in inits:
        lay = list(lay)
        for _ in range(sweeps):
            before = tuple(lay)
            for j in range(k):
                lay[j] = min(names, key=lambda b: err(lay[:j] + [b] + lay[j + 1:]))
            if tuple(lay) == before:
                break
        if best is None or err(lay) < best[1]:
            best = (tuple(lay), err(lay))
    lay = list(best[0])
    rows = [{"slot": j, "boundary": b, "rel_l2": err(lay[:j] + [b] + lay[j + 1:]), "chosen": b == lay[j]}
            for j in range(k) for b in names]
    return FcMatch(best[0], best[1], pd.DataFrame(rows), tuple(notes))


def dump_boundaries(dump_or_dir, target, *, n: int | None = None) -> tuple[str | None, ...]:
    """The boundary each slot of a serving dump holds (`hidden.dumps`, any engine's), by comparison with an HF
    capture of `target` on the same tokens: per request `compare` names each slot's best match; a slot's answer is
    the boundary most requests agree on (None where none matched within tolerance)."""
    d = dump_or_dir if isinstance(dump_or_dir, Dump) else load_dump(dump_or_dir)
    model = load_target_model(target)
    votes: list[Counter] = []
    for slots in d.requests[:n]:
        ref = capture(model, slots.input_ids)
        found = compare(slots, ref, shifts=(0,)).identified
        votes = votes or [Counter() for _ in found]
        for v, name in zip(votes, found):
            v[name] += 1
    return tuple(v.most_common(1)[0][0] if v else None for v in votes)
