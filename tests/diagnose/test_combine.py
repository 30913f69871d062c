"""The diagnosis: per-cause combination, conflicts shown, ranking, and "no fault found" on a healthy run."""
from __future__ import annotations

from eagle3lib.causes import Finding, not_checked
from eagle3lib.diagnose.combine import combine, diagnose
from eagle3lib.diagnose.parts import Inputs, attribute, undecided
from eagle3lib.steps.given import Problem


def F(cause, status, where="x", fix=""):
    return Finding(cause, status, f"{cause} {status} at {where}", {"n": 1}, where, fix=fix)


def test_combine_statuses():
    assert combine(["confirmed", "not checked"]) == "confirmed"
    assert combine(["confirmed", "ruled out"]) == "conflict"
    assert combine(["suspected", "ruled out"]) == "ruled out"      # a measurement settles a suspicion
    assert combine(["suspected", "not checked"]) == "suspected"
    assert combine(["ruled out", "not checked"]) == "ruled out"
    assert combine(["not checked"]) == "not checked"


def test_a_measurement_outweighs_configs_and_rules():
    """Only one side measured: it decides (a dump shows a shifted capture the config reading rules out)."""
    assert combine(["confirmed", "ruled out"], [True, False]) == "confirmed"
    assert combine(["confirmed", "ruled out"], [False, True]) == "ruled out"
    assert combine(["confirmed", "ruled out"], [True, True]) == "conflict"
    assert combine(["suspected", "ruled out"], [True, False]) == "suspected"
    assert combine(["suspected", "ruled out"], [False, True]) == "ruled out"
    d = diagnose([Finding("layer_id_off_by_one", "ruled out", "config ids name the training layout", {}, "00"),
                  Finding("layer_id_off_by_one", "confirmed", "dump: every slot one layer deeper", {}, "03",
                          measured=True)])
    assert d.verdicts[0].status == "confirmed" and [f.where for f in d.verdicts[0].deciding] == ["03"]
    assert len(d.verdicts[0].findings) == 2


def test_ranked_confirmed_first_then_conflict_suspected_ruled_out_not_checked():
    d = diagnose([not_checked("rope_mismatch", "00", "the target"), F("generalization_gap", "ruled out"),
                  F("ndt_override", "confirmed", "01", fix="set num_steps 15"), F("short_context", "suspected"),
                  F("aux_layout_mismatch", "confirmed", "03"), F("aux_layout_mismatch", "not checked", "02"),
                  F("d2t_mapping", "confirmed", "00"), F("d2t_mapping", "ruled out", "02")])
    assert [v.status for v in d.verdicts] == ["confirmed", "confirmed", "conflict", "suspected", "ruled out",
                                              "not checked"]
    assert [v.cause for v in d.verdicts][:2] == ["ndt_override", "aux_layout_mismatch"]   # catalogue order
    conflict = d.by_status("conflict")[0]
    assert {f.where for f in conflict.deciding} == {"00", "02"} and "[00]" in conflict.evidence
    assert d.verdicts[0].fix == "set num_steps 15"
    assert not d.healthy and d.headline().startswith("confirmed: ")
    assert d.by_status("not checked")[0].needs == "the target"
    text = d.text()
    assert "CONFLICT (1)" in text and "fix: set num_steps 15" in text
    assert d.to_dict()["verdicts"][0]["findings"][0]["where"] == "01"


def test_healthy_run_says_no_fault_found_and_what_was_checked():
    d = diagnose([F("ndt_override", "ruled out"), F("aux_layout_mismatch", "ruled out"),
                  not_checked("rope_mismatch", "00", "the target")])
    assert d.healthy and d.alarms == ()
    assert d.headline() == "no fault found: 2 causes checked and ruled out, 1 not checked"
    assert list(d.frame().status) == ["ruled out", "ruled out", "not checked"]


# ---------------------------------------------------------------- "no fault found" only on evidence (issue 28)

def _clean():
    return [F("ndt_override", "ruled out"), F("aux_layout_mismatch", "ruled out"),
            not_checked("generalization_gap", "02", "held-out data (--heldout-data)")]


def test_an_unreadable_input_is_listed_first_and_never_healthy():
    p = Problem("--draft", "/m/draft", "UnsafeFileError", "/m/draft/pytorch_model.bin: refused", "a draft folder",
                "the draft")
    d = diagnose(_clean(), problems=[p, Problem("--server-log", "/etc/passwd", "LogParseError", "no server line", "")])
    assert not d.healthy and d.alarms == ()
    assert d.headline() == ("could not read the draft (--draft '/m/draft'): UnsafeFileError: "
                            "/m/draft/pytorch_model.bin: refused (and 1 more problem)")
    text = d.text(250).splitlines()
    assert text[2].startswith("PROBLEMS (2)") and "--draft" in text[3] and "UnsafeFileError" in text[4]
    rec = d.to_dict()
    assert [x["param"] for x in rec["problems"]] == ["--draft", "--server-log"] and rec["healthy"] is False
    assert Problem.from_dict(rec["problems"][0]) == p
    # with an alarm too, both: what could not be read, then what was found
    d = diagnose(_clean() + [F("lossy_threshold", "confirmed")], problems=[p])
    assert d.headline().startswith("could not read the draft") and "; confirmed: " in d.headline()


def test_a_broken_part_is_a_failure_in_the_headline():
    p = Problem("02 training-sample replay", "", "TypeError", "boom (at x.py:3)", "", failure=True)
    d = diagnose(_clean(), problems=[p])
    assert not d.healthy and d.headline() == "the workbook failed in 02 training-sample replay: TypeError: boom " \
                                             "(at x.py:3)"


def test_how_little_was_checked_and_what_to_give():
    d = diagnose(_clean(), not_given=["--train-data", "--launch"])
    assert not d.healthy
    assert d.headline() == "2 of 3 causes checked: give --train-data and --launch to check the rest"
    d = diagnose(_clean(), undecided=["--heldout-data was given but decided none of generalization_gap"])
    assert not d.healthy and d.headline().endswith("--heldout-data was given but decided none of generalization_gap")
    assert diagnose(_clean()).healthy          # the same findings with nothing standing in the way


def test_undecided_names_a_given_input_that_decided_nothing():
    d = diagnose(_clean())
    assert undecided(d, {"draft", "train_data", "heldout_data"}) == [
        "--heldout-data was given but decided none of generalization_gap (needs held-out data (--heldout-data))"]
    assert undecided(d, {"draft", "heldout_data"}) == []             # it needs --train-data as well
    assert undecided(d, {"draft", "train_data", "launch"}) == []          # ndt_override was decided
    bad = [Problem("--heldout-data", "/x", "DataError", "unreadable", "")]
    assert undecided(d, {"draft", "train_data", "heldout_data"}, bad) == []  # unreadable: a problem already


def test_attribute_names_the_input_a_message_shows():
    inp = Inputs(draft="/m/d", train_data="/data/train")
    assert attribute("/data/train: no training data found", inp, "02") == ("--train-data", "/data/train")
    assert attribute("something else broke", inp, "02") == ("02", "")


# ---------------------------------------------------------------- aspects (issue 25)

def A(cause, status, *aspects, measured=False):
    return Finding(cause, status, f"{cause} {status} on {aspects or 'all'}", {}, "x", aspects=aspects,
                   measured=measured)


def test_a_cause_is_ruled_out_only_when_every_aspect_is():
    """The template's markers and think blocks agree, its default system prompt was never checked: not checked
    (aspects system prompt, generation prompt), never ruled out; every aspect ruled out: ruled out."""
    fs = [A("chat_template_mismatch", "ruled out", "role markers"), A("chat_template_mismatch", "ruled out",
                                                                      "think blocks")]
    v = diagnose(fs).verdicts[0]
    assert v.status == "not checked" and v.unchecked == ("system prompt", "generation prompt")
    assert v.label == "not checked (aspects system prompt, generation prompt)"
    assert "not checked: aspects system prompt, generation prompt" in v.evidence
    assert "chat_template_mismatch (aspects system prompt, generation prompt)" in diagnose(fs).text()
    fs += [A("chat_template_mismatch", "ruled out", "system prompt", "generation prompt")]
    assert diagnose(fs).verdicts[0].status == "ruled out"
    assert diagnose([A("chat_template_mismatch", "ruled out")]).verdicts[0].status == "ruled out"   # all aspects


def test_a_confirmed_aspect_confirms_and_other_aspects_never_conflict():
    """lm_head absent for a reduced vocab (present: confirmed) while the vocab sizes agree (padded vocab: ruled
    out) is lm_head_missing confirmed, not a conflict; the same aspect on both sides still is one."""
    d = diagnose([A("lm_head_missing", "confirmed", "present", "borrowable"),
                  A("lm_head_missing", "ruled out", "padded vocab")])
    v = d.verdicts[0]
    assert v.status == "confirmed" and dict(v.aspects) == {"present": "confirmed", "borrowable": "confirmed",
                                                           "padded vocab": "ruled out"}
    assert [f.aspects for f in v.deciding] == [("present", "borrowable")]
    assert diagnose([A("lm_head_missing", "confirmed", "present"),
                     A("lm_head_missing", "ruled out", "present")]).verdicts[0].status == "conflict"
    # a suspicion on one aspect is not settled by another aspect ruled out
    assert diagnose([A("chat_template_mismatch", "suspected", "system prompt"),
                     A("chat_template_mismatch", "ruled out")]).verdicts[0].status == "ruled out"
    assert diagnose([A("chat_template_mismatch", "suspected", "system prompt"),
                     A("chat_template_mismatch", "ruled out", "role markers")]).verdicts[0].status == "suspected"


def test_the_verdict_names_the_measurement_that_decided():
    f = Finding("rope_mismatch", "confirmed", "replay under the target's RoPE restores acc", {"measurement":
                "replay under the draft's RoPE and the target's"}, "checks.rope", measured=True)
    v = diagnose([f, A("rope_mismatch", "suspected")]).verdicts[0]
    assert v.status == "confirmed" and v.measurement == "replay under the draft's RoPE and the target's"
    assert v.to_dict()["measurement"] == v.measurement


def test_a_confirmed_root_cause_makes_what_it_explains_its_consequence():
    """A confirmed finding that explains aux_layout_mismatch restates that cause's alarms as its consequence
    ("ruled out" as a cause of its own, naming the root) unless one shows another served layout; a root that is not
    confirmed explains nothing."""
    root = Finding("layer_id_off_by_one", "confirmed", "ids in the other convention", {"captured": ["never captured",
                   "layer_in.1"]}, "00", explains=("aux_layout_mismatch",))
    same = Finding("aux_layout_mismatch", "confirmed", "fails: fc takes 2 slots, captures 1", {"captured":
                   ["layer_in.1"]}, "01", measured=True)
    other = Finding("aux_layout_mismatch", "confirmed", "dump shows another capture", {"served_layout":
                    ["layer_in.7", "layer_in.1"]}, "03", measured=True)
    d = diagnose([root, same])
    assert [(v.cause, v.status) for v in d.verdicts] == [("layer_id_off_by_one", "confirmed"),
                                                          ("aux_layout_mismatch", "ruled out")]
    assert d.verdicts[1].findings[0].evidence["consequence_of"] == "layer_id_off_by_one"
    d = diagnose([root, same, other])
    assert {v.cause: v.status for v in d.verdicts}["aux_layout_mismatch"] == "conflict"     # the dump stands
    weak = Finding("layer_id_off_by_one", "suspected", "maybe", {}, "00", explains=("aux_layout_mismatch",))
    assert {v.cause: v.status for v in diagnose([weak, same]).verdicts}["aux_layout_mismatch"] == "confirmed"
    assert Finding.from_dict(root.to_dict()) == root


def test_the_chat_template_is_judged_on_the_served_one_only():
    """--chat-template FILE adding a system prompt: confirmed on the served file (notebook 01), ruled out on the
    tokenizer's own template (notebook 00, no launch): the served one decides, no conflict."""
    from eagle3lib.causes import Finding
    from eagle3lib.checks.template import TEMPLATE_JUDGED
    from eagle3lib.diagnose.combine import diagnose

    served = Finding("chat_template_mismatch", "confirmed", "the served template adds a system prompt",
                     {TEMPLATE_JUDGED: "--chat-template sys.jinja"}, "checks.template.system", measured=True,
                     aspects=("system prompt",))
    own = Finding("chat_template_mismatch", "ruled out", "no default system prompt",
                  {TEMPLATE_JUDGED: "the target tokenizer's (no launch given)"}, "checks.template.system",
                  measured=True, aspects=("system prompt",))
    (v,) = diagnose([served, own]).verdicts
    assert v.status == "confirmed" and own not in v.findings
    (alone,) = diagnose([own]).verdicts          # without a served file the tokenizer's template is what is served
    assert dict(alone.aspects)["system prompt"] == "ruled out" and own in alone.findings
