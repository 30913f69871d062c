"""Benchmark (issue 15): every config-level contract check on a draft of a 7168-hidden target, configs and tensor
headers only. The draft's weights are a sparse safetensors file (valid header, holes for the data; only the small
d2t / t2d maps written), so nothing but the header and the vocab maps is read.
Goal: all checks in < 2 s in a fresh process (imports + first run); the median of warm repeats is reported too.
Usage: .venv/bin/python benchmarks/bench_checks.py [--hidden 7168] [--repeats 3] [--workdir /tmp/e3bench_checks]
"""
from __future__ import annotations

import argparse
import json
import struct
import time
from pathlib import Path

import torch
from _common import finish

BYTES = {"BF16": 2, "I64": 8, "BOOL": 1}


def sparse_safetensors(path: Path, shapes: dict[str, tuple[tuple[int, ...], str]], data: dict[str, bytes]) -> int:
    """A safetensors file with these tensor headers, the bytes in `data` written and every other tensor left
    unwritten (a sparse hole); returns its logical size."""
    header, off = {}, 0
    for name, (shape, dtype) in shapes.items():
        n = BYTES[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + off)
        for name, blob in data.items():
            f.seek(8 + len(raw) + header[name]["data_offsets"][0])
            f.write(blob)
    return 8 + len(raw) + off


def write_world(root: Path, H: int) -> dict:
    """Draft + target configs of a Kimi/DeepSeek-sized pair and the draft's header-only weights."""
    L, V, Vd, nh, nkv, hd, inter = 61, 163840, 32000, 64, 8, 128, 18432
    if H < 1024:                                  # the smoke test's small size: small vocabularies too
        V, Vd, nh, nkv, hd, inter = 4096, 512, 4, 2, H // 4, 2 * H
    rope = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32,
            "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
    target = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": L,
              "hidden_size": H, "vocab_size": V, "max_position_embeddings": 131072, "rope_theta": 50000.0,
              "rope_scaling": rope, "quantization_config": {"quant_method": "fp8"}}
    draft = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
             "intermediate_size": inter, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
             "num_hidden_layers": 1, "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "rope_scaling": rope,
             "max_position_embeddings": 131072, "vocab_size": V, "draft_vocab_size": Vd, "target_hidden_size": H,
             "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True}}
    shapes = {"fc.weight": ((H, 3 * H), "BF16"), "norm.weight": ((H,), "BF16"), "lm_head.weight": ((Vd, H), "BF16"),
              "d2t": ((Vd,), "I64"), "t2d": ((V,), "BOOL")}
    for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm"):
        shapes[f"midlayer.{n}.weight"] = ((H,), "BF16")
    for n, o, i in (("q", nh * hd, 2 * H), ("k", nkv * hd, 2 * H), ("v", nkv * hd, 2 * H), ("o", H, nh * hd)):
        shapes[f"midlayer.self_attn.{n}_proj.weight"] = ((o, i), "BF16")
    for n, o, i in (("gate", inter, H), ("up", inter, H), ("down", H, inter)):
        shapes[f"midlayer.mlp.{n}_proj.weight"] = ((o, i), "BF16")
    for d, raw in (("draft", draft), ("target", target)):
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "config.json").write_text(json.dumps(raw))
    used = torch.sort(torch.randperm(V, generator=torch.Generator().manual_seed(0))[:Vd]).values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    vocab = {"d2t": (used - torch.arange(Vd)).numpy().tobytes(), "t2d": t2d.numpy().tobytes()}   # a real map
    size = sparse_safetensors(root / "draft" / "model.safetensors", shapes, vocab)
    return {"draft": root / "draft", "target": root / "target", "weights_GB": size / 1e9, "L": L, "V": V}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/e3bench_checks")
    ap.add_argument("--name", default="checks")
    a = ap.parse_args()
    t0 = time.perf_counter()
    from eagle3lib.causes import raised
    from eagle3lib.checks.judge import run_checks
    t_import = time.perf_counter() - t0
    w = write_world(Path(a.workdir) / f"h{a.hidden}", a.hidden)
    launch = (f"python -m sglang.launch_server --model-path {w['target']} --speculative-draft-model-path "
              f"{w['draft']} --speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 1 "
              "--speculative-num-draft-tokens 4")
    rows, times = [], []
    for i in range(a.repeats + 1):                      # run 0 warms caches and lazy imports
        t = time.perf_counter()
        f = run_checks(draft=w["draft"], target=w["target"], launch=launch, engine="sglang", engine_version="0.5.6")
        dt = time.perf_counter() - t
        if i:
            times.append(dt)
        rows.append({"run": "warm-up" if i == 0 else i, "seconds": dt, "findings": len(f), "raised": len(raised(f))})
    med = sorted(times)[len(times) // 2]
    first = t_import + rows[0]["seconds"]             # what a fresh `python -c "run_checks(...)"` pays
    finish(a.name, rows, {"hidden": a.hidden, "num_layers": w["L"], "vocab": w["V"],
                          "draft_weights_GB_logical": w["weights_GB"], "import_s": t_import,
                          "first_run_with_import_s": first, "median_s": med, "goal_s": 2.0,
                          "meets_goal": first < 2.0,
                          "raised": sorted({x.cause for x in raised(f)})})


if __name__ == "__main__":
    main()
