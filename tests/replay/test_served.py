"""A served τ against the replay under the served setting: the tree is replayed as a tree (never as its chain),
and numbers that are not an accept length of the setting are refused (what the gap decides:
tests/checks/test_served_loss.py)."""
from __future__ import annotations

import pytest

from eagle3lib.errors import DataError
from eagle3lib.replay.served import served_vs_replay
from eagle3lib.replay.tree_acceptance import replay_tree
from tests.replay.test_run import make_samples, make_setup


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    setup = make_setup(tmp_path_factory.mktemp("served"))
    samples, _, _ = make_samples(setup, n=3)
    return setup, samples, replay_tree(setup, samples, [(3, 3, 6)], progress=False)


def test_a_tree_is_compared_with_the_tree_replay_and_the_chain_is_kept_beside_it(world):
    setup, samples, rep = world
    tree, chain = rep.accept_length(3, 3, 6), rep.accept_length(3, 1, 4)
    c = served_vs_replay(setup, samples, served=tree, setting=(3, 3, 6), source="log:7", progress=False)
    assert c.kind == "tree" and c.predicted == pytest.approx(tree) and c.chain == pytest.approx(chain)
    assert c.positions == rep.positions > 10 and c.gap == pytest.approx(0.0)
    assert list(c.frame()["what"]) == ["served", "replay, same tree", "replay, chain of the same depth"]
    assert c.evidence()["chain_same_depth"] == pytest.approx(chain, abs=1e-3) and c.evidence()["topk"] == 3


def test_a_chain_setting_predicts_the_chain(world):
    setup, samples, rep = world
    c = served_vs_replay(setup, samples, served=1.0, setting=(3, 1, 4), progress=False, replayed=rep)
    assert c.kind == "chain" and c.predicted == c.chain == pytest.approx(rep.accept_length(3, 1, 4))
    assert len(c.frame()) == 2


@pytest.mark.parametrize("served", [0.3, 5.5, True, "2.1"])
def test_a_number_that_is_not_an_accept_length_of_the_setting_is_refused(world, served):
    setup, samples, rep = world
    with pytest.raises(DataError, match="served accept length from server.log"):
        served_vs_replay(setup, samples, served=served, setting=(3, 3, 6), source="server.log", replayed=rep)
