"""Writers for the training-data formats eagle3lib reads (tests and the demo world produce data through these).

SpecForge `data_<idx>.ckpt[.gz]` (a torch.save'd dict, exactly as `prepare_hidden_states.py` writes it), the seed
format (`train.jsonl` + per-sample safetensors + `dataset_info.json`) and speculators `hs_<i>.safetensors`.
All write one sample at a time. Read back with `eagle3lib.samples.readers.open_dataset`.
"""
from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Iterable

import torch
from safetensors.torch import save_file
from torch import Tensor

from .readers import SEED_FORMAT
from .sample import Sample
from ..errors import DataError
from ..layout import parse_layout

_SAFE_ID = re.compile(r"[A-Za-z0-9_.\-]+")


def specforge_sample_path(root: str | os.PathLike, idx: int, compress: bool = False, group_size: int = 2000) -> Path:
    """Where SpecForge puts row `idx`: root/rows_<g>-<g+group_size>/data_<idx>.ckpt[.gz]."""
    g = idx // group_size * group_size
    return Path(root) / f"rows_{g}-{g + group_size}" / f"data_{idx}.ckpt{'.gz' if compress else ''}"


def _with_batch(t: Tensor) -> Tensor:
    return t if t.dim() == 3 else t.unsqueeze(0)  # (T, X) -> (1, T, X), SpecForge keeps the batch dim


def write_specforge_sample(path: str | os.PathLike, input_ids: Tensor, loss_mask: Tensor, hidden_state: Tensor,
                           aux_hidden_state: Tensor, compress: bool = False) -> Path:
    """torch.save one SpecForge DataPoint dict: input_ids/loss_mask [T] int64, hidden_state [1,T,Ht], aux [1,T,k*Ht]."""
    path = Path(path)
    if compress and not path.name.endswith(".gz"):
        path = path.with_name(path.name + ".gz")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"input_ids": torch.as_tensor(input_ids, dtype=torch.long).reshape(-1),
            "loss_mask": torch.as_tensor(loss_mask, dtype=torch.long).reshape(-1),
            "hidden_state": _with_batch(hidden_state).contiguous(),
            "aux_hidden_state": _with_batch(aux_hidden_state).contiguous()}
    if compress:
        with gzip.open(path, "wb") as f:
            torch.save(data, f)
    else:
        torch.save(data, path)
    return path


def write_seed_sample(directory: str | os.PathLike, s: Sample, layout=None) -> dict:
    """One seed-format sample: hidden_states/<id>.safetensors under `directory`; -> its train.jsonl record."""
    directory = Path(directory)
    if not _SAFE_ID.fullmatch(s.id):
        raise DataError(f"write_seed_dataset, sample '{s.id}'", "sample id unusable as a file name",
                        expected="ids of letters, digits, '_', '.', '-'", found=repr(s.id))
    lay = tuple(layout) if layout is not None else s.layout
    if lay is not None and len(lay) != s.num_slots:
        raise DataError(f"write_seed_dataset, sample '{s.id}'", "layout length disagrees with the aux slots",
                        expected=s.num_slots, found=list(lay))
    tensors = {f"aux.{i}": s.aux[:, i].contiguous() for i in range(s.num_slots)}  # (T, k, Ht) -> k x (T, Ht)
    meta = {"format": SEED_FORMAT}
    if lay is not None:
        meta["layout"] = ",".join(lay)
    if s.final_hidden is not None:
        tensors["final_hidden"] = s.final_hidden.contiguous()
        meta["final_boundary"] = s.final_boundary or "final_postnorm"
    rel = f"hidden_states/{s.id}.safetensors"
    (directory / "hidden_states").mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / rel), metadata=meta)
    return {"id": s.id, "input_ids": s.input_ids.tolist(), "loss_mask": s.loss_mask.tolist(),
            "seq_len": s.num_tokens, "hidden_states": rel}


def write_seed_info(directory: str | os.PathLike, n: int, layout, hidden_size: int | None,
                    info: dict | None = None) -> Path:
    """dataset_info.json of a seed-format folder: the format, the dataset-wide layout (None: per sample), H, count."""
    meta = {"format": SEED_FORMAT, "layout": list(layout) if layout is not None else None,
            "target_hidden_size": hidden_size, "num_samples": n}
    path = Path(directory) / "dataset_info.json"
    path.write_text(json.dumps({**dict(info or {}), **{k: v for k, v in meta.items() if v is not None}}, indent=2)
                    + "\n")
    return path


def write_seed_dataset(directory: str | os.PathLike, samples: Iterable[Sample], layout=None,
                       info: dict | None = None, index_name: str = "train.jsonl") -> Path:
    """Stream samples into the seed format (index + hidden_states/<id>.safetensors + dataset_info.json); -> index."""
    directory = Path(directory)
    (directory / "hidden_states").mkdir(parents=True, exist_ok=True)
    info = dict(info or {})
    num_layers = info.get("num_target_layers")
    fixed = parse_layout(layout, num_layers) if layout is not None else None
    seen: set[str] = set()
    hidden_size, n, layouts = None, 0, set()
    index = directory / index_name
    with open(index, "w") as out:
        for s in samples:
            if s.id in seen:
                raise DataError(f"write_seed_dataset, sample '{s.id}'", "sample id unusable as a file name",
                                expected="unique ids of letters, digits, '_', '.', '-'", found="a duplicate")
            seen.add(s.id)
            lay = fixed if fixed is not None else s.layout
            out.write(json.dumps(write_seed_sample(directory, s, lay)) + "\n")
            hidden_size = hidden_size or s.hidden_size
            layouts.add(lay)
            n += 1
    common = next(iter(layouts)) if len(layouts) == 1 else None  # one layout for all samples -> dataset-wide
    write_seed_info(directory, n, common, hidden_size, info)
    return index


def write_speculators_sample(path: str | os.PathLike, token_ids: Tensor, hidden_states: Tensor,
                             loss_mask: Tensor | None = None, layout=None) -> Path:
    """Write one speculators `hs_<i>.safetensors`: token_ids [T], hidden_states [T, k+1, Ht] (last = final pre-norm).

    speculators' own files hold only the first two keys; `loss_mask` [T] and a `layout` metadata entry (of the k
    aux slots) are optional eagle3lib extensions that the reader honours when present.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {"token_ids": torch.as_tensor(token_ids, dtype=torch.long).reshape(-1).contiguous(),
               "hidden_states": hidden_states.contiguous()}
    if loss_mask is not None:
        tensors["loss_mask"] = torch.as_tensor(loss_mask, dtype=torch.long).reshape(-1).contiguous()
    meta = {"layout": ",".join(parse_layout(layout))} if layout is not None else None
    save_file(tensors, str(path), metadata=meta)
    return path
