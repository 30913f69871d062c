"""Build the demo world from a seed: corpus, tokenizer, target, captured training data, vocab map, draft.

Stages are timed (wall and CPU seconds) into world.json. The draft uses the seed's 4-slot layout
[embedding output, out L1, out L3, out L5] of an 8-layer target (analogue of [embed, L3, L31, L59] of 61);
the seed's serving capture [out L1, out L3, out L5] is recorded as data (the layouts, sizes and splits are the
library's: `eagle3lib.demo.restore`). Usage: ``build_world(root, seed=0)`` (normally through
``eagle3lib.demo.world.ensure_world(make=build_world)``, which builds into a temp dir and renames it in place:
``python -m eagle3demo --from-scratch``). `export_artifacts` writes the trained target and draft to the shipped
artifacts ``data/demo_artifacts/`` (about 10 MB), from which the library restores the world
(`eagle3lib.demo.restore.restore_world`). `kind="mla"` builds the same story over a DeepSeek-V3-architecture
target (MLA + MoE) with an MLA draft, shipped in ``data/demo_artifacts_mla/``.
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch

from eagle3lib.demo.shipped import ARTIFACTS, BUILDER_VERSIONS, KINDS, DemoPaths, artifacts_dir
from eagle3lib.demo.restore import (CAPTURED_SPLITS, RETRAINED, SERVING_LAYOUT, SHIPPED, SIZES, TRAINING_LAYOUT,
                                    Timer, capture_records, corpus_splits, encoded_corpus, slots_of, write_data)
from eagle3lib.layout import to_ids
from eagle3lib.model.vocab import build_vocab_map, coverage

from .tokenizer import save_tokenizer, train_tokenizer
from .train_draft import ACC_DEFINITION, draft_config_dict, evaluate_draft, train_draft
from .train_target import eval_loss, greedy_reply, rescale_residual, target_config, train_target

EPS_KEPT = {"mla"}      # worlds whose rescale keeps rms_norm_eps (train_target.rescale_residual: the engines' MLA
                        # latent norms read it)
SAMPLE_QUESTIONS = ("How do I make pancakes?", "What is the weather like in Oslo in July?",
                    "Hi, I am Maren. What can I use instead of butter?", "Tell me about the otter.")


SAMPLES = ARTIFACTS.parent / "samples"


def export_artifacts(root: str | Path, artifacts: Path | None = None) -> Path:
    """Copy a freshly built world's trained target and draft (and world.json) to the shipped artifacts."""
    import shutil
    p = DemoPaths(Path(root))
    kind = json.loads(p.world_json.read_text()).get("kind", "llama")
    artifacts = artifacts or artifacts_dir(kind)
    for name in SHIPPED:
        if (artifacts / name).exists():
            shutil.rmtree(artifacts / name)
        if (p.root / name).is_dir():
            shutil.copytree(p.root / name, artifacts / name)
    shutil.copy2(p.world_json, artifacts / "world.json")
    if artifacts == ARTIFACTS:                # notebook 01's fallback when no world is built: the same configs
        for name in ("draft", "target"):
            cfg = json.loads((artifacts / name / "config.json").read_text())
            cfg = {"_name_or_path": f"eagle3lib-sample/demo_{name} (copy of data/demo_artifacts/{name}/config.json,"
                                    f" written by export_artifacts)", **{k: v for k, v in cfg.items()
                                                                          if k != "_name_or_path"}}
            (SAMPLES / f"demo_{name}_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return artifacts


def _draft_stage(out: Path, layout: tuple[str, ...], cap: dict, target, cfg, vocab: tuple, seed: int,
                 progress: bool) -> tuple[dict, dict]:
    """Train one draft on `layout` (the `cap` splits hold exactly its slots), save it and its training log in `out`;
    (its accuracies for world.json, its config dict). vocab: (draft vocab size, d2t, t2d)."""
    from eagle3lib.model.checkpoint import save_draft
    from eagle3lib.model.config import DraftConfig
    from eagle3lib.model.draft import Eagle3Draft
    Vd, d2t, t2d = vocab
    dcfg_dict = draft_config_dict(cfg, Vd, layout)
    torch.manual_seed(seed)
    draft = Eagle3Draft(DraftConfig.from_dict(dcfg_dict, source="demo"))
    lm_head = target.lm_head.weight.detach()
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        draft.lm_head.weight.copy_(lm_head[t2d])     # start from the target's rows of the draft vocab
        draft.d2t.copy_(d2t)
        draft.t2d.copy_(t2d)
    log = train_draft(draft, cap["draft_train"], cap["heldout"], lm_head, steps=SIZES["draft_steps"],
                      num_steps=SIZES["ttt_steps"], batch_size=SIZES["draft_batch"],
                      lr=SIZES["draft_lr"], eval_every=SIZES["draft_steps"] // 4, seed=seed, progress=progress)
    shifted_ev = evaluate_draft(draft, cap["shifted"], lm_head, SIZES["ttt_steps"])
    train_ev = evaluate_draft(draft, cap["draft_train"][:SIZES["heldout"]], lm_head, SIZES["ttt_steps"])
    save_draft(draft, dcfg_dict, out)
    with open(out / "training_log.jsonl", "w") as f:
        for rec in log:
            f.write(json.dumps(rec) + "\n")
    return {"recorded_val_acc_step0": log[-1]["val_acc_step0"], "val_acc": log[-1]["val_acc"],
            "train_acc": train_ev["acc"], "shifted_acc": shifted_ev["acc"]}, dcfg_dict


def build_world(root: str | Path, seed: int = 0, progress: bool = True, kind: str = "llama") -> dict:
    """Build every artifact of the demo world under `root` (overwriting); returns the world.json dict.
    kind: "llama" (Llama target, Llama-style draft) or "mla" (DeepSeek-V3 target, MLA draft)."""
    if kind not in KINDS:
        raise ValueError(f"demo world kind must be one of {KINDS}, got {kind!r}")
    p = DemoPaths(Path(root), kind)
    timer, threads = Timer(progress), torch.get_num_threads()
    torch.set_num_threads(SIZES["threads"])
    t_all = time.perf_counter()
    try:
        with timer.stage("corpus + tokenizer"):
            splits = corpus_splits(seed)
            tok = train_tokenizer([m["content"] for r in splits["target_train"] for m in r["conversations"]],
                                  SIZES["tokenizer_vocab"])
            save_tokenizer(tok, p.target, model_max_length=512)
            hf_tok, enc = encoded_corpus(p, splits)
        with timer.stage("target training"):
            cfg = target_config(len(hf_tok), hf_tok, kind)
            target, tstats = train_target([e[1] for e in enc["target_train"]], cfg, SIZES["target_steps"],
                                          SIZES["target_batch"], lr=SIZES["target_lr"], seed=seed,
                                          progress=progress)
            probe = torch.tensor([enc["heldout"][0][1]])
            with torch.no_grad():
                before = target(input_ids=probe).logits
                rescale_residual(target, SIZES["residual_scale"], scale_eps=kind not in EPS_KEPT)  # LLM-like
                # hidden-state magnitudes, same logits (mla: eps kept, what the engines' latent norms read)
                change = (target(input_ids=probe).logits - before).abs().max()
            tstats.update(residual_scale=SIZES["residual_scale"], rescale_max_logit_change=float(change))
            tstats["heldout_loss"] = round(eval_loss(target, [e[1] for e in enc["heldout"]]), 4)
            tstats["shifted_loss"] = round(eval_loss(target, [e[1] for e in enc["shifted"]]), 4)
            tstats["samples"] = {q: greedy_reply(target, hf_tok, q) for q in SAMPLE_QUESTIONS}
            target.save_pretrained(p.target)                        # tokenizer files are already there
        with timer.stage("capture hidden states"):
            cap = {name: capture_records(target, enc[name], TRAINING_LAYOUT, progress=progress)
                   for name in CAPTURED_SPLITS}
        with timer.stage("write training data"):
            write_data(p, cap["draft_train"], cap["heldout"], cap["shifted"], cfg.num_hidden_layers)
        with timer.stage("vocab map"):
            V = cfg.vocab_size
            counts = torch.zeros(V, dtype=torch.long)
            for s in cap["draft_train"]:
                counts += torch.bincount(s.input_ids[s.loss_mask.bool()], minlength=V)
            Vd = round(V / 4)
            d2t, t2d = build_vocab_map(counts, Vd)
            shifted_counts = sum(torch.bincount(s.input_ids[s.loss_mask.bool()], minlength=V) for s in cap["shifted"])
            vocab = {"vocab_size": V, "draft_vocab_size": Vd, "distinct_train_tokens": int((counts > 0).sum()),
                     "coverage_train": round(coverage(counts, d2t), 4),
                     "coverage_shifted": round(coverage(shifted_counts, d2t), 4)}
        with timer.stage("draft training"):
            torch.set_num_threads(SIZES["draft_threads"])      # small matmuls: a 2nd thread costs more than it gives
            draft_rec, dcfg_dict = _draft_stage(p.draft, TRAINING_LAYOUT, cap, target, cfg, (Vd, d2t, t2d), seed,
                                                progress)
        retrained = {}
        if kind in RETRAINED:
            with timer.stage("draft training, serving layout"):
                layout = RETRAINED[kind]
                sub = {name: slots_of(rows, layout) for name, rows in cap.items()}   # the serving slots
                rec, _ = _draft_stage(p.retrained_draft, layout, sub, target, cfg, (Vd, d2t, t2d), seed, progress)
                retrained = {"retrained_draft": {
                    **rec, "dir": "draft_retrained", "layout": list(layout),
                    "ids": {"output": to_ids(layout, "output", cfg.num_hidden_layers),
                            "vllm": to_ids(layout, "input", cfg.num_hidden_layers)},
                    "why": "the seed's fix, training on what the engine captures: the same draft trained on the "
                           "serving layout [out L1, out L3, out L5] (no embedding slot), which vLLM's DeepSeek "
                           "target can hand over (vllm deepseek_v2.py:1562 adds a None residual for id 0)"}}
        world = {
            "builder_version": BUILDER_VERSIONS[kind], "kind": kind, "seed": seed, "sizes": SIZES,
            "layouts": {"training": list(TRAINING_LAYOUT), "serving": list(SERVING_LAYOUT)},
            "training_layout": list(TRAINING_LAYOUT), "serving_layout": list(SERVING_LAYOUT),
            "layout_note": "training slots = [embedding output, out L1, out L3, out L5] of 8 layers (draft config "
                           f"ids {to_ids(TRAINING_LAYOUT, 'output', 8)}, output-of-layer; HF hidden_states "
                           f"{to_ids(TRAINING_LAYOUT, 'hf', 8)}); the seed's serving capture has 3 slots "
                           "[out L1, out L3, out L5] while fc expects 4: whoever serves must express that mismatch",
            "target": {"architecture": type(target).__name__, "num_layers": cfg.num_hidden_layers,
                       "hidden_size": cfg.hidden_size, "vocab_size": V,
                       "params": sum(t.numel() for t in target.parameters()), "dtype": "float32", **tstats},
            "vocab": vocab,
            "draft": {**draft_rec, "ttt_steps": SIZES["ttt_steps"], "architecture": dcfg_dict["architectures"][0],
                      "loss_decay": 0.8, "lm_head_init": "target lm_head rows of the draft vocab",
                      "acc_definition": ACC_DEFINITION},
            **retrained,
            "data": {"specforge": "data/specforge", "seed": "data/seed/train.jsonl",
                     "heldout": "data/heldout/heldout.jsonl", "shifted": "data/shifted/shifted.jsonl",
                     "corpus": {n: f"corpus/{n}.jsonl" for n in splits}, "hidden_dtype": "float32",
                     "final_hidden": "final_postnorm"},
            "timings": timer.rows, "build_seconds": round(time.perf_counter() - t_all, 1),
            "residual_scale_note": "after training, the target's residual stream is scaled x"
                                   f"{SIZES['residual_scale']:g} (embedding, o_proj, down_proj; RMSNorm eps x "
                                   f"{SIZES['residual_scale'] ** 2:g}): an exact reparametrization (same logits) that "
                                   "gives hidden states LLM-like magnitudes, large next to the draft fc's scale. "
                                   "Without it this tiny target's adjacent layers are so alike (cos ~0.96) and so "
                                   "small that the draft shrugs off the seed's wrong capture (engine accept length "
                                   "~1.9 vs ~3.5 correct at scale 1; step-0 acc under it 0.49 / 0.33 / 0.23 at "
                                   "scale 3 / 10 / 30, measured while tuning)" + (
                                       "; in this world the eps stay the config's rms_norm_eps 1e-6 (not x "
                                       f"{SIZES['residual_scale'] ** 2:g}): vLLM and SGLang build the MLA latent "
                                       "norms (q_a / kv_a_layernorm) with it where transformers uses 1e-6, so a "
                                       "scaled eps would make the engines' target differ from transformers'; the "
                                       "rescale is then exact up to rescale_max_logit_change"
                                       if kind in EPS_KEPT else ""),
            "environment": {"torch": torch.__version__, "threads": SIZES["threads"],
                            "draft_threads": SIZES["draft_threads"], "python": platform.python_version(),
                            "transformers": __import__("transformers").__version__},
        }
        p.world_json.write_text(json.dumps(world, indent=2) + "\n")
        return world
    finally:
        torch.set_num_threads(threads)
