"""The problems of a report run, and its exit code: what stands between the notebooks and "no fault found".

- `refused(stem, params)`: the parameters given to a notebook that cannot be read (`steps.given`); such a
  notebook is not run, and its row says which parameter, what was given, the error and what was expected.
- `of_failure(stem, status, error, params)`: a notebook that stopped on an eagle3lib error (an input it could not
  read after all, named by its parameter when the message shows the value) or broke on its own (a failure).
- `not_given(stem, declared, params)`: on a user's own draft, the inputs a "no fault found" needs that were left
  empty (the launch command for notebook 01, the training data for notebook 02).
- `needs_missing(stem, params)`: on a user's own draft, the inputs a notebook's parts need (`steps.order.Step.needs`)
  that were left empty: the notebook is not run, and says "not given" (the diagnosis skips those parts the same way).
- `exit_code(rows)`: 0 ok, 1 the workbook failed (a notebook broke or timed out), 3 a given input could not be
  read (2, the run could not start, is the runner's).
"""
from __future__ import annotations

import dataclasses
import re

from ..errors import ALL_ERRORS
from ..steps.given import KINDS, Problem, check_params, given, notebook_kinds
from ..steps.order import PARTS
from ..steps.part import Inputs

EXIT = {"ok": 0, "failed": 1, "cannot start": 2, "unreadable": 3}
# notebook number -> the parameter a "no fault found" needs from it on a user's own draft, and what it decides
CORE = {"01": ("launch", "the serving settings"), "02": ("train_data", "the training-sample replay")}
_ERROR = re.compile(r"^([A-Za-z_]\w*): (.*)$", re.S)


def refused(stem: str, params: dict, base=None) -> tuple[Problem, ...]:
    """The problems of the parameters given to notebook `stem` (empty when all of them read)."""
    return tuple(check_params(stem, params, base))


def of_failure(stem: str, status: str, error: str | None, params: dict) -> tuple[Problem, ...]:
    """The problem of a notebook that did not finish: an eagle3lib error is an input it could not read (named by
    the parameter whose value the message shows), anything else, or a timeout, a failure of the workbook."""
    if status == "ok":
        return ()
    m = _ERROR.match(error or "")
    ename, message = (m.group(1), m.group(2)) if m else ("timeout" if status == "timeout" else "error", error or "")
    input_error = status == "failed" and ename in {c.__name__ for c in ALL_ERRORS}
    kinds = notebook_kinds(stem)
    param, value = next(((k, v) for k, v in params.items() if isinstance(v, str) and v.strip() and v.strip()
                         in message), (stem, ""))
    expected = KINDS[kinds[param]][1] if param in kinds else ""
    what = KINDS[kinds[param]][0] if param in kinds else ""
    return (Problem(param, value, ename, message.strip(), expected, what, failure=not input_error,
                    notebooks=(stem,)),)


def not_given(stem: str, declared, params: dict) -> tuple[str, ...]:
    """The core parameter of `stem` left empty on a user's own draft (the demo world fills it otherwise)."""
    core = CORE.get(stem[:2])
    if core is None or "draft" not in declared or not given(params.get("draft")):
        return ()
    return () if core[0] not in declared or given(params.get(core[0])) else (f"{core[0]} ({stem})",)


def needs_missing(stem: str, params: dict) -> tuple[str, ...]:
    """The inputs notebook `stem`'s parts need that were left empty on a user's own draft (none on the demo world,
    where the demo fills them)."""
    if not given(params.get("draft")):
        return ()
    needs = dict.fromkeys(k for step in PARTS if step.notebook == stem for k in step.needs)
    return tuple(k for k in needs if not given(params.get(k)))


def not_run_findings(stem: str) -> list:
    """The "not checked" findings of notebook `stem`'s parts when it is not run for want of an input (each part's
    `not_run`, where its module has one), with `where` naming the part as the notebook would."""
    out = []
    for step in PARTS:
        if step.notebook == stem and hasattr(step.module, "not_run"):
            out += [dataclasses.replace(f, where=f"{step.name} / {f.where}" if f.where else step.name)
                    for f in step.module.not_run(Inputs())]
    return out


def merged(problems) -> list[Problem]:
    """One problem per parameter, value and error, naming every notebook it was given to."""
    out: dict[tuple, Problem] = {}
    for p in problems:
        key = (p.param, p.given, p.error, p.message, p.failure)
        seen = out.get(key)
        out[key] = p if seen is None else Problem(**{**seen.to_dict(), "notebooks": tuple(dict.fromkeys(
            seen.notebooks + p.notebooks))})
    return list(out.values())


def exit_code(rows) -> int:
    """1 when a notebook broke or timed out, else 3 when a given input could not be read, else 0."""
    found = [Problem.from_dict(p) if isinstance(p, dict) else p for r in rows for p in (_get(r, "problems") or ())]
    if any(p.failure for p in found):
        return EXIT["failed"]
    return EXIT["unreadable"] if found else EXIT["ok"]


def _get(row, key):
    return row.get(key) if isinstance(row, dict) else getattr(row, key, None)
