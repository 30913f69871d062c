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
       [--device cpu|cuda] [--prefetch-bench [--seconds 60]]
--ab (issue 18): the largest size again with only_scored off/on x prefetch off/default, each in a fresh subprocess.
--device cuda: the replays run on the GPU (dtype auto = bf16 there), timed after torch.cuda.synchronize, with the
   peak GPU memory (torch.cuda.max_memory_allocated) and the dense-work FLOP/s against the device's datasheet peak.
--prefetch-bench (issue 18 item 3): dataset-scale replay at the seed's hidden size: 4 aux slots of 7168 in bf16
   (57 KB a token, no final state: the reference is the next token), T uniform in [192, 320], a draft of hidden
   1024 (8 heads x 128, intermediate 3584, 32k vocab) over the 7168-wide slots, the number of samples scaled from
   a calibration replay so that the compute side takes ~--seconds. Measured, each in a fresh process with the
   data dropped from the page cache: the read limit (open_dataset streaming every sample, nothing else), the
   compute limit (replay of samples already in memory, prefetch 0, scaled to the dataset's tokens; timed before
   and after the replays, as the load of a shared machine drifts: the faster run is the limit) and the
   replay from disk with a read-ahead of 0, 512 (two samples: the old default, counted in samples), 8192 (the
   default: one batch, `batch_tokens`) and 32768 tokens; the replay's fraction of the slower limit (1.0: reading
   fully hidden behind the forward, or the reverse).
   --disk-mbps R: every read (read limit and replays) is paced to a disk of R MB/s of hidden states, so that the
   read side can be made as slow as the forward, as on a GPU box whose forward is ~50x this CPU's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from _common import device_peak_flops, finish, machine_line, pick_device

HT, SLOTS, V, VD, I, T_LO, T_HI = 256, 4, 4096, 1024, 512, 96, 160
LAYOUT = ("embed", "layer_in.4", "layer_in.8", "layer_in.12")       # ids [-1, 3, 7, 11] of a 16-layer target
# the two synthetic worlds: the small one of benchmark 4 and the seed-sized hidden states of the prefetch benchmark
WORLDS = {
    "small": {"target_hidden": HT, "hidden": HT, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": I,
              "vocab": V, "draft_vocab": VD, "tokens": (T_LO, T_HI), "final_hidden": True, "target_lm_head": True},
    "seed7168": {"target_hidden": 7168, "hidden": 1024, "heads": 8, "kv_heads": 2, "head_dim": 128,
                 "intermediate": 3584, "vocab": 32000, "draft_vocab": 32000, "tokens": (192, 320),
                 "final_hidden": False, "target_lm_head": False},
}

CHILD = r"""
import json, os, sys, time
draft, target, data = sys.argv[1:4]
only_scored, device, mode = sys.argv[4] == "1", sys.argv[6], sys.argv[7]
prefetch = None if sys.argv[5] == "default" else int(sys.argv[5])
world, disk_rate = json.loads(sys.argv[8]), float(sys.argv[9]) * 1e6
def paced(samples):   # a disk of disk_rate bytes/s that reads only when asked: each sample takes its bytes' time
    it = iter(samples)
    while True:
        t0 = time.perf_counter()
        s = next(it, None)
        if s is None:
            return
        time.sleep(max(0.0, s.aux.numel() * s.aux.element_size() / disk_rate - (time.perf_counter() - t0)))
        yield s
def hwm():   # this process's own peak RSS in bytes
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
root = os.path.dirname(data)
for name in os.listdir(os.path.join(root, "hidden_states")):     # stream from disk, not from the page cache
    fd = os.open(os.path.join(root, "hidden_states", name), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
import torch
from _common import peak_bytes, reset_peak, sync
from eagle3lib.samples.readers import open_dataset
from eagle3lib.samples.sample import Sample
from eagle3lib.replay.run import load_setup, replay
if mode == "read":       # the read limit: stream every sample through the reader, touch its tensors, nothing else
    t0, tokens, nbytes = time.perf_counter(), 0, 0
    for s in (paced(open_dataset(data)) if disk_rate else open_dataset(data)):
        tokens += s.num_tokens
        nbytes += s.aux.numel() * s.aux.element_size()
        float(s.aux.sum(dtype=torch.float32))        # every byte read, however the reader maps the file
    print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": tokens, "bytes": nbytes,
                      "peak_rss": hwm(), "threads": torch.get_num_threads()}))
    sys.exit(0)
setup = load_setup(draft, target, device=device)
Ht, lay = world["target_hidden"], ("embed", "layer_in.4", "layer_in.8", "layer_in.12")
warm = [Sample(f"w{i}", torch.randint(0, world["vocab"], (256,)), torch.ones(256, dtype=torch.long),
               torch.randn(256, 4, Ht), lay) for i in range(2)]
replay(setup, warm, progress=False)      # first-call costs (kernel selection, allocator) outside the timing
if mode == "memory":     # the compute limit: samples already in memory (read untimed), no disk in the timing
    data = list(open_dataset(data))
elif disk_rate:
    data = paced(open_dataset(data))
base = hwm()
reset_peak(device) if device == "cuda" else None
sync(device)
t0 = time.perf_counter()
r = replay(setup, data, only_scored=only_scored, prefetch_tokens=prefetch, progress=False)
sync(device)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "tokens": int(r.per_sample.tokens.sum()), "samples": len(r.per_sample),
                  "skipped": len(r.skipped), "acc0": r.acc0, "peak_rss": hwm(), "rss_before": base,
                  "cuda_peak": peak_bytes(device) if device == "cuda" else None,
                  "dtype": str(setup.model.fc.weight.dtype).removeprefix("torch."),
                  "threads": torch.get_num_threads()}))
"""


def build(workdir: Path, n: int, world: dict | None = None) -> tuple[Path, Path, Path]:
    """The random draft, its target dir and the seed dataset of at least n samples (kept between runs)."""
    from safetensors.torch import save_file

    from eagle3lib.model.checkpoint import save_draft
    from eagle3lib.samples.readers import Sample
    from eagle3lib.samples.writers import write_seed_dataset
    from eagle3lib.model.draft import Eagle3Draft
    from eagle3lib.model.config import DraftConfig

    w = world or WORLDS["small"]
    ht, v, vd, (t_lo, t_hi) = w["target_hidden"], w["vocab"], w["draft_vocab"], w["tokens"]
    draft, target, data = workdir / "draft", workdir / "target", workdir / "data"
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": w["hidden"],
           "intermediate_size": w["intermediate"], "num_attention_heads": w["heads"],
           "num_key_value_heads": w["kv_heads"], "head_dim": w["head_dim"],
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 4096,
           "vocab_size": v, "draft_vocab_size": vd, "target_hidden_size": ht, "tie_word_embeddings": False,
           "num_aux_hidden_states": SLOTS,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 3, 7, 11], "use_aux_hidden_state": True}}
    g = torch.Generator().manual_seed(0)
    if not (draft / "model.safetensors").exists():
        model = Eagle3Draft(DraftConfig.from_dict(raw))
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.05, generator=g)
        model.d2t.copy_(torch.sort(torch.randperm(v, generator=g)[:vd]).values - torch.arange(vd))
        save_draft(model, raw, draft)
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                        "num_hidden_layers": 16, "hidden_size": w["hidden"],
                                                        "vocab_size": v}))
        weights = {"model.embed_tokens.weight": model.embed_tokens.weight.detach().clone()}
        if w["target_lm_head"]:
            weights["lm_head.weight"] = torch.randn(v, ht, generator=g) * 0.05
        save_file(weights, str(target / "model.safetensors"))
    have = sum(1 for _ in open(data / "train.jsonl")) if (data / "train.jsonl").exists() else 0
    if have < n or (world is None and have != n):
        def samples():
            for i in range(n):
                T = int(torch.randint(t_lo, t_hi + 1, (1,), generator=g))
                mask = torch.zeros(T, dtype=torch.long)
                mask[T // 4:] = 1
                yield Sample(f"s{i:05d}", torch.randint(0, v, (T,), generator=g), mask,
                             torch.randn(T, SLOTS, ht, generator=g).to(torch.bfloat16), LAYOUT,
                             torch.randn(T, ht, generator=g).to(torch.bfloat16) if w["final_hidden"] else None)
        write_seed_dataset(data, samples(), layout=LAYOUT, info={"num_target_layers": 16})
    return draft, target, data


def run(draft: Path, target: Path, index: Path, only_scored: bool = True, prefetch: int | None = None,
        device: str = "cpu", mode: str = "disk", world: dict | None = None, disk_mbps: float = 0) -> dict:
    """One replay (mode "disk"; "memory": samples read before the timing; "read": only the reader) in a fresh
    subprocess: seconds, tokens, peak RSS. prefetch: replay's prefetch_tokens (None: its default); disk_mbps > 0:
    reads paced to a disk of that many MB/s."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(draft), str(target), str(index), str(int(only_scored)),
                          "default" if prefetch is None else str(prefetch), device, mode,
                          json.dumps(world or WORLDS["small"]), str(disk_mbps)],
                         stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parent)
    if out.returncode != 0:
        raise SystemExit(f"bench_replay child ({mode}, prefetch {prefetch}) failed (its error is above)")
    return json.loads(out.stdout.strip().splitlines()[-1])


def replay_flops(world: dict, lengths: list[int], simulate: bool = True) -> float:
    """Dense work of replaying samples of these lengths: ttt_forward's FLOPs (bench_forward.forward_flops) per
    sample, teacher and draft-fed (chain simulation) passes; only_scored does less, so this is an upper bound."""
    from bench_forward import forward_flops
    from eagle3lib.model.config import DraftConfig
    cfg = DraftConfig.from_dict({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": world["hidden"],
                                 "intermediate_size": world["intermediate"], "num_attention_heads": world["heads"],
                                 "num_key_value_heads": world["kv_heads"], "head_dim": world["head_dim"],
                                 "vocab_size": world["vocab"], "draft_vocab_size": world["draft_vocab"],
                                 "target_hidden_size": world["target_hidden"], "num_aux_hidden_states": SLOTS})
    return (2 if simulate else 1) * sum(forward_flops(cfg, T, 3) for T in lengths)


def prefetch_bench(args) -> None:
    """Item 3 of issue 18: read limit, compute limit and replay with prefetch at the seed's hidden size."""
    world = WORLDS[args.world]
    work = Path(args.workdir) / args.world
    per_token = SLOTS * world["target_hidden"] * 2
    print(machine_line(args.device), flush=True)
    # calibration: 24 samples replayed from memory -> tokens/s of the compute side -> samples for ~args.seconds
    mean_t = sum(world["tokens"]) / 2
    n = args.prefetch_samples
    if not n:
        draft, target, data = build(work, 24, world)
        lines = (data / "train.jsonl").read_text().splitlines(keepends=True)
        calib = data / "calib.jsonl"
        calib.write_text("".join(lines[:24]))
        c = run(draft, target, calib, True, 0, args.device, "memory", world)
        n = max(24, int(args.seconds * c["tokens"] / c["seconds"] / mean_t))
        print(f"  calibration: {c['tokens'] / c['seconds']:.0f} tokens/s from memory -> {n} samples "
              f"(~{n * mean_t * per_token / 1e9:.2f} GB of hidden states)", flush=True)
    draft, target, data = build(work, n, world)
    lines = (data / "train.jsonl").read_text().splitlines(keepends=True)
    index = data / f"first_{n}.jsonl"
    index.write_text("".join(lines[:n]))
    disk_mb = sum((data / "hidden_states" / f"s{i:05d}.safetensors").stat().st_size for i in range(n)) / 1e6
    rows = []

    def add(what, r, prefetch=None, scale=1.0):
        rows.append({"what": what, "prefetch tokens": prefetch, "tokens": round(r["tokens"] * scale), "seconds": r["seconds"] * scale,
                     "tokens/s": r["tokens"] / r["seconds"], "MB/s of hidden states": r["tokens"] * per_token / r[
                         "seconds"] / 1e6, "peak RSS MB": r["peak_rss"] / 1e6, "load": round(os.getloadavg()[0], 2),
                     "when": time.strftime("%H:%M")})
        print(f"  {what} (prefetch tokens {prefetch}): {rows[-1]['seconds']:.1f} s", flush=True)
    disk = args.disk_mbps
    read = run(draft, target, index, mode="read", world=world, disk_mbps=disk)
    add("read limit (reader only, cold cache" + (f", paced to {disk:g} MB/s)" if disk else ")"), read)
    mem_n = min(n, 64)                                        # compute side on <= 64 samples held in memory
    mem_index = data / f"mem_{mem_n}.jsonl"
    mem_index.write_text("".join(lines[:mem_n]))
    comp = run(draft, target, mem_index, True, 0, args.device, "memory", world)
    add(f"compute limit (replay of {mem_n} in-memory samples, scaled to {read['tokens']} tokens)", comp, 0,
        read["tokens"] / comp["tokens"])
    for pre in (0, 512, None, 32768):            # None: replay's default, one batch (batch_tokens = 8192)
        add("replay from disk (cold cache)", run(draft, target, index, True, pre, args.device, "disk", world, disk),
            8192 if pre is None else pre)
    comp2 = run(draft, target, mem_index, True, 0, args.device, "memory", world)     # again: the load may drift
    add("compute limit again (after the replays)", comp2, 0, read["tokens"] / comp2["tokens"])
    rows.insert(2, rows.pop())
    read_s, comp_s = rows[0]["seconds"], min(rows[1]["seconds"], rows[2]["seconds"])   # the limit: its best run
    slower = max(read_s, comp_s)
    for r in rows[3:]:
        r["fraction of the slower limit"] = slower / r["seconds"]
    finish("replay_prefetch", rows, {
        "world": world, "samples": n, "data_on_disk_MB": disk_mb, "bytes_per_token": per_token,
        "device": args.device, "disk_paced_MBps": disk or None, "read_limit_s": read_s, "compute_limit_s": comp_s,
        "slower": "read" if read_s > comp_s else "compute",
        "replay_fraction_of_slower": {f"prefetch_tokens={r['prefetch tokens']}": r["fraction of the slower limit"]
                                      for r in rows[3:]},
        "note": "fraction = slower limit / replay time (compute limit: the faster of its runs before and after "
                "the replays, as a neighbour's load only slows a run down): 1.0 = the faster side fully hidden; the sum of both limits is what no overlap costs"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", default="500,2000", help="dataset sizes replayed (prefixes of the largest)")
    ap.add_argument("--workdir", default="/tmp/e3bench_replay")
    ap.add_argument("--ab", action="store_true", help="also replay the largest size without only_scored and/or "
                    "without prefetching (issue 18), interleaved with the default")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--prefetch-bench", action="store_true", help="the read / compute limits and prefetching at "
                    "the seed's hidden size (issue 18 item 3) instead of benchmark 4")
    ap.add_argument("--seconds", type=float, default=60, help="--prefetch-bench: target compute time")
    ap.add_argument("--prefetch-samples", type=int, default=0, help="--prefetch-bench: samples (0: from --seconds)")
    ap.add_argument("--disk-mbps", type=float, default=0, help="--prefetch-bench: pace every read to a disk of this "
                    "many MB/s (0: the real disk, here mostly the page cache's speed)")
    ap.add_argument("--world", default="seed7168", choices=sorted(WORLDS), help="--prefetch-bench: data and draft "
                    "sizes (small: benchmark 4's, for the smoke test)")
    args = ap.parse_args()
    pick_device(args.device)
    if args.prefetch_bench:
        return prefetch_bench(args)
    sizes = sorted(int(x) for x in args.samples.split(","))
    draft, target, data = build(Path(args.workdir), sizes[-1])
    lines = (data / "train.jsonl").read_text().splitlines(keepends=True)
    rows = []
    plan = [(n, True, None) for n in sizes]                  # None: replay's default read-ahead
    if args.ab:                                              # variants of the largest size, interleaved
        plan += [(sizes[-1], o, p) for o, p in ((False, 0), (True, 0), (False, None), (True, None))]
    for n, only, pre in plan:
        index = data / f"first_{n}.jsonl"                     # a dataset of the first n samples, same files
        index.write_text("".join(lines[:n]))
        load = os.getloadavg()[0]
        r = run(draft, target, index, only, pre, args.device)
        rows.append({"samples": n, "only_scored": only, "prefetch tokens": 8192 if pre is None else pre, "tokens": r["tokens"], "seconds": r["seconds"],
                     "tokens/s": r["tokens"] / r["seconds"], "peak RSS MB": r["peak_rss"] / 1e6,
                     "RSS before replay MB": r["rss_before"] / 1e6,
                     "replay RSS growth MB": (r["peak_rss"] - r["rss_before"]) / 1e6,
                     "data on disk MB": sum((data / "hidden_states" / f"s{i:05d}.safetensors").stat().st_size
                                            for i in range(n)) / 1e6, "load avg before": load,
                     "cuda peak MB": r["cuda_peak"] / 1e6 if r["cuda_peak"] is not None else None})
        if args.device == "cuda":
            fl = replay_flops(WORLDS["small"], [len(json.loads(x)["input_ids"]) for x in lines[:n]])
            pk = device_peak_flops(torch.cuda.get_device_name(0), r["dtype"])
            rows[-1]["dense-work GFLOP/s"] = fl / r["seconds"] / 1e9
            rows[-1]["of device peak"] = fl / r["seconds"] / pk if pk else None
    small, big = rows[0], rows[len(sizes) - 1]
    finish("replay", rows, {"dataset": {"format": "seed", "target_hidden": HT, "aux_slots": SLOTS, "dtype": "bf16",
                                        "tokens_per_sample": [T_LO, T_HI], "final_hidden": True},
                            "draft": {"hidden": HT, "intermediate": I, "heads": 4, "draft_vocab": VD,
                                      "target_vocab": V, "num_steps": 3, "simulate": True, "dtype": "float32"},
                            "goal": "peak RSS flat as the dataset grows",
                            "peak_rss_ratio": big["peak RSS MB"] / small["peak RSS MB"],
                            "data_ratio": big["data on disk MB"] / small["data on disk MB"],
                            "tokens_per_s": big["tokens/s"], "threads": r["threads"], "device": args.device,
                            "ab_seconds": {f"only_scored={x['only_scored']},prefetch_tokens={x['prefetch tokens']}": x["seconds"]
                                           for x in rows[len(sizes):]}})


if __name__ == "__main__":
    main()
