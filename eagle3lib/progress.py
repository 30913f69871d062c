"""Progress of the library's loops, as each place it runs reads it best.

``with bar(total=n, desc="replay", progress=progress) as b: ... b.update(1)`` and
``for x in track(items, desc="checks", progress=progress): ...`` show, by where they run (`mode()`):

- ``"live"``: stderr is a terminal: a tqdm bar;
- ``"notebook"``: a Jupyter kernel that the report runner did not start: a tqdm.auto (widget) bar;
- ``"summary"``: a report run (the runner sets ``$EAGLE3LIB_FINDINGS`` for each notebook's kernel) or stderr is
  not a terminal (a log file, a pipe): nothing while the loop runs, then ONE line on stdout when it ends:
  ``replay heldout: 64/64 samples in 3.2 s (20 sample/s)``;
- ``"off"``: ``progress=False``: nothing at all.
"""
from __future__ import annotations

import os
import sys
import time

# The variable the report runner sets for every notebook it runs (eagle3lib.report.findings.ENV_VAR, which is a
# higher layer: tests/test_progress.py checks that both name the same variable).
REPORT_ENV_VAR = "EAGLE3LIB_FINDINGS"

MODES = ("off", "live", "notebook", "summary")


def _in_jupyter_kernel() -> bool:
    ipython = sys.modules.get("IPython")          # never import IPython only to ask
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def mode(progress: bool = True) -> str:
    """How a loop shows its progress here (one of MODES); see the module docstring."""
    if not progress:
        return "off"
    if os.environ.get(REPORT_ENV_VAR):
        return "summary"
    if _in_jupyter_kernel():
        return "notebook"
    stderr = sys.stderr
    try:
        tty = stderr is not None and stderr.isatty()
    except (AttributeError, ValueError):          # a closed or unusual stream
        tty = False
    return "live" if tty else "summary"


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{int(s // 60)} min {s % 60:02.0f} s"


def plural(unit: str, n) -> str:
    """'sample' -> 'samples', 'batch' -> 'batches' (tqdm's 'it' stays)."""
    if unit == "it" or n == 1:
        return unit
    return unit + ("es" if unit.endswith(("s", "x", "ch", "sh")) else "s")


def summary_line(desc: str, n: int, total, seconds: float, unit: str = "it", postfix: dict | None = None) -> str:
    """The one line a finished loop prints in "summary" mode."""
    count = f"{n}/{total}" if total is not None else f"{n}"
    rate = f"{n / seconds:.3g} {unit}/s" if seconds > 0 else f"- {unit}/s"
    line = f"{desc or 'progress'}: {count} {plural(unit, total if total is not None else n)} in " \
           f"{_seconds(seconds)} ({rate})"
    if postfix:
        line += ", " + ", ".join(f"{k}={v}" for k, v in postfix.items())
    return line


class Progress:
    """One loop's progress: `update(n)`, `set_postfix(**values)`, `close()`; a context manager.

    `n` and `total` are readable in every mode. In "summary" mode `close()` prints the one line (once, with the
    count reached, also when the loop stopped early); `set_postfix` values are added to that line.
    """

    def __init__(self, total=None, desc: str = "", progress: bool = True, *, unit: str = "it",
                 mininterval: float | None = None, out=None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0
        self.mode = mode(progress)
        self._out, self._postfix, self._closed = out, {}, False
        self._t0 = time.perf_counter()
        self._tqdm = None
        if self.mode in ("live", "notebook"):
            if self.mode == "notebook":
                from tqdm.auto import tqdm
            else:
                from tqdm import tqdm
            kw = {} if mininterval is None else {"mininterval": mininterval}
            self._tqdm = tqdm(total=total, desc=desc, unit=unit, **kw)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._tqdm is not None:
            self._tqdm.update(n)

    def set_postfix(self, **values) -> None:
        self._postfix.update(values)
        if self._tqdm is not None:
            self._tqdm.set_postfix(values, refresh=False)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._tqdm is not None:
            self._tqdm.close()
        elif self.mode == "summary":
            line = summary_line(self.desc, self.n, self.total, time.perf_counter() - self._t0, self.unit,
                                self._postfix)
            print(line, file=self._out or sys.stdout, flush=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(total=None, desc: str = "", progress: bool = True, *, unit: str = "it", mininterval: float | None = None,
        out=None) -> Progress:
    """A progress bar for a loop of `total` steps (None: unknown); `progress=False`: silent. `out`: where the
    "summary" line goes (default stdout)."""
    return Progress(total, desc, progress, unit=unit, mininterval=mininterval, out=out)


def track(iterable, total=None, desc: str = "", progress: bool = True, *, unit: str = "it",
          mininterval: float | None = None, out=None):
    """Iterate `iterable`, counting each item on a `bar` (total: len(iterable) when it has one)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    with bar(total, desc, progress, unit=unit, mininterval=mininterval, out=out) as b:
        for x in iterable:
            yield x
            b.update(1)
