"""``python -m eagle3lib.hidden.recapture --target T --train-data D --layout L --out DIR``: a training set's aux
states recaptured from the target as it is now (the fix for `target_drift`: the stored states came from another target).

Each sample's tokens run through the target (`load_target_model`: streamed layer by layer when the target is fp8 or
too big for the device; `hidden.layerwise` then reads each layer once per group of `--group-tokens` tokens) and the
sample is written again, in the data's format or `--format` (samples.writers: specforge, seed, speculators), with
the aux slots of `--layout` (default: the data's declared layout) and the final state its format keeps (SpecForge /
seed: final_postnorm, speculators: final_prenorm), stored in the input's dtype; ids and loss mask are copied.
`dataset_info.json` in DIR names the layout, the target and its layer count. Resumable: a sample whose output file
is there is skipped (files are written under `.DIR.partial/` beside DIR and renamed into place).
Many GPUs: ``torchrun --nproc-per-node 8 -m eagle3lib.hidden.recapture ... --device cuda``: rank r recaptures
every 8th sample on cuda:r (streaming its own copy of each layer); rank 0 writes the index and dataset_info.json.
Prints a progress bar, then one JSON line (written, done before, failed, layout, out).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .capture import load_target_model
from .decoders import decoder_stack
from .layerwise import capture_layerwise
from .stream import streamed
from ..errors import DataError, Eagle3Error, LayoutError
from ..layout import parse_layout
from ..names import add_old_flags
from ..progress import bar
from ..samples.readers import open_dataset
from ..samples.sample import Sample
from ..samples.writers import (specforge_sample_path, write_seed_info, write_seed_sample, write_specforge_sample,
                               write_speculators_sample)

FORMATS = ("specforge", "seed", "speculators")
FINAL = {"specforge": "final_postnorm", "seed": "final_postnorm", "speculators": "final_prenorm"}
PARTS = ".recapture"          # DIR/.recapture/rank<r>.jsonl: the seed index lines each rank wrote


@dataclass(frozen=True)
class RecaptureResult:
    """What one rank did: samples written now, found done, failed (source or position, reason)."""
    out: str
    format: str
    layout: tuple[str, ...] | None
    written: int
    done_before: int
    failed: tuple[tuple[str, str], ...] = ()
    seconds: float = 0.0
    rank: int = 0
    world_size: int = 1
    num_layers: int = 0
    hidden_size: int = 0
    streamed: bool = False       # the target was streamed layer by layer (else loaded whole)

    def to_dict(self) -> dict:
        return {"ok": not self.failed, "out": self.out, "format": self.format,
                "layout": list(self.layout) if self.layout else None, "written": self.written,
                "done_before": self.done_before, "failed": len(self.failed),
                "failed_first": [list(f) for f in self.failed[:10]],
                "seconds": round(self.seconds, 3), "rank": self.rank, "world_size": self.world_size,
                "target_load": "streamed" if self.streamed else "full"}


def recapture_command(target, data, layout=None, out=None) -> str:
    """The command line that recaptures `data` from `target` (the fix a drift finding names)."""
    data = str(data).rstrip("/")
    lay = f" --layout {','.join(layout)}" if layout else ""
    return (f"python -m eagle3lib.hidden.recapture --target {target} --train-data {data}{lay} "
            f"--out {out or data + '-recaptured'}")


def out_path(fmt: str, in_format: str, root: Path, s: Sample, j: int, out: Path) -> Path:
    """Where sample `s` (position j) goes: the input's own name when the format stays, else the format's naming."""
    if fmt == in_format and fmt in ("specforge", "speculators"):
        try:
            return out / Path(s.source).resolve().relative_to(root.resolve())
        except ValueError:
            pass
    if fmt == "specforge":
        return specforge_sample_path(out, j)
    if fmt == "speculators":
        return out / f"hs_{j}.safetensors"
    return out / "hidden_states" / f"{s.id}.safetensors"


def _seed_done(out: Path) -> dict[str, dict]:
    """id -> index record (with its position) of the seed samples some rank wrote (their file present)."""
    done: dict[str, dict] = {}
    for part in sorted((out / PARTS).glob("rank*.jsonl")):
        for line in part.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:        # a line cut by a crash: that sample is recaptured again
                continue
            if (out / rec["hidden_states"]).is_file():
                done[rec["id"]] = rec
    return done


def _write(fmt: str, s: Sample, aux: torch.Tensor, final: torch.Tensor, lay, dest: Path, tmp: Path) -> dict | None:
    """Write one recaptured sample to `tmp` and rename it to `dest`; the seed index record for seed."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    rec = None
    if fmt == "specforge":
        T, k, H = aux.shape
        write_specforge_sample(tmp, s.input_ids, s.loss_mask, final, aux.reshape(T, k * H),  # (T, k, H) -> (T, k*H)
                               compress=dest.name.endswith(".gz"))
    elif fmt == "speculators":
        hs = torch.cat([aux, final[:, None]], dim=1)                      # (T, k, H) + (T, 1, H) -> (T, k+1, H)
        write_speculators_sample(tmp, s.input_ids, hs, s.loss_mask, layout=lay)
    else:
        fresh = replace(s, aux=aux, layout=tuple(lay), final_hidden=final, final_boundary=FINAL[fmt])
        rec = write_seed_sample(tmp.parents[1], fresh, lay)
    os.replace(tmp, dest)
    return rec


def recapture_dataset(target, data, out, *, layout=None, format: str | None = None, device="cpu", dtype=None,
                      batch_size: int = 8, group_tokens: int = 65536, n: int | None = None, stream=None,
                      rank: int = 0, world_size: int = 1, progress: bool = True) -> RecaptureResult:
    """Recapture every sample of `data` (the first `n`; this rank's share) into `out` (module docstring)."""
    t0 = time.perf_counter()
    ds = open_dataset(data)
    fmt = format or ds.format
    if fmt not in FORMATS:
        raise DataError(f"recapture of {data}", f"eagle3lib writes no '{fmt}' data", expected=FORMATS, found=fmt,
                        cause="ModelOpt input: pass --format specforge, seed or speculators")
    model = load_target_model(target, device=device, dtype=dtype, stream=stream)
    L = len(decoder_stack(model)[1])
    fixed = parse_layout(layout, L) if layout else (parse_layout(ds.layout, L) if ds.layout else None)
    first = next(iter(ds.sample(1)), None) if fixed is None else None
    if first is not None and first.layout is None:
        raise LayoutError(f"recapture of {data}", "which boundaries the aux slots hold is not known",
                          expected="--layout, e.g. embed,layer_in.3,layer_in.31,layer_in.59", found="no layout "
                          "declared by the data", cause="SpecForge data carries no layout: name the one it was "
                          "captured with (the draft config's ids; checks.layer_ids identifies it)")
    out = Path(out)
    partial = out.parent / f".{out.name}.partial"
    seed_done = _seed_done(out) if fmt == "seed" else {}
    part_file = out / PARTS / f"rank{rank}.jsonl"
    if fmt == "seed":
        part_file.parent.mkdir(parents=True, exist_ok=True)
    positions = list(range(len(ds) if n is None else min(n, len(ds))))[rank::world_size]
    written = done = 0
    used: set[tuple[str, ...]] = set()
    failed: list[tuple[str, str]] = []
    group: list[tuple[int, Sample, tuple[str, ...], Path]] = []
    meter = bar(total=len(positions), desc="recapture", progress=progress and rank == 0, unit="sample")

    def flush():
        nonlocal written
        if not group:
            return
        order = sorted(range(len(group)), key=lambda g: group[g][1].num_tokens)   # similar lengths batch together
        wanted = sorted({b for _, _, lay, _ in group for b in lay} | {FINAL[fmt]})
        caps = capture_layerwise(model, [group[g][1].input_ids for g in order], only=wanted, batch_size=batch_size)
        with open(part_file, "a") if fmt == "seed" else _NoFile() as index:
            for g, cap in zip(order, caps):
                j, s, lay, dest = group[g]
                aux = cap.stack(lay).to(s.aux.dtype)                          # (T, k, H)
                final = cap[FINAL[fmt]].to(s.aux.dtype)                       # (T, H)
                rec = _write(fmt, s, aux, final, lay, dest, partial / dest.relative_to(out))
                if rec is not None:
                    index.write(json.dumps({**rec, "position": j}) + "\n")
                    index.flush()
                written += 1
                meter.update(1)
        group.clear()

    try:
        tokens = 0
        for j in positions:
            try:
                s = ds[j]
            except Eagle3Error as e:
                failed.append((f"sample {j}", str(e)))
                meter.update(1)
                continue
            dest = out_path(fmt, ds.format, ds.root, s, j, out)
            if (fmt == "seed" and s.id in seed_done) or (fmt != "seed" and dest.is_file()):
                done += 1
                meter.update(1)
                continue
            lay = fixed or s.layout
            if lay is None:
                failed.append((s.source, "no layout: the data declares none; give --layout"))
                meter.update(1)
                continue
            group.append((j, s, tuple(lay), dest))
            used.add(tuple(lay))
            tokens += s.num_tokens
            if tokens >= group_tokens:
                flush()
                tokens = 0
        flush()
    finally:
        meter.close()
    one = fixed or (next(iter(used)) if len(used) == 1 else None)    # the layout, when every sample has the same
    return RecaptureResult(str(out), fmt, one, written, done, tuple(failed), time.perf_counter() - t0, rank,
                           world_size, L, int(model.config.hidden_size), streamed(model) is not None)


class _NoFile:
    """A do-nothing stand-in for the seed index file of the other formats."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, text: str):
        pass

    def flush(self):
        pass


def finish_recapture(target, data, out, result: RecaptureResult) -> None:
    """Rank 0, after every rank: the seed index in dataset order, and dataset_info.json naming the layout."""
    out = Path(out)
    info = dict(open_dataset(data).info)
    info.update(num_target_layers=result.num_layers, recaptured_from=str(Path(target).resolve()))
    hidden_size = result.hidden_size or None
    if result.format == "seed":
        recs = sorted(_seed_done(out).values(), key=lambda r: r["position"])
        with open(out / "train.jsonl", "w") as f:
            for r in recs:
                f.write(json.dumps({k: v for k, v in r.items() if k != "position"}) + "\n")
        write_seed_info(out, len(recs), result.layout, hidden_size, info)
    elif out.is_dir():
        if result.layout is not None:
            info["layout"] = list(result.layout)
        if hidden_size:
            info["target_hidden_size"] = hidden_size
        (out / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(out.parent / f".{out.name}.partial", ignore_errors=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eagle3lib.hidden.recapture", description=__doc__.split("\n\n")[0])
    a = p.add_argument
    a("--target", required=True, help="the target as it is now (HF folder, safetensors; fp8 block-quantized read)")
    a("--train-data", required=True, help="the training data to recapture (any format eagle3lib reads; required)")
    a("--out", required=True, help="where the recaptured data goes (resumable: samples already there are kept)")
    a("--layout", default=None, help="boundaries of the aux slots, e.g. embed,layer_in.3,layer_in.31,layer_in.59 "
                                     "(default: the data's declared layout)")
    a("--format", default=None, choices=FORMATS, help="output format (default: the input's)")
    a("--device", default="cpu", help="cpu or cuda (under torchrun: cuda:LOCAL_RANK)")
    a("--dtype", default="auto", help="compute dtype: auto (the config's), bfloat16, float32")
    a("--batch-size", type=int, default=8, help="sequences per forward")
    a("--group-tokens", type=int, default=65536, help="tokens per pass over the layers (a streamed target reads "
                                                       "every layer once per group; activations held on the host)")
    a("--n", type=int, default=None, help="only the first n samples")
    a("--stream", choices=("auto", "yes", "no"), default="auto", help="stream the layers (auto: fp8 or too big)")
    a("--quiet", action="store_true", help="no progress bar")
    add_old_flags(p)        # --data: the old name of --train-data, for one release (a warning)
    return p


def main(argv=None) -> int:
    """Recapture this rank's share; rank 0 then writes the index. Exit 0 when every sample is there, 1 when some
    failed, 2 on bad input."""
    a = parser().parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = f"cuda:{os.environ.get('LOCAL_RANK', 0)}" if world > 1 and a.device == "cuda" else a.device
    stream = {"auto": None, "yes": True, "no": False}[a.stream]
    try:
        r = recapture_dataset(a.target, a.train_data, a.out, layout=a.layout, format=a.format, device=device,
                              dtype=a.dtype, batch_size=a.batch_size, group_tokens=a.group_tokens, n=a.n,
                              stream=stream, rank=rank, world_size=world, progress=not a.quiet)
        if world > 1:
            _barrier()
        if rank == 0:
            finish_recapture(a.target, a.train_data, a.out, r)
    except Eagle3Error as e:
        print(json.dumps({"ok": False, "error": str(e)}))
        return 2
    print(json.dumps(r.to_dict()))
    return 0 if not r.failed else 1


def _barrier():
    """Wait for every torchrun rank (gloo: no tensors cross it)."""
    import torch.distributed as dist

    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("gloo")
    dist.barrier()
    if joined:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
