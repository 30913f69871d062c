"""What an engine reads from a draft config's aux layer ids and which target boundaries it then captures.

`layer_reading(config, num_layers, sglang_version, target_arch, vllm_version, vllm_runner)` gives one
`EngineReading` per reader: "trained" (what the config claims, in its dialect's convention), "sglang" (by version:
+1 on every id, the PR#25454 first-id rule) and "vllm" (input-of-layer ids as they are, read by the model runner
in force), each with the capture-before indices it uses, the boundary names (eagle3lib.layout) and
what goes wrong per slot. With the runner unknown the "vllm" reading is V2's (the default wherever Triton works:
CUDA) and, when V1 (CPU builds) reads other ids, a "vllm-v1" reading follows it. `draft_slots` is how many aux
slots a config declares; `layer_frame` one row per (engine, slot). Each engine's reading is its home's
(`EngineHome.id_readings`: `sglang_engine.ids`, `vllm_engine.ids`); which config keys it reads the ids from, and in
which order, is the table's (engines.facts "id_key" rows); what it captures when the config names none, its
"default_ids" rows.
"""
from __future__ import annotations

import pandas as pd

from ..engine_kit.id_reading import EngineReading, layer_ids, named_capture
from ..engines.versions import DEFAULT_VERSION
from ..model.config import read_config_json
from .homes import homes


def layer_reading(draft_config, num_layers: int, sglang_version: str = DEFAULT_VERSION,
                  target_arch: str | None = None, vllm_version: str | None = None,
                  vllm_runner: str | None = None) -> tuple[EngineReading, ...]:
    """(trained, sglang, vllm[, vllm-v1]) readings of a draft config.json dict (or path) for an L-layer target.

    `vllm_runner` "v1" / "v2" names the model runner (vLLM logs which; CPU builds run V1); None: V2's reading,
    the CUDA default, plus V1's when it differs."""
    raw = read_config_json(draft_config)[0] if not isinstance(draft_config, dict) else draft_config
    L = int(num_layers)
    ec = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    nested = layer_ids(ec.get("eagle_aux_hidden_state_layer_ids"), "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = layer_ids(raw.get("eagle_aux_hidden_state_layer_ids"), "eagle_aux_hidden_state_layer_ids")
    out = []
    if nested is not None:   # SpecForge/SGLang dialect: output-of-layer ids
        out.append(named_capture("trained", "eagle_config.eagle_aux_hidden_state_layer_ids (output-of-layer)", nested,
                                 [i + 1 for i in nested], L, []))
    elif top is not None:
        out.append(named_capture("trained", "eagle_aux_hidden_state_layer_ids (input-of-layer)", top, top, L, []))
    versions = {"sglang": sglang_version, "vllm": vllm_version}     # this function's arguments, by engine
    for name, found in homes().items():          # each engine's own reading (its home's ids module)
        if found.id_readings is not None:
            out.extend(found.id_readings(raw, L, versions.get(name), target_arch, vllm_runner))
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
