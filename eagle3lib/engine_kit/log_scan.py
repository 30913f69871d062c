"""A decode log read line by line into runs, whatever the engine: `LogScan`, `ParseResult`.

Logs split into runs at launch lines and ``# run: <label>`` markers; each engine's home reads its own lines
(`sglang_engine.run_log`, `vllm_engine.run_log`) into `RunRecord`s through a `LogScan`, which keeps the bad lines
with reasons and the warnings; nothing readable at all is a ``LogParseError`` naming the file and what was looked
for. `parse_call_kwargs` reads a logged Python call's keyword arguments (SGLang's ``ServerArgs(...)``, vLLM's
``SpeculativeConfig(...)``); `prometheus_values` reads a /metrics scrape.
"""
from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ..errors import DataError, LogParseError, MissingFileError
from ..once import file_text

from .records import RunRecord

MAX_BAD_SHOWN = 10
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
RUN_MARKER = re.compile(r"^\s*#+\s*run:\s*(.*?)\s*$")
_KV = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,()\s]+)")
_FLAG = re.compile(r"--([a-z][\w-]*)[ =]('[^']*'|\"[^\"]*\"|\S+)")


@dataclass(frozen=True)
class ParseResult:
    """Records read from one source plus what was skipped and why."""

    source: str
    records: tuple[RunRecord, ...]
    n_lines: int = 0
    n_used: int = 0                                   # lines (or objects) that fed a record
    n_bad: int = 0                                    # garbage, binary or truncated candidate lines
    bad_lines: tuple[tuple[int, str], ...] = ()      # first few (line number, reason)
    warnings: tuple[str, ...] = ()

    def summary(self) -> str:
        """One paragraph: counts, first bad lines, warnings."""
        s = (f"{self.source}: {len(self.records)} runs from {self.n_used} of {self.n_lines} lines; "
             f"{self.n_bad} bad lines skipped")
        if self.bad_lines:
            s += " (" + "; ".join(f"line {n}: {why}" for n, why in self.bad_lines) + ")"
        return s + "".join(f"\n  warning: {w}" for w in self.warnings)


@dataclass
class _Seg:
    """Lines of one run between two launch boundaries (internal accumulator)."""

    label: str = ""
    settings: dict = field(default_factory=dict)      # effective (server_args / engine config)
    requested: dict = field(default_factory=dict)     # from a launch command
    notes: list = field(default_factory=list)
    items: list = field(default_factory=list)         # (line number, time, parsed dict)
    version: str = ""


class LogScan:
    """Line bookkeeping shared by the log parsers: segments, bad lines, warnings."""

    def __init__(self, source: str, text: str | None):
        if text is None:
            p = Path(source)
            if not p.is_file():
                raise MissingFileError(str(p), "log file not found", expected="a server log", found="nothing")
            text = file_text(p)
        self.source, self.lines = str(source), text.splitlines()
        self.segs, self.bad, self.n_bad, self.warnings = [_Seg()], [], 0, []

    def bad_line(self, n: int, why: str):
        self.n_bad += 1
        if len(self.bad) < MAX_BAD_SHOWN:
            self.bad.append((n, why))

    def boundary(self, label: str = "", settings: dict | None = None, note: str = "", version: str = "",
                 requested: dict | None = None):
        if self.segs[-1].items:
            self.segs.append(_Seg())
        seg = self.segs[-1]
        seg.label = label or seg.label
        seg.settings.update(settings or {})
        seg.requested.update(requested or {})
        seg.version = version or seg.version
        if note:
            seg.notes.append(note)

    def clean_lines(self):
        """(line number, stripped text, timestamp) for every line that is not binary garbage."""
        for n, raw in enumerate(self.lines, 1):
            line = _ANSI.sub("", raw).rstrip("\r\n")
            if "\ufffd" in line or any(ord(ch) < 32 and ch != "\t" for ch in line):
                self.bad_line(n, "binary or garbled bytes")
                continue
            m = _TIME.match(line)
            yield n, line, m.group(1) if m else ""

    def make(self, idx: int, seg: _Seg, **kw) -> RunRecord | None:
        """A record for one segment; a DataError becomes a warning and the run is skipped."""
        lines = [n for n, _, _ in seg.items]
        try:
            return RunRecord(source=f"{self.source}:{lines[0]}-{lines[-1]}", time=seg.items[0][1], **kw)
        except DataError as e:
            self.warnings.append(f"run {idx} (lines {lines[0]}-{lines[-1]}) skipped: {e}")
            return None

    def build_result(self, keep, build, used: int, problem: str, expected: str, cause: str) -> ParseResult:
        """Build one record per kept segment; nothing built at all -> LogParseError naming the file."""
        segs = [s for s in self.segs if keep(s)]
        records = [r for i, seg in enumerate(segs) if (r := build(seg, i + 1)) is not None]
        if not records:
            raise LogParseError(self.source, problem, expected=expected, cause=cause,
                                found=f"{len(self.lines)} lines, {self.n_bad} bad")
        return self.result(records, used)

    def result(self, records, n_used: int) -> ParseResult:
        return ParseResult(self.source, tuple(records), len(self.lines), n_used, self.n_bad, tuple(self.bad),
                           tuple(self.warnings))


def logged_number(s: str):
    """A logged number (int or float; None for None / null / empty), trailing % or , dropped."""
    s = s.strip().rstrip("%,")
    if s in ("None", "null", ""):
        return None
    return int(s) if re.fullmatch(r"-?\d+", s) else float(s)


def settings_from_kv(text: str, names: dict) -> dict:
    """Pick `names` (source key -> record field) out of ``key=value`` / ``--flag value`` text."""
    found = {k.replace("-", "_"): v.strip("'\"") for k, v in _KV.findall(text) + _FLAG.findall(text)}
    return {dst: found[src] for src, dst in names.items() if src in found}


def parse_call_kwargs(text: str) -> dict:
    """``Name(a=1, b='x', c=Other(...))`` (a dataclass repr) -> {a: 1, b: 'x', c: "Other(...)"}; tolerant."""
    start = text.find("(")
    body = text[start + 1:] if start >= 0 else text
    parts, depth, quote, cur = [], 0, None, []
    for ch in body:
        if quote:
            quote = None if ch == quote and (not cur or cur[-1] != "\\") else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    out = {}
    for part in parts:
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            continue
        try:
            out[key] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            out[key] = raw.strip()
    return out


def prometheus_values(lines, scan=None) -> dict:
    """Prometheus exposition lines -> {(name without _total, position label or None): summed value}.

    Each sample line goes through ``prometheus_client.parser`` on its own, so one line it cannot read (or whose
    value is not a finite number) is skipped and counted on `scan`, when given, with its number; the rest are read."""
    out = {}
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
        except ValueError as e:
            if scan is not None:
                scan.bad_line(n, f"not a Prometheus sample ({str(e)[:80]})")
            continue
        for s in samples:
            if not math.isfinite(s.value):
                if scan is not None:
                    scan.bad_line(n, f"{s.name}: value {s.value!r} is not a finite number")
                continue
            pos = s.labels.get("position", "")
            key = (re.sub(r"_total$", "", s.name), int(pos) if pos.isdecimal() else None)
            out[key] = out.get(key, 0.0) + float(s.value)
    return out
