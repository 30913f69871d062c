"""The real vLLM's served accept length against eagle3lib's prediction, for every demo deployment (issue 24).

Each deployment of `eagle3demo.deployments` (the demo draft with one planted defect) is served by the real vLLM
(`eagle3demo.vllm_world.ensure`: the OpenAI server on 127.0.0.1, 32 held-out prompts, K=3, greedy; served once and
reused) and diagnosed as a user's deployment (`diagnose.parts`). The table sets the served τ beside the replay of the
draft as trained and as the engine loads it (replay.as_served, on the served prompts' split), and the diagnosis.
Needs .venv-vllm (`make vllm`). Usage: .venv/bin/python benchmarks/bench_served_vs_replay.py [--only a,b] [--n 16]
[--world mla] (the MLA world's deployments, results/served_vs_replay_mla.json).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import finish

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))    # eagle3demo/ (the demo builder) beside the library
from eagle3demo import deployments, vllm_world  # noqa: E402
from eagle3lib.diagnose.parts import Inputs, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated deployment names (default: all)")
    ap.add_argument("--n", type=int, default=16, help="samples per replay")
    ap.add_argument("--world", default="llama", choices=["llama", "mla"], help="which demo world's deployments")
    args = ap.parse_args()
    why = vllm_world.vllm_unavailable_reason()
    if why:
        raise SystemExit(f"bench_served_vs_replay: {why}")
    table = deployments.table(args.world)
    names = args.only.split(",") if args.only else list(table)
    rows = []
    for name in names:
        t0 = time.monotonic()
        d = vllm_world.ensure(name, world=args.world)
        r = run(Inputs(**d.diagnose_args(), n=args.n))
        ev = next((f.evidence for part in r.findings.values() for f in part
                   if f.measured and "tau_as_trained" in f.evidence), {})
        conf = sorted(v.cause for v in r.diagnosis.verdicts if v.status == "confirmed")
        pred = ev.get("tau_as_served", ev.get("tau_as_trained"))
        rows.append({"deployment": name, "planted": table[name].what,
                     "served_tau": round(d.accept_length, 3) if d.accept_length else None,
                     "replay_as_trained": ev.get("tau_as_trained"), "replay_as_served": pred,
                     "served/predicted": round(d.accept_length / pred, 3) if d.accept_length and pred else None,
                     "expected": table[name].cause or "no fault",
                     "diagnosis": ", ".join(conf) or ("no fault found" if r.diagnosis.healthy else "-"),
                     "engine error": (d.error or "")[:80], "seconds": round(time.monotonic() - t0, 1)})
    ok = [x for x in rows if (x["diagnosis"] == x["expected"]) or (x["expected"] == "no fault"
                                                                    and x["diagnosis"] == "no fault found")]
    finish("served_vs_replay" + ("" if args.world == "llama" else f"_{args.world}"), rows, {"deployments": len(rows), "diagnosed_as_planted": len(ok)},
           ["deployment", "served_tau", "replay_as_trained", "replay_as_served", "served/predicted", "expected",
            "diagnosis", "seconds"])


if __name__ == "__main__":
    main()
