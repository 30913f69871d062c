"""Which aux layer ids vLLM reads from a draft config, per model runner (V1 / V2), and which target boundaries it
then captures: the keys each runner tries are the engine facts' "id_key" rows (the first non-empty one wins; neither
runner validates the ids, they are capture-before indices), its default ids when it finds none, and what the
target's model file does with the embedding at index 0 (capture_rules).
    vllm_readings(raw, L, version="0.32.0", runner="v1")
`vllm_reading`: the one capture a launch gets (None where the unknown model runner decides: `UNDECIDED`);
`id_source`: what a finding resting on it cites.
"""
from __future__ import annotations

from ..engine_kit.id_reading import EngineReading, Undecided, agreed_reading, layer_ids, named_capture
from ..engines.capture_rules import target_model_file, target_rules
from ..engines.facts import default_ids, default_ids_row, id_key_names, id_keys, id_readers
from ..engines.versions import VLLM_CHECKED
from ..errors import ConfigError
from ..model.dialects import value_at

RUNNERS = id_readers("vllm")


def vllm_ids(raw: dict, runner: str, version: str | None = None) -> tuple[tuple[int, ...] | None, str | None]:
    """(ids, key) the vLLM `runner` reads from a draft config at `version` (None, None: it finds none)."""
    if runner not in RUNNERS:
        raise ConfigError("vLLM model runner", "unknown runner", expected=RUNNERS, found=repr(runner))
    for k in id_keys("vllm", runner, version or VLLM_CHECKED):
        value = value_at(raw, k)
        if value:                        # vLLM tests truthiness: an empty list reads as absent
            return layer_ids(value, k), k
    return None, None


def key_present(raw: dict, key: str) -> bool:
    """Whether a config dict has the dotted key at all (any value, empty included)."""
    sect, _, leaf = key.rpartition(".")
    node = value_at(raw, sect) if sect else raw
    return isinstance(node, dict) and leaf in node


def _embed_ok(target_arch: str | None, version) -> bool:
    """Whether vLLM's model file for the target captures index 0 (capture_rules TARGET_RULES; files without a row
    are Llama-style and guard the None residual)."""
    rules = target_rules("vllm", target_arch, version) if target_arch else ()
    return all(r.embed for r in rules)


def vllm_readings(raw: dict, L: int, version: str | None = None, target_arch: str | None = None,
                  runner: str | None = None) -> list[EngineReading]:
    """vLLM's reading of a draft config for an L-layer target: the named `runner`'s, or with the runner unknown V2's
    (the CUDA default) and, when V1 (CPU builds) reads other ids, V1's after it ("vllm-v1")."""
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
        def slot_problem(i: int) -> tuple[bool, str | None]:
            if i == 0 and not _embed_ok(target_arch, version):
                return True, (f"embedding at index 0: vLLM's {target_model_file('vllm', target_arch)} adds a None "
                              "residual there and crashes (its Llama / Qwen files capture it as the embedding output)")
            return True, None
        return named_capture(engine, key, ids, ids, L, probs, slot_problem, r)

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


UNDECIDED = Undecided("depends on the vLLM model runner (V1 / V2 read other keys)",
                      "vLLM's V1 and V2 model runners read these ids from other keys: the runner decides (the "
                      "server's startup log names it; CPU builds run V1)", ("missing_layer_ids", "aux_layout_mismatch"),
                      "the vLLM model runner (the server's startup log)")


def vllm_reading(raw: dict, L: int, version: str | None = None, target_arch: str | None = None,
                 runner: str | None = None) -> EngineReading | None:
    """What vLLM captures with the named `runner`; with none, read by both runners and given only when they agree
    (None: the runner decides, `UNDECIDED`)."""
    return agreed_reading(vllm_readings(raw, L, version, target_arch, runner))


def id_source() -> str:
    """The `source` of a finding that rests on how vLLM reads the ids."""
    runners = "; ".join(f"{r.upper()}: {', then '.join(id_keys('vllm', r, VLLM_CHECKED))}" for r in RUNNERS)
    return f"engines.facts id_key rows: vLLM {VLLM_CHECKED} model runners ({runners}), input-of-layer"
