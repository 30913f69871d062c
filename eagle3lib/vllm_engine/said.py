"""What the running vLLM said of a draft, overruling the tables' view (`HOME.said`): the first of the deployment's logs
that says what the engine did with the draft (the version and model runner the tables are read at, the aux ids it
captured, its embedding / lm_head sharing, the error it died of: `engine_log`), and vLLM's own code asked about the
draft beside its target where vLLM is installed (`probe`). A log can overrule the probe; the probe, the tables.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..engine_kit.view import LAST_HIDDEN, EngineView, Served
from ..errors import Eagle3Error
from ..layout import from_ids
from . import env
from .engine_log import VllmLogReading, read_vllm_log

_EMBED = {"shared": "target", "own": "own"}


def said(view_for: Callable[..., EngineView], s: Served, version: str | None = None
         ) -> tuple[EngineView, list[str], list[str]]:
    """(the view, notes, problems): the tables' view (`view_for(version, runner)`) at the version and runner the
    first log that says what vLLM did with the draft names (else `version`, the launch's as discovered), overruled by vLLM's probe (asked here
    when `s.use_probe`, none is given and a vLLM venv exists) and that log. A log that cannot be read is a problem."""
    notes: list[str] = []
    problems: list[str] = []
    reading = None
    for path in s.logs:
        try:
            r = read_vllm_log(path)
        except Eagle3Error as e:
            problems.append(f"{path}: {e}")
            continue
        if r.draft_loaded or r.errors:
            reading = r
            break
    runner = (reading.runner or "").lower() or None if reading is not None else None
    view = view_for((reading.version if reading is not None else None) or version, runner)
    probe = s.probe
    if probe is None and s.use_probe and env.vllm_python() is not None:
        try:
            from .probe import probe as ask
            probe = ask(s.draft, s.target, num_speculative_tokens=s.num_speculative_tokens)
        except Eagle3Error as e:
            notes.append(f"the vLLM probe could not answer: {e}")
    if probe is not None:
        view = from_probe(view, probe, s)
    if reading is not None:
        view = from_log(view, reading, s)
    return view, notes, problems


def _layout(ids, L: int) -> tuple:
    """vLLM's capture for ids (input-of-layer, ascending, once each; an id outside 0..L is never captured)."""
    ok = sorted({int(i) for i in ids if 0 <= int(i) <= L})
    return tuple(from_ids(ok, "input", L))


def from_probe(view: EngineView, p, s: Served) -> EngineView:
    """Aspects as vLLM's own code answered them (`vllm_engine.probe.VllmProbe`) overrule the tables."""
    L, who = s.num_layers, f"vLLM {p.vllm_version} ({p.runner or '?'} runner)"
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


def from_log(view: EngineView, r: VllmLogReading, s: Served) -> EngineView:
    """Aspects as the server's own log answered them (`engine_log.read_vllm_log`): the aux ids its runner captured,
    whether it shared the target's embedding / lm_head, the error it died of."""
    L = s.num_layers
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
                value = "target_sliced" if s.reduced_vocab else "target"
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
