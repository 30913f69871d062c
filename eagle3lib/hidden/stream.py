"""A target run layer by layer, whatever its size: the HF model built on the meta device from its config, each
unit's weights read from the safetensors shards just before it runs and dropped after.

`stream_target(path, device, dtype)` returns the transformers model itself (its classes and forward, no remote
code) with every weight on the meta device and a `WeightStream` on `model.eagle3lib_stream`, hooked on the units
(the embedding, each decoder layer, the final norm, lm_head): a unit's tensors are read on its forward pre-hook
(`hidden.weights`: fp8 blocks dequantized) and dropped on its forward hook, so one unit at a time is resident
(`pinned(unit)` keeps one while many batches run through it: `hidden.layerwise`). Any forward works (`capture`
stops after the deepest boundary, so deeper layers are never read); peak memory is one unit plus the activations.
RoPE frequencies (non-persistent buffers) are computed again on the device, in fp32.
Checkpoint names follow the module names, except: per-expert tensors stacked into transformers' fused
`experts.gate_up_proj` (E, 2I, H) / `experts.down_proj` (E, H, I), a tied lm_head read from the embedding, and a
decoder stored under another prefix (VLM wrappers: `language_model.model.` for the module's `model.language_model.`).
"""
from __future__ import annotations

import contextlib
import ctypes
import sys
from pathlib import Path

import torch
from torch import Tensor, nn

from .decoders import DECODER_PATHS, decoder_stack
from .weights import TargetWeights, host_empty
from ..model.config import read_config_json
from ..model.target import transformers_config
from ..once import kept
from ..errors import CheckpointError, ConfigError


def target_class(path):
    """(model class, config) of a local HF target, without remote code. A config whose model_type only remote code
    knows but whose `architectures` names a transformers class (Kimi-K2: `kimi_k2`, a `DeepseekV3ForCausalLM`
    stack) gets that class, as vLLM / SGLang pick the model file by architecture."""
    p = Path(path)
    return kept(("target class", str(p.resolve())), lambda: _target_class(p), copied=True)   # once per case


def _target_class(p: Path):
    """target_class, read from the folder."""
    import transformers
    from transformers import CONFIG_MAPPING

    raw, _ = read_config_json(p, "target")       # the case's one parse of it (`once.kept`)
    if isinstance(raw, dict) and raw.get("model_type") not in CONFIG_MAPPING:
        cls = next((getattr(transformers, a) for a in raw.get("architectures") or []
                    if isinstance(a, str) and hasattr(getattr(transformers, a, None), "config_class")), None)
        if cls is not None:
            fields = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map")}
            return cls, cls.config_class.from_dict(fields)
    try:
        config = transformers_config(p)                # as AutoConfig builds it, from the case's one parse
        if config is None:
            config = transformers.AutoConfig.from_pretrained(str(p), trust_remote_code=False)
    except ValueError as e:
        raise ConfigError(f"target model {p}/config.json", "transformers cannot build this architecture",
                          expected="an architecture shipped with transformers (no remote code)", found=str(e)[:200],
                          cause="a custom modeling file (trust_remote_code is refused) or a too-old transformers")
    return transformers.AutoModelForCausalLM._model_mapping[type(config)], config


def dtype_kwarg(dtype: torch.dtype) -> dict:
    """{"dtype": dtype} for transformers >= 5, {"torch_dtype": dtype} before (the argument's old name)."""
    import transformers

    return {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": dtype}


def check_device(device) -> torch.device:
    """`device` as a torch.device, or a ConfigError when it names a CUDA device this machine does not have."""
    d = torch.device(device)
    if d.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0 or (d.index is not None and d.index >= n):
            raise ConfigError(f"device '{device}'", "no such CUDA device", expected="a CUDA GPU (torch with CUDA)",
                              found=f"{n} visible GPU(s), torch {torch.__version__}",
                              cause="a CPU-only torch, CUDA_VISIBLE_DEVICES hiding the GPUs, or a GPU index past "
                              "the count; pass device='cpu' to run here")
    return d


def _units(model) -> dict[str, nn.Module]:
    """Module path -> module of everything read at once: embedding, each decoder layer, final norm, lm_head, and the
    direct owner of any other weight (a VLM's vision tower parts, never run by a capture)."""
    base, layers, norm = decoder_stack(model)
    path = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    units = {}
    for m in [base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None, *layers, norm,
              model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None]:
        if m is not None and id(m) in path:
            units[path[id(m)]] = m
    inside = lambda n: any(n == u or n.startswith(u + ".") for u in units)  # noqa: E731
    for name, mod in model.named_modules():
        if not inside(name) and (mod._parameters or any(k not in mod._non_persistent_buffers_set
                                                        for k in mod._buffers)):
            units[name] = mod
    return units


def _compute_rope_buffers(model, device: torch.device):
    """Non-persistent buffers (RoPE `inv_freq`) left on meta: computed again by a fresh module on `device`."""
    for name, mod in model.named_modules():
        todo = [b for b in mod._non_persistent_buffers_set if mod._buffers.get(b) is not None
                and mod._buffers[b].is_meta]
        if not todo:
            continue
        if mod._parameters or not hasattr(mod, "config"):
            raise CheckpointError(f"streamed target, module '{name}'", "a buffer the checkpoint does not store and "
                                  "eagle3lib cannot compute", expected="RoPE-style modules built from the config",
                                  found=todo, cause="an architecture whose non-persistent buffers are not RoPE")
        with torch.device(device):
            fresh = type(mod)(mod.config)
        for b in todo:
            mod._buffers[b] = fresh._buffers[b]


class WeightStream:
    """The units of a meta-device model and the checkpoint they are read from; at most one resident unpinned."""

    def __init__(self, model, weights: TargetWeights, device: torch.device, dtype: torch.dtype):
        self.model, self.weights, self.device, self.dtype = model, weights, device, dtype
        self.units = _units(model)
        self.resident: set[str] = set()
        self.pins: set[str] = set()
        self.loads, self.bytes_loaded, self.peak_bytes = 0, 0, 0
        self._slots = {u: [(sub, attr, kind, f"{u}.{sn}.{attr}".replace("..", ".").strip("."), t)
                           for sn, sub in m.named_modules()
                           for kind, store in (("param", sub._parameters), ("buffer", sub._buffers))
                           for attr, t in store.items()
                           if t is not None and (kind == "param" or attr not in sub._non_persistent_buffers_set)]
                       for u, m in self.units.items()}
        base_path = next(p for p in DECODER_PATHS if _get(model, p) is decoder_stack(model)[0])
        self._rename = (base_path + "." if base_path else "", self._stored_prefix())
        self._names = {id(m): u for u, m in self.units.items()}
        for u, m in self.units.items():
            m.register_forward_pre_hook(lambda mod, args, u=u: self.load(u))
            m.register_forward_hook(lambda mod, args, out, u=u: self.done(u))

    def _stored_prefix(self) -> str:
        """The decoder's prefix in the checkpoint (DECODER_PATHS spelled as stored keys)."""
        for p in ("model.", "model.language_model.", "language_model.model.", "language_model.", ""):
            if f"{p}norm.weight" in self.weights or f"{p}embed_tokens.weight" in self.weights:
                return p
        return "model."

    def _key(self, name: str) -> str:
        mod, stored = self._rename
        key = stored + name[len(mod):] if mod != stored and name.startswith(mod) else name
        if key not in self.weights and name in self.weights:
            key = name
        return key

    def _read(self, name: str, meta: Tensor) -> Tensor:
        """The tensor of module entry `name` from the checkpoint, in the meta entry's dtype, on the device."""
        w, key, dt, dev = self.weights, self._key(name), meta.dtype, self.device
        if key in w:
            t = w.read(key, dt, dev)
        elif key.endswith(("experts.gate_up_proj", "experts.down_proj")):
            base, part = key.rsplit(".", 1)
            E = meta.shape[0]
            out = host_empty(meta.shape, dt) if dev.type == "cpu" else torch.empty(meta.shape, dtype=dt, device=dev)
            for e in range(E):       # per-expert (I, H) tensors -> fused (E, 2I, H) / (E, H, I)
                if part == "down_proj":
                    out[e] = w.read(f"{base}.{e}.down_proj.weight", dt, dev)
                else:
                    I = meta.shape[1] // 2
                    out[e, :I] = w.read(f"{base}.{e}.gate_proj.weight", dt, dev)
                    out[e, I:] = w.read(f"{base}.{e}.up_proj.weight", dt, dev)
            t = out
        elif name.endswith("lm_head.weight") and getattr(self.model.config, "tie_word_embeddings", False):
            t = w.read(self._key(f"{self._rename[0]}embed_tokens.weight"), dt, dev)   # tied: the embedding
        else:
            t = w.read(key, dt, dev)             # raises: not in the checkpoint
        if tuple(t.shape) != tuple(meta.shape):
            raise CheckpointError(f"target model {w.path}, tensor '{key}'", "shape disagrees with config.json",
                                  expected=list(meta.shape), found=list(t.shape),
                                  cause="a config.json of another model size, or a mis-mapped tensor")
        return t

    def load(self, unit: str):
        """Read `unit`'s tensors (dropping every other unpinned resident unit first)."""
        if unit in self.resident:
            return
        for other in sorted(self.resident - self.pins):
            self.drop(other)
        self.resident.add(unit)
        try:
            for sub, attr, kind, name, meta in self._slots[unit]:
                t = self._read(name, meta)
                if kind == "param":
                    sub._parameters[attr] = nn.Parameter(t, requires_grad=False)
                else:
                    sub._buffers[attr] = t
                self.bytes_loaded += t.numel() * t.element_size()
        except BaseException:
            self.drop(unit)
            raise
        finally:
            self.weights.close()
        self.loads += 1
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes())

    def done(self, unit: str):
        """A unit's forward ended: drop it unless pinned."""
        if unit not in self.pins:
            self.drop(unit)

    def drop(self, unit: str):
        """Put `unit`'s entries back on the meta device."""
        for sub, attr, kind, _, meta in self._slots[unit]:
            (sub._parameters if kind == "param" else sub._buffers)[attr] = meta
        self.resident.discard(unit)
        return_freed_memory()

    def release(self):
        """Drop every resident unit and every pin (after a forward stopped part-way)."""
        self.pins.clear()
        for u in sorted(self.resident):
            self.drop(u)

    def resident_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for u in self.resident
                   for sub, attr, kind, _, _ in self._slots[u]
                   for t in [(sub._parameters if kind == "param" else sub._buffers)[attr]] if not t.is_meta)

    def unit_of(self, module: nn.Module) -> str:
        return self._names[id(module)]

    @contextlib.contextmanager
    def pinned(self, module: nn.Module):
        """Keep `module`'s unit resident across many forwards (read once, on the first)."""
        u = self.unit_of(module)
        self.pins.add(u)
        try:
            yield
        finally:
            self.pins.discard(u)
            self.drop(u)


def _get(model, path: str):
    for part in path.split(".") if path else ():
        model = getattr(model, part, None)
    return model


def resolve_dtype(dtype, config) -> torch.dtype:
    """A torch dtype from a name, a torch dtype, or None / "auto" (the config's dtype; float32 when it names none)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
        if isinstance(dtype, torch.dtype):
            return dtype
    got = getattr(torch, str(dtype).replace("torch.", ""), None)
    if not isinstance(got, torch.dtype) or not got.is_floating_point:
        raise ConfigError(f"dtype '{dtype}'", "not a floating-point torch dtype",
                          expected="float32, bfloat16, float16 or auto", found=dtype)
    return got


_LIBC = []      # glibc's malloc_trim, looked up once per process (None off glibc)


def return_freed_memory() -> bool:
    """Hand the host memory freed since the last call back to the system (glibc `malloc_trim(0)`: free pages anywhere
    in the heap). Called after a unit is dropped: a layer's weights have mappings of their own (weights.host_empty),
    but the activations of its forward come from malloc's heap, which keeps them resident once freed (measured on the
    1.5 GB benchmark target: ~0.2 GB of RSS held after each layer). False off glibc (nothing done)."""
    if not _LIBC:
        trim = None
        if sys.platform.startswith("linux"):
            try:
                trim = ctypes.CDLL("libc.so.6").malloc_trim
            except (OSError, AttributeError):
                trim = None
        _LIBC.append(trim)
    if _LIBC[0] is None:
        return False
    _LIBC[0](0)
    return True


def stream_target(path, device="cpu", dtype=None):
    """The HF target on the meta device with its weights streamed per unit (module docstring); in eval mode."""
    dev = check_device(device)
    weights = TargetWeights(path)
    cls, config = target_class(path)
    dt = resolve_dtype(dtype, config)
    if dt in (torch.float8_e4m3fn, torch.float8_e5m2):
        dt = torch.bfloat16
    if getattr(config, "quantization_config", None):
        config.quantization_config = None        # the weights are dequantized as read: build plain Linear layers
    with torch.device("meta"):
        model = cls._from_config(config, **dtype_kwarg(dt))
    model.eval()
    _compute_rope_buffers(model, dev)
    model.eagle3lib_stream = WeightStream(model, weights, dev, dt)
    return model


def streamed(model) -> WeightStream | None:
    """The model's WeightStream, None for a model whose weights are loaded."""
    return getattr(model, "eagle3lib_stream", None)
