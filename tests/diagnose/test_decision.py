"""Tests for eagle3lib.diagnose.decision: the seed's decision from the findings the checks already made (each built
here as its check writes it), its verdict with the numbers that decided it, and where it is shown first."""
from __future__ import annotations

import json

from eagle3lib.causes import Finding, not_checked
from eagle3lib.checks.engine_said import WHERE as ENGINE_SAID
from eagle3lib.checks.replayed_layout import HELDOUT, HELDOUT_ASPECT
from eagle3lib.diagnose.combine import diagnose
from eagle3lib.diagnose.decision import decision_html, decision_lines, decision_markdown, seed_decision, with_decision
from eagle3lib.replay.counterfactual import WHERE as COUNTERFACTUAL
from eagle3lib.checks.generalization import not_served, traffic_finding, without_traffic
from eagle3lib.checks.served_loss import AS_SERVED
from eagle3lib.report.findings import FINDINGS_KEY
from eagle3lib.report.index import index_html


def shipped(acc0, recorded=0.92, status="ruled out"):
    """The counterfactual search's finding, as replay.counterfactual writes it."""
    return Finding("draft_config_differs", status, "searched", {"acc0_as_shipped": acc0, "recorded": recorded,
                                                                "recorded_from": "log.jsonl:3 val_acc_step0"},
                   COUNTERFACTUAL, measured=True)


def held(train=0.92, heldout=0.89, by_k=None, status="ruled out"):
    ev = {"acc_0_training": train, "heldout_acc0": {"held-out": heldout},
          "tau_by_k_training": by_k or {"1": 1.85, "2": 2.6, "3": 3.2}}
    return Finding("generalization_gap", status, "training vs held-out", ev, HELDOUT, measured=True,
                   aspects=HELDOUT_ASPECT)


def as_served(served, trained, as_served_=None, k=3, on="the served traffic", per_served=()):
    ev = {"served": served, "tau_as_trained": trained, "tau_as_served": as_served_ or trained, "num_steps": k,
          "tolerance": max(0.2, 0.1 * trained), "served_source": "server.log:12", "replayed_on": on,
          "acc0_as_trained": 0.9, "per_position_as_trained": [0.85, 0.75, 0.65][:k],
          "per_position_served": list(per_served)}
    return Finding("engine_regression", "ruled out", "served vs replay", ev, AS_SERVED, measured=True)


def test_a_draft_failing_its_own_samples_is_wiring_with_what_restores_it():
    restored = Finding("d2t_mapping", "confirmed", "d2t recovered", {"acc0_restored": 0.91, "tensor": "d2t"},
                       "replay.artifacts", fix="write the recovered d2t", measured=True)
    d = seed_decision([shipped(0.0), held(0.0, 0.0, status="not checked"), restored])
    assert d.verdict == "wiring/loading" and d.numbers["fails_own_samples"]
    assert "replay at 0.00 (recorded 0.92)" in d.reason and "what restores them (d2t_mapping): write" in d.reason
    rows = {r.what: r for r in d.rows}
    assert rows["training samples: recorded"].value == 0.92
    assert rows["training samples: restored"].value == 0.91 and "d2t_mapping" in rows["training samples: restored"].note
    assert d.causes == ("d2t_mapping",)


def test_without_a_recorded_accuracy_the_floor_decides():
    assert seed_decision([shipped(0.1, recorded=None)]).verdict == "wiring/loading"
    assert seed_decision([shipped(0.8, recorded=None)]).verdict.startswith("not checked")


def test_a_healthy_deployment_served_as_replayed_is_healthy_with_every_number():
    fs = [shipped(0.92), held(), as_served(3.21, 3.20),
          traffic_finding(0.92, "as shipped", 0.89, 862, served=3.21, predicted=3.20, tolerance=0.32, answers=32)]
    d = seed_decision(fs)
    assert d.verdict == "healthy", d.reason
    rows = {r.what: r.value for r in d.rows}
    assert rows["served traffic"] == 0.89 and rows["served τ"] == 3.21 and rows["predicted τ (replay)"] == 3.20
    assert rows["held-out samples: held-out"] == 0.89


def test_high_on_training_low_on_the_served_traffic_is_a_generalization_gap():
    """The issue's first case: trained on kitchen, served nature: τ 1.29, the replay on that traffic 1.19; the held-out
    kitchen samples pass (0.89) and must not decide it."""
    gap = traffic_finding(0.91, "as shipped", 0.42, 700, served=1.29, predicted=1.19, tolerance=0.2,
                          distance={"token_overlap": 0.6, "bigram_overlap": 0.2, "opening_match": 1.0,
                                    "header_match": 1.0, "prompt_len_served": 12, "prompt_len_training": 14,
                                    "answer_len_served": 20, "answer_len_training": 30}, answers=16)
    d = seed_decision([shipped(0.91), held(0.91, 0.89), as_served(1.29, 1.19), gap])
    assert d.verdict == "generalization gap", d.reason
    assert "0.42 on the served traffic" in d.reason and "bigrams 20%" in d.reason
    assert d.causes == ("generalization_gap",)


def test_a_low_served_tau_without_the_traffic_names_the_traffic_as_the_input_that_decides():
    d = seed_decision([shipped(0.91), held(0.91, 0.89), as_served(1.29, 3.2, on="the training samples"),
                       without_traffic(1.29, 3.2, 0.32, "the training samples")])
    assert d.verdict == "not checked: the served traffic (served_traffic / --served-traffic) not given", d.reason
    assert "1.29" in d.reason and "3.20" in d.reason


def test_the_engine_losing_tau_on_the_very_traffic_it_served_is_wiring():
    d = seed_decision([shipped(0.91), held(), as_served(1.4, 3.1),
                       traffic_finding(0.91, "as shipped", 0.89, 800, served=1.4, predicted=3.1, tolerance=0.31)])
    assert d.verdict == "wiring/loading" and "otherwise than replayed" in d.reason


def test_a_confirmed_wiring_cause_or_a_refusal_is_wiring():
    wired = Finding("draft_config_differs", "confirmed", "norm_before_residual set", {}, AS_SERVED, measured=True)
    d = seed_decision([shipped(0.92), held(), as_served(1.37, 3.15, 1.27), wired])
    assert d.verdict == "wiring/loading" and "draft_config_differs" in d.reason and "1.27" in d.reason
    refused = Finding("engine_cannot_run", "confirmed", "vllm dies: Unsupported activation", {"error": "ValueError"},
                      ENGINE_SAID, measured=True)
    assert seed_decision([shipped(0.92), refused]).verdict == "wiring/loading"


def test_k1_is_a_ceiling_with_the_cap_the_per_position_acceptance_and_tau_at_other_k():
    d = seed_decision([shipped(0.92), held(), as_served(1.84, 1.86, k=1, per_served=[0.84])])
    assert d.verdict == "ceiling", d.reason
    assert "caps τ at 2 (K = 1" in d.reason and "0.84 served against 0.85 replayed" in d.reason
    assert "3.20 at K = 3" in d.reason and d.numbers["cap"] == 2
    # K = 3 served as replayed, with nothing deeper replayed: healthy, not a ceiling
    assert seed_decision([shipped(0.92), held(), as_served(3.2, 3.2, k=3)]).verdict == "healthy"


def test_missing_inputs_are_named():
    d = seed_decision([not_checked("draft_config_differs", COUNTERFACTUAL, "training samples the draft can be "
                                   "replayed on")])
    assert d.verdict == "not checked: the training samples (train_data / --train-data) not given"
    assert all(r.value is None for r in d.rows)
    d = seed_decision([shipped(0.92), held(), not_served()])
    assert d.verdict == "not checked: the served τ (served_log / --served-log) not given"
    assert "not checked: the served traffic" in {r.what: r.note for r in d.rows}["served traffic"]


def test_the_decision_renders_and_opens_the_diagnosis_and_the_index():
    fs = [shipped(0.0), held(0.0, 0.0, status="not checked")]
    d = seed_decision(fs)
    lines = decision_lines(d)
    assert lines[0] == "THE SEED'S DECISION: WIRING/LOADING" and any("0.92" in ln for ln in lines)
    assert "**The seed's decision: wiring/loading.**" in decision_markdown(d)
    assert "<h2>The seed's decision</h2>" in decision_html(d)
    record = diagnose(fs).to_dict()
    assert record["decision"]["verdict"] == "wiring/loading" and json.dumps(record)
    row = {"notebook": "02_replay", "status": "ok", "findings": {FINDINGS_KEY: [f.to_dict() for f in fs]}}
    page = index_html([row], {})
    assert page.index("<h2>The answer</h2>") < page.index("The seed's decision") < page.index("wiring/loading") \
        < page.index("Notebooks of this run")


def test_a_launch_that_caps_tau_is_a_ceiling_even_before_anything_is_served():
    k1 = Finding("ndt_override", "ruled out", "vLLM runs K as given", {"engine": "vllm", "num_speculative_tokens": 1},
                 "serving settings")
    d = seed_decision([shipped(0.92), held(), k1])
    assert d.verdict == "ceiling" and "caps τ at 2 (K = 1" in d.reason and "1.85 at K = 1" in d.reason
    rewrite = Finding("ndt_override", "confirmed", "SGLang rewrites num_draft_tokens 16 -> 2",
                      {"num_draft_tokens_requested": 16, "num_draft_tokens_effective": 2}, "serving settings")
    d = seed_decision([shipped(0.92), held(), rewrite])
    assert d.verdict == "ceiling" and d.causes == ("ndt_override",) and "rewrites" in d.reason
    k3 = Finding("ndt_override", "ruled out", "vLLM runs K as given", {"engine": "vllm", "num_speculative_tokens": 3},
                 "serving settings")
    assert seed_decision([shipped(0.92), held(), k3]).verdict.startswith("not checked: the served τ")


def test_a_cause_the_diagnosis_does_not_confirm_confirms_nothing_here():
    """The decision reads each cause's combined status: a confirmed finding another measurement overrules (or a
    conflict) is no wiring cause."""
    wired = Finding("aux_layout_mismatch", "confirmed", "engine rules predict another layout", {}, "checks.layer_ids")
    fs = [shipped(0.92), held(), as_served(3.2, 3.2), wired]
    assert seed_decision(fs).verdict == "wiring/loading"
    assert seed_decision(fs, {"aux_layout_mismatch": "ruled out"}).verdict == "healthy"
    assert seed_decision(fs, {"aux_layout_mismatch": "conflict"}).verdict == "healthy"


def test_the_terminal_text_opens_with_the_decision_after_what_could_not_be_read():
    d = seed_decision([shipped(0.0)])
    text = "headline\n\nPROBLEMS (1)\n  --server-log\n\nCONFIRMED (1)\n  d2t_mapping"
    assert with_decision(text, d).startswith("THE SEED'S DECISION: WIRING/LOADING")
    out = with_decision(text, d, problems=1)
    assert out.startswith("headline\n\nPROBLEMS (1)") and out.index("THE SEED'S DECISION") < out.index("CONFIRMED")
