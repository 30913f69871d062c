"""Every input file a case reads, read and parsed once: inside ``with case_reads():`` (a diagnosis wraps its inputs'
check and all its parts in one; a notebook's part enters its case's own record, `steps.case.Case.reading`) each
config.json, safetensors header and tokenizer (`kept`: the readers of `model`) and each dataset's file list,
``dataset_info.json`` and jsonl index are read once, and each training sample once, by its source file and line and
the options that shape it (`samples.readers`); the samples are kept up to a budget in bytes, the least recently used
let go first (``$EAGLE3LIB_SAMPLE_BUDGET_GB``, default 4). Every replay, check and recapture of the case then shares
them. Outside such a block nothing is kept and every read goes to the disk, as before. A text file (a server log, a
decode log, /metrics text, a run's JSON, a launch file) is read once too (`file_text`, up to `TEXT_KEPT_BYTES` a
file), and what its reader parsed of it kept under the file's signature (`kept_by_file`: a rewritten file is read
again). Tensors are kept in two places only: a serving dump (`hidden.dumps.load_dump`), and the loaded replay setup
(`replay.run.load_setup`: the draft with the target's embedding and lm_head), kept by its resolved paths, their
files' sizes and mtimes (`files_signature`), the dtype and the device, and read again when `fresh` says a caller
changed it.

    with case_reads() as reads:
        ...                          # every read of the case
    reads.loads                      # Counter: what was read from disk -> how many times (1 each)
    with case_reads(reads=kept_reads): ...   # a case's own record, entered again by each of its parts
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import threading
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Callable

from torch import Tensor

BUDGET_ENV = "EAGLE3LIB_SAMPLE_BUDGET_GB"
DEFAULT_BUDGET_GB = 4.0
TEXT_KEPT_BYTES = 256 * 2 ** 20     # a larger text file (a days-long server log) is read again by each reader


class CaseReads:
    """What one case has read: the datasets' info and indexes (by path), the samples (by source and options) within
    the byte budget, and how many times each source was read from disk (`loads`)."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.loads: Counter = Counter()
        self._parts: dict[Any, Any] = {}
        self._gates: dict[Any, threading.RLock] = {}      # one per key: a value read once while others are read
        self._samples: OrderedDict[Any, Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.RLock()      # the replay reads ahead in a thread (samples.prefetch)

    def part(self, key, read: Callable[[], Any], fresh: Callable[[Any], bool] | None = None, alone: bool = False):
        """A dataset's part (its info, its index) read once per case; read again when `fresh` says the kept value
        is no longer as read; `alone`: reading it lets go the kept values of its kind (key[0]) under other keys.
        read() runs outside the case's lock (under the key's own): a value computed from samples (a search over the
        training samples) reads them through the replay's read-ahead thread, which takes that lock."""
        with self._lock:
            gate = self._gates.setdefault(key, threading.RLock())
        with gate:
            with self._lock:
                if key in self._parts and (fresh is None or fresh(self._parts[key])):
                    return self._parts[key]
                if alone:
                    for other in [k for k in self._parts if k != key and isinstance(k, tuple) and k[0] == key[0]]:
                        del self._parts[other]
                self._parts.pop(key, None)          # the stale value is let go before its new read
            value = read()
            with self._lock:
                self._parts[key] = value
                self.loads[key] += 1
            return value

    def kept_sample(self, key, load: Callable[[], Any]):
        """The sample `key`, loaded once while it fits the budget (an error is raised each time, never kept)."""
        with self._lock:
            if key in self._samples:
                self._samples.move_to_end(key)
                return self._samples[key]
        s = load()
        size = sample_bytes(s)
        with self._lock:
            self.loads[key] += 1
            if size <= self.budget and key not in self._samples:
                self._samples[key] = s
                self._bytes += size
                while self._bytes > self.budget:
                    _, old = self._samples.popitem(last=False)
                    self._bytes -= sample_bytes(old)
        return s


def kept(key, read: Callable[[], Any], *, copied: bool = False, fresh: Callable[[Any], bool] | None = None,
         alone: bool = False):
    """read(), once per case inside `case_reads` (outside one: every time); `copied`: each caller gets its own deep
    copy (a parsed JSON a caller may change); `fresh(value)` False: the kept value was changed by a caller since it
    was read, so it is read again (and counted in `loads`); `alone`: the one value of its kind (key[0]) kept, a read
    under another key lets the others go (a loaded model: two dtypes of one draft kept would double the memory).
    An error is raised each time, never kept."""
    reads = active()
    if reads is None:
        return read()
    value = reads.part(key, read, fresh, alone)
    return copy.deepcopy(value) if copied else value


def files_signature(path) -> tuple:
    """(name, size, mtime_ns) of a file, or of each file directly in a folder: a part of a `kept` key that changes
    when a file is rewritten (() for a path that does not exist: the read reports it)."""
    p = Path(path)
    try:
        files = sorted(x for x in p.iterdir() if x.is_file()) if p.is_dir() else [p] if p.is_file() else []
        return tuple((x.name, x.stat().st_size, x.stat().st_mtime_ns) for x in files)
    except OSError:
        return ()


def file_text(path) -> str:
    """A text file's content (UTF-8, undecodable bytes replaced), read from disk once per case inside `case_reads`
    however many readers parse it (the inputs' check, each engine's log reader, the served runs); a file rewritten
    since is read again. OSError as reading raises it."""
    p = Path(path)
    if active() is None or p.stat().st_size > TEXT_KEPT_BYTES:
        return _text(p)
    return kept(("text", str(p.resolve()), files_signature(p)), lambda: _text(p))


def _text(p: Path) -> str:
    return p.read_bytes().decode("utf-8", errors="replace")


def kept_by_file(kind: str, path, read: Callable[[], Any], *options, copied: bool = False):
    """`kept` under (kind, the file's resolved path, its `files_signature`, options): what a reader parsed of a file
    (or a folder: a dump), once per case; a rewritten file is parsed again."""
    p = Path(path)
    return kept((kind, str(p.resolve()), files_signature(p), *options), read, copied=copied)


def parsed_once(kind: str, source, parse: Callable[[], Any], *options):
    """`parse()` of a source that is a path (str or Path) or the text itself (a str with lines, or lines): a path
    to a file is parsed once per case (`kept_by_file`, a copy handed out), a text as often as it is given."""
    if isinstance(source, (str, Path)) and "\n" not in str(source) and Path(source).is_file():
        return kept_by_file(kind, source, parse, *options, copied=True)
    return parse()


def sample_bytes(sample) -> int:
    """The bytes of a sample's tensors."""
    return sum(v.numel() * v.element_size() for f in dataclasses.fields(sample)
               if isinstance(v := getattr(sample, f.name), Tensor))


_state: dict[str, CaseReads | None] = {"reads": None}


def active() -> CaseReads | None:
    """The case being read (None outside `case_reads`)."""
    return _state["reads"]


def new_reads(budget_gb: float | None = None) -> CaseReads:
    """An empty record of one case's reads, within `budget_gb` of samples (``$EAGLE3LIB_SAMPLE_BUDGET_GB``, default
    4): what a `steps.case.Case` keeps for every part a notebook or the diagnosis runs on it."""
    gb = budget_gb if budget_gb is not None else float(os.environ.get(BUDGET_ENV) or DEFAULT_BUDGET_GB)
    return CaseReads(int(gb * 2 ** 30))


@contextlib.contextmanager
def case_reads(budget_gb: float | None = None, reads: CaseReads | None = None):
    """Keep what the block reads (see the module docstring) in `reads` (a new one when None: kept for this block
    only); a block inside another shares the outer one's."""
    if _state["reads"] is not None:
        yield _state["reads"]
        return
    _state["reads"] = reads if reads is not None else new_reads(budget_gb)
    try:
        yield _state["reads"]
    finally:
        _state["reads"] = None
