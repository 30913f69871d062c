"""The checks on the demo world: its clean draft raises nothing; RoPE / flag mismatches planted into a copy of it
are confirmed by replay (the trained weights unchanged, only config.json edited)."""
from __future__ import annotations

import json
import shutil

import pytest

from eagle3lib.demo import world as demo
from eagle3lib.causes import raised
from eagle3lib.checks.flags import check_flags
from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.rope import check_rope
from eagle3lib.causes import findings_frame
from eagle3lib.checks.run import run_checks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


def _edited_draft(world, tmp_path, **changes):
    d = tmp_path / "draft"
    shutil.copytree(world.draft, d)
    raw = json.loads((d / "config.json").read_text())
    raw.update(changes)
    (d / "config.json").write_text(json.dumps(raw))
    return d


def test_clean_demo_draft_raises_nothing(world):
    """Every check on the demo draft, target and training data (both formats, with replay): no alarm."""
    for data in (world.specforge_data, world.seed_data):
        f = run_checks(draft=world.draft, target=world.target, data=data, replay_n=4)
        assert raised(f) == [], findings_frame(raised(f)).to_string()
        assert {x.status for x in f} <= {"ruled out", "not checked"}
        assert sum(x.status == "ruled out" for x in f) >= 10


def test_planted_rope_theta_is_confirmed_by_replay(world, tmp_path):
    """Config rope_theta 1e6 on weights trained at 1e4: replay under the target's RoPE restores accuracy."""
    d = _edited_draft(world, tmp_path, rope_theta=1e6)
    f = check_rope(read_artifacts(draft=d, target=world.target, data=world.specforge_data), replay_n=6)
    assert [x.status for x in f] == ["confirmed"], f
    ev = f[0].evidence
    assert ev["acc_0_target_rope"] > ev["acc_0_draft_rope"] + 0.05


def test_planted_flag_the_engine_drops_carries_replay_evidence(world, tmp_path):
    """norm_output set in the config on SGLang 0.5.6 (read from ~0.5.12): confirmed, with accuracy on vs off."""
    d = _edited_draft(world, tmp_path, norm_output=True)
    art = read_artifacts(draft=d, target=world.target, data=world.specforge_data)
    f = check_flags(art, engine="sglang", engine_version="0.5.6", replay_n=6)
    assert [x.status for x in f] == ["confirmed"]
    ev = f[0].evidence
    assert ev["acc_1_norm_output_off"] > ev["acc_1_flags_on"] + 0.05   # trained without it: step 1 suffers
    assert ev["acc_0_norm_output_off"] == ev["acc_0_flags_on"]        # step 0 does not feed a state back
