"""run_checks: every check on whatever is given; missing inputs narrow the answer, broken checks never raise."""
from __future__ import annotations

from eagle3lib.causes import CATALOGUE, Finding
from eagle3lib.checks import run as R
from eagle3lib.causes import findings_frame
from eagle3lib.checks.run import run_checks
from tests.checks.world import canonical_tensors, draft_raw, write_data, write_draft, write_target


def test_nothing_given_is_all_not_checked_naming_inputs():
    """No input at all: every finding is 'not checked' and names what it needs; every cause id is known."""
    f = run_checks()
    assert f and {x.status for x in f} == {"not checked"} and all(x.needs for x in f)
    assert {x.cause for x in f} <= set(CATALOGUE)
    reported = {c for _, causes in R.CHECKS.values() for c in causes}
    assert {x.cause for x in f} == reported


def test_clean_tiny_world_raises_nothing(tmp_path):
    """A consistent tiny draft/target/data/launch: no confirmed or suspected finding."""
    raw = draft_raw()
    f = run_checks(draft=write_draft(tmp_path, raw, canonical_tensors(raw)), target=write_target(tmp_path),
                   data=write_data(tmp_path), engine="sglang", engine_version="0.5.6",
                   launch="python -m sglang.launch_server --model-path t --speculative-algorithm EAGLE3")
    bad = [x for x in f if x.raised]
    assert bad == [], findings_frame(bad).to_string()
    assert sum(x.status == "ruled out" for x in f) >= 12


def test_unreadable_inputs_and_a_broken_check_do_not_raise(tmp_path, monkeypatch):
    """A corrupt config is named in `needs`; a check that crashes becomes 'not checked' with its error."""
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    f = run_checks(draft=tmp_path / "bad")
    assert any("unreadable" in x.needs and "not valid JSON" in x.needs for x in f)

    def boom(art, opts):
        raise RuntimeError("kaboom")
    monkeypatch.setitem(R.CHECKS, "rope", (boom, ("rope_mismatch",)))
    f = run_checks(draft=write_draft(tmp_path, draft_raw()), only=["rope"])
    assert [(x.cause, x.status) for x in f] == [("rope_mismatch", "not checked")] and "kaboom" in f[0].summary
    assert all(isinstance(x, Finding) for x in f)
    assert list(findings_frame(f).columns) == ["cause", "status", "summary", "where", "fix", "needs", "source"]
