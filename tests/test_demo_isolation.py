"""With a user's own inputs nothing comes from the demo world (issue 46): on a copy of the demo world's artifacts
in another folder, the diagnosis, notebook 04's library path and (slow) the whole report open no path under
`data/` (`eagle3lib.opened` records every file a process opens, the notebooks' kernels included), no finding
speaks of "the seed", and an input left empty is said to be "not given"."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml

from eagle3lib import opened

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
SEED_WORDS = re.compile(r"\bthe seed\b|\bseed's\b", re.I)   # "seed" alone is also a data format's name
LAUNCH = ("python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
          "--speculative-draft-model-path {draft} --speculative-num-steps 1 --speculative-eagle-topk 1 "
          "--speculative-num-draft-tokens 16")


@pytest.fixture(scope="module")
def users_copy(tmp_path_factory) -> dict:
    """A user's folder: the demo world's draft, target, training data and held-out data copied elsewhere, and a
    launch command as the seed's (16 draft tokens at topk 1), all named by path."""
    from eagle3lib.demo import world as demo

    w = demo.ensure_world(progress=False)
    out = tmp_path_factory.mktemp("user")
    for name, src in (("draft", w.draft), ("target", w.target), ("train", w.specforge_data),
                      ("heldout", w.heldout_data)):
        shutil.copytree(src, out / name)
    paths = {"draft": str(out / "draft"), "target": str(out / "target"), "train_data": str(out / "train")}
    return {**paths, "heldout_data": str(out / "heldout"), "root": out,
            "launch": LAUNCH.format(target=paths["target"], draft=paths["draft"])}


def seed_talk(text: str) -> list[str]:
    return [text[max(m.start() - 60, 0): m.end() + 40] for m in SEED_WORDS.finditer(text)]


def test_the_diagnosis_of_a_users_copy_opens_nothing_under_data(users_copy):
    from eagle3lib.diagnose.parts import run
    from eagle3lib.steps.part import Inputs

    inp = Inputs(draft=users_copy["draft"], target=users_copy["target"], train_data=users_copy["train_data"],
                 launch=users_copy["launch"], sglang_version="0.5.6", n=8, drift_samples=1)
    with opened.recording() as seen:
        result = run(inp, progress=False)
    assert opened.under(seen, users_copy["root"]), "the recording saw none of the user's files"
    assert opened.under(seen, DATA) == []
    record = json.dumps(result.diagnosis.to_dict())
    assert seed_talk(record) == []
    confirmed = {v.cause for v in result.diagnosis.verdicts if v.status in ("confirmed", "suspected")}
    assert "ndt_override" in confirmed, result.diagnosis.headline()


def test_notebook_04_on_a_users_draft_reads_only_the_runs_given(users_copy):
    """No served runs given with a user's draft: "not given", no demo log, no sweep; on the demo world (no draft)
    the seed's sample log is read."""
    from eagle3lib.steps import throughput_runs as TR
    from eagle3lib.steps.case import case_of
    from eagle3lib.steps.part import Inputs

    with opened.recording() as seen:
        part = TR.run(case_of(Inputs(draft=users_copy["draft"])), {})
    assert opened.under(seen, DATA) == []
    assert part.results["headline"]["headline"] == TR.NOT_GIVEN and "not given" in TR.NOT_GIVEN
    assert part.tables["served runs"] == TR.NOT_GIVEN and part.results["sweep"] == [] and part.results["tvc"] is None
    assert TR.served_inputs(Inputs()) == [TR.DEMO_LOG]
    assert TR.served_inputs(Inputs(draft="d")) == [] and TR.served_inputs(Inputs(draft="d", served_log="x.log")) == ["x.log"]


@pytest.mark.slow
def test_the_report_on_a_users_copy_opens_nothing_under_data(users_copy, tmp_path, monkeypatch):
    """`make report PARAMS=<a user's YAML>` on the copy: every notebook's kernel and the runner open nothing under
    data/, no finding or headline speaks of the seed, and what was left empty (the served runs, a serving dump)
    is "not given"."""
    from eagle3lib.demo.sweep import demo_serving_dump
    from eagle3lib.report import runner

    dump = demo_serving_dump(users_copy["root"] / "dump", "seed", n=1)      # what the user's server fed the draft
    params = {k: users_copy[k] for k in ("draft", "target", "train_data", "launch")}
    params["02_training_sample_replay"] = {"n_samples": 8, "n_search": 2, "serving_dump": str(dump)}
    params["03_hidden_state_diffing"] = {"replay_samples": 4, "drift_samples": 1}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(params))
    log = tmp_path / "opened.log"
    monkeypatch.setenv(opened.ENV_VAR, str(log))
    with opened.recording() as seen:
        rc = runner.main(["--notebooks", str(ROOT / "notebooks"), "--out", str(tmp_path / "reports"),
                          "--cwd", str(ROOT), "-f", str(tmp_path / "mine.yaml")])
    kernels = opened.read_log(log)
    assert opened.under(kernels, users_copy["root"]), "the kernels recorded none of the user's files"
    assert opened.under(kernels | seen, DATA) == []
    index = json.loads((tmp_path / "reports" / "index.json").read_text())
    rows = {r["notebook"]: r for r in index["notebooks"]}
    assert rc == 0 and all(r["status"] == "ok" for r in rows.values()), {k: r["error"] for k, r in rows.items()}
    assert seed_talk(json.dumps([index["diagnosis"], [r["findings"] for r in rows.values()]])) == []
    assert rows["04_throughput_charts"]["findings"]["headline"].startswith("not given")
    for stem in rows:            # what each notebook printed and showed: no demo file, no word of the seed
        shown = json.dumps([c.get("outputs", []) for c in nbformat.read(tmp_path / "reports" / f"{stem}.ipynb",
                                                                         as_version=4).cells])
        assert "data/demo" not in shown and "data/samples" not in shown and seed_talk(shown) == [], stem
