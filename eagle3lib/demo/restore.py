"""The demo world restored from its shipped artifacts: nothing is trained here.

The trained target and draft (``data/demo_artifacts``, `artifacts.artifacts_dir`) are copied; the code-generated
chat corpus is regenerated from the world's seed and encoded with the shipped target's tokenizer; the target's
hidden states are captured over it at the training layout and written as the world's training data (SpecForge
.ckpt files and the seed format), deterministic, in seconds. The world's shape (layouts, sizes, the splits) is
defined here once; the builder (``eagle3demo``) trains on the same definitions.
Usage: ``restore_world(root, kind="mla")`` (normally through ``world.ensure_world()``).
"""
from __future__ import annotations

import json
import random
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..layout import to_ids
from ..progress import track
from ..samples.readers import SEED_FORMAT
from ..samples.sample import Sample
from ..samples.writers import specforge_sample_path, write_seed_dataset, write_specforge_sample
from . import corpus as C
from .shipped import DemoPaths, artifacts_dir

TRAINING_LAYOUT = ("embed", "layer_in.2", "layer_in.4", "layer_in.6")   # = output ids [-1, 1, 3, 5]
SERVING_LAYOUT = ("layer_in.2", "layer_in.4", "layer_in.6")             # the seed's wrong capture: no embed slot
RETRAINED = {"mla": SERVING_LAYOUT}    # worlds that also train a draft on the serving layout (the fix: train on what
                                       # the engine captures; vLLM's DeepSeek cannot hand over the embedding slot)
SIZES = {"target_kitchen": 3200, "target_nature": 1200, "draft_train": 512, "heldout": 128, "shifted": 128,
         "tokenizer_vocab": 3072, "target_steps": 400, "target_batch": 12, "target_lr": 5e-3, "residual_scale": 30.0,
         "draft_steps": 600, "draft_batch": 6, "draft_lr": 3e-3, "ttt_steps": 3, "threads": 2, "draft_threads": 1}
SHIPPED = ("target", "draft", "draft_retrained")   # trained models (those a world has); corpus, tokenizer inputs and
                                                    # hidden-state data are rebuilt
CAPTURED_SPLITS = ("draft_train", "heldout", "shifted")


class Timer:
    """Wall and CPU seconds per stage (`rows`, for world.json), printed as they finish when `progress`."""

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


@dataclass(frozen=True)
class Captured:
    """One sample's tokens and the target's states at the training layout."""
    id: str
    input_ids: Tensor     # [T] int64
    loss_mask: Tensor     # [T] int64
    aux: Tensor           # [T, k, Ht], slots in layout order
    final: Tensor         # [T, Ht] final post-norm state (SpecForge `hidden_state`)


@torch.no_grad()
def capture_records(model, records: list[tuple[str, list[int], list[int]]], layout: tuple[str, ...],
                    batch_size: int = 32, progress: bool = False) -> list[Captured]:
    """Run the HF target over (id, input_ids, loss_mask) records; keep `layout` slots and the final post-norm state."""
    L = model.config.num_hidden_layers
    hf_idx = to_ids(layout, "hf", L)                         # HF hidden_states index per slot
    out = []
    for i in track(range(0, len(records), batch_size), desc="capture", progress=progress, unit="batch",
                   mininterval=2.0):
        chunk = records[i:i + batch_size]
        T = max(len(r[1]) for r in chunk)
        ids = torch.zeros(len(chunk), T, dtype=torch.long)
        am = torch.zeros(len(chunk), T, dtype=torch.long)
        for j, (_, toks, _) in enumerate(chunk):
            ids[j, :len(toks)], am[j, :len(toks)] = torch.tensor(toks), 1
        hs = model(input_ids=ids, attention_mask=am, output_hidden_states=True).hidden_states   # L+1 x (B, T, Ht)
        aux = torch.stack([hs[h] for h in hf_idx], dim=2)    # k x (B, T, Ht) -> (B, T, k, Ht)
        for j, (sid, toks, mask) in enumerate(chunk):
            n = len(toks)
            out.append(Captured(sid, torch.tensor(toks, dtype=torch.long), torch.tensor(mask, dtype=torch.long),
                                aux[j, :n].clone(), hs[L][j, :n].clone()))
    return out


def corpus_splits(seed: int) -> dict[str, list[dict]]:
    """The world's conversations by split: target_train (both domains, shuffled), draft_train, heldout, shifted."""
    kitchen = C.conversations("kitchen", SIZES["target_kitchen"], seed)
    target_recs = kitchen + C.conversations("nature", SIZES["target_nature"], seed)
    random.Random(seed).shuffle(target_recs)
    return {"target_train": target_recs, "draft_train": kitchen[:SIZES["draft_train"]],
            "heldout": C.conversations("kitchen", SIZES["heldout"], seed, split="heldout"),
            "shifted": C.conversations("nature", SIZES["shifted"], seed, split="heldout")}


def encoded_corpus(p: DemoPaths, splits: dict[str, list[dict]]):
    """The splits written under corpus/ (SpecForge's input format) and encoded with the tokenizer in p.target:
    (the tokenizer, {split: [(id, input_ids, loss_mask)]})."""
    from transformers import AutoTokenizer
    (p.root / "corpus").mkdir(parents=True, exist_ok=True)
    for name, recs in splits.items():       # SpecForge input format: {"id", "conversations": [...]}
        (p.root / "corpus" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    hf_tok = AutoTokenizer.from_pretrained(p.target)
    return hf_tok, {name: [(r["id"], *C.encode_with_mask(hf_tok, r)) for r in recs] for name, recs in splits.items()}


def slots_of(rows: list[Captured], layout: tuple[str, ...]) -> list[Captured]:
    """The captured samples with only `layout`'s slots (each a TRAINING_LAYOUT slot): (T, 4, Ht) -> (T, k, Ht)."""
    idx = [TRAINING_LAYOUT.index(s) for s in layout]
    return [Captured(c.id, c.input_ids, c.loss_mask, c.aux[:, idx], c.final) for c in rows]


def write_data(p: DemoPaths, train: list[Captured], heldout: list[Captured], shifted: list[Captured],
               num_layers: int) -> None:
    """Training split in SpecForge .ckpt files and the seed format; held-out and shifted splits in the seed format.
    A world in RETRAINED also gets its retrained draft's data (the serving layout's slots) under data/retrained/."""
    _write_splits(p.specforge_data, TRAINING_LAYOUT, num_layers, "../../target",
                  (("train", train, p.seed_data, "kitchen"), ("heldout", heldout, p.heldout_data, "kitchen"),
                   ("shifted", shifted, p.shifted_data, "nature")))
    if p.kind in RETRAINED:
        layout = RETRAINED[p.kind]
        d = p.retrained_data
        sub = [slots_of(rows, layout) for rows in (train, heldout)]
        _write_splits(d / "specforge", layout, num_layers, "../../../target",
                      (("train", sub[0], d / "seed", "kitchen"), ("heldout", sub[1], d / "heldout", "kitchen")))


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


def restore_world(root: str | Path, artifacts: Path | None = None, progress: bool = True, kind: str = "llama") -> dict:
    """The world from shipped artifacts: copy the trained target and draft, regenerate the corpus and recapture
    the training data with the shipped target (deterministic; seconds instead of minutes); its world.json dict."""
    from transformers import AutoModelForCausalLM
    p, artifacts = DemoPaths(Path(root), kind), artifacts or artifacts_dir(kind)
    world = json.loads((artifacts / "world.json").read_text())
    timer, threads = Timer(progress), torch.get_num_threads()
    torch.set_num_threads(SIZES["threads"])
    t_all = time.perf_counter()
    try:
        with timer.stage("copy shipped target + draft"):
            for name in SHIPPED:
                if (artifacts / name).is_dir():
                    shutil.copytree(artifacts / name, p.root / name, dirs_exist_ok=True)
        with timer.stage("corpus"):
            _, enc = encoded_corpus(p, corpus_splits(world["seed"]))
        with timer.stage("capture hidden states"):
            target = AutoModelForCausalLM.from_pretrained(p.target, trust_remote_code=False).eval()
            cap = {name: capture_records(target, enc[name], TRAINING_LAYOUT, progress=progress)
                   for name in CAPTURED_SPLITS}
        with timer.stage("write training data"):
            write_data(p, cap["draft_train"], cap["heldout"], cap["shifted"], target.config.num_hidden_layers)
        world["restored"] = {"from": f"data/{artifacts.name} (trained target + draft shipped with the repo)",
                             "timings": timer.rows, "seconds": round(time.perf_counter() - t_all, 1)}
        p.world_json.write_text(json.dumps(world, indent=2) + "\n")
        return world
    finally:
        torch.set_num_threads(threads)
