"""The served accept length beside the replay's prediction under the setting the server ran.

A served τ means something only next to what the same draft reaches offline under the same speculative setting
(num_steps, topk, num_draft_tokens) and the same aux layout: a tree accepts more than the chain of its depth, so
a tree-served τ compared with a chain prediction reads as a loss the server never had (or hides one).
`served_vs_replay` replays the setting the server ran (SGLang tree drafting when topk > 1, replay.tree_acceptance;
the chain when topk = 1) in the layout it feeds, and keeps the chain of the same depth beside it. What the gap
decides is judged in checks.served_loss.
Usage: ``served_vs_replay(setup, data, served=3.9, setting=(5, 4, 8), layout=lay, source="server.log:120")``.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..errors import DataError
from .stats import ReplaySetup
from .tree_acceptance import TreeReplayResult, check_setting, label_of, replay_tree


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
                "gap": round(self.gap, 3), "positions": self.positions,
                "layout": list(self.layout), "reference": self.reference, "served_source": self.source}


def served_vs_replay(setup: ReplaySetup, data, served: float, setting, *, source: str = "", layout=None,
            n: int | None = None, progress: bool = True,
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
                             tuple(res.layout), res.reference)
