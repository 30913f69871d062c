"""The embedded demo world: a miniature, fully real version of the seed's failure that runs on CPU.

Two worlds, the same story: `llama` (a Llama target and a Llama-style EAGLE-3 draft, ``data/demo/``) and `mla`
(a DeepSeek-V3-architecture target, MLA + MoE, and an MLA EAGLE-3 draft as SGLang serves for Kimi-K2.x,
``data/demo_mla/``). `select_world(name)` (the notebooks' `demo_world` parameter) or ``$EAGLE3LIB_DEMO_WORLD`` picks
one for the process; `paths()` says where its artifacts live (``$EAGLE3LIB_DEMO_DIR`` overrides the folder);
`ensure_world()` builds them when missing (eagle3lib.demo.build, which also says where each artifact lives:
`DemoPaths`).
"""
from __future__ import annotations

import os
from pathlib import Path

from .build import DemoPaths, artifacts_current, build_world, restore_world, world_json_current

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


def select_world(name: str | None = None) -> str:
    """Make `name` ("llama" or "mla"; empty: keep the current choice) this process's demo world; returns it."""
    chosen = world_name(name)
    os.environ[WORLD_ENV] = chosen
    return chosen


def paths(root: str | os.PathLike | None = None, world: str | None = None) -> DemoPaths:
    """Where the demo world lives (argument, else $EAGLE3LIB_DEMO_DIR, else data/demo or data/demo_mla)."""
    kind = world_name(world)
    root = root or os.environ.get("EAGLE3LIB_DEMO_DIR") or REPO_ROOT / "data" / WORLDS[kind]
    return DemoPaths(Path(root), kind)


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
    if not force and world_json_current(p.world_json, p.kind):
        return p
    p.root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(p.root.parent / f".{p.root.name}.lock"):
        if not force and world_json_current(p.world_json, p.kind):       # built by another process while we waited
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
