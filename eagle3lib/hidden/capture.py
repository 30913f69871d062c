"""Hidden states in: reference captures of a target's residual boundaries, and the slots a draft is fed.

`capture(model, input_ids)` runs an HF causal LM with plain forward (pre-)hooks and keeps `embed`, `layer_in.i`,
`final_prenorm`, `final_postnorm` (layout.py names; or only those asked for, stopping after the deepest), on a
loaded model or a layer-streamed one (`hidden.stream`: deeper layers are then never read).
`decoders.decoder_stack` finds the decoder layers and final norm (Llama, Qwen3, Qwen3-MoE, DeepSeek-V3 / Kimi-K2,
gpt-oss, VLM wrappers); `load_target_model` gives a local HF target without remote code, once per process
(`hidden.targets`).
`Slots` are the k tensors a draft receives; `as_slots` builds them from training samples or any tensors.
Serving dumps (SGLang tensor dumps, eagle3lib dumps) are read in `dumps.py`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import LayoutError
from ..layout import boundary_names, input_index, normalize, parse_layout
from ..progress import bar, track
from .decoders import decoder_stack
from .targets import load_target

_FINALS = ("final_prenorm", "final_postnorm")


@dataclass(frozen=True)
class Capture:
    """Residual-stream states of one target run: boundary name -> (T, H), or (B, T, H) for a batch."""
    states: dict[str, Tensor]   # boundary name (layout.py) -> (T, H) or (B, T, H), on CPU
    input_ids: Tensor           # (T,) or (B, T) int64
    num_layers: int             # L, the target's decoder layers
    dtype: torch.dtype          # dtype the target computed in
    source: str = "transformers"

    @property
    def names(self) -> list[str]:
        """Captured boundary names, in stream order."""
        order = boundary_names(self.num_layers)
        return [n for n in order if n in self.states]

    @property
    def hidden_size(self) -> int:
        """H, the width of every state."""
        return int(next(iter(self.states.values())).shape[-1])

    @property
    def batched(self) -> bool:
        """True for a (B, T, H) capture."""
        return self.input_ids.dim() == 2

    def __getitem__(self, name: str) -> Tensor:
        key = normalize(name, self.num_layers)
        if key not in self.states:
            raise LayoutError(f"capture ({self.source})", f"boundary '{key}' was not captured",
                              expected=self.names, found=name,
                              cause="capture(..., only=...) left it out, or the dump did not hold it")
        return self.states[key]

    def stack(self, layout) -> Tensor:
        """States of `layout` stacked on a slot axis: (T, k, H) or (B, T, k, H)."""
        names = parse_layout(layout, self.num_layers)
        return torch.stack([self[n] for n in names], dim=-2)  # k x (.., T, H) -> (.., T, k, H)

    def concat(self, layout) -> Tensor:
        """States of `layout` concatenated as a draft's fc takes them: (T, k*H) or (B, T, k*H)."""
        return torch.cat([self[n] for n in parse_layout(layout, self.num_layers)], dim=-1)  # -> (.., T, k*H)

    def sequence(self, b: int) -> Capture:
        """The b-th sequence of a batched capture, as an unbatched Capture."""
        if not self.batched:
            return self
        return Capture({k: v[b] for k, v in self.states.items()}, self.input_ids[b], self.num_layers,
                       self.dtype, f"{self.source}[{b}]")


def requested_boundaries(only, num_layers: int) -> list[str]:
    """The boundaries a capture keeps: all of them, or `only` (with both final states when one is asked for)."""
    if only is None:
        return boundary_names(num_layers)
    names = list(parse_layout(only, num_layers))
    if any(n in _FINALS for n in names):   # both come from the same hook: keep the pair
        names += [n for n in _FINALS if n not in names]
    return names


def cast_keeping_rope(model, device=None, dtype=None):
    """`model.to(device, dtype)`, except that RoPE frequency buffers (`*inv_freq`, as transformers' rotary embeddings
    hold them) stay fp32: cast to bf16 they put every angle off by up to 2**-9 of itself (radians past a few hundred
    positions), where the engines compute the angles in fp32 and round only cos/sin."""
    keep = {n: b for n, b in model.named_buffers() if n.endswith("inv_freq") and b.dtype == torch.float32}
    model.to(device=device, dtype=dtype)
    for name, b in keep.items():
        owner, _, attr = name.rpartition(".")
        mod = model.get_submodule(owner) if owner else model
        setattr(mod, attr, b.to(device=getattr(mod, attr).device))
    return model


class _Stop(Exception):
    """Raised from a hook once every requested boundary is captured."""


def capture(model, input_ids, *, only=None, attention_mask: Tensor | None = None, device=None, dtype=None,
            progress: bool = False) -> Capture:
    """Run the target on (T,) or (B, T) ids and keep every (or each `only`) residual boundary."""
    base, layers, norm = decoder_stack(model)
    L = len(layers)
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() not in (1, 2) or ids.numel() == 0:
        raise LayoutError("capture input_ids", "token ids must be (T,) or (B, T) and non-empty",
                          expected="(T,) or (B, T)", found=tuple(ids.shape))
    stream = getattr(model, "eagle3lib_stream", None)    # a layer-streamed target (hidden.stream)
    if stream is not None:
        other_device = device is not None and torch.device(device) != stream.device
        other_dtype = dtype is not None and str(dtype).replace("torch.", "") != str(stream.dtype)[len("torch."):]
        if other_device or other_dtype:
            raise LayoutError("capture of a streamed target", "a streamed target computes where it was opened",
                                  expected=f"{stream.device} / {stream.dtype}", found=f"{device} / {dtype}",
                                  cause="open it on that device and dtype: load_target_model(path, device, dtype)")
        run_device, run_dtype = stream.device, stream.dtype
    else:
        if device is not None or dtype is not None:  # moves / casts the model in place
            cast_keeping_rope(model, device, dtype)
        p = next(model.parameters())
        run_device, run_dtype = p.device, p.dtype
    wanted = requested_boundaries(only, L)
    deepest = max(input_index(n, L) for n in wanted)   # L when a final state is asked for
    got: dict[str, Tensor] = {}
    meter = bar(total=deepest, desc="capture", progress=progress, unit="layer")

    def keep(name, t):
        t = t.detach().to("cpu", copy=True)
        got[name] = t[0] if ids.dim() == 1 else t   # (1, T, H) -> (T, H)

    def pre_hook(i):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            name = "embed" if i == 0 else f"layer_in.{i}"
            if name in wanted:
                keep(name, x)
            meter.update(1 if i else 0)
            if i == deepest:
                raise _Stop
        return hook

    def norm_pre(module, args):
        keep("final_prenorm", args[0])

    def norm_out(module, args, out):
        keep("final_postnorm", out)
        raise _Stop

    # prepend: the stop at the deepest layer fires before a streamed target reads that layer's weights
    handles = [layers[i].register_forward_pre_hook(pre_hook(i), with_kwargs=True, prepend=True)
               for i in range(min(deepest + 1, L))]
    if deepest == L:
        handles += [norm.register_forward_pre_hook(norm_pre, prepend=True), norm.register_forward_hook(norm_out)]
    batch = ids if ids.dim() == 2 else ids[None]                     # (T,) -> (1, T)
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).to(run_device)
    if mask is not None and mask.dim() == 1:
        mask = mask[None]
    try:
        with torch.inference_mode():
            base(input_ids=batch.to(run_device), attention_mask=mask, use_cache=False)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
        if stream is not None:
            stream.release()
        meter.update(meter.total - meter.n)
        meter.close()
    missing = [n for n in wanted if n not in got]
    if missing:
        raise LayoutError(f"capture of {type(model).__name__}", "hooks did not fire for some boundaries",
                          expected=wanted, found=sorted(got), cause="the model skips layers or its forward "
                          "does not call its decoder layers / final norm")
    return Capture({n: got[n] for n in wanted}, ids.clone(), L, run_dtype)


def capture_batch(model, sequences, *, only=None, batch_size: int = 8, pad_id: int = 0, device=None, dtype=None,
                  progress: bool = False) -> list[Capture]:
    """Capture many token sequences of different lengths (right-padded in batches); one Capture per sequence."""
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    out: list[Capture] = []
    for start in track(range(0, len(seqs), batch_size), desc="capture", progress=progress, unit="batch"):
        chunk = seqs[start:start + batch_size]
        T = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), T), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), T), dtype=torch.long)
        for b, s in enumerate(chunk):
            ids[b, :len(s)], mask[b, :len(s)] = s, 1
        cap = capture(model, ids, only=only, attention_mask=mask, device=device, dtype=dtype)
        for b, s in enumerate(chunk):
            n = len(s)  # right padding: the first n positions are the real tokens
            out.append(Capture({k: v[b, :n] for k, v in cap.states.items()}, s.clone(), cap.num_layers, cap.dtype))
    return out


def capture_for_layout(model, input_ids, layout, **kwargs) -> Tensor:
    """The aux tensor a draft trained on `layout` takes: (T, k*H) (or (B, T, k*H)), slots in layout order."""
    L = len(decoder_stack(model)[1])
    names = parse_layout(layout, L)
    return capture(model, input_ids, only=names, **kwargs).concat(names)


def load_target_model(path, device="cpu", dtype=None, *, stream=None):
    """The local HF target (no remote code) on `device` in `dtype`, in eval mode, loaded once per process.

    `hidden.targets.load_target`: a second call with the same folder, device and dtype returns the same model (loaded
    again only when the files or the model changed); `stream` None picks a full `from_pretrained` load or a layer-
    streamed model (`hidden.stream`: fp8 block-quantized weights, or more than half the device's memory); True / False
    force one. A config whose model_type only remote code knows but whose `architectures` names a transformers class
    (Kimi-K2: model_type `kimi_k2`, a `DeepseekV3ForCausalLM` stack) is built with that class, as vLLM / SGLang do."""
    return load_target(path, device=device, dtype=dtype, stream=stream)


@dataclass(frozen=True)
class Slots:
    """The k tensors a draft receives (or was trained on), each (T, H), with the layout their writer declares."""
    tensors: tuple[Tensor, ...]          # k x (T, H), slot order
    layout: tuple[str, ...] | None       # declared boundary of each slot (layout.py names), None = unknown
    input_ids: Tensor | None = None      # (T,) token of each row
    source: str = ""
    notes: tuple[str, ...] = ()

    @property
    def k(self) -> int:
        """Number of slots."""
        return len(self.tensors)

    @property
    def num_tokens(self) -> int:
        """T, the rows of every slot."""
        return int(self.tensors[0].shape[0])


def as_slots(x, layout=None, *, k: int | None = None, hidden_size: int | None = None, input_ids=None,
             source: str | None = None) -> Slots:
    """Slots from a datasets.Sample, a (T, k, H) / (T, k*H) / (1, T, k*H) tensor, or a list of (T, H) tensors."""
    notes: list[str] = []
    if hasattr(x, "aux"):   # datasets.Sample
        layout = layout if layout is not None else x.layout
        input_ids = x.input_ids if input_ids is None else input_ids
        source, x = source or x.source, x.aux
    names = parse_layout(layout) if layout is not None else None
    k = k or (len(names) if names else None)
    where = f"aux slots ({source or 'tensors'})"
    if isinstance(x, (list, tuple)):
        parts = [t.reshape(t.shape[-2], t.shape[-1]) for t in x]          # (1, T, H) -> (T, H)
    else:
        t = torch.as_tensor(x)
        if t.dim() == 4 and t.shape[0] == 1:
            t = t[0]                                                       # (1, T, k, H) -> (T, k, H)
        if t.dim() == 3 and t.shape[0] == 1 and (k is None or t.shape[1] != k):
            t = t[0]                                                       # (1, T, k*H) -> (T, k*H)
        if t.dim() == 2:
            W = t.shape[1]
            k = k or (W // hidden_size if hidden_size else None)
            if not k or W % k:
                raise LayoutError(where, "cannot split the concatenated aux width into slots",
                                  expected=f"a width divisible by the slot count ({k or 'unknown'})", found=W,
                                  cause="declare the layout or hidden_size; or the dump holds a different k")
            t = t.reshape(t.shape[0], k, W // k)                           # (T, k*H) -> (T, k, H)
        if t.dim() != 3:
            raise LayoutError(where, "unrecognised aux shape", expected="(T, k, H), (T, k*H) or (1, T, k*H)",
                              found=tuple(t.shape))
        parts = list(t.unbind(1))                                          # (T, k, H) -> k x (T, H)
    if names is not None and len(names) != len(parts):
        notes.append(f"declared layout has {len(names)} slots but the tensors hold {len(parts)}: declaration ignored")
        names = None
    lens = {p.shape[0] for p in parts}
    if len(lens) > 1:
        n = min(lens)
        notes.append(f"slots have different token counts {sorted(lens)}: cut to the first {n}")
        parts = [p[:n] for p in parts]
    ids = None if input_ids is None else torch.as_tensor(input_ids).reshape(-1).long()
    return Slots(tuple(parts), names, ids, source or "tensors", tuple(notes))
