"""One entry point: every contract check on whatever inputs are given; a missing input narrows, never fails.

    findings = run_checks(draft="d/", target="t/", data="data/", launch="python -m sglang.launch_server ...",
                          engine="sglang", engine_version="0.5.6")
    causes.findings_frame(findings)      # one row per finding, for a notebook table
    run_checks(draft="d/", target="t/", data="data/", part="artifacts")    # notebook 00's checks
    check_artifacts(case.artifacts, part="artifacts")     # ... on a case's artifacts, read once (steps.case)
The checks are those registered with `checks.registry.contract` in this folder's modules (all imported here).
Checks that need replay evidence run it on `replay_n` training samples (0 = config-level only, the default);
the cheap measurements run whenever their inputs are given (RoPE: a draft-vs-target difference is replayed under
both on `rope.REPLAY_N` samples or `replay_n`, whichever is more; context: training samples past the draft's
max_position_embeddings on `context.REPLAY_N`).
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from pathlib import Path

from ..causes import Finding, not_checked
from ..errors import Eagle3Error
from ..progress import track
from .inputs import Artifacts, read_artifacts, with_identified_layout
from .registry import CHECKS, Options, in_part

# every module of this folder: each check registers itself where it is written (checks.registry), so a new one is
# found without a list
for _module in pkgutil.iter_modules([str(Path(__file__).parent)]):
    importlib.import_module(f"{__package__}.{_module.name}")


def _identified(art, names, replay_n: int):
    """`art` with the trained layout identified by recapture when replay evidence is asked for and a check that
    reads the layout runs; else `art`. A target that will not load is left to the drift check to report."""
    if replay_n <= 0 or not art.target_path or art.data is None or not any(CHECKS[n].trained_layout for n in names):
        return art
    try:
        return with_identified_layout(art)
    except Eagle3Error:
        return art


def _engine(engine, launch):
    """The engine named, else the launch command's (none when its speculative settings could not be read: what
    the engine does with a draft it may not even load is not evidence)."""
    if engine:
        return engine.lower()
    return None if launch is None or launch.speculation_unread else launch.engine


def run_checks(draft=None, target=None, data=None, launch=None, training_config=None, engine=None,
               engine_version=None, served_prompts=None, progress=None, *, replay_n: int = 0,
               only=None, part: str | tuple[str, ...] | None = None, engine_runner: str | None = None, device: str = "cpu",
               served_traffic=None, dtype: str = "auto") -> list[Finding]:
    """`check_artifacts` on the inputs given, read here (`read_artifacts`); the checks' replays load the draft on
    `device` in `dtype` ("auto": float32 on CPU) and a recapture runs the target there."""
    art = dataclasses.replace(read_artifacts(draft, target, data, launch, training_config, served_prompts,
                                             engine=engine, served_traffic=served_traffic), replay_dtype=dtype,
                              replay_device=device)
    return check_artifacts(art, progress, replay_n=replay_n, only=only, part=part, engine=engine,
                           engine_version=engine_version, engine_runner=engine_runner)


def check_artifacts(art: Artifacts, progress=None, *, replay_n: int = 0, only=None,
                    part: str | tuple[str, ...] | None = None, engine=None, engine_version=None,
                    engine_runner: str | None = None) -> list[Finding]:
    """Every check (those `part` runs, or those named in `only` with the checks part of them) on `art`; each returns
    Findings, never raises. The trained layout identified by recapture is kept in `art` for every later call (a
    case's parts share it); what the checks load through it (the replay setup, tensors, the tokenizer) is loaded
    once for this call and let go after it (`Artifacts.scoped`)."""
    names = chosen(only, part)
    art = _identified(art, names, int(replay_n)).scoped()    # the identified layout kept; the checks' loads let go
    opts = Options(engine=_engine(engine, art.launch), engine_version=engine_version, engine_runner=engine_runner,
                   replay_n=int(replay_n), device=art.replay_device)
    out: list[Finding] = []
    for name in track(names, desc="checks", progress=progress, unit="check"):
        c = CHECKS[name]
        try:
            out.extend(c.judge(art, opts))
        except Exception as e:   # noqa: BLE001 - a check that breaks reports it and the others still run
            out.extend(not_checked(cause, f"checks.{name}", "a check that runs on these inputs",
                                   f"the check failed: {type(e).__name__}: {str(e)[:200]}") for cause in c.causes)
    return out


def chosen(only=None, part: str | tuple[str, ...] | None = None) -> list[str]:
    """The checks a call runs: those of `part` (a tag of checks.registry.PARTS, or several), else those named in
    `only` and the checks part of them, else all."""
    if part is not None:
        wanted = {n for p in ((part,) if isinstance(part, str) else part) for n in in_part(p)}
        return [n for n in CHECKS if n in wanted]
    if isinstance(only, str):
        only = (only,)
    return [n for n, c in CHECKS.items() if only is None or n in only or c.part_of in only]
