"""The draft as the serving engine really loads it, from the best source for each aspect, and what that says.

`deployment_view(engine, art, ...)` starts from the tables at the engine's version
(`serving.loaded_view.engine_view`), lets the real vLLM's own answer overrule them where vLLM is installed
(`vllm_engine.probe`: its config and loader functions run on this draft), and lets the server's own log overrule
both (`vllm_engine.engine_log`: the aux layers it captured, whether it kept the draft's embedding and lm_head, the error it
died of). Each aspect says which source answered (`EngineView.frame()`).
An SGLang deployment's view is overruled by what the running SGLang said (`sglang_view`: its log's own failure, and
the load a dump of eagle3lib's SGLang hook records). What the running engine said becomes findings in `checks.engine_said`. `served_as_served(...)` is the measurement on top: the served τ beside the draft replayed as
trained and as the engine loads it (replay.as_served, checks.served_loss.as_served_findings).
"""
from __future__ import annotations

import dataclasses
import re

from ..checks.inputs import Artifacts
from ..vllm_engine import env as vllm_env
from ..serving.loaded_view import LAST_HIDDEN, EngineView, engine_view
from ..errors import Eagle3Error
from ..layout import from_ids
from ..vllm_engine.engine_log import VllmLogReading, read_vllm_log
from ..engines.engine_errors import log_lines, root_error, scan_errors

_EMBED = {"shared": "target", "own": "own"}
SGLANG_SERVED = re.compile(r"\b(?:Prefill|Decode) batch\b")       # an SGLang log line of a batch it ran


def deployment_view(engine: str, art: Artifacts, *, version: str | None = None, log=None, probe=None,
                    use_probe: bool = True, num_speculative_tokens: int = 3, mis_shaped: tuple[str, ...] = (),
                    device: str | None = None) -> tuple[EngineView, list[str]]:
    """(the draft of `art` (a case's artifacts: its draft and target) as `engine` loads it, notes). `log`: a
    `VllmLogReading` or a log path; `probe`: a `VllmProbe` (else asked here when `use_probe` and a vLLM venv exists,
    for vLLM only); `mis_shaped`: checkpoint keys held in another shape than the config's (the loader's report),
    `device`: the launch's."""
    if art.draft_raw is None or art.target_info is None:
        raise _unreadable(art)
    notes: list[str] = []
    reading = log if isinstance(log, VllmLogReading) or log is None else read_vllm_log(
        log, num_target_layers=art.target_info.num_layers)
    version = version or (reading.version if reading is not None else None)
    runner = (reading.runner or "").lower() or None if reading is not None else None
    view = engine_view(engine, draft_raw=art.draft_raw, tensors=art.tensors or {}, target_info=art.target_info,
                       version=version, runner=runner, mis_shaped=tuple(mis_shaped), device=device)
    if engine == "vllm" and probe is None and use_probe and vllm_env.vllm_python() is not None:
        try:
            from ..vllm_engine.probe import probe as ask
            probe = ask(art.draft_path, art.target_path, num_speculative_tokens=num_speculative_tokens)
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
    """Aspects as vLLM's own code answered them (`vllm_engine.probe.VllmProbe`) overrule the tables."""
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


def sglang_view(view: EngineView, art, *, logs=(), load: dict | None = None) -> tuple[EngineView, list[str]]:
    """The draft as SGLang loaded it, overruling the tables with what the running SGLang said: its logs' own failure
    (the first log with a traceback after which it ran no batch: a refusal; one it served past is a note) and, where a dump of eagle3lib's SGLang hook carries it
    (`sglang_engine.dump`, its manifest's engine "load"), what SGLang's own loader did: the layers its target
    captured, whether it read d2t, replaced the draft's embedding / lm_head with the target's."""
    L, notes = art.target_info.num_layers, []
    for path in logs:
        try:
            lines = log_lines(open(path, encoding="utf-8", errors="replace").read())
        except OSError as e:
            notes.append(f"{path}: {e}")
            continue
        err = root_error(scan_errors(lines))
        if err is not None and any(SGLANG_SERVED.search(ln) for ln in lines[err.line_no:]):
            notes.append(f"{path}:{err.line_no}: {err.exception}: {err.message[:160]} (logged; the server served "
                         "requests after it: not a refusal)")
        elif err is not None:
            view = view.with_refusal(f"{err.exception}: {err.message[:200]} ({path}:{err.line_no}"
                                     + (f"; raised at {err.frame}" if err.frame else "") + ")", "log")
            break
    if not load:
        return view, notes
    who = f"SGLang's own loader ({load.get('model_class') or 'the draft class'}, eagle3lib's hook)"
    kept = load.get("layers_to_capture")
    if kept is not None:
        view = view.overruled("layout", tuple(from_ids(sorted({int(i) for i in kept if 0 <= int(i) <= L}), "input", L)),
                              "probe", f"{who}: the target was given ids {load.get('layer_ids')} and captures the "
                              f"inputs of layers {list(kept)}")
    keys = {k["key"]: k for k in load.get("keys") or ()}
    if load.get("d2t_read") is not None:
        view = view.overruled("d2t", "checkpoint" if load["d2t_read"] else "zeros", "probe",
                              f"{who}: d2t read into its hot token map: {load['d2t_read']} (else draft id i is "
                              "target id i)")
    if load.get("embedding_replaced") is not None:
        view = view.overruled("embedding", "target" if load["embedding_replaced"] else "own", "probe",
                              f"{who}: the target's embedding replaced the draft's: {load['embedding_replaced']}")
    head = next((k for n, k in keys.items() if n.endswith("lm_head.weight")), None)
    reduced = art.draft_cfg is not None and art.draft_cfg.draft_vocab_size != art.target_info.vocab_size
    value = ("target_sliced" if reduced else "target") if load.get("lm_head_replaced") else \
        "own" if head is not None and head.get("loaded") else "random"
    view = view.overruled("lm_head", value, "probe", f"{who}: lm_head.weight " + (
        "loaded" if head is not None and head.get("loaded") else "not in the checkpoint" if head is None else
        "not taken") + f", the target's head given: {bool(load.get('lm_head_replaced'))}")
    if load.get("dropped"):
        notes.append(f"{who} dropped checkpoint keys without a word: {', '.join(load['dropped'])}")
    zeros = {p: z for p, z in (load.get("zero_rows") or {}).items() if p.endswith("qkv_proj.weight")}
    if zeros and view.aspects.get("mis_shaped") is not None:
        view = view.overruled("mis_shaped", "padded", "probe", f"{who}: " + "; ".join(
            f"{p} loaded with {z[0]} of its {z[1]} rows all zero" for p, z in zeros.items())
            + " (the checkpoint's shorter shards, zeros past them)")
    return view, notes
