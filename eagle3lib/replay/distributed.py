"""Replay and diffing at dataset size over several processes: each torchrun rank streams its shard, rank 0 merges.

Under torchrun (gloo on CPU, nccl on GPU, device cuda:LOCAL_RANK) `replay` replays this rank's share and gathers
the raw integer counts to rank 0, which returns the very ReplayResult one process gives (other ranks get None);
`compare_samples` does the same for slot-vs-boundary comparisons. Without torchrun both run in-process.
`save_result` / `load_result` carry a ReplayResult through JSON exactly (the CLI's `--out`: eagle3lib.replay).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import itertools
import json
import math
import os
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from ..samples.readers import Dataset, sample_order, open_dataset
from ..errors import DataError, Eagle3Error, MissingFileError
from .run import count, load_setup
from .items import requested_layout
from .stats import ReplayCounts, ReplayOptions, ReplayResult, ReplaySetup
from ..progress import bar, track

RESULT_FORMAT = "eagle3lib.replay_result/1"
_FRAMES = ("per_step", "per_sample", "histogram")
_FLOATS = ("expected_accept_length", "simulated_accept_length", "target_agreement", "walked_accept_length")


@dataclass(frozen=True)
class World:
    """This process's place in the run: rank, world size, local rank and the device it replays on."""
    rank: int
    world_size: int
    local_rank: int
    device: str


def launched() -> bool:
    """True when torchrun (or another env:// launcher) started this process."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def rank_device(local_rank: int = 0) -> str:
    """cuda:<local_rank> when CUDA is available, else cpu."""
    return f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def process_group(backend: str | None = None):
    """Join the torchrun world for the duration (left again only if this call joined it); yields the World.

    Default backend: gloo, or "cpu:gloo,cuda:nccl" with CUDA (tensors on GPUs over nccl, the gathered Python
    objects over gloo). Not launched and no group initialised: a world of one.
    """
    if not launched() and not dist.is_initialized():
        yield World(0, 1, 0, rank_device(0))
        return
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
    joined = not dist.is_initialized()
    if joined:
        # torch.distributed.nn.functional binds `group=group.WORLD` as default arguments when first imported. Imported
        # after init (torch._dynamo pulls it in lazily, e.g. when the draft is built on the meta device), those defaults
        # keep the world group alive past destroy_process_group: its gloo worker threads then run into interpreter
        # exit, and one dropping the last collective's tensor there aborts the rank ("terminate called without an
        # active exception", exit -6). Imported before init, the defaults are None and destroy frees the group.
        importlib.import_module("torch.distributed.nn.functional")
        dist.init_process_group(backend or ("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"))
    try:
        yield World(dist.get_rank(), dist.get_world_size(), local, rank_device(local))
    finally:
        if joined:
            group = weakref.ref(dist.group.WORLD)
            dist.destroy_process_group()
            if group() is not None:
                gc.collect()
            if group() is not None:
                warnings.warn("the torch.distributed world group outlived destroy_process_group (something still "
                              "holds it, e.g. a module imported after init that binds group.WORLD as a default "
                              "argument): its backend threads run until interpreter exit, where this rank may abort "
                              "('terminate called without an active exception', exit -6)", RuntimeWarning, stacklevel=3)


def _total(x: int, w: World) -> int:
    """Sum of an int over the ranks (an object collective: works on any backend)."""
    if w.world_size == 1:
        return x
    got = [0] * w.world_size
    dist.all_gather_object(got, x)
    return sum(got)


def _sampled(ds: Dataset, n: int, seed: int, w: World, skips: list):
    """(position, Sample) of this rank among the n samples `ds.sample(n, seed)` gives, loaded in rounds.

    Round r shares out the next permutation positions one process would load (as many as good samples are still
    missing) among the ranks; a bad one is recorded in `skips` at its position and replaced in the next round.
    """
    perm, start, good = sample_order(len(ds), seed), 0, 0
    while good < n:
        block = list(itertools.islice(perm, n - good))
        if not block:
            return
        mine = 0
        for i in range(w.rank * len(block) // w.world_size, (w.rank + 1) * len(block) // w.world_size):
            one = ds.shard(block[i], len(ds))                # a view of exactly that sample, same skip policy
            s = next(one.sample(1), None)
            if s is None:
                skips.extend((start + i, *x) for x in one.skipped)
            else:
                mine += 1
                yield start + i, s
        good += _total(mine, w)
        start += len(block)


def _share(data, w: World, n: int | None, seed: int, data_format: str | None):
    """(this rank's (key, Sample) pairs, bar total, reader skips (key, source, reason) once iterated).

    Keys order the merged rows as one process orders them: a dataset's contiguous shards by (rank, index), a
    sample(n, seed) draw by permutation position, a list by list index.
    """
    if isinstance(data, (str, os.PathLike)):
        data = open_dataset(Path(data), format=data_format or None)
    if not isinstance(data, Dataset):
        data = list(data)[:n] if n else list(data)
        lo, hi = w.rank * len(data) // w.world_size, (w.rank + 1) * len(data) // w.world_size
        return ((i, data[i]) for i in range(lo, hi)), hi - lo, list
    if n:
        skips: list = []
        return _sampled(data, n, seed, w, skips), -(-min(n, len(data)) // w.world_size), lambda: skips
    part = data.shard(w.rank, w.world_size)
    items = (((w.rank, i), s) for i, s in enumerate(part))
    return items, len(part), lambda: [((w.rank, j), *x) for j, x in enumerate(part.skipped)]


def _gather(obj, w: World) -> list | None:
    """Every rank's `obj` on rank 0, in rank order (None on the other ranks)."""
    if w.world_size == 1:
        return [obj]
    got = [None] * w.world_size if w.rank == 0 else None
    dist.gather_object(obj, got, dst=0)
    return got


def gather_counts(counts: ReplayCounts, w: World) -> ReplayCounts | None:
    """Every rank's counts merged on rank 0 (None on the other ranks)."""
    got = _gather(counts, w)
    if got is None:
        return None
    merged = got[0]
    for c in got[1:]:
        merged.merge(c)
    return merged


def replay_sharded(setup, data, *, target=None, device: str | None = None, dtype="auto", layout=None,
           label: str | None = None, n: int | None = None, seed: int = 0, data_format: str | None = None,
           num_steps: int = 3, fill: str = "error", d2t: str = "offsets", align: int = 0, mask: str = "token",
           reference: str = "auto", simulate: bool = True, batch_tokens: int = 8192, recapture=None,
           progress: bool = True) -> ReplayResult | None:
    """replay.replay spread over the torchrun ranks (in-process without torchrun): its ReplayResult on rank 0.

    `setup` is a ReplaySetup, or the draft path loaded with `target` on this rank's device (cuda:LOCAL_RANK
    when CUDA is available). Ranks other than 0 return None. Same samples, counts and per-sample rows as one
    process, in the same order; numbers are equal exactly where the draft's float forward is (see README).
    """
    with process_group() as w:
        if not isinstance(setup, ReplaySetup):
            setup = load_setup(setup, target, device=device or w.device, dtype=dtype)
        options = ReplayOptions(num_steps=num_steps, fill=fill, d2t=d2t, align=align, mask=mask,
                                 reference=reference, simulate=simulate)
        counts = ReplayCounts(setup, requested_layout(setup, layout), options)
        items, total, reader_skips = _share(data, w, n, seed, data_format)
        desc = " ".join(x for x in ("replay", label, f"(rank 0 of {w.world_size})") if x)
        with bar(total=total, desc=desc, progress=progress and w.rank == 0, unit="sample") as meter:
            count(setup, items, counts, batch_tokens=batch_tokens, recapture=recapture, bar=meter)
        counts.skip_read(reader_skips())
        merged = gather_counts(counts, w)
        return merged.result(label) if merged is not None else None


# ---------------------------------------------------------------- slot-vs-boundary comparison of many samples

@dataclass(frozen=True, eq=False)
class SampleComparisons:
    """compare.compare of every sample: one `slots` row per (sample, slot), plus the samples left out."""
    slots: pd.DataFrame                      # sample, source, then compare.Comparison.slots's columns
    skipped: tuple[tuple[str, str], ...]     # (source, reason): unreadable samples and failed comparisons

    def consensus(self) -> pd.DataFrame:
        """Per slot: declared boundary, the most frequent best match (at its shift) and its share of samples."""
        t = self.slots.dropna(subset=["slot"])
        rows = []
        for slot, g in t.groupby("slot", sort=True):
            top = g.groupby(["best", "shift"], dropna=False).size().sort_values(ascending=False, kind="stable")
            (best, shift), k = top.index[0], int(top.iloc[0])
            rows.append({"slot": int(slot), "declared": g["declared"].iloc[0], "best": best, "shift": shift,
                         "share": k / len(g), "samples": len(g)})
        return pd.DataFrame(rows)


def compare_samples(target, data, *, n: int | None = None, seed: int = 0, data_format: str | None = None,
                    device: str | None = None, dtype=None, shifts=(-1, 0, 1),
                    progress: bool = True) -> SampleComparisons | None:
    """Every sample's slots against the target's own boundaries on its tokens, spread over the torchrun ranks.

    Each rank loads the HF target on its device and captures + compares its share; rank 0 gets every row in
    dataset order (others None). Without torchrun it runs in-process: the single-process answer.
    """
    from ..hidden.capture import as_slots, capture, load_target_model
    from ..hidden.compare import compare

    with process_group() as w:
        model = load_target_model(target, device=device or w.device, dtype=dtype)
        items, total, reader_skips = _share(data, w, n, seed, data_format)
        rows, failed = [], []
        for key, s in track(items, total=total, desc="compare samples", progress=progress and w.rank == 0,
                            unit="sample"):
            try:
                cmp = compare(as_slots(s), capture(model, s.input_ids), shifts=shifts)
            except Eagle3Error as e:
                failed.append((key, f"sample '{s.id}' ({s.source})", str(e)))
                continue
            rows.append((key, cmp.slots.assign(sample=s.id, source=s.source)))
        got = _gather((rows, reader_skips(), failed), w)
        if got is None:
            return None
        first = lambda x: x[0]  # noqa: E731
        frames = [f for _, f in sorted((r for g in got for r in g[0]), key=first)]
        table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["sample", "source", "slot"])
        table = table[["sample", "source"] + [c for c in table.columns if c not in ("sample", "source")]]
        reads, fails = (sorted((x for g in got for x in g[i]), key=first) for i in (1, 2))
        return SampleComparisons(table, tuple((where, why) for _, where, why in reads + fails))


# ---------------------------------------------------------------- a ReplayResult as JSON

def _num(x):
    return None if isinstance(x, float) and not math.isfinite(x) else x


def result_to_dict(r: ReplayResult) -> dict:
    """A ReplayResult as plain JSON values: tables as columns plus dtypes, NaN as null."""
    out = {}
    for f in dataclasses.fields(r):
        v = getattr(r, f.name)
        if isinstance(v, pd.DataFrame):
            v = {"dtypes": {str(c): str(t) for c, t in v.dtypes.items()},
                 "columns": {str(c): [_num(x) for x in v[c].tolist()] for c in v.columns}}
        elif isinstance(v, tuple):
            v = [list(x) if isinstance(x, tuple) else x for x in v]
        out[f.name] = _num(v)
    return out


def result_from_dict(d: dict, where: str = "replay result") -> ReplayResult:
    """The ReplayResult result_to_dict wrote (the same numbers, bit for bit)."""
    names = [f.name for f in dataclasses.fields(ReplayResult)]
    missing = [k for k in names if k not in d] if isinstance(d, dict) else names
    if missing:
        raise DataError(where, "not a replay result", expected=f"keys {names}", found=f"missing {missing}",
                        cause="a file written by something else than eagle3lib.replay.distributed.save_result")
    kw = {}
    for k in names:
        v = d[k]
        if k in _FRAMES:
            v = pd.DataFrame(v["columns"]).astype(v["dtypes"]) if v["columns"] else pd.DataFrame([])
        elif k in _FLOATS:
            v = float("nan") if v is None else float(v)
        elif isinstance(v, list):
            v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
        kw[k] = v
    return ReplayResult(**kw)


def save_result(r: ReplayResult, path, **meta) -> Path:
    """Write a ReplayResult (and its summary, and `meta` such as the world size) to a JSON file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": RESULT_FORMAT, "summary": r.summary(), **meta, "result": result_to_dict(r)}
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return path


def load_result(path) -> ReplayResult:
    """The ReplayResult a save_result (or the CLI's --out) wrote."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(str(path), "replay result not found", expected="a JSON file from save_result or "
                               "`-m eagle3lib.replay --out`", found="no such file")
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(str(path), "unreadable replay result", expected="JSON", found=str(e)[:120]) from None
    if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
        raise DataError(str(path), "not a replay result file", expected=f"format '{RESULT_FORMAT}'",
                        found=doc.get("format") if isinstance(doc, dict) else type(doc).__name__)
    return result_from_dict(doc.get("result"), str(path))
