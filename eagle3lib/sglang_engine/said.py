"""What the running SGLang said of a draft, overruling the tables' view (`HOME.said`): its logs' own failure, and the
load eagle3lib's hook recorded in a serving dump (the layers captured, d2t read, embedding / lm_head replaced,
keys dropped, rows left zero).
"""
from __future__ import annotations

import re
from typing import Callable

from ..engine_kit.view import EngineView, Served
from ..engines.engine_errors import log_lines, root_error, scan_errors
from ..layout import from_ids
from ..once import file_text

SERVED_LINE = re.compile(r"\b(?:Prefill|Decode) batch\b")       # an SGLang log line of a batch it ran


def said(view_for: Callable[..., EngineView], s: Served, version: str | None = None
         ) -> tuple[EngineView, list[str], list[str]]:
    """(the view, notes, problems): the tables' view at `version` (`view_for(version, None)`), overruled by what the
    running SGLang said: its text logs' own failure (the first with a traceback after which it ran no batch: a
    refusal; one it served past is a note) and, where a dump of eagle3lib's SGLang hook carries it (`dump`, its
    manifest's engine "load"), what SGLang's own loader did: the layers its target captured, whether it read d2t,
    replaced the draft's embedding / lm_head with the target's."""
    view, L, notes = view_for(version, None), s.num_layers, []
    for path in (p for p in s.logs if not p.endswith(".json")):
        try:
            lines = log_lines(file_text(path))        # read once per case (`once`); "\r" stays inside a line
        except OSError as e:
            notes.append(f"{path}: {e}")
            continue
        err = root_error(scan_errors(lines))
        if err is not None and any(SERVED_LINE.search(ln) for ln in lines[err.line_no:]):
            notes.append(f"{path}:{err.line_no}: {err.exception}: {err.message[:160]} (logged; the server served "
                         "requests after it: not a refusal)")
        elif err is not None:
            view = view.with_refusal(f"{err.exception}: {err.message[:200]} ({path}:{err.line_no}"
                                     + (f"; raised at {err.frame}" if err.frame else "") + ")", "log")
            break
    load = s.load
    if not load:
        return view, notes, []
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
    value = ("target_sliced" if s.reduced_vocab else "target") if load.get("lm_head_replaced") else \
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
    return view, notes, []
