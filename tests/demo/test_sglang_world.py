"""The seed's story as the real SGLang served it (data/demo_sglang, eagle3demo.sglang_world), diagnosed from the
files the engine wrote, as a user's deployment is: the healthy deployment is "no fault found" with the served τ
predicted within 5% by the replay as SGLang loads the draft; the seed deployment confirms the seed's two causes
(SGLang's ndt rewrite, the missing embedding slot) from what the running engine reported, and nothing else.
Offline: the shipped folders are read without SGLang (a stale one would need it: `ensure` says so). Slow: two
diagnoses (~30-60 s each on 2 cores)."""
from __future__ import annotations

import pytest

from eagle3demo import sglang_world
from eagle3lib.diagnose.parts import Inputs, run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def diagnosed():
    cache = {}

    def get(name):
        if name not in cache:
            d = sglang_world.ensure(name)
            cache[name] = (d, run(Inputs(**d.diagnose_args(), n=16)))
        return cache[name]
    return get


def statuses(r) -> dict[str, str]:
    return {v.cause: v.status for v in r.diagnosis.verdicts}


def measured(r, cause: str) -> list:
    return [f for part in r.findings.values() for f in part if f.cause == cause and f.measured]


def test_the_shipped_deployments_read_without_sglang(monkeypatch):
    """The shipped folders are current: ensure() serves nothing (it would need SGLang), its paths lie in this
    checkout, and the record says what SGLang ran (the seed's ndt 16 became 2)."""
    monkeypatch.setattr(sglang_world.sglang_env, "unavailable_reason", lambda: "no SGLang in this test")
    seed, healthy = sglang_world.ensure("seed"), sglang_world.ensure("healthy")
    assert seed.effective["speculative_num_draft_tokens"] == 2 and "num-draft-tokens 16" in seed.launch_command
    assert healthy.effective["speculative_num_draft_tokens"] == 4 and healthy.ok and seed.ok
    assert str(sglang_world.root()) in seed.dump and seed.causes == ("ndt_override", "layer_id_off_by_one")


def test_the_healthy_deployment_is_no_fault_found_its_tau_predicted_within_5_percent(diagnosed):
    d, r = diagnosed("healthy")
    assert r.diagnosis.healthy, r.diagnosis.text()
    ev = [f.evidence for f in measured(r, "engine_regression")]
    counted = [e for e in ev if "spec_verify_ct" in str(e.get("served_source", ""))]
    assert counted, ev                                  # SGLang's own count over the replayed answers decided it
    e = counted[0]
    assert e["served"] == pytest.approx(d.accept_length, abs=1e-3)
    assert abs(e["tau_as_served"] - d.accept_length) <= 0.05 * d.accept_length, e


def test_the_seed_deployment_confirms_the_seed_s_two_causes_from_the_running_engine(diagnosed):
    d, r = diagnosed("seed")
    st = statuses(r)
    confirmed = {c for c, s in st.items() if s == "confirmed"}
    assert confirmed == set(d.causes), r.diagnosis.text()
    ndt = [f for part in r.findings.values() for f in part if f.cause == "ndt_override" and f.status == "confirmed"]
    assert any("server's own report" in f.summary for f in ndt)       # /server_info, not the table alone
    lay = [f for part in r.findings.values() for f in part if f.cause == "layer_id_off_by_one" and
           f.status == "confirmed" and f.evidence.get("source") in ("dump", "probe")]
    assert lay, "the layout was decided by what SGLang fed and loaded"
