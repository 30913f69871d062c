"""Serve a draft beside its target in vLLM's offline engine (`vllm.LLM`) and count what it accepts, per prompt group.

Runs in the vLLM venv: ``python accept.py --job job.json``, where job.json is {"target", "draft", "method",
"num_speculative_tokens", "max_model_len", "dtype", "max_tokens", "groups": {name: [[token ids], ...]}}. Every group
is generated greedily (temperature 0, ignore_eos) in its own `generate` call, and vLLM's own speculative-decoding
counters (`LLM.get_metrics()`) are read before and after it: the group's drafts, draft tokens, accepted tokens and
accepted tokens per position, and mean acceptance length = 1 + accepted / drafts (the bonus token included, as
vLLM's log line counts it). The last stdout line is one JSON object {"vllm_version", "groups": {...}} or
{"error": {...}} when the engine refuses to start. Imports only vLLM, torch and the standard library.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
            "vllm:spec_decode_num_accepted_tokens")
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def counters(llm) -> dict:
    """vLLM's speculative counters now: {name: value} and the per-position vector."""
    out = {}
    for m in llm.get_metrics():
        if m.name in COUNTERS:
            out[m.name] = getattr(m, "value", 0)
        elif m.name == PER_POS:
            out[PER_POS] = list(getattr(m, "values", []))
    return out


def delta(before: dict, after: dict) -> dict:
    """One group's counts (after - before) and its mean acceptance length."""
    d = {k.split("num_")[-1]: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
    b, a = before.get(PER_POS) or [], after.get(PER_POS) or []
    per = [x - (b[i] if i < len(b) else 0) for i, x in enumerate(a)]
    drafts = d.get("drafts", 0)
    return {**d, "accepted_per_pos": per,
            "per_pos_rate": [round(p / drafts, 4) for p in per] if drafts else [],
            "mean_acceptance_length": round(1 + d.get("accepted_tokens", 0) / drafts, 4) if drafts else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", required=True)
    job = json.loads(Path(ap.parse_args(argv).job).read_text())
    import vllm
    from vllm import LLM, SamplingParams
    spec = {"model": job["draft"], "num_speculative_tokens": job.get("num_speculative_tokens", 3)}
    if job.get("method"):
        spec["method"] = job["method"]
    try:
        llm = LLM(model=job["target"], speculative_config=spec, max_model_len=job.get("max_model_len") or 512,
                  dtype=job.get("dtype") or "float32", enforce_eager=True, disable_log_stats=False, seed=0)
    except Exception as e:               # noqa: BLE001 - an engine that refuses to start is the answer
        print(json.dumps({"vllm_version": vllm.__version__,
                          "error": {"stage": "start", "type": type(e).__name__, "message": str(e)[:1200],
                                    "trace": traceback.format_exc()[-1500:]}}))
        sys.stdout.flush()
        os._exit(0)
    sp = SamplingParams(temperature=0.0, max_tokens=int(job.get("max_tokens", 32)), ignore_eos=True)
    groups = {}
    error = None
    for name, prompts in job["groups"].items():
        before = counters(llm)
        try:
            outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        except Exception as e:           # noqa: BLE001 - an engine that dies serving is the answer
            error = {"stage": f"generate {name}", "type": type(e).__name__, "message": str(e)[:1200]}
            break
        groups[name] = {**delta(before, counters(llm)), "prompts": len(prompts),
                        "prompt_tokens": [len(p) for p in prompts],
                        "generated": [len(o.outputs[0].token_ids) for o in outs]}
    # stop the engine-core process first: left running it would hold this script's stdout open
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:                    # noqa: BLE001 - a dead engine core is already gone
        pass
    print(json.dumps({"vllm_version": vllm.__version__, "groups": groups, "error": error}))
    sys.stdout.flush()
    os._exit(0)                          # skip the remaining interpreter teardown (slow, says nothing we need)


if __name__ == "__main__":
    sys.exit(main())
