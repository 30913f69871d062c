"""The generated fault matrix (eagle3lib.demo.faults) diagnosed case by case, as a markdown table on stdout and
JSON in benchmarks/results/fault_matrix.json: `python tools/fault_matrix.py [--pairs]`.

Each case is the healthy demo deployment with one (or two) engine-read fields perturbed, diagnosed from the draft,
target, training data and training log as `python -m eagle3lib.diagnose` does (in-process: `diagnose.run`)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eagle3lib.demo import faults  # noqa: E402
from eagle3lib.demo import world as demo  # noqa: E402
from eagle3lib.diagnose.run import Inputs, run  # noqa: E402


def diagnosed(w, draft):
    r = run(Inputs(draft=str(draft), target=str(w.target), train_data=str(w.specforge_data),
                   training_log=str(w.training_log), n=16, drift_samples=0), progress=False)
    return r.diagnosis.to_dict(), r.exit_code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", action="store_true", help="also every two config faults together")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fault_matrix.json"))
    a = ap.parse_args(argv)
    w = demo.ensure_world(progress=False)
    cases = faults.singles() + (faults.pairs() if a.pairs else ())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d, code = diagnosed(w, faults.write_fault(faults.Fault("none", "nothing", ()), Path(tmp) / "healthy"))
        healthy = faults.counterfactual_finding(d)["evidence"]["acc0_as_shipped"]
        print("| fault | acc0 as shipped | raised (confirmed / suspected) | invariants |")
        print("|---|---|---|---|")
        for f in cases:
            t = time.monotonic()
            d, code = diagnosed(w, faults.write_fault(f, Path(tmp) / f.name.replace("+", "_")))
            bad = faults.invariants(f, d, code, healthy)
            cf = (faults.counterfactual_finding(d) or {}).get("evidence") or {}
            raised = [f"{v['cause']} ({v['status']})" for v in d["verdicts"]
                      if v["status"] in ("confirmed", "suspected", "conflict")]
            rows.append({"fault": f.name, "what": f.what, "acc0": cf.get("acc0_as_shipped"), "raised": raised,
                         "violations": bad, "seconds": round(time.monotonic() - t, 1), "exit_code": code})
            acc = cf.get("acc0_as_shipped")
            print(f"| {f.name} | {acc if acc is None else round(acc, 3)} | {', '.join(raised) or 'none'} | "
                  f"{'; '.join(bad) or 'hold'} |", flush=True)
    Path(a.out).write_text(json.dumps({"healthy_acc0": healthy, "cases": rows}, indent=1) + "\n")
    failed = sum(bool(r["violations"]) for r in rows)
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
