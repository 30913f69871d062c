"""The served accept length against the replay's prediction under the setting the server ran.

A served τ means something only next to what the same draft reaches offline under the same speculative setting
(num_steps, topk, num_draft_tokens) and the same aux layout: a tree accepts more than the chain of its depth, so
a tree-served τ compared with a chain prediction reads as a loss the server never had (or hides one). `compare`
replays the setting the server ran (SGLang tree drafting when topk > 1, replay.tree; the chain when topk = 1) in
the layout it feeds, and keeps the chain of the same depth beside it. The gap becomes a finding:
- within the tolerance: the serving path reproduces the draft's offline acceptance (`engine_regression` ruled out);
- served below: the serving path loses acceptance the draft has offline (suspected `engine_regression`; a served
  layout or prompts unlike the replayed data show the same way, which notebooks 02 and 03 tell apart);
- served above: greedy verification on this data cannot reach it (suspected `measurement_artefact`: repetitive
  outputs, a lossy accept threshold, a counter convention).
The tolerance is max(0.2, 10% of the prediction) accepted tokens: served prompts are not the replayed samples.
Usage: ``compare(setup, data, served=3.9, setting=(5, 4, 8), layout=lay, source="server.log:120")``.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..causes import Finding
from ..errors import DataError
from .run import ReplaySetup
from .tree import TreeReplayResult, check_setting, label_of, replay_tree

WHERE = "served accept length vs replay under the served setting"


def tolerance_for(predicted: float) -> float:
    """Accepted tokens by which served and predicted τ may differ and still agree: max(0.2, 10% of predicted)."""
    return max(0.2, 0.1 * predicted)


@dataclass(frozen=True)
class ServedVsPredicted:
    """One served τ beside the replay's τ under the same setting and layout (and the chain of the same depth)."""

    setting: tuple[int, int, int]        # (num_steps, topk, num_draft_tokens) the server ran
    served: float                        # τ the server measured (bonus token included)
    source: str                          # where the served number was read (file:line, run label)
    predicted: float                     # replay's simulated τ under `setting`
    chain: float                         # replay's simulated τ of the chain of the same depth
    positions: int                       # fully scored positions behind the prediction
    layout: tuple[str, ...]              # aux layout replayed (the one the server feeds, when known)
    reference: str                       # what the prediction verified against: "target", "data" or "mixed"
    tolerance: float

    @property
    def kind(self) -> str:
        return "chain" if self.setting[1] == 1 else "tree"

    @property
    def gap(self) -> float:
        """served - predicted (negative: the server accepts less than the draft does offline)."""
        return self.served - self.predicted

    def frame(self) -> pd.DataFrame:
        """Served, predicted under the served setting, and the chain of the same depth, one row each."""
        lab = label_of(self.setting)
        rows = [{"what": "served", "setting": lab, "accept_length": self.served, "source": self.source},
                {"what": f"replay, same {self.kind}", "setting": lab, "accept_length": self.predicted,
                 "source": f"{self.positions} positions, layout {', '.join(self.layout)}"}]
        if self.kind == "tree":
            rows.append({"what": "replay, chain of the same depth", "setting": label_of(
                (self.setting[0], 1, self.setting[0] + 1)), "accept_length": self.chain,
                "source": "for contrast: what a chain prediction would have said"})
        return pd.DataFrame(rows)

    def evidence(self) -> dict:
        steps, topk, ndt = self.setting
        return {"num_steps": steps, "topk": topk, "num_draft_tokens": ndt, "served": round(self.served, 3),
                "predicted": round(self.predicted, 3), "chain_same_depth": round(self.chain, 3),
                "gap": round(self.gap, 3), "tolerance": round(self.tolerance, 3), "positions": self.positions,
                "layout": list(self.layout), "reference": self.reference, "served_source": self.source}

    def findings(self) -> list[Finding]:
        """The gap as findings about `engine_regression` (and `measurement_artefact` when served is above)."""
        lab, ev = label_of(self.setting), self.evidence()
        head = (f"served τ {self.served:.2f} under {lab} vs {self.predicted:.2f} replayed under the same "
                f"{self.kind} ({self.positions} positions)")
        if self.kind == "tree":
            head += f"; a chain of the same depth would predict {self.chain:.2f}"
        if abs(self.gap) <= self.tolerance:
            return [Finding("engine_regression", "ruled out", f"{head}: the serving path reproduces the "
                            "draft's offline acceptance", ev, WHERE, measured=True)]
        if self.gap < 0:
            return [Finding("engine_regression", "suspected", f"{head}: the server accepts {-self.gap:.2f} "
                            "fewer tokens per round than the draft does offline (an engine regression, or a served "
                            "layout / prompts unlike the replayed data: notebooks 02 and 03 tell these apart)", ev,
                            WHERE, fix="replay in the layout the server feeds and on served prompts (02); if both "
                            "stay high, compare another engine version", measured=True)]
        return [Finding("engine_regression", "ruled out", f"{head}: the server accepts more, not less", ev, WHERE,
                        measured=True),
                Finding("measurement_artefact", "suspected", f"{head}: greedy verification on the replayed data "
                        f"reaches {self.gap:.2f} fewer tokens than served (repetitive outputs, a lossy accept "
                        "threshold, or a counter convention)", ev, WHERE,
                        fix="recompute τ from the raw counters (accepted / rounds + 1) on the served prompts")]


def compare(setup: ReplaySetup, data, served: float, setting, *, source: str = "", layout=None,
            n: int | None = None, tolerance: float | None = None, progress: bool = True,
            replayed: TreeReplayResult | None = None) -> ServedVsPredicted:
    """Replay `setting` (num_steps, topk, num_draft_tokens) in `layout` and set the served τ beside it.

    replayed: a tree replay that already holds `setting` (no second replay)."""
    steps, topk, ndt = check_setting(setting)
    if not isinstance(served, (int, float)) or isinstance(served, bool) or not 1.0 <= served <= steps + 1:
        raise DataError(f"served accept length from {source or 'the caller'}", "not an accept length of this "
                        "setting", expected=f"a number in [1, {steps + 1}] (bonus token included)",
                        found=repr(served), cause="an accept rate given where the accept length belongs, or the "
                        "settings of another run")
    res = replayed or replay_tree(setup, data, [(steps, topk, ndt)], layout=layout, n=n, progress=progress)
    predicted = res.accept_length(steps, topk, ndt)
    chain = res.accept_length(steps, 1, steps + 1)
    if res.positions == 0:
        raise DataError(f"replay of {label_of((steps, topk, ndt))}", "no position is scored to the full depth",
                        expected=f"samples with at least {steps + 2} scored tokens", found="none",
                        cause="samples shorter than the drafted depth, or a loss mask that scores nothing")
    return ServedVsPredicted((steps, topk, ndt), float(served), source, predicted, chain, res.positions,
                             tuple(res.layout), res.reference,
                             tolerance if tolerance is not None else tolerance_for(predicted))
