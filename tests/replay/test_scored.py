"""replay(only_scored=True) (lm_head and steps >= 1 only where an output is scored) gives exactly the numbers of
the full computation, with less lm_head work."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from eagle3lib.replay import run as R
from eagle3lib.samples.readers import Sample
from tests.replay.test_run import LAYOUT, make_samples, make_setup


def chat_samples(n: int, seed: int) -> list[Sample]:
    """Samples of different lengths whose loss masks have gaps (user turns), one masked right to its end."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        T = int(torch.randint(9, 40, (1,), generator=g))
        mask = torch.zeros(T, dtype=torch.long)
        for a in range(int(torch.randint(0, 4, (1,), generator=g)), T, 9):
            mask[a:a + 4] = 1                                   # 4 scored tokens, 5 masked, repeated
        if i == 1:
            mask[:] = 0
            mask[2:5] = 1                                       # nothing scored after position 4
        out.append(Sample(f"c{i}", torch.randint(0, 120, (T,), generator=g), mask,
                          torch.randn(T, 4, 32, generator=g), LAYOUT, None, f"mem:c{i}"))
    return out


def same_number(a, b) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("mask", ["token", "next"])
def test_only_scored_replay_gives_every_number_of_the_full_one(tmp_path, mask):
    """Every field of the ReplayResult (per-step, per-sample and histogram tables, accept lengths, agreement,
    skips, notes) is identical, over batches of several padded samples; and the lm_head ran on fewer rows."""
    setup = make_setup(tmp_path)
    samples = make_samples(setup, n=3, T=24)[0] + chat_samples(6, seed=1)
    rows = []
    hook = setup.model.lm_head.register_forward_hook(lambda m, a, o: rows.append(a[0].shape[0]))
    try:
        results = {}
        for only in (False, True):
            rows.clear()
            results[only] = R.replay(setup, samples, mask=mask, num_steps=3, batch_tokens=160, only_scored=only,
                                     progress=False)
            results[only, "rows"] = sum(rows)
    finally:
        hook.remove()
    full, part = results[False], results[True]
    assert len(full.per_sample) == len(samples) and full.per_step.positions.iloc[0] > 0
    for name in ("per_step", "per_sample", "histogram"):
        pd.testing.assert_frame_equal(getattr(part, name), getattr(full, name), check_exact=True)
    for name in ("label", "layout", "requested_layout", "reference", "num_steps", "skipped", "notes",
                 "expected_accept_length", "simulated_accept_length", "target_agreement"):
        assert same_number(getattr(part, name), getattr(full, name)), name
    assert part.summary() == full.summary()
    assert results[True, "rows"] < 0.8 * results[False, "rows"]
