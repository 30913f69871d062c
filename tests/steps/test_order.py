"""One path per investigation: every part of `steps.order.PARTS` is its step module's `run(case, earlier)`, the
order is written once (the diagnosis holds no copy of it), and the part a step reads has run before it."""
from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from eagle3lib.diagnose import parts as diagnose_run
from eagle3lib.steps import order
from eagle3lib.steps.part import Inputs, Part

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_each_part_is_its_modules_run_in_notebook_order():
    names = [s.name for s in order.PARTS]
    assert len(set(names)) == len(names)
    assert [s.name for s in order.PARTS] == [s.module.NAME for s in order.PARTS]
    stems = [stem for stem, _ in order.NOTEBOOKS]
    assert stems == sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    assert [stems.index(s.notebook) for s in order.PARTS] == sorted(stems.index(s.notebook) for s in order.PARTS)
    for i, step in enumerate(order.PARTS):
        assert list(inspect.signature(step.module.run).parameters)[:2] == ["case", "earlier"]
        assert not step.after or step.after in names[:i], step        # what it reads has run before it
        assert all(k in {f.name for f in dataclasses.fields(Inputs)} for k in step.needs)


def test_the_diagnosis_holds_no_copy_of_the_order():
    """No part's name and no step module is written in diagnose/parts.py: it loops over steps.order.PARTS."""
    src = Path(diagnose_run.__file__).read_text()
    strings = {n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & {s.name for s in order.PARTS}
    assert not any(s.module.__name__.rsplit(".", 1)[1] in src for s in order.PARTS)


def test_each_notebook_records_the_findings_of_its_part():
    """The findings a notebook records come from its step's `run` (part.findings), never from finer functions."""
    for stem, module in order.NOTEBOOKS:
        text = (NOTEBOOKS / f"{stem}.py").read_text()
        if any(s.notebook == stem for s in order.PARTS):
            assert f"{module.__name__.rsplit('.', 1)[1]}.run(" in text, stem
            for fn in ("artifact_checks", "serving_checks", "served_vs_predicted", "replay_findings",
                       "diffing_findings", "drift_findings"):
                assert f".{fn}(" not in text, (stem, fn)


def test_a_part_shows_its_findings():
    from eagle3lib.causes import not_checked
    p = Part("x", [not_checked("rope_mismatch", "here", "a target")])
    assert list(p.frame()["cause"]) == ["rope_mismatch"] and p.tables == {} and p.problems == ()


def test_a_part_that_decides_no_cause_is_not_diagnosed():
    """Notebook 04's part (throughput) is in PARTS for its notebook, marked not diagnosed: the diagnosis's loop
    skips it (no timed demo sweep, no charts in a terminal run). So is notebook 00's: its checks are among those
    notebook 01's part runs with the engine (each check judges a diagnosis once)."""
    from eagle3lib.checks.judge import chosen
    from eagle3lib.steps import checkpoint_audit, throughput_runs

    skipped = {s.module for s in order.PARTS if not s.diagnosed}
    assert skipped == {throughput_runs, checkpoint_audit}
    assert next(s for s in order.PARTS if s.module is throughput_runs).notebook == "04_throughput_charts"
    assert set(chosen(part="artifacts")) <= set(chosen(part=("artifacts", "serving"))) & set(
        chosen(part=("artifacts", "engine-free")))
