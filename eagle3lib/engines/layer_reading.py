"""What an engine reads from a draft config's aux layer ids and which target boundaries it then captures.

`layer_reading(config, num_layers, sglang_version, target_arch, vllm_version, vllm_runner)` gives one
`EngineReading` per reader: "trained" (what the config claims, in its dialect's convention), "sglang" (by version:
+1 on every id, the PR#25454 first-id rule) and "vllm" (input-of-layer ids as they are, read by the model runner
in force), each with the capture-before indices it uses, the boundary names (eagle3lib.layout) and
what goes wrong per slot. With the runner unknown the "vllm" reading is V2's (the default wherever Triton works:
CUDA) and, when V1 (CPU builds) reads other ids, a "vllm-v1" reading follows it. `draft_slots` is how many aux
slots a config declares; `layer_frame` one row per (engine, slot). Which config keys each engine reads the ids
from, and in which order, is the table's (engines.facts "id_key" rows): `vllm_ids`, `sglang_ids`; what it captures
when the config names none, its "default_ids" rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from .capture_rules import FIRST_ID_RULE_ARCHS, FIRST_ID_RULE_VERSION, target_model_file, target_rules
from ..errors import ConfigError
from ..layout import from_ids
from .facts import default_ids, default_ids_row, id_key_names, id_keys, id_readers
from ..model.config import read_config_json
from ..model.dialects import value_at
from .versions import DEFAULT_VERSION, VLLM_CHECKED, parse_version

# The keys each vLLM model runner reads the draft's aux ids from are the table's "id_key" rows (engines.facts
# id_keys), first non-empty one wins. Neither runner validates the ids: they are used as capture-before indices.
RUNNERS = id_readers("vllm")


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
    runner: str = ""                     # vLLM only: the model runner whose reading this is ("v1" / "v2")


def _ids(value, where: str):
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigError(where, "layer ids are not a list of integers", expected="[int, ...]", found=repr(value)[:80])
    return tuple(value)


def _boundaries(engine: str, key: str, ids, capture, L: int, problems: list[str],
                target_arch: str | None = None, vllm_version=None, runner: str = "") -> EngineReading:
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
            if i == 0 and engine == "sglang":
                bad = (f"embedding at index 0: {target_model_file(engine, target_arch)} adds a None residual there "
                       "and crashes (SGLang); only some model files guard it")
            elif i == 0 and engine.startswith("vllm") and not _vllm_embed_ok(target_arch, vllm_version):
                bad = (f"embedding at index 0: vLLM's {target_model_file('vllm', target_arch)} adds a None residual "
                       "there and crashes (its Llama / Qwen files capture it as the embedding output)")
        slot_problems.append(bad)
    return EngineReading(engine, key, tuple(ids), tuple(capture), tuple(names), tuple(slot_problems),
                         tuple(problems), runner)


def _vllm_embed_ok(target_arch: str | None, version) -> bool:
    """Whether vLLM's model file for the target captures index 0 (capture_rules TARGET_RULES; files without a row
    are Llama-style and guard the None residual)."""
    rules = target_rules("vllm", target_arch, version) if target_arch else ()
    return all(r.embed for r in rules)


def layer_reading(draft_config, num_layers: int, sglang_version: str = DEFAULT_VERSION,
                  target_arch: str | None = None, vllm_version: str | None = None,
                  vllm_runner: str | None = None) -> tuple[EngineReading, ...]:
    """(trained, sglang, vllm[, vllm-v1]) readings of a draft config.json dict (or path) for an L-layer target.

    `vllm_runner` "v1" / "v2" names the model runner (vLLM logs which; CPU builds run V1); None: V2's reading,
    the CUDA default, plus V1's when it differs."""
    raw = read_config_json(draft_config)[0] if not isinstance(draft_config, dict) else draft_config
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
    probs = []
    ids, key = sglang_ids(raw, sglang_version)
    if ids is None:
        ids = cap = default_ids("sglang", L, sglang_version)
        key = f"default [{default_ids_row('sglang', sglang_version).subject}] (no eagle_config ids)"
        probs += [f"top-level {k} is ignored by SGLang (it reads eagle_config)" if "." not in k else
                  f"{k} is ignored by SGLang" for k in id_key_names("sglang")
                  if k not in id_keys("sglang", "model", sglang_version) and value_at(raw, k) is not None]
    else:
        heuristic = (parse_version(sglang_version) >= parse_version(FIRST_ID_RULE_VERSION)   # same rule as capturespec
                     and (target_arch is None or target_arch.startswith(FIRST_ID_RULE_ARCHS)))
        if heuristic and ids[:1] != (1,):
            cap = ids
            probs.append("PR #25454: first id != 1, so no +1: ids are used as capture-before indices")
        else:
            cap = tuple(i + 1 for i in ids)
    out.append(_boundaries("sglang", key, ids, cap, L, probs, target_arch))
    out.extend(_vllm_readings(raw, L, target_arch, vllm_version, vllm_runner))
    return tuple(out)


def sglang_ids(raw: dict, version: str | None = None) -> tuple[tuple[int, ...] | None, str | None]:
    """(ids, key) SGLang at `version` reads from a draft config, output-of-layer (None, None: it finds none). The
    first key of its "id_key" rows that the config sets (an empty list counts: it is not None)."""
    for k in id_keys("sglang", "model", version or DEFAULT_VERSION):
        value = value_at(raw, k)
        if value is not None:
            return _ids(value, k), k
    return None, None


def vllm_ids(raw: dict, runner: str, version: str | None = None) -> tuple[tuple[int, ...] | None, str | None]:
    """(ids, key) the vLLM `runner` reads from a draft config at `version` (None, None: it finds none)."""
    if runner not in RUNNERS:
        raise ConfigError("vLLM model runner", "unknown runner", expected=RUNNERS, found=repr(runner))
    for k in id_keys("vllm", runner, version or VLLM_CHECKED):
        value = value_at(raw, k)
        if value:                        # vLLM tests truthiness: an empty list reads as absent
            return _ids(value, k), k
    return None, None


def key_present(raw: dict, key: str) -> bool:
    """Whether a config dict has the dotted key at all (any value, empty included)."""
    sect, _, leaf = key.rpartition(".")
    node = value_at(raw, sect) if sect else raw
    return isinstance(node, dict) and leaf in node


def _vllm_readings(raw, L, target_arch, version, runner) -> list[EngineReading]:
    def reading(r: str, engine: str, extra: list[str]) -> EngineReading:
        ids, key = vllm_ids(raw, r, version)
        probs = list(extra)
        if ids is None:
            at = version or VLLM_CHECKED
            ids = default_ids("vllm", L, at)
            key = f"default ({default_ids_row('vllm', at).subject}): V{r[1]} finds no ids"
            unread = [k for k in id_key_names("vllm") if "." in k and key_present(raw, k)]
            if unread:
                probs.append(f"{', '.join(unread)} is not read by vLLM's V{r[1]} model runner")
        else:
            key = f"{key} (V{r[1]} model runner)"
        if any(i < 0 or i > L for i in ids):
            probs.append(f"ids {list(ids)} include indices outside 0..{L}: vLLM does not check them, so fc gets "
                         "fewer states than it was built for: a shape error in fc (on the CPU build its oneDNN "
                         "linear views the input as [-1, fc width], so a batch whose token count fits drafts from "
                         "scrambled inputs instead: served 1.13)")
        return _boundaries(engine, key, ids, ids, L, probs, target_arch, version, r)

    if runner is not None:
        return [reading(runner, "vllm", [])]
    v2, v1 = reading("v2", "vllm", []), reading("v1", "vllm-v1", [])
    if (v1.ids, v1.boundaries) == (v2.ids, v2.boundaries):
        return [v2]
    note = ("model runner not given: this is V2's reading (the default wherever Triton works: CUDA); the V1 "
            f"runner (CPU builds, VLLM_USE_V2_MODEL_RUNNER=0) reads {list(v1.ids)} instead, see vllm-v1")
    return [EngineReading(**{**vars(v2), "problems": (note, *v2.problems)}),
            EngineReading(**{**vars(v1), "problems": ("the V1 model runner's reading (CPU builds, "
                                                      "VLLM_USE_V2_MODEL_RUNNER=0)", *v1.problems)})]


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
