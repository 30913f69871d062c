"""What stands between a report run and "no fault found" (eagle3lib.report.problems), and the exit code."""
from __future__ import annotations

from eagle3lib.report import problems as P
from eagle3lib.report.index import diagnosis_of, not_given_of
from eagle3lib.steps.given import Problem


def test_a_stop_on_an_eagle3lib_error_is_an_input_problem_anything_else_a_failure():
    (p,) = P.of_failure("02_training_sample_replay", "failed", "DataError: /d/train: no training data found",
                        {"train_data": "/d/train", "n_samples": 8})
    assert (p.param, p.given, p.error, p.failure, p.notebooks) == ("train_data", "/d/train", "DataError",
                                                                   False, ("02_training_sample_replay",))
    assert p.what == "the training data" and p.expected.startswith("training samples")
    (f,) = P.of_failure("02_x", "failed", "KeyError: 'slots'", {"train_data": "/d/train"})
    assert (f.param, f.error, f.failure) == ("02_x", "KeyError", True)
    (t,) = P.of_failure("04_x", "timeout", "a cell ran past the per-cell timeout of 6 s", {})
    assert (t.error, t.failure) == ("timeout", True)
    assert P.of_failure("00_x", "ok", None, {}) == ()


def test_exit_code_failure_over_unreadable_over_ok():
    unread = {"problems": [Problem("draft", "/x", "MissingFileError", "not found", "").to_dict()]}
    broke = {"problems": [Problem("01_x", "", "KeyError", "k", "", failure=True).to_dict()]}
    assert P.exit_code([{"problems": []}, {}]) == 0
    assert P.exit_code([{}, unread]) == 3
    assert P.exit_code([unread, broke]) == 1


def test_not_given_only_on_a_users_own_draft():
    declared = {"draft": "", "launch": ""}
    stem = "01_config_override_discovery"
    assert P.not_given(stem, declared, {"draft": "/m/d"}) == (f"launch ({stem})",)
    assert P.not_given(stem, declared, {"draft": "/m/d", "launch": "vllm serve m"}) == ()
    assert P.not_given(stem, declared, {}) == ()                               # the demo world fills it
    assert P.not_given("00_checkpoint_audit", {"draft": ""}, {"draft": "/m/d"}) == ()


def test_merged_names_every_notebook_a_parameter_was_given_to():
    a = Problem("draft", "/x", "MissingFileError", "not found", "", notebooks=("00_a",))
    (m,) = P.merged([a, Problem(**{**a.to_dict(), "notebooks": ("02_b",)})])
    assert m.notebooks == ("00_a", "02_b")


def _ok(nb, status="ruled out"):
    return {"notebook": nb, "status": "ok", "findings": {"findings": [
        {"cause": "ndt_override", "status": status, "summary": "s", "evidence": {}, "where": nb}]}}


def test_the_index_diagnosis_is_healthy_only_with_the_core_notebooks_and_no_problem():
    rows = [_ok("00_checkpoint_audit"), _ok("01_config_override_discovery"), _ok("02_training_sample_replay")]
    assert diagnosis_of(rows)[0].healthy
    assert not_given_of(rows[:1]) == ["notebook 01 (the serving settings)", "notebook 02 (the training-sample "
                                                                             "replay)"]
    d = diagnosis_of(rows[:1])[0]
    assert not d.healthy and d.headline().startswith("1 of 1 causes checked: give notebook 01")
    told = [dict(rows[1], not_given=["launch (01_config_override_discovery)"])] + rows[::2]
    assert "give launch (01_config_override_discovery)" in diagnosis_of(told)[0].headline()
    bad = rows + [{"notebook": "03_hidden_state_diffing", "status": "skipped", "problems": [
        Problem("serving_dump", "/d", "DataError", "no manifest", "", "the serving dump").to_dict()]}]
    d = diagnosis_of(bad)[0]
    assert not d.healthy and d.headline().startswith("could not read the serving dump (serving_dump '/d')")


def test_needs_missing_on_a_users_draft_only():
    """A user's draft without the training data: notebooks 02 and 03 need it (steps.order.Step.needs), 03 the
    target too; on the demo world (no draft) nothing is missing."""
    assert P.needs_missing("02_training_sample_replay", {"draft": "/m/d"}) == ("train_data",)
    assert P.needs_missing("03_hidden_state_diffing", {"draft": "/m/d"}) == ("target", "train_data")
    assert P.needs_missing("03_hidden_state_diffing", {"draft": "/m/d", "target": "/m/t", "train_data": "/m/x"}) == ()
    assert P.needs_missing("02_training_sample_replay", {}) == ()
    assert P.needs_missing("04_throughput_charts", {"draft": "/m/d"}) == ()


def test_not_run_findings_say_not_checked_and_name_the_part():
    found = P.not_run_findings("02_training_sample_replay")
    assert found and {f.status for f in found} == {"not checked"}
    assert all(f.where.startswith("02 training-sample replay") for f in found)
    assert P.not_run_findings("03_hidden_state_diffing") == []


def test_not_given_names_each_key_once_with_every_notebook_that_needed_it():
    rows = [{"notebook": "02_x", "status": "skipped", "not_given": ["train_data (02_x)"]},
            {"notebook": "03_y", "status": "skipped", "not_given": ["train_data (03_y)"]},
            {"notebook": "01_z", "status": "ok", "not_given": ["launch (01_z)"]}]
    assert not_given_of(rows) == ["train_data (02_x, 03_y)", "launch (01_z)"]
