"""The demo draft deployed on the REAL vLLM (healthy and broken, eagle3demo.deployments), each diagnosed from what the
engine wrote, as a user's deployment is: the healthy one is "no fault found" with a replay-predicted τ within 10%
of the served τ; each broken one is diagnosed with its cause and no other confirmed; the one vLLM dies on gives a
finding naming the file and the key, and every other check still runs.

Marker `engine` (and `slow`): each deployment is served once per session (`eagle3demo.vllm_world.ensure` into a
temporary folder: ~30-60 s an engine start on 2 cores); skipped with the reason when there is no vLLM venv
(`make vllm`).
"""
from __future__ import annotations

import pytest

from eagle3demo import deployments, vllm_world
from eagle3lib.diagnose.parts import Inputs, run
from eagle3lib.vllm_engine import env as vllm_env

pytestmark = [pytest.mark.engine, pytest.mark.slow,
              pytest.mark.skipif(vllm_env.vllm_python() is None, reason=vllm_env.unavailable_reason() or "no vLLM")]

BROKEN = [n for n, d in deployments.DEPLOYMENTS.items() if d.cause and not d.refused and d.diagnosed]
REFUSED = [n for n, d in deployments.DEPLOYMENTS.items() if d.refused and n != "specforge_as_is"]
HEALTHY = [n for n, d in deployments.DEPLOYMENTS.items() if d.cause is None]


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """name -> (Served, Diagnosis run) for every deployment, served once into a session folder."""
    import os
    old = os.environ.get(vllm_world.ROOT_ENV)
    os.environ[vllm_world.ROOT_ENV] = str(tmp_path_factory.mktemp("demo_vllm"))
    cache: dict = {}
    yield cache
    if old is None:
        os.environ.pop(vllm_world.ROOT_ENV, None)
    else:
        os.environ[vllm_world.ROOT_ENV] = old


def diagnosed(served, name):
    if name not in served:
        d = vllm_world.ensure(name)
        served[name] = (d, run(Inputs(**d.diagnose_args(), n=16)))
    return served[name]


def statuses(r) -> dict[str, str]:
    return {v.cause: v.status for v in r.diagnosis.verdicts}


def test_healthy_deployment_is_no_fault_found_and_the_replay_predicts_its_tau(served):
    d, r = diagnosed(served, "healthy")
    assert d.ok and d.accept_length > 2.5, d.error
    assert r.diagnosis.healthy, r.diagnosis.text()
    assert r.diagnosis.headline().startswith("no fault found")
    decided = [f for part in r.findings.values() for f in part if f.cause == "engine_regression" and f.measured]
    ev = decided[0].evidence
    assert abs(ev["tau_as_trained"] - d.accept_length) <= 0.1 * d.accept_length, ev
    # what the engine itself said (its dump, its log, its own code) decided the layout, not a table
    layout = [f for part in r.findings.values() for f in part
              if f.cause == "aux_layout_mismatch" and f.evidence.get("source") in ("dump", "log", "probe")]
    assert layout and {f.status for f in layout} == {"ruled out"}


@pytest.mark.parametrize("name", [n for n in HEALTHY if n != "healthy"])
def test_the_replay_predicts_the_served_tau_at_the_served_depth(served, name):
    """K = 5 (healthy_k5): the as-trained replay runs the launch's K, within 10% of what vLLM served."""
    d, r = diagnosed(served, name)
    k = deployments.DEPLOYMENTS[name].num_speculative_tokens
    assert d.ok and r.diagnosis.healthy, r.diagnosis.text()
    decided = [f for part in r.findings.values() for f in part if f.cause == "engine_regression" and f.measured
               and f.evidence.get("num_steps") == k]
    assert decided, [f.evidence.get("num_steps") for part in r.findings.values() for f in part
                     if f.cause == "engine_regression"]
    ev = decided[0].evidence
    assert abs(ev["tau_as_trained"] - d.accept_length) <= 0.1 * d.accept_length, ev
    assert len(ev["per_position_as_trained"]) == k == len(ev["per_position_served"])


@pytest.mark.parametrize("name", REFUSED)
def test_a_refusal_names_the_cause_whose_fix_makes_the_engine_accept(served, name):
    """vLLM refusing the draft (an activation, a d2t lookup, the method's architecture name): the one cause the
    refusal maps to is confirmed from the engine's own traceback, and nothing is an engine regression."""
    d, r = diagnosed(served, name)
    want = deployments.DEPLOYMENTS[name].cause
    assert not d.ok, f"{name} served: {d.accept_length}"
    st = statuses(r)
    assert sorted(c for c, s in st.items() if s == "confirmed") == [want], r.diagnosis.text()
    assert st.get("engine_regression") != "confirmed"
    refusal = [f for part in r.findings.values() for f in part if f.cause == want and f.status == "confirmed"
               and f.measured and f.fix]
    assert refusal, r.diagnosis.text()


@pytest.mark.parametrize("name", BROKEN)
def test_broken_deployment_is_diagnosed_with_its_cause_alone(served, name):
    d, r = diagnosed(served, name)
    want = deployments.DEPLOYMENTS[name].cause
    assert d.ok, d.error                                     # it served: the loss shows in τ, not in an error
    st = statuses(r)
    confirmed = sorted(c for c, s in st.items() if s == "confirmed")
    assert confirmed == [want], r.diagnosis.text()
    assert not [c for c, s in st.items() if s == "conflict"], r.diagnosis.text()
    measured = [f for part in r.findings.values() for f in part if f.cause == want and f.status == "confirmed"
                and f.measured]
    assert measured, f"{want} confirmed without a measurement"


def test_a_draft_vllm_dies_on_is_a_finding_naming_the_file_and_key(served):
    d, r = diagnosed(served, "specforge_as_is")
    assert not d.ok and d.error                             # every request failed: the engine died serving it
    found = [f for part in r.findings.values() for f in part if f.status == "confirmed" and "key" in f.evidence]
    assert found, r.diagnosis.text()
    f = found[0]
    assert f.cause == "aux_layout_mismatch" and f.evidence["key"] == "eagle_aux_hidden_state_layer_ids"
    assert f.evidence["file"].endswith("config.json") and "server.log" in f.summary
    assert "shape '[-1, 512]' is invalid" in f.summary and f.measured       # the engine's own error, quoted
    # one root cause: the ids are in SpecForge's output-of convention, read as input-of (-1 names no boundary), so
    # the slot count vLLM dies on is layer_id_off_by_one's consequence, named, not a second confirmed cause
    assert sorted(v.cause for v in r.diagnosis.verdicts if v.status == "confirmed") == ["layer_id_off_by_one"]
    aux = next(v for v in r.diagnosis.verdicts if v.cause == "aux_layout_mismatch")
    assert aux.status == "ruled out" and any("consequence of layer_id_off_by_one" in x.summary for x in aux.findings)
    assert sum(v.status == "ruled out" for v in r.diagnosis.verdicts) >= 15    # nothing else is lost
    assert not r.problems


def test_the_vllm_demo_report_tells_the_off_by_one_story(served, tmp_path):
    """`make report PARAMS=params/demo-vllm.yaml` on the deployments this session served: every notebook runs on
    the real engine's files and the index confirms layer_id_off_by_one alone."""
    import json
    import os
    from pathlib import Path

    from eagle3lib.report.runner import main
    diagnosed(served, "off_by_one"), diagnosed(served, "healthy")
    root = Path(os.environ[vllm_world.ROOT_ENV])
    text = (Path(__file__).resolve().parents[1] / "params" / "demo-vllm.yaml").read_text()
    params = tmp_path / "demo-vllm.yaml"
    params.write_text(text.replace("data/demo_vllm/", f"{root}/"))
    assert main(["-f", str(params), "--out", str(tmp_path / "reports")]) == 0
    index = json.loads((tmp_path / "reports" / "index.json").read_text())
    assert [r["status"] for r in index["notebooks"]] == ["ok"] * 5
    confirmed = [v["cause"] for v in index["diagnosis"]["verdicts"] if v["status"] == "confirmed"]
    assert confirmed == ["layer_id_off_by_one"], index["diagnosis"]["headline"]
