"""Each registered check judges a diagnosis once (issue 49): notebook 00's checks run in notebook 01's part, with the
engine the launch names, not a second time without it; and every check runs in a diagnosis that is given every
input the checks read."""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from eagle3lib.checks import registry
from eagle3lib.checks.judge import CHECKS
from eagle3lib.demo import world as demo
from eagle3lib.diagnose.parts import Inputs, run
from tests.diagnose.test_loads_once import SEED_LAUNCH

pytestmark = pytest.mark.slow     # a diagnosis of the demo world: tens of seconds


@pytest.fixture
def judged(monkeypatch):
    """{check name: how many times its function ran}, counting from now on."""
    calls: Counter = Counter()
    for name, c in list(CHECKS.items()):
        def counted(art, opts, _fn=c.judge, _name=name):
            calls[_name] += 1
            return _fn(art, opts)
        monkeypatch.setitem(registry.CHECKS, name, dataclasses.replace(c, judge=counted))
    return calls


@pytest.mark.parametrize("launch", [SEED_LAUNCH, ""], ids=["launch", "no launch"])
def test_each_check_judges_a_diagnosis_once(judged, launch):
    """A user's diagnosis (the demo world's files given as the user's): every check runs, each once."""
    w = demo.ensure_world(progress=False)
    r = run(Inputs(draft=str(w.draft), target=str(w.target), train_data=str(w.seed_data), launch=launch,
                   sglang_version="0.5.6" if launch else "", n=2, drift_samples=2))
    assert not [p for p in r.problems if p.failure], r.problems
    assert set(judged) == set(CHECKS), f"checks a diagnosis never ran: {sorted(set(CHECKS) - set(judged))}"
    assert all(n == 1 for n in judged.values()), {k: n for k, n in judged.items() if n != 1}
    if launch:
        assert "ndt_override" in {v.cause for v in r.diagnosis.alarms}
