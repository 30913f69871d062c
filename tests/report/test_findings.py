"""Tests for eagle3lib.report.findings: JSON conversion, the env-var file, atomic writes, read errors."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from eagle3lib import jsonfiles
from eagle3lib.report import findings
from eagle3lib.errors import MissingFileError, ReportError


def test_record_without_env_keeps_findings_in_memory(monkeypatch, tmp_path):
    """Interactive use (no EAGLE3LIB_FINDINGS) writes no file and keeps the value in current()."""
    monkeypatch.delenv(findings.ENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    findings.record("interactive_key", 3)
    assert findings.current()["interactive_key"] == 3
    assert list(tmp_path.iterdir()) == []


def test_record_with_env_merges_keys_into_one_json_file(monkeypatch, tmp_path):
    """Each record adds or replaces one key of the JSON object at $EAGLE3LIB_FINDINGS."""
    path = tmp_path / "sub" / "nb.findings.json"
    monkeypatch.setenv(findings.ENV_VAR, str(path))
    findings.record("headline", "first")
    findings.record("accept_length", 1.6)
    findings.record("headline", "second")
    assert json.loads(path.read_text()) == {"headline": "second", "accept_length": 1.6}
    assert findings.read_findings(path) == {"headline": "second", "accept_length": 1.6}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


def test_numpy_and_torch_values_become_plain_json():
    """numpy/torch scalars and small arrays convert; NaN/inf become None; paths become strings."""
    value = {"a": np.float32(0.5), "b": np.int64(7), "c": torch.tensor(2.5), "d": torch.tensor([1, 2]),
             "e": np.array([[1.0, np.nan]]), "f": float("inf"), "g": (1, "x"), "h": Path("data/x"),
             "i": np.bool_(True)}
    out = jsonfiles.to_json_value(value)
    assert out == {"a": 0.5, "b": 7, "c": 2.5, "d": [1, 2], "e": [[1.0, None]], "f": None, "g": [1, "x"],
                   "h": "data/x", "i": True}
    assert type(out["b"]) is int and type(out["i"]) is bool
    json.dumps(out, allow_nan=False)


@pytest.mark.parametrize("bad", [object(), {1: "x"}, [set()], torch.zeros(2000)])
def test_non_json_values_are_refused_with_a_named_error(bad):
    """A value that is not JSON data raises ReportError naming the finding, before anything is written."""
    with pytest.raises(ReportError, match="finding 'k'"):
        findings.record("k", bad)
    assert "k" not in findings.current()


@pytest.mark.parametrize("key", ["", "  ", 3, None])
def test_bad_keys_are_refused(key):
    """Keys must be non-empty strings."""
    with pytest.raises(ReportError, match="non-empty string"):
        findings.record(key, 1)


def test_read_missing_and_corrupt_files(tmp_path):
    """read() names the file: MissingFileError when absent, ReportError when not a JSON object."""
    with pytest.raises(MissingFileError, match="nothing.json"):
        findings.read_findings(tmp_path / "nothing.json")
    (tmp_path / "half.json").write_text('{"headline": "cut')
    with pytest.raises(ReportError, match="half.json.*not valid JSON"):
        findings.read_findings(tmp_path / "half.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ReportError, match="JSON object"):
        findings.read_findings(tmp_path / "list.json")


class _FullDisk:
    """A file object whose writes fail like a full disk."""

    def __init__(self, f):
        self.f = f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_atomic_write_all_replaces_nothing_when_a_temp_write_fails(monkeypatch, tmp_path):
    """Disk full while staging the second file: neither target changes and no temp file is left."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    real_fdopen, calls = os.fdopen, []

    def fdopen(fd, *args, **kw):
        calls.append(fd)
        f = real_fdopen(fd, *args, **kw)
        return _FullDisk(f) if len(calls) == 2 else f

    monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.raises(OSError, match="No space"):
        jsonfiles.atomic_write_all({a: "new a", b: "new b"})
    assert (a.read_text(), b.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_atomic_write_all_stops_at_a_failing_replace(monkeypatch, tmp_path):
    """A failing os.replace of the last file leaves that file intact and removes every temp file."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    real_replace = os.replace

    def failing_replace(src, dst):
        if str(dst).endswith("b.txt"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="No space"):
        jsonfiles.atomic_write_all({a: "new a", b: b"new b"})
    assert (a.read_text(), b.read_text()) == ("new a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]
