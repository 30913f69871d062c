"""Where a speculative engine drafts: its verification walk over a generated sequence (an engine fact, on every
device: the proposer's logic, not a kernel). The replay counts its chain on this walk (replay.stats) and
`vllm_engine.dump.engine_walk` recounts vLLM's own drafts with it.
"""
from __future__ import annotations


def verification_walk(accepted, eligible, starts) -> list[int]:
    """The positions a speculative engine drafts at: a request drafts first at a start; after each verification it
    drafts at the last accepted row, P -> P + accepted[P] (accepted counts the bonus token: the draft tokens
    verification kept + 1); a start begins the walk again (the next turn is a new request); a position not
    `eligible` is passed over to the next eligible one. (vLLM 0.32: engines/facts.py, method "drafts only where
    its verification walk goes"; SGLang's chain does the same.)"""
    out, nxt = [], None
    for p in range(len(accepted)):
        if p in starts:
            nxt = p
        if nxt is not None and p >= nxt and eligible[p]:
            out.append(p)
            nxt = p + max(1, int(accepted[p]))
    return out
