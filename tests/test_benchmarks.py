"""The benchmark scripts run end to end at tiny sizes and write the record they print (numbers not judged here:
speed and memory goals live in the scripts' own output, see benchmarks/NOTES.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow     # tens of seconds: the full suite (make test-all), not make test

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def run_script(name: str, tmp_path: Path, *args: str) -> dict:
    """Run benchmarks/<name> with results redirected to tmp_path; the record printed last == the record saved."""
    env = {**os.environ, "EAGLE3LIB_BENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, name, *args], cwd=BENCH, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    record = json.loads(p.stdout.strip().splitlines()[-1])
    saved = json.loads((tmp_path / "results" / f"{record['benchmark']}.json").read_text())
    assert saved == record and record["machine"]["cores"] >= 1 and record["machine"]["torch"]
    assert not (BENCH / "results" / "tiny.json").exists()
    return record


def test_forward_benchmark_matches_the_reference(tmp_path):
    """Benchmarks 1-2 at Ht=256: our forward and the EAGLE-style reference give the same logits (fp32)."""
    rec = run_script("bench_forward.py", tmp_path, "--sizes", "256", "--repeats", "1", "--tokens", "64",
                     "--name", "tiny")
    (row,) = rec["rows"]
    assert (row["Ht"], row["dtype"], rec["T"], rec["K"]) == (256, "float32", 64, 3)
    assert row["max |diff|"] < 1e-4 and row["top1 agree"] == 1.0
    assert row["ref work ratio"] > 1 and 0 < row["of peak"] and row["GFLOP/s"] > 0 and row["tokens/s"] > 0


def test_load_benchmark_counts_the_weights(tmp_path):
    """Benchmark 3 at hidden 256: both cache states measured in fresh processes, weight bytes = the two files."""
    rec = run_script("bench_load.py", tmp_path, "--hidden", "256", "--repeats", "1", "--workdir",
                     str(tmp_path / "work"))
    files = [tmp_path / "work" / "h256" / "draft" / "model.safetensors",
             tmp_path / "work" / "h256" / "target" / "model.safetensors"]
    assert [r["cache"] for r in rec["rows"]] == ["cold", "warm"]
    for r in rec["rows"]:
        assert r["weights MB"] == pytest.approx(sum(f.stat().st_size for f in files) / 1e6)
        assert r["read s"] > 0 and r["load+touch s"] >= r["load_draft s"] > 0 and r["peak RSS MB"] > 0


def test_replay_benchmark_streams_every_sample(tmp_path):
    """Benchmark 4 on 3 and 6 samples: every sample of each prefix dataset is streamed and replayed."""
    rec = run_script("bench_replay.py", tmp_path, "--samples", "3,6", "--workdir", str(tmp_path / "work"))
    lines = (tmp_path / "work" / "data" / "train.jsonl").read_text().splitlines()
    assert [r["samples"] for r in rec["rows"]] == [3, 6] and len(lines) == 6
    lengths = [len(json.loads(x)["input_ids"]) for x in lines]
    assert [r["tokens"] for r in rec["rows"]] == [sum(lengths[:3]), sum(lengths)]
    assert rec["peak_rss_ratio"] > 0 and rec["data_ratio"] == pytest.approx(2, rel=0.5)


def test_checks_benchmark_runs_every_config_level_check(tmp_path):
    """The contract-checks benchmark at hidden 256: header-only sparse weights, all checks run, record saved."""
    rec = run_script("bench_checks.py", tmp_path, "--hidden", "256", "--repeats", "1", "--workdir",
                     str(tmp_path / "work"), "--name", "tiny")
    assert rec["hidden"] == 256 and [r["run"] for r in rec["rows"]] == ["warm-up", 1]
    assert all(r["findings"] >= 10 for r in rec["rows"]) and rec["raised"] == ["quantized_target"]


def test_long_benchmark_matches_the_reference_and_scores_less(tmp_path):
    """Benchmark 5 at Ht=256: the long-sample forward equals the materialised reference, chat rows score fewer
    outputs than dense rows, every size ran in its own process."""
    rec = run_script("bench_long.py", tmp_path, "--sizes", "320,640", "--hidden", "256", "--goal", "", "--chat",
                     "--check-up-to", "640", "--name", "tiny")
    rows = {(r["tokens"], r["mode"]): r for r in rec["rows"]}
    assert sorted(rows) == [(320, "chat"), (320, "dense"), (640, "chat"), (640, "dense")]
    for (T, mode), r in rows.items():
        assert r["max |diff|"] < 1e-4 and r["seconds"] > 0       # memory is the benchmark's to report, not to
        assert r["peak RSS GB"] > 0 and r["RSS before forward GB"] > 0   # assert: the two readings may come from
                                                                           # different child processes
        assert r["scored outputs"] == 3 * T if mode == "dense" else 0 < r["scored outputs"] < 3 * T * 0.5
    assert rec["time_per_token_ratio"] > 0 and rec["goal_peak_rss_gb"] is None


def test_peers_benchmark_matches_specforge_and_speculators(tmp_path):
    """Benchmark 6 --quick (Ht 256, T 128, fp32): eagle3lib's teacher-fed forward gives the real peers' logits and
    top-1 ids on the same weights, with the chat mask (eagle3lib computing only the scored outputs) and without."""
    pytest.importorskip("specforge")
    pytest.importorskip("speculators")
    rec = run_script("bench_peers.py", tmp_path, "--quick", "--repeats", "1", "--name", "tiny",
                     "--dtypes", "float32,bfloat16")
    rows = {(r["dtype"], r["mask"]): r for r in rec["rows"]}
    assert sorted(rows) == [("bfloat16", "chat"), ("bfloat16", "none"), ("float32", "chat"), ("float32", "none")]
    assert rec["peer_notes"] == {}
    assert 0 < rows["float32", "chat"]["scored share"] < 0.5 and rows["float32", "none"]["scored share"] == 1.0
    for (dtype, _), r in rows.items():
        assert (r["Ht"], r["tokens"], r["notes"]) == (256, 128, None)
        for peer in ("specforge", "speculators"):
            assert r[f"{peer} s"] > 0 and r[f"x vs {peer}"] > 0
            if dtype == "float32":
                assert r[f"max |diff| {peer}"] < 1e-4 and r[f"top1 agree {peer}"] == 1.0
                assert f"top1 vs fp32 {peer}" not in r
            else:                  # bf16 rounding: each implementation against the same weights in fp32
                assert 0.5 < r[f"top1 vs fp32 {peer}"] <= 1.0
        if dtype == "bfloat16":
            assert 0.5 < r["top1 vs fp32 eagle3lib"] <= 1.0


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("name", ["bench_forward.py", "bench_replay.py", "bench_long.py", "bench_peers.py"])
def test_cuda_benchmarks_say_there_is_no_cuda(name):
    """--device cuda without a GPU: a one-line reason and a failing exit status, before any work."""
    p = subprocess.run([sys.executable, name, "--device", "cuda"], cwd=BENCH, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode != 0 and "--device cuda: no CUDA device here" in p.stderr and p.stdout == ""


def test_prefetch_benchmark_measures_both_limits(tmp_path):
    """The prefetch benchmark on 5 small samples, reads paced to a 5 MB/s disk: read limit, compute limit and four
    replays of the same tokens (read-ahead 0 / 512 / 8192 / 32768 tokens), none reading faster than the disk."""
    rec = run_script("bench_replay.py", tmp_path, "--prefetch-bench", "--world", "small", "--prefetch-samples", "5",
                     "--disk-mbps", "5", "--workdir", str(tmp_path / "work"))
    lengths = [len(json.loads(x)["input_ids"]) for x in
               (tmp_path / "work" / "small" / "data" / "train.jsonl").read_text().splitlines()]
    assert rec["benchmark"] == "replay_prefetch" and rec["samples"] == 5 and len(lengths) == 5
    assert [r["prefetch tokens"] for r in rec["rows"]] == [None, 0, 0, 0, 512, 8192, 32768]
    assert all(r["tokens"] == sum(lengths) and r["seconds"] > 0 for r in rec["rows"])
    assert rec["disk_paced_MBps"] == 5
    from_disk = [r for r in rec["rows"] if r["what"].startswith(("read limit", "replay from disk"))]
    assert len(from_disk) == 5 and all(r["MB/s of hidden states"] <= 5.0 for r in from_disk)
    assert set(rec["replay_fraction_of_slower"]) == {f"prefetch_tokens={p}" for p in (0, 512, 8192, 32768)}


def test_recapture_benchmark_streams_the_same_states(tmp_path):
    """The recapture benchmark on a tiny 4-layer target: full and streamed in fresh processes give the same states,
    the streamed capture reads only the layers up to its deepest boundary, every cache state and depth measured."""
    rec = run_script("bench_recapture.py", tmp_path, "--layers", "4", "--hidden", "128", "--intermediate", "256",
                     "--vocab", "512", "--samples", "3", "--tokens", "32", "--workdir", str(tmp_path / "work"),
                     "--repeats", "1", "--name", "tiny")
    assert [(r["cache"], r["target load"]) for r in rec["rows"]] == [
        ("cold", "full"), ("cold", "streamed"), ("warm", "full"), ("warm", "streamed"), ("warm", "full"),
        ("warm", "streamed")]
    assert rec["max_abs_diff"] <= 1e-5 and set(rec["streamed_over_full"]) == {"cold", "warm"}
    full, deep, mid = rec["rows"][0], rec["rows"][1], rec["rows"][5]
    assert full["weights read MB"] * 1e6 == rec["target_bytes"]
    assert mid["weights read MB"] < deep["weights read MB"] < full["weights read MB"]
    assert all(r["seconds"] > 0 and r["peak RSS MB"] > 0 and r["read MB/s"] > 0 for r in rec["rows"])


def test_ab_benchmark_times_both_trees_side_by_side(tmp_path):
    """The A/B benchmark with HEAD as its baseline and the cheapest workload: a worktree of HEAD and this tree both
    run it in fresh processes, interleaved; the record holds each side's times, the ratio, both results, and the
    temporary worktree is gone afterwards."""
    def ab_worktrees():      # git's worktree list is the whole repository's: only this benchmark's temp trees
        out = subprocess.run(["git", "worktree", "list"], cwd=BENCH, capture_output=True, text=True).stdout
        return {ln.split()[0] for ln in out.splitlines() if "e3bench_ab_" in ln}
    before = ab_worktrees()
    rec = run_script("bench_ab.py", tmp_path, "--baseline", "HEAD", "--workloads", "import_load", "--repeats", "2",
                     "--warmup", "0", "--name", "tiny")
    (row,) = rec["rows"]
    assert row["workload"] == "import_load" and row["runs"] == 2
    assert len(row["baseline runs s"]) == len(row["current runs s"]) == 2
    assert row["baseline s"] > 0 and row["current s"] > 0 and row["wall ratio"] > 0
    assert row["current/baseline"] == pytest.approx(row["current s"] / row["baseline s"])
    assert rec["ratios"] == {"import_load": row["current/baseline"]}
    assert row["same result"] and row["baseline result"]["parameters"] > 0
    assert rec["baseline"] == rec["current"] and len(rec["load_avg_per_round"]) == 2
    assert ab_worktrees() <= before


def test_case_benchmark_counts_each_file_a_diagnose_opens(tmp_path):
    """Issue 49's benchmark at --tiny (the demo world and a shrunk synthetic case, the current tree only): each
    case's record holds the opens per file of one diagnose run, its time and its peak RSS."""
    rec = run_script("bench_case.py", tmp_path, "--tiny", "--name", "tiny")
    assert rec["tiny"] and rec["baseline"] is None and rec["current_commit"]
    for case, files in (("a", ("draft/config.json", "target/config.json", "data/seed/train.jsonl")),
                        ("b", ("draft/config.json", "draft/model.safetensors", "data/train.jsonl"))):
        cur = rec["cases"][case]["current"]
        assert cur["runs"] == 1 and cur["seconds"] > 0 and cur["wall_s"] > 0 and cur["peak_rss_gb"] > 0
        per_file = rec["cases"][case]["per_file"]["current"]
        assert all(per_file["py opens"].get(f, 0) > 0 for f in files), per_file["py opens"]
        if rec["strace"]:
            assert all(per_file["os opens"].get(f, 0) > 0 for f in files), per_file["os opens"]
        rows = [r for r in rec["rows"] if r["case"] == case]
        assert {r["file"] for r in rows} >= set(files) and all(r["py opens"] >= 0 for r in rows)
    assert rec["cases"]["case_b"]["sizes"]["hidden"] == 256 and sum(rec["cases"]["case_b"]["bytes"].values()) > 0
