"""What an engine reads from a draft config's aux layer ids and which target boundaries it then captures.

`layer_reading(config, num_layers, sglang_version, target_arch)` gives one `EngineReading` per reader: "trained"
(what the config claims, in its dialect's convention), "sglang" (by version: +1 on every id, the PR#25454 first-id
rule) and "vllm" (input-of-layer ids, by version and model runner), each with the capture-before indices it uses,
the boundary names (eagle3lib.layout) and what goes wrong per slot. `draft_slots` is how many aux slots a config
declares; `layer_frame` one row per (engine, slot).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .capture_rules import FIRST_ID_RULE_ARCHS, FIRST_ID_RULE_VERSION, target_model_file
from ..errors import ConfigError
from ..layout import engine_default_ids, from_ids
from .sglang_resolver import read_config
from .versions import DEFAULT_VERSION, parse_version


@dataclass(frozen=True)
class EngineReading:
    """Which target boundaries one engine feeds to the draft's aux slots, and what goes wrong."""

    engine: str                          # "trained" (what the config says), "sglang" or "vllm"
    key: str                             # the config key read, or "default (...)"
    ids: tuple[int, ...]                 # ids as the engine reads them
    capture: tuple[int, ...]             # capture-before indices it uses (0 = embed, L = final pre-norm)
    boundaries: tuple[str | None, ...]   # eagle3lib.layout names; None = never captured
    slot_problems: tuple[str | None, ...] = ()   # per slot: why it crashes or is missing
    problems: tuple[str, ...] = ()       # about the whole reading (which key is ignored, heuristics)


def _ids(value, where: str):
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigError(where, "layer ids are not a list of integers", expected="[int, ...]", found=repr(value)[:80])
    return tuple(value)


def _boundaries(engine: str, key: str, ids, capture, L: int, problems: list[str],
                target_arch: str | None = None) -> EngineReading:
    if engine != "trained":   # engines test `i in layers_to_capture` inside the layer loop: ascending, once each
        pairs = sorted(dict(zip(capture, ids)).items())
        if [c for c, _ in pairs] != list(capture):
            problems.append(f"ids {list(ids)} are not ascending and unique: the engine concatenates in layer order")
        capture, ids = [c for c, _ in pairs], [i for _, i in pairs]
    names, slot_problems = [], []
    for i in capture:
        bad = None
        if i < 0 or i > L:
            names.append(None)
            bad = f"capture index {i} is outside 0..{L}: never captured"
        elif i == L and engine == "sglang":
            names.append(None)
            bad = f"index {L} (output of the last layer) is never captured by SGLang's layer loop"
        else:
            names.append(from_ids([i], "input", L)[0])
            if i == 0 and engine != "trained":
                bad = (f"embedding at index 0: {target_model_file(engine, target_arch)} adds a None residual there "
                       "and crashes (SGLang; older vLLM); only some model files guard it")
        slot_problems.append(bad)
    return EngineReading(engine, key, tuple(ids), tuple(capture), tuple(names), tuple(slot_problems),
                         tuple(problems))


def layer_reading(draft_config, num_layers: int, sglang_version: str = DEFAULT_VERSION,
                  target_arch: str | None = None) -> tuple[EngineReading, ...]:
    """(trained, sglang, vllm) readings of a draft config.json dict (or path) for an L-layer target."""
    raw = read_config(draft_config) if not isinstance(draft_config, dict) else draft_config
    L = int(num_layers)
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    nested = _ids(ec.get("eagle_aux_hidden_state_layer_ids"), "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = _ids(raw.get("eagle_aux_hidden_state_layer_ids"), "eagle_aux_hidden_state_layer_ids")
    out = []
    if nested is not None:   # SpecForge/SGLang dialect: output-of-layer ids
        out.append(_boundaries("trained", "eagle_config.eagle_aux_hidden_state_layer_ids (output-of-layer)", nested,
                               [i + 1 for i in nested], L, []))
    elif top is not None:
        out.append(_boundaries("trained", "eagle_aux_hidden_state_layer_ids (input-of-layer)", top, top, L, []))
    default = tuple(engine_default_ids(L))
    probs = []
    if nested is None:
        key, ids, cap = "default [2, L//2, L-3] (no eagle_config ids)", default, default
        if top is not None:
            probs.append("top-level eagle_aux_hidden_state_layer_ids is ignored by SGLang (it reads eagle_config)")
    else:
        key, ids = "eagle_config.eagle_aux_hidden_state_layer_ids", nested
        heuristic = (parse_version(sglang_version) >= parse_version(FIRST_ID_RULE_VERSION)   # same rule as capturespec
                     and (target_arch is None or target_arch.startswith(FIRST_ID_RULE_ARCHS)))
        if heuristic and nested[:1] != (1,):
            cap = nested
            probs.append("PR #25454: first id != 1, so no +1: ids are used as capture-before indices")
        else:
            cap = tuple(i + 1 for i in nested)
    out.append(_boundaries("sglang", key, ids, cap, L, probs, target_arch))
    probs = []
    if top is None:
        ids, key = default, "default (2, L//2, L-3) (no top-level ids)"
        if nested is not None:
            probs.append("eagle_config.eagle_aux_hidden_state_layer_ids is not read by vLLM (top level only)")
    else:
        ids, key = top, "eagle_aux_hidden_state_layer_ids (top level)"
    out.append(_boundaries("vllm", key, ids, ids, L, probs, target_arch))
    return tuple(out)


def draft_slots(raw: dict) -> int:
    """Aux slots the draft's fc was built for: num_aux_hidden_states, else the id count, else 3."""
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids") or raw.get("eagle_aux_hidden_state_layer_ids")
    return int(raw.get("num_aux_hidden_states") or (len(ids) if isinstance(ids, list) and ids else 3))


def layer_frame(readings) -> pd.DataFrame:
    """One row per (engine, slot): id read, capture index, boundary fed, same as trained?"""
    trained = next((r.boundaries for r in readings if r.engine == "trained"), None)
    rows = []
    for r in readings:
        for slot, (i, cap, name, bad) in enumerate(zip(r.ids, r.capture, r.boundaries, r.slot_problems)):
            same = None if trained is None or slot >= len(trained) else trained[slot] == name
            rows.append({"engine": r.engine, "slot": slot, "id": i, "capture_index": cap, "boundary": name,
                         "as_trained": same, "problem": bad or "", "key": r.key})
    return pd.DataFrame(rows, columns=["engine", "slot", "id", "capture_index", "boundary", "as_trained", "problem",
                                       "key"])
