"""A draft folder copied with edits: the variants an engine check serves or probes (ids moved, a key renamed).

`edited_copy(src, dst, config={...}, drop_config=[...], rename={...}, drop=[...], add={...})` writes `dst` as
`src` with config.json keys removed, then set (a dotted key such as ``eagle_config.layer_ids`` names a nested one),
and the safetensors tensors renamed, dropped or added; other files are copied as they are. `config` may instead be
a function editing the config dict in place, and `tensors` a function editing the tensors in place (given them and
the `target` folder): the demo's planted defects are such functions. `fresh=True` replaces `dst` first. The source
is never touched unless it is `dst` (an edit in place).
Usage: ``edited_copy(draft, tmp / "d2t_renamed", rename={"d2t": "draft_id_to_target_id"})``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError, MissingFileError
from ..model.safefiles import load_safetensors


def _set(cfg: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def _pop(cfg: dict, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    node = cfg
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def edited_copy(src, dst, *, config: dict | Callable[[dict], None] | None = None, drop_config=(),
                rename: dict | None = None, drop=(), add: dict[str, torch.Tensor] | None = None,
                tensors: Callable[[dict, Path | None], None] | None = None, target=None, fresh: bool = False) -> Path:
    """Copy the draft folder `src` to `dst` with the given config and tensor edits; returns `dst`."""
    src, dst = Path(src), Path(dst)
    if not (src / "config.json").is_file():
        raise MissingFileError(f"draft {src}", "no config.json to copy", expected="a draft folder", found="none")
    if src.resolve() != dst.resolve():            # dst == src: edit in place
        if fresh:
            shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, dirs_exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    for k in drop_config:             # removals first: a key both dropped and set ends up set
        _pop(cfg, k)
    if callable(config):
        config(cfg)
    for k, v in ({} if callable(config) else config or {}).items():
        _set(cfg, k, v)
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    files = sorted(dst.glob("*.safetensors"))
    edits = bool(rename or drop or add or tensors)
    if edits and len(files) != 1:
        raise CheckpointError(f"draft {src}", "tensor edits need exactly one safetensors file",
                              expected="model.safetensors", found=[f.name for f in files])
    if edits:
        sd = load_safetensors(files[0])
        missing = [k for k in [*(rename or {}), *drop] if k not in sd]
        if missing:
            raise CheckpointError(f"draft {files[0]}", "tensors to rename or drop are absent", found=missing)
        sd = {(rename or {}).get(k, k): t for k, t in sd.items() if k not in drop}
        sd.update(add or {})
        if tensors is not None:
            tensors(sd, Path(target) if target is not None else None)
        save_file({k: t.contiguous() for k, t in sd.items()}, str(files[0]))
    return dst
