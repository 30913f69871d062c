"""Headline findings a notebook records for the report index, stored as one flat JSON object.

``record("headline", "num_draft_tokens 16 -> 2")`` writes to the file named by ``$EAGLE3LIB_FINDINGS`` (the
report runner sets it per notebook); with the variable unset (interactive use) findings stay in memory only,
see ``current()``. Every notebook records a one-line ``"headline"``; the index shows it first.
``record_findings(notebook, [Finding, ...])`` adds a check's cause findings (eagle3lib.causes) under
``"findings"``: the report index combines those of every notebook into one diagnosis.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import MissingFileError, ReportError
from ..causes import Finding
from ..jsonfiles import atomic_write, to_json_value

ENV_VAR = "EAGLE3LIB_FINDINGS"
FINDINGS_KEY = "findings"       # the list of cause findings (Finding.to_dict records)

_memory: dict[str, object] = {}


def record(key: str, value) -> None:
    """Record one headline finding (JSON-serialisable; numpy/torch scalars and small arrays are converted)."""
    if not isinstance(key, str) or not key.strip():
        raise ReportError("findings.record", "the key must be a non-empty string", expected="a str such as "
                          "'headline'", found=repr(key))
    clean = to_json_value(value, where=f"finding '{key}'")
    _memory[key] = clean
    path = os.environ.get(ENV_VAR)
    if path:
        found = read_findings(path) if os.path.exists(path) else {}
        found[key] = clean
        atomic_write(path, json.dumps(found, indent=2, allow_nan=False) + "\n")


def record_findings(notebook: str, found) -> list[dict]:
    """Add cause findings (`causes.Finding`s) to this notebook's ``"findings"`` list; `notebook` prefixes each
    finding's `where` (e.g. "02 training-sample replay")."""
    rows = list(_memory.get(FINDINGS_KEY) or [])
    for f in found:
        if not isinstance(f, Finding):
            raise ReportError("findings.record_findings", "not a causes.Finding", expected="Finding objects",
                              found=type(f).__name__)
        row = f.to_dict()
        row["where"] = f"{notebook} / {row['where']}" if row["where"] else notebook
        rows.append(row)
    record(FINDINGS_KEY, rows)
    return rows


def findings_of(stored: dict) -> list[Finding]:
    """The cause findings in one notebook's stored findings (empty when it recorded none)."""
    return [Finding.from_dict(r) for r in stored.get(FINDINGS_KEY) or []]


def current() -> dict:
    """The findings recorded in this process so far (a copy)."""
    return dict(_memory)


def read_findings(path: str | os.PathLike) -> dict:
    """The findings stored in a JSON file written by ``record``."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(str(path), "findings file not found", expected="a JSON file written by "
                               "eagle3lib.report.findings.record", found="nothing", cause="the notebook recorded no finding")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(str(path), "findings file is not valid JSON", expected="a JSON object",
                          found=str(e), cause="a write that was interrupted, or a file edited by hand") from None
    if not isinstance(data, dict):
        raise ReportError(str(path), "findings file does not hold a JSON object", expected="{key: value}",
                          found=type(data).__name__)
    return data
