"""The draft as the serving engine really loads it, from the best source for each aspect, and what that says.

`deployment_view(engine, draft, target, ...)` starts from the tables at the engine's version
(`engines.loaded_view.engine_view`), lets the real vLLM's own answer overrule them where vLLM is installed
(`engines.vllm_probe`: its config and loader functions run on this draft), and lets the server's own log overrule
both (`serving.vllm_log`: the aux layers it captured, whether it kept the draft's embedding and lm_head, the error it
died of). Each aspect says which source answered (`EngineView.frame()`).
`view_findings(view, trained_layout)` turns what the running engine said (log or probe, never a table) into
findings: an engine that logged the trained layout rules the layout causes out; one that died names its error, the
file and the key. `served_as_served(...)` is the measurement on top: the served τ beside the draft replayed as
trained and as the engine loads it (replay.as_served, replay.served.as_served_findings).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..causes import CAPTURE_CAUSES, Finding
from ..checks.inputs import read_artifacts
from ..engines import vllm_env
from ..engines.facts import fact
from ..engines.vllm_errors import attribution, known_failure_text
from ..engines.loaded_view import LAST_HIDDEN, EngineView, engine_view
from ..errors import Eagle3Error
from ..hidden.explain import causes_of, explain
from ..layout import from_ids
from ..serving.vllm_log import VllmLogReading, read_vllm_log

WHERE = "what the serving engine loads (its log / its own code)"
_EMBED = {"shared": "target", "own": "own"}
ENGINE_SAID = ("dump", "log", "probe")        # sources that are the engine's own answer, not a table


def deployment_view(engine: str, draft, target, *, version: str | None = None, log=None, probe=None,
                    use_probe: bool = True, num_speculative_tokens: int = 3) -> tuple[EngineView, list[str]]:
    """(the draft as `engine` loads it, notes). `log`: a `VllmLogReading` or a log path; `probe`: a `VllmProbe`
    (else asked here when `use_probe` and a vLLM venv exists, for vLLM only)."""
    art = read_artifacts(draft=draft, target=target)
    if art.draft_raw is None or art.target_info is None:
        raise _unreadable(art)
    notes: list[str] = []
    reading = log if isinstance(log, VllmLogReading) or log is None else read_vllm_log(
        log, num_target_layers=art.target_info.num_layers)
    version = version or (reading.version if reading is not None else None)
    runner = (reading.runner or "").lower() or None if reading is not None else None
    view = engine_view(engine, draft_raw=art.draft_raw, tensors=art.tensors or {}, target_info=art.target_info,
                       version=version, runner=runner)
    if engine == "vllm" and probe is None and use_probe and vllm_env.vllm_python() is not None:
        try:
            from ..engines.vllm_probe import probe as ask
            probe = ask(draft, target, num_speculative_tokens=num_speculative_tokens)
        except Eagle3Error as e:
            notes.append(f"the vLLM probe could not answer: {e}")
    if probe is not None:
        view = _from_probe(view, probe, art)
    if reading is not None and engine == "vllm":
        view = _from_log(view, reading, art)
    return view, notes


def _unreadable(art):
    from ..errors import ConfigError
    return ConfigError("deployment_view", "the draft or target config cannot be read", expected="config.json of "
                       "both", found="; ".join(f"{k}: {v}" for k, v in art.problems.items()) or "not given")


def _layout(ids, L: int) -> tuple:
    """vLLM's capture for ids (input-of-layer, ascending, once each; an id outside 0..L is never captured)."""
    ok = sorted({int(i) for i in ids if 0 <= int(i) <= L})
    return tuple(from_ids(ok, "input", L))


def _from_probe(view: EngineView, p, art) -> EngineView:
    """Aspects as vLLM's own code answered them (`engines.vllm_probe.VllmProbe`) overrule the tables."""
    L, who = art.target_info.num_layers, f"vLLM {p.vllm_version} ({p.runner or '?'} runner)"
    if p.error:
        return view.with_refusal(f"{who} refuses the deployment at {p.error.get('stage')}: {p.error.get('type')}: "
                                 f"{str(p.error.get('message'))[:200]}", "probe")
    if p.aux_states_v1 is False and (p.runner or "").lower() == "v1":     # use_aux_hidden_state false, honoured
        view = dataclasses.replace(view, fc_slots=0).overruled(
            "layout", LAST_HIDDEN, "probe", f"{who}: use_aux_hidden_state {p.use_aux_hidden_state}, no fc built, "
            "the runner captures no aux layer: the draft gets the target's last hidden state"
        ).with_refusal(None, "probe")          # the table's V2 refusal does not apply to this runner
    elif p.ids_used is not None:
        keys = p.ids_v1_key if (p.runner or "").lower() == "v1" else p.ids_v2_key
        src = ", ".join(keys) if keys else "no ids: the target's default"
        view = view.overruled("layout", _layout(p.ids_used, L), "probe", f"{who} reads {src}: {list(p.ids_used)}"
                              + ("" if keys else " (default)"))
    if p.d2t_param is not None:
        val = "checkpoint" if (not p.d2t_param or p.d2t_filled) else "zeros"
        view = view.overruled("d2t", val, "probe", f"{who}'s own loader " + (
            "filled draft_id_to_target_id" if p.d2t_filled else "left draft_id_to_target_id at zeros"
            if p.d2t_param else "builds no map (full-vocab draft)"))
    if p.has_own_embed_tokens is not None:
        own = p.has_own_embed_tokens and p.embed_shared is not True
        view = view.overruled("embedding", "own" if own else "target", "probe",
                              f"{who}: has_own_embed_tokens={p.has_own_embed_tokens}, shared={p.embed_shared}")
    if p.has_own_lm_head is not None:
        reduced = (p.draft_vocab or 0) != (p.target_vocab or 0)
        own = p.has_own_lm_head and p.lm_head_shared is not True
        view = view.overruled("lm_head", "own" if own else ("target_sliced" if reduced else "target"), "probe",
                              f"{who}: has_own_lm_head={p.has_own_lm_head}, shared={p.lm_head_shared}")
    if p.load_error:
        return view.with_refusal(f"{who}'s own loader refuses the draft: {p.load_error.get('type')}: "
                                 f"{str(p.load_error.get('message'))[:200]}", "probe")
    if p.fc_slots is not None and p.ids_used is not None:
        n = len(_layout(p.ids_used, L))
        view = dataclasses.replace(view, fc_slots=p.fc_slots)
        if n != p.fc_slots:
            view = view.with_refusal(f"{who} captures {n} aux slot(s) for ids {list(p.ids_used)} but its fc takes "
                                     f"{p.fc_slots}: the first requests fail or run on scrambled inputs", "probe")
    return view


def _from_log(view: EngineView, r: VllmLogReading, art) -> EngineView:
    L = art.target_info.num_layers
    if r.aux_layer_ids is not None:
        line = r.evidence.get("aux_layer_ids", (None, ""))[0]
        view = view.overruled("layout", _layout(r.aux_layer_ids, L), "log", f"{r.source}"
                              + (f":{line}" if line else "") + f": the runner captured {list(r.aux_layer_ids)} "
                              f"({r.aux_layer_ids_from})")
    for name, text in (("embedding", r.embedding), ("lm_head", r.lm_head)):
        if text:
            kind = text.split(" ", 1)[0]
            line = r.evidence.get(name, (None, ""))[0]
            if name == "lm_head" and kind == "shared":
                reduced = art.draft_cfg is not None and art.draft_cfg.draft_vocab_size != art.target_info.vocab_size
                value = "target_sliced" if reduced else "target"
            else:
                value = _EMBED.get(kind, "own" if name == "lm_head" else None)
            view = view.overruled(name, value, "log", f"{r.source}:{line}: {text}")
    err = r.root_error
    if err is not None:
        where = ", ".join(f"{k} {v}" for k, v in (("key", err.key), ("shape", err.shape), ("file", err.file)) if v)
        view = view.with_refusal(f"{err.exception}: {err.message[:200]} ({r.source}:{err.line_no}"
                                 + (f"; {where}" if where else "") + (f"; raised at {err.frame}" if err.frame else "")
                                 + ")", "log")
    elif r.draft_loaded and (r.embedding or r.lm_head):
        view = view.with_refusal(None, "log")
    return view


def view_findings(view: EngineView, trained, *, draft_path: str = "", num_layers: int | None = None) -> list[Finding]:
    """What the running engine said (log / probe aspects only) against the trained layout and the checkpoint."""
    out: list[Finding] = []
    if view.refused and view.refused_source in ENGINE_SAID:
        out += refusal_findings(view, trained, draft_path=draft_path, num_layers=num_layers)
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
                                   f"[{', '.join(served)}] ({lay.detail}); the draft was trained on [{', '.join(tr)}] "
                                   f"({trained.source})", ev, WHERE, measured=sure,
                                   fix=f"write ids that make {view.engine} capture [{', '.join(tr)}]"
                                   if c in found else "", needs="" if sure else "the training data (to identify "
                                   "the trained layout)"))
    return out


def refusal_findings(view: EngineView, trained, *, draft_path: str = "", num_layers: int | None = None) -> list[Finding]:
    """The engine's own failure as a finding naming the file and the key (the config's ids, a weight name)."""
    text = view.refused or ""
    cfg = str(Path(draft_path) / "config.json") if draft_path else "the draft's config.json"
    ev = {"error": text, "source": view.refused_source, "engine": view.engine, "version": view.version}
    known = known_failure_text(text)
    if known is not None:                     # a failure the engine facts explain (the frame it was raised in)
        row = fact(*known.fact)
        return [Finding(known.cause, "confirmed", f"{view.engine} dies serving the draft: {known.what}; `{known.key}` "
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
    _, cause = attribution(text)
    fix = ("make the checkpoint load in the engine (the error names the key)" if cause == "weights_dropped" else
           "the engine's message names what it cannot run: change that field, dtype or host (no other version was "
           "seen serving these artifacts, so this is not called a regression)")
    return [Finding(cause, "confirmed", f"{view.engine} refuses the draft ({cfg}): {text}", {**ev, "file": cfg},
                    WHERE, fix=fix, measured=True)]
