"""Tests for eagle3lib.replay.distributed and replay.cli: exact merge of shard counts, JSON round trip, 2 gloo ranks,
the gloo world freed on leaving process_group."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from eagle3lib.replay import distributed as D
from eagle3lib.replay import run as R
from eagle3lib.replay import stats as S
from eagle3lib.hidden.capture import capture
from eagle3lib.samples.readers import Sample
from eagle3lib.samples.writers import write_seed_dataset
from eagle3lib.errors import DataError, MissingFileError
from tests.hidden.test_capture import tiny_llama
from tests.replay.test_run import LAYOUT, make_samples, make_setup

pytestmark = pytest.mark.slow     # tens of seconds: the full suite (make test-all), not make test

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[S.ReplaySetup, Path]:
    """A tiny draft + target and a seed dataset of 10 lines: two lengths, every other sample with the target's
    final state (mixed reference), a NaN sample and a missing hidden-state file (skipped by the reader) and an
    out-of-vocab sample (skipped by replay)."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("world")
    head = torch.nn.functional.normalize(torch.randn(120, 32), dim=-1)
    setup = make_setup(root, lm_head=head)
    a, _, _ = make_samples(setup, n=4, T=24, seed=1)
    b, _, _ = make_samples(setup, n=4, T=17, seed=2)
    out = []
    for i, s in enumerate(a + b):
        nxt = torch.roll(s.input_ids, -1)
        tok = torch.where(torch.rand(len(nxt)) < 0.5, nxt, torch.randint(0, 120, nxt.shape))  # agreement ~ 0.5
        out.append(Sample(f"x{i}", s.input_ids, s.loss_mask, s.aux, LAYOUT, head[tok] * 5.0 if i % 2 else None))
    nan = out[2].aux.clone()
    nan[2, 1, 3] = float("nan")
    out.insert(4, Sample("nan", out[2].input_ids, out[2].loss_mask, nan, LAYOUT))
    out.insert(7, Sample("bigid", out[2].input_ids + 500, out[2].loss_mask, out[2].aux, LAYOUT))
    write_seed_dataset(root / "seed", out, layout=LAYOUT, info={"num_target_layers": 8})
    (root / "seed" / "hidden_states" / "x5.safetensors").unlink()
    return setup, root


def assert_same(a: S.ReplayResult, b: S.ReplayResult) -> None:
    """Every field equal: tables exactly (values, dtypes, order), floats bit for bit (NaN = NaN)."""
    for f in dataclasses.fields(S.ReplayResult):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, check_exact=True, obj=f.name)
        elif isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), f.name
        else:
            assert x == y, f.name


def test_merged_shard_counts_equal_one_pass(world):
    """Counts of three parts merged in any order give the single replay's result exactly (rows, skips in order)."""
    setup, _ = world
    samples, _, _ = make_samples(setup, n=6, T=20, seed=3)
    samples.insert(2, Sample("bad", samples[0].input_ids + 500, samples[0].loss_mask, samples[0].aux, LAYOUT))
    whole = R.replay(setup, samples, progress=False)
    parts = []
    for lo, hi in ((0, 2), (2, 5), (5, 7)):
        c = S.ReplayCounts(setup)
        parts.append(R.count(setup, ((i, samples[i]) for i in range(lo, hi)), c, batch_tokens=1))
    merged = parts[2].merge(parts[0]).merge(parts[1]).result()
    assert_same(merged, whole)
    assert len(whole.per_sample) == 6 and whole.skipped[0][0] == "sample 'bad' ()"
    with pytest.raises(ValueError, match="different options"):
        S.ReplayCounts(setup, options=S.ReplayOptions(num_steps=2)).merge(S.ReplayCounts(setup))


def test_result_json_round_trip_is_exact(world, tmp_path):
    """save_result / load_result give back the same result; wrong files raise the documented errors."""
    setup, root = world
    data = root / "seed"
    r = R.replay(setup, data, progress=False)
    assert (len(r.skipped), r.reference) == (3, "mixed") and not math.isnan(r.target_agreement)
    path = D.save_result(r, tmp_path / "r.json", world_size=1)
    assert json.loads(path.read_text())["summary"] == json.loads(json.dumps(r.summary()))
    assert_same(D.load_result(path), r)
    nosim = R.replay(setup, data, simulate=False, num_steps=2, progress=False)   # NaN columns, all-null floats
    assert_same(D.load_result(D.save_result(nosim, tmp_path / "n.json")), nosim)
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(DataError, match="not a replay result"):
        D.load_result(tmp_path / "bad.json")
    with pytest.raises(MissingFileError):
        D.load_result(tmp_path / "none.json")


def test_in_process_without_torchrun(world, monkeypatch):
    """Not launched by torchrun: a world of one, paths loaded in-process, same result as replay.replay (all
    samples and an n-sample draw whose permutation meets bad samples)."""
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    setup, root = world
    data = root / "seed"
    with D.process_group() as w:
        assert (w.rank, w.world_size) == (0, 1)
    got = D.replay_sharded(root / "draft", data, target=root / "target", progress=False)
    assert_same(got, R.replay(setup, data, progress=False))
    got = D.replay_sharded(setup, data, n=6, seed=4, progress=False)
    want = R.replay(setup, data, n=6, seed=4, progress=False)
    assert_same(got, want)
    assert len(want.per_sample) + sum("outside the target vocab" in why for _, why in want.skipped) == 6


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(root: Path, out: Path, *extra: str, module: str = "eagle3lib.replay") -> S.ReplayResult:
    """Run the CLI on 2 gloo ranks over loopback; the result rank 0 wrote."""
    port = free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(port), "-m", module, "--draft", str(root / "draft"),
           "--target", str(root / "target"), "--train-data", str(root / "seed"), "--out", str(out),
           "--quiet", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out.parent, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])          # printed once, by rank 0
    assert p.stdout.count('"expected_accept_length"') == 1
    doc = json.loads(out.read_text())
    assert doc["world_size"] == 2 and doc["summary"] == summary
    return D.load_result(out)


def test_two_gloo_ranks_under_torchrun_equal_one_process(world, tmp_path):
    """torchrun with 2 CPU ranks (gloo): the merged result equals one process's (per-step table, histogram,
    per-sample rows, accept lengths, reader and replay skips), for the whole dataset and for an n-sample draw
    (one sample per forward there, so the float forward is the same computation on both sides)."""
    setup, root = world
    one = R.replay(setup, root / "seed", progress=False)            # one batch here, a batch per rank there
    assert_same(_torchrun(root, tmp_path / "all.json"), one)
    assert len(one.skipped) == 3 and len(one.per_sample) == 7 and one.histogram["count"].sum() > 0
    drawn = R.replay(setup, root / "seed", n=6, seed=0, batch_tokens=1, progress=False)
    assert_same(_torchrun(root, tmp_path / "n6.json", "--num-samples", "6", "--seed", "0", "--batch-tokens", "1",
                          module="eagle3lib.replay"), drawn)     # `-m eagle3lib.replay` is the same command
    reasons = " ".join(why for _, why in drawn.skipped)     # 2 bad draws among the first 6: a second round ran
    assert "missing" in reasons and "NaN" in reasons and len(drawn.per_sample) == 5


_LEAVE_GROUP = """
import json, os, sys, warnings, weakref
import torch.distributed as dist
from eagle3lib.replay import distributed as D
from eagle3lib.replay.run import load_setup
imported = "torch.distributed.nn.functional" in sys.modules
threads = lambda: len(os.listdir("/proc/self/task"))
before = threads()
with warnings.catch_warnings(record=True) as quiet:
    warnings.simplefilter("always")
    with D.process_group():
        load_setup(sys.argv[1] + "/draft", sys.argv[1] + "/target", device="cpu")   # builds the draft on meta
        dist.all_gather_object([None], 1)
        group, inside = weakref.ref(dist.group.WORLD), threads()
after = threads()
os.environ["MASTER_PORT"] = sys.argv[2]
with warnings.catch_warnings(record=True) as held:
    warnings.simplefilter("always")
    with D.process_group():
        keep = dist.group.WORLD                      # a group something still holds when the rank leaves
del keep                                             # (freed here, before exit)
print(json.dumps({"imported": imported, "before": before, "inside": inside, "after": after, "freed": group() is None,
                  "quiet": [str(w.message) for w in quiet], "held": [str(w.message) for w in held]}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc/self/task (Linux)")
def test_leaving_the_process_group_frees_it_and_its_gloo_threads(world):
    """A fresh rank (a gloo world of one) that loads a draft inside process_group: on leaving, the group is freed
    and no gloo thread is left running into interpreter exit (where one releasing a collective's tensor aborted
    the rank: the flaky exit -6 under torchrun), although loading imported torch.distributed.nn, which binds the
    world group as default arguments when imported after init. A group that something still holds is warned about."""
    _, root = world
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", _LEAVE_GROUP, str(root), str(free_port())], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert not got["imported"] and got["inside"] > got["before"]        # the import and the gloo threads came inside
    assert got["freed"] and got["after"] == got["before"], got
    assert not any("outlived" in m for m in got["quiet"]), got["quiet"]
    assert sum("outlived destroy_process_group" in m for m in got["held"]) == 1, got["held"]


def _compare_rank(rank: int, port: int, target: str, data: str, out: str) -> None:
    """One of 2 spawned gloo ranks running compare_samples; rank 0 pickles its answer to `out`."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    got = D.compare_samples(target, data, progress=False)
    assert (got is None) == (rank != 0)
    if rank == 0:
        Path(out).write_bytes(pickle.dumps(got))


@pytest.mark.slow
def test_compare_samples_on_two_ranks_equals_one_process(tmp_path, monkeypatch):
    """Slot-vs-boundary comparison of many samples: 2 spawned gloo ranks give rank 0 the same table (rows in
    dataset order) and skips as one process; the consensus names each slot's boundary and how often (slow: two
    fresh interpreters import transformers)."""
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    model = tiny_llama()
    model.save_pretrained(tmp_path / "hf")
    lay = ("embed", "layer_in.2", "layer_in.4", "layer_in.5")
    samples = []
    for i in range(5):
        ids = torch.randint(0, 100, (10 + i,))
        served = ("layer_in.3",) + lay[1:] if i == 2 else lay            # sample 2 holds layer_in.3 in slot 0
        aux = capture(model, ids).stack(served)                            # (T, k, H)
        samples.append(Sample(f"c{i}", ids, torch.ones_like(ids), aux, lay))
    write_seed_dataset(tmp_path / "data", samples, info={"num_target_layers": 6})
    (tmp_path / "data" / "hidden_states" / "c4.safetensors").unlink()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                                               # as each rank runs
    try:
        one = D.compare_samples(tmp_path / "hf", tmp_path / "data", progress=False)
    finally:
        torch.set_num_threads(threads)
    assert list(one.slots["sample"]) == [f"c{i}" for i in range(4) for _ in range(4)]
    assert len(one.skipped) == 1 and "c4" in one.skipped[0][1]
    cons = one.consensus()
    assert list(cons.best) == list(lay) and list(cons.share) == [0.75, 1.0, 1.0, 1.0]
    assert one.slots.query("sample == 'c2' and slot == 0").best.item() == "layer_in.3"
    out = tmp_path / "two.pkl"
    mp.spawn(_compare_rank, args=(free_port(), str(tmp_path / "hf"), str(tmp_path / "data"), str(out)), nprocs=2)
    two = pickle.loads(out.read_bytes())                                  # written by this test's own rank 0
    pd.testing.assert_frame_equal(two.slots, one.slots, check_exact=True)
    assert two.skipped == one.skipped
