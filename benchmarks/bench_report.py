"""Benchmark 5 (issue 9): end-to-end `make report` on the embedded default, wall time per notebook.

Runs the report runner into a temp output dir after set-up (the venv exists) and reads each notebook's run time
from the index the runner writes. By default the demo world is restored first into a fresh temp dir
($EAGLE3LIB_DEMO_DIR), timed separately: what a first `make report` on a fresh clone does. `--existing-world`
reuses data/demo/ (a rerun).
Usage: .venv/bin/python benchmarks/bench_report.py [--out /tmp/e3bench_report] [--existing-world]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import finish

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/e3bench_report")
    ap.add_argument("--existing-world", action="store_true", help="reuse data/demo/ instead of a fresh restore")
    args = ap.parse_args()
    env = dict(os.environ)
    tmp = None
    if not args.existing_world:
        tmp = tempfile.TemporaryDirectory(prefix="e3bench_world_")
        env["EAGLE3LIB_DEMO_DIR"] = tmp.name
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from eagle3lib.demo import world; world.ensure_world(progress=False)"],
                   check=True, cwd=REPO, env=env)
    world_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "eagle3lib.report", "--out", args.out], cwd=REPO, env=env).returncode
    total = time.perf_counter() - t0
    index = json.loads((Path(args.out) / "index.json").read_text())
    rows = [{"notebook": r["notebook"], "status": r["status"], "seconds": r["seconds"]} for r in index["notebooks"]]
    finish("report", rows, {"world": "existing data/demo" if args.existing_world else "fresh restore",
                            "demo_world_s": world_s, "runner_total_s": total, "runner_exit_code": rc,
                            "notebooks_s": sum(r["seconds"] or 0 for r in rows),
                            "load_avg_after": os.getloadavg()[0]})
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
