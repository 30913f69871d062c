"""Build the demo world from a seed: corpus, tokenizer, target, captured training data, vocab map, draft.

Stages are timed (wall and CPU seconds) into world.json. The draft uses the seed's 4-slot layout
[embedding output, out L1, out L3, out L5] of an 8-layer target (analogue of [embed, L3, L31, L59] of 61);
the seed's serving capture [out L1, out L3, out L5] is recorded as data. Usage: ``build_world(root, seed=0)``
(normally through ``eagle3lib.demo.ensure_world()``, which builds into a temp dir and renames it in place).
The trained target and draft are also shipped in ``data/demo_artifacts/`` (about 10 MB): `restore_world` rebuilds
the corpus and the captured training data from them in seconds; `export_artifacts` writes them after a build.
`kind="mla"` builds the same story over a DeepSeek-V3-architecture target (MLA + MoE) with an MLA draft, shipped in
``data/demo_artifacts_mla/``.
"""
from __future__ import annotations

import json
import platform
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from ..samples.readers import SEED_FORMAT
from ..samples.sample import Sample
from ..samples.writers import specforge_sample_path, write_seed_dataset, write_specforge_sample
from ..layout import to_ids
from ..model.vocab import build_vocab_map, coverage
from . import corpus as C
from .train_draft import ACC_DEFINITION, Captured, capture_records, draft_config_dict, evaluate_draft, train_draft
from .train_target import eval_loss, greedy_reply, rescale_residual, target_config, train_target

# bump a world's version when the builder changes what it writes for it: ensure_world() then rebuilds it; per world,
# so retraining one leaves the other's shipped artifacts current (mla 5: DeepSeek-V3's latent 512 + 64)
BUILDER_VERSIONS = {"llama": "demo-world-4", "mla": "demo-world-mla-5"}


def world_json_current(path: Path, kind: str = "llama") -> bool:
    """True when the world.json at `path` exists and was written by this builder version for a `kind` world."""
    try:
        w = json.loads(Path(path).read_text())
        return w.get("builder_version") == BUILDER_VERSIONS.get(kind) and w.get("kind", "llama") == kind
    except (OSError, ValueError, AttributeError):
        return False


@dataclass(frozen=True)
class DemoPaths:
    """Where the builder writes each artifact of one demo world under `root` (world.paths() picks the root)."""
    root: Path
    kind: str = "llama"                # which world: "llama" or "mla"

    @property
    def target(self) -> Path:          # HF model dir (Llama / DeepseekV3ForCausalLM): config, weights, tokenizer
        return self.root / "target"

    @property
    def draft(self) -> Path:           # SpecForge/SGLang-format EAGLE-3 draft, MLA in the mla world (no embed_tokens)
        return self.root / "draft"

    @property
    def retrained_draft(self) -> Path:  # mla world: the draft retrained on the serving layout (vLLM can serve it)
        return self.root / "draft_retrained"

    @property
    def retrained_data(self) -> Path:   # mla world: the retrained draft's training data (serving layout slots):
        return self.root / "data" / "retrained"   # specforge/, seed/, heldout/ as below

    @property
    def specforge_data(self) -> Path:  # data_<i>.ckpt training files (in-domain, training split)
        return self.root / "data" / "specforge"

    @property
    def seed_data(self) -> Path:       # the seed's format: train.jsonl + per-sample safetensors
        return self.root / "data" / "seed"

    @property
    def heldout_data(self) -> Path:    # in-domain held-out split (seed format)
        return self.root / "data" / "heldout"

    @property
    def shifted_data(self) -> Path:    # shifted-domain prompts/samples (seed format)
        return self.root / "data" / "shifted"

    @property
    def training_log(self) -> Path:    # JSON lines written by draft training, incl. the validation accuracy
        return self.root / "draft" / "training_log.jsonl"

    @property
    def world_json(self) -> Path:      # what the world is: layouts, seeds, sizes, build time
        return self.root / "world.json"

TRAINING_LAYOUT = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")   # = output ids [-1, 1, 3, 5]
SERVING_LAYOUT = ("layer_in.2", "layer_in.4", "layer_in.6")             # the seed's wrong capture: no embed slot
EPS_KEPT = {"mla"}      # worlds whose rescale keeps rms_norm_eps (train_target.rescale_residual: the engines' MLA
                        # latent norms read it)
RETRAINED = {"mla": SERVING_LAYOUT}    # worlds that also train a draft on the serving layout (the fix: train on what
                                       # the engine captures; vLLM's DeepSeek cannot hand over the embedding slot)
SIZES = {"target_kitchen": 3200, "target_nature": 1200, "draft_train": 512, "heldout": 128, "shifted": 128,
         "tokenizer_vocab": 3072, "target_steps": 400, "target_batch": 12, "target_lr": 5e-3, "residual_scale": 30.0,
         "draft_steps": 600, "draft_batch": 6, "draft_lr": 3e-3, "ttt_steps": 3, "threads": 2, "draft_threads": 1}
SAMPLE_QUESTIONS = ("How do I make pancakes?", "What is the weather like in Oslo in July?",
                    "Hi, I am Maren. What can I use instead of butter?", "Tell me about the otter.")


class _Timer:
    """Wall and CPU seconds per stage, printed as they finish when `progress`."""

    def __init__(self, progress: bool):
        self.rows, self.progress = [], progress

    @contextmanager
    def stage(self, name: str):
        w, c = time.perf_counter(), time.process_time()
        if self.progress:
            print(f"[demo] {name} ...", flush=True)
        yield
        row = {"stage": name, "wall_s": round(time.perf_counter() - w, 1), "cpu_s": round(time.process_time() - c, 1)}
        self.rows.append(row)
        if self.progress:
            print(f"[demo] {name}: {row['wall_s']} s wall, {row['cpu_s']} s CPU", flush=True)


def _write_data(p: DemoPaths, train: list[Captured], heldout: list[Captured], shifted: list[Captured],
                num_layers: int) -> None:
    """Training split in SpecForge .ckpt files and the seed format; held-out and shifted splits in the seed format.
    A world in RETRAINED also gets its retrained draft's data (the serving layout's slots) under data/retrained/."""
    _write_splits(p.specforge_data, TRAINING_LAYOUT, num_layers, "../../target",
                  (("train", train, p.seed_data, "kitchen"), ("heldout", heldout, p.heldout_data, "kitchen"),
                   ("shifted", shifted, p.shifted_data, "nature")))
    if p.kind in RETRAINED:
        layout = RETRAINED[p.kind]
        d = p.retrained_data
        sub = [_slots(rows, layout) for rows in (train, heldout)]
        _write_splits(d / "specforge", layout, num_layers, "../../../target",
                      (("train", sub[0], d / "seed", "kitchen"), ("heldout", sub[1], d / "heldout", "kitchen")))


def _slots(rows: list[Captured], layout: tuple[str, ...]) -> list[Captured]:
    """The captured samples with only `layout`'s slots (each a TRAINING_LAYOUT slot): (T, 4, Ht) -> (T, k, Ht)."""
    idx = [TRAINING_LAYOUT.index(s) for s in layout]
    return [Captured(c.id, c.input_ids, c.loss_mask, c.aux[:, idx], c.final) for c in rows]


def _write_splits(specforge: Path, layout: tuple[str, ...], num_layers: int, target: str, splits) -> None:
    """The first split in SpecForge .ckpt files under `specforge`, every split (name, rows, dir, domain) in the seed
    format, all at `layout`."""
    for i, s in enumerate(splits[0][1]):
        T, k, Ht = s.aux.shape
        write_specforge_sample(specforge_sample_path(specforge, i), s.input_ids, s.loss_mask,
                               hidden_state=s.final, aux_hidden_state=s.aux.reshape(T, k * Ht))  # (T,k,Ht)->(T,k*Ht)
    for split, rows, d, domain in splits:
        samples = (Sample(s.id, s.input_ids, s.loss_mask, s.aux, layout, s.final) for s in rows)
        info = {"format": SEED_FORMAT, "layout": list(layout), "num_target_layers": num_layers,
                "target": target, "split": split, "domain": domain}
        write_seed_dataset(d, samples, layout=layout, info=info, index_name=f"{split}.jsonl")


ARTIFACTS = Path(__file__).resolve().parents[2] / "data" / "demo_artifacts"
SAMPLES = ARTIFACTS.parent / "samples"
KINDS = ("llama", "mla")


def artifacts_dir(kind: str = "llama") -> Path:
    """Where a world's trained target and draft are shipped: data/demo_artifacts (llama), data/demo_artifacts_mla."""
    return ARTIFACTS if kind == "llama" else ARTIFACTS.with_name(f"{ARTIFACTS.name}_{kind}")
_SHIPPED = ("target", "draft", "draft_retrained")   # trained models (those a world has); corpus, tokenizer inputs and
                                                     # hidden-state data are rebuilt


def _corpus(p: DemoPaths, seed: int):
    """The corpus splits (written under corpus/) and their token ids + loss masks with the target's tokenizer."""
    from transformers import AutoTokenizer
    kitchen = C.conversations("kitchen", SIZES["target_kitchen"], seed)
    target_recs = kitchen + C.conversations("nature", SIZES["target_nature"], seed)
    random.Random(seed).shuffle(target_recs)
    splits = {"target_train": target_recs, "draft_train": kitchen[:SIZES["draft_train"]],
              "heldout": C.conversations("kitchen", SIZES["heldout"], seed, split="heldout"),
              "shifted": C.conversations("nature", SIZES["shifted"], seed, split="heldout")}
    (p.root / "corpus").mkdir(parents=True, exist_ok=True)
    for name, recs in splits.items():       # SpecForge input format: {"id", "conversations": [...]}
        (p.root / "corpus" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    if not (p.target / "tokenizer.json").exists():
        tok = C.train_tokenizer([m["content"] for r in target_recs for m in r["conversations"]],
                                SIZES["tokenizer_vocab"])
        C.save_tokenizer(tok, p.target, model_max_length=512)
    hf_tok = AutoTokenizer.from_pretrained(p.target)
    return splits, hf_tok, {name: [(r["id"], *C.encode_with_mask(hf_tok, r)) for r in recs]
                            for name, recs in splits.items()}


def artifacts_current(kind: str = "llama", artifacts: Path | None = None) -> bool:
    """True when shipped artifacts exist and were exported by this builder version."""
    return world_json_current((artifacts or artifacts_dir(kind)) / "world.json", kind)


def restore_world(root: str | Path, artifacts: Path | None = None, progress: bool = True, kind: str = "llama") -> dict:
    """The world from shipped artifacts: copy the trained target and draft, regenerate the corpus and recapture
    the training data with the shipped target (deterministic; seconds instead of minutes)."""
    import shutil

    from transformers import AutoModelForCausalLM
    p, artifacts = DemoPaths(Path(root), kind), artifacts or artifacts_dir(kind)
    world = json.loads((artifacts / "world.json").read_text())
    timer, threads = _Timer(progress), torch.get_num_threads()
    torch.set_num_threads(SIZES["threads"])
    t_all = time.perf_counter()
    try:
        with timer.stage("copy shipped target + draft"):
            for name in _SHIPPED:
                if (artifacts / name).is_dir():
                    shutil.copytree(artifacts / name, p.root / name, dirs_exist_ok=True)
        with timer.stage("corpus"):
            splits, _, enc = _corpus(p, world["seed"])
        with timer.stage("capture hidden states"):
            target = AutoModelForCausalLM.from_pretrained(p.target, trust_remote_code=False).eval()
            cap = {name: capture_records(target, enc[name], TRAINING_LAYOUT, progress=progress)
                   for name in ("draft_train", "heldout", "shifted")}
        with timer.stage("write training data"):
            _write_data(p, cap["draft_train"], cap["heldout"], cap["shifted"], target.config.num_hidden_layers)
        world["restored"] = {"from": f"data/{artifacts.name} (trained target + draft shipped with the repo)",
                             "timings": timer.rows, "seconds": round(time.perf_counter() - t_all, 1)}
        p.world_json.write_text(json.dumps(world, indent=2) + "\n")
        return world
    finally:
        torch.set_num_threads(threads)


def export_artifacts(root: str | Path, artifacts: Path | None = None) -> Path:
    """Copy a freshly built world's trained target and draft (and world.json) to the shipped artifacts."""
    import shutil
    p = DemoPaths(Path(root))
    kind = json.loads(p.world_json.read_text()).get("kind", "llama")
    artifacts = artifacts or artifacts_dir(kind)
    for name in _SHIPPED:
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
    from ..model.draft import Eagle3Draft
    from ..model.checkpoint import save_draft
    from ..model.config import DraftConfig
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
    timer, threads = _Timer(progress), torch.get_num_threads()
    torch.set_num_threads(SIZES["threads"])
    t_all = time.perf_counter()
    try:
        with timer.stage("corpus + tokenizer"):
            splits, hf_tok, enc = _corpus(p, seed)
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
                   for name in ("draft_train", "heldout", "shifted")}
        with timer.stage("write training data"):
            _write_data(p, cap["draft_train"], cap["heldout"], cap["shifted"], cfg.num_hidden_layers)
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
                sub = {name: _slots(rows, layout) for name, rows in cap.items()}   # the serving slots
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
