"""``eagle3lib COMMAND [ARGS ...]``: one command in front of the package CLIs (the console script of pyproject's
[project.scripts], made by ``pip install -e .``; without it: ``python -m eagle3lib COMMAND ...``).

Each command hands the rest of the line, untouched, to its package's own ``main``, which parses it: so
``eagle3lib diagnose --help`` is the diagnose CLI's own help, and the exit code is that CLI's. Nothing here parses
a command's options. Commands (docs/cli.md describes each):

- ``diagnose``   ``eagle3lib.diagnose.cli``: the ranked causes of one deployment in a terminal
- ``report``     ``eagle3lib.report.runner``: every notebook -> reports/ (HTML, index, findings)
- ``recapture``  ``eagle3lib.hidden.recapture``: a training set recaptured from the current target
- ``replay``     ``eagle3lib.replay.cli``: the draft on its training data at dataset size (also under torchrun)
- ``demo``       ``eagle3lib.demo``: restore (or reuse) the embedded demo world and print what it is
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable


def _diagnose(argv: list[str]) -> int:
    from .diagnose.cli import main
    return main(argv)


def _report(argv: list[str]) -> int:
    from .report.runner import main
    return main(argv)


def _recapture(argv: list[str]) -> int:
    from .hidden.recapture import main
    return main(argv)


def _replay(argv: list[str]) -> int:
    from .replay.cli import main
    return main(argv)


def _demo(argv: list[str]) -> int:
    from .demo.__main__ import main
    return main(argv)


# command -> (the CLI it runs, one line of help); imported only when that command runs (torch is slow to import)
COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "diagnose": (_diagnose, "the ranked causes of one deployment (python -m eagle3lib.diagnose)"),
    "report": (_report, "run every notebook into reports/ (python -m eagle3lib.report)"),
    "recapture": (_recapture, "recapture a training set from the current target (python -m eagle3lib.hidden.recapture)"),
    "replay": (_replay, "replay the draft on its training data at dataset size (python -m eagle3lib.replay)"),
    "demo": (_demo, "restore or reuse the embedded demo world (python -m eagle3lib.demo)"),
}


def parser() -> argparse.ArgumentParser:
    """The top-level parser: a command name, then everything after it as that command's own arguments."""
    p = argparse.ArgumentParser(
        prog="eagle3lib", description="EAGLE-3 draft investigation workbook; `eagle3lib COMMAND --help` for one "
        "command's options.", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items()))
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help=", ".join(COMMANDS))
    p.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments, passed on as they are")
    return p


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (default: the process's arguments) to one command; returns that command's exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:     # the command's own -h / --help / options are never the top level's
        return COMMANDS[argv[0]][0](argv[1:])
    args = parser().parse_args(argv)     # no command, an unknown one, or the top level's --help: argparse answers
    return COMMANDS[args.command][0](args.args)


if __name__ == "__main__":
    raise SystemExit(main())
