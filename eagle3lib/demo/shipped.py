"""The demo world's shipped artifacts and where a world's files lie: the builder versions they must match.

The trained target and draft of each world are shipped in ``data/demo_artifacts/`` (llama) and
``data/demo_artifacts_mla/`` (mla), with the world.json the builder wrote. The builder (``eagle3demo``, beside the
library in a source checkout) stamps its version there; the library restores a world only from artifacts of the
version named here (`BUILDER_VERSIONS`, the one home of those versions: the builder imports them).
Usage: ``artifacts_current("mla")``; ``DemoPaths(root, "llama").heldout_data``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# bump a world's version when the builder changes what it writes for it: the library then refuses the shipped
# artifacts until the builder re-exports them; per world, so retraining one leaves the other's shipped artifacts
# current (mla 5: DeepSeek-V3's latent 512 + 64)
BUILDER_VERSIONS = {"llama": "demo-world-4", "mla": "demo-world-mla-5"}
KINDS = ("llama", "mla")
ARTIFACTS = Path(__file__).resolve().parents[2] / "data" / "demo_artifacts"


def world_json_current(path: Path, kind: str = "llama") -> bool:
    """True when the world.json at `path` exists and was written by this builder version for a `kind` world."""
    try:
        w = json.loads(Path(path).read_text())
        return w.get("builder_version") == BUILDER_VERSIONS.get(kind) and w.get("kind", "llama") == kind
    except (OSError, ValueError, AttributeError):
        return False


def artifacts_dir(kind: str = "llama") -> Path:
    """Where a world's trained target and draft are shipped: data/demo_artifacts (llama), data/demo_artifacts_mla."""
    return ARTIFACTS if kind == "llama" else ARTIFACTS.with_name(f"{ARTIFACTS.name}_{kind}")


def artifacts_current(kind: str = "llama", artifacts: Path | None = None) -> bool:
    """True when shipped artifacts exist and were exported by this builder version."""
    return world_json_current((artifacts or artifacts_dir(kind)) / "world.json", kind)


def shipped_version(kind: str = "llama", artifacts: Path | None = None) -> str:
    """The builder version the shipped world.json names ("missing" / "unreadable" when it cannot say)."""
    path = (artifacts or artifacts_dir(kind)) / "world.json"
    try:
        w = json.loads(path.read_text())
    except OSError:
        return "missing"
    except ValueError:
        return "unreadable"
    return f"{w.get('builder_version')} (kind {w.get('kind', 'llama')})" if isinstance(w, dict) else "unreadable"


@dataclass(frozen=True)
class DemoPaths:
    """Where each artifact of one demo world lies under `root` (world.paths() picks the root)."""
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
