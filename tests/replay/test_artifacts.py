"""Tests for eagle3lib.replay.artifacts: the training samples decide which shipped tensor is not the trained one."""
from __future__ import annotations

import pytest
import torch

from eagle3demo import faults
from eagle3lib.checks.restoring import tensor_findings
from eagle3lib.replay.artifacts import (RecoveredMap, fails_own_samples, held_out,
                                        most_frequent, recover_map)
from eagle3lib.steps.trained_config import trained_artifacts, trained_config_search
from eagle3lib.replay.verdict import read_recorded_accuracy
from tests.replay.test_as_served import setup_of, world  # noqa: F401  (the demo world and its replay setup)


def test_the_tensor_named_is_the_one_the_writers_convention_clears():
    """Writers store the draft vocabulary ascending: a shipped map out of order is the d2t, a recovered map onto
    other ids is the d2t; an ascending map onto the same ids leaves the lm_head rows."""
    ids = (None,) * 3
    assert RecoveredMap(ids, 100, shipped_ascending=False, same_ids=1.0, agrees=0.0).tensor() == "d2t"
    assert RecoveredMap(ids, 100, shipped_ascending=True, same_ids=0.3, agrees=0.0).tensor() == "d2t"
    assert RecoveredMap(ids, 100, shipped_ascending=True, same_ids=1.0, agrees=0.0).tensor() == "lm_head"
    m = RecoveredMap((12, None, 10), 50, True, 1.0, 0.0)
    assert m.offsets(torch.tensor([10, 10, 10])).tolist() == [12, 10, 8]    # an id never predicted keeps its map


def test_a_map_is_scored_on_positions_it_was_not_fitted_on():
    """A draft whose predictions say nothing of the targets (an untrained draft, samples not its own): the map of
    its own ~100 predictions "restores" them all, held out it restores nothing. A draft trained under another d2t
    (its ids consistently stand for other targets): held out, the recovered map restores it."""
    g = torch.Generator().manual_seed(0)
    shipped = list(range(0, 2000, 2))                         # 1000 draft ids onto even target ids, ascending
    noise_d, noise_t = torch.randint(0, 1000, (110,), generator=g).tolist(), torch.randint(0, 4000, (110,),
                                                                                          generator=g).tolist()
    fitted = most_frequent(noise_d, noise_t, 1000)
    assert sum(fitted[d][0] == t for d, t in zip(noise_d, noise_t)) / 110 > 0.9        # in-sample: memorised
    h = held_out(noise_d, noise_t, [], [], shipped)
    assert h.positions == 110 and h.d2t_hits / 110 < 0.05 and h.rows_hits / 110 < 0.05
    zipf = 1 / torch.arange(1, 201).float()                    # the 200 most used draft ids, as text uses them
    d = torch.multinomial(zipf, 2000, replacement=True, generator=g).tolist()
    perm = torch.randperm(1000, generator=g).tolist()
    t = [shipped[perm[i]] for i in d]                          # each id stands for another of the shipped targets
    h = held_out(d, t, [], [], shipped)
    assert h.d2t_hits / h.positions > 0.9 and h.rows_hits / h.positions > 0.9     # an id seen once: not restored
    assert sum(shipped[i] == x for i, x in zip(d, t)) / len(d) < 0.05                 # as shipped: nothing


def test_failing_its_own_samples_is_measured_against_the_record():
    assert fails_own_samples(0.0, 0.92) and not fails_own_samples(0.85, 0.92)
    assert fails_own_samples(0.1, None) and not fails_own_samples(0.8, None)
    assert not fails_own_samples(float("nan"), 0.92)


@pytest.mark.slow
@pytest.mark.parametrize("name,cause,tensor", [("d2t_permuted", "d2t_mapping", "d2t"),
                                               ("d2t_other_vocab", "d2t_mapping", "d2t"),
                                               ("lm_head_permuted", "draft_tensor_differs", "lm_head"),
                                               ("embedding_swapped", "wrong_embedding", "embed_tokens")])
def test_a_shipped_tensor_not_the_trained_one_is_named_and_its_fix_restores(world, tmp_path, name, cause, tensor):
    fault = next(f for f in faults.singles() if f.name == name)
    setup = setup_of(world, faults.write_fault(fault, tmp_path / "draft"))
    recorded, _ = read_recorded_accuracy(world.training_log)
    found = trained_config_search(setup, world.specforge_data, recorded=recorded)
    assert found.restoring is None and fails_own_samples(found.shipped_acc0, recorded)   # no config field does it
    s = trained_artifacts(setup, world.specforge_data, found)
    (f,) = tensor_findings(s)
    assert (f.cause, f.evidence["tensor"]) == (cause, tensor), s.frame()
    assert f.evidence["acc0_restored"] > recorded - 0.05 and f.evidence["acc0_as_shipped"] < recorded - 0.3


@pytest.mark.slow
def test_the_healthy_draft_needs_no_artifact_search_and_its_map_is_the_shipped_one(world, tmp_path):
    setup = setup_of(world, faults.write_fault(faults.HEALTHY_COPY, tmp_path / "draft"))
    recorded, _ = read_recorded_accuracy(world.training_log)
    found = trained_config_search(setup, world.specforge_data, recorded=recorded)
    assert trained_artifacts(setup, world.specforge_data, found) is None
    m = recover_map(setup, world.specforge_data)
    assert m.agrees > 0.95 and m.same_ids > 0.95 and m.shipped_ascending and m.seen > 50
