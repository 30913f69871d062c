"""The embedded demo world: a miniature, fully real version of the seed's failure that runs on CPU.

Two worlds, the same story: `llama` (a Llama target and a Llama-style EAGLE-3 draft, ``data/demo/``) and `mla`
(a DeepSeek-V3-architecture target, MLA + MoE, and an MLA EAGLE-3 draft as SGLang serves for Kimi-K2.x,
``data/demo_mla/``). `select_world(name)` (the notebooks' `demo_world` parameter) or ``$EAGLE3LIB_DEMO_WORLD`` picks
one for the process; `paths()` says where its artifacts live (``$EAGLE3LIB_DEMO_DIR`` overrides the folder);
`ensure_world()` restores them from the shipped artifacts when missing (`restore`; `artifacts.DemoPaths` says
where each artifact lives). The library trains nothing: when the shipped artifacts are not the current builder
version's, `ensure_world` says so (the builder, ``python -m eagle3demo`` in a source checkout, re-exports them).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from ..errors import DataError
from .shipped import (BUILDER_VERSIONS, DemoPaths, artifacts_current, artifacts_dir, shipped_version,
                        world_json_current)
from .restore import restore_world

REPO_ROOT = Path(__file__).resolve().parents[2]


WORLDS = {"llama": "demo", "mla": "demo_mla"}   # world -> its folder under data/
WORLD_ENV = "EAGLE3LIB_DEMO_WORLD"


def world_name(name: str | None = None) -> str:
    """The demo world asked for: `name`, else $EAGLE3LIB_DEMO_WORLD, else "llama"; DataError for an unknown one."""
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
                 world: str | None = None, make: Callable | None = None) -> DemoPaths:
    """The demo world's paths, restored first from the shipped artifacts (data/demo_artifacts,
    data/demo_artifacts_mla for the mla world) when missing, outdated or `force`: the trained target and draft
    copied, the training data recaptured (seconds). A DataError when the shipped artifacts are not the current
    builder version's (nothing is trained here). `make(tmp_root, progress=, kind=)` writes the world instead of
    the restore (the builder's hook: ``eagle3demo.build.build_world``).

    Writes into a sibling temp directory under a file lock, then renames it into place, so concurrent callers
    (pytest-xdist, a report next to the tests) wait for one restore instead of corrupting it.
    """
    import shutil
    import tempfile
    p = paths(root, world)
    if not force and world_json_current(p.world_json, p.kind):
        return p
    if make is None and not artifacts_current(p.kind):
        shipped = artifacts_dir(p.kind) / "world.json"
        raise DataError(str(shipped.relative_to(REPO_ROOT) if shipped.is_relative_to(REPO_ROOT) else shipped),
                        f"the shipped {p.kind} demo artifacts are not the current builder version's: the demo world "
                        "cannot be restored from them", expected=f"builder_version {BUILDER_VERSIONS[p.kind]}",
                        found=shipped_version(p.kind),
                        cause="the builder changed and its artifacts were not re-exported: run python -m eagle3demo "
                              f"--from-scratch{' --world mla' if p.kind == 'mla' else ''} from a source checkout")
    p.root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(p.root.parent / f".{p.root.name}.lock"):
        if not force and world_json_current(p.world_json, p.kind):       # made by another process while we waited
            return p
        tmp = Path(tempfile.mkdtemp(prefix=f".{p.root.name}.building-", dir=p.root.parent))
        try:
            (make or restore_world)(tmp, progress=progress, kind=p.kind)
            if p.root.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{p.root.name}.old-", dir=p.root.parent))
                p.root.rename(old / "world")
                shutil.rmtree(old, ignore_errors=True)
            tmp.rename(p.root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return p


def add_world_arguments(ap, verb: str) -> None:
    """--world, --force and --root on a command line that makes a demo world (`verb`: "restore" or "build")."""
    ap.add_argument("--world", default=None, choices=sorted(WORLDS),
                    help="which demo world (default $EAGLE3LIB_DEMO_WORLD or llama): mla = DeepSeek-V3 target, "
                         "MLA draft")
    ap.add_argument("--force", action="store_true", help=f"{verb} again even when an up-to-date world exists")
    ap.add_argument("--root", default=None, help=f"where to {verb} (default data/demo or $EAGLE3LIB_DEMO_DIR)")


def world_table(p: DemoPaths) -> str:
    """What a world is, as text: how it was made (stage timings, restored or built), the target's losses, the
    draft's vocabulary and step accuracies, the target's sample answers."""
    world = json.loads(p.world_json.read_text())
    def rows(timings):
        return [f"  {row['stage']:<22}{row['wall_s']:>9.1f}{row['cpu_s']:>9.1f}" for row in timings]
    lines = [f"\n{world.get('kind', 'llama')} demo world at {p.root} (builder {world['builder_version']}, "
             f"seed {world['seed']}, {world['environment']['threads']} torch threads)",
             f"built by the builder in {world['build_seconds']} s:", f"  {'stage':<22}{'wall s':>9}{'CPU s':>9}",
             *rows(world["timings"])]
    if "restored" in world:
        lines += [f"restored from {world['restored']['from']} in {world['restored']['seconds']} s:",
                  *rows(world["restored"]["timings"])]
    t, d, v = world["target"], world["draft"], world["vocab"]
    lines += [f"\ntarget: {t['params']:,} params, train loss {t['final_loss']}, held-out loss {t['heldout_loss']}, "
              f"shifted loss {t['shifted_loss']}",
              f"draft vocab: {v['draft_vocab_size']} of {v['vocab_size']}; coverage of assistant tokens "
              f"{v['coverage_train']:.1%} in-domain, {v['coverage_shifted']:.1%} shifted",
              f"draft step accuracies (TTT 0..{len(d['val_acc']) - 1}): held-out {d['val_acc']}, "
              f"train {d['train_acc']}, shifted {d['shifted_acc']}",
              f"recorded val_acc_step0 = {d['recorded_val_acc_step0']}"]
    lines += [f"  Q: {q}\n  A: {a}" for q, a in t["samples"].items()]
    return "\n".join(lines)


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
