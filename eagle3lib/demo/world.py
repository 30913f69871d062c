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


BUILDER_VERSION = "demo-world-4"   # bump when the builder changes what it writes: ensure_world() then rebuilds


def _is_current(p: DemoPaths) -> bool:
    """True when world.json exists and was written by this builder version."""
    import json
    try:
        return json.loads(p.world_json.read_text()).get("builder_version") == BUILDER_VERSION
    except (OSError, ValueError, AttributeError):
        return False


def ensure_world(root: str | os.PathLike | None = None, force: bool = False, progress: bool = True,
                 from_scratch: bool = False) -> DemoPaths:
    """The demo world's paths, building it first when missing, outdated or `force`.

    By default the trained target and draft shipped in data/demo_artifacts are restored and the training data
    recaptured (seconds); `from_scratch` (or no current artifacts) trains everything (minutes on 2 cores).

    Builds into a sibling temp directory under a file lock, then renames it into place, so concurrent callers
    (pytest-xdist, a report next to the tests) wait for one build instead of corrupting it.
    """
    import shutil
    import tempfile
    p = paths(root)
    if not force and _is_current(p):
        return p
    from .build import artifacts_current, build_world, restore_world
    p.root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(p.root.parent / f".{p.root.name}.lock"):
        if not force and _is_current(p):       # built by another process while we waited
            return p
        tmp = Path(tempfile.mkdtemp(prefix=f".{p.root.name}.building-", dir=p.root.parent))
        try:
            if from_scratch or not artifacts_current():
                build_world(tmp, progress=progress)
            else:
                restore_world(tmp, progress=progress)
            if p.root.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{p.root.name}.old-", dir=p.root.parent))
                p.root.rename(old / "world")
                shutil.rmtree(old, ignore_errors=True)
            tmp.rename(p.root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return p


class _locked:
    """Exclusive advisory lock on a file (fcntl; a no-op where fcntl does not exist)."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.f = open(self.path, "a")
        try:
            import fcntl
            fcntl.flock(self.f, fcntl.LOCK_EX)
        except ImportError:
            pass
        return self

    def __exit__(self, *exc):
        self.f.close()                           # closing releases the lock
        return False
