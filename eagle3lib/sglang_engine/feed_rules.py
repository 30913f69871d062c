"""What SGLang feeds a draft whose config opts out of aux states, and whether it captures aux states on earlier
pipeline-parallel ranks (`RULES`, the home's `feed_rules`; checks.draft_feed asks them)."""
from __future__ import annotations

from ..causes import Finding
from ..engine_kit.feed import OptOut, RankSpread
from ..engines import facts


def _aux_opt_out(o: OptOut, version: str | None = None, runner: str | None = None) -> Finding:
    """SGLang honours use_aux_hidden_state false from PR#14920 on (the last hidden state), and fed aux states before
    it; a version the PR is not placed for is suspected, naming it."""
    sg = facts.fact("sglang", "flag", "use_aux_hidden_state@eagle_config")
    honours = facts.reads("sglang", "flag", sg.subject, version)
    what = ("the last hidden state" if honours else "its aux states" if honours is False else
            "the last hidden state from sglang PR#14920 on, aux states before it")
    ev = {**o.evidence, "sglang_honours": honours, "fed": {"sglang": what}}
    bad = o.with_aux if honours else (not o.with_aux if honours is False else None)
    status = "confirmed" if bad else "ruled out" if bad is False else "suspected"
    return Finding("aux_opt_out", status, f"{o.key} is false, the draft was trained on " + (
        "aux states" if o.with_aux else "the last hidden state alone") + f"; SGLang feeds it {what}", ev, o.where,
        needs="" if bad is not None else "the SGLang version (sglang PR#14920 placed by release)", source=sg.source)


def _pipeline_parallel_aux(p: RankSpread, version: str | None = None) -> Finding:
    """SGLang did not capture aux states on earlier ranks before the fixing PRs, whose release is not placed."""
    f = facts.fact("sglang", "serving", "aux_states_over_pp")
    return Finding("pipeline_parallel_aux", "suspected", f"pipeline parallel size {p.pp}: aux layers {p.ids} sit on "
                   f"ranks {p.ranks} of 0..{p.pp - 1} (about {p.per} layers each), and SGLang did not capture aux "
                   "states on earlier ranks before the PRs; the fixing release is not placed", p.evidence, p.where,
                   fix="serve with --pp-size 1 and compare, or use a version with the PRs",
                   needs="the SGLang version and served accept length at --pp-size 1", source=f.source)


RULES = {"aux_opt_out": _aux_opt_out, "pipeline_parallel_aux": _pipeline_parallel_aux}
