"""Benchmark 3 (issue 9): loading a 4096-hidden draft (~1 GB bf16) vs reading the file's bytes; peak RSS.

Each measurement runs in a fresh subprocess so its peak RSS is its own. "cold-ish": the page cache is
dropped for the file with posix_fadvise(DONTNEED) first; "warm": the file was just read.
Goal: eagle3lib load <= 1.5x read time, peak RSS <= 1.3x the weight bytes.
Usage: .venv/bin/python benchmarks/bench_load.py [--hidden 4096] [--repeats 3] [--workdir /tmp/e3bench_load]
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

from _common import finish

CHILD = r"""
import json, os, sys, time
mode, path, target, temp = sys.argv[1:5]
def hwm():   # this process's own peak RSS (ru_maxrss is inherited across fork+exec on Linux)
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
import torch
from eagle3lib.model.checkpoint import load_draft
if mode == "load":   # warm the code paths (imports, meta-device dispatch) on the tiny draft
    load_draft(sys.argv[5], target=sys.argv[6])
if temp == "cold":
    for f in list(__import__("pathlib").Path(path).glob("*.safetensors")) + [__import__("pathlib").Path(target) / "model.safetensors"]:
        fd = os.open(f, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)
base = hwm()
t0 = time.perf_counter()
touched = None
if mode == "read":
    n = 0
    for name in (os.path.join(path, "model.safetensors"), os.path.join(target, "model.safetensors")):
        with open(name, "rb") as f:
            while chunk := f.read(1 << 24):
                n += len(chunk)
else:
    d = load_draft(path, target=target)
    t_load = time.perf_counter() - t0
    # safetensors maps the file: pages are read on first use; touch every weight once to pay for it here
    for t in list(d.model.parameters()) + list(d.model.buffers()):
        t.view(-1)[:: max(1, 4096 // t.element_size())].sum()
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "load_only": t_load if mode == "load" else dt, "peak_rss": hwm(), "rss_before": base}))
"""

def build(workdir: Path, hidden: int) -> tuple[Path, Path, int]:
    """A bf16 SpecForge-format draft of the given width (3 aux slots, 32k vocab) and a tiny target."""
    from safetensors.torch import save_file

    from eagle3lib.model.checkpoint import save_draft
    from eagle3lib.model.config import config_to_dict
    from bench_forward import make_cfg
    cfg = make_cfg(hidden)
    draft, target = workdir / "draft", workdir / "target"
    if not (draft / "model.safetensors").exists():
        nh = cfg.num_attention_heads
        H, I, Vd = hidden, cfg.intermediate_size, cfg.draft_vocab_size
        q, kv = nh * 128, cfg.num_key_value_heads * 128
        g = torch.Generator().manual_seed(0)

        def w(*s):
            return (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)
        sd = {"fc.weight": w(H, 3 * H), "midlayer.hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16),
              "midlayer.input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
              "midlayer.post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
              "midlayer.self_attn.q_proj.weight": w(q, 2 * H), "midlayer.self_attn.k_proj.weight": w(kv, 2 * H),
              "midlayer.self_attn.v_proj.weight": w(kv, 2 * H), "midlayer.self_attn.o_proj.weight": w(H, q),
              "midlayer.mlp.gate_proj.weight": w(I, H), "midlayer.mlp.up_proj.weight": w(I, H),
              "midlayer.mlp.down_proj.weight": w(H, I), "norm.weight": torch.ones(H, dtype=torch.bfloat16),
              "lm_head.weight": w(Vd, H), "d2t": torch.zeros(Vd, dtype=torch.long),
              "t2d": torch.ones(Vd, dtype=torch.bool)}
        save_draft(sd, config_to_dict(cfg), draft)
        target.mkdir(parents=True, exist_ok=True)
        (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": H,
                                                        "num_hidden_layers": 32, "vocab_size": Vd}))
        save_file({"model.embed_tokens.weight": w(Vd, H)}, str(target / "model.safetensors"))
    weights = (draft / "model.safetensors").stat().st_size + (target / "model.safetensors").stat().st_size
    return draft, target, weights


def run(mode: str, draft: Path, target: Path, temp: str, tiny: tuple[Path, Path, int]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(draft), str(target), temp, str(tiny[0]),
                          str(tiny[1])], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--workdir", default="/tmp/e3bench_load")
    ap.add_argument("--repeats", type=int, default=3, help="read/load pairs per cache state (medians reported)")
    args = ap.parse_args()
    draft, target, weights = build(Path(args.workdir) / f"h{args.hidden}", args.hidden)
    tiny = build(Path(args.workdir) / "tiny", 256)
    rows = []
    for temp in ("cold", "warm"):
        pairs = []
        for _ in range(args.repeats):          # read and load alternate, so both see the same load from other jobs
            load0 = os.getloadavg()[0]
            pairs.append((run("read", draft, target, temp, tiny), run("load", draft, target, temp, tiny), load0))
        ratios = [ld["seconds"] / rd["seconds"] for rd, ld, _ in pairs]
        rss = [(ld["peak_rss"] - ld["rss_before"]) / weights for _, ld, _ in pairs]
        rows.append({"cache": temp, "read s": statistics.median(rd["seconds"] for rd, _, _ in pairs),
                     "load_draft s": statistics.median(ld["load_only"] for _, ld, _ in pairs),
                     "load+touch s": statistics.median(ld["seconds"] for _, ld, _ in pairs),
                     "load/read": statistics.median(ratios), "load/read max": max(ratios),
                     "weights MB": weights / 1e6, "peak RSS MB": max(ld["peak_rss"] for _, ld, _ in pairs) / 1e6,
                     "RSS over baseline / weights": max(rss), "load": statistics.mean(x for _, _, x in pairs)})
    finish("load", rows, {"hidden": args.hidden, "repeats": args.repeats,
                          "goal": "load/read <= 1.5, RSS/weights <= 1.3",
                          "load_over_read_warm": rows[-1]["load/read"], "load_over_read_cold": rows[0]["load/read"],
                          "rss_over_weights": max(r["RSS over baseline / weights"] for r in rows),
                          "load_note": "load = 1-min load average of this 2-core machine (other jobs run too)"})


if __name__ == "__main__":
    main()
