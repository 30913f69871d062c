"""Tests for eagle3lib.replay.counterfactual: the training samples decide which config was trained."""
from __future__ import annotations

import json

import pytest

from eagle3demo import deployments
from eagle3lib.checks.restoring import config_findings
from eagle3lib.engines.draft_edit import edited_copy
from eagle3lib.engines.facts import read_fields
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.variants import CHANGEABLE
from eagle3lib.replay import counterfactual as cf
from eagle3lib.replay.counterfactual import Candidate, Search
from eagle3lib.steps.trained_config import trained_config_search
from tests.replay.test_as_served import setup_of, world  # noqa: F401  (the demo world and its replay setup)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_engine_read_field_has_a_counterfactual(engine):
    """Each field the engine facts say the engine reads is replayed otherwise, or says what decides it instead."""
    fields = read_fields(engine)
    assert {"rope_theta", "rms_norm_eps", "hidden_act", "norm_before_fc"} <= set(fields)
    lacking = [f for f in fields if not ((f in cf.GENERATORS and f in CHANGEABLE) or f in cf.DECIDED_ELSEWHERE)]
    assert not lacking, f"{engine} reads {lacking}: add a generator to replay.counterfactual.GENERATORS"


def test_candidates_perturb_each_field_away_from_the_shipped_value(tiny_cfg_dict):
    cfg = DraftConfig.from_dict(dict(tiny_cfg_dict, norm_before_residual=True, hidden_act="gelu",
                                     rope_scaling={"rope_type": "linear", "factor": 2.0}))
    target = {"theta": 5e5, "scaling": None, "rms_norm_eps": 1e-5, "hidden_act": "silu",
              "max_position_embeddings": 4096}
    got = {(next(iter(c.changes)), repr(next(iter(c.changes.values()))), c.hows[0])
           for c in cf.counterfactuals(cfg, target=target, training={"rope_theta": 1e4})}
    assert ("norm_before_residual", "False", "switch off") in got
    assert ("hidden_act", "'silu'", "EAGLE-3's") in got
    assert ("rope_theta", "500000.0", "the target's") in got
    assert ("rope_scaling", "None", "remove") in got
    assert ("max_position_embeddings", "4096", "the target's") in got
    assert not any(f == "rope_theta" and v == "10000.0" for f, v, _ in got)      # the shipped value is not a candidate
    for c in cf.counterfactuals(cfg, target=target):
        (k, v), = c.changes.items()
        assert v != getattr(cfg, k)


def search_of(shipped: float, *accs, recorded=None, positions=500) -> Search:
    cands = tuple(Candidate({f"norm_before_residual" if i == 0 else "rope_theta": a if i else False},
                            ("switch off" if i == 0 else "the target's",), {}, acc, positions)
                  for i, (a, acc) in enumerate(accs))
    return Search(shipped, positions, recorded, "log", cands, ("norm_before_residual", "rope_theta"))


def test_a_restoring_field_is_confirmed_with_both_accuracies_and_its_fix():
    s = search_of(0.33, (None, 0.92), recorded=0.88)
    (f,) = config_findings(s)
    assert f.cause == "draft_config_differs" and f.status == "confirmed" and f.measured
    assert f.fix == "remove `norm_before_residual` from config.json: 0.33 -> 0.92"
    assert f.evidence["acc0_as_shipped"] == 0.33 and f.evidence["acc0_restored"] == 0.92
    assert s.trained_changes == {"norm_before_residual": False}


def test_a_flag_whose_tensor_the_checkpoint_lacks_explains_the_missing_weight(tiny_cfg_dict):
    """A norm flag the draft was not trained with asks for a norm the checkpoint never had: the restoring change
    (remove the flag) names that tensor, and the finding explains weights_dropped (the absent tensor is the field's
    consequence); a flag that adds no tensor explains nothing."""
    shipped = DraftConfig.from_dict(dict(tiny_cfg_dict, norm_before_fc=True))
    c = Candidate({"norm_before_fc": False}, ("switch off",), {"norm_before_fc": True}, 0.9, 500)
    s = Search(0.3, 500, 0.88, "log", (c,), ("norm_before_fc",), shipped_cfg=shipped)
    assert s.unneeded(c)
    (f,) = config_findings(s)
    assert f.cause == "draft_config_differs" and "weights_dropped" in f.explains
    assert f.evidence["tensors_the_field_adds"] == list(s.unneeded(c))
    plain = DraftConfig.from_dict(dict(tiny_cfg_dict, rope_theta=5e5))
    r = Candidate({"rope_theta": 1e4}, ("the training config's",), {"rope_theta": 5e5}, 0.9, 500)
    s = Search(0.3, 500, 0.88, "log", (r,), ("rope_theta",), shipped_cfg=plain)
    assert s.unneeded(r) == () and "weights_dropped" not in config_findings(s)[0].explains


def test_a_rope_field_that_restores_is_rope_mismatch():
    s = Search(0.81, 560, 0.88, "log", (Candidate({"rope_theta": 1e4}, ("the target's",), {"rope_theta": 1e6},
                                                    0.925, 560),), ("rope_theta",))
    (f,) = config_findings(s)
    assert f.cause == "rope_mismatch" and f.status == "confirmed" and "rope_theta` to 10000" in f.fix


def test_no_gain_beyond_the_margin_is_no_finding_of_a_fault():
    s = search_of(0.90, (None, 0.92), recorded=0.88)          # +0.02: inside the margin
    (f,) = config_findings(s)
    assert f.status == "ruled out" and s.restoring is None and s.trained_changes == {}
    few = search_of(0.50, (None, 0.58), positions=40)          # +0.08 on 40 positions: noise
    assert few.margin(few.candidates[0]) > 0.08 and few.restoring is None
    short = search_of(0.50, (None, 0.52), recorded=0.88)       # short of training, but not a config field
    (f,) = config_findings(short)
    assert f.status == "ruled out" and "not in a config field" in f.summary
    farther = search_of(0.95, (None, 0.30), recorded=0.90)      # a candidate moving away from the record never counts
    assert farther.restoring is None


def test_nothing_to_replay_is_not_checked():
    (f,) = config_findings(Search(float("nan"), 0, None, "", (), ()))
    assert f.status == "not checked" and "training samples" in f.needs


@pytest.mark.slow
def test_the_demo_draft_with_a_flag_it_was_not_trained_with_names_it(world, tmp_path):
    """The issue's case: norm_before_residual switched on in the shipped config (vLLM honours it: τ 3.23 -> 1.39)."""
    healthy = deployments.write_deployment("healthy", tmp_path / "h")
    clean = trained_config_search(setup_of(world, healthy), world.specforge_data, recorded=0.88)
    assert config_findings(clean)[0].status == "ruled out" and clean.restoring is None
    bad = tmp_path / "nbr"
    edited_copy(healthy, bad, config=lambda c: c.update(norm_before_residual=True), fresh=True)
    s = trained_config_search(setup_of(world, bad), world.specforge_data, recorded=0.88)
    (f,) = config_findings(s)
    assert f.cause == "draft_config_differs" and f.status == "confirmed", f.summary
    assert s.trained_changes == {"norm_before_residual": False}
    assert s.shipped_acc0 < 0.5 and s.restoring.acc0 > 0.85
    assert f.fix.startswith("remove `norm_before_residual` from config.json")
    json.dumps(s.to_dict())
