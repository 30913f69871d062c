"""What one investigation is about: `Case`, the user's `Inputs` resolved once, for every part, notebook and the
diagnosis alike.

No draft given: the demo world fills every input left empty (its draft, target, training, held-out and shifted
samples, training log; the seed's launch command, fixed command, SGLang version and startup log from
data/samples/demo_launch.json; its server's dump, made on first use). With a user's draft nothing is filled: an
empty input stays "not given" and the part that needs it says so. A launch or fixed command may be the path of a
file holding it. What is costly or can fail is resolved on first use (the launch commands' files, the recorded
accuracy, the demo server's dump, the checks' `artifacts`), once per case, so a part that does not need it never
fails on it.
Usage: ``case = case_of(Inputs(draft="out/draft", target="models/t", train_data="data/train"))``.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from ..checks.inputs import Artifacts, read_artifacts
from ..checks.replayed_layout import number_or_none
from ..demo import world as demo
from ..demo.sweep import ensure_serving_dump
from ..errors import Eagle3Error, ServingArgsError
from ..hidden.dumps import Dump, load_dump
from ..once import CaseReads, case_reads, kept_by_file, new_reads
from ..replay.verdict import read_recorded_accuracy
from .part import Inputs

SAMPLES_DIR = demo.REPO_ROOT / "data" / "samples"
DEMO_LAUNCH = SAMPLES_DIR / "demo_launch.json"   # the demo world's launch command, fixed command and startup log


@dataclass(frozen=True, eq=False)
class Case:
    """The inputs of one investigation, resolved. The draft, target and data paths are those the parts load (the
    demo world's when no draft is given); `given` is what the user gave, as given (the notebooks' settings too)."""

    given: Inputs
    demo: bool
    draft_path: str
    target_path: str                    # "" = not given (a user's draft without its target)
    train_data: str                     # "" = not given
    heldout: Mapping[str, str]          # name -> samples the draft was not trained on ("held-out", "new prompts")
    training_log: str

    @cached_property
    def read_so_far(self) -> CaseReads:
        """What this case has read (`once`): every part run on it, in a notebook or the diagnosis, shares it."""
        return new_reads()

    def reading(self):
        """``with case.reading():`` each input file read once for the case (`once.case_reads` on `read_so_far`; inside
        a diagnosis's own, that one)."""
        return case_reads(reads=self.read_so_far)

    @cached_property
    def launch_command(self) -> str:
        """The launch command's text (a file's, when a path is given); the seed's on the demo world."""
        if self.demo:
            return self.given.launch or self._demo_launch["launch_command"]
        return command_text(self.given.launch)

    @cached_property
    def fixed_command(self) -> str:
        """A corrected command to compare with (notebook 01); the seed's on the demo world."""
        if self.demo:
            return self.given.fixed_command or self._demo_launch["fixed_command"]
        return command_text(self.given.fixed_command)

    @property
    def sglang_version(self) -> str:
        return self.given.sglang_version or (self._demo_launch["sglang_version"] if self.demo else "")

    @property
    def server_log(self) -> str:
        return self.given.server_log or (self._demo_launch["server_log"] if self.demo else "")

    @property
    def launch_notes(self) -> tuple[str, ...]:
        """Where the launch side came from, when the demo world filled it."""
        return (f"demo world: launch command, fixed command, SGLang version and startup log from "
                f"{DEMO_LAUNCH.name}",) if self.demo else ()

    @cached_property
    def serving_dump(self) -> str:
        """The serving dump given; on the demo world, its server's (the demo engine serving with the seed's capture,
        made once under the world's root); "" = not given."""
        if self.given.serving_dump or not self.demo:
            return self.given.serving_dump
        return str(ensure_serving_dump("seed", device=self.given.device))

    @cached_property
    def loaded_dump(self) -> Dump | None:
        """The serving dump (`hidden.dumps.load_dump`: its manifest and requests), loaded once; None = not given."""
        return load_dump(self.serving_dump) if self.serving_dump else None

    @cached_property
    def recorded(self) -> tuple[float | None, str]:
        """(the recorded validation accuracy, where it was read): the parameter when given (>= 0), else the training
        log's last record, else (None, "not given")."""
        acc = self.given.recorded_acc
        acc = number_or_none(acc) if isinstance(acc, (int, float)) and not isinstance(acc, bool) else None
        if acc is not None and acc >= 0:
            return acc, "parameter"
        if self.training_log:
            return read_recorded_accuracy(self.training_log)
        return None, "not given"

    @cached_property
    def artifacts(self) -> Artifacts:
        """What the checks read, read once for the case (`checks.inputs.read_artifacts`): its draft, target, training
        data, launch command and served traffic, what cannot be read recorded in its `problems`; its replays load the
        draft in the given dtype on the given device. Every part's checks judge this one object (or a view of it)."""
        problems = {}
        try:
            launch = self.launch_command or None
        except Eagle3Error as e:           # a launch command file that is not text
            launch, problems = None, {"launch": f"{type(e).__name__}: {e}"}
        art = read_artifacts(self.draft_path, self.target_path or None, self.train_data or None, launch,
                             served_traffic=self.given.served_traffic or None)
        return dataclasses.replace(art, replay_dtype=self.given.dtype, replay_device=self.given.device,
                                   problems=MappingProxyType({**art.problems, **problems}))

    @property
    def recorded_acc(self) -> float | None:
        return self.recorded[0]

    @property
    def recorded_from(self) -> str:
        return self.recorded[1]

    @cached_property
    def _demo_launch(self) -> dict:
        return json.loads(DEMO_LAUNCH.read_text())


def case_of(inputs: Inputs) -> Case:
    """`inputs` resolved: on the demo world (no draft given) its artifacts fill what is empty; with a user's draft
    every path is as given."""
    if inputs.draft:
        held = {k: p for k, p in (("held-out", inputs.heldout_data), ("new prompts", inputs.new_prompt_data)) if p}
        return Case(inputs, False, inputs.draft, inputs.target, inputs.train_data, held, inputs.training_log)
    w = demo.ensure_world()
    held = {"held-out": inputs.heldout_data or str(w.heldout_data),
            "new prompts": inputs.new_prompt_data or str(w.shifted_data)}
    return Case(inputs, True, str(w.draft), inputs.target or str(w.target), inputs.train_data or str(w.seed_data),
                held, inputs.training_log or str(w.training_log))


def command_text(command: str) -> str:
    """`command`, or the text of the file it names (one command, backslash continuations kept) when it is a file
    path; ServingArgsError when that file is not text."""
    c = (command or "").strip()
    if c and "\n" not in c and " " not in c and Path(repo_path(c)).is_file():
        path = Path(repo_path(c))
        try:
            return kept_by_file("launch file", path, lambda: path.read_bytes().decode("utf-8").strip())  # once a case
        except (OSError, UnicodeDecodeError) as e:
            raise ServingArgsError(str(path), "the launch command file cannot be read as text", expected="a text "
                                   "file holding one launch command", found=f"{type(e).__name__}: {e}"[:160],
                                   cause="a binary file, or another file than the command") from None
    return command


def repo_path(path: str) -> str:
    """`path` as given when it exists, is absolute or a URL; else relative to the repository root."""
    p = Path(path)
    if not path or "://" in path or p.is_absolute() or p.exists():
        return path
    return str(demo.REPO_ROOT / p)


def reads_once(run: Callable) -> Callable:
    """A step's ``run(case, earlier)`` inside its case's reads (`Case.reading`): a notebook's part reads each input
    file, config and training sample once, as the diagnosis does."""
    @functools.wraps(run)
    def in_case(case: Case, *args, **kwargs):
        with case.reading():
            return run(case, *args, **kwargs)
    return in_case
