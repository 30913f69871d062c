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
from eagle3lib.checks.judge import run_checks

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


def test_demo_world_with_clean_launches_raises_no_row_20_to_33_cause(world):
    """The built demo world (draft, target, training data, replay evidence) with a clean SGLang and a clean vLLM
    launch: every field-causes.md row 20-33 cause is ruled out or not checked (naming its input)."""
    from eagle3lib.causes import FIELD_CAUSES
    new = {FIELD_CAUSES[r] for r in range(20, 34)}
    d, t = world.draft, world.target
    for launch in (f"python -m sglang.launch_server --model-path {t} --speculative-algorithm EAGLE3 "
                   f"--speculative-draft-model-path {d} --speculative-num-steps 15 --speculative-eagle-topk 1 "
                   "--speculative-num-draft-tokens 16",
                   f"vllm serve {t} --speculative-config '{{\"method\": \"eagle3\", \"model\": \"{d}\", "
                   "\"num_speculative_tokens\": 3}'"):
        f = [x for x in run_checks(draft=d, target=t, data=world.specforge_data, launch=launch, replay_n=2)
             if x.cause in new]
        assert {x.cause for x in f} == new
        assert raised(f) == [], findings_frame(raised(f)).to_string()
        assert all(x.needs for x in f if x.status == "not checked")


def test_planted_norm_output_is_confirmed_by_replay_as_a_pre_879_meaning(world, tmp_path):
    """norm_output true written into the demo draft's config (trained as EAGLE-3): the replay predicts better with
    it off, so the flag does not mean what it says -> specforge_norm_output confirmed, as a measurement."""
    from eagle3lib.checks.flags import check_norm_meaning
    d = _edited_draft(world, tmp_path, norm_output=True)
    art = read_artifacts(draft=d, target=world.target, data=world.specforge_data)
    f = {x.cause: x for x in check_norm_meaning(art, replay_n=6)}["specforge_norm_output"]
    assert f.status == "confirmed" and f.measured
    assert f.evidence["acc_1_norm_output_off"] > f.evidence["acc_1_flags_on"] + 0.05


def _drifted_target(world, tmp_path, scale: float):
    """A copy of the demo target whose layers 1..7 moved by `scale` x their weights' std (a fine-tuned target)."""
    import torch
    from safetensors.torch import load_file, save_file
    out = tmp_path / f"target_{scale}"
    shutil.copytree(world.target, out)
    sd = load_file(str(out / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    for k in list(sd):
        if any(f".layers.{i}." in k for i in range(1, 8)) and k.endswith("weight") and sd[k].dim() == 2:
            sd[k] = sd[k] + scale * sd[k].std() * torch.randn(sd[k].shape, generator=g)
    save_file(sd, str(out / "model.safetensors"))
    return out


def test_target_drift_follows_the_accuracy_change_not_the_cosine(world, tmp_path):
    """Issue 25: a target fine-tuned far (the states the draft sees now cost it most of its accuracy) is confirmed
    by the replay on the recaptured states; one fine-tuned a little (cosine below 'same', accuracy unchanged) is
    ruled out by the same replay; neither is called quantization (none is declared)."""
    far = run_checks(draft=world.draft, target=_drifted_target(world, tmp_path, 4.0), data=world.specforge_data,
                     only=("drift",), replay_n=4)
    assert [(x.cause, x.status) for x in far] == [("target_drift", "confirmed")]
    ev = far[0].evidence
    assert ev["acc_0_recaptured_states"] < ev["acc_0_stored_states"] - 0.3 and far[0].measured
    assert ev["measurement"].startswith("replay of the training samples")
    near = run_checks(draft=world.draft, target=_drifted_target(world, tmp_path, 0.3), data=world.specforge_data,
                      only=("drift",), replay_n=4)
    assert [(x.cause, x.status) for x in near] == [("target_drift", "ruled out")]
    ev = near[0].evidence
    assert min(s["cosine"] for s in ev["slots"]) < 0.999 and ev["kind"] != "same"
    assert abs(ev["acc_0_recaptured_states"] - ev["acc_0_stored_states"]) <= 0.05
    assert "quantiz" not in near[0].summary
