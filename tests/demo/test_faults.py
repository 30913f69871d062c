"""Tests for eagle3demo.faults (the builder): the generated fault matrix, each fault diagnosed by `python -m
eagle3lib.diagnose` (in-process: the same `diagnose.parts`), with the matrix's invariants checked on every case.

`make test` runs a sample (`SAMPLE`); `EAGLE3LIB_FAULTS=all` runs every single fault and every pair. The real-vLLM
leg (marker `engine`) serves `ENGINE_SAMPLE` on the real engine first (127.0.0.1, stopped by its pid) and diagnoses
each with what the engine wrote: the served τ within 10% of the replay that explains it, or the refusal attributed
to the fault; `EAGLE3LIB_FAULTS=all` serves every single fault (~1 min each: `python tools/fault_matrix.py --engine
vllm` does the same and writes benchmarks/results/fault_matrix_vllm.json). The real-SGLang leg serves the healthy copy
and the seed's rewrite (`SGLANG_SAMPLE`; every single fault with EAGLE3LIB_FAULTS=all; `--engine sglang`:
benchmarks/results/fault_matrix_sglang.json)."""
from __future__ import annotations

import json
import os

import pytest

from eagle3lib.engines.versions import SERVING_ENGINES
from eagle3demo import faults
from eagle3lib.demo import world as demo
from eagle3lib.diagnose.decision import VERDICTS
from eagle3lib.diagnose.parts import Inputs, run
from eagle3lib.engines.facts import read_fields
from eagle3lib.sglang_engine import env as sglang_env
from eagle3lib.vllm_engine import env as vllm_env

SAMPLE = ("norm_before_residual", "rms_norm_eps", "d2t_permuted", "served_other_domain", "launch_k1")
ENGINE_SAMPLE = ("rms_norm_eps", "use_aux_hidden_state", "d2t_permuted", "launch_k1")
SGLANG_SAMPLE = ("launch_ndt_rewrite",)      # the seed's rewrite (every flag and tensor: fault_matrix_sglang.json)   # a no-op; a silent layout
# change; a tensor the training samples restore; a ceiling (deployments cover the flags, RoPE, activation and d2t
# faults on the real engine: tests/test_engine_deployments.py; every class: benchmarks/results/fault_matrix_vllm_classes.json)
ALL = os.environ.get("EAGLE3LIB_FAULTS") == "all"
CASES = {f.name: f for f in faults.singles() + (faults.pairs() if ALL else ())}


def test_every_engine_read_field_is_perturbed_and_pairs_cover_every_two():
    names = {f.name for f in faults.singles()}
    for engine in SERVING_ENGINES:
        assert set(read_fields(engine)) <= names, f"{engine} reads a field the matrix never perturbs"
    n = sum(1 for f in faults.singles() if f.kind == "config")
    assert len(faults.pairs()) == n * (n - 1) // 2
    assert all(len(p.names) == 2 for p in faults.pairs())


def test_every_class_of_fault_is_generated_with_the_seeds_verdict_it_must_reach():
    """Beyond config fields: tensors, served data, the target, launch ceilings; each with its verdict served and
    offline (a fault an engine sees only once it serves may be 'not checked' offline, never another verdict)."""
    by_kind = {}
    for f in faults.singles():
        by_kind.setdefault(f.kind, []).append(f.name)
        assert f.verdict in VERDICTS and (f.verdict_offline in (f.verdict, faults.NOT_SERVED)), f.name
    assert {"config", "config shape", "tensor", "served data", "target", "launch"} == set(by_kind)
    assert {"d2t_permuted", "d2t_other_vocab", "lm_head_permuted", "embedding_swapped"} <= set(by_kind["tensor"])
    assert {"served_other_domain", "served_other_template"} == set(by_kind["served data"])
    assert {"target_drifted", "target_other"} == set(by_kind["target"])
    assert {"launch_k1", "launch_ndt_rewrite"} == set(by_kind["launch"])
    assert faults.expected_verdict(faults.HEALTHY_COPY) == faults.NOT_SERVED
    assert faults.expected_verdict(faults.HEALTHY_COPY, {"ok": True}) == "healthy"
    assert faults.expected_verdict(CASES["launch_k1"], {"ok": False}) == "wiring/loading"     # a refusal


def test_a_fault_changes_only_what_it_says(tmp_path):
    healthy = json.loads(faults.write_fault(faults.HEALTHY_COPY, tmp_path / "h").joinpath(
        "config.json").read_text())
    for f in faults.singles()[:3]:
        got = json.loads(faults.write_fault(f, tmp_path / f.name).joinpath("config.json").read_text())
        changed = {k for k in set(got) | set(healthy) if got.get(k) != healthy.get(k)}
        assert changed <= {f.name, "eagle_config"} and changed, (f.name, changed)


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


def diagnosed(world, draft, **given) -> tuple[dict, int]:
    r = run(Inputs(**{"draft": str(draft), "target": str(world.target), "train_data": str(world.specforge_data),
                      "training_log": str(world.training_log), "n": 16, "drift_samples": 0, **given}), progress=False)
    return r.diagnosis.to_dict(), r.exit_code


@pytest.fixture(scope="module")
def healthy_acc0(world, tmp_path_factory):
    d, code = diagnosed(world, faults.write_fault(faults.HEALTHY_COPY, tmp_path_factory.mktemp("h") / "draft"))
    assert code != 1 and not [v for v in d["verdicts"] if v["status"] == "confirmed"], d["headline"]
    assert not faults.invariants(faults.HEALTHY_COPY, d, code, 0.9)
    cf = faults.counterfactual_finding(d)
    assert cf["status"] == "ruled out"
    return cf["evidence"]["acc0_as_shipped"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASES if ALL or n in SAMPLE])
def test_the_generated_fault_is_named_and_nothing_else_alarms(world, tmp_path, healthy_acc0, name):
    fault = CASES[name]
    draft = faults.write_fault(fault, tmp_path / "draft")
    d, code = diagnosed(world, draft, **faults.inputs_of(fault, draft, world))
    bad = faults.invariants(fault, d, code, healthy_acc0)
    assert not bad, f"{name}: {bad}"


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.skipif(vllm_env.vllm_python() is None, reason=vllm_env.unavailable_reason() or "no vLLM")
@pytest.mark.parametrize("name", [n for n in CASES if "+" not in n and CASES[n].vllm and (ALL or n in ENGINE_SAMPLE)])
def test_the_generated_fault_served_on_vllm_is_named_and_its_tau_predicted(world, tmp_path, healthy_acc0, name):
    fault = CASES[name]
    given, served = faults.served_on_engine(fault, faults.write_fault(fault, tmp_path / "draft"), "vllm", world)
    d, code = diagnosed(world, tmp_path / "draft", **given)
    bad = faults.invariants(fault, d, code, healthy_acc0, served)
    assert not bad, f"{name} (served {served}): {bad}"


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.skipif(bool(sglang_env.unavailable_reason()), reason=sglang_env.unavailable_reason() or "SGLang runs")
@pytest.mark.parametrize("name", ["none"] + [n for n in CASES if "+" not in n and (ALL or n in SGLANG_SAMPLE)])
def test_the_generated_fault_served_on_sglang_is_named_and_its_tau_predicted(world, tmp_path, healthy_acc0, name):
    """The same on the real SGLang: the fault applied to the draft as SpecForge wrote it (SGLang's ids), served at
    steps 3 / topk 1 / 4 draft tokens (the ndt rewrite as typed), diagnosed from the launch, log, /server_info, the
    served traffic and the hook's dump; the healthy copy ("none") is healthy with its τ predicted."""
    fault = CASES.get(name, faults.HEALTHY_COPY)
    given, served = faults.served_on_engine(fault, faults.write_fault(fault, tmp_path / "draft", engine="sglang"),
                                         "sglang", world)
    d, code = diagnosed(world, tmp_path / "draft", **given)
    bad = faults.invariants(fault, d, code, healthy_acc0, served)
    assert not bad, f"{name} (served {served}): {bad}"


def test_the_served_invariants_fail_on_a_wrong_prediction_and_an_unattributed_refusal():
    fault = faults.Fault("norm_before_fc", "norm_before_fc set", ("norm_before_fc",))
    ev = {"served": 1.4, "tau_as_trained": 3.1, "tau_as_served": 1.45}
    diag = {"problems": [], "verdicts": [{"cause": "draft_config_differs", "status": "confirmed",
                                          "findings": [{"where": "replay.served", "evidence": ev}],
                                          "note": "norm_before_fc"}], "decision": {"verdict": "wiring/loading"}}
    assert faults.predicted_tau(diag) == (1.4, 1.45)
    assert faults.invariants(fault, diag, 0, 0.9, {"ok": True, "accept_length": 1.4}) == []
    far = {**diag, "verdicts": [{**diag["verdicts"][0], "findings": [
        {"where": "replay.served", "evidence": {**ev, "tau_as_served": 2.0}}]}]}
    assert any("more than 10% apart" in b for b in faults.invariants(fault, far, 0, 0.9, {"ok": True,
                                                                                          "accept_length": 1.4}))
    quiet = {"problems": [], "verdicts": [], "decision": {"verdict": "wiring/loading"}}
    assert any("served τ" in b for b in faults.invariants(fault, quiet, 0, 0.9, {"ok": True, "accept_length": 1.4}))
    assert any("refused" in b for b in faults.invariants(fault, quiet, 0, 0.9, {"ok": False, "error": "gelu"}))
    assert faults.invariants(fault, quiet, 0, 0.9) == []      # offline, acc0 unknown: only the seed's verdict
    healthy = {**quiet, "decision": {"verdict": "healthy", "reason": "served as replayed"}}
    assert any("the seed's decision is 'healthy', expected 'wiring/loading'" in b
               for b in faults.invariants(fault, healthy, 0, 0.9))
