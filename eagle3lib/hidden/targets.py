"""The target model, loaded once per process: `load_target(path, device, dtype, stream=None)`.

Every check that recaptures (identify, drift, the layout search, the proof of fix, a dump's identification, template
and RoPE measurements) gets the target through `hidden.capture.load_target_model`, which is this: one cache keyed by
the folder (with its files' sizes and mtimes), the device, the dtype and the way it is loaded, holding the last
MAX_CACHED models. A hit is the very same model object, unless it changed since it was handed out (cast to another
dtype or device, a parameter replaced or written in place): then it is loaded again.
`stream` (or `$EAGLE3LIB_TARGET_LOAD` = full / stream / auto): False loads the whole model (`from_pretrained`), True
streams it layer by layer (`hidden.stream`), None ("auto") streams when the weights are fp8 block-quantized (which
transformers cannot run on CPU) or larger than half the memory the device has (RAM for cpu, the GPU's for cuda).
`loads()` counts the loads per folder (what "a diagnose run loads the target at most once" is tested on).
"""
from __future__ import annotations

import os
from collections import Counter, OrderedDict
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError, Eagle3Error, MissingFileError
from .stream import check_device, dtype_kwarg, resolve_dtype, stream_target, target_class
from .weights import TargetWeights, block_size

MAX_CACHED = 2
ENV_VAR = "EAGLE3LIB_TARGET_LOAD"
_cache: OrderedDict = OrderedDict()      # key -> (model, fingerprint)
_loads: Counter = Counter()


def loads() -> Counter:
    """Loads (full or streamed builds) per resolved target folder since the process started or `clear_cache`."""
    return Counter(_loads)


def clear_cache():
    """Forget every cached target (the next request loads again) and the load counts."""
    _cache.clear()
    _loads.clear()


def _files_signature(folder: Path) -> tuple:
    """(name, size, mtime_ns) of config.json and the weight files: a rewritten target is a new key."""
    files = [folder / "config.json"] + sorted(p for p in folder.iterdir()
                                             if p.suffix in (".safetensors", ".bin", ".json") and p.is_file())
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in dict.fromkeys(files))


def _fingerprint(model) -> int:
    """Changes when a parameter is cast, moved, replaced or written in place."""
    return hash(tuple((id(p), p.dtype, p.device, p._version) for p in model.parameters()))


def device_memory(device: torch.device) -> int:
    """Bytes the device can hold: the GPU's total memory, or the host's available RAM (MemAvailable)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def weights_nbytes(folder: Path) -> int:
    """Bytes of the weight files on disk."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())


def choose_stream(folder: Path, config: dict, device: torch.device, stream=None) -> bool:
    """Whether to stream (module docstring): the argument, else $EAGLE3LIB_TARGET_LOAD, else by fp8 and size."""
    if stream is not None:
        return bool(stream)
    how = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if how not in ("auto", "full", "stream"):
        raise ConfigError(f"${ENV_VAR}", "unknown target load mode", expected="full, stream or auto", found=how)
    if how != "auto":
        return how == "stream"
    if block_size(config) is not None:
        return True
    return weights_nbytes(folder) > device_memory(device) // 2


def stored_dtype(folder: Path):
    """The dtype of the first floating-point tensor stored (None when the weights are not safetensors)."""
    try:
        entries = TargetWeights(folder).entries.values()
    except Eagle3Error:
        return None
    return next((e.dtype for e in entries if e.dtype.is_floating_point and e.dtype.itemsize > 1), None)


def load_full(folder: Path, cls, config, device: torch.device, dtype: torch.dtype):
    """`cls.from_pretrained(folder)` without remote code, on `device` in `dtype`, in eval mode. It is handed the
    config the case read and a generation config made from it (the target only captures, it never generates), so
    transformers opens neither config.json nor generation_config.json again."""
    import transformers

    transformers.utils.logging.disable_progress_bar()   # a per-load "Loading weights" bar is noise in reports
    unread = {"generation_config": transformers.GenerationConfig.from_model_config(config)}
    try:
        model = cls.from_pretrained(str(folder), config=config, trust_remote_code=False, **dtype_kwarg(dtype),
                                    **unread)
    except ValueError as e:
        raise ConfigError(f"target model {folder}/config.json", "transformers cannot build this architecture",
                          expected="an architecture shipped with transformers (no remote code)", found=str(e)[:200],
                          cause="a custom modeling file (trust_remote_code is refused) or a too-old transformers")
    except (OSError, RuntimeError) as e:
        raise CheckpointError(f"target model {folder}", "weights could not be loaded", found=str(e)[:200],
                              cause="missing or truncated weight shards, or shapes that disagree with config.json")
    return model.to(device).eval()


def load_target(path, device="cpu", dtype=None, *, stream=None):
    """The target at `path` on `device` in `dtype` (None / "auto": the config's), loaded or streamed (module
    docstring), the same object for every caller in this process while it is unchanged."""
    folder = Path(path)
    if not folder.exists():
        raise MissingFileError(f"target model {path}", "no such directory",
                               expected="a local HF model folder with config.json and weights", found="nothing")
    if folder.is_dir() and not (folder / "config.json").exists():
        raise MissingFileError(f"target model {path}", "config.json is missing", expected="config.json",
                               found=sorted(x.name for x in folder.iterdir())[:10])
    dev = check_device(device)
    cls, config = target_class(folder)
    if dtype in (None, "auto") and not (getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)):
        dtype = stored_dtype(folder)     # as from_pretrained's "auto": the weights' own dtype
    dt = resolve_dtype(dtype, config)
    raw = config.to_dict()
    streaming = choose_stream(folder, raw, dev, stream)
    key = (str(folder.resolve()), str(dev), str(dt), streaming, _files_signature(folder))
    hit = _cache.get(key)
    if hit is not None and _fingerprint(hit[0]) == hit[1]:
        _cache.move_to_end(key)
        return hit[0]
    _cache.pop(key, None)
    model = stream_target(folder, dev, dt) if streaming else load_full(folder, cls, config, dev, dt)
    _loads[key[0]] += 1
    _cache[key] = (model, _fingerprint(model))
    while len(_cache) > MAX_CACHED:
        _cache.popitem(last=False)
    return model
