"""Tests for eagle3lib.checks.served_loss: what a served τ decides beside the replay under the setting it ran
(the gap against the tolerance) and beside the draft replayed as trained and as the engine loads it (each wiring
cause, by the replay that explains the served τ)."""
from __future__ import annotations

import math

import pytest

from eagle3lib.checks.served_loss import WIRING_CAUSES, as_served_findings, served_findings, tau_tolerance
from eagle3lib.replay.as_served import AsServed, Replayed
from eagle3lib.replay.served import served_vs_replay
from tests.replay.test_as_served import TRAINED
from tests.replay.test_served import world  # noqa: F401  (a tiny draft, its samples and their tree replay)


def test_a_served_tau_at_the_tree_replay_rules_the_engine_out(world):  # noqa: F811
    setup, samples, rep = world
    c = served_vs_replay(setup, samples, served=rep.accept_length(3, 3, 6), setting=(3, 3, 6), source="log:7",
                         replayed=rep)
    (f,) = served_findings(c)
    assert (f.cause, f.status, f.measured) == ("engine_regression", "ruled out", True)
    assert f.evidence["chain_same_depth"] == pytest.approx(rep.accept_length(3, 1, 4), abs=1e-3)
    assert f.evidence["topk"] == 3 and f.evidence["tolerance"] == pytest.approx(tau_tolerance(c.predicted), abs=1e-3)


def test_the_gap_decides_the_finding(world):  # noqa: F811
    setup, samples, rep = world
    p = rep.accept_length(3, 3, 6)
    tol = tau_tolerance(p)
    above = served_vs_replay(setup, samples, served=min(4.0, p + tol + 0.3), setting=(3, 3, 6), replayed=rep)
    assert [(f.cause, f.status) for f in served_findings(above)] == [("engine_regression", "ruled out"),
                                                               ("measurement_artefact", "suspected")]
    near = served_vs_replay(setup, samples, served=p + 0.5 * tol, setting=(3, 3, 6), replayed=rep)
    assert [f.status for f in served_findings(near)] == ["ruled out"]


def test_a_low_served_accept_length_is_an_alarm(world):  # noqa: F811
    """Served at 1.0 (nothing accepted) against a draft that accepts offline: an unexplained loss, suspected, with
    the gap; engine_regression not checked (no other version served these artifacts)."""
    setup, samples, rep = world
    p = rep.accept_length(3, 3, 6)
    assert p > 1.0 + tau_tolerance(p), "the tiny draft accepts something offline"
    f, reg = served_findings(served_vs_replay(setup, samples, served=1.0, setting=(3, 3, 6), replayed=rep))
    assert (f.cause, f.status) == ("served_loss_unexplained", "suspected")
    assert f.evidence["gap"] == pytest.approx(1.0 - p, abs=1e-3)
    assert (reg.cause, reg.status) == ("engine_regression", "not checked") and "another engine version" in reg.needs


def fake(trained: float, served: float | None = None, alone: dict | None = None, **values) -> AsServed:
    base = {"layout": TRAINED, "d2t": "checkpoint", "embedding": "target", "lm_head": "own"}
    srv = {**base, **values}
    reps = [Replayed("as trained", (), TRAINED, trained, 0.9, 500)]
    diff = tuple(k for k in srv if srv[k] != base[k])
    if diff:
        reps.append(Replayed("as served", diff, tuple(srv["layout"]), served, 0.3, 500))
    for k, t in (alone or {}).items():
        reps.append(Replayed(f"{k} as served", (k,), TRAINED, t, 0.5, 500))
    return AsServed(3, base, srv, {k: "log" for k in srv}, tuple(reps))


def by_cause(found):
    out = {}
    for f in found:
        out.setdefault(f.cause, set()).add(f.status)
    return out


def test_served_equal_to_trained_rules_every_wiring_cause_out_even_against_the_view():
    found = as_served_findings(3.2, "server.log:10", fake(3.3, 1.2, d2t="zeros"), num_layers=8)
    got = by_cause(found)
    assert all(got[c] == {"ruled out"} for c in WIRING_CAUSES) and got["engine_regression"] == {"ruled out"}
    assert all(f.measured for f in found)
    d2t = next(f for f in found if f.cause == "d2t_mapping")
    assert "that view is wrong" in d2t.summary


def test_a_field_the_replays_cannot_run_is_never_ruled_out_by_them():
    """A field the replays cannot run (here a stand-in: rope_mismatch marked unseen, as for a RoPE field the forward
    does not model):
    a served loss nothing the engine loads differently explains leaves rope_mismatch to the RoPE check, never ruled
    out by these replays, and the suspected engine_regression names what was not replayed."""
    from dataclasses import replace as copy
    unseen = {"rope_mismatch": "partial_rotary_factor 0.5 is not replayed"}
    got = as_served_findings(2.27, "metrics", copy(fake(3.2), unseen=unseen), num_layers=8)
    causes = by_cause(got)
    assert "rope_mismatch" not in causes and causes["served_loss_unexplained"] == {"suspected"}
    assert causes["engine_regression"] == {"not checked"}
    assert all(causes[c] == {"ruled out"} for c in WIRING_CAUSES if c != "rope_mismatch")
    reg = next(f for f in got if f.cause == "served_loss_unexplained")
    assert reg.evidence["not_replayed"] == unseen
    plain = by_cause(as_served_findings(2.27, "metrics", fake(3.2), num_layers=8))
    assert plain["rope_mismatch"] == {"ruled out"}


def test_served_equal_to_as_served_confirms_the_aspect_that_drops():
    got = by_cause(as_served_findings(1.3, "metrics", fake(3.3, 1.26, d2t="zeros"), num_layers=8))
    assert got["d2t_mapping"] == {"confirmed"}
    assert all(got[c] == {"ruled out"} for c in WIRING_CAUSES if c != "d2t_mapping")
    assert got["engine_regression"] == {"ruled out"}


def test_a_shifted_layout_is_the_off_by_one_cause_only():
    shifted = ("layer_in.3", "layer_in.5", "layer_in.7", "final_prenorm")
    got = by_cause(as_served_findings(1.5, "x", fake(3.3, 1.55, layout=shifted), num_layers=8))
    assert got["layer_id_off_by_one"] == {"confirmed"}
    assert got["aux_layout_mismatch"] == {"ruled out"} and got["missing_layer_ids"] == {"ruled out"}
    default = by_cause(as_served_findings(1.5, "x", fake(3.3, 1.55, layout=shifted), num_layers=8, ids_read=False))
    assert default["missing_layer_ids"] == {"confirmed"}


def test_two_aspects_are_told_apart_by_their_own_replays():
    a = fake(3.3, 1.2, alone={"d2t": 1.25, "embedding": 3.25}, d2t="zeros", embedding="own")
    got = by_cause(as_served_findings(1.22, "x", a, num_layers=8))
    assert got["d2t_mapping"] == {"confirmed"} and got["wrong_embedding"] == {"ruled out"}


def test_an_unexplained_loss_stays_suspected_and_no_regression_without_another_version():
    got = by_cause(as_served_findings(1.0, "x", fake(3.3, 2.5, d2t="zeros"), num_layers=8))
    assert got["served_loss_unexplained"] == {"suspected"} and got["d2t_mapping"] == {"suspected"}
    assert got["engine_regression"] == {"not checked"}          # it needs the same artifacts on another version
    above = by_cause(as_served_findings(4.0, "x", fake(3.0), num_layers=8))
    assert above["measurement_artefact"] == {"suspected"}
    assert not math.isnan(fake(3.0).get("as trained").tau)


def test_a_cause_whose_tensors_the_checkpoint_lacks_is_never_ruled_out_by_the_stand_in():
    """'as trained' of a draft without its lm_head replays the loader's stand-in: a served τ equal to it measures
    what the engine serves in place of the head (confirmed), never that the head is fine."""
    base = fake(1.25)
    lacking = AsServed(base.num_steps, base.trained, base.served, base.sources, base.replays, (),
                       ("lm_head_missing",))
    found = as_served_findings(1.26, "server.log:3", lacking, num_layers=8)
    got = by_cause(found)
    assert got["lm_head_missing"] == {"confirmed"}
    assert all(got[c] == {"ruled out"} for c in WIRING_CAUSES if c != "lm_head_missing")
    head = next(f for f in found if f.cause == "lm_head_missing")
    assert head.measured and head.aspects == ("present",) and "stand-in" in head.summary
    # the served τ far from the stand-in's replay: still not ruled out, only suspected
    low = by_cause(as_served_findings(0.5, "x", lacking, num_layers=8))
    assert low["lm_head_missing"] == {"suspected"}
    # the same numbers with the head present rule it out: the stand-in rule is what changed the verdict
    assert by_cause(as_served_findings(1.26, "x", base, num_layers=8))["lm_head_missing"] == {"ruled out"}


def with_aspect(aspect: str, trained_value, trained: float, served: float) -> AsServed:
    """Served as trained in every aspect but `aspect`, whose trained value is `trained_value` and served value {}."""
    base = {"layout": TRAINED, "d2t": "checkpoint", "embedding": "target", "lm_head": "own"}
    reps = (Replayed("as trained", (), TRAINED, trained, 0.9, 500),
            Replayed("as served", (aspect,), TRAINED, served, 0.8, 500))
    return AsServed(3, {**base, aspect: trained_value}, {**base, aspect: {}}, {k: "log" for k in base}, reps)


def test_the_nearer_replay_explains_the_served_tau_by_its_margin():
    """The rope_theta deployment on the real vLLM: served 2.71, as the engine loads it 2.83, as trained 3.07. The
    served τ is 0.12 from the as-served replay and 0.36 from the trained one: RoPE is confirmed, not a conflict."""
    found = as_served_findings(2.71, "metrics.txt", with_aspect("rope", {"rope_theta": 1e4}, 3.07, 2.83),
                               num_layers=8)
    got = by_cause(found)
    assert got["rope_mismatch"] == {"confirmed"} and got["engine_regression"] == {"ruled out"}
    rope = next(f for f in found if f.cause == "rope_mismatch")
    assert rope.evidence["distance_as_served"] == pytest.approx(0.12, abs=1e-6)
    assert rope.evidence["distance_as_trained"] == pytest.approx(0.36, abs=1e-6)
    assert rope.evidence["margin"] == pytest.approx(0.24, abs=1e-6)
    # two replays too close to tell apart: the served τ near both says the engine serves it as trained
    close = with_aspect("rope", {"rope_theta": 1e4}, 3.07, 3.02)
    assert by_cause(as_served_findings(3.01, "x", close, num_layers=8))["rope_mismatch"] == {"ruled out"}


def test_a_config_aspect_names_the_field_the_training_samples_chose():
    """'as trained' with the counterfactual's config: a norm flag is draft_config_differs, a RoPE field rope_mismatch."""
    found = as_served_findings(1.39, "metrics.txt", with_aspect("config", {"norm_before_residual": False}, 3.2, 1.4),
                               num_layers=8)
    got = by_cause(found)
    assert got["draft_config_differs"] == {"confirmed"} and got["rope_mismatch"] == {"ruled out"}
    assert "norm_before_residual False" in next(f.fix for f in found if f.cause == "draft_config_differs")
    got = by_cause(as_served_findings(1.39, "m", with_aspect("config", {"rope_theta": 1e4}, 3.2, 1.4), num_layers=8))
    assert got["rope_mismatch"] == {"confirmed"} and got["draft_config_differs"] == {"ruled out"}
