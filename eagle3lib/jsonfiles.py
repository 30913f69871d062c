"""JSON-safe values and files that are never half-written: the two I/O facts every layer shares.

`to_json_value` turns numpy / torch scalars, NaN and paths into plain JSON data; `atomic_write` /
`atomic_write_all` write through a temp file in the same folder and ``os.replace`` (a crash or a full disk leaves
the old file, never a half-written one); `json_lines` reads JSON-lines files, a bad line named by file and line.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from .errors import DataError, ReportError

MAX_ARRAY_ITEMS = 1000  # a finding is a headline; bigger arrays belong in a DataFrame in the notebook


def to_json_value(value, where: str = "value"):
    """`value` as plain JSON data: numpy/torch scalars -> Python numbers, NaN/inf -> None, Path -> str."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ReportError(where, "dict keys must be strings", expected="str keys", found=repr(k))
            out[k] = to_json_value(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    tolist = getattr(value, "tolist", None)  # numpy scalars/arrays and torch tensors
    if callable(tolist) and type(value).__module__.split(".")[0] in ("numpy", "torch"):
        numel = value.numel() if callable(getattr(value, "numel", None)) else int(getattr(value, "size", 1))
        if numel > MAX_ARRAY_ITEMS:
            raise ReportError(where, "array too large for a headline finding",
                              expected=f"at most {MAX_ARRAY_ITEMS} items", found=f"{numel} items",
                              cause="record a summary (mean, a few quantiles) instead of the whole array")
        return to_json_value(tolist(), where)
    raise ReportError(where, "value is not JSON-serialisable", expected="None, bool, int, float, str, list, "
                      "dict, or a numpy/torch scalar or small array", found=type(value).__name__,
                      cause="convert it first, e.g. str(x), float(x) or dataclasses.asdict(x)")


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write `data` to `path` through a temp file in the same folder and ``os.replace`` (never half-written)."""
    atomic_write_all({path: data})


def atomic_write_all(files: dict) -> None:
    """Write every {path: str | bytes} to a temp file first, then ``os.replace`` each in the given order.

    A failed temp write (disk full, ...) replaces nothing; put the file that matters most last, as a failing
    replace stops there. Temp files are removed in every case.
    """
    staged, umask = [], os.umask(0)
    os.umask(umask)
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged.append((tmp, path))
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; reports are meant to be shared
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)


def json_lines(path: str | os.PathLike, cause: str = "a truncated write or a file of another format"):
    """(line number, value) of each non-blank line of a JSON-lines file; a line that is not JSON raises DataError
    naming the file and line."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield no, json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{no}", "line is not valid JSON", expected="one JSON object per line",
                                found=str(e)[:120], cause=cause) from None
