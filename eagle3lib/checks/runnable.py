"""Check 14, what the engine can run at all: a draft config value the serving engine refuses outright (its own
message names it), by the engine facts' 'config' rows (`engines.facts`).

Today the rows name one such field: `hidden_act`. vLLM 0.32's and SGLang's Llama MLP (the EAGLE-3 draft's) run
only silu and raise "Unsupported activation: ..." at start-up. A config saying otherwise is `engine_cannot_run`
(suspected from the table; confirmed when the engine's log shows the refusal, steps.served_view), and when the
draft was trained with silu (the training samples decide, replay.counterfactual) the config is the fault.
Usage: ``check_runnable(art, engine="vllm")``.
"""
from __future__ import annotations

from ..causes import Finding, not_checked
from ..engines.facts import fact
from ..engines.versions import SERVING_ENGINES
from .inputs import Artifacts
from .registry import Options, contract

WHERE = "checks.runnable"
RUNS_ONLY = {"hidden_act": "silu"}      # field -> the one value the engines' draft model runs (facts 'config' rows)

# the causes check_runnable reports (checks.judge: what a broken check reports as not checked)
RUNNABLE_CAUSES = ('engine_cannot_run',)


def check_runnable(art: Artifacts, engine: str | None = None) -> list[Finding]:
    """engine_cannot_run for each field of `RUNS_ONLY` the draft config sets otherwise, for the launch's engine
    (else every serving engine the facts know); ruled out when every such field has the value the engine runs."""
    need = art.missing("draft")
    if need:
        return [not_checked("engine_cannot_run", WHERE, need)]
    body = art.draft_raw.get("transformer_layer_config") if isinstance(art.draft_raw.get(
        "transformer_layer_config"), dict) else art.draft_raw
    eng = (engine or (art.launch.engine if art.launch is not None else "") or "").lower()
    engines = (eng,) if eng in SERVING_ENGINES else SERVING_ENGINES
    out = []
    for key, runs in RUNS_ONLY.items():
        value = body.get(key, runs)
        rows = [r for r in (fact(e, "config", key) for e in engines) if r is not None]
        ev = {"field": key, "value": value, "runs": runs, "engines": list(engines),
              "sources": [f"{r.engine}: {r.source}" for r in rows]}
        if value == runs:
            out.append(Finding("engine_cannot_run", "ruled out", f"the draft's {key} is {runs}, which "
                               f"{' and '.join(engines)} run", ev, WHERE))
            continue
        out.append(Finding("engine_cannot_run", "suspected", f"the draft config sets {key} {value!r}; "
                           f"{' and '.join(engines)} run only {runs} in an EAGLE-3 draft and refuse it at start-up "
                           f"({'; '.join(r.note or r.source for r in rows)})", ev, WHERE,
                           fix=f"if the draft was trained with {runs}, set {key} to {runs} in config.json (the "
                               "training samples decide: notebook 02's config search); else it cannot be served "
                               "there", source="; ".join(r.source for r in rows),
                           needs="" if eng else "the serving launch command (which engine)"))
    return out


@contract("runnable", RUNNABLE_CAUSES, part_of="launch")
def judge_runnable(art: Artifacts, opts: Options) -> list[Finding]:
    """A config value the engine asked about refuses outright."""
    return check_runnable(art, opts.engine)
