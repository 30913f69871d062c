"""Which aux layer ids SGLang reads from a draft config and which target boundaries it then captures, by version:
the keys it tries are the engine facts' "id_key" rows, the +1 on every id (output-of-layer ids), PR #25454's first-id
rule, its default ids when the config names none, and what its layer loop and model files do at index 0 and L.
    sglang_readings(raw, L, version="0.5.6", target_arch="LlamaForCausalLM")
`sglang_reading`: the one capture a launch gets (None where the unknown version decides: `UNDECIDED`); `id_source`:
what a finding resting on it cites.
"""
from __future__ import annotations

from ..engine_kit.id_reading import EngineReading, Undecided, agreed_reading, layer_ids, named_capture
from ..engines.capture_rules import FIRST_ID_RULE_ARCHS, FIRST_ID_RULE_VERSION, target_model_file
from ..engines.facts import default_ids, default_ids_row, id_key_names, id_keys
from ..engines.versions import DEFAULT_VERSION, parse_version
from ..model.dialects import value_at


def sglang_ids(raw: dict, version: str | None = None) -> tuple[tuple[int, ...] | None, str | None]:
    """(ids, key) SGLang at `version` reads from a draft config, output-of-layer (None, None: it finds none). The
    first key of its "id_key" rows that the config sets (an empty list counts: it is not None)."""
    for k in id_keys("sglang", "model", version or DEFAULT_VERSION):
        value = value_at(raw, k)
        if value is not None:
            return layer_ids(value, k), k
    return None, None


def sglang_readings(raw: dict, L: int, version: str | None = None, target_arch: str | None = None,
                    runner: str | None = None) -> list[EngineReading]:
    """SGLang's reading of a draft config for an L-layer target at `version` (one reading; SGLang has no runners)."""
    version = version or DEFAULT_VERSION
    probs = []
    ids, key = sglang_ids(raw, version)
    if ids is None:
        ids = cap = default_ids("sglang", L, version)
        key = f"default [{default_ids_row('sglang', version).subject}] (no eagle_config ids)"
        probs += [f"top-level {k} is ignored by SGLang (it reads eagle_config)" if "." not in k else
                  f"{k} is ignored by SGLang" for k in id_key_names("sglang")
                  if k not in id_keys("sglang", "model", version) and value_at(raw, k) is not None]
    else:
        heuristic = (parse_version(version) >= parse_version(FIRST_ID_RULE_VERSION)   # same rule as capturespec
                     and (target_arch is None or target_arch.startswith(FIRST_ID_RULE_ARCHS)))
        if heuristic and ids[:1] != (1,):
            cap = ids
            probs.append("PR #25454: first id != 1, so no +1: ids are used as capture-before indices")
        else:
            cap = tuple(i + 1 for i in ids)

    def slot_problem(i: int) -> tuple[bool, str | None]:
        if i == L:
            return False, f"index {L} (output of the last layer) is never captured by SGLang's layer loop"
        if i == 0:
            return True, (f"embedding at index 0: {target_model_file('sglang', target_arch)} adds a None residual "
                          "there and crashes (SGLang); only some model files guard it")
        return True, None
    return [named_capture("sglang", key, ids, cap, L, probs, slot_problem)]


UNDECIDED = Undecided("depends on the SGLang version (PR#25454 first-id rule)",
                      "SGLang reads these ids differently before and after PR#25454 (~v0.5.12): the version decides",
                      ("layer_id_off_by_one", "aux_layout_mismatch"), "the SGLang version")


def sglang_reading(raw: dict, L: int, version: str | None = None, target_arch: str | None = None,
                   runner: str | None = None) -> EngineReading | None:
    """What SGLang captures at `version`; with no version, read at the oldest and the newest rule and given only
    when both agree (None: the version decides, `UNDECIDED`)."""
    versions = [version] if version else [DEFAULT_VERSION, "head"]
    return agreed_reading(sglang_readings(raw, L, v, target_arch)[0] for v in versions)


def id_source() -> str:
    """The `source` of a finding that rests on how SGLang reads the ids."""
    return (f"engines.facts id_key rows (SGLang reads {', '.join(id_keys('sglang', 'model'))}); "
            "sglang_engine.ids: sglang llama.py set_eagle3_layers_to_capture (+1), PR#25454 (first-id rule, ~v0.5.12)")
