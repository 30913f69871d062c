"""The answer read in 30 seconds, the same in a terminal and in the index (`report.index`): the confirmed causes
first, each with one evidence line per check and its whole fix, then conflicts and suspected causes; then, short,
what was ruled out (the causes' names) and what was not checked, grouped by the input that would check it (its
flag and YAML key, `names.how_to_give`).

- `evidence_lines(v)`: one line per check that decided a cause: what it saw and where (no repetition).
- `unchecked_groups(verdicts)`: the not-checked causes grouped by the inputs their findings ask for.
- `answer_text(d, width)`: the terminal's answer, wrapped to `width` columns (a line is never cut).
- `terminal_width()`: the terminal's columns (``$COLUMNS`` first, as `shutil.get_terminal_size` reads it).
"""
from __future__ import annotations

import shutil
import textwrap

from ..names import how_to_give, inputs_asked

ALARMS = ("confirmed", "conflict", "suspected")      # shown whole: evidence and fix
MIN_WIDTH = 60


def terminal_width(default: int = 100) -> int:
    """The terminal's width in columns (``$COLUMNS``, else the terminal's, else `default`), at least 60."""
    return max(MIN_WIDTH, shutil.get_terminal_size((default, 24)).columns)


def evidence_lines(v) -> list[str]:
    """One line per check behind a cause's status (a `combine.CauseVerdict`): its summary and where it was seen;
    a cause left not checked on some aspects says which."""
    lines = list(dict.fromkeys(f"{f.summary} [{f.where}]" if f.where else f.summary for f in v.deciding))
    if v.label != v.status:
        lines.append(f"not checked: aspects {', '.join(v.unchecked)}")
    return lines


def asked(v, given=()) -> tuple[str, ...]:
    """The inputs a not-checked cause's findings ask for (`names.GIVE`) that were not `given`; () when no flag
    gives what it needs, or every input it names was given (it needs more of them, e.g. a measurement)."""
    return tuple(n for n in inputs_asked(v.needs) if n not in set(given))


def named(v) -> str:
    """A cause as a list names it: its id, and the aspects left unchecked when the others were ruled out."""
    return v.cause + (f" (aspects {', '.join(v.unchecked)})" if v.label != v.status else "")


def give_text(inputs: tuple[str, ...]) -> str:
    """ "give --launch (YAML key launch)", or with several inputs "give --a (YAML key a) and --b (YAML key b)"."""
    return "give " + " and ".join(how_to_give(n) for n in inputs)


def unchecked_groups(verdicts, given=()) -> list[tuple[tuple[str, ...], list]]:
    """[(inputs, [verdicts])]: the causes not checked (wholly or on some aspects) grouped by the inputs they ask
    for that were not `given` (input names of `names.GIVE`), the groups in order of size; the causes that ask for
    what no flag gives, or for more than the inputs given hold, come last, under ()."""
    groups: dict[tuple[str, ...], list] = {}
    for v in verdicts:
        if v.status == "not checked":
            groups.setdefault(asked(v, given), []).append(v)
    named = sorted(((k, g) for k, g in groups.items() if k), key=lambda kg: -len(kg[1]))
    return named + ([((), groups[()])] if () in groups else [])


def _wrap(text: str, width: int, first: str, rest: str | None = None) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest if rest is not None else
                         " " * len(first), break_long_words=False, break_on_hyphens=False) or [first.rstrip()]


def _problems(d, width: int) -> list[str]:
    lines = [f"PROBLEMS ({len(d.problems)}): given inputs that could not be read, parts that broke"]
    for p in d.problems:
        head = f"  {p.param}" + (f" {p.given!r}" if p.given else "") + (" (the workbook broke)" * p.failure)
        lines += _wrap(head, width, "", "      ")
        lines += _wrap(f"{p.error}: {p.message}", width, "    ")
        if p.expected:
            lines += _wrap(f"expected: {p.expected}", width, "    ")
    return lines + [""]


def _alarms(group, status: str, width: int) -> list[str]:
    lines = [f"{status.upper()} ({len(group)})"]
    for i, v in enumerate(group, 1):
        lines += _wrap(f"{i}. {v.cause}: {v.title}", width, "  ", "     ")
        for line in evidence_lines(v):
            lines += _wrap(f"evidence: {line}", width, "     ", "               ")
        if v.fix:
            lines += _wrap(f"fix: {v.fix}", width, "     ", "          ")
    return lines + [""]


def answer_text(d, width: int | None = None, given=()) -> str:
    """The answer as a terminal prints it (a `combine.Diagnosis`): the headline, the problems, each alarm whole
    (evidence lines and fix), then the causes ruled out by name and the causes not checked by the input that would
    check them (`given`: the inputs given, never asked for again); every line wrapped to `width` (the terminal's
    by default), none cut."""
    width = max(MIN_WIDTH, width or terminal_width())
    lines = _wrap(d.headline(), width, "") + [""]
    if d.problems:
        lines += _problems(d, width)
    for status in ALARMS:
        group = d.by_status(status)
        if group:
            lines += _alarms(group, status, width)
    ruled = d.by_status("ruled out")
    if ruled:
        lines += _wrap(", ".join(v.cause for v in ruled), width, f"RULED OUT ({len(ruled)}): ", "  ") + [""]
    groups = unchecked_groups(d.verdicts, given)
    if groups:
        lines.append(f"NOT CHECKED ({sum(len(g) for _, g in groups)}), by the input that would check them")
        for inputs, group in groups:
            if inputs:
                lines += _wrap(f"{give_text(inputs)}: {', '.join(map(named, group))}", width, "  ", "    ")
            else:
                for v in group:
                    lines += _wrap(f"{named(v)}: needs {v.needs or 'an input no flag gives'}", width, "  ", "    ")
    return "\n".join(lines).rstrip() + "\n"
