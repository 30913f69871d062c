"""End to end: the real report runner on the real notebooks with their default (embedded demo) parameters."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from eagle3lib.report import findings, runner as report

ROOT = Path(__file__).resolve().parents[1]
EXPECTED = ("00", "01", "02", "03", "04")  # the workbook's notebooks (issues 2, 4, 5, 6, 7)


@pytest.mark.slow
def test_every_notebook_runs_on_the_embedded_default(tmp_path):
    """Every notebook executes ok, has one tagged parameters cell, and records a 'headline' finding."""
    sources = report.discover(ROOT / "notebooks")
    assert set(EXPECTED) <= {p.name[:2] for p in sources}, [p.name for p in sources]
    out = tmp_path / "reports"
    rc = report.main(["--notebooks", str(ROOT / "notebooks"), "--out", str(out), "--cwd", str(ROOT)])
    index = json.loads((out / "index.json").read_text())
    rows = {r["notebook"]: r for r in index["notebooks"]}
    failed = {k: r["error"] for k, r in rows.items() if r["status"] != "ok"}
    assert rc == 0 and not failed, failed
    assert sorted(rows) == [p.stem for p in sources]
    for stem, row in rows.items():
        executed = nbformat.read(out / f"{stem}.ipynb", as_version=4)
        tagged = [c for c in executed.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, f"{stem}: {len(tagged)} cells tagged 'parameters'"
        assert (out / f"{stem}.html").stat().st_size > 0
        recorded = findings.read(out / f"{stem}.findings.json")
        assert "headline" in recorded, f"{stem} recorded {sorted(recorded)}"
        assert row["findings"] == recorded
