"""What vLLM's model runners feed a draft whose config opts out of aux states, and how they relay aux states from
earlier pipeline-parallel ranks (`RULES`, the home's `feed_rules`; checks.draft_feed asks them)."""
from __future__ import annotations

from ..causes import Finding
from ..engine_kit.feed import OptOut, RankSpread
from ..engines import facts

RUNNERS = ("v1", "v2")


def _aux_opt_out(o: OptOut, version: str | None = None, runner: str | None = None) -> Finding:
    """Each runner (the given one, else both) feeds the last hidden state or the concatenated aux states, building
    no fc: a draft trained on aux states is confirmed broken; a last-state draft only where V2 may serve it."""
    rows = {r: facts.fact("vllm", "flag", f"use_aux_hidden_state@{r}_runner") for r in RUNNERS
            if runner not in RUNNERS or r == runner}
    fed = {f"vllm {r}": ("the target's last hidden state, no fc" if f.reads else
                         "the concatenated aux states (k*H), no fc") for r, f in rows.items()}
    ev = {**o.evidence, "fed": fed}
    src = "; ".join(f.source for f in rows.values()) + "; vllm PR#40656, #40551"
    if o.with_aux:
        return Finding("aux_opt_out", "confirmed", f"{o.key} is false but the draft was trained on aux states "
                       f"({o.why}): vLLM " + "; ".join(f"the {r.upper()} runner feeds it {t}" for r, t in
                                                        zip(rows, fed.values()))
                       + " (served 1.05 on the demo draft with the V1 runner, no log line)", ev, o.where,
                       fix=f"drop {o.key} (or set it true) so vLLM builds the fc the draft was trained with",
                       source=src, explains=("aux_layout_mismatch",))   # the served layout is the flag's consequence
    if "v2" in rows:
        return Finding("aux_opt_out", "suspected", f"{o.key} is false and the draft was trained on the last hidden "
                       "state alone (fc takes one slot or none): the V1 runner honours it; the V2 runner (CUDA "
                       "default) still feeds the concatenated aux states (static reading)", ev, o.where,
                       needs="the vLLM model runner (VLLM_USE_V2_MODEL_RUNNER, or the startup log)", source=src)
    return Finding("aux_opt_out", "ruled out", f"{o.key} is false and the draft was trained on the last hidden state "
                   "alone: the V1 runner feeds it exactly that", ev, o.where, source=rows["v1"].source)


def _pipeline_parallel_aux(p: RankSpread, version: str | None = None) -> Finding:
    """vLLM 0.32's V2 runner relays aux states from earlier ranks for the model files that declare it and refuses
    the others; the V1 runner's relay is not read: not checked without the runner and a served comparison."""
    f = facts.fact("vllm", "serving", "aux_states_over_pp@v2")
    return Finding("pipeline_parallel_aux", "not checked", f"not checked: pipeline parallel size {p.pp} with aux "
                   f"layers on ranks {p.ranks}; vLLM 0.32's V2 runner relays them from earlier ranks for model files "
                   "that declare it (Llama, Qwen2) and refuses the others, the V1 runner's relay is not read",
                   p.evidence, p.where, needs="the vLLM model runner and served accept length at "
                   "pipeline_parallel_size 1", source=f.source)


RULES = {"aux_opt_out": _aux_opt_out, "pipeline_parallel_aux": _pipeline_parallel_aux}
