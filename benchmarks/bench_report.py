"""Benchmark 5 (issue 9): end-to-end `make report` on the embedded default, wall time per notebook.

Runs the report runner into a temp output dir (after set-up: the venv exists; the demo world is built or restored
first and timed separately) and reads each notebook's run time from the index the runner writes.
Usage: .venv/bin/python benchmarks/bench_report.py [--out /tmp/e3bench_report]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _common import finish

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/e3bench_report")
    args = ap.parse_args()
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from eagle3lib import demo; demo.ensure_world(progress=False)"],
                   check=True, cwd=REPO)
    world_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "eagle3lib.report", "--out", args.out], cwd=REPO).returncode
    total = time.perf_counter() - t0
    index = json.loads((Path(args.out) / "index.json").read_text())
    rows = [{"notebook": r["notebook"], "status": r["status"], "seconds": r["seconds"]} for r in index["notebooks"]]
    finish("report", rows, {"demo_world_s": world_s, "runner_total_s": total, "runner_exit_code": rc,
                            "notebooks_s": sum(r["seconds"] or 0 for r in rows)})


if __name__ == "__main__":
    main()
