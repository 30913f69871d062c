"""A/B benchmark (issue 38): the user-facing workloads on a baseline commit and on this working tree, side by side.

"The benchmarks show no slowdown" after the restructure (folders moved, one engine-knowledge table, step modules
with run(inputs) -> Part): the same workloads are timed on the baseline (default db8d5eb, the commit the issue was
filed against; a detached `git worktree` in a temp dir, removed afterwards) and on the current working tree
(uncommitted changes included). Both use this interpreter (the same .venv) and the same demo world
($EAGLE3LIB_DEMO_DIR = this tree's data/demo, resolved; it must be current for both trees' builder, so that
neither side rebuilds it). Every run is a fresh subprocess with PYTHONPATH = its tree, and the runs interleave,
baseline then current for each workload in each round (A B A B ...), so that a load drift on the shared machine
hits both sides. Before timing, both trees' eagle3lib/ is byte-compiled (the fresh worktree has no .pyc) and
--warmup rounds run uncounted (diagnose excepted: one run is ~45 s; its first run is counted).

Workloads (every function named exists at db8d5eb and here):
  import_load   import eagle3lib, load the demo draft (model.checkpoint.load_draft, embedding from the target)
  replay        replay.run.load_setup + replay on --samples training samples of the demo world (seed data)
  checks        checks.judge.run_checks on the demo draft, target, seed data and an SGLang launch, replay_n=--samples
  diagnose      python -m eagle3lib.diagnose --quiet (the demo world, its defaults)
Reported per workload: the median of the work timed inside the child ("s", imports excluded except for
import_load, where they are the work) and of the child's whole wall time ("wall s": interpreter start, imports,
work, exit; for diagnose the only figure), each side, and the ratios current / baseline (< 1: current faster).
Each side's result summary (findings, accuracy, headline) is recorded, so a reader sees both ran the same work.
Usage: .venv/bin/python benchmarks/bench_ab.py [--baseline db8d5eb] [--repeats 5] [--diagnose-repeats 3]
       [--warmup 1] [--samples 4] [--workloads import_load,replay,checks,diagnose] [--name ab_restructure]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import finish, machine_line

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = ("import_load", "replay", "checks", "diagnose")

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
work, samples = sys.argv[1], int(sys.argv[2])
import eagle3lib
from eagle3lib.demo.shipped import world_json_current
from eagle3lib.demo.world import paths
p = paths()
if not world_json_current(p.world_json, p.kind):
    sys.exit(f"the demo world at {p.root} is not current for this tree's builder: it would be rebuilt")
if work == "import_load":
    from eagle3lib.model.checkpoint import load_draft
    d = load_draft(p.draft, target=p.target)
    result = {"parameters": sum(x.numel() for x in d.model.parameters())}
    seconds = time.perf_counter() - t0
elif work == "replay":
    from eagle3lib.replay.run import load_setup, replay
    t = time.perf_counter()
    r = replay(load_setup(p.draft, p.target), p.seed_data, n=samples, progress=False)
    seconds = time.perf_counter() - t
    result = {"acc0": round(float(r.acc0), 6), "samples": len(r.per_sample)}
elif work == "checks":
    from eagle3lib.causes import raised
    from eagle3lib.checks.judge import run_checks
    launch = (f"python -m sglang.launch_server --model-path {p.target} --speculative-draft-model-path {p.draft} "
              "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
              "--speculative-num-draft-tokens 4")
    t = time.perf_counter()
    f = run_checks(draft=p.draft, target=p.target, data=p.seed_data, launch=launch, engine="sglang",
                   replay_n=samples, progress=False)
    seconds = time.perf_counter() - t
    result = {"findings": len(f), "raised": sorted({x.cause for x in raised(f)})}
else:
    sys.exit(f"unknown workload {work}")
print(json.dumps({"seconds": seconds, "result": result}))
"""


def run_once(tree: Path, work: str, samples: int, env: dict) -> dict:
    """One fresh subprocess of `work` on `tree`: {"seconds", "wall", "result"}; exits naming the tree on failure."""
    run_env = {**env, "PYTHONPATH": str(tree)}
    if work == "diagnose":   # the record as the last stdout line: `--json -` where the tree has it (issue 46)
        cli = (tree / "eagle3lib" / "diagnose" / "cli.py").read_text()
        cmd = [sys.executable, "-m", "eagle3lib.diagnose", "--quiet"] + (["--json", "-"] if '"--json"' in cli else [])
    else:
        cmd = [sys.executable, "-c", CHILD, work, str(samples)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env=run_env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        sys.exit(f"{work} on {tree} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    out = json.loads(lines[-1])
    if work == "diagnose":
        return {"seconds": wall, "wall": wall,
                "result": {"healthy": out["healthy"], "verdicts": len(out["verdicts"]), "headline": out["headline"],
                           "exit_code": out["exit_code"]}}
    return {**out, "wall": wall}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="db8d5eb", help="the commit (any git rev) compared with the working tree")
    ap.add_argument("--repeats", type=int, default=5, help="counted runs per side of each cheap workload")
    ap.add_argument("--diagnose-repeats", type=int, default=3, help="counted runs per side of diagnose (~45 s each)")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted rounds first (not for diagnose)")
    ap.add_argument("--samples", type=int, default=4, help="samples of the replay and of the checks' replays")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--name", default="ab_restructure")
    a = ap.parse_args()
    works = [w for w in a.workloads.split(",") if w]
    if unknown := set(works) - set(WORKLOADS):
        sys.exit(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
    base_commit = git("rev-parse", "--short", a.baseline)
    demo = (REPO / "data" / "demo").resolve()
    env = {**os.environ, "EAGLE3LIB_DEMO_DIR": str(demo)}
    env.pop("EAGLE3LIB_DEMO_WORLD", None)                      # the llama world, as diagnose's default
    tmp = Path(tempfile.mkdtemp(prefix="e3bench_ab_"))
    base_tree = tmp / "baseline"
    git("worktree", "add", "--detach", str(base_tree), a.baseline)
    try:
        trees = {"baseline": base_tree, "current": REPO}
        for tree in trees.values():              # no side pays .pyc compilation inside a timed run
            subprocess.run([sys.executable, "-m", "compileall", "-q", "eagle3lib"], cwd=tree, check=True,
                           capture_output=True)
        print(machine_line(), flush=True)
        print(f"baseline {base_commit} ({base_tree}) vs current working tree at {git('rev-parse', '--short', 'HEAD')}"
              f"{' (uncommitted changes)' if git('status', '--porcelain', '--untracked-files=no') else ''}; "
              f"demo world {demo}", flush=True)
        runs: dict[tuple[str, str], list[dict]] = {(w, s): [] for w in works for s in trees}
        rounds = max(a.repeats, a.diagnose_repeats if "diagnose" in works else 0)
        loads = []
        for r in range(-a.warmup, rounds):
            for w in works:
                n = a.diagnose_repeats if w == "diagnose" else a.repeats
                if r >= n or (r < 0 and w == "diagnose"):
                    continue
                for side, tree in trees.items():         # A B, A B, ...: the same moment for both sides
                    x = run_once(tree, w, a.samples, env)
                    if r >= 0:
                        runs[w, side].append(x)
                    print(f"  round {r if r >= 0 else 'warm-up'} {w:11s} {side:8s} {x['seconds']:8.3f} s "
                          f"(wall {x['wall']:.2f} s)", flush=True)
            loads.append(round(os.getloadavg()[0], 2))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPO, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    rows, ratios = [], {}
    for w in works:
        med = {s: statistics.median(x["seconds"] for x in runs[w, s]) for s in trees}
        wall = {s: statistics.median(x["wall"] for x in runs[w, s]) for s in trees}
        paired = statistics.median(c["seconds"] / b["seconds"] for b, c in zip(runs[w, "baseline"], runs[w, "current"]))
        same = runs[w, "baseline"][0]["result"] == runs[w, "current"][0]["result"]
        ratios[w] = med["current"] / med["baseline"]
        rows.append({"workload": w, "runs": len(runs[w, "current"]), "baseline s": med["baseline"],
                     "current s": med["current"], "current/baseline": ratios[w], "paired ratio": paired,
                     "baseline wall s": wall["baseline"], "current wall s": wall["current"],
                     "wall ratio": wall["current"] / wall["baseline"], "same result": same,
                     "baseline result": runs[w, "baseline"][0]["result"],
                     "current result": runs[w, "current"][0]["result"],
                     "baseline runs s": [x["seconds"] for x in runs[w, "baseline"]],
                     "current runs s": [x["seconds"] for x in runs[w, "current"]]})
    finish(a.name, rows, {"baseline": base_commit, "current": git("rev-parse", "--short", "HEAD"),
                          "samples": a.samples, "warmup": a.warmup, "ratios": ratios,
                          "load_avg_per_round": loads,
                          "demo_world": json.loads((demo / "world.json").read_text()).get("builder_version")},
           columns=["workload", "runs", "baseline s", "current s", "current/baseline", "paired ratio",
                    "baseline wall s", "current wall s", "wall ratio", "same result"])


if __name__ == "__main__":
    main()
