"""Tests for eagle3lib.replay.as_served: the demo draft replayed as an engine loads it, aspect by aspect; and
replay.served.as_served_findings: what a served τ decides about each wiring cause."""
from __future__ import annotations

import math

import pytest
from safetensors.torch import load_file

from eagle3demo import deployments
from eagle3lib.demo import world as demo
from eagle3lib.serving.loaded_view import Aspect, EngineView
from eagle3lib.replay.as_served import AsServed, Replayed, replay_as_served
from eagle3lib.replay.layoutsearch import Recapture
from eagle3lib.replay.run import identify_training_layout, load_setup, replay, with_trained_layout
from eagle3lib.replay.served import WIRING_CAUSES, as_served_findings

TRAINED = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")


def view(**values) -> EngineView:
    base = {"layout": TRAINED, "d2t": "checkpoint", "embedding": "target", "lm_head": "own"}
    base.update(values)
    return EngineView("vllm", "0.32.0", "v1", {k: Aspect(k, v, "log" if k == "layout" else "probe", "test")
                                               for k, v in base.items()}, 4)


@pytest.fixture(scope="module")
def world():
    return demo.ensure_world(progress=False)


def setup_of(world, draft):
    s = load_setup(draft, world.target)
    return with_trained_layout(s, identify_training_layout(s, world.specforge_data))


@pytest.mark.slow
def test_each_planted_aspect_replays_lower_and_alone(world, tmp_path):
    healthy = setup_of(world, deployments.write_deployment("healthy", tmp_path / "h"))
    assert healthy.training_layout == TRAINED and healthy.training_layout_source == "identified"
    a = replay_as_served(healthy, world.heldout_data, view(), num_steps=3, n=12)
    assert a.differing == () and [r.label for r in a.replays] == ["as trained"]
    # vLLM 0.32 counts a draft of the token past the answer's end (row metric accepted_past_stop_counted)
    plain = replay(healthy, world.heldout_data, n=12, num_steps=3, progress=False, past_stop=True).summary()
    assert a.get("as trained").tau == pytest.approx(plain["walked_accept_length"])        # where the engine drafts
    assert a.get("as trained").tau_every_position == pytest.approx(plain["simulated_accept_length"])
    assert a.get("as trained").drafts == plain["walked_drafts"] > 12
    assert a.get("as trained").tau > 3.0

    # d2t left at zeros: draft id i served as target id i
    d = replay_as_served(healthy, world.heldout_data, view(d2t="zeros"), num_steps=3, n=12)
    assert d.differing == ("d2t",) and d.get("as served").tau < d.get("as trained").tau - 1.0
    # the shipped random embedding: it was trained with the target's, the engine keeps its own
    emb_dir = deployments.write_deployment("own_embedding", tmp_path / "e")
    own = load_file(str(emb_dir / "model.safetensors"))["embed_tokens.weight"]
    e = replay_as_served(setup_of(world, emb_dir), world.heldout_data, view(embedding="own"), num_steps=3, n=12,
                         own_embed=own, shipped={"embed_tokens.weight"})
    assert e.trained["embedding"] == "target" and any("trained with the target's" in x for x in e.notes)
    assert e.get("as served").tau < e.get("as trained").tau - 1.0
    # two aspects at once: each is replayed alone too
    both = replay_as_served(healthy, world.heldout_data, view(d2t="zeros", lm_head="target_sliced"), num_steps=3,
                            n=8, shipped={"lm_head.weight"})
    assert set(both.differing) == {"d2t", "lm_head"}
    assert {r.label for r in both.replays} == {"as trained", "as served", "d2t as served", "lm_head as served"}


@pytest.mark.slow
def test_served_layout_recaptured_and_rope_measured(world, tmp_path):
    healthy = setup_of(world, deployments.write_deployment("healthy", tmp_path / "h"))
    shifted = ("layer_in.1", "layer_in.3", "layer_in.5", "layer_in.7")
    lay = replay_as_served(healthy, world.heldout_data, view(layout=shifted), num_steps=3, n=8,
                           recapture=Recapture(world.target))
    assert lay.get("as served").layout == shifted and lay.notes == ()
    assert lay.get("as served").tau < lay.get("as trained").tau - 1.0
    zeros = replay_as_served(healthy, world.heldout_data, view(layout=shifted), num_steps=3, n=4)
    assert any("replayed as zeros" in x for x in zeros.notes)
    # the config's RoPE (1e6) against the target's (1e4): the better one is what it was trained with
    rope = setup_of(world, deployments.write_deployment("rope_theta", tmp_path / "r"))
    r = replay_as_served(rope, world.heldout_data, view(), num_steps=3, n=8, trained_rope={"rope_theta": 1e4})
    assert r.trained["rope"] == {"rope_theta": 1e4} and r.differing == ("rope",)
    assert r.get("as served").tau < r.get("as trained").tau
    clean = replay_as_served(healthy, world.heldout_data, view(), num_steps=3, n=8, trained_rope={"rope_theta": 1e6})
    assert clean.trained["rope"] == {} and clean.differing == ()


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


@pytest.mark.slow
def test_a_draft_loaded_with_a_stand_in_head_names_that_cause_unknown(world, tmp_path):
    d = deployments.write_deployment("no_lm_head", tmp_path / "n")
    s = load_setup(d, world.target, missing="fill")
    s = with_trained_layout(s, identify_training_layout(s, world.specforge_data))
    assert [f.cause for f in s.filled] == ["lm_head_missing"]
    a = replay_as_served(s, world.heldout_data, view(lm_head="target_sliced"), num_steps=3, n=8, shipped=set())
    assert a.unknown == ("lm_head_missing",) and a.differing == ()
    healthy = setup_of(world, deployments.write_deployment("healthy", tmp_path / "h"))
    assert replay_as_served(healthy, world.heldout_data, view(), num_steps=3, n=4).unknown == ()


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


@pytest.mark.slow
def test_mis_shaped_projections_are_replayed_as_the_engine_loads_them(world, tmp_path):
    """num_key_value_heads 4 over k/v trained for 2: eagle3lib's loader stands in a seeded random init; a view saying
    the engine zero-pads them (SGLang on the CPU) replays the checkpoint's rows first and zeros past them, says so,
    and gives the model its stand-in back (measured on the real SGLang: served 1.73; padded replay ~1.8, the random
    stand-in ~1.4)."""
    import torch
    from eagle3demo import faults
    fault = next(f for f in faults.singles() if f.name == "num_key_value_heads")
    d = faults.write_fault(fault, tmp_path / "kv", world=world, engine="sglang")
    s = setup_of(world, d)
    assert {f.key.rsplit(".", 2)[-2] for f in s.filled} == {"k_proj", "v_proj"}
    k = s.model.midlayer.self_attn.k_proj.weight
    before = k.detach().clone()
    plain = replay_as_served(s, world.heldout_data, view(), num_steps=3, n=16)
    padded = replay_as_served(s, world.heldout_data, view(mis_shaped="padded"), num_steps=3, n=16)
    assert torch.equal(k.detach(), before)                                   # the stand-in is back
    assert any("k_proj" in n and "zeros past them" in n for n in padded.notes)
    assert not any("zeros past them" in n for n in plain.notes)
    assert padded.get("as trained").tau > plain.get("as trained").tau + 0.2
