"""Tests for eagle3lib.steps.case: the inputs resolved once. A user's draft gets nothing from the demo world; the
demo world fills every empty input (the seed's launch side from data/samples/demo_launch.json); what is costly or
can fail is read on first use, once; the diagnosis resolves one case for all its parts."""
from __future__ import annotations

import json

import pytest

from eagle3lib.demo import world as demo
from eagle3lib.errors import DataError, MissingFileError, ServingArgsError
from eagle3lib.steps import case as C
from eagle3lib.steps import sample_replay as SR
from eagle3lib.steps.part import Inputs


def test_a_users_draft_gets_nothing_from_the_demo(tmp_path):
    (tmp_path / "log.jsonl").write_text('{"val_acc_step0": 0.5}\n')
    case = C.case_of(Inputs(draft=str(tmp_path / "draft"), target=str(tmp_path / "target"), train_data="data/x",
                            training_log=str(tmp_path / "log.jsonl"), heldout_data="data/h"))
    assert not case.demo and case.recorded_acc == 0.5 and case.heldout == {"held-out": "data/h"}
    assert case.recorded_from.startswith(str(tmp_path / "log.jsonl"))
    assert case.serving_dump == "" and case.launch_command == "" and case.fixed_command == ""   # not the demo's
    assert case.sglang_version == "" and case.server_log == "" and case.launch_notes == ()
    case = C.case_of(Inputs(draft="d", target="t", train_data="x", recorded_acc=0.7))
    assert case.recorded_acc == 0.7 and case.recorded_from == "parameter" and case.heldout == {}
    with pytest.raises(DataError, match="train_data"):           # the replay needs the training samples
        SR.load_replay_setup(C.case_of(Inputs(draft="d", target="t")))


def test_the_demo_world_fills_every_empty_input_and_keeps_what_is_given(tmp_path):
    w = demo.ensure_world(progress=False)
    seed = json.loads(C.DEMO_LAUNCH.read_text())
    case = C.case_of(Inputs())
    assert case.demo and (case.draft_path, case.target_path, case.train_data) == (str(w.draft), str(w.target),
                                                                                  str(w.seed_data))
    assert case.heldout == {"held-out": str(w.heldout_data), "new prompts": str(w.shifted_data)}
    assert case.training_log == str(w.training_log) and case.recorded_from != "not given"
    assert (case.launch_command, case.fixed_command, case.sglang_version, case.server_log) == (
        seed["launch_command"], seed["fixed_command"], seed["sglang_version"], seed["server_log"])
    assert case.launch_notes and "demo_launch.json" in case.launch_notes[0]
    given = C.case_of(Inputs(target="models/t", launch="vllm serve m", sglang_version="0.5.9"))
    assert given.demo and given.target_path == "models/t" and given.launch_command == "vllm serve m"
    assert given.sglang_version == "0.5.9" and given.draft_path == str(w.draft)


def test_what_can_fail_is_read_on_first_use_naming_the_input(tmp_path):
    """A binary launch file or a missing training log fails only the part that reads it, naming it; the case itself
    resolves (so the checkpoint audit still runs)."""
    binary = tmp_path / "launch.txt"
    binary.write_bytes(b"\xcc\x81\xff\x00launch")
    case = C.case_of(Inputs(draft="d", launch=str(binary), training_log=str(tmp_path / "none.jsonl")))
    assert case.draft_path == "d"
    with pytest.raises(ServingArgsError, match="cannot be read as text"):
        case.launch_command
    with pytest.raises(MissingFileError, match="training log"):
        case.recorded
    text = tmp_path / "launch.sh"
    text.write_text("vllm serve m \\\n  --port 8000\n")
    assert C.case_of(Inputs(draft="d", launch=str(text))).launch_command == "vllm serve m \\\n  --port 8000"


def test_the_diagnosis_resolves_one_case_for_every_part(monkeypatch):
    """Every part of a diagnosis is handed the same Case (one resolution), never its own reading of the inputs."""
    from eagle3lib.diagnose import parts as P
    from eagle3lib.steps.order import PARTS
    from eagle3lib.steps.part import Part
    made, seen = [], []
    real = P.case_of

    def counted(inputs):
        made.append(real(inputs))
        return made[-1]
    monkeypatch.setattr(P, "case_of", counted)
    for step in PARTS:
        if step.diagnosed:
            monkeypatch.setattr(step.module, "run", lambda case, earlier, name=step.name: seen.append(case) or
                                Part(name))
    P.run(Inputs(draft="", n=1))
    assert len(made) == 1 and len(seen) == sum(s.diagnosed for s in PARTS)
    assert {id(c) for c in seen} == {id(made[0])}


@pytest.mark.slow
def test_a_notebooks_part_reads_each_input_once():
    """A notebook runs a step on its own case, outside any diagnosis: the step runs inside the case's reads
    (`Case.reading`, `reads_once`), so notebook 02's part reads each training sample's hidden states and the draft's
    config once (before: each hidden-state file 22-26 times, the seed's jsonl 232 opens for its 32 samples)."""
    from collections import Counter
    from eagle3lib import opened
    w = demo.ensure_world(progress=False)
    case = C.case_of(Inputs())
    with opened.counting() as opens:
        part = SR.run(case)
    assert part.findings and case.read_so_far.loads
    states = Counter({p: n for p, n in opens.items() if "/hidden_states/" in p})
    assert states and max(states.values()) == 1, states.most_common(3)
    assert opens[str((w.draft / "config.json").resolve())] == 1
    with opened.counting() as again:          # the case's second run reads nothing it has read
        SR.run(case)
    assert not any("/hidden_states/" in p for p in again), [p for p in again if "/hidden_states/" in p][:3]
