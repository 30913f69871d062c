"""Which files a run opened: every path an eagle3lib process opens or lists, recorded where it is asked for.

The evidence behind "with your own inputs nothing is read from the demo world": a Python audit hook
(`sys.addaudithook`) sees every ``open`` (builtin, ``io``, ``torch.load`` of a path, ``numpy``), ``os.listdir``,
``os.scandir`` and ``glob.glob`` of the process, whichever reader made it, so no reader can forget to report.
The interpreter's own files (under ``sys.prefix``, Python sources and extension modules) are left out.

- ``$EAGLE3LIB_OPENED=<file>``: a process that imports eagle3lib (a notebook's kernel under the report runner,
  ``python -m eagle3lib.diagnose``) appends each path it opens, once, to `<file>` (`record_from_environment`, run
  by ``eagle3lib/__init__.py``).
- ``with recording() as seen:`` in one process: `seen` is the set of paths opened inside the block;
  ``with counting() as opens:`` `opens` counts how many times each path was opened (the evidence of "read once").
- `read_log(file)`: the paths a log holds; `under(paths, folder)`: those inside a folder.

An audit hook cannot be removed: one is installed per process, and does nothing while nothing records.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from pathlib import Path

ENV_VAR = "EAGLE3LIB_OPENED"
EVENTS = {"open": 0, "os.listdir": 0, "os.scandir": 0, "glob.glob": 0}   # audit event -> index of its path argument
_SKIP_SUFFIXES = (".py", ".pyc", ".so", ".pth", ".pyi")
_state = {"hooked": False, "sets": [], "counts": [], "log": None, "logged": set()}


def _interpreter_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(sorted({os.path.realpath(r) for r in roots} | roots))


_ROOTS = _interpreter_roots()


def _path_of(arg) -> str | None:
    if isinstance(arg, bytes):
        arg = os.fsdecode(arg)
    if isinstance(arg, os.PathLike):
        arg = os.fspath(arg)
    if not isinstance(arg, str) or not arg or arg.endswith(_SKIP_SUFFIXES):
        return None
    path = os.path.abspath(arg)
    return None if path.startswith(_ROOTS) else path


def _hook(event: str, args) -> None:
    if event not in EVENTS or not (_state["sets"] or _state["counts"] or _state["log"]) or not args:
        return
    path = _path_of(args[EVENTS[event]])
    if path is None:
        return
    for seen in _state["sets"]:
        seen.add(path)
    for opens in _state["counts"] if event == "open" else ():
        opens[path] += 1
    log = _state["log"]
    if log and path not in _state["logged"] and path != log:
        _state["logged"].add(path)
        with _quiet():
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)   # os.open: not an "open" event
            try:
                os.write(fd, (path + "\n").encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)


@contextlib.contextmanager
def _quiet():
    """Recording never breaks the run that is recorded: a log that cannot be written is given up."""
    try:
        yield
    except OSError:
        _state["log"] = None


def _install() -> None:
    if not _state["hooked"]:
        sys.addaudithook(_hook)
        _state["hooked"] = True


def record_from_environment() -> str | None:
    """When ``$EAGLE3LIB_OPENED`` names a file, append every path this process opens to it; returns the file."""
    log = os.environ.get(ENV_VAR)
    if log:
        _state["log"] = os.path.abspath(log)
        _install()
    return _state["log"]


@contextlib.contextmanager
def recording():
    """``with recording() as seen``: `seen` holds every path this process opened or listed inside the block."""
    _install()
    seen: set[str] = set()
    _state["sets"].append(seen)
    try:
        yield seen
    finally:
        _state["sets"].remove(seen)


@contextlib.contextmanager
def counting():
    """``with counting() as opens``: `opens` (a Counter) holds how many times this process opened each path inside
    the block (listing a folder is not counted)."""
    _install()
    opens: Counter = Counter()
    _state["counts"].append(opens)
    try:
        yield opens
    finally:
        _state["counts"].remove(opens)


def read_log(path) -> set[str]:
    """The paths a ``$EAGLE3LIB_OPENED`` log holds (none when it was never written)."""
    p = Path(path)
    return set(p.read_text(encoding="utf-8", errors="surrogateescape").split("\n")) - {""} if p.is_file() else set()


def under(paths, folder) -> list[str]:
    """The paths inside `folder` (itself included), sorted."""
    root = os.path.realpath(folder)
    return sorted(p for p in paths if os.path.realpath(p) == root or os.path.realpath(p).startswith(root + os.sep))
