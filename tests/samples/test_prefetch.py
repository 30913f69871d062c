"""prefetch.ahead: order, read-ahead by items or by weight, errors and early close; replay with and without
prefetching agree, and a replay streams a generator of samples."""
from __future__ import annotations

import itertools
import threading
import time

import pandas as pd
import pytest
import torch

from eagle3lib.replay import run as R
from eagle3lib.samples.readers import Sample
from eagle3lib.samples.prefetch import ahead
from tests.replay.test_run import LAYOUT, make_samples, make_setup


def test_ahead_keeps_order_and_reads_ahead_of_the_consumer():
    """Items come in order; while the consumer holds item 0 the worker produces items 1 and 2 (depth 2)."""
    produced, two = [], threading.Event()

    def source():
        for i in range(6):
            produced.append(i)
            if i == 2:
                two.set()
            yield i * 10
    it = ahead(source(), depth=2)
    assert next(it) == 0
    assert two.wait(timeout=30) and produced[:3] == [0, 1, 2]
    assert list(it) == [10, 20, 30, 40, 50]
    assert list(ahead(iter(range(4)), depth=0)) == [0, 1, 2, 3]


def test_ahead_raises_the_producers_error_in_the_consumer():
    def source():
        yield 1
        yield 2
        raise ValueError("sample 3 unreadable")
    got = []
    with pytest.raises(ValueError, match="sample 3 unreadable"):
        for x in ahead(source(), depth=2):
            got.append(x)
    assert got == [1, 2]


def test_closing_early_stops_the_worker():
    """Breaking out of an endless source: the worker thread ends and stopped after a few items."""
    produced = []

    def endless():
        for i in itertools.count():
            produced.append(i)
            yield i
    it = ahead(endless(), depth=3)
    assert next(it) == 0
    it.close()
    assert not any(t.name == "eagle3lib-prefetch" and t.is_alive() for t in threading.enumerate())
    assert len(produced) <= 3 + 3


def test_replay_with_prefetch_equals_replay_in_line(tmp_path):
    """Same ReplayResult (tables, accept lengths, skips in order) with samples prepared in the prefetch thread."""
    setup = make_setup(tmp_path)
    good = make_samples(setup, n=3, T=20)[0]
    T = 12
    bad = Sample("wide", torch.zeros(T, dtype=torch.long), torch.ones(T, dtype=torch.long), torch.randn(T, 4, 16),
                 LAYOUT)
    data = good[:1] + [bad] + good[1:]
    r0, *others = (R.replay(setup, data, batch_tokens=40, prefetch_tokens=p, progress=False) for p in (0, 1, None))
    for r in others:
        for name in ("per_step", "per_sample", "histogram"):
            pd.testing.assert_frame_equal(getattr(r, name), getattr(r0, name), check_exact=True)
        assert r.summary() == r0.summary() and r.skipped == r0.skipped
    assert len(r0.skipped) == 1 and len(r0.per_sample) == 3


def test_ahead_by_weight_holds_at_most_the_budget_and_lets_a_heavy_item_through():
    """Budget 10 units: items of weight 4 -> 2 held (the third would make 12) plus the one in the worker's hands;
    an item of weight 25 still passes, alone."""
    produced, consumed = [], []
    weights = [4, 4, 4, 4, 25, 1]

    def source():
        for i, w in enumerate(weights):
            produced.append(i)
            yield (i, w)
    it = ahead(source(), 10, weight=lambda x: x[1])
    consumed.append(next(it))
    deadline = time.monotonic() + 30
    while len(produced) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)                                   # the worker would go on here if the budget did not hold it
    assert produced == [0, 1, 2, 3]                   # 1 and 2 held (8 units), 3 produced and waiting for room
    consumed += list(it)
    assert consumed == [(i, w) for i, w in enumerate(weights)]


def test_replay_streams_a_generator_of_samples(tmp_path):
    """A generator (a capture loop, a custom reader) is replayed lazily, n first items, with the list's numbers."""
    setup = make_setup(tmp_path)
    good = make_samples(setup, n=3, T=20)[0]
    pulled = []

    def stream():
        for s in good:
            pulled.append(s.id)
            yield s
    r_list = R.replay(setup, good[:2], batch_tokens=40, progress=False)
    r_gen = R.replay(setup, stream(), n=2, batch_tokens=40, progress=False)
    pd.testing.assert_frame_equal(r_gen.per_step, r_list.per_step, check_exact=True)
    assert len(r_gen.per_sample) == 2 and pulled == [s.id for s in good[:2]]
