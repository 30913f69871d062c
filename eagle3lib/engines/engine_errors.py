"""The exceptions an engine's log (vLLM's, SGLang's) ends with, and the one that is the engine's own failure.

vLLM re-raises a worker's error in every process above it ("WorkerProc initialization failed ... See stack trace
for root cause", "Engine core initialization failed. See root cause above", "EngineDeadError"), so a failed start
ends with several tracebacks; `root_error` is the first that is not such a re-raise. Each `LoggedError` names what
the message names: the weight key ("There is no module or parameter named '...'"), the shapes ("shape '[-1, 384]' is
invalid for input of size 2560", "Tried to load weights of size ... to a parameter of size ..."), a file, or
"not supported". Lines of different processes (the "(Worker pid=N)" tags) may interleave; each is followed alone.
Each error also keeps the frame it was raised in (`frame`: "vllm/model_executor/models/deepseek_v2.py:1562"), and
`known_failure(error)` names a failure the engine facts explain (the table's "refusal" rows, `engines/facts_refusals.py`:
vLLM's DeepSeek target dying on the embedding as an aux slot, the d2t lookup, ...).
A log's lines are numbered as an editor numbers them (`log_lines`; `source_lines` takes a log as lines, its text or
a file's path, read once per case).
    errors = scan_errors(log_lines(open("server.log").read())); root_error(errors)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import LogParseError, MissingFileError
from ..once import file_text
from .fact_row import Refusal
from .facts import facts

# (process tag) LEVEL MM-DD hh:mm:ss [file.py:123] message   -- the tag and the header are both optional; an SGLang
# line's header is "[YYYY-MM-DD hh:mm:ss TP0] " (its process tag inside the brackets, after the time)
PREFIX = re.compile(r"^(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s*(?P<sgproc>[^\]]+))?\] ?|"
                    r"(?:\((?P<proc>[^)]*)\)\s*)?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
                    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\] ?)?)")
_EXC = re.compile(r"^(?P<exc>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)|Exception))"
                  r"(?::\s?(?P<msg>.*))?$")

TRACEBACK = "Traceback (most recent call last)"
SHUTDOWN = "[shutdown] API server: shutdown triggered"     # vLLM 0.32 launcher.py, on the SIGTERM a stop sends
WRAPPER = re.compile(r"See (?:the )?(?:root cause|stack trace)|check the stack trace above|Engine core initialization "
                     r"failed|EngineCore encountered an issue|initialization failed due to an exception in a background|"
                     r"^cancelled$")       # shm_broadcast's RuntimeError("cancelled"): the worker it waited on is gone
# a process killed by glibc's heap checks or a signal prints one line and no traceback (seen: a draft whose fc is
# narrower than the aux states the ids give corrupts the heap on the CPU backend)
NATIVE = re.compile(r"^(?:double free or corruption.*|corrupted double-linked list.*|corrupted size vs\. prev_size.*|"
                    r"(?:free|malloc|realloc|munmap_chunk)\(\): .+|Segmentation fault.*|Fatal Python error: .+)$")
WORKER_DIED = re.compile(r"Worker proc \S+ died unexpectedly(?: \(exit code: (?P<code>[^)]*)\))?")
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)')


@dataclass(frozen=True)
class LoggedError:
    """One exception a traceback in the log ended with."""

    line_no: int
    process: str | None       # the vLLM process tag, e.g. "Worker pid=11810" (None: raw stderr)
    exception: str            # "ValueError", "pydantic_core._pydantic_core.ValidationError", ...; "native crash"
                              # (a glibc abort / signal line) or "worker died" (vLLM's note of it)
    message: str
    kind: str                 # "unknown weight", "missing key", "shape", "missing file", "not supported",
                              # "native crash", "worker died", "other"
    key: str | None = None    # the weight / config key it names
    shape: str | None = None  # the shapes it names, e.g. "view [-1, 384] of 2560 values"
    file: str | None = None
    wrapper: bool = False     # vLLM re-raising another process's error ("see root cause above")
    phase: str = "startup"    # "startup" (before the engine was ready), "serving", or "shutdown" (after a stop)
    frame: str | None = None  # where it was raised: the traceback's last frame, "vllm/.../deepseek_v2.py:1562"


def known_failures(engine: str | None = None) -> tuple[Refusal, ...]:
    """The engine table's "refusal" rows of `engine` (None: every engine's; a row's frame and message say whose):
    the failures the engine facts explain."""
    return tuple(f for f in facts("refusal", engine) if isinstance(f, Refusal))


def known_failure(err: LoggedError | None) -> Refusal | None:
    """The "refusal" row `err` is (same frame, exception and message), or None."""
    if err is None or err.frame is None:
        return None
    return next((k for k in known_failures() if (not k.frame or err.frame == k.frame)
                 and err.exception.endswith(k.exception) and k.message in err.message), None)


def known_failure_text(text: str) -> Refusal | None:
    """The "refusal" row a refusal's text quotes (its frame and its message), or None."""
    return next((k for k in known_failures() if k.frame in text and k.message in text), None)


def attribution(text: str) -> tuple[Refusal | None, str]:
    """(the "refusal" row a refusal is, or None; the cause whose fix makes the engine accept): a row's cause,
    else by what the message names (a weight or key: weights_dropped; the fc's aux width: the layout), else
    engine_cannot_run, the engine's own message being the evidence. Never engine_regression: that needs the same
    artifacts served on another version."""
    known = known_failure_text(text)
    if known is not None:
        return known, known.cause
    if "shape '[-1" in text or "fc" in text or "aux slot" in text:
        return None, "aux_layout_mismatch"
    if "weight" in text or "parameter" in text or "key" in text:
        return None, "weights_dropped"
    return None, "engine_cannot_run"


def _frame(path: str, line: str) -> str:
    """A traceback frame as "package/relative/path.py:line" (from the last site-packages, else as written)."""
    rel = path.split("site-packages/")[-1]
    return f"{rel}:{line}"


def _classify(exc: str, msg: str) -> dict:
    if m := re.search(r"no module or parameter named '([^']+)'", msg):
        return {"kind": "unknown weight", "key": m.group(1)}
    if m := re.search(r"shape '\[([^\]]*)\]' is invalid for input of size (\d+)", msg):
        return {"kind": "shape", "shape": f"view [{m.group(1)}] of {m.group(2)} values"}
    if m := re.search(r"weights of size torch\.Size\(\[([^\]]*)\]\)\s*to a parameter of size torch\.Size\(\[([^\]]*)\]\)",
                      msg):
        return {"kind": "shape", "shape": f"checkpoint [{m.group(1)}] into parameter [{m.group(2)}]"}
    if m := re.search(r"size mismatch for ([\w.]+): copying a param with shape (\S+(?: \S+)?) from checkpoint.*"
                      r"shape in current model is (\S+(?: \S+)?)", msg):
        return {"kind": "shape", "key": m.group(1), "shape": f"checkpoint {m.group(2)} vs model {m.group(3)}"}
    if m := re.search(r"shapes cannot be multiplied \(([^)]*)\)", msg):
        return {"kind": "shape", "shape": m.group(1)}
    if re.search(r"not (?:yet )?supported", msg, re.I):
        m = re.search(r"architectures \[([^\]]*)\]", msg)
        return {"kind": "not supported", "key": m.group(1).strip("'\"") if m else None}
    if exc.endswith(("FileNotFoundError", "OSError")) or "No such file or directory" in msg:
        m = re.search(r"No such file or directory: '([^']+)'|file ([/\w.-]+)", msg)
        return {"kind": "missing file", "file": (m.group(1) or m.group(2)) if m else None}
    if exc.endswith("KeyError"):
        m = re.match(r"\s*['\"]([^'\"]+)['\"]", msg)
        return {"kind": "missing key", "key": m.group(1) if m else msg.strip() or None}
    return {"kind": "other"}


def log_lines(text: str) -> list[str]:
    """The lines of a log as an editor numbers them: split at "\\n" only (progress bars' "\\r" stay inside a line;
    str.splitlines would also split there and shift every line number after it)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def source_lines(source, expected: str) -> tuple[list[str], str]:
    """(lines, where) of a log given as lines, as its text (a str with a newline) or as a file's path (read once per
    case, `once.file_text`), split as an editor numbers them (`log_lines`). A path to no file raises MissingFileError,
    an unreadable file LogParseError, each naming the path and `expected`."""
    if isinstance(source, (list, tuple)):
        return [str(x) for x in source], "<lines>"
    if isinstance(source, str) and "\n" in source:
        return log_lines(source), "<text>"
    path = Path(source)
    if not path.is_file():
        raise MissingFileError(str(path), "log file not found", expected=expected, found="nothing")
    try:
        return log_lines(file_text(path)), str(path)
    except OSError as e:
        raise LogParseError(str(path), "log cannot be read", expected="a readable text file", found=str(e)) from None


def split_prefix(line: str) -> tuple[str | None, str]:
    """(process tag or None, message) of one vLLM log line; the message keeps its indentation."""
    m = PREFIX.match(line)
    return m["proc"] or m["sgproc"], line[m.end():]


def scan_errors(lines: list[str], ready_at: int | None = None) -> list[LoggedError]:
    """Every exception a traceback in `lines` ends with; `ready_at`: line number after which errors are "serving".
    Errors after vLLM's own "[shutdown]" lines are phase "shutdown": the stop that was asked for (SIGTERM) makes
    the API server's output handler raise EngineDeadError, which is not a failure of the draft."""
    msgs = [(no, *split_prefix(raw)) for no, raw in enumerate(lines, start=1)]
    stop_at = next((no for no, _, msg in msgs if SHUTDOWN in msg), None)
    open_tb: dict = {}           # process tag -> inside a traceback
    frames: dict = {}            # process tag -> the last frame of its open traceback
    errors, last = [], {}        # last: process tag -> index of its latest error (for continuation lines)
    for no, proc, msg in msgs:
        text = msg.strip()
        if NATIVE.match(text) or WORKER_DIED.search(text):
            died = WORKER_DIED.search(text)
            errors.append([no, proc, "worker died" if died else "native crash", text, None])
            last.pop(proc, None)
            continue
        if msg.startswith(TRACEBACK) or msg.rstrip().endswith(TRACEBACK + ":"):   # SGLang: "... exception: Traceback"
            open_tb[proc] = True
            frames.pop(proc, None)
            last.pop(proc, None)
            continue
        if open_tb.get(proc) and (f := FRAME.match(msg)):
            frames[proc] = _frame(f["path"], f["line"])
            continue
        if open_tb.get(proc) and msg and not msg[0].isspace():
            m = _EXC.match(msg.strip())
            if m:
                open_tb[proc] = False
                exc, text = m["exc"], (m["msg"] or "").strip()
                errors.append([no, proc, exc, text, frames.pop(proc, None)])
                last[proc] = len(errors) - 1
            continue
        if proc in last and msg.startswith("  ") and not msg.lstrip().startswith("File "):
            e = errors[last[proc]]                      # a multi-line message (pydantic ValidationError)
            e[3] = (e[3] + " " + msg.strip()).strip()
            if len(e[3]) > 2000:
                last.pop(proc)
        elif proc in last:
            last.pop(proc)
    out = []
    for no, proc, exc, text, frame in errors:
        info = {"kind": exc} if exc in ("worker died", "native crash") else _classify(exc, text)
        wrapper = exc == "worker died" or bool(WRAPPER.search(text))
        phase = ("shutdown" if stop_at is not None and no > stop_at else
                 "serving" if ready_at is not None and no > ready_at else "startup")
        out.append(LoggedError(no, proc, exc, text[:1000], wrapper=wrapper, phase=phase, frame=frame, **info))
    return out


def root_error(errors) -> LoggedError | None:
    """The engine's own failure: the first exception that is not vLLM re-raising another process's (errors of the
    asked-for shutdown do not count)."""
    errors = [e for e in errors if e.phase != "shutdown"]
    return next((e for e in errors if not e.wrapper), errors[0] if errors else None)
