"""Benchmark 5 (issue 18): one long sample through the TTT forward: time and peak memory from 1k to 32k tokens.

Draft: `bench_forward.make_cfg(Ht)` (hidden = Ht, heads of 128 (16 at 2048), kv heads / 4, intermediate 3.5 H,
32k draft vocab, 3 aux slots), random weights, fp32, 3 TTT steps, feed="draft" with top-1 ids (what replay runs),
batch 1. Every size runs in a fresh subprocess that reports its own peak RSS (VmHWM of /proc/self/status; the
whole process: torch, weights, the (T, 3*Ht) input and the forward) after a 256-token warm-up; --device cuda times
with torch.cuda.synchronize and reports torch.cuda.max_memory_allocated as well.
Rows "dense": every output scored (the issue's table). Rows "chat" (--chat): replay's scored positions for a
chat-like loss mask (turns of 300 user tokens masked, 200 assistant tokens scored: 40%, SpecForge's token mask
rule), so the lm_head and the steps >= 1 run only there (issue 18 item 2).
The smallest size is also checked against the materialised-scores reference (bench_forward.reference_ttt):
max |logit diff| over the 3 steps.
Goals: 32k tokens at Ht 4096 within 8 GB peak RSS (fp32, CPU); time per token flat within 1.5x from 1k to 32k.
Usage: nice -n 10 .venv/bin/python benchmarks/bench_long.py [--sizes 1024,4096,8192,32768] [--hidden 2048]
       [--goal 4096:32768] [--chat] [--device cpu|cuda] [--name long]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import finish, pick_device

CHILD = r"""
import json, sys, time
import torch
from _common import peak_bytes, sync
from bench_forward import build, forward_flops, make_cfg, reference_ttt
hidden, T, device, chat, check = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5] == "1"
K = 3
def hwm():   # this process's own peak RSS in bytes
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
torch.manual_seed(0)
cfg = make_cfg(hidden)
d = build(cfg, torch.float32).to(device)
aux = torch.randn(1, T, cfg.fc_in_features, device=device)
ids = torch.randint(0, cfg.vocab_size, (1, T), device=device)
scored = None
if chat:   # turns of 300 user tokens (mask 0) and 200 assistant tokens (mask 1)
    from eagle3lib.replay.stats import scored_positions
    mask = ((torch.arange(T) % 500) >= 300).long()
    ref = torch.full((T,), -1, dtype=torch.long)
    ref[:-1] = ids[0, 1:].cpu()
    _, valid = scored_positions(ref, mask, K)
    scored = valid[:, None].to(device)                                   # (K, T) -> (K, 1, T)
if T >= 16384:   # progress on stderr (long runs on a shared machine): one line per q_proj row chunk
    t_start = time.perf_counter()
    d.midlayer.self_attn.q_proj.register_forward_hook(lambda m, a, o: print(
        f"    [Ht {hidden} T {T}] q_proj rows {a[0].shape[1]} at {time.perf_counter() - t_start:.0f} s, "
        f"peak RSS {hwm() / 1e9:.2f} GB", file=sys.stderr, flush=True))
kw = {} if scored is None else {"scored": scored}    # (the forward before issue 18 has no `scored`)
with torch.inference_mode():
    d.ttt_forward(aux[:, :256], ids[:, :256], K, feed="draft", return_logits=False)   # kernels, allocator
    before = hwm()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    top = d.ttt_forward(aux, ids, K, feed="draft", return_logits=False, **kw)
    sync(device)
    seconds = time.perf_counter() - t0
    peak = hwm()
    diff = None
    if check:
        ours = d.ttt_forward(aux, ids, K, **kw)                          # teacher feed, as the reference
        ref_logits = reference_ttt(d, aux, ids, K)
        s = torch.ones(K, 1, T, dtype=torch.bool, device=device) if scored is None else scored
        diff = max(float((a[s[i]] - b[s[i]]).abs().max()) if bool(s[i].any()) else 0.0
                   for i, (a, b) in enumerate(zip(ours, ref_logits)))
print(json.dumps({"seconds": seconds, "peak_rss": peak, "rss_before": before, "threads": torch.get_num_threads(),
                  "cuda_peak": peak_bytes("cuda") if device == "cuda" else None,
                  "scored": int(scored.sum()) if scored is not None else K * T, "flops": forward_flops(cfg, T, K),
                  "max_diff": diff}))
"""

BEFORE = {"machine": "2 cores, fp32, 2048-hidden draft, 16 heads, 32k draft vocab, 3 steps (issue 18)",
          "rows": [{"tokens": 1024, "seconds": 5.6, "peak RSS GB": 1.5}, {"tokens": 4096, "seconds": 24.8,
                   "peak RSS GB": 5.4}, {"tokens": 8192, "seconds": 73.1, "peak RSS GB": 16.1}],
          "32k estimate": "~250 GB (T^2 scores)"}


def run(hidden: int, T: int, device: str, chat: bool, check: bool, code: str | None = None) -> dict:
    """One forward in a fresh subprocess (against the eagle3lib in `code`, default this checkout): seconds,
    peak RSS, CUDA peak."""
    root = code or str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", CHILD, str(hidden), str(T), device, str(int(chat)),
                          str(int(check))], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent, env=env)
    if out.returncode != 0:
        raise SystemExit(f"bench_long child (Ht {hidden}, T {T}) failed (its error is above)")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,4096,8192,32768", help="tokens in the one sample")
    ap.add_argument("--hidden", type=int, default=2048, help="target hidden = draft hidden of the size rows")
    ap.add_argument("--goal", default="4096:32768", help="HIDDEN:TOKENS of the memory goal row ('' to skip)")
    ap.add_argument("--chat", action="store_true", help="also time each size with a chat-like loss mask")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--check-up-to", type=int, default=1024, help="compare with the reference up to this size")
    ap.add_argument("--name", default="long", help="result file benchmarks/results/<name>.json")
    ap.add_argument("--code", default=None, help="run the forward of the eagle3lib checkout in this directory "
                    "(an older commit, for before/after; no --chat before issue 18)")
    args = ap.parse_args()
    pick_device(args.device)
    plan = [(args.hidden, int(s)) for s in args.sizes.split(",") if s]
    if args.goal:
        plan.append(tuple(int(x) for x in args.goal.split(":")))
    rows = []
    for hidden, T in plan:
        for mode in ("dense", "chat") if args.chat else ("dense",):
            load = os.getloadavg()[0]
            r = run(hidden, T, args.device, mode == "chat", T <= args.check_up_to, args.code)
            rows.append({"Ht": hidden, "tokens": T, "mode": mode, "scored outputs": r["scored"],
                         "seconds": r["seconds"], "ms/token": 1e3 * r["seconds"] / T,
                         "GFLOP/s (dense work)": r["flops"] / r["seconds"] / 1e9,
                         "peak RSS GB": r["peak_rss"] / 1e9, "RSS before forward GB": r["rss_before"] / 1e9,
                         "cuda peak GB": r["cuda_peak"] / 1e9 if r["cuda_peak"] is not None else None,
                         "max |diff|": r["max_diff"], "load": round((load + os.getloadavg()[0]) / 2, 2),
                         "when": time.strftime("%H:%M")})
            print(f"  Ht={hidden} T={T} {mode}: {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / 1e9:.2f} GB",
                  flush=True)
    dense = [r for r in rows if r["mode"] == "dense" and r["Ht"] == args.hidden]
    goal = [r for r in rows if r["mode"] == "dense" and args.goal and (r["Ht"], r["tokens"]) == plan[-1]]
    finish(args.name, rows, {
        "device": args.device, "code": args.code or "this checkout", "dtype": "float32", "num_steps": 3, "draft_vocab": 32000, "before": BEFORE,
        "goal": "32k tokens at Ht 4096 <= 8 GB peak RSS; ms/token at the largest size <= 1.5x the smallest",
        "time_per_token_ratio": dense[-1]["ms/token"] / dense[0]["ms/token"] if len(dense) > 1 else None,
        "goal_peak_rss_gb": goal[-1]["peak RSS GB"] if goal else None, "threads": r["threads"],
        "load_note": "load = 1-min load average of this shared machine during the row (2 = both cores busy)"})


if __name__ == "__main__":
    main()
