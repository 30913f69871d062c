"""What an engine's reading of a draft's aux layer ids is, whatever the engine: `EngineReading`, and the ids named as
target boundaries (`named_capture`), the one reading readings agree on (`agreed_reading`) and what decides when they
do not (`Undecided`). Which keys each engine reads and what it then captures is its home's `ids`
module; `serving.layer_reading` puts the readings of every engine beside the trained one.
    named_capture("sglang", key, ids, capture, L, problems, slot_problem)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError
from ..layout import from_ids


@dataclass(frozen=True)
class EngineReading:
    """Which target boundaries one engine feeds to the draft's aux slots, and what goes wrong."""

    engine: str                          # "trained" (what the config says), or the engine's name ("vllm-v1": a runner)
    key: str                             # the config key read, or "default (...)"
    ids: tuple[int, ...]                 # ids as the engine reads them
    capture: tuple[int, ...]             # capture-before indices it uses (0 = embed, L = final pre-norm)
    boundaries: tuple[str | None, ...]   # eagle3lib.layout names; None = never captured
    slot_problems: tuple[str | None, ...] = ()   # per slot: why it crashes or is missing
    problems: tuple[str, ...] = ()       # about the whole reading (which key is ignored, heuristics)
    runner: str = ""                     # vLLM only: the model runner whose reading this is ("v1" / "v2")


@dataclass(frozen=True)
class Undecided:
    """What decides an engine's capture of a draft's ids when the launch does not name it (its version, its model
    runner): as the evidence table says it, and as a suspected finding of `causes` says it and names what it needs."""

    table: str              # "depends on the vLLM model runner (V1 / V2 read other keys)"
    summary: str
    causes: tuple[str, ...]
    needs: str


def agreed_reading(readings) -> EngineReading | None:
    """The first reading when every reading captures the same boundaries, else None (what differs decides)."""
    readings = list(readings)
    return readings[0] if readings and all(r.boundaries == readings[0].boundaries for r in readings) else None


def layer_ids(value, where: str) -> tuple[int, ...] | None:
    """A config value as layer ids (None stays None); ConfigError naming `where` when it is not a list of ints."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise ConfigError(where, "layer ids are not a list of integers", expected="[int, ...]", found=repr(value)[:80])
    return tuple(value)


def named_capture(engine: str, key: str, ids, capture, L: int, problems: list[str],
                  slot_problem: Callable[[int], tuple[bool, str | None]] | None = None,
                  runner: str = "") -> EngineReading:
    """An engine's reading: its capture-before indices sorted as the engine walks its layers (ascending, once each),
    each named as a boundary of an L-layer target; `slot_problem(index)` says whether the engine's layer loop
    captures that index at all and what its model file does wrong there (None: nothing)."""
    if engine != "trained":   # engines test `i in layers_to_capture` inside the layer loop: ascending, once each
        pairs = sorted(dict(zip(capture, ids)).items())
        if [c for c, _ in pairs] != list(capture):
            problems.append(f"ids {list(ids)} are not ascending and unique: the engine concatenates in layer order")
        capture, ids = [c for c, _ in pairs], [i for _, i in pairs]
    names, slot_problems = [], []
    for i in capture:
        if i < 0 or i > L:
            names.append(None)
            slot_problems.append(f"capture index {i} is outside 0..{L}: never captured")
            continue
        captured, bad = slot_problem(i) if slot_problem else (True, None)
        names.append(from_ids([i], "input", L)[0] if captured else None)
        slot_problems.append(bad)
    return EngineReading(engine, key, tuple(ids), tuple(capture), tuple(names), tuple(slot_problems),
                         tuple(problems), runner)
