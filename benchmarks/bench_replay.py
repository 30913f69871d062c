"""Benchmark 4 (issue 9): replay over a synthetic dataset streamed from disk: tokens/s and peak RSS, 500 vs 2,000.

Data (written once into --workdir with eagle3lib.samples.writers, seed format): 2,000 samples, target hidden 256,
4 aux slots + the final post-norm state, bf16, T uniform in [96, 160] (mean 128), loss mask on the last 3/4
(~320 KB a sample, 640 MB in all; T~128 keeps the 2,000-sample replay to minutes on 2 shared cores).
Draft: hidden 256, 4 heads x 64 (2 kv heads), intermediate 512, draft vocab 1024 of a 4096 target vocab, random
weights; the target dir holds embedding + lm_head, so the reference is the target's greedy token. Each replay
(num_steps 3, chain simulation on, fp32, default batch_tokens 8192) runs in a fresh subprocess after a 2-sample
in-memory warm-up, with the data files dropped from the page cache first (posix_fadvise DONTNEED), and reports its
own peak RSS (VmHWM of /proc/self/status: ru_maxrss would be inherited across fork+exec).
Goal: peak RSS flat as the dataset grows (2,000 / 500 close to 1).
Usage: .venv/bin/python benchmarks/bench_replay.py [--samples 500,2000] [--workdir /tmp/e3bench_replay] [--ab]
--ab (issue 18): the largest size again with only_scored off/on x prefetch 0/2, each in a fresh subprocess.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from _common import finish

HT, SLOTS, V, VD, I, T_LO, T_HI = 256, 4, 4096, 1024, 512, 96, 160
LAYOUT = ("embed", "layer_in.4", "layer_in.8", "layer_in.12")       # ids [-1, 3, 7, 11] of a 16-layer target

CHILD = r"""
import json, os, sys, time
draft, target, data = sys.argv[1:4]
only_scored, prefetch = sys.argv[4] == "1", int(sys.argv[5])
def hwm():   # this process's own peak RSS in bytes
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
root = os.path.dirname(data)
for name in os.listdir(os.path.join(root, "hidden_states")):     # stream from disk, not from the page cache
    fd = os.open(os.path.join(root, "hidden_states", name), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
import torch
from eagle3lib.samples.sample import Sample
from eagle3lib.replay.run import load_setup, replay
setup = load_setup(draft, target)
warm = [Sample(f"w{i}", torch.randint(0, 4096, (256,)), torch.ones(256, dtype=torch.long),
               torch.randn(256, 4, 256), ("embed", "layer_in.4", "layer_in.8", "layer_in.12")) for i in range(2)]
replay(setup, warm, progress=False)      # first-call costs (kernel selection, allocator) outside the timing
base = hwm()
t0 = time.perf_counter()
r = replay(setup, data, only_scored=only_scored, prefetch=prefetch, progress=False)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "tokens": int(r.per_sample.tokens.sum()), "samples": len(r.per_sample),
                  "skipped": len(r.skipped), "acc0": r.acc0, "peak_rss": hwm(), "rss_before": base,
                  "threads": torch.get_num_threads()}))
"""


def build(workdir: Path, n: int) -> tuple[Path, Path, Path]:
    """The random draft, its target dir and the seed dataset of n samples (kept between runs)."""
    from safetensors.torch import save_file

    from eagle3lib.model.checkpoint import save_draft
    from eagle3lib.samples.readers import Sample
    from eagle3lib.samples.writers import write_seed_dataset
    from eagle3lib.model.draft import Eagle3Draft
    from eagle3lib.model.config import DraftConfig

    draft, target, data = workdir / "draft", workdir / "target", workdir / "data"
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": HT,
           "intermediate_size": I, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 4096,
           "vocab_size": V, "draft_vocab_size": VD, "target_hidden_size": HT, "tie_word_embeddings": False,
           "num_aux_hidden_states": SLOTS,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 3, 7, 11], "use_aux_hidden_state": True}}
    g = torch.Generator().manual_seed(0)
    if not (draft / "model.safetensors").exists():
        model = Eagle3Draft(DraftConfig.from_dict(raw))
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.05, generator=g)
        model.d2t.copy_(torch.sort(torch.randperm(V, generator=g)[:VD]).values - torch.arange(VD))
        save_draft(model, raw, draft)
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                        "num_hidden_layers": 16, "hidden_size": HT, "vocab_size": V}))
        save_file({"model.embed_tokens.weight": model.embed_tokens.weight.detach().clone(),
                   "lm_head.weight": torch.randn(V, HT, generator=g) * 0.05}, str(target / "model.safetensors"))
    if not (data / "train.jsonl").exists() or sum(1 for _ in open(data / "train.jsonl")) != n:
        def samples():
            for i in range(n):
                T = int(torch.randint(T_LO, T_HI + 1, (1,), generator=g))
                mask = torch.zeros(T, dtype=torch.long)
                mask[T // 4:] = 1
                yield Sample(f"s{i:05d}", torch.randint(0, V, (T,), generator=g), mask,
                             torch.randn(T, SLOTS, HT, generator=g).to(torch.bfloat16), LAYOUT,
                             torch.randn(T, HT, generator=g).to(torch.bfloat16))
        write_seed_dataset(data, samples(), layout=LAYOUT, info={"num_target_layers": 16})
    return draft, target, data


def run(draft: Path, target: Path, index: Path, only_scored: bool = True, prefetch: int = 2) -> dict:
    """One replay in a fresh subprocess: seconds, tokens, peak RSS."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(draft), str(target), str(index), str(int(only_scored)),
                          str(prefetch)], capture_output=True, text=True, check=True, cwd=Path(__file__).parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", default="500,2000", help="dataset sizes replayed (prefixes of the largest)")
    ap.add_argument("--workdir", default="/tmp/e3bench_replay")
    ap.add_argument("--ab", action="store_true", help="also replay the largest size without only_scored and/or "
                    "without prefetching (issue 18), interleaved with the default")
    args = ap.parse_args()
    sizes = sorted(int(x) for x in args.samples.split(","))
    draft, target, data = build(Path(args.workdir), sizes[-1])
    lines = (data / "train.jsonl").read_text().splitlines(keepends=True)
    rows = []
    plan = [(n, True, 2) for n in sizes]
    if args.ab:                                              # variants of the largest size, interleaved
        plan += [(sizes[-1], o, p) for o, p in ((False, 0), (True, 0), (False, 2), (True, 2))]
    for n, only, pre in plan:
        index = data / f"first_{n}.jsonl"                     # a dataset of the first n samples, same files
        index.write_text("".join(lines[:n]))
        load = os.getloadavg()[0]
        r = run(draft, target, index, only, pre)
        rows.append({"samples": n, "only_scored": only, "prefetch": pre, "tokens": r["tokens"], "seconds": r["seconds"],
                     "tokens/s": r["tokens"] / r["seconds"], "peak RSS MB": r["peak_rss"] / 1e6,
                     "RSS before replay MB": r["rss_before"] / 1e6,
                     "replay RSS growth MB": (r["peak_rss"] - r["rss_before"]) / 1e6,
                     "data on disk MB": sum((data / "hidden_states" / f"s{i:05d}.safetensors").stat().st_size
                                            for i in range(n)) / 1e6, "load avg before": load})
    small, big = rows[0], rows[len(sizes) - 1]
    finish("replay", rows, {"dataset": {"format": "seed", "target_hidden": HT, "aux_slots": SLOTS, "dtype": "bf16",
                                        "tokens_per_sample": [T_LO, T_HI], "final_hidden": True},
                            "draft": {"hidden": HT, "intermediate": I, "heads": 4, "draft_vocab": VD,
                                      "target_vocab": V, "num_steps": 3, "simulate": True, "dtype": "float32"},
                            "goal": "peak RSS flat as the dataset grows",
                            "peak_rss_ratio": big["peak RSS MB"] / small["peak RSS MB"],
                            "data_ratio": big["data on disk MB"] / small["data on disk MB"],
                            "tokens_per_s": big["tokens/s"], "threads": r["threads"],
                            "ab_seconds": {f"only_scored={x['only_scored']},prefetch={x['prefetch']}": x["seconds"]
                                           for x in rows[len(sizes):]}})


if __name__ == "__main__":
    main()
