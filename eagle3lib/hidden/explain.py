"""How do two aux-slot layouts differ, in words? `explain(expected, actual)` -> `LayoutExplanation`.

Each side is a `compare.Comparison` (what the slots were identified as, with their damage: scale, dtype, alignment,
NaNs) or a plain sequence of boundary names. Layout differences are named by kind (missing or extra slot, zero
padding, a shift of every slot = a layer-id convention mismatch, a permutation, pre- vs post-norm final state) with a
one-paragraph summary; the findings come back as a frozen dataclass and a DataFrame. A slot that matches no boundary
(None in a layout) is reported as unidentified on its side and compared with nothing: never sorted or shown as a name.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

import pandas as pd

from .compare import IDENTIFIED, Comparison
from ..layout import ZERO, parse_layout


@dataclass(frozen=True)
class Difference:
    """One difference between the expected and the actual slots, in words."""
    kind: str       # missing_slot, extra_slot, padding, shift, permutation, postnorm, other_boundary, alignment, scale,
                    # dtype, unidentified, nan, width, mislabel, tokens
    severity: str   # "error" (the draft gets the wrong tensor), "warning" (degraded), "info"
    slot: int | None
    text: str


@dataclass(frozen=True)
class LayoutExplanation:
    """How the actual slot layout differs from the expected one: findings and a one-paragraph summary."""
    expected: tuple[str | None, ...]
    actual: tuple[str | None, ...]
    findings: tuple[Difference, ...]
    summary: str

    @property
    def clean(self) -> bool:
        """No error or warning finding (info findings, e.g. token notes or mislabels, allowed)."""
        return not any(f.severity in ("error", "warning") for f in self.findings)

    @property
    def kinds(self) -> set[str]:
        """Kinds of the error and warning findings."""
        return {f.kind for f in self.findings if f.severity != "info"}

    def frame(self) -> pd.DataFrame:
        """The findings as a DataFrame (kind, severity, slot, text)."""
        return pd.DataFrame([f.__dict__ for f in self.findings], columns=["kind", "severity", "slot", "text"])


def _index(name: str | None, L: int | None) -> int | None:
    if name is None or name == ZERO:
        return None
    if name in ("final_prenorm", "final_postnorm"):
        return L
    return 0 if name == "embed" else int(name.split(".")[1])


UNIDENTIFIED = "unidentified"


def slot_name(name: str | None) -> str:
    """A slot's boundary in words: an unidentified slot (None) is said so, never shown as a name or sorted."""
    return UNIDENTIFIED if name is None else str(name)


def layout_text(layout) -> str:
    """A layout in words, unidentified slots said so: "embed, unidentified, layer_in.4"."""
    return ", ".join(slot_name(x) for x in layout)


def unidentified_slots(layout) -> tuple[int, ...]:
    """The slots of a layout that match no boundary (None), in order."""
    return tuple(j for j, x in enumerate(layout) if x is None)


def _layout_findings(E: tuple, A: tuple, L: int | None, who: str) -> list[Difference]:
    """Layout differences slot by slot; an unidentified slot (None) on either side is compared with nothing (its
    own finding says it matched no boundary), so no permutation, shift or order is read from it."""
    out: list[Difference] = []
    if E == A and None not in E:
        return out
    if None not in A and None not in E and len(E) == len(A) and sorted(E) == sorted(A):
        moved = "; ".join(f"slot {j} holds {a} (trained at slot {E.index(a)})" for j, a in enumerate(A) if a != E[j])
        return [Difference("permutation", "error", None, f"{who} feeds the right tensors in the wrong order: {moved}. "
                        "Engines concatenate in ascending layer order; permute the fc.weight column blocks or the "
                        "capture order to match")]
    idx = [(_index(e, L), _index(a, L)) for e, a in zip(E, A)]
    diffs = {a - e for e, a in idx if None not in (e, a)} if len(E) == len(A) else set()
    if len(diffs) == 1 and 0 not in diffs and all(None not in p for p in idx) and "final_postnorm" not in E + A:
        d = diffs.pop()
        return [Difference("shift", "error", None, f"every slot of {who} is {abs(d)} layer(s) "
                        f"{'deeper' if d > 0 else 'shallower'} than trained ({', '.join(map(str, A))} instead of "
                        f"{', '.join(map(str, E))}): a layer-id convention mismatch (output-of-layer vs "
                        "input-of-layer; SGLang adds +1 to the configured ids, vLLM does not)")]
    ops = difflib.SequenceMatcher(None, list(E), list(A), autojunk=False).get_opcodes()
    cost = sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")
    wrong = [j for j in range(len(E)) if E[j] != A[j]] if len(E) == len(A) else []
    if len(E) == len(A) and len(wrong) <= cost:   # fc reads by position: pair slot j with slot j when no costlier
        ops = [("replace", j, j + 1, j, j + 1) for j in wrong]
    for tag, i1, i2, j1, j2 in ops:
        pairs = list(zip(range(i1, i2), range(j1, j2))) if tag == "replace" else []
        for i, j in pairs:
            e, a = E[i], A[j]
            if a is None or e is None:
                continue   # an unidentified slot: reported with its numbers by _damage_findings
            if a == ZERO:
                out.append(Difference("padding", "error", j, f"{who} fills slot {j} with zeros where training fed {e}"))
                continue
            if {e, a} == {"final_prenorm", "final_postnorm"}:
                out.append(Difference("postnorm", "error", j, f"{who} slot {j} holds the final {a.split('_')[1]} state "
                                   f"where training used {e.split('_')[1]} (HF hidden_states[L] is post-norm; engines "
                                   "capture the pre-norm residual stream)"))
            elif None not in (_index(e, L), _index(a, L)) and "final_postnorm" not in (e, a):   # a norm is no layer
                d = _index(a, L) - _index(e, L)
                out.append(Difference("shift", "error", j, f"{who} slot {j} holds {a}, {abs(d)} layer(s) "
                                   f"{'deeper' if d > 0 else 'shallower'} than the trained {e}"))
            else:
                out.append(Difference("other_boundary", "error", j, f"{who} slot {j} holds {a}, trained on {e}"))
        n = len(pairs)
        for i in range(i1 + n, i2) if tag in ("delete", "replace") else ():
            later = " The slots after it move one place left, so each fc block reads another tensor." \
                if i < len(E) - 1 and len([a for a in A if a != ZERO]) < len(E) else ""
            out.append(Difference("missing_slot", "error", i, f"slot {i} of the trained layout "
                               f"({slot_name(E[i])}) is not fed by {who}.{later}"))
        for j in range(j1 + n, j2) if tag in ("insert", "replace") else ():
            if A[j] == ZERO:
                out.append(Difference("padding", "error", j, f"{who} fills slot {j} with zeros: it captured fewer "
                                   "states than the draft's fc has slots and padded the rest"))
            else:
                out.append(Difference("extra_slot", "error", j, f"{who} feeds {slot_name(A[j])} at slot {j}, "
                                   "which the trained layout does not have"))
    if len(E) != len(A):
        out.append(Difference("width", "error", None, f"the draft's fc expects {len(E)} slots x H; {who} supplies "
                           f"{len(A)} x H"))
    return out


def _damage_findings(cmp: Comparison, who: str) -> list[Difference]:
    out = [Difference("tokens", "info", None, f"{who}: {n}") for n in cmp.notes]
    for r in cmp.slots.itertuples():
        j, best = r.slot, r.best
        if r.status in IDENTIFIED and r.shift:
            out.append(Difference("alignment", "error", j, f"{who} slot {j} at row t holds the state of token "
                               f"t{r.shift:+d} ({best}): the position alignment is off by {r.shift}"))
        if r.status == "scaled":
            out.append(Difference("scale", "error", j, f"{who} slot {j} is {best} times {r.norm_ratio:.3g} "
                               f"(direction intact, cos {r.cos_mean:.4f})"))
        elif r.status == "rescaled":
            out.append(Difference("scale", "error", j, f"{who} slot {j} points like {best} but its per-token norms "
                               f"differ (norm ratio {r.norm_ratio:.3g}): a norm was applied or removed"))
        elif r.status == "dtype":
            why = f"; {r.note}" if r.note else ""
            out.append(Difference("dtype", "warning", j, f"{who} slot {j} is {best} with reduced-precision error (rel "
                               f"L2 {r.rel_l2:.2e}, 1 - cos {1 - r.cos_mean:.1e}) beyond {r.tolerance} tolerance{why}"))
        elif r.status in ("weak", "none"):
            near = f"; closest {best} at cos {r.cos_mean:.3f}" if isinstance(best, str) else ""
            out.append(Difference("unidentified", "error", j, f"{who} slot {j} matches no reference boundary{near}"))
        elif r.status in ("nan", "width"):
            out.append(Difference(r.status, "error", j, f"{who} slot {j}: {r.note}"))
        if r.status != "nan" and getattr(r, "n_nonfinite", 0) > 0:
            out.append(Difference("nan", "error", j, f"{who} slot {j}: {r.n_nonfinite} token(s) hold NaN/inf"))
        if r.status in IDENTIFIED and r.declared not in (None, best):
            out.append(Difference("mislabel", "info", j, f"{who} slot {j} is declared {r.declared} but holds {best}"))
    return out


def _names(layout, L: int | None) -> tuple:
    """Boundary names of a layout given as names; zero slots ("zeros") and unidentified ones (None) kept."""
    return tuple(n if n in (ZERO, None) else parse_layout([n], L)[0] for n in layout)


def explain(expected, actual, *, num_layers: int | None = None, names=("training", "serving")) -> LayoutExplanation:
    """Say in words how `actual` slots differ from `expected` (each a Comparison or a sequence of boundary names)."""
    L = num_layers or next((c.num_layers for c in (expected, actual) if isinstance(c, Comparison)), None)
    E = expected.identified if isinstance(expected, Comparison) else _names(expected, L)
    A = actual.identified if isinstance(actual, Comparison) else _names(actual, L)
    findings = []
    if isinstance(expected, Comparison):
        findings += [Difference(f.kind, "info" if f.kind == "tokens" else "warning", f.slot, f.text)
                     for f in _damage_findings(expected, names[0])]
    if isinstance(actual, Comparison):
        findings += _damage_findings(actual, names[1])
    for side, layout, severity in ((0, E, "warning"), (1, A, "error")):   # names only: no damage finding says it
        if not isinstance((expected, actual)[side], Comparison):
            findings += [Difference("unidentified", severity, j, f"{names[side]} slot {j} is unidentified (matches "
                                    "no boundary): its layout is not checked") for j in unidentified_slots(layout)]
    findings += _layout_findings(tuple(E), tuple(A), L, names[1])
    bad = [f for f in findings if f.severity != "info"]
    if not bad:
        summary = f"clean: {names[1]} feeds exactly the tensors the draft was trained on ({layout_text(E)})"
    else:
        summary = f"{len(bad)} problem(s): " + " | ".join(f.text for f in bad)
    return LayoutExplanation(tuple(E), tuple(A), tuple(findings), summary)


# Which catalogue cause (eagle3lib.causes) each kind of difference is: a slot of the final norm's other side, and
# every slot one layer off (a convention mismatch), have causes of their own; the rest is a layout mismatch.
CAUSE_OF_KIND = {"postnorm": "final_norm_slot", "shift": "layer_id_off_by_one", "scale": "target_drift",
                 "dtype": "quantized_target"}


def causes_of(expl: LayoutExplanation) -> tuple[str, ...]:
    """The catalogue causes of an explanation's error and warning differences, in first-seen order."""
    return tuple(dict.fromkeys(CAUSE_OF_KIND.get(k, "aux_layout_mismatch")
                               for k in (f.kind for f in expl.findings if f.severity != "info")))
