"""Safe, checked reading of weight files: safetensors (single or sharded) and `.bin`/`.pt` via weights_only.

The safetensors header is validated before anything is mapped (size, JSON, dtypes, offsets inside the file),
so a truncated or corrupt file gives a message naming the file and the tensor rather than a Rust panic.
Pickle-based files are only ever read with `torch.load(weights_only=True)`; anything that would need
arbitrary unpickling is refused with `UnsafeFileError` and never executed.
"""
from __future__ import annotations

import gzip
import json
import pickle
import re
import struct
from pathlib import Path

import torch
from safetensors import safe_open

from ..once import kept, kept_by_file
from ..errors import CheckpointError, MissingFileError, UnsafeFileError

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def read_safetensors_header(path: str | Path) -> dict:
    """The validated header {name: {dtype, shape, data_offsets}} (plus '__metadata__') of a safetensors file (read
    once per case, `once.kept`)."""
    path = Path(path)
    return kept(("safetensors header", str(path.resolve())), lambda: _header(path), copied=True)


def _header(path: Path) -> dict:
    """read_safetensors_header, from the file."""
    if not path.exists():
        raise MissingFileError(str(path), "file not found", expected="a safetensors file", found="nothing")
    size = path.stat().st_size
    if size < 8:
        raise CheckpointError(str(path), "too short to be safetensors", expected=">= 8 bytes (header length)",
                              found=f"{size} bytes", cause="an empty or interrupted download/save")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8 or n > 100_000_000:
            raise CheckpointError(str(path), "header length exceeds the file", expected=f"<= {size - 8} bytes",
                                  found=f"{n} bytes", cause="a truncated file, or not a safetensors file")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CheckpointError(str(path), "header is not JSON", expected="a JSON header",
                              found=repr(raw[:40]), cause="not a safetensors file, or corrupt") from None
    if not isinstance(header, dict):
        raise CheckpointError(str(path), "header is not a JSON object", expected="{...}", found=type(header).__name__)
    data_len = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            if info is not None and not (isinstance(info, dict) and all(isinstance(v, str) for v in info.values())):
                raise CheckpointError(f"{path}, '__metadata__'", "header metadata is not a string map",
                                      expected="{name: string}", found=repr(info)[:80],
                                      cause="not written by a safetensors library, or a corrupt header")
            continue
        where = f"{path}, tensor '{name}'"
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise CheckpointError(where, "malformed header entry", expected="dtype, shape, data_offsets",
                                  found=repr(info)[:80])
        if not isinstance(info["dtype"], str) or info["dtype"] not in _DTYPE_BYTES:
            raise CheckpointError(where, "unknown dtype", expected=sorted(_DTYPE_BYTES), found=info["dtype"])
        offsets, shape = info["data_offsets"], info["shape"]
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)
                and offsets[0] <= offsets[1]):
            raise CheckpointError(where, "bad data_offsets", expected="[start, end] with 0 <= start <= end",
                                  found=repr(offsets)[:80], cause="not a safetensors file, or a corrupt header")
        if not (isinstance(shape, list) and all(_is_count(s) for s in shape)):
            raise CheckpointError(where, "bad shape", expected="a list of non-negative integers",
                                  found=repr(shape)[:80], cause="not a safetensors file, or a corrupt header")
        start, end = offsets
        numel = 1
        for s in shape:
            numel *= s
        if end > data_len:
            raise CheckpointError(where, "tensor data runs past the end of the file",
                                  expected=f"end offset <= {data_len}", found=end,
                                  cause="the file was truncated (interrupted save or copy)")
        if end - start != numel * _DTYPE_BYTES[info["dtype"]]:
            raise CheckpointError(where, "byte range does not match shape x dtype",
                                  expected=numel * _DTYPE_BYTES[info["dtype"]], found=end - start)
    return header


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def load_safetensors(path: str | Path, keys=None, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Tensors of one safetensors file (only `keys` when given), after header validation."""
    header = read_safetensors_header(path)
    names = [k for k in header if k != "__metadata__"] if keys is None else list(keys)
    out = {}
    try:
        with safe_open(str(path), framework="pt", device=device) as f:
            for k in names:
                if k not in header or k == "__metadata__":
                    names = sorted(n for n in header if n != "__metadata__")
                    raise CheckpointError(f"{path}", f"tensor '{k}' not in file", expected=k,
                                          found=f"{len(names)} other tensors {names[:5]}")
                out[k] = f.get_tensor(k)
    except CheckpointError:
        raise
    except Exception as e:  # safetensors raises its own error types on corrupt data
        raise CheckpointError(str(path), f"cannot read tensors ({type(e).__name__}: {e})",
                              expected="a readable safetensors file", found="corrupt data") from None
    return out


def safetensors_metadata(path: str | Path) -> dict[str, str]:
    """The string metadata of a safetensors file ({} when none)."""
    return dict(read_safetensors_header(path).get("__metadata__") or {})


def load_torch_file(path: str | Path) -> object:
    """`torch.load(weights_only=True)` of a .bin/.pt/.ckpt (gzip-transparent); refuses code-carrying pickles."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(str(path), "file not found", expected="a weights file", found="nothing")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            return torch.load(f, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
        detail = next((ln.strip() for ln in text.splitlines() if "GLOBAL" in ln), None)   # a class/function
        if detail is None:      # not a pickle at all: garbage bytes, a text file...
            raise CheckpointError(str(path), "not a torch.save file", expected="a torch pickle/zip archive",
                                  found=next((ln.strip() for ln in text.splitlines() if "Unsupported" in ln), "unreadable bytes"),
                                  cause="a corrupt or mis-named file") from None
        raise UnsafeFileError(str(path), "refused: the pickle needs more than tensors and plain containers",
                              expected="tensors, dicts, lists, numbers (weights_only=True)", found=detail[:200],
                              cause="a pickled Python object (it could run code); re-save it as safetensors "
                                    "from a trusted environment") from None
    except gzip.BadGzipFile:
        raise CheckpointError(str(path), "not a gzip file", expected="gzip data (.gz)", found="other bytes",
                              cause="a plain .ckpt renamed to .ckpt.gz") from None
    except Exception as e:  # a cut or corrupt pickle fails anywhere in the unpickler (struct.error, TypeError...)
        raise CheckpointError(str(path), f"cannot read ({type(e).__name__}: {str(e)[:120]})",
                              expected="a complete torch.save file", found="truncated or corrupt data") from None


def weight_files(directory: str | Path) -> list[Path]:
    """The weight files of a checkpoint dir: sharded index > model.safetensors > *.safetensors > .bin/.pt."""
    d = Path(directory)
    if d.is_file():
        return [d]
    if not d.is_dir():
        raise MissingFileError(str(d), "checkpoint directory not found", expected="a directory", found="nothing")
    for name in INDEX_NAMES:
        if (d / name).exists():
            return sorted(set(shard_map(d / name).values()))
    for pattern in ("model.safetensors", "*.safetensors", "pytorch_model.bin", "*.bin", "*.pt"):
        found = sorted(d.glob(pattern))
        if found:
            return found
    raise MissingFileError(str(d), "no weights", expected="model.safetensors, a sharded index, or .bin/.pt",
                           found=sorted(p.name for p in d.iterdir())[:10])


def shard_map(index_path: str | Path) -> dict[str, Path]:
    """{tensor name: shard path} from a *.index.json; every shard must exist. Read and checked once per case
    (`once.kept_by_file`: the inputs' check, each target tensor read and the capture share one parse)."""
    return dict(kept_by_file("shard index", index_path, lambda: _shard_map(Path(index_path))))


def _shard_map(index_path: Path) -> dict[str, Path]:
    try:
        index = json.loads(index_path.read_text())
        wm = index["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(str(index_path), "unreadable shard index", expected="JSON with 'weight_map'",
                              found=type(e).__name__) from None
    if not isinstance(wm, dict):
        raise CheckpointError(f"{index_path}, key 'weight_map'", "not an object", expected="{tensor name: shard file}",
                              found=type(wm).__name__, cause="a hand-written or corrupt index")
    bad = next(((k, v) for k, v in wm.items() if not isinstance(v, str) or not v), None)
    if bad is not None:
        raise CheckpointError(f"{index_path}, weight_map['{bad[0]}']", "shard is not a file name",
                              expected="a shard file name (str)", found=repr(bad[1])[:80])
    out = {k: index_path.parent / v for k, v in wm.items()}
    for shard in sorted(set(out.values())):
        if not shard.exists():
            names = [k for k, v in out.items() if v == shard][:3]
            raise MissingFileError(str(index_path), f"shard '{shard.name}' listed in weight_map is missing",
                                   expected=str(shard), found="no such file",
                                   cause=f"an incomplete download; it holds e.g. {names}")
    return out


def load_state_dict(path: str | Path, keys=None) -> dict[str, torch.Tensor]:
    """All tensors (or only `keys`) of a checkpoint file or directory, reading only the shards needed."""
    path = Path(path)
    if path.is_dir():
        for name in INDEX_NAMES:
            if (path / name).exists():
                smap = shard_map(path / name)
                wanted = list(smap) if keys is None else [k for k in keys if k in smap]
                out: dict[str, torch.Tensor] = {}
                for shard in sorted({smap[k] for k in wanted}):
                    out.update(_load_any(shard, [k for k in wanted if smap[k] == shard]))
                return out
        files = weight_files(path)
    else:
        files = [path]
    out = {}
    for f in files:
        out.update(_load_any(f, None if keys is None else
                             [k for k in keys if k in _names(f)]))
    return out


def _names(path: Path) -> set[str]:
    if path.suffix == ".safetensors":
        return {k for k in read_safetensors_header(path) if k != "__metadata__"}
    return set(_state_dict_of(load_torch_file(path), path))


def _load_any(path: Path, keys) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return load_safetensors(path, keys)
    sd = _state_dict_of(load_torch_file(path), path)
    return sd if keys is None else {k: sd[k] for k in keys if k in sd}


def _state_dict_of(obj, path: Path) -> dict[str, torch.Tensor]:
    """A flat {name: tensor} from a loaded .bin/.pt (unwraps a 'state_dict'/'model'/'module' level)."""
    for key in ("state_dict", "model", "module"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(str(path), "not a state dict", expected="{name: tensor}",
                              found=type(obj).__name__ if not isinstance(obj, dict) else
                              f"dict with non-tensor values for {[k for k, v in obj.items() if not isinstance(v, torch.Tensor)][:3]}")
    return obj
