"""The embedded demo world: a miniature, fully real version of the seed's failure that runs on CPU.

`paths()` says where its artifacts live (default ``data/demo/`` in the repo, or ``$EAGLE3LIB_DEMO_DIR``);
`ensure_world()` builds them when missing (see eagle3lib.demo.build).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DemoPaths:
    root: Path

    @property
    def target(self) -> Path:          # HF LlamaForCausalLM dir: config.json, model.safetensors, tokenizer
        return self.root / "target"

    @property
    def draft(self) -> Path:           # SpecForge/SGLang-format EAGLE-3 draft (no embed_tokens)
        return self.root / "draft"

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


def paths(root: str | os.PathLike | None = None) -> DemoPaths:
    """Where the demo world lives (argument, else $EAGLE3LIB_DEMO_DIR, else data/demo in the repo)."""
    root = root or os.environ.get("EAGLE3LIB_DEMO_DIR") or REPO_ROOT / "data" / "demo"
    return DemoPaths(Path(root))
