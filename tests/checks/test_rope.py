"""Check 3 (RoPE): planted theta / scaling / Transformers-5-only / converter-dropped mismatches are raised."""
from __future__ import annotations

import json
import shutil

import pytest

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.rope import REPLAY_N, check_rope, rope_fields
from eagle3lib.checks.judge import run_checks
from eagle3lib.demo import world as demo
from tests.checks.world import TARGET, draft_raw, statuses, write_draft, write_target


def _f(tmp_path, draft, target=None, training=None):
    return check_rope(read_artifacts(draft=write_draft(tmp_path, draft), target=write_target(tmp_path, target),
                                     training_config=training))


def test_same_rope_is_ruled_out_across_field_locations(tmp_path):
    """Draft legacy rope_theta 1e4 vs a Transformers 5 target's rope_parameters theta 1e4: they agree."""
    t5 = {**TARGET, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    t5.pop("rope_theta")
    assert statuses(_f(tmp_path, draft_raw(), t5), "rope_mismatch") == {"ruled out"}


def test_theta_mismatch_is_suspected_without_replay(tmp_path):
    """Draft theta 1e6 vs target 1e4: suspected, naming both values; replay would decide."""
    f = _f(tmp_path, draft_raw(rope_theta=1e6))
    assert [x.status for x in f] == ["suspected"]
    assert "1e+06" in f[0].summary and f[0].evidence["target"]["theta"] == 10000.0


def test_dropped_rope_scaling_against_the_training_config_is_confirmed(tmp_path):
    """Training config had llama3 scaling, the served draft config lost it (a converter): confirmed."""
    scaled = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    target = {**TARGET, "rope_scaling": scaled}
    f = _f(tmp_path, draft_raw(), target, training=draft_raw(rope_scaling=scaled))
    assert "confirmed" in statuses(f, "rope_mismatch")
    assert any("rope_scaling.rope_type" in x.summary for x in f if x.status == "confirmed")


def test_transformers5_only_draft_is_suspected_for_legacy_readers(tmp_path):
    """Only rope_parameters (theta 1e6) in the draft: a Transformers 4 reader sees the default 10000."""
    raw = draft_raw(rope_theta=None, rope_parameters={"rope_theta": 1e6, "rope_type": "default"})
    assert rope_fields(raw)["theta"] == 1e6 and rope_fields(raw)["legacy_theta"] is None
    target = {**TARGET, "rope_theta": 1e6}
    f = _f(tmp_path, raw, target)
    assert statuses(f, "rope_mismatch") == {"suspected", "ruled out"}
    assert any(x.where == "checks.rope.legacy_keys" and x.status == "suspected" for x in f)


def test_partial_rotary_factor_difference_is_seen(tmp_path):
    """partial_rotary_factor 0.5 in the target only: suspected."""
    f = _f(tmp_path, draft_raw(), {**TARGET, "partial_rotary_factor": 0.5})
    assert statuses(f, "rope_mismatch") == {"suspected"} and "partial_rotary_factor" in f[0].summary


def test_without_target_not_checked(tmp_path):
    f = check_rope(read_artifacts(draft=write_draft(tmp_path, draft_raw())))
    assert [x.status for x in f] == ["not checked"] and "target" in f[0].needs


# --- measured: the training samples replayed under the draft config's RoPE and under the target's (demo world)

@pytest.fixture(scope="module")
def demo_world():
    return demo.ensure_world(progress=False)


def _copy_with(src, dst, **changes):
    """A copy of a model folder whose config.json has `changes` written into it (the weights unchanged)."""
    shutil.copytree(src, dst)
    raw = json.loads((dst / "config.json").read_text())
    raw.update(changes)
    (dst / "config.json").write_text(json.dumps(raw))
    return dst


@pytest.mark.slow
def test_draft_config_theta_the_weights_were_not_trained_with_is_confirmed_by_default(demo_world, tmp_path):
    """Draft config theta 1e6 on weights trained at 1e4, data given, no replay_n: the replay runs and confirms."""
    d = _copy_with(demo_world.draft, tmp_path / "draft", rope_theta=1e6)
    f = check_rope(read_artifacts(draft=d, target=demo_world.target, data=demo_world.seed_data))
    assert [(x.status, x.measured) for x in f] == [("confirmed", True)], f
    ev = f[0].evidence
    assert ev["acc_0_target_rope"] > ev["acc_0_draft_rope"] + 0.05 and ev["replayed_samples"] == REPLAY_N
    assert "replay" in ev["measurement"] and not f[0].needs


@pytest.mark.slow
def test_target_theta_the_draft_was_not_trained_with_is_ruled_out_by_the_replay(demo_world, tmp_path):
    """Target config theta 1e6, the draft keeps the 1e4 it was trained with: its own RoPE replays better, ruled out."""
    t = _copy_with(demo_world.target, tmp_path / "target", rope_parameters={"rope_theta": 1e6, "rope_type": "default"})
    f = check_rope(read_artifacts(draft=demo_world.draft, target=t, data=demo_world.seed_data))
    assert [(x.status, x.measured) for x in f] == [("ruled out", True)], f
    assert f[0].evidence["acc_0_draft_rope"] > f[0].evidence["acc_0_target_rope"] + 0.05


@pytest.mark.slow
def test_run_checks_measures_rope_without_replay_n(demo_world, tmp_path):
    """run_checks at its default replay_n=0 (the diagnosis' notebook-00 part) still decides RoPE by the replay."""
    d = _copy_with(demo_world.draft, tmp_path / "draft", rope_theta=1e6)
    f = run_checks(draft=d, target=demo_world.target, data=demo_world.seed_data, only=("rope",))
    assert [(x.status, x.measured) for x in f] == [("confirmed", True)], f


def test_theta_mismatch_without_data_names_the_data_as_the_missing_input(tmp_path):
    """No training data: the difference stays suspected and `needs` names the data for the replay under both."""
    f = _f(tmp_path, draft_raw(rope_theta=1e6))
    assert f[0].status == "suspected" and "training data" in f[0].needs and not f[0].measured
