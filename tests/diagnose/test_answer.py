"""The answer read in 30 seconds (eagle3lib.diagnose.answer) and the terminal command around it (diagnose.cli):
wrapped to the terminal's width and never cut, each alarm with one evidence line per check and its whole fix, the
not-checked causes grouped by the flag and YAML key that would check them, the machine record in a --json file."""
from __future__ import annotations

import json
import re

import pytest

from eagle3lib.causes import Finding, not_checked
from eagle3lib.diagnose import answer
from eagle3lib.diagnose.cli import main, parser
from eagle3lib.diagnose.combine import diagnose

LONG_FIX = ("make the engine capture [embed, layer_in.2, layer_in.4, layer_in.6]: sglang: "
            "eagle_config.eagle_aux_hidden_state_layer_ids = [-1, 1, 3, 5]; vllm: eagle_aux_hidden_state_layer_ids "
            "= [0, 2, 4, 6]; for 16 draft tokens set --speculative-num-steps 15 and --speculative-num-draft-tokens 16")


def _d():
    return diagnose([
        Finding("aux_layout_mismatch", "confirmed", "serving feeds [layer_in.2, zeros] " * 6, {}, "02 replay",
                fix=LONG_FIX, measured=True),
        Finding("aux_layout_mismatch", "confirmed", "the dump shows the embedding missing", {}, "03 dump",
                fix=LONG_FIX, measured=True),
        Finding("rope_mismatch", "ruled out", "same rope", {}, "00"),
        not_checked("ndt_override", "01", "the launch command (launch)"),
        not_checked("wrong_method", "01", "the serving launch command"),
        not_checked("generalization_gap", "02", "held-out or new-prompt data (heldout_data)"),
        not_checked("k_schedule", "01", "served accept length at each K against the replay, per engine build x")])


@pytest.mark.parametrize("width", [60, 110, 250])
def test_the_answer_wraps_to_the_width_and_keeps_the_whole_fix(width):
    text = answer.answer_text(_d(), width)
    lines = text.splitlines()
    assert all(len(ln) <= width for ln in lines if " " in ln.strip()), max(lines, key=len)
    flat = " ".join(text.split())
    assert "fix: " + LONG_FIX in flat and "…" not in text
    assert text.index("CONFIRMED (1)") < text.index("RULED OUT (1): rope_mismatch") < text.index("NOT CHECKED (4)")
    assert text.count("fix: ") == 1                       # the same fix from two checks: said once


def test_one_evidence_line_per_check_and_no_repetition():
    (v,) = [v for v in _d().verdicts if v.status == "confirmed"]
    lines = answer.evidence_lines(v)
    assert len(lines) == 2 and lines[1] == "the dump shows the embedding missing [03 dump]"
    assert not any("decided by" in ln for ln in lines)


def test_not_checked_causes_are_grouped_by_the_flag_and_key_that_check_them():
    groups = answer.unchecked_groups(_d().verdicts)
    named = [(inputs, [v.cause for v in g]) for inputs, g in groups]
    assert named == [(("launch",), ["wrong_method", "ndt_override"]), (("heldout_data",), ["generalization_gap"]),
                     (("served_log",), ["k_schedule"])]
    text = answer.answer_text(_d(), 200)
    assert "give --launch (YAML key launch): wrong_method, ndt_override" in text
    assert "give --served-log (YAML key served_log_path): k_schedule" in text
    # an input already given is never asked for again: the cause says what it needs instead
    given = answer.answer_text(_d(), 200, given={"launch"})
    assert "give --launch" not in given and "ndt_override: needs the launch command (launch)" in given


def test_the_terminal_width_follows_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert answer.terminal_width() == 250
    monkeypatch.setenv("COLUMNS", "20")
    assert answer.terminal_width() == answer.MIN_WIDTH


def test_help_shows_two_examples_and_the_exit_codes():
    text = parser().format_help()
    assert text.count("eagle3lib diagnose --draft") == 2 and "--json diagnosis.json" in text
    assert all(re.search(rf"^  {c}  \S", text, re.M) for c in (0, 1, 2, 3)), text


def test_json_writes_the_record_to_a_file_and_keeps_the_exit_code(tmp_path, capsys, monkeypatch):
    """An unreadable draft: exit 3, the record in the --json file (none on stdout), the answer wrapped to $COLUMNS;
    --json - puts the record last on stdout."""
    monkeypatch.setenv("COLUMNS", "80")
    rc = main(["--draft", str(tmp_path / "nope"), "--quiet", "--json", str(tmp_path / "d.json")])
    out = capsys.readouterr().out
    rec = json.loads((tmp_path / "d.json").read_text())
    assert rc == 3 == rec["exit_code"] and rec["problems"][0]["param"] == "--draft"
    assert not out.strip().splitlines()[-1].startswith("{") and "\nexit code 3: a given input" in out
    assert all(len(ln) <= 80 for ln in out.splitlines() if " " in ln.strip()), out
    assert main(["--draft", str(tmp_path / "nope"), "--quiet", "--json", "-"]) == 3
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["exit_code"] == 3
