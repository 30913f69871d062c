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
@pytest.mark.e2e
def test_every_notebook_runs_on_the_embedded_default(demo_reports):
    """Every notebook executes ok, has one tagged parameters cell, and records a 'headline' finding."""
    sources = report.discover_notebooks(ROOT / "notebooks")
    assert set(EXPECTED) <= {p.name[:2] for p in sources}, [p.name for p in sources]
    rc, out = demo_reports
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
        recorded = findings.read_findings(out / f"{stem}.findings.json")
        assert "headline" in recorded, f"{stem} recorded {sorted(recorded)}"
        assert row["findings"] == recorded
    d = index["diagnosis"]                        # the demo world is the seed's story, told from evidence
    confirmed = {v["cause"] for v in d["verdicts"] if v["status"] == "confirmed"}
    assert {"ndt_override", "aux_layout_mismatch"} <= confirmed, d["headline"]
    page = (out / "index.html").read_text()
    assert page.index("<h2>The answer</h2>") < page.index("Notebooks of this run")
    # the seed's decision opens the answer and notebook 02: the seed's capture feeds the draft otherwise than trained
    assert page.index("<h2>The answer</h2>") < page.index("The seed's decision") < page.index("Notebooks of this run")
    assert d["decision"]["verdict"] == "wiring/loading"
    nb02 = nbformat.read(out / f"{next(s for s in rows if s.startswith('02'))}.ipynb", as_version=4)
    said = [o.get("text", "") for c in nb02.cells if c.cell_type == "code" and ".decision" in c.source
            for o in c.get("outputs", [])]
    assert any(t.startswith("WIRING/LOADING: ") for t in said), said


CLEAN_LAUNCH = ("python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
                "--speculative-draft-model-path {draft} --speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4")


@pytest.mark.slow
def test_a_healthy_deployment_gets_no_alarm_from_any_notebook(tmp_path):
    """A user's own artifacts (the demo world's files, but passed as paths, so nothing is filled from the demo):
    a correct draft, its training data, a serving dump in the trained layout, a clean launch command. Every
    notebook runs, none raises a cause, and the index's diagnosis says "no fault found"."""
    import yaml

    from eagle3lib.demo import world as demo
    from eagle3lib.demo.sweep import demo_serving_dump

    from eagle3lib.demo.sweep import run_demo_sweep
    from eagle3lib.engine_kit.records import write_jsonl

    w = demo.ensure_world(progress=False)
    dump = demo_serving_dump(tmp_path / "dump", "correct", n=1)
    served = write_jsonl([r for r in run_demo_sweep([(3, 1, 4), (3, 3, 6)], captures=("correct",), repeats=1,
                                                    num_prompts=4, prompts="train") if r.num_steps],
                         tmp_path / "served.jsonl")      # the server's own runs: a chain and a tree
    paths = {"draft": str(w.draft), "target": str(w.target), "train_data": str(w.seed_data)}  # top level: all
    params = {
        **paths,
        "01_config_override_discovery": {"launch": CLEAN_LAUNCH.format(target=w.target, draft=w.draft),
                                         "sglang_version": "0.5.6", "served_log_path": str(served)},
        "02_training_sample_replay": {"heldout_data": str(w.heldout_data), "serving_dump": str(dump),
                                      "training_log_path": str(w.training_log), "n_samples": 16},
        "03_hidden_state_diffing": {"serving_dump": str(dump), "replay_samples": 8},
    }
    (tmp_path / "clean.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "reports"
    rc = report.main(["--notebooks", str(ROOT / "notebooks"), "--out", str(out), "--cwd", str(ROOT),
                      "-f", str(tmp_path / "clean.yaml"), "--only", "00,01,02,03"])
    index = json.loads((out / "index.json").read_text())
    failed = {r["notebook"]: r["error"] for r in index["notebooks"] if r["status"] != "ok"}
    assert rc == 0 and not failed, failed
    d = index["diagnosis"]
    alarms = [(v["cause"], v["status"], v["evidence"]) for v in d["verdicts"]
              if v["status"] in ("confirmed", "conflict", "suspected")]
    assert d["healthy"] and not alarms, alarms
    assert d["headline"].startswith("no fault found")
    served = [f for v in d["verdicts"] if v["cause"] == "engine_regression" for f in v["findings"]
              if "served accept length" in f["where"]]
    # the chain beside the draft replayed as SGLang loads it (num_steps 3), the tree beside the tree replay (topk 3)
    assert [f["status"] for f in served] == ["ruled out", "ruled out"], served
    assert [f["evidence"].get("topk", 1) for f in served] == [1, 3] and served[0]["evidence"]["num_steps"] == 3
    heads = {r["notebook"]: r["findings"]["headline"] for r in index["notebooks"]}
    assert "run as requested" in heads["01_config_override_discovery"], heads
    assert "healthy" in heads["02_training_sample_replay"] and "no wiring fault" in heads["03_hidden_state_diffing"]


@pytest.mark.slow
def test_the_mla_demo_world_tells_the_same_story(tmp_path):
    """`demo_world: mla` (one parameter) runs the notebooks on the MLA world: a DeepSeek-V3 target and an MLA
    EAGLE-3 draft; the audit says MLA and the diagnosis confirms the seed's causes there too."""
    (tmp_path / "mla.yaml").write_text((ROOT / "params" / "demo-mla.yaml").read_text())
    out = tmp_path / "reports"
    rc = report.main(["--notebooks", str(ROOT / "notebooks"), "--out", str(out), "--cwd", str(ROOT),
                      "-f", str(tmp_path / "mla.yaml"), "--only", "00,01,02"])
    index = json.loads((out / "index.json").read_text())
    failed = {r["notebook"]: r["error"] for r in index["notebooks"] if r["status"] != "ok"}
    assert rc == 0 and not failed, failed
    heads = {r["notebook"]: r["findings"]["headline"] for r in index["notebooks"]}
    assert "MLA attention" in heads["00_checkpoint_audit"], heads
    confirmed = {v["cause"] for v in index["diagnosis"]["verdicts"] if v["status"] == "confirmed"}
    assert {"ndt_override", "aux_layout_mismatch"} <= confirmed, index["diagnosis"]["headline"]
