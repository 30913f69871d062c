"""vllm_engine.said: the first log that says what vLLM did with the draft decides the version and runner the tables
are read at and overrules them; an unreadable log is a problem, never a crash; the tables' view stands without one."""
from __future__ import annotations

from pathlib import Path

from eagle3lib.engine_kit.view import Aspect, EngineView, Served
from eagle3lib.vllm_engine.said import said

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def _tables(asked: list):
    """A view_for that records the (version, runner) it was asked at and answers with the tables' layout."""
    def view_for(version, runner):
        asked.append((version, runner))
        return EngineView("vllm", version, runner, {"layout": Aspect("layout", ("embed",), "table", "the tables")})
    return view_for


def _served(*logs: str) -> Served:
    return Served("draft", "target", 8, True, tuple(logs), use_probe=False)


def test_the_log_that_loaded_the_draft_sets_the_version_and_overrules_the_tables():
    asked = []
    view, notes, problems = said(_tables(asked), _served(str(SAMPLES / "vllm_demo_serve.log")), "0.1.0")
    assert asked == [("0.32.0", asked[0][1])] and asked[0][1] in ("v1", "v2")      # the log's version, not 0.1.0
    assert view.source("layout") == "log" and problems == [] and notes == []


def test_a_log_that_cannot_be_read_is_a_problem_and_the_given_version_stands(tmp_path):
    asked = []
    view, _, problems = said(_tables(asked), _served(str(tmp_path / "missing.log")), "0.32.0")
    assert asked == [("0.32.0", None)] and view.source("layout") == "table"
    assert len(problems) == 1 and "missing.log" in problems[0]


def test_a_refusal_in_the_log_is_the_views_refusal():
    view, _, _ = said(_tables([]), _served(str(SAMPLES / "vllm_refused_unknown_key.log")))
    assert view.refused_source == "log" and view.refused
