"""The vLLM engine facts that need a served draft: mean acceptance length on the real vLLM (CPU build, offline
`vllm.LLM`, greedy, K=3) for demo-draft variants, per prompt-length group.

Variants of data/demo/draft (ids rewritten to the top-level input-of-layer [0, 2, 4, 6], so vLLM captures what
the draft was trained on): `base`; `mpe64` (config max_position_embeddings 64: vLLM 0.32 raises it to the target's
max_model_len and keeps drafting); `d2t_long_name` (the d2t tensor saved as draft_id_to_target_id: dropped
silently, d2t stays zeros); `no_lm_head` (lm_head removed: the target's head is borrowed and sliced to the draft
vocab); `ids_in_eagle_config` (the shipped ids [-1, 1, 3, 5] left in eagle_config: V1 reads them as they are).
Groups: chat prompts of the held-out corpus, `short` (< 64 tokens with the reply), `past64` (multi-turn,
~70-110 prompt tokens: past 64, around the longest training sample, 118), `past_trained` (~200-400: far past it).
Usage: .venv/bin/python benchmarks/bench_vllm_facts.py [--variants base,mpe64] [--prompts 8] [--max-tokens 32]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _common import finish

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from eagle3lib.demo.world import ensure_world  # noqa: E402
from eagle3lib.engines.draft_edit import edited_copy  # noqa: E402
from eagle3lib.vllm_engine.env import run_script, unavailable_reason  # noqa: E402

TOP = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4, 6]}
VARIANTS = {
    "base": dict(config=TOP, drop_config=["eagle_config.eagle_aux_hidden_state_layer_ids"]),
    "mpe64": dict(config={**TOP, "max_position_embeddings": 64},
                  drop_config=["eagle_config.eagle_aux_hidden_state_layer_ids"]),
    "d2t_long_name": dict(config=TOP, drop_config=["eagle_config.eagle_aux_hidden_state_layer_ids"],
                          rename={"d2t": "draft_id_to_target_id"}),
    "no_lm_head": dict(config=TOP, drop_config=["eagle_config.eagle_aux_hidden_state_layer_ids"],
                       drop=["lm_head.weight"]),
    "ids_in_eagle_config": dict(),
}


def prompt_groups(target: Path, n: int) -> dict[str, list[list[int]]]:
    """Token-id prompts of three lengths from the held-out corpus, with the target's chat template."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(target))
    convs = [json.loads(x)["conversations"] for x in (ROOT / "data/demo/corpus/heldout.jsonl").open()]
    enc = lambda msgs: tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,  # noqa: E731
                                               return_dict=False)
    short = [enc(c[:1]) for c in convs[:n]]
    past64, far, i = [], [], n
    while len(past64) < n or len(far) < n:
        hist = []
        while len(enc(hist + convs[i % len(convs)][:1])) < (90 if len(past64) < n else 300):
            hist += convs[i % len(convs)]
            i += 1
        (past64 if len(past64) < n else far).append(enc(hist + convs[i % len(convs)][:1]))
        i += 1
    return {"short": short, "past64": past64, "past_trained": far}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    a = ap.parse_args()
    if unavailable_reason():
        raise SystemExit(unavailable_reason())
    w = ensure_world()
    groups = prompt_groups(w.target, a.prompts)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.variants.split(","):
            draft = edited_copy(w.draft, Path(tmp) / name, **VARIANTS[name])
            job = {"target": str(w.target), "draft": str(draft), "method": "eagle3", "num_speculative_tokens": 3,
                   "max_model_len": 512, "dtype": "float32", "max_tokens": a.max_tokens, "groups": groups}
            (Path(tmp) / f"{name}.json").write_text(json.dumps(job))
            t0 = time.time()
            ans = run_script("accept.py", ["--job", str(Path(tmp) / f"{name}.json")], timeout=900)
            err = ans.get("error") or {}
            for g, r in (ans.get("groups") or {}).items():
                rows.append({"variant": name, "group": g,
                             "prompt tokens": f"{min(r['prompt_tokens'])}-{max(r['prompt_tokens'])}",
                             "drafts": r["drafts"], "mean acceptance length": r["mean_acceptance_length"],
                             "per position": r["per_pos_rate"], "error": "", "s": round(time.time() - t0, 1),
                             "vllm": ans.get("vllm_version")})
            if err:
                rows.append({"variant": name, "group": err.get("stage", ""), "error": f"{err.get('type')}: "
                             f"{err.get('message', '')[:200]}", "s": round(time.time() - t0, 1),
                             "vllm": ans.get("vllm_version")})
    finish("vllm_facts", rows, {"K": 3, "max_tokens": a.max_tokens, "prompts_per_group": a.prompts},
           columns=["variant", "group", "prompt tokens", "drafts", "mean acceptance length", "per position", "error"])


if __name__ == "__main__":
    main()
