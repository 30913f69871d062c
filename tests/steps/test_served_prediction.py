"""served_vs_predicted: each served run is replayed under its own setting (a tree as a tree), in the layout the
server feeds; missing inputs give `not checked` naming them; the demo world compares its engine's runs."""
from __future__ import annotations

import pytest

from eagle3lib.checks.served_loss import tau_tolerance
from eagle3lib.replay.tree_acceptance import replay_tree
from eagle3lib.samples.writers import write_seed_dataset
from eagle3lib.steps import discovery, served_prediction as sp
from eagle3lib.steps.case import case_of
from eagle3lib.steps.part import Inputs
from eagle3lib.engine_kit.records import RunRecord
from tests.replay.test_run import make_samples, make_setup

TREE_LOG = """[2026-02-03 10:05:11] server_args=ServerArgs(model_path='/m', speculative_algorithm='EAGLE3', \
speculative_draft_model_path='/d', speculative_num_steps=3, speculative_eagle_topk=3, speculative_num_draft_tokens=6)
[2026-02-03 10:09:06 TP0] Decode batch, #running-req: 1, #token: 475, token usage: 0.00, accept len: {tau:.2f}, \
accept rate: 0.30, cuda graph: True, gen throughput (token/s): 56.50, #queue-req: 0,
"""


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    root = tmp_path_factory.mktemp("served_user")
    setup = make_setup(root)
    samples, _, _ = make_samples(setup, n=3)
    write_seed_dataset(root / "data", samples)
    return root, setup, samples


def test_setting_of_prefers_the_run_record_and_falls_back_to_the_resolution():
    d = discovery.discover("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
                           "--speculative-draft-model-path d", "0.5.23")
    assert sp.setting_of(RunRecord(engine="sglang", num_steps=2, topk=1), d) == (2, 1, 3)
    assert sp.setting_of(RunRecord(engine="sglang", num_steps=4, topk=2, num_draft_tokens=7), d) == (4, 2, 7)
    eff = d.resolution.effective
    assert sp.setting_of(RunRecord(engine="sglang"), d) == (eff["speculative_num_steps"],
                                                             eff["speculative_eagle_topk"],
                                                             eff["speculative_num_draft_tokens"])
    assert sp.setting_of(RunRecord(engine="sglang"), None) is None


def test_the_launch_setting_is_its_engines_and_a_chain_is_replayed_as_the_engine_loads_it():
    """Discovery.setting asks the launch's home: a vLLM launch drafts a chain of K (K, 1, K + 1), replayed as the
    engine loads it; an SGLang tree (topk > 1) is not a chain; an unreadable --speculative-config decides nothing."""
    vl = discovery.discover("vllm serve m --speculative-config '{\"method\": \"eagle3\", \"model\": \"d\", "
                            "\"num_speculative_tokens\": 5}'")
    assert vl.setting == (5, 1, 6) and sp.setting_of(RunRecord(engine="vllm"), vl) == (5, 1, 6)
    assert sp.chain_served(vl)
    tree = discovery.discover("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
                              "--speculative-draft-model-path d --speculative-num-steps 3 --speculative-eagle-topk 4 "
                              "--speculative-num-draft-tokens 8", "0.5.23")
    assert tree.setting == (3, 4, 8) and not sp.chain_served(tree)
    bad = discovery.discover("vllm serve m --speculative-config '{not json'")
    assert bad.setting is None and not sp.chain_served(bad) and sp.setting_of(RunRecord(engine="vllm"), bad) is None


def test_missing_inputs_are_not_checked_and_named(user):
    root, _, _ = user
    d = discovery.discover("", "")
    f, gen = sp.served_vs_predicted(d, case_of(Inputs(draft=str(root / "draft")))).findings()
    assert f.status == "not checked" and "served_log_path" in f.needs and "(train_data)" in f.needs
    # what the served prompts decide is not checked either, naming the served τ and the served traffic
    assert (gen.cause, gen.status, gen.aspects) == ("generalization_gap", "not checked", ("served traffic",))
    assert "--served-log" in gen.needs and "--served-traffic" in gen.needs


def test_a_tree_served_log_is_compared_under_its_tree(user, tmp_path):
    root, setup, samples = user
    rep = replay_tree(setup, samples, [(3, 3, 6)], progress=False)
    tree = rep.accept_length(3, 3, 6)
    log = tmp_path / "server.log"
    log.write_text(TREE_LOG.format(tau=tree))
    d = discovery.discover("python -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
                           "--speculative-draft-model-path d --speculative-num-steps 3 --speculative-eagle-topk 3 "
                           "--speculative-num-draft-tokens 6", "0.5.23", str(root / "target"), str(root / "draft"))
    res = sp.served_vs_predicted(d, case_of(Inputs(draft=str(root / "draft"), target=str(root / "target"),
                                                   train_data=str(root / "data"), served_log=str(log))),
                                 progress=False)
    assert res.problems == () and len(res.comparisons) == 1
    (c,) = res.comparisons
    assert c.setting == (3, 3, 6) and c.predicted == pytest.approx(tree, abs=1e-6)
    assert c.chain == pytest.approx(rep.accept_length(3, 1, 4), abs=1e-6)
    assert "server.log" in c.source
    assert [(f.cause, f.status) for f in res.findings()] == [("engine_regression", "ruled out"),
                                                              ("generalization_gap", "ruled out")]
    gen = res.findings()[1]             # the served τ is what the training samples predict: the prompts cost nothing
    assert gen.aspects == ("served traffic",) and gen.evidence["replayed_on"] == "the training samples"
    assert res.frame()["what"].tolist()[-1] == "replay, chain of the same depth"


@pytest.mark.slow
def test_demo_world_served_runs_match_the_replay_in_the_served_layout():
    """The demo's server (the seed's capture, the seed launch's chain K=1) accepts what the replay predicts in the
    layout its serving dump shows: the serving path is not the fault there, the layout is."""
    case = case_of(Inputs())
    d = discovery.discover(case.launch_command, case.sglang_version, server_log=case.server_log)
    res = sp.served_vs_predicted(d, case, progress=False)
    (c,) = res.comparisons
    assert c.setting == (1, 1, 2) and "zeros" in c.layout
    assert abs(c.gap) <= tau_tolerance(c.predicted) and [f.status for f in res.findings()] == ["ruled out", "ruled out"]
    assert [f.cause for f in res.findings()] == ["engine_regression", "generalization_gap"]   # the served prompts too


@pytest.mark.parametrize("flag, expected", [("--dtype bfloat16", "bfloat16"), ("--dtype float16", "float16"),
                                            ("--dtype float32", "auto"), ("", "auto")])
def test_the_as_served_replay_runs_in_the_launchs_half_dtype(flag, expected):
    """A vLLM launch served in bfloat16 (the mla world on an AMX host, engines.host) is replayed in bfloat16;
    float32 or no --dtype leaves the checkpoint's own dtype."""
    d = discovery.discover(f"vllm serve data/demo/target {flag} --speculative-config "
                           "'{\"method\": \"eagle3\", \"model\": \"d\", \"num_speculative_tokens\": 3}'", "")
    assert sp.served_dtype(d) == expected
