"""Every contract check, registered where it is written: a check is its catalogue row (`causes.CATALOGUE`) and one
function marked ``@contract``; nothing else lists it.

    @contract("rope", ROPE_CAUSES, parts=("artifacts", "engine-free", "serving data"))
    def judge_rope(art: Artifacts, opts: Options) -> list[Finding]:
        return check_rope(art, max(opts.replay_n, REPLAY_N))

`CHECKS` maps each name to its `Check`, filled when the check modules are imported (`checks.judge` imports every
module of this folder, so a new module is found without a list). `parts` says which investigations run it, by the
tags of `PARTS` (a part asks `run_checks(part=...)`, never a tuple of names); `part_of` makes it run whenever the
named check runs (`only=("launch",)` runs launch_flags too). A check no part runs fails
tests/checks/test_judge.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import FindingError

# the investigations that run checks, each a tag a check names in `parts`:
PARTS = {
    "artifacts": "notebook 00: the draft, the target and the training data, without an engine",
    "serving": "notebook 01 with a launch command: the checks that need the engine it names",
    "serving data": "notebook 01 with a launch command and training data: measured as that engine serves them",
    "engine-free": "notebook 01 without a launch command: what the draft, target and data decide alone",
    "diffing": "notebook 03: the stored hidden states against the current target",
}


@dataclass(frozen=True)
class Options:
    """What a check may read beside the artifacts: the engine it is asked about (its name, version and vLLM model
    runner), how many training samples to replay (0: config-level only) and the device a recapture runs on (the
    target model itself is the artifacts': `Artifacts.target_model`)."""
    engine: str | None = None
    engine_version: str | None = None
    engine_runner: str | None = None
    replay_n: int = 0
    device: str = "cpu"


@dataclass(frozen=True)
class Check:
    """One registered check: its name, its function of (Artifacts, Options) -> findings, the causes it reports
    (a check that breaks reports them as not checked), the parts that run it, the check it runs with, and whether
    it reads the trained layout (identified by one recapture, shared, when replay evidence is asked for)."""
    name: str
    judge: Callable[..., list]
    causes: tuple[str, ...]
    parts: tuple[str, ...] = ()
    part_of: str = ""
    trained_layout: bool = False


CHECKS: dict[str, Check] = {}


def contract(name: str, causes: tuple[str, ...], parts: tuple[str, ...] = (), part_of: str = "",
          trained_layout: bool = False):
    """Register the decorated function as the check `name` (see the module docstring); returns it unchanged.
    FindingError for a name registered twice, an unknown part tag, or no part at all."""
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not (parts or part_of):
        raise FindingError(f"checks.registry: check {name!r}", "a check no part runs" if not unknown
                           else "unknown part tag", expected=f"parts among {sorted(PARTS)} or part_of a check",
                           found=repr(unknown or parts), cause="a typo in @contract(..., parts=...)")

    def register(fn: Callable[..., list]) -> Callable[..., list]:
        old = CHECKS.get(name)
        if old is not None and (old.judge.__module__, old.judge.__qualname__) != (fn.__module__, fn.__qualname__):
            raise FindingError(f"checks.registry: check {name!r}", "registered twice",
                               expected="one function per check name",
                               found=f"{old.judge.__module__}.{old.judge.__qualname__} and "
                                     f"{fn.__module__}.{fn.__qualname__}", cause="two checks given one name")
        CHECKS[name] = Check(name, fn, tuple(causes), tuple(parts), part_of, trained_layout)
        return fn
    return register


def in_part(part: str) -> list[str]:
    """The names of the checks `part` runs: those tagged with it and those part of one of them."""
    if part not in PARTS:
        raise FindingError("checks.registry", f"unknown part {part!r}", expected=sorted(PARTS), found=part,
                           cause="a typo in run_checks(part=...)")
    tagged = {n for n, c in CHECKS.items() if part in c.parts}
    return [n for n, c in CHECKS.items() if n in tagged or c.part_of in tagged]
