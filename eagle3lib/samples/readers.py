"""Training-data readers: SpecForge `.ckpt[.gz]`, seed jsonl + safetensors, speculators `hs_<i>`, ModelOpt `.pt`.

`open_dataset(path)` gives a lazy `Dataset` of `Sample`s (aux slots stacked as [T, k, Ht]); files are opened one
sample at a time, `.ckpt`/`.pt` only with `torch.load(weights_only=True)` (a pickle that would run code raises
UnsafeFileError and never runs). Bad-sample policy: with ``on_error="skip"`` (default) a sample that fails to load
or validate is left out, recorded as (source, reason) in ``dataset.skipped``, and iteration goes on; with
``on_error="raise"`` the error propagates. Dataset-level problems (no such path, no files, bad format) always raise.
"""
from __future__ import annotations

import json
import os
import random
import re
import threading
from array import array
from pathlib import Path
from typing import Iterator

import torch

from ..errors import DataError, Eagle3Error, MissingFileError, UnsafeFileError
from ..layout import parse_layout
from ..model.safefiles import load_safetensors, load_torch_file, safetensors_metadata
from .. import once
from .sample import Sample, SampleOptions, as_ids, build_sample, require_fields, split_concat, squeeze_batch

FORMATS = ("specforge", "seed", "speculators", "modelopt")
SEED_FORMAT = "eagle3lib-seed-v1"
_DATA_IDX = re.compile(r"data_(\d+)\.ckpt(?:\.gz)?")
_HS_IDX = re.compile(r"hs_(\d+)\.safetensors")
_PT_IDX = re.compile(r"(\d+)\.pt")
_NOT_SAMPLES = {"token_freq.pt", "d2t.pt", "t2d.pt", "vocab_mapping.pt"}


# ---------------------------------------------------------------- safe reads via eagle3lib.model.safefiles

def _read(where: str, path: Path, fmt: str):
    """A dict from a torch.save file, or (tensors, metadata) from a safetensors file; errors name `where`."""
    try:
        if fmt == "safetensors":
            return load_safetensors(path), safetensors_metadata(path)
        obj = load_torch_file(path)  # weights_only=True, gzip-transparent, refuses code-carrying pickles
    except UnsafeFileError as e:
        raise UnsafeFileError(where, e.problem + " (it was not executed)", expected=e.expected, found=e.found,
                              cause=e.cause) from None
    except MissingFileError:
        raise MissingFileError(where, "sample file missing", expected=str(path), found="no such file",
                               cause="the index points at a file that was not written, or the data was moved") from None
    except Eagle3Error as e:
        raise DataError(where, f"unreadable file {path.name}: {e.problem}", expected=e.expected, found=e.found,
                        cause=e.cause or "truncated, corrupt or zero-length file") from None
    except Exception as e:  # a corrupt pickle can raise odd types (e.g. KeyError) from inside torch.load
        raise DataError(where, f"unreadable file {path.name}", found=f"{type(e).__name__}: {str(e)[:160]}",
                        cause="truncated, corrupt or zero-length file") from None
    if not isinstance(obj, dict):
        raise DataError(where, "unexpected content", expected="a dict of tensors", found=type(obj).__name__)
    return obj


def _layout_of(meta_layout, opts: SampleOptions) -> tuple[str, ...] | None:
    if opts.layout is not None:
        return opts.layout
    if meta_layout:
        return parse_layout(meta_layout, opts.num_layers)
    return opts.info_layout


# ---------------------------------------------------------------- per-format sample loaders

# key names (ids, mask, final post-norm state, concatenated aux) of the two torch.save formats
_PICKLED_KEYS = {"specforge": ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state"),
                 "modelopt": ("input_ids", "loss_mask", "hidden_states", "aux_hidden_states")}


def _load_pickled(fmt: str, path: Path, opts: SampleOptions) -> Sample:
    """A SpecForge data_<idx>.ckpt[.gz] or ModelOpt <conversation_id>.pt dict (ModelOpt's loss_mask is optional)."""
    src = str(path)
    d = _read(f"sample '{path.name.split('.')[0]}' ({src})", path, "torch")
    k_ids, k_mask, k_final, k_aux = _PICKLED_KEYS[fmt]
    sid = path.name.split(".")[0] if fmt == "specforge" else str(d.get("conversation_id", path.stem))
    where = f"sample '{sid}' ({src})"
    require_fields(d, (k_ids, k_final, k_aux) + ((k_mask,) if fmt == "specforge" else ()), where)
    ids = as_ids(d[k_ids], where, k_ids)
    mask = as_ids(d[k_mask], where, k_mask) if k_mask in d else torch.ones_like(ids)
    final = squeeze_batch(d[k_final], where, k_final, 2)
    flat = squeeze_batch(d[k_aux], where, k_aux, 2)
    layout = _layout_of(None, opts)
    aux = split_concat(flat, opts.hidden_size or final.shape[-1], len(layout) if layout else None, where)
    return build_sample(sid, src, ids, mask, aux, final, layout, opts)


def _load_speculators(path: Path, opts: SampleOptions) -> Sample:
    sid, src = path.stem, str(path)
    where = f"sample '{sid}' ({src})"
    d, meta = _read(where, path, "safetensors")
    require_fields(d, ("token_ids", "hidden_states"), where)
    ids = as_ids(d["token_ids"], where, "token_ids")
    hs = squeeze_batch(d["hidden_states"], where, "hidden_states", 3)
    if hs.shape[1] < 2:
        raise DataError(where, "too few hidden-state slots", expected="k aux slots + the final state (id L)",
                        found=list(hs.shape))
    # speculators trains on hs[:, :-1] (aux) and hs[:, -1] = final PRE-norm state captured at input-of-layer id L
    mask = as_ids(d["loss_mask"], where, "loss_mask") if "loss_mask" in d else torch.ones_like(ids)
    return build_sample(sid, src, ids, mask, hs[:, :-1], hs[:, -1], _layout_of(meta.get("layout"), opts), opts,
                  final_boundary="final_prenorm")


def _load_seed_line(jsonl: Path, lineno: int, text: bytes, opts: SampleOptions) -> Sample:
    src = f"{jsonl}:{lineno}"
    try:
        rec = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"index line {src}", "broken JSON line", expected="one JSON object per line",
                        found=str(e)[:120], cause="a truncated or hand-edited index") from None
    if not isinstance(rec, dict):
        raise DataError(f"index line {src}", "not a JSON object", found=type(rec).__name__)
    sid = str(rec.get("id", f"line{lineno}"))
    where = f"sample '{sid}' ({src})"
    require_fields(rec, ("input_ids", "loss_mask", "hidden_states"), where)
    ids, mask = as_ids(rec["input_ids"], where, "input_ids"), as_ids(rec["loss_mask"], where, "loss_mask")
    d, meta = _read(where, jsonl.parent / str(rec["hidden_states"]), "safetensors")
    k = sum(1 for key in d if key.startswith("aux."))
    require_fields(d, [f"aux.{i}" for i in range(k)], f"{where}, file {rec['hidden_states']}")
    if k == 0:
        raise DataError(where, "no aux slots in the hidden-state file", expected="keys aux.0 .. aux.{k-1}",
                        found=sorted(d))
    shapes = {tuple(d[f"aux.{i}"].shape) for i in range(k)}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise DataError(where, "aux slots of different or wrong shapes", expected="k tensors [T, Ht]",
                        found=sorted(shapes))
    aux = torch.stack([d[f"aux.{i}"] for i in range(k)], dim=1)  # k x (T, Ht) -> (T, k, Ht)
    return build_sample(sid, src, ids, mask, aux, d.get("final_hidden"), _layout_of(meta.get("layout"), opts), opts,
                  seq_len=rec.get("seq_len"), final_boundary=meta.get("final_boundary"))


class _SeedIndex:
    """A jsonl index read line by line; byte offsets of non-blank lines are collected only when needed, and the lines
    asked for by their index are read through one handle, opened at the first and kept while the index is."""

    def __init__(self, path: Path):
        self.path, self._offsets, self._lines = path, None, None
        self._handle, self._lock = None, threading.Lock()      # the read-ahead thread reads lines too

    def __del__(self):
        if self._handle is not None:
            self._handle.close()

    def _file(self):
        if self._handle is None:
            self._handle = open(self.path, "rb")
        return self._handle

    def _index_lines(self):
        """The byte offset and line number of every non-blank line (one pass, through the kept handle)."""
        with self._lock:
            if self._offsets is not None:
                return
            offsets, lines, pos, f = array("q"), array("q"), 0, self._file()
            f.seek(0)
            for lineno, raw in enumerate(iter(f.readline, b""), 1):
                if raw.strip():
                    offsets.append(pos)
                    lines.append(lineno)
                pos += len(raw)
            self._offsets, self._lines = offsets, lines

    def __len__(self) -> int:
        self._index_lines()
        return len(self._offsets)

    def line(self, i: int) -> tuple[int, bytes]:
        self._index_lines()
        with self._lock:
            f = self._file()
            f.seek(self._offsets[i])
            return self._lines[i], f.readline()

    def stream(self) -> Iterator[tuple[int, int, bytes]]:
        """(record index, line number, raw line) for every non-blank line, without building the offsets."""
        i = 0
        with open(self.path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if raw.strip():
                    yield i, lineno, raw
                    i += 1


# ---------------------------------------------------------------- Dataset

def sample_order(n: int, seed: int) -> Iterator[int]:
    """Lazy Fisher-Yates shuffle of range(n): a prefix of it is the same for every length drawn."""
    rng, swapped = random.Random(seed), {}
    for i in range(n):
        j = rng.randrange(i, n)
        vi, vj = swapped.get(i, i), swapped.get(j, j)
        swapped[j] = vi
        swapped.pop(i, None)
        yield vj


class Dataset:
    """A lazy view of training samples: iterate, `sample(n, seed)`, `shard(rank, world_size)`; see `skipped`."""

    def __init__(self, fmt: str, root: Path, opts: SampleOptions, info: dict, on_error: str,
                 files: list[Path] | None = None, index: _SeedIndex | None = None, view: range | None = None):
        self.format, self.root, self.info, self.on_error = fmt, root, info, on_error
        self._opts, self._files, self._index = opts, files, index
        self._view = view
        self.skipped: list[tuple[str, str]] = []  # (source, reason) of every sample left out
        self._skipped_set: set[tuple[str, str]] = set()
        self.notes: list[str] = []
        if fmt == "speculators":
            self.notes.append("speculators hs files carry no loss_mask unless written with one: every position "
                              "counts; the last slot is the final PRE-norm state (Sample.final_boundary)")

    @property
    def layout(self) -> tuple[str, ...] | None:
        """The dataset-wide layout (declared, else dataset_info.json); per-file metadata may refine it."""
        return self._opts.layout or self._opts.info_layout

    @property
    def view(self) -> range:
        if self._view is None:
            self._view = range(len(self._files) if self._files is not None else len(self._index))
        return self._view

    def __len__(self) -> int:
        return len(self.view)

    def __repr__(self) -> str:
        return f"Dataset(format={self.format!r}, root='{self.root}', samples={len(self)}, skipped={len(self.skipped)})"

    def _load(self, i: int) -> Sample:
        """Sample i, read from its file (once per case inside `once.case_reads`)."""
        reads = once.active()
        return self._read(i) if reads is None else reads.kept_sample(self._key(i), lambda: self._read(i))

    def _key(self, i: int) -> tuple:
        """What sample i is read from, and the options that shape it."""
        return (str(self._index.path) if self._index is not None else str(self._files[i]), i, self._opts)

    def _read(self, i: int) -> Sample:
        if self._index is not None:     # the line once per case, whatever options shape the sample it gives
            lineno, raw = _kept(("index line", str(self._index.path), i), lambda: self._index.line(i))
            return _load_seed_line(self._index.path, lineno, raw, self._opts)
        if self.format == "speculators":
            return _load_speculators(self._files[i], self._opts)
        return _load_pickled(self.format, self._files[i], self._opts)

    def _guard(self, load, source) -> Sample | None:
        """load() under the on_error policy; `source` (a str or a callable giving one) is only built on error."""
        try:
            return load()
        except Eagle3Error as e:
            if self.on_error == "raise":
                raise
            item = (source() if callable(source) else source, str(e))
            if item not in self._skipped_set:
                self._skipped_set.add(item)
                self.skipped.append(item)
            return None

    def _streamed(self, i: int, lineno: int, raw: bytes) -> Sample:
        """Sample i of a streamed jsonl index (once per case, as `_load`)."""
        reads = once.active()
        read = lambda: _load_seed_line(self._index.path, lineno, raw, self._opts)   # noqa: E731
        return read() if reads is None else reads.kept_sample(self._key(i), read)

    def _source(self, i: int) -> str:
        if self._files is not None:
            return str(self._files[i])
        return f"{self._index.path}:{self._index.line(i)[0]}"

    def __getitem__(self, j: int) -> Sample:
        """The j-th sample of this view; a bad sample raises whatever the policy."""
        return self._load(self.view[j])

    def __iter__(self) -> Iterator[Sample]:
        if self._index is not None:  # one pass over the jsonl, no offsets needed
            view = self._view
            for i, lineno, raw in self._index.stream():
                if view is None or i in view:
                    s = self._guard(lambda: self._streamed(i, lineno, raw), f"{self._index.path}:{lineno}")
                    if s is not None:
                        yield s
            return
        for i in self.view:
            s = self._guard(lambda: self._load(i), lambda: self._source(i))
            if s is not None:
                yield s

    def sample(self, n: int, seed: int = 0) -> Iterator[Sample]:
        """n good samples drawn without replacement by `seed` (same seed -> same samples; bad ones are replaced)."""
        got = 0
        if n <= 0:
            return
        view = self.view
        for j in sample_order(len(view), seed):
            s = self._guard(lambda: self._load(view[j]), lambda: self._source(view[j]))
            if s is not None:
                yield s
                got += 1
                if got >= n:
                    return

    def shard(self, rank: int, world_size: int, strided: bool = False) -> "Dataset":
        """Disjoint part `rank` of `world_size` (contiguous blocks, or every world_size-th sample if strided)."""
        if not 0 <= rank < world_size:
            raise DataError("Dataset.shard", "rank outside the world", expected=f"0 <= rank < {world_size}",
                            found=rank)
        v, n = self.view, len(self.view)
        sub = v[rank::world_size] if strided else v[rank * n // world_size:(rank + 1) * n // world_size]
        return Dataset(self.format, self.root, self._opts, self.info, self.on_error, self._files, self._index, sub)


# ---------------------------------------------------------------- open_dataset

def _list_files(fmt: str, path: Path) -> list[Path]:
    """Sample files of `fmt` under a directory, integer index first (data_<idx>, hs_<i>, <n>.pt), then by name."""
    if fmt == "specforge":
        files, pat = [p for p in path.rglob("*") if p.name.endswith((".ckpt", ".ckpt.gz"))], _DATA_IDX
    elif fmt == "speculators":
        files, pat = list(path.rglob("hs_*.safetensors")), _HS_IDX
    else:
        files, pat = [p for p in path.glob("*.pt") if p.name not in _NOT_SAMPLES], _PT_IDX
    keyed = [((0, int(m.group(1))) if (m := pat.fullmatch(p.name)) else (1, 0), str(p), p) for p in files]
    return [p for *_, p in sorted(keyed)]


def _seed_index(path: Path) -> Path | None:
    """The jsonl index of a seed-format path: the file itself, or train.jsonl / the only *.jsonl of a directory."""
    if path.is_file():
        return path if path.name.endswith(".jsonl") else None
    jsonls = sorted(path.glob("*.jsonl"))
    train = [p for p in jsonls if p.name == "train.jsonl"]
    if len(jsonls) > 1 and not train:
        raise DataError(str(path), "several jsonl indexes, cannot choose", expected="train.jsonl or the path of "
                        "one index", found=[p.name for p in jsonls])
    return (train or jsonls or [None])[0]


def _detect(path: Path, fmt: str | None) -> tuple[str, Path | list[Path]]:
    """(format, jsonl index or sample files) for a path: the declared format, else guessed from file names."""
    if fmt is not None and fmt not in FORMATS:
        raise DataError("open_dataset(format=...)", "unknown format", expected=FORMATS, found=fmt)
    if path.is_file() and fmt is None:
        ends = {"seed": (".jsonl",), "specforge": (".ckpt", ".ckpt.gz"), "speculators": (".safetensors",),
                "modelopt": (".pt",)}
        fmt = next((f for f, e in ends.items() if path.name.endswith(e)), None)
        if fmt is None:
            raise DataError(str(path), "unknown training-data file type",
                            expected=".jsonl, .ckpt, .ckpt.gz, hs_<i>.safetensors or .pt", found=path.name)
    for f in [fmt] if fmt else FORMATS:
        found = _seed_index(path) if f == "seed" else [path] if path.is_file() else _list_files(f, path)
        if found:
            return f, found
    raise DataError(str(path), f"no {fmt or 'training'} data found", expected="*.jsonl, *.ckpt[.gz], "
                    "hs_<i>.safetensors or <conversation_id>.pt files", found="none of these")


def _read_info(root: Path) -> dict:
    p = root / "dataset_info.json"
    if not p.is_file():
        return {}
    try:
        info = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(str(p), "unreadable dataset_info.json", expected="a JSON object", found=str(e)[:120]) from None
    if not isinstance(info, dict):
        raise DataError(str(p), "dataset_info.json is not an object", found=type(info).__name__)
    for key in ("num_target_layers", "target_hidden_size"):
        v = info.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise DataError(f"{p}, key '{key}'", "wrong type or value", expected="an integer > 0", found=repr(v))
    lay = info.get("layout")
    if lay is not None and not isinstance(lay, str) and not (isinstance(lay, list) and
                                                              all(isinstance(x, str) for x in lay)):
        raise DataError(f"{p}, key 'layout'", "wrong type", expected="boundary names (a list or a comma-separated "
                        "string)", found=repr(lay)[:80])
    return info


def open_dataset(path: str | os.PathLike, format: str | None = None, layout=None, max_len: int | None = None, *,
                 hidden_size: int | None = None, on_error: str = "skip") -> Dataset:
    """A lazy Dataset over training data at `path` (format auto-detected; layout: declared > file > dataset_info)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(str(path), "training data not found", expected="a directory or file",
                               found="no such path")
    if on_error not in ("skip", "raise"):
        raise DataError("open_dataset(on_error=...)", "unknown policy", expected=["skip", "raise"], found=on_error)
    fmt, found = _kept(("files", str(path.resolve()), format), lambda: _detect(path, format))
    root = path.parent if path.is_file() else path
    info = _kept(("info", str(root.resolve())), lambda: _read_info(root))
    num_layers = info.get("num_target_layers")
    opts = SampleOptions(layout=parse_layout(layout, num_layers) if layout is not None else None,
                 info_layout=parse_layout(info["layout"], num_layers) if info.get("layout") else None,
                 hidden_size=hidden_size or info.get("target_hidden_size"), num_layers=num_layers, max_len=max_len)
    if fmt == "seed":
        return Dataset(fmt, root, opts, info, on_error, index=_kept(("index", str(found.resolve())),
                                                                   lambda: _SeedIndex(found)))
    return Dataset(fmt, root, opts, info, on_error, files=found)


def _kept(key, read):
    """read(), once per case inside `once.case_reads` (a dataset's file list, info, index and its lines read)."""
    reads = once.active()
    return read() if reads is None else reads.part(key, read)

