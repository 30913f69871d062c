"""What the running engine said about the draft (its log, a probe of its own code, a dump: never a table) as
findings: an engine that captured the trained layout rules the capture causes out, one that captured another
confirms them (suspects, without the training data to identify the trained layout); one that died names its error,
the file and the key (`refusal_findings`). The view itself is built by `steps.served_view.deployment_view`.
"""
from __future__ import annotations

from pathlib import Path

from ..causes import CAPTURE_CAUSES, Finding
from ..engines.facts import fact
from ..engine_kit.view import EngineView
from ..engines.engine_errors import attribution, known_failure_text
from ..hidden.explain import causes_of, explain
from ..layout import NOT_CAPTURED
from ..model.variants import reshape_text
from .inputs import Artifacts
from .loaded_keys import implied_by_checkpoint

WHERE = "what the serving engine loads (its log / its own code)"
ENGINE_SAID = ("dump", "log", "probe")        # sources that are the engine's own answer, not a table


def view_findings(view: EngineView, trained, *, art: Artifacts | None = None,
                  num_layers: int | None = None) -> list[Finding]:
    """What the running engine said (log / probe aspects only) against the trained layout and the checkpoint (`art`:
    the draft's artifacts, when read)."""
    out: list[Finding] = []
    if view.refused and view.refused_source in ENGINE_SAID:
        out += refusal_findings(view, trained, art=art, num_layers=num_layers)
        return out
    lay = view.aspects.get("layout")
    if lay is not None and lay.source in ENGINE_SAID and trained is not None and trained.layout is not None:
        served, tr = tuple(lay.value), tuple(trained.layout)
        ev = {"served_layout": list(served), "trained_layout": list(tr), "trained_from": trained.source,
              "engine": view.engine, "version": view.version, "source": lay.source, "detail": lay.detail}
        sure = trained.source in ("identified", "declared")
        if served == tr:
            out += [Finding(c, "ruled out", f"{view.engine} captures the trained layout [{', '.join(tr)}] "
                            f"({lay.detail})", ev, WHERE, measured=sure) for c in CAPTURE_CAUSES]
        else:
            found = causes_of(explain(tr, served, num_layers=num_layers)) or ("aux_layout_mismatch",)
            if "default" in lay.detail:
                found = ("missing_layer_ids",) + tuple(found)
            status = "confirmed" if sure else "suspected"
            for c in CAPTURE_CAUSES:
                out.append(Finding(c, status if c in found else "ruled out", f"{view.engine} captures "
                                   f"[{', '.join(str(b or NOT_CAPTURED) for b in served)}] ({lay.detail}); the draft "
                                   f"was trained on [{', '.join(tr)}] "
                                   f"({trained.source})", ev, WHERE, measured=sure,
                                   fix=f"write ids that make {view.engine} capture [{', '.join(tr)}]"
                                   if c in found else "", needs="" if sure else "the training data (to identify "
                                   "the trained layout)"))
    return out


def refusal_findings(view: EngineView, trained, *, art: Artifacts | None = None,
                     num_layers: int | None = None) -> list[Finding]:
    """The engine's own failure as a finding naming the file and the key (the config's ids, a weight name)."""
    text = view.refused or ""
    draft_path = art.draft_path if art is not None else None
    cfg = str(Path(draft_path) / "config.json") if draft_path else "the draft's config.json"
    ev = {"error": text, "source": view.refused_source, "engine": view.engine, "version": view.version}
    known = known_failure_text(text)
    if known is not None:                     # a failure the engine facts explain (the frame it was raised in)
        row = fact(known.engine, *known.because)
        return [Finding(known.cause, "confirmed", f"{view.engine} dies serving the draft: {known.note}; `{known.key}` "
                        f"in {cfg} (or the launch) asks for it. The engine: {text}" + (f" [{row.source}]" if row else ""),
                        {**ev, "file": cfg, "key": known.key, "frame": known.frame,
                         "fact": row.source if row else None}, WHERE,
                        fix=known.fix, measured=True, explains=known.explains)]
    if "shape '[-1" in text or "fc" in text or "aux slot" in text:
        lay = view.aspects.get("layout")
        got = [b for b in (lay.value if lay is not None else ()) if b is not None]
        msg = (f"{view.engine} fails on the first request: its fc takes {view.fc_slots or '?'} aux slots, it "
               f"captures {len(got)} ({', '.join(got)}) for the ids in {cfg} "
               f"({lay.detail if lay is not None else ''}). The engine: {text}")
        cause = "missing_layer_ids" if lay is not None and "default" in lay.detail else "aux_layout_mismatch"
        return [Finding(cause, "confirmed", msg, {**ev, "captured": got, "file": cfg,
                                                  "key": "eagle_aux_hidden_state_layer_ids"}, WHERE,
                        fix="write the trained layout's ids in vLLM's input-of-layer convention at the top level "
                            "(`eagle_aux_hidden_state_layer_ids`); an id the target has no boundary for (-1) is "
                            "never captured", measured=True)]
    implied = implied_by_checkpoint(art) if art is not None else {}
    if implied:                          # the config sizes a tensor otherwise than the checkpoint holds it
        (field, value), = implied.items()
        return [Finding("draft_config_differs", "confirmed", f"{view.engine} refuses the draft: {text}; "
                        f"{reshape_text(art.draft_cfg, implied, cfg)}: every tensor is there, the config disagrees "
                        "with them", {**ev, "file": cfg, "key": field, "value": getattr(art.draft_cfg, field),
                                      "implied": value}, WHERE,
                        fix=f"set `{field}` to {value} in {cfg} (the value the checkpoint's shapes give)",
                        measured=True, explains=("weights_dropped",))]
    _, cause = attribution(text)
    fix = ("make the checkpoint load in the engine (the error names the key)" if cause == "weights_dropped" else
           "the engine's message names what it cannot run: change that field, dtype or host (no other version was "
           "seen serving these artifacts, so this is not called a regression)")
    return [Finding(cause, "confirmed", f"{view.engine} refuses the draft ({cfg}): {text}", {**ev, "file": cfg},
                    WHERE, fix=fix, measured=True)]
