"""One case read once (issue 49): what a `diagnose` run opens, how long it takes and its peak RSS, on the demo
world and on a seed-scale synthetic case, on a baseline commit and on this working tree, interleaved.

Cases:
  a  the embedded demo world (`eagle3lib.demo.world.ensure_world()`): draft, target, seed data, held-out data,
     the seed's SGLang launch (--speculative-num-draft-tokens 16) naming the demo's own folders, sglang 0.5.6.
  b  a synthetic case of Kimi-K2.5's shape, written into --out (default: a temp dir, removed afterwards), seeds
     fixed, random weights (it measures reading and memory, not accuracy):
     target  DeepseekV3ForCausalLM (MLA as Kimi-K2.x: 64 heads, q_lora 1536, kv_lora 512, rope 64, nope 128,
             v 128), hidden 7168, vocab 163840, 4 layers, all dense (first_k_dense_replace = 4: no MoE) with the
             MLP cut to intermediate 2048 (Kimi: 18432 dense, 384 experts), bf16, 3 shards (embedding / layers +
             final norm / lm_head) with model.safetensors.index.json, a WordLevel tokenizer of 163840 entries;
     draft   LlamaForCausalLMEagle3 (SpecForge names), hidden 7168, 64 heads, 8 KV heads, intermediate 2048,
             vocab 163840, draft vocab 32000 (d2t, t2d), 4 aux slots: ids [-1, 0, 1, 2] = embed, layer_in.1,
             layer_in.2, layer_in.3 (the seed's layout: the embedding and three layers), fc 4 x 7168 -> 7168, bf16;
     data    3 seed-format samples of 2048 tokens (train.jsonl + hidden_states/*.safetensors: 4 aux slots and the
             final state, bf16) declaring that layout.
     `--tiny` shrinks it (hidden 256, vocab 4096, draft vocab 512, 2 samples of 64 tokens) and skips the baseline.

Every run is a fresh subprocess (PYTHONPATH = its tree) calling `eagle3lib.diagnose.parts.run(Inputs(...))` in
process (`diagnose.run` before 9bff3ec) with the case's paths (diagnose's defaults otherwise: n 32, dtype float32), under `strace -f -e
openat` when strace works here. Counted per file under the case's root (and anything under the repository's
data/, so a stray read of the demo world shows), during the diagnose call only (imports excluded):
  os opens     openat calls that succeeded (strace): every reader, Python, Rust (safetensors, tokenizers) or C
  py opens     Python `open` audit events (the hook `eagle3lib.opened` uses; `opened.recording()` gives the set)
  safe_open    safetensors.safe_open calls (transformers' and eagle3lib's weight reads, load_file)
  json.load    json.load calls on that file (a parse; `json.loads(path.read_text())` shows only as an open)
  datasets     eagle3lib.samples.readers.open_dataset calls on that path
Time: the diagnose call (s) and the child's whole life (wall s); peak RSS: the child's VmHWM. A watchdog thread in
the child stops it (exit 86, recorded) when its RSS passes --rss-limit-gb. Per case, the ratios current /
baseline of time, peak RSS and total opens (medians over --repeats rounds, baseline then current in each round).
Usage: .venv/bin/python benchmarks/bench_case.py [--cases a,b] [--baseline 2ba9f10] [--repeats 1] [--out DIR]
       [--keep] [--tiny] [--rss-limit-gb 10] [--dtype float32] [--name case]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from _common import finish, machine_line

REPO = Path(__file__).resolve().parents[1]
SEED_LAUNCH = ("python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
               "--speculative-draft-model-path {draft} --speculative-num-steps 1 --speculative-eagle-topk 1 "
               "--speculative-num-draft-tokens 16")
FULL = dict(hidden=7168, vocab=163840, draft_vocab=32000, layers=4, heads=64, q_lora=1536, kv_lora=512, rope=64,
            nope=128, v=128, intermediate=2048, draft_heads=64, draft_kv_heads=8, draft_intermediate=2048,
            samples=3, tokens=2048)
TINY = dict(hidden=256, vocab=4096, draft_vocab=512, layers=4, heads=4, q_lora=64, kv_lora=32, rope=16, nope=32,
            v=32, intermediate=512, draft_heads=4, draft_kv_heads=2, draft_intermediate=512, samples=2, tokens=64)
LAYER_IDS = [-1, 0, 1, 2]                                       # SGLang's convention: -1 the embedding, i: out of i
LAYOUT = ("embed", "layer_in.1", "layer_in.2", "layer_in.3")
COUNTS = ("os opens", "py opens", "safe_open", "json.load", "datasets")

# --- case (b): the synthetic seed-scale case ---------------------------------------------------------------------


def _rand(shape, gen, std=0.02, dtype=None):
    """Normal(0, std) in dtype (bf16), drawn in fp32 chunks of 2^26 values: the writer never holds an fp32 copy."""
    import torch
    out = torch.empty(shape, dtype=dtype or torch.bfloat16)
    flat, step = out.view(-1), 1 << 26
    for i in range(0, flat.numel(), step):
        n = min(step, flat.numel() - i)
        flat[i:i + n] = torch.empty(n, dtype=torch.float32).normal_(0, std, generator=gen)
    return out


def write_target(folder: Path, s: dict, gen) -> dict:
    """A DeepseekV3ForCausalLM (MLA, dense) of s's sizes in 3 safetensors shards + index, config and tokenizer."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers

    cfg = transformers.DeepseekV3Config(
        vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["intermediate"],
        moe_intermediate_size=256, num_hidden_layers=s["layers"], first_k_dense_replace=s["layers"],
        num_attention_heads=s["heads"], num_key_value_heads=s["heads"], n_routed_experts=8, n_shared_experts=1,
        num_experts_per_tok=2, n_group=1, topk_group=1, q_lora_rank=s["q_lora"], kv_lora_rank=s["kv_lora"],
        qk_rope_head_dim=s["rope"], qk_nope_head_dim=s["nope"], v_head_dim=s["v"], max_position_embeddings=8192,
        rope_theta=50000.0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    cfg.dtype = torch.bfloat16
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    del model
    shards = [[n for n in shapes if n == "model.embed_tokens.weight"],
              [n for n in shapes if n not in ("model.embed_tokens.weight", "lm_head.weight")],
              [n for n in shapes if n == "lm_head.weight"]]
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    for i, names in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for n in names:
            norm = n.endswith("norm.weight")
            tensors[n] = torch.ones(shapes[n], dtype=torch.bfloat16) if norm else _rand(shapes[n], gen)
            weight_map[n] = fname
            total += tensors[n].numel() * 2
        save_file(tensors, str(folder / fname), metadata={"format": "pt"})
        del tensors
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1) + "\n")
    cfg.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(s["vocab"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "t0", "eos_token": "t1", "unk_token": "t0",
         "model_max_length": 8192}, indent=1) + "\n")
    return {"parameters": total // 2}


def write_draft(folder: Path, s: dict, gen) -> dict:
    """An EAGLE-3 draft (SpecForge names, LlamaForCausalLMEagle3 config) of s's sizes, 4 aux slots."""
    import torch
    from safetensors.torch import save_file

    H, V, Vd, nh, nkv, inter = (s["hidden"], s["vocab"], s["draft_vocab"], s["draft_heads"], s["draft_kv_heads"],
                                s["draft_intermediate"])
    hd, k = H // nh, len(LAYER_IDS)
    raw = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
           "intermediate_size": inter, "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
           "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 50000.0, "hidden_act": "silu",
           "max_position_embeddings": 8192, "vocab_size": V, "draft_vocab_size": Vd, "target_hidden_size": H,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "num_aux_hidden_states": k,
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": LAYER_IDS, "use_aux_hidden_state": True}}
    used = torch.sort(torch.randperm(V, generator=gen)[:Vd]).values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[used] = True
    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)     # noqa: E731
    tensors = {"fc.weight": _rand((H, k * H), gen), "midlayer.hidden_norm.weight": ones(H),
               "midlayer.input_layernorm.weight": ones(H), "midlayer.post_attention_layernorm.weight": ones(H),
               "midlayer.self_attn.q_proj.weight": _rand((nh * hd, 2 * H), gen),
               "midlayer.self_attn.k_proj.weight": _rand((nkv * hd, 2 * H), gen),
               "midlayer.self_attn.v_proj.weight": _rand((nkv * hd, 2 * H), gen),
               "midlayer.self_attn.o_proj.weight": _rand((H, nh * hd), gen),
               "midlayer.mlp.gate_proj.weight": _rand((inter, H), gen),
               "midlayer.mlp.up_proj.weight": _rand((inter, H), gen),
               "midlayer.mlp.down_proj.weight": _rand((H, inter), gen), "norm.weight": ones(H),
               "lm_head.weight": _rand((Vd, H), gen), "d2t": used - torch.arange(Vd), "t2d": t2d}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    return {"parameters": sum(t.numel() for n, t in tensors.items() if t.is_floating_point())}


def write_data(folder: Path, s: dict, gen) -> None:
    """s["samples"] seed-format samples of s["tokens"] tokens: 4 aux slots + the final state, bf16."""
    import torch
    from eagle3lib.samples.sample import Sample
    from eagle3lib.samples.writers import write_seed_dataset

    T, H = s["tokens"], s["hidden"]

    def samples():
        for i in range(s["samples"]):
            ids = torch.randint(2, s["vocab"], (T,), generator=gen)
            mask = torch.ones(T, dtype=torch.long)
            mask[: T // 8] = 0                                   # a prompt, then the supervised answer
            yield Sample(f"case-{i:03d}", ids, mask, _rand((T, len(LAYOUT), H), gen, std=1.0), LAYOUT,
                         _rand((T, H), gen, std=1.0), f"mem:{i}")
    write_seed_dataset(folder, samples(), layout=LAYOUT, info={"num_target_layers": s["layers"]})


def write_case(root: Path, s: dict, seed: int = 0) -> dict:
    """Target, draft and data of case (b) under root; -> their paths and sizes."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    tgt = write_target(root / "target", s, gen)
    drf = write_draft(root / "draft", s, gen)
    write_data(root / "data", s, gen)
    size = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
            for p in (root / "target", root / "draft", root / "data")}
    return {"root": str(root), "draft": str(root / "draft"), "target": str(root / "target"),
            "train_data": str(root / "data"), "sizes": s, "seed": seed, "write_s": time.perf_counter() - t0,
            "bytes": size, "target_parameters": tgt["parameters"], "draft_parameters": drf["parameters"]}


# --- the child: one diagnose, counted ----------------------------------------------------------------------------

CHILD = r"""
import dataclasses, json, os, sys, threading, time
from collections import Counter
spec = json.loads(sys.argv[1])
out_path = spec["out"]
roots = tuple(r.rstrip("/") + "/" for r in spec["roots"])
limit = int(spec["rss_limit_gb"] * 2**30)

def status(field):
    fd = os.open("/proc/self/status", os.O_RDONLY)
    try:
        text = os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)
    return next(int(ln.split()[1]) * 1024 for ln in text.splitlines() if ln.startswith(field + ":"))

def watchdog():
    while True:
        rss = status("VmRSS")
        if limit and rss > limit:
            import traceback
            main = sys._current_frames().get(threading.main_thread().ident)
            stack = [ln.strip() for ln in traceback.format_stack(main)[-14:]] if main else []
            with open(out_path, "w") as f:
                json.dump({"killed": f"RSS {rss / 2**30:.2f} GB passed the limit {spec['rss_limit_gb']} GB",
                           "rss_at_kill": rss, "peak_rss": status("VmHWM"), "phase": phase[0], "stack": stack}, f)
            os._exit(86)
        time.sleep(0.1)

phase = ["imports"]
threading.Thread(target=watchdog, daemon=True).start()
counts = {k: Counter() for k in ("py opens", "safe_open", "json.load", "datasets")}
active = [False]

def under(p):
    try:
        p = os.path.abspath(os.fsdecode(os.fspath(p)))
    except TypeError:
        return None
    return p if p.startswith(roots) else None

def hook(event, args):
    if event == "open" and active[0] and args and not isinstance(args[0], int):
        p = under(args[0])
        if p:
            counts["py opens"][p] += 1
sys.addaudithook(hook)

t_import = time.perf_counter()
import json as _json
import safetensors, safetensors.torch, transformers, transformers.modeling_utils
try:                                  # diagnose/run.py became diagnose/parts.py at 9bff3ec (issue 49's names)
    from eagle3lib.diagnose.parts import Inputs, run
except ModuleNotFoundError:
    from eagle3lib.diagnose.run import Inputs, run
from eagle3lib.hidden import targets
from eagle3lib.opened import recording
from eagle3lib.samples import readers

def counting(counter, orig):
    def wrapped(path, *a, **k):
        p = under(getattr(path, "name", path)) if active[0] else None
        if p:
            counts[counter][p] += 1
        return orig(path, *a, **k)
    wrapped.__wrapped__ = orig
    return wrapped

swaps = {id(safetensors.safe_open): counting("safe_open", safetensors.safe_open),
         id(readers.open_dataset): counting("datasets", readers.open_dataset),
         id(_json.load): counting("json.load", _json.load)}
for mod in list(sys.modules.values()):
    d = getattr(mod, "__dict__", None)
    if not isinstance(d, dict):
        continue
    for name, val in list(d.items()):
        if id(val) in swaps and getattr(swaps[id(val)], "__wrapped__", None) is val:
            try:
                setattr(mod, name, swaps[id(val)])
            except (AttributeError, TypeError):
                pass
import_s = time.perf_counter() - t_import
fields = {f.name for f in dataclasses.fields(Inputs)}
inp = Inputs(**{k: v for k, v in spec["inputs"].items() if k in fields})
rss_before = status("VmRSS")
phase[0] = "diagnose"
t0 = time.perf_counter()
with recording() as seen:
    active[0] = True
    r = run(inp)
    d = r.diagnosis
    active[0] = False
seconds = time.perf_counter() - t0
res = {"seconds": seconds, "import_s": import_s, "peak_rss": status("VmHWM"), "rss_before": rss_before,
       "counts": {k: dict(v) for k, v in counts.items()},
       "recorded": sorted(p for p in seen if p.startswith(roots)),
       "target_loads": {k: v for k, v in targets.loads().items()},
       "result": {"exit_code": r.exit_code, "verdicts": len(d.verdicts),
                  "alarms": sorted({v.cause for v in d.alarms}),
                  "problems": [str(getattr(p, "message", p))[:300] for p in r.problems],
                  "skipped": dict(r.skipped)}}
with open(out_path, "w") as f:
    json.dump(res, f)
"""

OPENAT = re.compile(r'^\d+\s+(?:openat|open)\((?:AT_FDCWD, |)"((?:[^"\\]|\\.)*)"')


def strace_works() -> bool:
    try:
        p = subprocess.run(["strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=openat", "-o", "/dev/null",
                            "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def os_opens(trace: Path, roots: tuple[str, ...]) -> Counter:
    """Succeeded openat calls per path under roots, from an strace -f log (an unfinished call counts)."""
    out: Counter = Counter()
    for line in trace.read_text(errors="replace").splitlines():
        m = OPENAT.match(line)
        if not m or "= -1 " in line:
            continue
        p = os.path.abspath(m.group(1).encode().decode("unicode_escape"))
        if p.startswith(roots):
            out[p] += 1
    return out


def run_child(tree: Path, inputs: dict, roots: list[str], rss_limit: float, strace: bool, env: dict,
              work: Path) -> dict:
    """One fresh diagnose subprocess on `tree`: its time, peak RSS and counts per file."""
    out = work / "child.json"
    trace = work / "strace.log"
    for f in (out, trace):
        f.unlink(missing_ok=True)
    spec = {"inputs": inputs, "roots": roots, "rss_limit_gb": rss_limit, "out": str(out)}
    cmd = [sys.executable, "-c", CHILD, json.dumps(spec)]
    if strace:
        cmd = ["strace", "-f", "--seccomp-bpf", "-qq", "-s", "4096", "-e", "trace=openat,open", "-o", str(trace),
               *cmd]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if not out.exists():
        return {"failed": f"exit {p.returncode}", "stderr": p.stderr[-3000:], "wall": wall}
    res = json.loads(out.read_text())
    res["wall"] = wall
    if "killed" in res:
        print("  stopped at:\n    " + "\n    ".join(res.get("stack", [])), flush=True)
        return res
    if p.returncode != 0:
        res["failed"] = f"exit {p.returncode}: {p.stderr[-2000:]}"
    rt = tuple(r.rstrip("/") + "/" for r in roots)
    res["counts"]["os opens"] = dict(os_opens(trace, rt)) if strace and trace.exists() else {}
    return res


# --- the table -------------------------------------------------------------------------------------------------

def label(path: str, root: Path) -> str:
    """The path relative to the case's root (a folder, opened to list it, ends in '/')."""
    p = Path(path)
    if p.is_dir():
        return label(str(p / "x"), root)[:-1]
    try:
        return str(p.relative_to(root))
    except ValueError:
        try:
            return "repo:" + str(p.relative_to(REPO))
        except ValueError:
            return path


def group_key(rel: str) -> str:
    """Per-sample files (a dataset's hidden_states/*, SpecForge rows_*/data_*) as one row per folder."""
    parts = rel.split("/")
    if not rel.endswith("/") and len(parts) >= 2 and (parts[-2] == "hidden_states" or parts[-2].startswith("rows_")):
        return "/".join(parts[:-1]) + "/*"
    return rel


def file_rows(case: str, root: Path, sides: dict[str, dict]) -> list[dict]:
    """One row per file (per-sample files grouped per folder): each count on the current side (the baseline's
    os / py opens beside them), and for a group the files and the most opens of one file."""
    agg: dict[str, dict] = defaultdict(lambda: defaultdict(Counter))   # key -> side -> count kind -> per file
    for side, res in sides.items():
        for kind, per in res.get("counts", {}).items():
            for path, n in per.items():
                rel = label(path, root)
                agg[group_key(rel)][side][kind + "|" + rel] += n
    rows = []
    for key in sorted(agg):
        row = {"case": case, "file": key}
        for side in sides:
            c = agg[key][side]
            for kind in COUNTS:
                files = {k: n for k, n in c.items() if k.startswith(kind + "|")}
                name = kind if side == "current" else f"baseline {kind}"
                if side == "current" or kind in ("os opens", "py opens"):
                    row[name] = sum(files.values())
                    if key.endswith("/*") and kind == "os opens":
                        row["files" if side == "current" else "baseline files"] = len(files)
                        row["max per file" if side == "current" else "baseline max per file"] = max(
                            files.values(), default=0)
        rows.append(row)
    return sorted(rows, key=lambda r: (-r.get("os opens", 0) - r.get("py opens", 0), r["file"]))


def side_summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if "seconds" in r and "failed" not in r]
    if not ok:
        return {"runs": len(runs), "failed": [r.get("killed") or r.get("failed") for r in runs],
                "stack": next((r["stack"] for r in runs if r.get("stack")), []),
                "peak_rss_gb": max((r.get("peak_rss", 0) for r in runs), default=0) / 2**30,
                "stderr": [r.get("stderr", "")[-1500:] for r in runs]}
    first = ok[0]
    return {"runs": len(ok), "seconds": statistics.median(r["seconds"] for r in ok),
            "wall_s": statistics.median(r["wall"] for r in ok), "import_s": statistics.median(r["import_s"] for r in ok),
            "peak_rss_gb": statistics.median(r["peak_rss"] for r in ok) / 2**30,
            "rss_before_gb": statistics.median(r["rss_before"] for r in ok) / 2**30,
            "os_opens": sum(first["counts"].get("os opens", {}).values()),
            "py_opens": sum(first["counts"]["py opens"].values()),
            "safe_open": sum(first["counts"]["safe_open"].values()),
            "files": len(set(first["counts"].get("os opens", {})) | set(first["counts"]["py opens"])),
            "recorded_files": len(first["recorded"]),
            "same_counts_every_run": all(r["counts"] == first["counts"] for r in ok),
            "target_loads": first["target_loads"], "result": first["result"],
            "runs_s": [r["seconds"] for r in ok], "runs_peak_rss_gb": [r["peak_rss"] / 2**30 for r in ok]}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="a,b", help="a (the demo world), b (the synthetic seed-scale case)")
    ap.add_argument("--baseline", default="2ba9f10", help="the commit compared with the working tree")
    ap.add_argument("--repeats", type=int, default=1, help="rounds (baseline then current, per case)")
    ap.add_argument("--out", default="", help="where case (b) is written (kept); default: a temp dir, removed")
    ap.add_argument("--keep", action="store_true", help="keep a temp case (b) (its path is printed)")
    ap.add_argument("--reuse", action="store_true", help="use the case (b) already in --out (same sizes)")
    ap.add_argument("--tiny", action="store_true", help="case (b) shrunk to seconds, and no baseline")
    ap.add_argument("--no-baseline", action="store_true", help="the current tree only")
    ap.add_argument("--rss-limit-gb", type=float, default=10.0, help="stop a child past this RSS (0: never)")
    ap.add_argument("--dtype", default="float32", help="diagnose's --dtype (its default float32)")
    ap.add_argument("--set", action="append", default=[], help="override a size of case (b): key=int")
    ap.add_argument("--no-strace", action="store_true", help="count Python-level opens only")
    ap.add_argument("--name", default="case")
    a = ap.parse_args()
    cases = [c for c in a.cases.split(",") if c]
    if set(cases) - {"a", "b"}:
        sys.exit(f"unknown cases {cases}: a, b")
    sizes = dict(TINY if a.tiny else FULL)
    for kv in a.set:
        k, v = kv.split("=")
        if k not in sizes:
            sys.exit(f"--set {k}: one of {sorted(sizes)}")
        sizes[k] = int(v)
    strace = not a.no_strace and strace_works()
    head = git("rev-parse", "HEAD")
    dirty = len(git("status", "--short").splitlines())
    tmp = Path(tempfile.mkdtemp(prefix="e3bench_case_"))
    env = {k: v for k, v in os.environ.items() if k not in ("EAGLE3LIB_DEMO_WORLD", "EAGLE3LIB_OPENED")}
    trees = {"current": REPO}
    base_commit = None
    if not (a.tiny or a.no_baseline):
        base_commit = git("rev-parse", "--short", a.baseline)
        trees = {"baseline": tmp / "baseline", "current": REPO}
        git("worktree", "add", "--detach", str(trees["baseline"]), a.baseline)
    runs: dict[tuple[str, str], list[dict]] = defaultdict(list)
    plan, case_b = {}, None
    try:
        for tree in trees.values():          # no side pays .pyc compilation inside a timed run
            subprocess.run([sys.executable, "-m", "compileall", "-q", "eagle3lib"], cwd=tree, capture_output=True)
        print(machine_line(), flush=True)
        print(f"current tree {head[:9]} ({dirty} paths changed or untracked)"
              + (f", baseline {base_commit}" if base_commit else ", no baseline")
              + f"; opens counted by {'strace and ' if strace else ''}audit hook + wrappers", flush=True)
        if "a" in cases:
            sys.path.insert(0, str(REPO))
            from eagle3lib.demo.world import ensure_world
            w = ensure_world(progress=False)
            env["EAGLE3LIB_DEMO_DIR"] = str(w.root.resolve())
            plan["a"] = (w.root.resolve(), {
                "draft": str(w.draft), "target": str(w.target), "train_data": str(w.seed_data),
                "heldout_data": str(w.heldout_data), "sglang_version": "0.5.6", "dtype": a.dtype,
                "launch": SEED_LAUNCH.format(target=w.target, draft=w.draft)})
        if "b" in cases:
            root = Path(a.out).resolve() if a.out else tmp / "case_b"
            if a.reuse and (root / "case.json").exists():
                case_b = json.loads((root / "case.json").read_text())
                if case_b["sizes"] != sizes:
                    sys.exit(f"--reuse: {root} holds sizes {case_b['sizes']}, not {sizes}")
            else:
                if root.exists() and any(root.iterdir()):
                    sys.exit(f"--out {root} is not empty (--reuse to use the case in it)")
                sys.path.insert(0, str(REPO))
                case_b = write_case(root, sizes)
                (root / "case.json").write_text(json.dumps(case_b, indent=1) + "\n")
            print(f"case b at {root}: {sum(case_b['bytes'].values()) / 1e9:.2f} GB "
                  f"({', '.join(f'{k} {v / 1e9:.2f}' for k, v in case_b['bytes'].items())} GB), "
                  f"target {case_b['target_parameters'] / 1e9:.3f} B params, draft "
                  f"{case_b['draft_parameters'] / 1e9:.3f} B, written in {case_b['write_s']:.0f} s", flush=True)
            plan["b"] = (root, {"draft": case_b["draft"], "target": case_b["target"],
                                "train_data": case_b["train_data"], "dtype": a.dtype})
        roots = {c: [str(root), str(REPO / "data")] for c, (root, _) in plan.items()}
        for r in range(a.repeats):
            for c in cases:
                for side, tree in trees.items():
                    x = run_child(tree, plan[c][1], roots[c], a.rss_limit_gb, strace, env, tmp)
                    runs[c, side].append(x)
                    what = (x.get("killed") or x.get("failed") or
                            f"{x['seconds']:.1f} s, peak RSS {x['peak_rss'] / 2**30:.2f} GB, "
                            f"{sum(x['counts'].get('os opens', {}).values())} os opens, "
                            f"{sum(x['counts']['py opens'].values())} py opens")
                    print(f"  round {r} case {c} {side:8s} {what} (wall {x['wall']:.1f} s)", flush=True)
    finally:
        if "baseline" in trees:
            subprocess.run(["git", "worktree", "remove", "--force", str(trees["baseline"])], cwd=REPO,
                           capture_output=True)
            subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)
        if a.keep and not a.out and (tmp / "case_b").exists():
            print(f"case b kept at {tmp / 'case_b'}")
            for f in tmp.iterdir():
                if f.name != "case_b":
                    shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink()
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    rows, summary = [], {}
    for c in cases:
        sides = {s: side_summary(runs[c, s]) for s in trees}
        first = {s: next((x for x in runs[c, s] if "counts" in x), {}) for s in trees}
        rows += file_rows(c, plan[c][0], first)
        entry = {"root": str(plan[c][0]), "inputs": {k: v for k, v in plan[c][1].items()}, **sides,
                 "per_file": {s: {kind: {label(p, plan[c][0]): n for p, n in per.items()}
                                  for kind, per in first[s].get("counts", {}).items()} for s in trees}}
        if "baseline" in sides and "seconds" in sides["baseline"] and "seconds" in sides["current"]:
            b, cur = sides["baseline"], sides["current"]
            entry["ratios"] = {"seconds": cur["seconds"] / b["seconds"],
                               "peak_rss": cur["peak_rss_gb"] / b["peak_rss_gb"],
                               "os_opens": cur["os_opens"] / b["os_opens"] if b["os_opens"] else None,
                               "py_opens": cur["py_opens"] / b["py_opens"] if b["py_opens"] else None,
                               "paired_seconds": statistics.median(
                                   y["seconds"] / x["seconds"] for x, y in zip(runs[c, "baseline"], runs[c, "current"])
                                   if "seconds" in x and "seconds" in y)}
        summary[c] = entry
        for s, v in sides.items():
            if "seconds" in v:
                print(f"case {c} {s}: diagnose {v['seconds']:.2f} s (wall {v['wall_s']:.1f} s), peak RSS "
                      f"{v['peak_rss_gb']:.2f} GB (before diagnose {v['rss_before_gb']:.2f}), {v['os_opens']} os "
                      f"opens / {v['py_opens']} py opens of {v['files']} files, exit {v['result']['exit_code']}")
            else:
                print(f"case {c} {s}: FAILED {v['failed']}")
        if "ratios" in entry:
            print(f"case {c} current/baseline: " + ", ".join(f"{k} {v:.3f}" for k, v in entry["ratios"].items()
                                                           if v is not None))
    if case_b:
        summary["case_b"] = {k: v for k, v in case_b.items() if k not in ("draft", "target", "train_data")}
    cols = ["case", "file", *COUNTS, "files", "max per file", "baseline os opens", "baseline py opens"]
    finish(a.name, portable(rows), portable({"current_commit": head, "dirty_paths": dirty, "baseline": base_commit,
                                             "tiny": a.tiny, "strace": strace, "repeats": a.repeats,
                                             "rss_limit_gb": a.rss_limit_gb, "dtype": a.dtype, "cases": summary}),
           columns=[c for c in cols if any(c in r for r in rows)] if rows else None)


def portable(value):
    """`value` with this checkout's path made repo-relative, the virtual environment ``<venv>``, the interpreter's
    prefix ``<python>``, $HOME ``~`` and a temporary folder named as such in every string (a record holds no machine
    path)."""
    if isinstance(value, str):
        value = value.replace(str(REPO) + "/", "").replace(str(REPO), ".")
        if sys.prefix != sys.base_prefix:          # a virtual environment, maybe outside this checkout
            value = value.replace(sys.prefix, "<venv>")
        value = value.replace(sys.base_prefix, "<python>")
        value = value.replace(str(Path.home()), "~")
        return re.sub(re.escape(tempfile.gettempdir()) + r"/[\w.-]+", "<temporary folder>", value)
    if isinstance(value, dict):
        return {portable(k): portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value


if __name__ == "__main__":
    main()
