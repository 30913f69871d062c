"""The generated fault matrix (eagle3demo.faults) diagnosed case by case, as a markdown table on stdout and
JSON in benchmarks/results/fault_matrix.json: `python tools/fault_matrix.py [--pairs] [--engine vllm]`.

Each case is the healthy demo deployment with one (or two) things changed (an engine-read field, a tensor, the
served prompts, the target, the launch), diagnosed from the draft, target, training data and training log (and the
input beside the draft the fault changes) as `python -m eagle3lib.diagnose` does (in-process: `diagnose.parts`),
with the seed's decision it must reach.
`--engine vllm` serves each case on the real vLLM first (127.0.0.1, 16 held-out prompts, K 3, stopped by its pid)
and diagnoses it with what the engine wrote as well (launch, log, /metrics, served traffic): the served τ, or the
engine's refusal, beside the invariants (benchmarks/results/fault_matrix_vllm.json). `--engine sglang` does the same
on the real SGLang (steps 3 / topk 1 / 4 draft tokens unless the fault says; the faults applied to the draft as
SpecForge wrote it, SGLang's id convention; the launch, log, /server_info, served traffic and the hook's dump given:
benchmarks/results/fault_matrix_sglang.json)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from eagle3demo import faults, portable  # noqa: E402
from eagle3lib.demo import world as demo  # noqa: E402
from eagle3lib.diagnose.parts import Inputs, run  # noqa: E402


def diagnosed(w, draft, engine: str = "", fault=None):
    """(diagnosis, exit code, what the engine measured: {} offline) of one case's draft. Offline, the inputs the
    fault changes beside the draft are given as a user without a server brings them (served prompts as held-out
    samples, the target, the launch); served, the engine's own files are."""
    fault = fault or faults.HEALTHY_COPY
    if engine:
        given, served = faults.served_on_engine(fault, draft, engine, w)
    else:
        given, served = faults.inputs_of(fault, draft, w), {}
    r = run(Inputs(**{"draft": str(draft), "target": str(w.target), "train_data": str(w.specforge_data),
                      "training_log": str(w.training_log), "n": 16, "drift_samples": 0, **given}), progress=False)
    return r.diagnosis.to_dict(), r.exit_code, served


def _tau(served: dict) -> str:
    if not served:
        return "-"
    return f"{served['accept_length']:.2f}" if served.get("ok") else "refused"


def _predicted(d: dict) -> float | None:
    """The replay's τ nearest the served one (as trained, or as the engine loads it), or None."""
    got = faults.predicted_tau(d)
    return round(got[1], 3) if got else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", action="store_true", help="also every two config faults together")
    ap.add_argument("--engine", choices=("vllm", "sglang"), default="",
                    help="serve each case on the real engine first")
    ap.add_argument("--only", default="", help="comma-separated fault names (default: every case)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    a.out = a.out or str(ROOT / "benchmarks" / "results" / f"fault_matrix{'_' + a.engine if a.engine else ''}.json")
    w = demo.ensure_world(progress=False)
    cases = faults.singles() + (faults.pairs() if a.pairs else ())
    cases = tuple(f for f in cases if (not a.only or f.name in a.only.split(",")) and (f.vllm or a.engine != "vllm"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d, code, served = diagnosed(w, faults.write_fault(faults.HEALTHY_COPY, Path(tmp) / "healthy" / "draft",
                                                          engine=a.engine or "vllm"), a.engine)
        healthy = faults.counterfactual_finding(d)["evidence"]["acc0_as_shipped"]
        raised = [f"{v['cause']} ({v['status']})" for v in d["verdicts"]
                  if v["status"] in ("confirmed", "suspected", "conflict")]
        rows.append({"fault": "none", "what": "the healthy deployment", "acc0": healthy, "raised": raised,
                     "violations": ([f"the healthy deployment raises {raised}"] if raised else [])
                     + faults.invariants(faults.HEALTHY_COPY, d, code, healthy, served),
                     "exit_code": code, "served": served, "predicted": _predicted(d), "kind": "none",
                     "decision": d["decision"]["verdict"], "reason": d["decision"]["reason"],
                     "expected": faults.expected_verdict(faults.HEALTHY_COPY, served)})
        print("| fault | kind | acc0 as shipped | served τ | predicted τ | seed's decision | raised (confirmed / "
              "suspected) | invariants |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| none | none | {round(healthy, 3)} | {_tau(served)} | {_predicted(d) or '-'} | "
              f"{d['decision']['verdict']} | {', '.join(raised) or 'none'} | "
              f"{'; '.join(rows[0]['violations']) or 'hold'} |", flush=True)
        for f in cases:
            t = time.monotonic()
            d, code, served = diagnosed(w, faults.write_fault(f, Path(tmp) / f.name.replace("+", "_") / "draft",
                                                              engine=a.engine or "vllm"), a.engine, f)
            bad = faults.invariants(f, d, code, healthy, served)
            cf = (faults.counterfactual_finding(d) or {}).get("evidence") or {}
            raised = [f"{v['cause']} ({v['status']})" for v in d["verdicts"]
                      if v["status"] in ("confirmed", "suspected", "conflict")]
            rows.append({"fault": f.name, "what": f.what, "acc0": cf.get("acc0_as_shipped"), "raised": raised,
                         "violations": bad, "seconds": round(time.monotonic() - t, 1), "exit_code": code,
                         "served": served, "predicted": _predicted(d), "kind": f.kind,
                         "decision": d["decision"]["verdict"], "reason": d["decision"]["reason"],
                         "expected": faults.expected_verdict(f, served)})
            acc = cf.get("acc0_as_shipped")
            print(f"| {f.name} | {f.kind} | {acc if acc is None else round(acc, 3)} | {_tau(served)} | "
                  f"{_predicted(d) or '-'} | {d['decision']['verdict']} | {', '.join(raised) or 'none'} | "
                  f"{'; '.join(bad) or 'hold'} |", flush=True)
    Path(a.out).write_text(portable.portable_text(json.dumps({"healthy_acc0": healthy, "engine": a.engine or None,
                                                              "cases": rows}, indent=1)) + "\n")
    failed = sum(bool(r["violations"]) for r in rows)
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
