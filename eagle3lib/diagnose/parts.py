"""Every check of the notebooks on one set of artifacts, without notebooks: the same step functions, in the order
`steps.order.PARTS` writes once, and one diagnosis of their findings.

Every given input is read first (`steps.given`): one that cannot be read is a problem naming its flag, and no
part sees it (a draft that cannot be read: only the parts that need no loaded draft run). A missing input
narrows what is checked (its findings say `not checked` and name the input); it never fails. A part that breaks
on its own is a failure (exit code 1), never a traceback. No draft given means the demo world, as in the
notebooks (an unreadable input is then passed on as given, so the demo never stands in for it).
"""
from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass, field

from ..causes import LAYOUT_CAUSES, Finding
from ..errors import Eagle3Error
from ..once import case_reads
from ..steps.given import CLI, Problem, check_all, given
from ..steps.order import PARTS
from ..steps.case import case_of
from ..steps.part import Inputs, Part
from .combine import Diagnosis, diagnose

CORE = ("draft", "train_data", "launch")   # "no fault found" needs the draft, its training data and the launch command
# input -> (the causes it decides, the other inputs it needs to decide them): given and readable, it must decide
# at least one of them, or the diagnosis says so instead of "no fault found"
DECIDES = {"launch": (("ndt_override", "wrong_method", "lossy_threshold"), ()),
           "heldout_data": (("generalization_gap",), ("train_data",)),
           "served_log": (("engine_regression", "served_loss_unexplained"), ("train_data",)),
           "served_traffic": (("engine_regression", "served_loss_unexplained", "generalization_gap"),
                              ("served_log", "train_data", "target")),
           "serving_dump": (LAYOUT_CAUSES, ("target", "train_data")),
           "serving_layout": (LAYOUT_CAUSES, ("train_data",)),
           "target": (("hidden_size_mismatch",), ())}
# the inputs that are given or not (the rest are settings with defaults)
GIVEN = ("draft", "target", "train_data", "heldout_data", "launch", "server_log", "served_log", "served_traffic",
         "server_url", "serving_dump", "serving_layout")
NEEDS_DRAFT = frozenset(step.name for step in PARTS if step.needs_draft)
EXIT = {"ok": 0, "failed": 1, "arguments": 2, "unreadable": 3}   # documented in README.md and cli.py


def flag(name: str) -> str:
    """The command-line flag of an Inputs field (``served_log`` -> ``--served-log``)."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Run:
    """The findings of each part, the problems met (inputs that could not be read, parts that broke), the parts
    not run and why, and the diagnosis."""
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    given: frozenset[str] = frozenset()      # the Inputs fields given
    demo: bool = False

    @property
    def not_given(self) -> tuple[str, ...]:
        return () if self.demo else tuple(flag(k) for k in CORE if k not in self.given)

    @property
    def diagnosis(self) -> Diagnosis:
        d = diagnose((f for part in self.findings.values() for f in part), self.problems, self.not_given)
        return dataclasses.replace(d, undecided=tuple(undecided(d, self.given, self.problems)))

    @property
    def exit_code(self) -> int:
        """0: every given input read; 1: a part of the workbook broke; 3: a given input could not be read."""
        if any(p.failure for p in self.problems):
            return EXIT["failed"]
        return EXIT["unreadable"] if self.problems else EXIT["ok"]


def undecided(d: Diagnosis, given_fields, problems=()) -> list[str]:
    """A sentence per given, readable input (with what it needs) that decided none of the causes it decides (on
    none of their aspects)."""
    status = {v.cause: v for v in d.verdicts}
    bad = {p.param for p in problems}
    out = []
    for name, (causes, needs) in DECIDES.items():
        if name not in given_fields or flag(name) in bad or not set(needs) <= set(given_fields):
            continue
        if any(c in status and (status[c].status != "not checked" or any(st != "not checked" for _, st in
                                                                      status[c].aspects)) for c in causes):
            continue                     # a cause decided on one of its aspects counts (its label names the rest)
        why = "; ".join(dict.fromkeys(status[c].needs for c in causes if c in status and status[c].needs))
        out.append(f"{flag(name)} was given but decided none of {', '.join(causes)}" + (f" (needs {why})"
                                                                                       if why else ""))
    return out


def attribute(message: str, inp: Inputs, default: str) -> tuple[str, str]:
    """(flag, value) of the given input a message names (its path or text), else (`default`, "")."""
    for name in CLI:
        value = getattr(inp, name)
        if isinstance(value, str) and value.strip() and value.strip() in message:
            return flag(name), value
    return default, ""


def run(inp: Inputs, progress=None) -> Run:
    """The notebooks' checks in order; an input that cannot be read and a part that breaks are recorded as
    problems, never raised. The inputs' check and every part share what any of them read (`once`): each
    training sample is read from disk once."""
    with case_reads():
        return _run(inp, progress)


def _run(inp: Inputs, progress=None) -> Run:
    """`run` inside its case (the inputs read, then each diagnosed part in order)."""
    problems = check_all({flag(k): (getattr(inp, k), kind) for k, kind in CLI.items()})
    bad = {p.param for p in problems}
    demo, asked = not inp.draft, frozenset(k for k in GIVEN if given(getattr(inp, k)))
    if not demo:        # what could not be read is not given to any part (the demo never fills it: a draft is given)
        blank = {f.name: f.default for f in dataclasses.fields(Inputs)}
        inp = dataclasses.replace(inp, **{k: blank[k] for k in CLI if flag(k) in bad and k != "draft"})
    parts: dict[str, list[Finding]] = {}
    skipped: dict[str, str] = {}

    def guard(name, fn):
        """fn(), or None with the problem recorded: an input it could not read after all, or a failure."""
        if "--draft" in bad and name in NEEDS_DRAFT:
            skipped[name] = "the draft could not be read (--draft)"
            return None
        if progress:
            print(f"[diagnose] {name}", flush=True)
        try:
            return fn()
        except Eagle3Error as e:
            param, value = attribute(str(e), inp, name)
            if param not in bad:
                problems.append(Problem(param, value, type(e).__name__, str(e), "", name))
        except Exception as e:                   # noqa: BLE001 - the workbook broke: a failure, not a traceback
            at = traceback.extract_tb(e.__traceback__)[-1]
            problems.append(Problem(name, "", type(e).__name__, f"{e} (at {at.filename}:{at.lineno})", "",
                                    name, failure=True))
        return None

    done: dict[str, Part] = {}
    case = case_of(inp)         # the inputs resolved once, for every part
    for step in (s for s in PARTS if s.diagnosed):
        if not demo and not all(getattr(inp, k) for k in step.needs):   # a user's draft without what it needs
            if hasattr(step.module, "not_run"):
                parts[step.name] = step.module.not_run(inp)
            continue
        if step.after and step.after not in done:
            continue
        made = guard(step.name, lambda: step.module.run(case, done))
        if made is None:
            continue
        done[step.name] = made
        for text, error in made.problems:       # what it could not read and went on without (a server down)
            param, value = attribute(text, inp, step.name)
            if param not in bad:
                problems.append(Problem(param, value, error, text, "", step.name))
        parts[step.name] = made.findings
    return Run(parts, tuple(problems), skipped, asked, demo)
