"""Benchmark 6 (issue 18 item 3): eagle3lib's replay forward against the real peers, same weights, same inputs.

Peers (installed with --no-deps, see the [parity] extra): SpecForge 0.2.0 `LlamaForCausalLMEagle3` (sdpa backend)
run through the TTT loop of its trainer (specforge/algorithms/eagle3/model.py `OnlineEagle3Model.forward`, steps
5.1-5.4 and the argmax of its accuracy: project_hidden_states, the causal mask, `backbone` with `cache_hidden`,
`compute_logits`, `padding` of the ids; no loss: replay needs none), and speculators 0.9.0 `Eagle3DraftModel.forward`
(its own TTT loop; default attention `simple_flex_attention`, which runs unfused on CPU, `--spec-attn sdpa` for
the dense-mask path). Each peer is built from the same config and gets eagle3lib's state dict assigned (the same
tensors: `midlayer.*` for SpecForge, `layers.0.*` for speculators, formats.FORMATS); the load must leave only
the peer's unused verifier weights missing.
Work: batch 1, T tokens, 3 TTT steps, teacher-fed (both peers feed ground-truth ids at every step), top-1 ids out
(what replay scores; the peers compute every logit and argmax it). Rows "chat": a chat-like loss mask (turns of
300 user tokens masked, 200 assistant tokens scored; SpecForge's token rule): eagle3lib runs `scored=` (lm_head
and steps >= 1 only where used), the peers compute everything as they do, outputs compared where scored. Rows
"none": every output scored. Timing: the three run in turn, `--repeats` rounds, best of each and the median of
per-round ratios ("paired"); max |logit diff| (separate logits call, up to --check-up-to tokens) and top-1
agreement of the timed outputs, at the scored outputs. A peer is skipped with the reason when its package is
absent, when it fails, or when its attention scores (T x T per head: neither peer's CPU path is O(T)) would not
fit in the memory available.
Goal (issue 18): >= 1.5x the fastest peer at equal outputs on masked chat data, no slowdown unmasked.
Row "loop" (`--loop`, issue 26): the one draft-run loop (replay.loop.draft_run: forward, d2t map, scoring) against
SpecForge's TTT forward at Ht 2048, T 512, 3 steps, fp32, draft vocab 32000 of 64000, nothing masked.
Usage: nice -n 10 .venv/bin/python benchmarks/bench_peers.py [--quick | --full | --loop] [--tokens 512,4096]
       [--hidden 2048] [--dtypes float32,bfloat16] [--masks chat,none] [--device cpu|cuda] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import time
import traceback

import torch
import torch.nn.functional as F

from _common import (clocked, device_peak_flops, finish, machine_line, peak_bytes, pick_device, reset_peak,
                     sync)
from bench_forward import build, forward_flops
from eagle3lib.model.formats import FORMATS
from eagle3lib.model.config import DraftConfig
from eagle3lib.replay.loop import draft_run
from eagle3lib.replay.stats import ReplayItem, scored_positions

K = 3
GRIDS = {  # tokens, hidden, dtypes, draft vocab, chat turn (user, assistant)
    "quick": ([128], [256], ["float32"], 4096, (24, 16)),
    "default": ([512], [2048], ["float32", "bfloat16"], 32000, (300, 200)),
    "full": ([512, 4096, 16384], [2048, 4096], ["float32", "bfloat16"], 32000, (300, 200)),
}


def raw_config(h: int, vd: int) -> dict:
    """A SpecForge-style draft config with bench_forward.make_cfg's shapes (heads of 128, kv heads / 4,
    intermediate 3.5 H, 3 aux slots, target hidden = H, target vocab = draft vocab, identity d2t)."""
    nh = max(1, h // 128)
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": h,
            "intermediate_size": int(h * 3.5), "num_attention_heads": nh, "num_key_value_heads": max(1, nh // 4),
            "head_dim": 128, "vocab_size": vd, "draft_vocab_size": vd, "target_hidden_size": h,
            "rope_theta": 500000.0, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
            "num_hidden_layers": 1, "hidden_act": "silu", "tie_word_embeddings": False, "num_aux_hidden_states": 3}


def make_ours(raw: dict, dtype, device: str):
    """eagle3lib's draft with random weights (norm weights 1 + noise, so a mis-mapped norm shows in the diff)."""
    torch.manual_seed(0)
    d = build(DraftConfig.from_dict(raw), torch.float32)
    with torch.no_grad():
        for n, p in d.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    return d.to(device=device, dtype=dtype).eval()


def assign(peer, sd: dict, allowed_missing: set[str], allowed_extra: set[str]):
    """Put our tensors into the peer (no copy); anything else missing or left over is a mapping error."""
    res = peer.load_state_dict(sd, strict=False, assign=True)
    missing, extra = set(res.missing_keys) - allowed_missing, set(res.unexpected_keys) - allowed_extra
    if missing or extra:
        raise RuntimeError(f"state dict mapping: missing {sorted(missing)}, unexpected {sorted(extra)}")
    return peer.eval()


def make_specforge(raw: dict, ours, device: str, attn: str):
    """SpecForge's draft with our weights, and its TTT forward (ids) / logits functions."""
    from transformers import LlamaConfig
    from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3
    from specforge.utils import padding

    cfg = LlamaConfig(**{k: v for k, v in raw.items() if k != "architectures"})
    m = assign(LlamaForCausalLMEagle3(cfg, attention_backend="sdpa"), ours.state_dict(), set(), set()).to(device)

    def ttt(aux, ids, logits: bool):
        B, T = ids.shape
        hs = m.project_hidden_states(aux)                                     # step 2
        pos = torch.arange(T, device=aux.device)[None]                        # step 3
        mask = m.prepare_decoder_attention_mask(torch.ones(B, T, dtype=torch.bool, device=aux.device), hs, B, T, 0)
        cache, out = [[], []], []
        inp = F.pad(ids, (0, 1))[:, 1:]                                       # token t+1 at position t
        for step in range(K):                                                 # step 5
            emb = m.embed_input_ids(inp).to(hs.dtype)
            hs = m.backbone(input_embeds=emb, hidden_states=hs, cache_hidden=cache, attention_mask=mask,
                            position_ids=pos, past_key_values=None, use_cache=True)
            lg = m.compute_logits(hs)
            out.append(lg if logits else lg.argmax(-1))
            if step < K - 1:
                inp = padding(inp, left=False)
        return out
    return ttt


def make_speculators(raw: dict, ours, device: str, attn: str):
    """speculators' Eagle3DraftModel with our weights, and its forward (ids) / logits (lm_head hook) functions."""
    from transformers import LlamaConfig
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    tl = LlamaConfig(**{k: v for k, v in raw.items() if k not in ("architectures", "draft_vocab_size",
                                                                   "target_hidden_size", "num_aux_hidden_states")})
    tl._attn_implementation = attn
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=raw["draft_vocab_size"], norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=[1, 2, 3],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=K)],
            default_proposal_method="greedy", verifier=VerifierConfig(name_or_path=None,
                                                                     architectures=["LlamaForCausalLM"])))
    (pattern, repl), = FORMATS["speculators"].save_rules
    sd = {re.sub(pattern, repl, k): v for k, v in ours.state_dict().items()}
    # same vocab sizes: speculators keeps no d2t/t2d buffers (identity mapping, as ours)
    m = assign(Eagle3DraftModel(cfg), sd, {"verifier_lm_head.weight", "verifier_norm.weight"},
               {"d2t", "t2d"}).to(device)

    def ttt(aux, ids, logits: bool):
        T = ids.shape[1]
        got = []
        hook = m.lm_head.register_forward_hook(lambda mod, a, o: got.append(o)) if logits else None
        try:
            ids_out = m(hidden_states=aux, input_ids=F.pad(ids, (0, 1))[:, 1:],
                        document_ids=torch.zeros(1, T, dtype=torch.long, device=aux.device),
                        position_ids=torch.arange(T, device=aux.device)[None], ttt_steps=K)
        finally:
            if hook:
                hook.remove()
        return got if logits else ids_out
    return ttt


PEERS = {"specforge": ("specforge", make_specforge), "speculators": ("speculators", make_speculators)}


def attention_bytes(peer: str, raw: dict, T: int, dtype, spec_attn: str) -> float:
    """Rough peak of the peer's (T x T-per-head) attention tensors at its last step: SpecForge builds fp32
    (nh, T, T + k) scores, a concatenated copy and the softmax (~3 of them) plus the (T, T) mask; speculators'
    unfused flex (or its dense SDPA mask) materialises (nh, T, K*T) scores (~4 copies) / the (T, K*T) mask.
    Checked at T 4096, Ht 2048 fp32 (results/peers_4k.json): predicted 3.3 / 12.9 GB, measured peak RSS over
    eagle3lib's 2.8 / 10.8 GB (5.2 / 13.6 GB in all)."""
    nh, el = raw["num_attention_heads"], 4
    if peer == "specforge":
        return 3 * nh * T * T * el + T * T * torch.finfo(dtype).bits / 8
    if spec_attn == "sdpa":
        return 2 * T * K * T * el + nh * T * K * T * el / 8    # mask + its float copy; SDPA blocks the scores
    return 4 * nh * T * K * T * el


def mem_available() -> float:
    try:
        return next(int(ln.split()[1]) * 1024 for ln in open("/proc/meminfo") if ln.startswith("MemAvailable"))
    except (OSError, StopIteration):
        return float("inf")


def chat_mask(T: int, turn: tuple[int, int]) -> torch.Tensor:
    """Loss mask of alternating user (0) and assistant (1) turns."""
    user, assistant = turn
    return ((torch.arange(T) % (user + assistant)) >= user).long()


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor], where: torch.Tensor) -> float:
    """max |a - b| over the K steps' logits at the outputs `where` (K, T)."""
    return max(float((x[0][where[k]].float() - y[0][where[k]].float()).abs().max()) if bool(where[k].any())
               else 0.0 for k, (x, y) in enumerate(zip(a, b)))


def top1_agreement(a: list[torch.Tensor], b: list[torch.Tensor], where: torch.Tensor) -> float:
    """Mean over the K steps of the share of scored outputs `where` (K, T) whose argmax agree in a and b."""
    return statistics.mean(float((x[0][where[k]].argmax(-1) == y[0][where[k]].argmax(-1)).float().mean())
                           if bool(where[k].any()) else 1.0 for k, (x, y) in enumerate(zip(a, b)))


def bench_row(fns: dict, notes: dict, raw: dict, T: int, dtype, mask_kind: str, device: str, repeats: int,
              check: bool, turn: tuple[int, int], spec_attn: str, reference=None) -> dict:
    """One (Ht, T, dtype, mask) row: every implementation timed in turn, outputs compared where scored.
    reference(aux, ids): fp32 logits of the same weights (bf16 rows): each implementation's top-1 agreement with
    it says whose rounding moves the outputs, when the two bf16 implementations disagree with each other."""
    torch.manual_seed(1)
    aux = torch.randn(1, T, 3 * raw["hidden_size"], dtype=dtype, device=device)
    ids = torch.randint(0, raw["vocab_size"], (1, T), device=device)
    if mask_kind == "chat":
        ref = torch.full((T,), -1, dtype=torch.long)
        ref[:-1] = ids[0, 1:].cpu()
        _, valid = scored_positions(ref, chat_mask(T, turn), K)          # (K, T) outputs that are scored
        scored = valid[:, None].to(device)
    else:
        valid, scored = torch.ones(K, T, dtype=torch.bool), None
    where = valid.to(device)
    ours = fns["eagle3lib"]
    run = {"eagle3lib": lambda logits: ours(aux, ids, logits, scored)}
    row_notes = dict(notes)
    for name, fn in fns.items():
        if name == "eagle3lib" or name in row_notes:
            continue
        need = attention_bytes(name, raw, T, dtype, spec_attn)
        if device == "cpu" and need > 0.8 * mem_available():
            row_notes[name] = (f"skipped at T={T}: its O(T^2) attention would need ~{need / 1e9:.0f} GB, "
                               f"{mem_available() / 1e9:.0f} GB available")
            continue
        run[name] = lambda logits, fn=fn: fn(aux, ids, logits)
    times = {n: [] for n in run}
    outs, peaks = {}, {}
    with torch.inference_mode():
        # warm-up (compiles, kernels): on two short slices when the row is long (two shapes make SpecForge's
        # torch.compile'd norms and RoPE dynamic, so the row's own size does not recompile), else the row itself
        for n in list(run):
            try:
                for w in ((128, 256) if T > 512 else (T,)):
                    (fns[n](aux[:, :w], ids[:, :w], False, None if scored is None else scored[..., :w])
                     if n == "eagle3lib" else fns[n](aux[:, :w], ids[:, :w], False))
            except Exception as e:                                            # noqa: BLE001 - a peer failing is a result
                row_notes[n] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
                traceback.print_exc()
                del run[n], times[n]
        for r in range(repeats):
            for n in run:
                reset_peak(device)
                box = {}
                times[n].append(clocked(lambda: box.setdefault("o", run[n](False)), device))
                peaks[n] = max(peaks.get(n, 0), peak_bytes(device) or 0)
                outs[n] = box["o"]
        diffs, vs32 = {}, {}
        if check:
            mine = run["eagle3lib"](True)
            truth = reference(aux.float(), ids) if reference is not None else None
            if truth is not None:
                vs32["eagle3lib"] = top1_agreement(mine, truth, where)
            for n in run:
                if n != "eagle3lib":
                    theirs = run[n](True)
                    diffs[n] = max_diff(mine, theirs, where)
                    if truth is not None:
                        vs32[n] = top1_agreement(theirs, truth, where)
                    sync(device)
                    del theirs
            del mine, truth
    best = {n: min(t) for n, t in times.items()}
    row = {"Ht": raw["hidden_size"], "tokens": T, "dtype": str(dtype).removeprefix("torch."), "mask": mask_kind,
           "scored share": float(valid.float().mean()), "eagle3lib s": best["eagle3lib"]}
    flops = forward_flops(DraftConfig.from_dict(raw), T, K)
    if device == "cuda":
        pk = device_peak_flops(torch.cuda.get_device_name(0), row["dtype"])
        row["eagle3lib of peak (dense work)"] = flops / best["eagle3lib"] / pk if pk else None
    for n in PEERS:
        if n in best:
            agree = statistics.mean(float((a[0][where[k]] == b[0][where[k]]).float().mean()) if bool(where[k].any())
                                    else 1.0 for k, (a, b) in enumerate(zip(outs["eagle3lib"], outs[n])))
            row.update({f"{n} s": best[n], f"x vs {n}": best[n] / best["eagle3lib"],
                        f"paired x vs {n}": statistics.median(p / o for p, o in zip(times[n], times["eagle3lib"])),
                        f"max |diff| {n}": diffs.get(n), f"top1 agree {n}": agree})
        else:
            row.update({f"{n} s": None, f"x vs {n}": None, f"paired x vs {n}": None, f"max |diff| {n}": None,
                        f"top1 agree {n}": None})
    ratios = [row[f"x vs {n}"] for n in PEERS if row[f"x vs {n}"] is not None]
    row["x vs fastest peer"] = min(ratios) if ratios else None
    for n in ("eagle3lib", *PEERS):
        if reference is not None:
            row[f"top1 vs fp32 {n}"] = vs32.get(n)
    for n in times:
        row[f"peak {'GPU' if device == 'cuda' else 'RSS'} GB {n}"] = peaks[n] / 1e9 if peaks.get(n) else None
    row["load"] = round(os.getloadavg()[0], 2)
    row["notes"] = "; ".join(f"{n}: {v}" for n, v in row_notes.items() if n not in notes) or None
    return row


def loop_row(h: int = 2048, T: int = 512, vd: int = 32000, V: int = 64000, repeats: int = 3,
             device: str = "cpu") -> dict:
    """The one draft-run loop (`replay.loop.draft_run`: forward, d2t map and scoring, teacher-fed, nothing masked)
    against SpecForge's TTT forward (`make_specforge`) on the same weights, draft vocab `vd` of `V` (a random
    sorted hot set, so d2t is real), fp32, K steps. Run in turn (who goes first alternates), `repeats` rounds: best
    of each and the median of the per-round ratios, in wall and in process CPU seconds; top-1 agreement (target ids) at every output that has a next token."""
    raw = raw_config(h, vd) | {"vocab_size": V}
    d = make_ours(raw, torch.float32, device)
    torch.manual_seed(2)
    hot = torch.sort(torch.randperm(V)[:vd]).values
    d.d2t.copy_((hot - torch.arange(vd)).to(d.d2t))
    spec = make_specforge(raw, d, device, "sdpa")
    aux = torch.randn(1, T, 3 * h, device=device)
    ids = torch.randint(0, V, (1, T), device=device)
    ref = torch.full((T,), -1, dtype=torch.long)
    ref[:-1] = ids[0, 1:].cpu()
    item = ReplayItem(0, "bench", "bench", ids[0].cpu(), torch.ones(T, dtype=torch.long), (), aux[0].cpu(), ref,
                      "data")
    run = {"eagle3lib loop": lambda: list(draft_run(d, [item], num_steps=K, simulate=False)),
           "specforge": lambda: spec(aux, ids, False)}
    times, cpu, outs = {n: [] for n in run}, {n: [] for n in run}, {}
    with torch.inference_mode():
        for n in run:                                   # warm-up (SpecForge's compiled norms and RoPE)
            run[n]()
        for r in range(repeats):
            for n in (list(run) if r % 2 == 0 else list(run)[::-1]):     # alternate who goes first
                box, c0 = {}, time.process_time()
                times[n].append(clocked(lambda: box.setdefault("o", run[n]()), device))
                cpu[n].append(time.process_time() - c0)   # CPU s of the process: less swayed by a shared machine
                outs[n] = box["o"]
    (mine,) = outs["eagle3lib loop"]
    theirs = torch.stack([hot[x[0].cpu()] for x in outs["specforge"]])             # (K, T) draft -> target ids
    valid = mine.scored.valid                       # (K, T): every output with a next token (t+2+k < T)
    best = {n: min(t) for n, t in times.items()}
    return {"Ht": h, "tokens": T, "dtype": "float32", "draft vocab": f"{vd} of {V}", "steps": K,
            "eagle3lib loop s": best["eagle3lib loop"], "specforge s": best["specforge"],
            "x vs specforge": best["specforge"] / best["eagle3lib loop"],
            "paired x vs specforge": statistics.median(p / o for p, o in zip(times["specforge"],
                                                                           times["eagle3lib loop"])),
            "times eagle3lib loop": times["eagle3lib loop"], "times specforge": times["specforge"],
            "cpu x vs specforge": min(cpu["specforge"]) / min(cpu["eagle3lib loop"]),
            "paired cpu x vs specforge": statistics.median(p / o for p, o in zip(cpu["specforge"],
                                                                               cpu["eagle3lib loop"])),
            "cpu eagle3lib loop": cpu["eagle3lib loop"], "cpu specforge": cpu["specforge"],
            "top1 agree specforge": float((mine.teacher == theirs)[valid].float().mean()), "load": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    grid = ap.add_mutually_exclusive_group()
    grid.add_argument("--quick", action="store_true", help="tiny sizes (Ht 256, T 128, 4k vocab): CI smoke")
    grid.add_argument("--full", action="store_true", help="the issue's grid: T 512/4k/16k x Ht 2048/4096")
    ap.add_argument("--tokens", help="comma list (overrides the grid's)")
    ap.add_argument("--hidden", help="comma list (overrides the grid's)")
    ap.add_argument("--dtypes", help="comma list (overrides the grid's)")
    ap.add_argument("--masks", default="chat,none")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--check-up-to", type=int, default=4096, help="max |logit diff| up to this many tokens")
    ap.add_argument("--peers", default="specforge,speculators")
    ap.add_argument("--spec-attn", default="simple_flex_attention", choices=("simple_flex_attention", "sdpa"),
                    help="speculators' attention implementation (its default: simple_flex_attention)")
    ap.add_argument("--name", help="result file benchmarks/results/<name>.json (default: peers, peers_loop with --loop)")
    ap.add_argument("--loop", action="store_true", help="only the row of the one draft-run loop vs SpecForge "
                    "(Ht 2048, T 512, fp32, draft vocab 32000 of 64000; --hidden / --tokens override)")
    args = ap.parse_args()
    device = pick_device(args.device)
    if args.loop:
        print(machine_line(device), flush=True)
        h = int(args.hidden.split(",")[0]) if args.hidden else 2048
        T = int(args.tokens.split(",")[0]) if args.tokens else 512
        row = loop_row(h, T, repeats=args.repeats, device=device)
        finish(args.name or "peers_loop", [row], {"device": device, "num_steps": K, "feed": "teacher", "mask": "none"},
               columns=["Ht", "tokens", "dtype", "draft vocab", "eagle3lib loop s", "specforge s",
                        "x vs specforge", "paired x vs specforge", "cpu x vs specforge", "paired cpu x vs specforge",
                        "top1 agree specforge", "load"])
        return
    kind = "quick" if args.quick else "full" if args.full else "default"
    tokens, hidden, dtypes, vd, turn = GRIDS[kind]
    tokens = [int(x) for x in args.tokens.split(",")] if args.tokens else tokens
    hidden = [int(x) for x in args.hidden.split(",")] if args.hidden else hidden
    dtypes = args.dtypes.split(",") if args.dtypes else dtypes
    print(machine_line(device), flush=True)
    rows, notes_all = [], {}
    for h in hidden:
        raw = raw_config(h, vd)
        for dt in dtypes:
            dtype = getattr(torch, dt)
            d = make_ours(raw, dtype, device)
            fns = {"eagle3lib": lambda aux, ids, logits, scored, d=d: d.ttt_forward(
                aux, ids, K, feed="teacher", return_logits=logits, scored=scored)}
            reference = None
            if dtype != torch.float32:           # the same weights in fp32 (make_ours casts one fp32 draft)
                d32 = make_ours(raw, torch.float32, device)
                reference = lambda aux, ids, d32=d32: d32.ttt_forward(aux, ids, K, feed="teacher", return_logits=True)
            notes = {}
            for name in args.peers.split(","):
                module, make = PEERS[name]
                try:
                    __import__(module)
                except ImportError as e:
                    notes[name] = f"skipped: package not installed ({e})"
                    continue
                try:
                    fns[name] = make(raw, d, device, args.spec_attn)
                except Exception as e:                                        # noqa: BLE001
                    notes[name] = f"failed to build: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            notes_all.update({f"Ht {h} {dt} {n}": v for n, v in notes.items()})
            for T in tokens:
                for mask_kind in args.masks.split(","):
                    row = bench_row(fns, notes, raw, T, dtype, mask_kind, device, args.repeats,
                                    T <= args.check_up_to, turn, args.spec_attn, reference)
                    row["when"] = time.strftime("%H:%M")
                    rows.append(row)
                    print(f"  Ht={h} T={T} {dt} {mask_kind}: eagle3lib {row['eagle3lib s']:.3f} s, "
                          + ", ".join(f"{n} {row[f'{n} s']:.3f} s ({row[f'x vs {n}']:.2f}x, max|diff| "
                                      f"{row[f'max |diff| {n}']})" for n in PEERS if row[f"{n} s"] is not None)
                          + (f"; {row['notes']}" if row["notes"] else ""), flush=True)
            del fns, d, reference
    short = ["Ht", "tokens", "dtype", "mask", "scored share", "eagle3lib s", "specforge s", "x vs specforge",
             "max |diff| specforge", "speculators s", "x vs speculators", "max |diff| speculators",
             "x vs fastest peer", "load"]
    print("\n".join(f"note: {k}: {v}" for k, v in notes_all.items()))
    chat = [r["x vs fastest peer"] for r in rows if r["mask"] == "chat" and r["x vs fastest peer"]]
    dense = [r["x vs fastest peer"] for r in rows if r["mask"] == "none" and r["x vs fastest peer"]]
    finish(args.name or "peers", rows, {
        "grid": kind, "device": device, "num_steps": K, "draft_vocab": vd, "chat_turn": turn, "feed": "teacher",
        "speculators_attention": args.spec_attn, "peer_notes": notes_all,
        "goal": ">= 1.5x the fastest peer at equal outputs on masked chat data, no slowdown (>= 1x) unmasked",
        "min_x_vs_fastest_chat": min(chat) if chat else None, "min_x_vs_fastest_unmasked": min(dense) if dense else None,
        "load_note": "load = 1-min load average of this shared machine at the end of the row"}, columns=short)


if __name__ == "__main__":
    main()
