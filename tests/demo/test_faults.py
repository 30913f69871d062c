"""Tests for eagle3lib.demo.faults: the generated fault matrix, each fault diagnosed by `python -m eagle3lib.diagnose`
(in-process: the same `diagnose.run`), with the matrix's invariants checked on every case.

`make test` runs a sample (`SAMPLE`); `EAGLE3LIB_FAULTS=all` runs every single fault and every pair."""
from __future__ import annotations

import json
import os

import pytest

from eagle3lib.demo import faults
from eagle3lib.demo import world as demo
from eagle3lib.diagnose.run import Inputs, run
from eagle3lib.engines.facts import read_fields

SAMPLE = ("norm_before_residual", "rms_norm_eps")
ALL = os.environ.get("EAGLE3LIB_FAULTS") == "all"
CASES = {f.name: f for f in faults.singles() + (faults.pairs() if ALL else ())}


def test_every_engine_read_field_is_perturbed_and_pairs_cover_every_two():
    names = {f.name for f in faults.singles()}
    for engine in faults.ENGINES:
        assert set(read_fields(engine)) <= names, f"{engine} reads a field the matrix never perturbs"
    n = sum(1 for f in faults.singles() if f.config is not None)
    assert len(faults.pairs()) == n * (n - 1) // 2
    assert all(len(p.names) == 2 for p in faults.pairs())


def test_a_fault_changes_only_what_it_says(tmp_path):
    healthy = json.loads(faults.write_fault(faults.Fault("none", "nothing", ()), tmp_path / "h").joinpath(
        "config.json").read_text())
    for f in faults.singles()[:3]:
        got = json.loads(faults.write_fault(f, tmp_path / f.name).joinpath("config.json").read_text())
        changed = {k for k in set(got) | set(healthy) if got.get(k) != healthy.get(k)}
        assert changed <= {f.name, "eagle_config"} and changed, (f.name, changed)


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


def diagnosed(world, draft) -> tuple[dict, int]:
    r = run(Inputs(draft=str(draft), target=str(world.target), train_data=str(world.specforge_data),
                   training_log=str(world.training_log), n=16, drift_samples=0), progress=False)
    return r.diagnosis.to_dict(), r.exit_code


@pytest.fixture(scope="module")
def healthy_acc0(world, tmp_path_factory):
    d, code = diagnosed(world, faults.write_fault(faults.Fault("none", "nothing", ()),
                                                  tmp_path_factory.mktemp("h") / "draft"))
    assert code != 1 and not [v for v in d["verdicts"] if v["status"] == "confirmed"], d["headline"]
    cf = faults.counterfactual_finding(d)
    assert cf["status"] == "ruled out"
    return cf["evidence"]["acc0_as_shipped"]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CASES if ALL or n in SAMPLE])
def test_the_generated_fault_is_named_and_nothing_else_alarms(world, tmp_path, healthy_acc0, name):
    fault = CASES[name]
    d, code = diagnosed(world, faults.write_fault(fault, tmp_path / "draft"))
    bad = faults.invariants(fault, d, code, healthy_acc0)
    assert not bad, f"{name}: {bad}"
