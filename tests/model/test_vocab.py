"""Vocab maps: build like SpecForge, and every planted fault is named."""
from __future__ import annotations

import pytest
import torch

from eagle3lib.errors import VocabError
from eagle3lib.model.vocab import (absolute_to_offsets, build_vocab_map, check_vocab, coverage, draft_to_target,
    t2d_from_d2t, validate_vocab, vocab_report)

V, VD = 50, 10


@pytest.fixture
def maps():
    counts = torch.zeros(V, dtype=torch.long)
    ids = torch.tensor([3, 7, 8, 11, 20, 21, 30, 33, 41, 49, 5, 6])
    counts[ids] = torch.arange(100, 100 - len(ids), -1)   # 5 and 6 are the least frequent -> dropped
    return counts, *build_vocab_map(counts, VD)


def failed(findings):
    return {f.check for f in findings if not f.ok}


def test_build_sorted_offsets(maps):
    """Top-N kept, sorted ascending, stored as offsets; nonzero(t2d) == d2t + arange."""
    counts, d2t, t2d = maps
    assert draft_to_target(d2t).tolist() == [3, 7, 8, 11, 20, 21, 30, 33, 41, 49]
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool and t2d.sum() == VD
    assert torch.equal(t2d.nonzero().flatten(), draft_to_target(d2t))
    assert failed(check_vocab(d2t, t2d, V, VD)) == set()
    assert torch.equal(t2d_from_d2t(d2t, V), t2d)


def test_coverage(maps):
    """Coverage counts the share of loss-masked tokens inside the draft vocab."""
    counts, d2t, _ = maps
    assert coverage(counts, d2t) == pytest.approx(1 - (counts[5] + counts[6]).item() / counts.sum().item())


@pytest.mark.parametrize("fault,expected", [
    (lambda d, t: (d[:-1], t), "d2t shape"),
    (lambda d, t: (d.int(), t), "d2t dtype"),
    (lambda d, t: (torch.zeros_like(d), t), "d2t not all zeros"),
    (lambda d, t: (torch.arange(VD), t), "d2t not arange"),
    (lambda d, t: (draft_to_target(d) + 0, t), "d2t holds offsets, not absolute ids"),
    (lambda d, t: (d + 40, t), "mapped ids in range"),
    (lambda d, t: (d, t.roll(1)), "t2d consistent with d2t"),
    (lambda d, t: (d, t[:-1]), "t2d shape"),
    (lambda d, t: (None, t), "d2t present"),
])
def test_planted_faults_are_named(maps, fault, expected):
    """Each planted fault fails exactly the check that names it, and validate_vocab raises."""
    _, d2t, t2d = maps
    d, t = fault(d2t.clone(), t2d.clone())
    assert expected in failed(check_vocab(d, t, V, VD))
    with pytest.raises(VocabError):
        validate_vocab(d, t, V, VD)


def test_absolute_detection_and_conversion(maps):
    """Absolute ids stored as d2t are detected; converting to offsets fixes them."""
    _, d2t, t2d = maps
    absolute = draft_to_target(d2t)
    assert "d2t holds offsets, not absolute ids" in failed(check_vocab(absolute, t2d, V, VD))
    assert torch.equal(absolute_to_offsets(absolute), d2t)


def test_frequency_order_is_warning_only(maps):
    """A frequency-ordered (ModelOpt) map is valid for serving: a warning, not an error."""
    _, d2t, _ = maps
    perm = draft_to_target(d2t)[torch.tensor([9, 0, 5, 1, 2, 3, 4, 6, 7, 8])]
    f = check_vocab(absolute_to_offsets(perm), None, V, VD)
    bad = [x for x in f if not x.ok]
    assert [x.check for x in bad] == ["mapped ids ascending"] and bad[0].severity == "warning"
    assert list(vocab_report(f).columns) == ["check", "ok", "severity", "detail"]


def test_full_vocab_without_d2t_is_fine():
    """A full-vocab draft without d2t (EAGLE Vicuna) is not an error."""
    assert failed(check_vocab(None, None, V, V)) == set()
