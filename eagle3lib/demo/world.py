"""The embedded demo world: a miniature, fully real version of the seed's failure that runs on CPU.

Two worlds, the same story: `llama` (a Llama target and a Llama-style EAGLE-3 draft, ``data/demo/``) and `mla`
(a DeepSeek-V3-architecture target, MLA + MoE, and an MLA EAGLE-3 draft as SGLang serves for Kimi-K2.x,
``data/demo_mla/``). `select(name)` (the notebooks' `demo_world` parameter) or ``$EAGLE3LIB_DEMO_WORLD`` picks
one for the process; `paths()` says where its artifacts live (``$EAGLE3LIB_DEMO_DIR`` overrides the folder);
`ensure_world()` builds them when missing (see eagle3lib.demo.build).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


WORLDS = {"llama": "demo", "mla": "demo_mla"}   # world -> its folder under data/
WORLD_ENV = "EAGLE3LIB_DEMO_WORLD"


def world_name(name: str | None = None) -> str:
    """The demo world asked for: `name`, else $EAGLE3LIB_DEMO_WORLD, else "llama"; DataError for an unknown one."""
    from ..errors import DataError
    name = (name or os.environ.get(WORLD_ENV) or "llama").strip().lower()
    if name not in WORLDS:
        raise DataError(f"demo world {name!r}", "unknown demo world", expected=sorted(WORLDS), found=name,
                        cause="a typo in the notebooks' demo_world parameter or $EAGLE3LIB_DEMO_WORLD")
    return name


def select(name: str | None = None) -> str:
    """Make `name` ("llama" or "mla"; empty: keep the current choice) this process's demo world; returns it."""
    chosen = world_name(name)
    os.environ[WORLD_ENV] = chosen
    return chosen


@dataclass(frozen=True)
class DemoPaths:
    root: Path
    kind: str = "llama"                # which world: "llama" or "mla"

    @property
    def target(self) -> Path:          # HF model dir (Llama / DeepseekV3ForCausalLM): config, weights, tokenizer
        return self.root / "target"

    @property
    def draft(self) -> Path:           # SpecForge/SGLang-format EAGLE-3 draft, MLA in the mla world (no embed_tokens)
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


def paths(root: str | os.PathLike | None = None, world: str | None = None) -> DemoPaths:
    """Where the demo world lives (argument, else $EAGLE3LIB_DEMO_DIR, else data/demo or data/demo_mla)."""
    kind = world_name(world)
    root = root or os.environ.get("EAGLE3LIB_DEMO_DIR") or REPO_ROOT / "data" / WORLDS[kind]
    return DemoPaths(Path(root), kind)


BUILDER_VERSION = "demo-world-4"   # bump when the builder changes what it writes: ensure_world() then rebuilds


def _is_current(p: DemoPaths) -> bool:
    """True when world.json exists and was written by this builder version for this kind of world."""
    import json
    try:
        w = json.loads(p.world_json.read_text())
        return w.get("builder_version") == BUILDER_VERSION and w.get("kind", "llama") == p.kind
    except (OSError, ValueError, AttributeError):
        return False


def ensure_world(root: str | os.PathLike | None = None, force: bool = False, progress: bool = True,
                 from_scratch: bool = False, world: str | None = None) -> DemoPaths:
    """The demo world's paths, building it first when missing, outdated or `force`.

    By default the trained target and draft shipped in data/demo_artifacts (data/demo_artifacts_mla for the mla
    world) are restored and the training data
    recaptured (seconds); `from_scratch` (or no current artifacts) trains everything (minutes on 2 cores).

    Builds into a sibling temp directory under a file lock, then renames it into place, so concurrent callers
    (pytest-xdist, a report next to the tests) wait for one build instead of corrupting it.
    """
    import shutil
    import tempfile
    p = paths(root, world)
    if not force and _is_current(p):
        return p
    from .build import artifacts_current, build_world, restore_world
    p.root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(p.root.parent / f".{p.root.name}.lock"):
        if not force and _is_current(p):       # built by another process while we waited
            return p
        tmp = Path(tempfile.mkdtemp(prefix=f".{p.root.name}.building-", dir=p.root.parent))
        try:
            if from_scratch or not artifacts_current(p.kind):
                build_world(tmp, progress=progress, kind=p.kind)
            else:
                restore_world(tmp, progress=progress, kind=p.kind)
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
