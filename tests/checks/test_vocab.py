"""The vocab-map check: d2t planted as absolute ids / missing / arange is confirmed; a clean offset map is not."""
from __future__ import annotations

import torch

from eagle3lib.checks.inputs import read_artifacts
from eagle3lib.checks.vocab import check_d2t
from tests.checks.world import canonical_tensors, draft_raw, write_draft


def _f(tmp_path, change=None):
    raw = draft_raw()
    t = canonical_tensors(raw)
    if change:
        change(t)
    return check_d2t(read_artifacts(draft=write_draft(tmp_path, raw, t)))


def test_clean_offsets_are_ruled_out(tmp_path):
    assert [x.status for x in _f(tmp_path)] == ["ruled out"]


def test_absolute_missing_and_arange_d2t_are_confirmed(tmp_path):
    def absolute(t):
        t["d2t"] = t["d2t"] + torch.arange(40)
    def missing(t):
        del t["d2t"]
    def arange(t):
        t["d2t"] = torch.arange(40)
    for change, word in ((absolute, "absolute"), (missing, "no d2t"), (arange, "arange")):
        f = _f(tmp_path, change)
        assert [x.status for x in f] == ["confirmed"] and word in f[0].summary, (word, f)
