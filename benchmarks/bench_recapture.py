"""Benchmark (issue 29): recapture through a streamed target vs the fully loaded one, on a ~1.5 GB synthetic target.

The script writes a random Llama target (fp32, sharded safetensors; 24 layers of H 1024 by default) and captures the
same sequences twice, each in a fresh process: `load_target_model(stream=False)` + `capture_batch` (the whole model
loaded) and `load_target_model(stream=True)` + `capture_layerwise` (each layer read once, run on every batch, dropped).
A third process reads the weight files' bytes (the disk's rate). Each kind runs with the page cache dropped for the
files first (posix_fadvise DONTNEED, "cold-ish") and warm; a shallower capture (boundaries to mid-depth) shows the
layers past the deepest boundary are never read. Ratios are side by side in one run, so the machine's load moves both.
Goals: streamed peak RSS <= 0.35x the target's size, streamed time <= 1.3x the full-load capture.
Usage: .venv/bin/python benchmarks/bench_recapture.py [--layers 24] [--hidden 1024] [--samples 8] [--tokens 256]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from _common import finish, machine_line

CHILD = r"""
import json, os, sys, time
mode, path, temp, only, samples, tokens, batch, out = sys.argv[1:9]
def hwm():   # this process's own peak RSS
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
import torch
from pathlib import Path
files = sorted(Path(path).glob("*.safetensors"))
if temp == "cold":
    for f in files:
        fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
if mode != "read":
    from eagle3lib.hidden.capture import capture_batch, load_target_model
    from eagle3lib.hidden.layerwise import capture_layerwise
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(0)
    V = json.loads((Path(path) / "config.json").read_text())["vocab_size"]
    seqs = [torch.randint(0, V, (int(tokens) - 8 * i,), generator=g) for i in range(int(samples))]
    import transformers
    transformers.LlamaForCausalLM   # imported before the clock and the baseline: both modes pay it the same
base = hwm()
t0 = time.perf_counter()
extra = {}
if mode == "read":
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                n += len(chunk)
    extra["bytes"] = n
else:
    model = load_target_model(path, stream=(mode == "streamed"))
    t_load = time.perf_counter() - t0
    names = only.split(",")
    run = capture_layerwise if mode == "streamed" else capture_batch
    caps = run(model, seqs, only=names, batch_size=int(batch))
    extra["load_s"] = t_load
    s = getattr(model, "eagle3lib_stream", None)
    extra["unit_loads"] = s.loads if s is not None else None
    extra["bytes_loaded"] = s.bytes_loaded if s is not None else None
    save_file({f"{i}.{n}": c[n].contiguous() for i, c in enumerate(caps) for n in names}, out)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss": hwm(), "rss_before": base, **extra}))
"""


def build(folder: Path, layers: int, hidden: int, inter: int, vocab: int, per_shard: int = 4) -> int:
    """A random Llama target in sharded safetensors (written once, reused); returns the weight bytes."""
    from safetensors.torch import save_file

    if not (folder / "config.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        heads, kv, hd = hidden // 64, max(1, hidden // 256), 64
        g = torch.Generator().manual_seed(0)

        def w(*s):
            return torch.randn(*s, generator=g) * 0.02

        shards, weight_map = [], {}
        layer_ids = list(range(layers))
        groups = [layer_ids[i:i + per_shard] for i in range(0, layers, per_shard)]
        for k, group in enumerate(groups):
            sd = {}
            if k == 0:
                sd["model.embed_tokens.weight"] = w(vocab, hidden)
            for i in group:
                p = f"model.layers.{i}."
                sd.update({p + "input_layernorm.weight": torch.ones(hidden),
                           p + "post_attention_layernorm.weight": torch.ones(hidden),
                           p + "self_attn.q_proj.weight": w(heads * hd, hidden),
                           p + "self_attn.k_proj.weight": w(kv * hd, hidden),
                           p + "self_attn.v_proj.weight": w(kv * hd, hidden),
                           p + "self_attn.o_proj.weight": w(hidden, heads * hd),
                           p + "mlp.gate_proj.weight": w(inter, hidden), p + "mlp.up_proj.weight": w(inter, hidden),
                           p + "mlp.down_proj.weight": w(hidden, inter)})
            if k == len(groups) - 1:
                sd["model.norm.weight"] = torch.ones(hidden)
                sd["lm_head.weight"] = w(vocab, hidden)
            name = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
            save_file(sd, str(folder / name), metadata={"format": "pt"})
            weight_map.update({key: name for key in sd})
            shards.append(name)
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        (folder / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "dtype": "float32"}))
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def child(mode: str, target: Path, temp: str, only: str, a, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": str(a.threads)}
    p = subprocess.run([sys.executable, "-c", CHILD, mode, str(target), temp, only, str(a.samples), str(a.tokens),
                        str(a.batch), str(out)], capture_output=True, text=True, cwd=Path(__file__).parent, env=env)
    if p.returncode:
        sys.exit(f"{mode} child failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def max_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    assert x.keys() == y.keys()
    return max(float((x[k] - y[k]).abs().max()) for k in x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=256, help="length of the longest sequence (others 8 shorter each)")
    ap.add_argument("--batch", type=int, default=4, help="sequences per forward")
    ap.add_argument("--repeats", type=int, default=3, help="read/full/streamed triples per row (medians)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per child (1: a busy neighbour's core "
                                                            "does not stall every op at a barrier, NOTES.md 1)")
    ap.add_argument("--workdir", default="/tmp/e3bench_recapture")
    ap.add_argument("--name", default="recapture")
    a = ap.parse_args()
    L = a.layers
    work = Path(a.workdir)
    target = work / f"llama_L{L}_h{a.hidden}"
    size = build(target, L, a.hidden, a.intermediate, a.vocab)
    deep = ",".join(["embed", "layer_in.2", f"layer_in.{L // 2}", f"layer_in.{L - 3}", "final_postnorm"])
    mid = ",".join(["embed", "layer_in.2", f"layer_in.{L // 2}"])
    print(machine_line())
    rows, times = [], {}
    for temp, only, label in (("cold", deep, "to final norm"), ("warm", deep, "to final norm"),
                              ("warm", mid, f"to layer_in.{L // 2}")):
        runs = {"read": [], "full": [], "streamed": []}
        for r in range(a.repeats):     # read, full, streamed alternate: each pair sees the same load from others
            load0 = os.getloadavg()[0]
            runs["read"].append(child("read", target, temp, only, a, work / "read.safetensors"))
            for mode in ("full", "streamed"):
                runs[mode].append(child(mode, target, temp, only, a, work / f"{mode}.safetensors"))
            diff = max_diff(work / "full.safetensors", work / "streamed.safetensors")
        read_s = statistics.median(x["seconds"] for x in runs["read"])
        for mode in ("full", "streamed"):
            sec = statistics.median(x["seconds"] for x in runs[mode])
            peak = max(x["peak_rss"] for x in runs[mode])
            over = max(x["peak_rss"] - x["rss_before"] for x in runs[mode])
            times[(temp, label, mode)] = sec
            rows.append({"cache": temp, "boundaries": label, "target load": mode, "seconds": sec,
                         "load s": statistics.median(x["load_s"] for x in runs[mode]),
                         "x full": sec / times[(temp, label, "full")], "x read": sec / read_s,
                         "read MB/s": size / 1e6 / read_s, "peak RSS MB": peak / 1e6,
                         "RSS / target": peak / size, "RSS over baseline / target": over / size,
                         "weights read MB": (runs[mode][0]["bytes_loaded"] or size) / 1e6,
                         "max |diff|": diff, "load avg": load0})
    cols = ["cache", "boundaries", "target load", "seconds", "x full", "x read", "read MB/s", "peak RSS MB",
            "RSS / target", "RSS over baseline / target", "weights read MB", "max |diff|"]
    deep_rows = [r for r in rows if r["target load"] == "streamed" and r["boundaries"] == "to final norm"]
    finish(a.name, rows, {
        "target_bytes": size, "layers": L, "hidden": a.hidden, "samples": a.samples, "tokens": a.tokens,
        "batch": a.batch, "repeats": a.repeats, "threads": a.threads,
        "goal": "streamed peak RSS <= 0.35x the target, streamed time <= 1.3x the full-load capture",
        "streamed_over_full": {r["cache"]: r["x full"] for r in deep_rows},
        "streamed_rss_over_target": max(r["RSS / target"] for r in deep_rows),
        "streamed_rss_over_baseline_over_target": max(r["RSS over baseline / target"] for r in deep_rows),
        "max_abs_diff": max(r["max |diff|"] for r in rows)}, columns=cols)


if __name__ == "__main__":
    main()
