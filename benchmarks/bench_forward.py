"""Benchmarks 1 and 2 (issue 9): draft forward throughput vs the machine's matmul peak, and vs a reference.

1. Replay-style forward (T = 512 tokens, K = 3 steps, feed="draft", top-1 ids, 32k draft vocab) at
   Ht = 1024, 2048, 4096: tokens/s and achieved FLOP/s / measured matmul peak. The peak GEMM and the forward
   are timed in alternation so both see the same load; "GEMM floor" is the sum of the forward's own matmuls
   timed alone, so 1 - floor/forward is the share of time that is not matmul work (or matmuls run slower in place).
2. The same forward against a reference written the way EAGLE's code does it (every step recomputed from
   scratch without a cache, separate q/k/v matmuls, explicit mask matrices): speedup and max |diff| of the logits.
--device cuda: the same on the GPU: every timing synchronised (torch.cuda.synchronize), the peak GPU memory of
   the forward (torch.cuda.max_memory_allocated), achieved FLOP/s also against the device's datasheet peak
   (_common.DEVICE_PEAKS) besides the best matmul rate measured in the run.
Usage: .venv/bin/python benchmarks/bench_forward.py [--sizes 1024,2048,4096] [--dtypes float32,bfloat16]
       [--profile]  (torch.profiler breakdown of one forward per size: where the time goes) [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn.functional as F

from _common import RESULTS, device_peak_flops, finish, peak_bytes, pick_device, reset_peak, sync
from eagle3lib.model.config import DraftConfig
from eagle3lib.model.draft import Eagle3Draft
from eagle3lib.model.layers import apply_rope

GEMM_OPS = {"aten::mm", "aten::addmm", "aten::matmul", "aten::linear"}
# wall clock by default; --clock thread (with --threads 1) counts only the CPU time this thread got, which other
# jobs on a shared machine cannot inflate (every kernel then runs on the calling thread: MKL, oneDNN, ATen)
CLOCK = {"fn": time.perf_counter, "device": "cpu"}


def now() -> float:
    """The benchmark's clock (see CLOCK), after the device's queued work is done."""
    sync(CLOCK["device"])
    return CLOCK["fn"]()


def make_cfg(h: int, vd: int = 32000, k: int = 3) -> DraftConfig:
    nh = h // 128
    return DraftConfig.from_dict({
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": h, "intermediate_size": int(h * 3.5),
        "num_attention_heads": nh, "num_key_value_heads": max(1, nh // 4), "head_dim": 128,
        "vocab_size": vd, "draft_vocab_size": vd, "rope_theta": 500000.0, "max_position_embeddings": 4096,
        "num_aux_hidden_states": k})


def gemms(cfg: DraftConfig, T: int, K: int) -> list[tuple[str, int, int, int, int]]:
    """(name, M, in, out, calls) of every nn.Linear matmul ttt_forward runs: (M, in) x (in, out)."""
    H, I, Vd = cfg.hidden_size, cfg.intermediate_size, cfg.draft_vocab_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    return [("fc", T, cfg.fc_in_features, H, 1), ("q_proj", T, 2 * H, q, K), ("k_proj", T, 2 * H, kv, K),
            ("v_proj", T, 2 * H, kv, K), ("o_proj", T, q, H, K), ("gate_proj", T, H, I, K),
            ("up_proj", T, H, I, K), ("down_proj", T, I, H, K), ("lm_head", T, H, Vd, K)]


def forward_flops(cfg: DraftConfig, T: int, K: int) -> float:
    """Multiply-adds x 2 of ttt_forward: the linear layers, plus causal attention with the diagonal keys."""
    q = cfg.num_attention_heads * cfg.head_dim
    attn = sum(2 * 2 * T * (T / 2 + k) * q for k in range(K))      # causal half of QK^T and PV, + diagonal keys
    return sum(2 * m * i * o * c for _, m, i, o, c in gemms(cfg, T, K)) + attn


def reference_flops(cfg: DraftConfig, T: int, K: int) -> float:
    """The reference's work: fc and lm_head once per output step, the layer 1 + 2 + ... + K times (recomputed),
    full (T, T * (s + 1)) attention matrices under explicit masks."""
    g = {name: 2 * m * i * o for name, m, i, o, _ in gemms(cfg, T, K)}
    layer = sum(v for n, v in g.items() if n not in ("fc", "lm_head"))
    q = cfg.num_attention_heads * cfg.head_dim
    attn = sum(2 * 2 * T * T * (s + 1) * q for last in range(K) for s in range(last + 1))
    return K * (g["fc"] + g["lm_head"]) + K * (K + 1) // 2 * layer + attn


def best_seconds(fn, repeats: int = 3) -> float:
    """Fastest of `repeats` timed calls after one warm-up (the least disturbed by other processes)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = now()
        fn()
        times.append(now() - t0)
    return min(times)


def linear_seconds(m: int, i: int, o: int, dtype, repeats: int = 3) -> float:
    """Best time of F.linear (M, in) x (out, in)^T, the call nn.Linear makes."""
    x, w = torch.randn(m, i, dtype=dtype, device=CLOCK["device"]), torch.randn(o, i, dtype=dtype, device=CLOCK["device"])
    return best_seconds(lambda: F.linear(x, w), repeats)


def build(cfg: DraftConfig, dtype) -> Eagle3Draft:
    """A randomly initialised draft (weights ~ N(0, 0.02), norms 1, identity d2t) without a slow init pass."""
    with torch.device("meta"):
        d = Eagle3Draft(cfg)
    d = d.to_empty(device="cpu")
    with torch.no_grad():
        for n, p in d.named_parameters():
            p.fill_(1.0) if "norm" in n else p.normal_(0, 0.02)
        d.d2t.zero_()
        d.t2d.fill_(True)
    d.rotary = type(d.rotary)(cfg)                                 # inv_freq is a non-persistent buffer
    return d.to(dtype).eval()


@torch.inference_mode()
def reference_ttt(d: Eagle3Draft, aux: torch.Tensor, ids: torch.Tensor, K: int) -> list[torch.Tensor]:
    """EAGLE-style: recompute every step from scratch (no cache), q/k/v separately, explicit masks."""
    m, a = d.midlayer, d.midlayer.self_attn
    B, T = ids.shape
    dev = aux.device
    outs = []
    for last in range(K):
        h = aux @ d.fc.weight.T
        ks, vs = [], []
        for step in range(last + 1):
            nxt = F.pad(ids, (0, K + 1))[:, 1 + step:T + 1 + step]
            u = torch.cat([m.input_layernorm(d.embed_tokens(nxt)), m.hidden_norm(h)], -1)
            cos, sin = d.rotary(torch.arange(T, device=dev)[None] + step, h.dtype)
            q = apply_rope((u @ a.q_proj.weight.T).view(B, T, a.nh, a.hd).transpose(1, 2), cos, sin)
            k = apply_rope((u @ a.k_proj.weight.T).view(B, T, a.nkv, a.hd).transpose(1, 2), cos, sin)
            v = (u @ a.v_proj.weight.T).view(B, T, a.nkv, a.hd).transpose(1, 2)
            ks.append(k.repeat_interleave(a.nh // a.nkv, 1))
            vs.append(v.repeat_interleave(a.nh // a.nkv, 1))
            keys, vals = torch.cat(ks, 2), torch.cat(vs, 2)                      # (B, nh, T*(step+1), hd)
            mask = torch.full((T, T * (step + 1)), float("-inf"), device=dev)
            mask[:, :T] = torch.full((T, T), float("-inf"), device=dev).triu(1)
            for j in range(1, step + 1):
                mask[:, j * T:(j + 1) * T] = torch.full((T, T), float("-inf"), device=dev).fill_diagonal_(0)
            p = ((q @ keys.transpose(-1, -2)) / math.sqrt(a.hd) + mask).softmax(-1).to(vals.dtype)  # fp32 mask
            o = (p @ vals).transpose(1, 2).reshape(B, T, -1) @ a.o_proj.weight.T
            h1 = h + o
            h = h1 + m.mlp(m.post_attention_layernorm(h1))
        outs.append(d.lm_head(d.norm(h)))
    return outs


def components(d: Eagle3Draft, fwd) -> dict[str, float]:
    """Inclusive wall seconds of one forward by component: each nn.Linear by name, the norms, embedding, and
    the draft module's attention / RoPE / top-1 functions (timed by wrapping them for this one call)."""
    import eagle3lib.model.draft as draft_mod
    import eagle3lib.model.layers as layers_mod
    spent: dict[str, float] = {}
    starts: dict[int, float] = {}

    def label(name: str, mod) -> str:
        if isinstance(mod, torch.nn.Linear):
            return name.rsplit(".", 1)[-1]
        return "norms" if "norm" in type(mod).__name__.lower() else name

    handles = []
    for name, mod in d.named_modules():
        if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding, layers_mod.RMSNorm)) or name == "rotary":
            key = label(name, mod)
            handles.append(mod.register_forward_pre_hook(lambda m, a: starts.__setitem__(id(m), now())))
            handles.append(mod.register_forward_hook(
                lambda m, a, o, key=key: spent.__setitem__(key, spent.get(key, 0) + now() - starts[id(m)])))
    homes = {"causal_attention": draft_mod, "chain_attention": draft_mod, "apply_rope": layers_mod,
             "top1": draft_mod}
    originals = {f: getattr(mod, f) for f, mod in homes.items()}

    def wrap(key, fn):
        def timed(*a, **kw):
            t0 = now()
            out = fn(*a, **kw)
            spent[key] = spent.get(key, 0) + now() - t0
            return out
        return timed
    for f, fn in originals.items():
        setattr(homes[f], f, wrap(f.strip("_"), fn))
    try:
        t0 = now()
        fwd()
        spent["total"] = now() - t0
    finally:
        for f, fn in originals.items():
            setattr(homes[f], f, fn)
        for hd in handles:
            hd.remove()
    spent["rest (glue: cat, residual adds, silu*up, transposes)"] = spent["total"] - sum(
        v for k, v in spent.items() if k != "total")
    return spent


def profile_forward(d: Eagle3Draft, fwd) -> dict:
    """Where one forward's time goes: by component (wall, inclusive) and by ATen op (torch.profiler self time)."""
    from torch.profiler import ProfilerActivity, profile
    comp = components(d, fwd)
    total = comp["total"]
    print("  components (share of one forward's wall time):")
    for k, v in sorted(comp.items(), key=lambda kv: -kv[1]):
        if k != "total":
            print(f"    {v / total:6.1%}  {v * 1e3:8.1f} ms  {k}")
    cuda = CLOCK["device"] == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, record_shapes=True) as prof:
        fwd()
        sync(CLOCK["device"])
    events = prof.key_averages(group_by_input_shape=True)

    def self_time(e):                     # CUDA: the kernels' time on the device; CPU: ATen self time
        return e.self_device_time_total if cuda else e.self_cpu_time_total
    total_op = sum(self_time(e) for e in events) or 1
    gemm = sum(self_time(e) for e in events if e.key in GEMM_OPS)
    rest = sorted((e for e in events if e.key not in GEMM_OPS), key=lambda e: -self_time(e))[:8]
    top = [{"op": e.key, "shapes": str(e.input_shapes)[:70], "calls": e.count,
            "share": self_time(e) / total_op} for e in rest]
    print(f"  ATen ops: GEMM (mm/addmm) {gemm / total_op:.1%} of self time; largest others:")
    for t in top:
        print(f"    {t['share']:6.1%}  x{t['calls']:<3} {t['op']:<28} {t['shapes']}")
    return {"components_s": comp, "gemm_share": gemm / total_op, "top_non_gemm": top}


def bench_size(h: int, dtype, T: int, K: int, repeats: int, peak_shape: tuple[int, int, int],
               do_profile: bool, reference: bool = True) -> tuple[dict, float]:
    """One row. Each repeat times, back to back, the peak GEMM, the forward, each of the forward's matmuls alone
    (same weights) and the reference, so all see the same load; best-of-repeats and paired ratios come from
    that. Returns (row, best peak FLOP/s seen)."""
    cfg, dev = make_cfg(h), CLOCK["device"]
    d = build(cfg, dtype).to(dev)
    aux = torch.randn(1, T, cfg.fc_in_features, dtype=dtype, device=dev)
    ids = torch.randint(0, cfg.vocab_size, (1, T), device=dev)
    fl = forward_flops(cfg, T, K)
    pm, pi, po = peak_shape
    px, pw = torch.randn(pm, pi, dtype=dtype, device=dev), torch.randn(po, pi, dtype=dtype, device=dev)
    mods = dict(d.named_modules())
    linears = [(c, torch.randn(m, i, dtype=dtype, device=dev),
                next(mod for n, mod in mods.items() if n.endswith(name)).weight)
               for name, m, i, o, c in gemms(cfg, T, K)]

    def clock(fn) -> float:
        t0 = now()
        fn()
        return now() - t0

    def fwd():
        return d.ttt_forward(aux, ids, K, feed="draft", return_logits=False)     # what replay runs
    load0 = os.getloadavg()[0]
    t_fwd, t_peak, t_ref, t_lin = [], [], [], [[] for _ in linears]
    with torch.inference_mode():
        fwd(), F.linear(px, pw), [F.linear(x, w) for _, x, w in linears]
        if reference:
            reference_ttt(d, aux, ids, K)
        for _ in range(repeats):
            t_peak.append(clock(lambda: F.linear(px, pw)))
            t_fwd.append(clock(fwd))
            for times, (_, x, w) in zip(t_lin, linears):
                times.append(clock(lambda: F.linear(x, w)))
            t_ref.append(clock(lambda: reference_ttt(d, aux, ids, K)) if reference else math.nan)
        prof = profile_forward(d, fwd) if do_profile else None
        reset_peak(dev)
        fwd()
        peak_mem = peak_bytes(dev) if dev == "cuda" else None             # CPU: RSS is bench_long's to report
        ours = d.ttt_forward(aux, ids, K)
        ref = reference_ttt(d, aux, ids, K) if reference else ours
    peak_fl = 2 * pm * pi * po
    floor = sum(c * min(times) for times, (c, _, _) in zip(t_lin, linears))
    diff = max(float((x.float() - y.float()).abs().max()) for x, y in zip(ours, ref))
    agree = statistics.mean(float((x.argmax(-1) == y.argmax(-1)).float().mean()) for x, y in zip(ours, ref))
    best = min(t_fwd)
    row = {"Ht": h, "dtype": str(dtype).removeprefix("torch."), "tokens/s": T / best, "GFLOP/s": fl / best / 1e9,
           "ours s": best, "paired of peak": statistics.median(
               (fl / tf) / (peak_fl / tp) for tf, tp in zip(t_fwd, t_peak)),
           "GEMM floor s": floor, "floor/ours": floor / best, "ref s": min(t_ref),
           "speedup vs ref": min(t_ref) / best,
           "paired speedup": statistics.median(tr / tf for tr, tf in zip(t_ref, t_fwd)),
           "ref work ratio": reference_flops(cfg, T, K) / fl, "max |diff|": diff, "top1 agree": agree,
           "load": round((load0 + os.getloadavg()[0]) / 2, 2), "forward s (all repeats)": t_fwd,
           "peak GPU GB": peak_mem / 1e9 if peak_mem is not None else None}
    if dev == "cuda":
        pk = device_peak_flops(torch.cuda.get_device_name(0), row["dtype"])
        row["device peak GFLOP/s"], row["of device peak"] = (pk / 1e9, fl / best / pk) if pk else (None, None)
    if prof:
        row["profile"] = prof
    return row, peak_fl / min(t_peak)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, one per core)")
    ap.add_argument("--no-reference", action="store_true", help="skip benchmark 2 (the slow reference)")
    ap.add_argument("--name", default="forward", help="result file benchmarks/results/<name>.json")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="thread: CPU time of this thread (needs --threads 1); immune to other jobs' load")
    ap.add_argument("--append", action="store_true", help="keep that file's rows for other sizes/dtypes/threads")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    CLOCK["device"] = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.clock == "thread":
        if args.device == "cuda":
            ap.error("--clock thread measures CPU time: not with --device cuda")
        if torch.get_num_threads() != 1:
            ap.error("--clock thread measures one thread: add --threads 1")
        CLOCK["fn"] = time.thread_time
    T, K = args.tokens, args.steps
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    torch.manual_seed(0)
    for dtype in (getattr(torch, s) for s in args.dtypes.split(",")):
        # machine peak: the best of a square GEMM and the forward's own largest shapes, same dtype
        shapes = {(4096, 4096, 4096)} | {(m, i, o) for h in sizes for _, m, i, o, _ in gemms(make_cfg(h), T, K)
                                         if o >= 4 * h or i >= 3 * h}
        rates = {s: 2 * s[0] * s[1] * s[2] / linear_seconds(*s, dtype) for s in sorted(shapes)}
        peak_shape = max(rates, key=rates.get)
        dt_rows = []
        for h in sizes:
            row, paired_peak = bench_size(h, dtype, T, K, args.repeats, peak_shape, args.profile,
                                             not args.no_reference)
            dt_rows.append((row, paired_peak))
            print(f"  Ht={h} {row['dtype']}: {row['ours s']:.3f} s, {row['GFLOP/s']:.1f} GFLOP/s", flush=True)
        peak = max([*rates.values(), *(p for _, p in dt_rows)])    # best rate seen anywhere in this run
        for row, _ in dt_rows:
            row["peak GFLOP/s"] = peak / 1e9
            row["of peak"] = row["GFLOP/s"] * 1e9 / peak
            rows.append(row)
    for row in rows:
        row["threads"], row["clock"], row["when"] = torch.get_num_threads(), args.clock, time.strftime("%H:%M")
    cols = ["Ht", "dtype", "threads", "clock", "tokens/s", "GFLOP/s", "peak GFLOP/s", "of peak", "paired of peak", "ours s",
            "GEMM floor s", "floor/ours", "ref s", "speedup vs ref", "paired speedup", "ref work ratio", "max |diff|",
            "top1 agree", "load", "when"] + (["peak GPU GB", "device peak GFLOP/s", "of device peak"]
                                            if args.device == "cuda" else [])
    table = [{c: r[c] for c in cols} for r in rows]
    tag = "{Ht}/{dtype}/{threads}/{clock}".format
    extra = {"forward_s_all_repeats": {tag(**r): r["forward s (all repeats)"] for r in rows},
             "profiles": {tag(**r): r["profile"] for r in rows if "profile" in r}}
    old_path = RESULTS / f"{args.name}.json"
    if args.append and old_path.exists():           # rows measured in separate quiet moments, one file
        old = json.loads(old_path.read_text())
        new_keys = {tag(**r) for r in table}
        table = sorted([r for r in old["rows"] if tag(**r) not in new_keys] + table,
                       key=lambda r: (r["clock"], r["dtype"], r["Ht"]))
        for key in extra:
            extra[key] = {**old.get(key, {}), **extra[key]}
    big = max(table, key=lambda r: (r["Ht"], r["dtype"] == "float32", r["clock"] == "wall"))
    finish(args.name, table, {
        "T": T, "K": K, "draft_vocab": 32000, "goal": "of peak >= 0.5 at Ht=4096", "device": args.device,
        "of_peak_at_largest": big["of peak"], "speedup_at_largest": big["speedup vs ref"], **extra,
        "load_note": "load = 1-min load average of this 2-core machine during the row (other jobs run too); "
                     "rows may come from separate runs (column 'when'), each against its own run's peak"})


if __name__ == "__main__":
    main()
