"""A target's safetensors weights read one tensor at a time, without building the model: `TargetWeights(path)`.

The shard index (or the folder's `*.safetensors`) and every file's validated header give each tensor's file, dtype,
shape and byte range; `read(key)` reads those bytes with one positioned read into a buffer of their own (the file is
never mapped, so the memory a read holds is that tensor and nothing else; `host_empty` gives a big buffer an
anonymous mapping that is returned to the system when the tensor is freed). fp8 block-quantized checkpoints
(DeepSeek-V3 / Kimi-K2: `quantization_config = {"quant_method": "fp8", "weight_block_size": [128, 128]}`, an e4m3 `X.weight`
beside a float32 `X.weight_scale_inv` of (ceil(N/bn), ceil(K/bk))) are dequantized per block as the engines do
(DeepSeek's `weight_dequant`, vLLM's block fp8): W[i, j] = float(q[i, j]) * scale_inv[i // bn, j // bk], then
rounded once to the compute dtype. Usage: ``w = TargetWeights(t); w.read("model.norm.weight", torch.bfloat16)``.
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..errors import CheckpointError, ConfigError, MissingFileError
from ..model.config import read_config_json
from ..model.safefiles import INDEX_NAMES, read_safetensors_header, shard_map

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
SCALE_SUFFIX = "_scale_inv"      # X.weight -> X.weight_scale_inv (DeepSeek-V3 / Kimi-K2 naming)


@dataclass(frozen=True)
class Entry:
    """Where one tensor's bytes are: file, dtype, shape and absolute byte range."""
    file: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


MAPPED = 1 << 20     # host buffers of this many bytes or more get a mapping of their own (see host_empty)


def host_empty(shape, dtype: torch.dtype) -> Tensor:
    """An uninitialised CPU tensor; from MAPPED bytes up in an anonymous mapping of its own, which goes back to the
    system the moment the tensor is freed (malloc keeps freed blocks of a few MB in its heap, resident: a streamed
    target's dropped layers would stay in RSS)."""
    shape = tuple(shape)
    n = 1
    for d in shape:
        n *= d
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    if nbytes < MAPPED:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.uint8).view(dtype).reshape(shape)


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / INDEX_NAMES[0]
    if index.exists():
        return sorted(set(shard_map(index).values()))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise MissingFileError(f"target model {folder}", "no safetensors weights to stream",
                               expected="model.safetensors or a model.safetensors.index.json with its shards",
                               found=sorted(p.name for p in folder.iterdir())[:10],
                               cause="a .bin checkpoint (convert it to safetensors) or an incomplete download")
    return files


def block_size(config: dict) -> tuple[int, int] | None:
    """(bn, bk) of an fp8 block-quantized checkpoint's `quantization_config`, None for an unquantized one."""
    q = config.get("quantization_config") or {}
    if not isinstance(q, dict) or not q:
        return None
    where = "target config.json, quantization_config"
    if q.get("quant_method") != "fp8":
        raise ConfigError(where, "a quantization the streamed recapture cannot dequantize",
                          expected="quant_method 'fp8' with weight_block_size (DeepSeek-V3 / Kimi-K2 style)",
                          found=q.get("quant_method"), cause="an AWQ / GPTQ / MXFP4 checkpoint: recapture from the "
                          "bf16 checkpoint it was quantized from")
    bs = q.get("weight_block_size")
    if not (isinstance(bs, list) and len(bs) == 2 and all(isinstance(b, int) and b > 0 for b in bs)):
        raise ConfigError(f"{where}.weight_block_size", "not a block size", expected="[rows, cols], e.g. [128, 128]",
                          found=repr(bs), cause="per-tensor fp8 (no block scales) is not supported")
    return int(bs[0]), int(bs[1])


def dequantize_blocks(q: Tensor, scale_inv: Tensor, block: tuple[int, int], dtype: torch.dtype) -> Tensor:
    """(N, K) fp8 weights times their (ceil(N/bn), ceil(K/bk)) block scales, in fp32, rounded once to `dtype`."""
    N, K = q.shape
    bn, bk = block
    if tuple(scale_inv.shape) != (-(-N // bn), -(-K // bk)):
        raise CheckpointError("fp8 weight_scale_inv", "block scales do not tile the weight",
                              expected=f"({-(-N // bn)}, {-(-K // bk)}) for a ({N}, {K}) weight in {bn}x{bk} blocks",
                              found=tuple(scale_inv.shape), cause="weight_block_size disagrees with the checkpoint")
    out = host_empty((N, K), dtype) if q.device.type == "cpu" else torch.empty((N, K), dtype=dtype, device=q.device)
    cols = scale_inv.float().repeat_interleave(bk, dim=1)[:, :K]             # (N/bn, K/bk) -> (N/bn, K)
    step = bn * max(1, 4096 // bn)                                         # rows per chunk: bounds the fp32 copy
    for r in range(0, N, step):
        rows = q[r:r + step].float()                                       # (r, K) fp32
        s = cols[r // bn:(r + rows.shape[0] - 1) // bn + 1].repeat_interleave(bn, dim=0)[:rows.shape[0]]  # (r, K)
        out[r:r + step] = (rows * s).to(dtype)
    return out


class TargetWeights:
    """Every tensor of a local safetensors target, by checkpoint name, read on demand (see the module docstring)."""

    def __init__(self, path):
        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise MissingFileError(f"target model {path}", "config.json is missing", expected="config.json",
                                   found="no such file" if not self.path.exists()
                                   else sorted(p.name for p in self.path.iterdir())[:10])
        self.config, _ = read_config_json(self.path, "target")       # the case's one parse of it (`once.kept`)
        self.block = block_size(self.config if isinstance(self.config, dict) else {})
        self.files = _safetensors_files(self.path)
        self.entries: dict[str, Entry] = {}
        for f in self.files:
            header = read_safetensors_header(f)
            base = _data_start(f)
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                s, e = info["data_offsets"]
                if info["dtype"] not in DTYPES:
                    raise CheckpointError(f"{f}, tensor '{name}'", "a dtype torch cannot hold",
                                          expected=sorted(DTYPES), found=info["dtype"])
                self.entries[name] = Entry(f, DTYPES[info["dtype"]], tuple(info["shape"]), base + s, base + e)
        self._handles: dict[Path, object] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    @property
    def nbytes(self) -> int:
        """Bytes of every stored tensor (what a full load reads)."""
        return sum(e.nbytes for e in self.entries.values())

    def nbytes_under(self, prefix: str) -> int:
        """Bytes of the stored tensors whose name starts with `prefix` (e.g. one layer's)."""
        return sum(e.nbytes for k, e in self.entries.items() if k.startswith(prefix))

    def raw(self, key: str) -> Tensor:
        """The stored tensor as it is on disk (dtype and shape of its header entry), on CPU."""
        e = self.entries.get(key)
        if e is None:
            raise CheckpointError(f"target model {self.path}", f"tensor '{key}' is not in the checkpoint",
                                  expected=key, found=f"{len(self.entries)} other tensors",
                                  cause="a checkpoint of another architecture, or module names this reader does not "
                                  "map (fused experts, a VLM wrapper)")
        buf = host_empty((e.nbytes,), torch.uint8)
        f = self._handles.get(e.file)
        if f is None:
            f = self._handles[e.file] = open(e.file, "rb", buffering=0)
        f.seek(e.start)
        got = f.readinto(memoryview(buf.numpy())) if e.nbytes else 0
        if got != e.nbytes:
            raise CheckpointError(f"{e.file}, tensor '{key}'", "short read", expected=f"{e.nbytes} bytes",
                                  found=f"{got} bytes", cause="the file was truncated while being read")
        return buf.view(e.dtype).reshape(e.shape)

    def read(self, key: str, dtype: torch.dtype | None = None, device="cpu") -> Tensor:
        """Tensor `key` on `device` in `dtype` (fp8 block-quantized weights dequantized with their scales)."""
        t = self.raw(key)
        scale = key + SCALE_SUFFIX
        if t.dtype in FP8 and scale in self.entries:
            if self.block is None:
                raise ConfigError(f"{self.path}/config.json", "fp8 weights with block scales but no block size",
                                  expected="quantization_config.weight_block_size", found="none",
                                  cause="a config.json that lost its quantization_config")
            out = dtype if dtype is not None and dtype.is_floating_point and dtype not in FP8 else torch.bfloat16
            return dequantize_blocks(t.to(device), self.raw(scale).to(device), self.block, out)
        if t.dtype in FP8 and (dtype is None or dtype not in FP8):
            raise CheckpointError(f"target model {self.path}, tensor '{key}'", "fp8 weight without its block scales",
                                  expected=f"'{scale}' beside it", found="none",
                                  cause="per-tensor fp8 (not supported) or a shard missing from the index")
        return t.to(device=device, dtype=dtype if dtype is not None else t.dtype)

    def close(self):
        """Close the files `raw` opened (they are reopened on the next read)."""
        for f in self._handles.values():
            f.close()
        self._handles.clear()


def _data_start(path: Path) -> int:
    """Byte offset of a safetensors file's data: 8 + the header length stored in its first 8 bytes."""
    with open(path, "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")
